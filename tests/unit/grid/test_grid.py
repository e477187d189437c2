"""Rank generation: the worked examples of the reference (§1.4), Megatron's own unit-test
shapes (§5) and the legacy formulas of ``test_rank_generator_for_tp_dp_pp``.

Every expected list below is copied from the reference or computed by the legacy
formulas Megatron's test uses; none is read back from simharness.
"""

from __future__ import annotations

import numpy as np
import pytest

from simharness import LayoutError, ParallelismConfig, build_layout
from simharness.config import MCORE_PROFILES
from simharness.grid import Grid

TP_PP_DP = "tp-cp-ep-pp-dp"
REF = dict(world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
           context_parallel_size=2)


def groups(layout, kind):
    return layout.groups(kind).tolist()


@pytest.fixture(params=MCORE_PROFILES)
def mcore(request):
    return request.param


# ------------------------------------------------------ reference §1.4
def test_grid_worked_example_default_order():
    """``rank = tp + 2cp + 4dp + 8pp``."""
    g = Grid.from_sizes("tp-cp-ep-dp-pp", tp=2, cp=2, ep=1, dp=2, pp=2)
    assert g.groups("tp").tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11],
                                       [12, 13], [14, 15]]
    assert g.groups("cp").tolist() == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11],
                                       [12, 14], [13, 15]]
    assert g.groups("dp").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13],
                                       [10, 14], [11, 15]]
    assert g.groups("dp-cp").tolist() == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14],
                                          [9, 11, 13, 15]]
    assert g.groups("pp").tolist() == [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13],
                                       [6, 14], [7, 15]]
    assert g.groups("tp-pp").tolist() == [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 12, 13],
                                          [6, 7, 14, 15]]
    assert g.groups("tp-cp").tolist() == [list(range(0, 4)), list(range(4, 8)),
                                          list(range(8, 12)), list(range(12, 16))]
    assert g.groups("tp-dp").tolist() == [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13],
                                          [10, 11, 14, 15]]
    assert g.groups("tp-dp-cp").tolist() == [list(range(8)), list(range(8, 16))]
    # Token order inside a query does not matter (reference §1.1).
    assert g.groups("cp-dp").tolist() == g.groups("dp-cp").tolist()


def test_layout_worked_example_default_order(mcore):
    layout = build_layout(ParallelismConfig(**REF), mcore=mcore)
    assert layout.config.dp == 2
    assert groups(layout, "dp_cp") == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14],
                                       [9, 11, 13, 15]]
    assert groups(layout, "pp") == [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13],
                                    [6, 14], [7, 15]]
    assert groups(layout, "embd") == groups(layout, "pp")           # pp = 2: [first, last]
    assert groups(layout, "pos_embd") == [[r] for r in range(8)]
    assert groups(layout, "mp") == [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 12, 13],
                                    [6, 7, 14, 15]]
    assert groups(layout, "tp_dp_cp") == [list(range(8)), list(range(8, 16))]


def test_expert_etp2_ep2(mcore):
    layout = build_layout(ParallelismConfig(**REF, expert_model_parallel_size=2,
                                            expert_tensor_parallel_size=2), mcore=mcore)
    assert layout.config.edp == 2
    assert groups(layout, "ep")[:2] == [[0, 2], [1, 3]]
    assert groups(layout, "tp_ep_mp")[0] == [0, 1, 2, 3]
    assert groups(layout, "tp_ep_pp") == [[0, 1, 2, 3, 8, 9, 10, 11],
                                          [4, 5, 6, 7, 12, 13, 14, 15]]
    assert groups(layout, "ep_dp") == groups(layout, "dp")
    assert groups(layout, "dp") == [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13],
                                    [10, 14], [11, 15]]


def test_expert_etp1_ep2(mcore):
    layout = build_layout(ParallelismConfig(**REF, expert_model_parallel_size=2,
                                            expert_tensor_parallel_size=1), mcore=mcore)
    assert layout.config.edp == 4
    assert groups(layout, "ep")[:2] == [[0, 1], [2, 3]]
    assert groups(layout, "ep_dp") == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14],
                                       [9, 11, 13, 15]]


def test_order_tp_cp_ep_pp_dp(mcore):
    base = build_layout(ParallelismConfig(**REF), mcore=mcore)
    # ep=2 keeps expert dp == dp, which a non-pp-last order requires (reference §1.3).
    layout = build_layout(ParallelismConfig(**REF, order=TP_PP_DP, expert_model_parallel_size=2),
                          mcore=mcore)
    assert groups(layout, "dp")[:2] == [[0, 8], [1, 9]]
    assert groups(layout, "pp")[:5] == [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12]]
    assert groups(layout, "dp_cp") == [[0, 2, 8, 10], [1, 3, 9, 11], [4, 6, 12, 14],
                                       [5, 7, 13, 15]]
    assert groups(layout, "mp")[0] == [0, 1, 4, 5]
    assert groups(layout, "tp") == groups(base, "tp")
    assert groups(layout, "cp") == groups(base, "cp")


def test_use_tp_pp_dp_mapping_selects_that_order():
    cfg = ParallelismConfig(**REF, use_tp_pp_dp_mapping=True, expert_model_parallel_size=2)
    assert cfg.order == TP_PP_DP


def test_rank_offset_16(mcore):
    layout = build_layout(ParallelismConfig(**REF, rank_offset=16), mcore=mcore)
    assert groups(layout, "dp_cp") == [[16, 18, 20, 22], [17, 19, 21, 23], [24, 26, 28, 30],
                                       [25, 27, 29, 31]]
    assert layout.ranks == range(16, 32)
    with pytest.raises(LayoutError) as info:
        layout.rank(3)
    assert "16" in str(info.value) and "31" in str(info.value)


def test_two_optimizer_instances(mcore):
    layout = build_layout(ParallelismConfig(**REF, expert_model_parallel_size=2,
                                            expert_tensor_parallel_size=2,
                                            num_distributed_optimizer_instances=2), mcore=mcore)
    intra = [c.ranks for c in layout.creation_order
             if c.desc == "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP"]
    assert intra == [(0, 2), (4, 6), (1, 3), (5, 7), (8, 10), (12, 14), (9, 11), (13, 15)]
    # Expert hierarchical sizes [iedp, n] = [1, 2]: level 0 singletons, level 1 inter.
    assert groups(layout, "intra_ep_dp") == [[r] for r in
                                             [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]]
    assert groups(layout, "inter_ep_dp")[:2] == [[0, 4], [1, 5]]
    assert groups(layout, "intra_dist_opt") == [[0, 1, 2, 3, 8, 9, 10, 11],
                                                [4, 5, 6, 7, 12, 13, 14, 15]]
    # Creation order: each NCCL group, then its Gloo twin, level 0 then level 1 per expert-dp group.
    first = [c.desc for c in layout.creation_order
             if c.desc.startswith(("EXPERT_DATA", "HIERARCHICAL_EXPERT"))][:8]
    assert first == ["EXPERT_DATA_PARALLEL_GROUP", "EXPERT_DATA_PARALLEL_GROUP_GLOO",
                     "HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L0",
                     "HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_GLOO_L0",
                     "HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L0",
                     "HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_GLOO_L0",
                     "HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L1",
                     "HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_GLOO_L1"]


def test_all_gather_group_016_worked_example():
    layout = build_layout(ParallelismConfig(**REF, create_all_gather_group=True), mcore="0.16")
    calls = list(layout.creation_order)
    assert calls[:3] == [
        ("dp_cp", "DATA_PARALLEL_GROUP_WITH_CP", (0, 2, 4, 6), "nccl"),
        ("dp_cp_ag", "DATA_PARALLEL_GROUP_WITH_CP_AG", (0, 2, 4, 6), "nccl"),
        ("dp_cp_gloo", "DATA_PARALLEL_GROUP_WITH_CP_GLOO", (0, 2, 4, 6), "gloo")]


def test_nemo_fake_initialize_example():
    """reference §4.3: W=16, tp2/pp2/cp2, rank 5 -> (tp 1, pp 0, ep 0, etp 1, mp 4, dp 2)."""
    layout = build_layout(ParallelismConfig(**REF), mcore="0.16")
    c = layout.rank(5).coordinates
    assert (c["tp"], c["pp"], c["ep"], c["etp"]) == (1, 0, 0, 1)
    assert (layout.config.model_parallel_size, layout.config.dp) == (4, 2)


# ---------------------------------------------------- Megatron's test shapes (§5)
@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "tp-cp-pp-ep-dp"])
def test_pipeline_parallel_initializations(order):
    layout = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2,
                                            pipeline_model_parallel_size=4, order=order),
                          mcore="0.16")
    assert groups(layout, "tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert groups(layout, "pp") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    for r in range(8):
        pp = layout.rank(r).groups["pp"]
        ranks = pp.ranks.tolist()
        assert ranks[0] == r % 2                                     # first pp rank
        assert ranks[(pp.position + 1) % 4] == (r + 2) % 8           # next
        assert ranks[(pp.position - 1) % 4] == (r - 2) % 8           # prev
        assert layout.rank(r).groups["dp"].ranks.tolist() == [r]     # dp src rank = rank
    assert layout.rank(0).is_first_stage and layout.rank(7).is_last_stage


@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "tp-cp-pp-ep-dp"])
def test_data_parallel_initializations(order):
    layout = build_layout(ParallelismConfig(world_size=8, pipeline_model_parallel_size=8,
                                            order=order), mcore="0.16")
    for r in range(8):
        dp = layout.rank(r).groups["dp"]
        assert len(dp.ranks) == 1 and dp.group_rank == 0 and dp.ranks[0] == r


@pytest.mark.parametrize("tp,pp,ep", [(1, 8, 1), (2, 4, 1), (4, 2, 1), (8, 1, 1), (4, 1, 2),
                                      (1, 1, 8), (1, 1, 2), (2, 1, 4)])
def test_different_initialize_order_consistency(tp, pp, ep):
    kw = dict(world_size=8, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
              expert_model_parallel_size=ep)
    a = build_layout(ParallelismConfig(**kw, order="tp-ep-dp-pp"), mcore="0.16")
    b = build_layout(ParallelismConfig(**kw, order="tp-pp-ep-dp"), mcore="0.16")
    for kind in ("tp", "dp", "pp", "ep_dp", "cp", "mp", "tp_ep_mp", "tp_dp"):
        assert groups(a, kind) == groups(b, kind), kind


# Megatron's test also lists ep=2 for these (tp, pp); with order tp-pp-ep-dp, pp > 1 and
# expert dp != dp, initialize_model_parallel asserts (the pp-last rule), so only ep=1 is kept.
@pytest.mark.parametrize("tp,pp,ep", [(1, 2, 1), (1, 4, 1), (2, 2, 1)])
def test_different_initialize_order_unconsistency(tp, pp, ep):
    kw = dict(world_size=8, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
              expert_model_parallel_size=ep, expert_tensor_parallel_size=tp)
    a = build_layout(ParallelismConfig(**kw, order="tp-ep-dp-pp"), mcore="0.16")
    b = build_layout(ParallelismConfig(**kw, order="tp-pp-ep-dp"), mcore="0.16")
    assert groups(a, "tp") == groups(b, "tp") and groups(a, "cp") == groups(b, "cp")
    for kind in ("dp", "pp", "tp_dp", "mp"):
        assert groups(a, kind) != groups(b, kind), kind
    if (tp, pp, ep) == (1, 2, 1):
        assert groups(a, "dp") == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert groups(b, "dp") == [[0, 2, 4, 6], [1, 3, 5, 7]]
        assert groups(a, "pp")[0] == [0, 4] and groups(b, "pp")[0] == [0, 1]


# -------------------------------- legacy formulas (test_rank_generator_for_tp_dp_pp)
def legacy_dense(W, tp, pp, cp):
    P = W // pp
    dp = W // (tp * pp * cp)
    out = {}
    out["dp"] = [list(range(i * P + j, (i + 1) * P, cp * tp)) for i in range(pp)
                 for j in range(cp * tp)]
    out["dp-cp"] = [list(range(i * P + j, (i + 1) * P, tp)) for i in range(pp)
                    for j in range(tp)]
    out["cp"] = [list(range(i * P + j * tp * cp + k, i * P + (j + 1) * tp * cp, tp))
                 for i in range(pp) for j in range(dp) for k in range(tp)]
    out["tp-pp"] = [[g[i] for g in out["dp-cp"]] for i in range(dp * cp)]
    out["tp"] = [list(range(i * tp, (i + 1) * tp)) for i in range(W // tp)]
    out["pp"] = [list(range(i, W, P)) for i in range(P)]
    out["tp-dp-cp"] = [list(range(i * tp * dp * cp, (i + 1) * tp * dp * cp))
                       for i in range(W // (tp * dp * cp))]
    return dp, out


def legacy_expert(W, tp, pp, ep):
    edp = W // (tp * ep * pp)
    a = np.arange(W).reshape(pp, edp, ep, tp)
    return edp, {"tp": a.reshape(-1, tp).tolist(),
                 "ep": a.transpose(0, 1, 3, 2).reshape(-1, ep).tolist(),
                 "tp-ep": a.reshape(-1, ep * tp).tolist(),
                 "dp": a.transpose(0, 2, 3, 1).reshape(-1, edp).tolist()}


@pytest.mark.parametrize("nodes,gpus,tp,pp,cp,ep", [
    (1, 1, 1, 1, 1, 1), (1, 8, 8, 1, 1, 1), (1, 8, 2, 2, 1, 1), (1, 8, 2, 4, 1, 1),
    (3, 8, 8, 3, 1, 1), (4, 8, 2, 4, 1, 1), (8, 8, 8, 8, 1, 1), (8, 8, 2, 1, 1, 4),
    (8, 8, 2, 2, 2, 4), (8, 8, 2, 1, 4, 8), (8, 8, 2, 2, 2, 8), (16, 8, 4, 8, 1, 4),
    (16, 8, 4, 8, 4, 1), (32, 8, 8, 8, 4, 1), (64, 8, 4, 2, 8, 8), (96, 8, 4, 8, 1, 1),
    (128, 8, 4, 2, 8, 8), (316, 8, 4, 8, 1, 1),
])
def test_rank_generator_matches_legacy_formulas(nodes, gpus, tp, pp, cp, ep):
    W = nodes * gpus
    dp, want = legacy_dense(W, tp, pp, cp)
    dense = Grid.from_sizes("tp-cp-dp-pp", tp=tp, pp=pp, dp=dp, ep=1, cp=cp)
    assert dense.world_size == W
    for token, lists in want.items():
        assert dense.groups(token).tolist() == lists, token
    edp, ewant = legacy_expert(W, tp, pp, ep)
    expert = Grid.from_sizes("tp-ep-dp-pp", tp=tp, pp=pp, dp=edp, ep=ep, cp=1)
    for token, lists in ewant.items():
        assert expert.groups(token).tolist() == lists, token
    # The arithmetic paths agree with the arrays on a few ranks.
    for r in {0, W // 3, W - 1}:
        for token in want:
            g, pos = dense.locate(token, r)
            assert dense.groups(token)[g][pos] == r
            assert dense.members(token, g).tolist() == dense.groups(token)[g].tolist()


# ----------------------------------------------------------- generator rules
def test_missing_size_one_dims_are_appended():
    g = Grid.from_sizes("tp-dp-pp", tp=2, pp=2, dp=2, ep=1, cp=1)
    assert g.names == ("tp", "dp", "pp", "ep", "cp")   # Megatron: 'tp-cp-dp-pp' -> '...-ep'


def test_missing_dim_and_unknown_token_are_errors():
    with pytest.raises(LayoutError) as info:
        Grid.from_sizes("tp-dp-pp", tp=2, pp=2, dp=2, ep=1, cp=2)
    assert info.value.megatron_error == "RuntimeError" and "'cp'" in str(info.value)
    with pytest.raises(LayoutError) as info:
        Grid.from_sizes("tp-cp-ep-dp-pp-foo", tp=1, pp=1, dp=1, ep=1, cp=1)
    assert info.value.megatron_error == "KeyError" and "foo" in str(info.value)
    with pytest.raises(LayoutError) as info:
        Grid.from_sizes("tp-dp", tp=2, dp=2).groups("ep")
    assert info.value.megatron_error == "ValueError"


def test_coords_and_rank_outside():
    g = Grid.from_sizes("tp-cp-ep-dp-pp", 16, tp=2, cp=2, ep=1, dp=2, pp=2)
    assert g.coords(16 + 13) == {"tp": 1, "cp": 0, "ep": 0, "dp": 1, "pp": 1}
    with pytest.raises(LayoutError) as info:
        g.coords(3)
    assert "3" in str(info.value) and "16..31" in str(info.value)
