"""``Grid``'s per-rank arithmetic against its groups and Megatron's ``RankGenerator``
(issue 18: the survivors of ``make mutate`` on grid.py).

For several orders, sizes and rank offsets: ``groups(token)`` is megatron-core 0.17.1's
``RankGenerator(...).get_ranks(token)`` (the first release with ``rank_offset``), and
``members``, ``members_many``, ``locate`` and ``coords`` agree with those groups (each
rank's coordinates rebuild it as ``offset + sum(coord * stride)``, strides leftmost
fastest); ``same_groups`` tells equal group lists from different ones; ``inject_gtp`` and
the 0.19 dense/expert generators are megatron-core 0.19.2's; errors carry their values.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import megatron_harness as H  # tests/ is on sys.path under pytest
import numpy as np
import pytest

from simharness.grid import Grid

ROOT = Path(__file__).resolve().parents[1]
GRIDS = [  # order, offset, sizes
    ("tp-cp-ep-dp-pp", 0, dict(tp=2, cp=2, ep=1, dp=3, pp=2)),
    ("tp-pp-dp", 5, dict(tp=2, pp=3, dp=2, ep=1, cp=1)),
    ("pp-dp-ep-tp-cp", 3, dict(tp=3, pp=2, dp=2, ep=2, cp=1)),
]
TOKENS = ["tp", "pp", "dp", "cp", "ep", "dp-cp", "tp-pp", "tp-dp-cp", "pp-tp", "tp-ep-pp"]


@pytest.fixture(scope="module")
def rank_generator():
    return H.parity_module(ROOT, "0.17.1").RankGenerator


@pytest.mark.parity
@pytest.mark.parametrize("order,offset,sizes", GRIDS, ids=[g[0] for g in GRIDS])
def test_grid_groups_are_megatrons(rank_generator, order, offset, sizes):
    g = Grid.from_sizes(order, offset, **sizes)
    rg = rank_generator(order=order, rank_offset=offset, **sizes)
    for token in TOKENS:
        assert g.groups(token).tolist() == rg.get_ranks(token), token


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


@pytest.fixture(scope="module")
def ps019():
    return H.parity_module(ROOT, "0.19.2")


@pytest.mark.parity
@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "cp-ep-tp-dp-pp", "pp-dp-cp-ep",
                                   "TP-cp-ep-dp-pp", "tp-gtp_remat-cp-ep-dp-pp",
                                   "tp-cp-dp-pp"])
def test_inject_gtp_is_megatrons(ps019, order):
    from simharness.grid import inject_gtp

    for after in ("tp", "ep", "dp"):
        assert inject_gtp(order, after=after) == ps019._inject_gtp_remat_axis(order, after)
    assert inject_gtp(order) == ps019._inject_gtp_remat_axis(order)


@pytest.mark.parity
@pytest.mark.parametrize("order,offset", [(None, None), ("tp-pp-ep-dp-cp", 3),
                                          ("TP-cp-EP-dp-pp", 0)])
def test_dense_and_expert_generators_are_megatrons(ps019, order, offset):
    """Grid.dense / Grid.expert with the 0.19 GTP axis (injected after tp / ep) against
    Megatron 0.19's RankGenerator; without the axis by default."""
    from simharness import ParallelismConfig
    from simharness.grid import inject_gtp

    cfg = ParallelismConfig.from_megatron(
        world_size=21, mcore="0.19", tensor_model_parallel_size=2, gtp_remat_size=2,
        expert_model_parallel_size=2, expert_gtp_remat_size=2, rank_offset=5,
        local_world_size=16)
    raw = order or cfg.order_resolved
    off = cfg.rank_offset if offset is None else offset
    sides = [(Grid.dense(cfg, order=order, offset=offset, gtp_token=True), "tp",
              dict(tp=cfg.tp, ep=1, dp=cfg.dp, pp=cfg.pp, cp=cfg.cp,
                   gtp_remat=cfg.gtp_remat_size), ["tp", "dp", "gtp_remat", "gtp_remat-dp"]),
             (Grid.expert(cfg, order=order, offset=offset, gtp_token=True), "ep",
              dict(tp=cfg.etp, ep=cfg.ep, dp=cfg.edp, pp=cfg.pp, cp=1,
                   gtp_remat=cfg.expert_gtp_remat_size), ["ep", "dp", "gtp_remat", "tp-ep"])]
    for grid, after, kw, tokens in sides:
        rg = ps019.RankGenerator(order=inject_gtp(raw, after=after), rank_offset=off, **kw)
        for t in tokens:
            assert grid.groups(t).tolist() == rg.get_ranks(t), (after, t)
    plain = ParallelismConfig.from_megatron(world_size=8, mcore="0.18",
                                            tensor_model_parallel_size=2)
    assert "gtp_remat" not in Grid.dense(plain).names + Grid.expert(plain).names
    # a GTP size > 1, or the token in the order, brings the axis without gtp_token
    assert "gtp_remat" in Grid.dense(cfg).names and "gtp_remat" in Grid.expert(cfg).names
    one = ParallelismConfig.from_megatron(world_size=8, mcore="0.19",
                                          tensor_model_parallel_size=2)
    assert Grid.dense(one, order="tp-gtp_remat-cp-ep-dp-pp").names[:2] == ("tp", "gtp_remat")


def test_first_occurrences_lowercases_and_keeps_first_places():
    from simharness.grid import first_occurrences

    assert first_occurrences("pp-cp-dp-TP-tp-ep-PP") == "pp-cp-dp-tp-ep"
