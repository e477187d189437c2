"""Every group source's per-rank operations (sources.py) agree with its array.

The arrays are Megatron's (the parity tests run ``tests/support/parity_cases.py``'s CASES through
the real megatron-core); here, on those layouts (``Ortho``, ``Chunks``, ``Hierarchical``,
``Pick``, ``Concat`` kinds), each source, fresh and then cached, must give the same groups
from ``members``, ``members_many``, ``locate`` and ``group_of`` as from its array (a
rank's first place, row by row; None outside every group), honour ``partitions`` and
``sorted_members``, and ``Fixed`` (a layout read back from JSON) built from the array
must answer the same, ranks outside its world and repeated ranks included.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.parity_cases import CASES, split_ag

from simharness import ParallelismConfig, build_layout
from simharness.sources import Fixed, GroupSource


def _first_places(arr: np.ndarray) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for g, row in enumerate(arr.tolist()):
        for p, r in enumerate(row):
            out.setdefault(r, (g, p))
    return out


def _agrees(src: GroupSource, arr: np.ndarray, probe: range) -> None:
    places = _first_places(arr)
    for g in range(len(arr)):
        assert src.members(g).tolist() == arr[g].tolist(), g
    picks = np.array([len(arr) - 1, 0, len(arr) // 2][: len(arr)], dtype=np.int64)
    assert src.members_many(picks).tolist() == arr[picks].tolist()
    none = src.members_many(np.arange(0))
    assert none.shape == (0, src.group_size) and none.dtype == np.int64
    for r in probe:
        assert src.locate(r) == places.get(r), r
        got = src.group_of(r)
        assert (got is None) == (r not in places), r
        if got is not None:
            assert got.tolist() == arr[places[r][0]].tolist(), r


def _kinds():
    for p in CASES:
        world, kwargs = p.values
        ag, rest = split_ag(kwargs)
        cfg = ParallelismConfig.from_megatron(world_size=world, mcore="0.16",
                                              create_all_gather_group=ag, **rest)
        yield p.id, cfg


KINDS_SEEN: set[str] = set()


@pytest.mark.parametrize("cfg", [c for _, c in _kinds()], ids=[i for i, _ in _kinds()])
def test_sources_agree_with_their_arrays(cfg):
    world = cfg.world_size_resolved
    probe = range(cfg.rank_offset - 1, cfg.rank_offset + world + 1)
    for kind in build_layout(cfg, "0.16").kinds:
        fresh = build_layout(cfg, "0.16").source(kind)  # nothing built or cached yet
        arr = fresh.fresh()
        parent = getattr(fresh, "parent", None)
        if parent is not None:  # fresh() caches no parent's array, array() caches them
            assert "_array" not in parent.__dict__, kind
            built = build_layout(cfg, "0.16").source(kind)
            built.array()
            assert "_array" in built.parent.__dict__, kind
        assert "_array" not in fresh.__dict__ or isinstance(fresh, Fixed), kind
        assert arr.shape == (fresh.n_groups, fresh.group_size), kind
        _agrees(fresh, arr, probe)
        assert fresh.array().tolist() == arr.tolist() and fresh.fresh() is fresh.array()
        assert not fresh.array().flags.writeable, kind
        _agrees(fresh, arr, probe)  # now from the cached array
        if fresh.partitions:
            assert sorted(arr.ravel().tolist()) == list(range(cfg.rank_offset,
                                                              cfg.rank_offset + world)), kind
        if fresh.sorted_members:
            assert (np.diff(arr, axis=1) > 0).all(), kind
        fixed = Fixed(arr, range(cfg.rank_offset, cfg.rank_offset + world))
        _agrees(fixed, arr, probe)
        assert fixed.sorted_members == bool((np.diff(arr, axis=1) > 0).all())
        KINDS_SEEN.add(type(fresh).__name__)


def test_the_cases_build_every_kind_of_source():
    for _, cfg in _kinds():
        lay = build_layout(cfg, "0.16")
        KINDS_SEEN.update(type(lay.source(k)).__name__ for k in lay.kinds)
    assert {"Ortho", "Chunks", "Hierarchical", "Pick", "Concat"} <= KINDS_SEEN, KINDS_SEEN


def test_fixed_corrupted_plans():
    """Fixed: repeated ranks (the first place wins), ranks outside the world (looked up
    apart), one-dimensional data (one rank per group), unsorted rows, no groups."""
    arr = np.array([[4, 1], [1, 9], [2, 3], [5, 9]])
    f = Fixed(arr, range(1, 5))
    assert [f.locate(r) for r in (0, 1, 2, 3, 4, 5, 9, 10)] == [
        None, (0, 1), (2, 0), (2, 1), (0, 0), (3, 0), (1, 1), None]
    assert f.group_of(9).tolist() == [1, 9] and f.group_of(0) is None
    assert (f.n_groups, f.group_size, f.sorted_members) == (4, 2, False)
    assert f.data.dtype == np.int64 and not f.data.flags.writeable
    one = Fixed(np.array([5, 6, 7]), range(5, 8))
    assert one.data.shape == (3, 1) and one.locate(6) == (1, 0) and one.sorted_members
    empty = Fixed(np.zeros((0, 0)), range(0, 4))
    assert (empty.n_groups, empty.group_size) == (0, 0) and empty.locate(2) is None
    assert Fixed(np.array([[0, 1], [2, 3]]), range(0, 4)).sorted_members
    assert not Fixed(np.array([[0, 0], [2, 3]]), range(0, 4)).sorted_members  # a repeat
    deep = Fixed(np.arange(8).reshape(2, 2, 2), range(0, 8))  # rows flattened
    assert deep.data.shape == (2, 4) and deep.locate(6) == (1, 2)
