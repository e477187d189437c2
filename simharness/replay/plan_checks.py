"""Checks on the plan itself, before and after a replay (pure numpy, no torch).

* :func:`check_replayable` refuses plans torch cannot build (ranks out of the
  world, a rank twice in one group);
* :func:`partition_mismatches` names ranks that a kind covers zero or several
  times (a hand-edited plan);
* :func:`compare_with_config` compares every group of the plan with what the
  plan's own configuration builds. A corrupted plan whose every rank agrees
  with the others builds fine in torch; only this comparison catches it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LayoutError
from ..checks import check
from ..layout import Layout, build_layout

MAX_DIFFS_PER_KIND = 16


def check_replayable(layout: Layout, world_size: int | None = None) -> None:
    """Raise :class:`LayoutError` when torch could not create the plan's groups."""
    world = layout.world_size if world_size is None else world_size
    if layout.rank_offset:
        raise LayoutError(
            f"the plan has rank_offset={layout.rank_offset}: its groups use ranks "
            f"{layout.rank_offset}..{layout.rank_offset + layout.world_size - 1}, but a replay "
            f"runs ranks 0..{world - 1}; replay the layout with rank_offset 0.",
            rank_offset=layout.rank_offset)
    for kind in layout.kinds:
        arr = layout.groups(kind)
        if arr.size == 0:
            continue
        bad = arr[(arr < 0) | (arr >= world)]
        if bad.size:
            raise LayoutError(
                f"plan kind {kind!r} names rank(s) {sorted(set(bad.tolist()))[:8]} outside the "
                f"world 0..{world - 1}; fix the plan or re-export it.", kind=kind)
        srt = np.sort(arr, axis=1)
        dup_rows = np.nonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))[0]
        if dup_rows.size:
            g = int(dup_rows[0])
            raise LayoutError(
                f"plan kind {kind!r} group {g} {arr[g].tolist()} lists a rank twice; torch "
                f"cannot create such a group. Fix the plan or re-export it.", kind=kind)


def partition_mismatches(layout: Layout) -> list[dict[str, Any]]:
    """Ranks covered zero or several times by a kind that must partition the world
    (the checker's ``partition`` findings, as report entries)."""
    return [{"check": "partition", "kind": f.groups[0], "desc": layout.desc(f.groups[0]),
             "ranks": sorted(f.ranks), "message": f.message + "."}
            for f in check(layout, only=("partition",))]


def _row_diff(kind: str, desc: str, g: int, plan_row: list[int], cfg_row: list[int],
              ref: Layout) -> dict[str, Any]:
    extra = sorted(set(plan_row) - set(cfg_row))
    missing = sorted(set(cfg_row) - set(plan_row))
    notes = []
    for r in extra:
        m = ref.membership(kind, r)
        where = f"group {m.group}" if m is not None else "no group"
        notes.append(f"rank {r} belongs in {where}")
    for r in missing:
        notes.append(f"rank {r} is missing")
    if not extra and not missing:
        notes.append("same ranks in a different order")
    return {"check": "plan_vs_config", "kind": kind, "desc": desc, "group": g,
            "plan": plan_row, "config": cfg_row, "extra": extra, "missing": missing,
            "ranks": sorted(set(extra) | set(missing)) or plan_row,
            "message": f"{kind} group {g} ({desc}): plan {plan_row}, the config builds "
                       f"{cfg_row}: " + ", ".join(notes) + "."}


def compare_with_config(layout: Layout) -> dict[str, Any]:
    """Every group of ``layout`` against ``build_layout(layout.config, layout.mcore)``."""
    try:
        ref = build_layout(layout.config, layout.mcore)
    except LayoutError as exc:  # pragma: no cover - from_dict already validated the config
        return {"checked": False, "reason": str(exc), "mismatches": []}
    diffs: list[dict[str, Any]] = []
    for kind in sorted(set(ref.kinds) - set(layout.kinds)):
        diffs.append({"check": "plan_vs_config", "kind": kind, "desc": ref.desc(kind),
                      "ranks": [], "message": f"the config builds {kind} ({ref.desc(kind)}) but "
                                              f"the plan has no such groups."})
    for kind in sorted(set(layout.kinds) - set(ref.kinds)):
        diffs.append({"check": "plan_vs_config", "kind": kind, "desc": layout.desc(kind),
                      "ranks": [], "message": f"the plan has {kind} ({layout.desc(kind)}) but "
                                              f"the config builds no such groups."})
    for kind in layout.kinds:
        if kind not in ref.kinds:
            continue
        desc = layout.desc(kind)
        if desc != ref.desc(kind) or layout.backend(kind) != ref.backend(kind):
            diffs.append({"check": "plan_vs_config", "kind": kind, "desc": desc, "ranks": [],
                          "message": f"{kind}: plan says {desc}/{layout.backend(kind)}, the "
                                     f"config builds {ref.desc(kind)}/{ref.backend(kind)}."})
        a, b = layout.groups(kind), ref.groups(kind)
        if a.shape != b.shape:
            diffs.append({"check": "plan_vs_config", "kind": kind, "desc": desc, "ranks": [],
                          "message": f"{kind} ({desc}): plan has {a.shape[0]} groups of "
                                     f"{a.shape[1] if a.ndim == 2 else '?'}, the config builds "
                                     f"{b.shape[0]} groups of {b.shape[1]}."})
            continue
        rows = np.nonzero((a != b).any(axis=1))[0] if a.size else np.array([], dtype=int)
        for g in rows[:MAX_DIFFS_PER_KIND].tolist():
            diffs.append(_row_diff(kind, desc, g, a[g].tolist(), b[g].tolist(), ref))
        if rows.size > MAX_DIFFS_PER_KIND:
            diffs.append({"check": "plan_vs_config", "kind": kind, "desc": desc, "ranks": [],
                          "message": f"{kind}: {rows.size - MAX_DIFFS_PER_KIND} more groups "
                                     f"differ."})
    plan_loops = layout.to_dict(groups=False)["creation_order"]
    ref_loops = ref.to_dict(groups=False)["creation_order"]
    if plan_loops != ref_loops:
        diffs.append({"check": "plan_vs_config", "kind": None, "desc": None, "ranks": [],
                      "message": f"the plan's creation order ({plan_loops['length']} new_group "
                                 f"calls) differs from the config's ({ref_loops['length']})."})
    return {"checked": True, "mcore": layout.mcore, "mismatches": diffs}
