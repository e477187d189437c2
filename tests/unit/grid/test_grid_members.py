"""``Grid``'s per-rank arithmetic against its own groups.

For several orders, sizes and rank offsets, ``members``, ``members_many``, ``locate`` and
``coords`` agree with ``groups(token)`` (each rank's coordinates rebuild it as
``offset + sum(coord * stride)``, strides leftmost fastest); ``same_groups`` tells equal
group lists from different ones; errors carry their values. That ``groups(token)`` is
megatron-core's ``RankGenerator`` is tests/parity/test_grid_members_parity.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from simharness.grid import Grid

GRIDS = [  # order, offset, sizes
    ("tp-cp-ep-dp-pp", 0, dict(tp=2, cp=2, ep=1, dp=3, pp=2)),
    ("tp-pp-dp", 5, dict(tp=2, pp=3, dp=2, ep=1, cp=1)),
    ("pp-dp-ep-tp-cp", 3, dict(tp=3, pp=2, dp=2, ep=2, cp=1)),
]
TOKENS = ["tp", "pp", "dp", "cp", "ep", "dp-cp", "tp-pp", "tp-dp-cp", "pp-tp", "tp-ep-pp"]


@pytest.mark.parametrize("order,offset,sizes", GRIDS, ids=[g[0] for g in GRIDS])
def test_grid_per_rank_arithmetic_matches_its_groups(order, offset, sizes):
    g = Grid.from_sizes(order, offset, **sizes)
    ranks = range(offset, offset + g.world_size)
    for r in ranks:
        c = g.coords(r)
        assert list(c) == list(g.names)
        assert offset + sum(c[n] * st for n, st in zip(g.names, g.strides, strict=True)) == r
        assert all(0 <= c[n] < s for n, s in zip(g.names, g.sizes, strict=True)), c
    for token in TOKENS:
        groups = g.groups(token)
        for i, row in enumerate(groups.tolist()):
            assert g.members(token, i).tolist() == row, (token, i)
            for pos, r in enumerate(row):
                assert g.locate(token, r) == (i, pos), (token, r)
        picks = [len(groups) - 1, 0, len(groups) // 2]
        assert g.members_many(token, picks).tolist() == groups[picks].tolist(), token
        assert g.members_many(token, range(len(groups))).tolist() == groups.tolist(), token
    for bad in (offset - 1, offset + g.world_size):
        with pytest.raises(Exception, match=f"rank {bad} is outside this layout"):
            g.coords(bad)


def test_grid_same_groups():
    a = Grid.from_sizes("tp-cp-ep-dp-pp", tp=2, cp=1, ep=1, dp=2, pp=2)
    b = Grid.from_sizes("tp-cp-ep-pp-dp", tp=2, cp=1, ep=1, dp=2, pp=2)
    c = Grid.from_sizes("tp-cp-ep-dp-pp", tp=2, cp=1, ep=1, dp=4, pp=1)
    assert a.same_groups(a, "dp") and a.same_groups(b, "tp")
    assert not a.same_groups(b, "dp")  # same shape, other ranks
    assert not a.same_groups(c, "dp")  # other shape
    for t1, t2 in itertools.permutations(["tp", "dp", "pp"], 2):
        assert a.same_groups(a, f"{t1}-{t2}") and np.array_equal(a.groups(f"{t1}-{t2}"),
                                                                 a.groups(f"{t2}-{t1}"))


def test_grid_errors_name_the_values():
    """from_sizes / _mask / coords: the LayoutError's Megatron exception and values."""
    from simharness import LayoutError

    sizes = dict(tp=2, cp=1, ep=1, dp=2, pp=1)
    cases = [(lambda: Grid.from_sizes("cp-ep-dp-pp", **sizes), "RuntimeError",
              {"order": "cp-ep-dp-pp"}, "order 'cp-ep-dp-pp' has no 'tp'"),
             (lambda: Grid.from_sizes("tp-cp-ep-dp-pp-xx", **sizes), "KeyError",
              {"order": "tp-cp-ep-dp-pp-xx"}, "unknown token 'xx'"),
             (lambda: Grid.from_sizes("tp-cp-ep-dp-pp", **sizes).groups("tp-zz"), "ValueError",
              {}, "token 'zz' is not a dimension of order 'tp-cp-ep-dp-pp'"),
             (lambda: Grid.from_sizes("tp-cp-ep-dp-pp", 2, **sizes).coords(7), None,
              {"rank": 7}, "rank 7 is outside this layout (ranks 2..5)")]
    for call, error, values, text in cases:
        with pytest.raises(LayoutError) as exc:
            call()
        assert (exc.value.megatron_error, exc.value.values) == (error, values), text
        assert text in str(exc.value)


def test_first_occurrences_lowercases_and_keeps_first_places():
    from simharness.grid import first_occurrences

    assert first_occurrences("pp-cp-dp-TP-tp-ep-PP") == "pp-cp-dp-tp-ep"
