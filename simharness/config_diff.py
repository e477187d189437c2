"""A layout compared with the one its own configuration builds (a plan edited by hand, or
written by another simharness, is caught here; torch builds such a plan without complaint).

:func:`config_differences` feeds the ``matches-config`` check
(:func:`simharness.checks.check_matches_config`) and replay's refusal of a plan that is
not its configuration's (:mod:`simharness.replay.plan_checks`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .layout import Layout

MAX_DIFFS_PER_KIND = 16


def _row_diff(kind: str, desc: str, g: int, plan_row: list[int], cfg_row: list[int],
              ref: Layout) -> dict[str, Any]:
    extra = sorted(set(plan_row) - set(cfg_row))
    missing = sorted(set(cfg_row) - set(plan_row))
    notes = []
    for r in extra:
        m = ref.membership(kind, r) if r in ref.ranks else None
        notes.append(f"rank {r} belongs in {f'group {m.group}' if m is not None else 'no group'}")
    notes.extend(f"rank {r} is missing" for r in missing)
    if not extra and not missing:
        notes.append("same ranks in a different order")
    return {"check": "plan_vs_config", "kind": kind, "desc": desc, "group": g,
            "plan": plan_row, "config": cfg_row, "extra": extra, "missing": missing,
            "ranks": sorted(set(extra) | set(missing)) or plan_row,
            "message": f"{kind} group {g} ({desc}): plan {plan_row}, the config builds "
                       f"{cfg_row}: " + ", ".join(notes) + "."}


def config_differences(layout: Layout, ref: Layout | None = None, *,
                       lean: bool = False) -> list[dict[str, Any]]:
    """Every way ``layout`` differs from ``build_layout(layout.config, layout.mcore)``.

    Each difference is a dict with ``kind``, ``desc``, ``ranks`` and ``message``;
    differing groups also carry ``group``, ``plan``, ``config``, ``extra`` and
    ``missing`` (at most :data:`MAX_DIFFS_PER_KIND` per kind, then one summary).
    A corrupted plan whose every rank agrees with the others builds fine in
    torch; only this comparison catches it. ``lean``: build each kind's arrays for the
    comparison and drop them (huge worlds), same result.
    """
    from .layout import build_layout
    from .profiles import build_loops

    if ref is None:  # a built layout's config is validated for its profile already
        ref = (Layout(layout.config, layout.mcore, build_loops(layout.config, layout.mcore))
               if layout.built else build_layout(layout.config, layout.mcore))
    diffs: list[dict[str, Any]] = []

    def note(kind, desc, message):
        diffs.append({"check": "plan_vs_config", "kind": kind, "desc": desc, "ranks": [],
                      "message": message})

    for kind in sorted(set(ref.kinds) - set(layout.kinds)):
        note(kind, ref.desc(kind), f"the config builds {kind} ({ref.desc(kind)}) but the plan "
                                   f"has no such groups.")
    for kind in sorted(set(layout.kinds) - set(ref.kinds)):
        note(kind, layout.desc(kind), f"the plan has {kind} ({layout.desc(kind)}) but the "
                                      f"config builds no such groups.")
    for kind in layout.kinds:
        if kind not in ref.kinds:
            continue
        desc = layout.desc(kind)
        if desc != ref.desc(kind) or layout.backend(kind) != ref.backend(kind):
            note(kind, desc, f"{kind}: plan says {desc}/{layout.backend(kind)}, the config "
                             f"builds {ref.desc(kind)}/{ref.backend(kind)}.")
        if lean:
            a, b = layout.source(kind).fresh(), ref.source(kind).fresh()
        else:
            a, b = layout.groups(kind), ref.groups(kind)
        if a.shape != b.shape:
            note(kind, desc, f"{kind} ({desc}): plan has {a.shape[0]} groups of "
                             f"{a.shape[1] if a.ndim == 2 else '?'}, the config builds "
                             f"{b.shape[0]} groups of {b.shape[1]}.")
            continue
        rows = np.flatnonzero((a != b).any(axis=1)) if a.size else np.array([], dtype=int)
        for g in rows[:MAX_DIFFS_PER_KIND].tolist():
            diffs.append(_row_diff(kind, desc, g, a[g].tolist(), b[g].tolist(), ref))
        if rows.size > MAX_DIFFS_PER_KIND:
            note(kind, desc, f"{kind}: {rows.size - MAX_DIFFS_PER_KIND} more groups differ.")
    plan_loops = layout.to_dict(groups=False)["creation_order"]
    ref_loops = ref.to_dict(groups=False)["creation_order"]
    if plan_loops != ref_loops:
        note(None, None, f"the plan's creation order ({plan_loops['length']} new_group calls) "
                         f"differs from the config's ({ref_loops['length']}).")
    return diffs
