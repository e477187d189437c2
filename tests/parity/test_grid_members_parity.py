"""``Grid`` against megatron-core's own generators: ``groups(token)`` is megatron-core
0.17.1's ``RankGenerator(...).get_ranks(token)`` (the first release with ``rank_offset``)
for several orders, sizes and rank offsets; ``inject_gtp`` and the 0.19 dense/expert
generators are megatron-core 0.19.2's.
"""

from __future__ import annotations

import pytest
from support import megatron_harness as H
from support.paths import ROOT

from simharness.grid import Grid

GRIDS = [  # order, offset, sizes
    ("tp-cp-ep-dp-pp", 0, dict(tp=2, cp=2, ep=1, dp=3, pp=2)),
    ("tp-pp-dp", 5, dict(tp=2, pp=3, dp=2, ep=1, cp=1)),
    ("pp-dp-ep-tp-cp", 3, dict(tp=3, pp=2, dp=2, ep=2, cp=1)),
]
TOKENS = ["tp", "pp", "dp", "cp", "ep", "dp-cp", "tp-pp", "tp-dp-cp", "pp-tp", "tp-ep-pp"]


@pytest.fixture(scope="module")
def rank_generator():
    return H.parity_module(ROOT, "0.17.1").RankGenerator


@pytest.mark.parametrize("order,offset,sizes", GRIDS, ids=[g[0] for g in GRIDS])
def test_grid_groups_are_megatrons(rank_generator, order, offset, sizes):
    g = Grid.from_sizes(order, offset, **sizes)
    rg = rank_generator(order=order, rank_offset=offset, **sizes)
    for token in TOKENS:
        assert g.groups(token).tolist() == rg.get_ranks(token), token


@pytest.fixture(scope="module")
def ps019():
    return H.parity_module(ROOT, "0.19.2")


@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "cp-ep-tp-dp-pp", "pp-dp-cp-ep",
                                   "TP-cp-ep-dp-pp", "tp-gtp_remat-cp-ep-dp-pp",
                                   "tp-cp-dp-pp"])
def test_inject_gtp_is_megatrons(ps019, order):
    from simharness.grid import inject_gtp

    for after in ("tp", "ep", "dp"):
        assert inject_gtp(order, after=after) == ps019._inject_gtp_remat_axis(order, after)
    assert inject_gtp(order) == ps019._inject_gtp_remat_axis(order)


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
    sides = [(cfg.dense_grid(order=order, offset=offset, gtp_token=True), "tp",
              dict(tp=cfg.tp, ep=1, dp=cfg.dp, pp=cfg.pp, cp=cfg.cp,
                   gtp_remat=cfg.gtp_remat_size), ["tp", "dp", "gtp_remat", "gtp_remat-dp"]),
             (cfg.expert_grid(order=order, offset=offset, gtp_token=True), "ep",
              dict(tp=cfg.etp, ep=cfg.ep, dp=cfg.edp, pp=cfg.pp, cp=1,
                   gtp_remat=cfg.expert_gtp_remat_size), ["ep", "dp", "gtp_remat", "tp-ep"])]
    for grid, after, kw, tokens in sides:
        rg = ps019.RankGenerator(order=inject_gtp(raw, after=after), rank_offset=off, **kw)
        for t in tokens:
            assert grid.groups(t).tolist() == rg.get_ranks(t), (after, t)
    plain = ParallelismConfig.from_megatron(world_size=8, mcore="0.18",
                                            tensor_model_parallel_size=2)
    assert "gtp_remat" not in plain.dense_grid().names + plain.expert_grid().names
    # a GTP size > 1, or the token in the order, brings the axis without gtp_token
    assert "gtp_remat" in cfg.dense_grid().names and "gtp_remat" in cfg.expert_grid().names
    one = ParallelismConfig.from_megatron(world_size=8, mcore="0.19",
                                          tensor_model_parallel_size=2)
    assert one.dense_grid(order="tp-gtp_remat-cp-ep-dp-pp").names[:2] == ("tp", "gtp_remat")
