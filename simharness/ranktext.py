"""Rank lists as text for messages (pure: numpy only; the CLI, replay and capture share it).

>>> format_ranks([0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52])
'[0, 4, 8, ..., 52] (14 ranks, stride 4)'
>>> format_rank_set([0, 1, 2, 3, 8, 10, 11])
'0-3, 8, 10-11'
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def format_ranks(ranks: Sequence[int] | np.ndarray, limit: int = 12) -> str:
    """A rank list as Python writes it, shortened when long.

    Arithmetic progressions longer than ``limit`` become ``[a, b, c, ..., z]
    (n ranks, stride s)``; other long lists show the first and last few.
    """
    arr = np.asarray(ranks).ravel()
    n = arr.size
    if n <= limit:
        return "[" + ", ".join(str(int(x)) for x in arr) + "]"
    diffs = np.diff(arr)
    if diffs.size and np.all(diffs == diffs[0]):
        return (f"[{int(arr[0])}, {int(arr[1])}, {int(arr[2])}, ..., {int(arr[-1])}] "
                f"({n} ranks, stride {int(diffs[0])})")
    first = ", ".join(str(int(x)) for x in arr[:limit - 3])
    last = ", ".join(str(int(x)) for x in arr[-2:])
    return f"[{first}, ..., {last}] ({n} ranks)"


def format_rank_set(ranks: Sequence[int] | np.ndarray, limit: int = 12) -> str:
    """Sorted ranks with runs collapsed: ``0-3, 8, 10-15``."""
    arr = np.unique(np.asarray(ranks, dtype=np.int64).ravel())
    if arr.size == 0:
        return "none"
    breaks = np.flatnonzero(np.diff(arr) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [arr.size])) - 1
    parts = []
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        a, b = int(arr[s]), int(arr[e])
        parts.append(str(a) if a == b else f"{a}-{b}")
    if len(parts) > limit:
        parts = parts[:limit - 2] + ["..."] + parts[-1:]
    return ", ".join(parts)
