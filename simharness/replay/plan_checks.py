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

from ..checks import check
from ..config_diff import config_differences
from ..errors import LayoutError
from ..layout import Layout, build_layout


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


def compare_with_config(layout: Layout) -> dict[str, Any]:
    """Every group of ``layout`` against ``build_layout(layout.config, layout.mcore)``."""
    try:
        ref = build_layout(layout.config, layout.mcore)
    except LayoutError as exc:  # pragma: no cover - from_dict already validated the config
        return {"checked": False, "reason": str(exc), "mismatches": []}
    diffs = config_differences(layout, ref)
    return {"checked": True, "mcore": layout.mcore, "mismatches": diffs}
