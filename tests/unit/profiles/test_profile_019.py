"""The megatron-core 0.19 profile, pure: the 0.19 differences documented in
``notes/mcore019.md`` (§2.3 example, §2.4 creation sequence, §4
``create_all_gather_groups``, §6 differences) and the reference (§3.2: the W=16
``tp-cp-ep-pp-dp`` example). The parity with megatron-core 0.19.2 is
tests/parity/test_profile_019_parity.py.
"""

from __future__ import annotations

import pytest
from support.profile_cases import REF16, descs
from support.profile_cases import lay as _lay

from simharness import GroupNotInitialized, LayoutError, ParallelismConfig
from simharness.grid import inject_gtp

TP_PP_DP = "tp-cp-ep-pp-dp"

def lay(mcore="0.19", **kw):
    return _lay(mcore, **kw)


# ------------------------------------------------------------ pure: sequence
def test_gtp_singletons_come_first():
    """notes §2.4 step 1: W singleton GTP_WEIGHT_REMAT_GROUP calls before the dp-cp loop."""
    calls = list(lay(**REF16).creation_order)
    assert [c.desc for c in calls[:16]] == ["GTP_WEIGHT_REMAT_GROUP"] * 16
    assert [c.ranks for c in calls[:16]] == [(r,) for r in range(16)]
    assert calls[16].desc == "DATA_PARALLEL_GROUP_WITH_CP"
    assert "GTP_WEIGHT_REMAT_GROUP" not in descs(lay("0.16", **REF16))


def test_expert_gtp_before_ep_and_egtp_duplicate():
    """notes §2.4 steps 14-19: EXPERT_GTP singletons right after TP-CP and before EP; the
    _WITH_EGTP groups right after tp-ep-pp, the same ranks when egtp == 1."""
    layout = lay(**REF16, expert_model_parallel_size=2)
    d = descs(layout)
    first_egtp = d.index("EXPERT_GTP_WEIGHT_REMAT_GROUP")
    assert d[first_egtp - 1] == "TENSOR_AND_CONTEXT_PARALLEL_GROUP"
    assert d[first_egtp:first_egtp + 16] == ["EXPERT_GTP_WEIGHT_REMAT_GROUP"] * 16
    assert d[first_egtp + 16] == "EXPERT_MODEL_PARALLEL_GROUP"
    calls = list(layout.creation_order)
    tep = [c.ranks for c in calls if c.desc == "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP"]
    egtp = [c.ranks for c in calls
            if c.desc == "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP"]
    assert egtp == tep == [(0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)]
    last_tep = max(i for i, x in enumerate(d) if x == "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP")
    assert d[last_tep + 1:last_tep + 1 + len(egtp)] == [
        "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP"] * len(egtp)


@pytest.mark.parametrize("kw", [
    REF16,
    dict(REF16, expert_model_parallel_size=2, num_distributed_optimizer_instances=2),
    dict(world_size=32, tensor_model_parallel_size=4, expert_model_parallel_size=8,
         expert_tensor_parallel_size=1, use_gloo_process_groups=False),
])
def test_019_is_016_plus_gtp_egtp_and_duplicate(kw):
    """notes §6: with gtp = egtp = 1, offset 0 and AG off, 0.19 makes exactly the 0.16 calls,
    plus W GTP singletons (first), W EGTP singletons (before EP) and a duplicate of each
    tp-ep-pp group (after tp-ep-pp)."""
    old, new = list(lay("0.16", **kw).creation_order), list(lay("0.19", **kw).creation_order)
    W = kw["world_size"]
    extra = {"GTP_WEIGHT_REMAT_GROUP", "EXPERT_GTP_WEIGHT_REMAT_GROUP",
             "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP"}
    assert [(c.desc, c.ranks, c.backend) for c in new if c.desc not in extra] == \
        [(c.desc, c.ranks, c.backend) for c in old]
    n_tep = sum(c.desc == "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP" for c in old)
    assert len(new) == len(old) + 2 * W + n_tep


def test_gtp_groups_worked_example():
    """notes §2.3: world 8, tp2, gtp2, dp2, default order."""
    layout = lay(world_size=8, tensor_model_parallel_size=2, gtp_remat_size=2)
    assert layout.config.dp == 2
    assert layout.groups("gtp_remat").tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert layout.groups("dp").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert layout.groups("gtp_remat_dp").tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert layout.groups("mp").tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # notes §2.4 step 13: TENSOR_AND_CONTEXT uses 'tp-cp' (no gtp_remat token).
    assert layout.groups("tp_cp").tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_gtp_blocks_order_and_gloo_off():
    """notes §2.4 steps 1, 5-6: gtp > 1 turns Gloo off for the rest of the function; all
    'gtp_remat-dp' groups, then all 'gtp_remat-dp-cp' groups, after the dp loop, before cp."""
    layout = lay(world_size=16, tensor_model_parallel_size=2, context_parallel_size=2,
                 gtp_remat_size=2, use_gloo_process_groups=True)
    assert not [k for k in layout.kinds if k.endswith("_gloo")]
    assert all(c.backend != "gloo" for c in layout.creation_order)
    d = descs(layout)
    i_dp = max(i for i, x in enumerate(d) if x == "DATA_PARALLEL_GROUP")
    n1 = d.count("DATA_PARALLEL_GROUP_WITH_GTP_REMAT")
    n2 = d.count("DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT")
    assert n1 and n2
    assert d[i_dp + 1:i_dp + 1 + n1 + n2] == (["DATA_PARALLEL_GROUP_WITH_GTP_REMAT"] * n1
                                              + ["DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT"] * n2)
    assert d[i_dp + 1 + n1 + n2] == "CONTEXT_PARALLEL_GROUP"


def test_egtp_turns_gloo_off_before_expert_dp():
    """notes §2.4 step 20: egtp > 1 turns Gloo off before the expert-dp loop only."""
    layout = lay(world_size=16, expert_model_parallel_size=2, expert_gtp_remat_size=2)
    assert layout.has("dp_gloo") and layout.has("dp_cp_gloo")
    assert not layout.has("ep_dp_gloo")
    assert layout.has("ep_gtp_remat_dp")


@pytest.mark.parametrize("kw", [dict(gtp_remat_size=2), dict(expert_gtp_remat_size=2,
                                                             expert_model_parallel_size=2)])
def test_intra_dist_opt_single_group_under_gtp(kw):
    """notes §2.4 step 22: gtp > 1 or egtp > 1 makes one all-ranks group, sorted."""
    layout = lay(world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                 **kw)
    calls = [c for c in layout.creation_order
             if c.desc == "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP"]
    assert [c.ranks for c in calls] == [tuple(range(16))]


def test_intra_dist_opt_without_gtp_as_in_016():
    """reference §1.4, two instances: [[0..3, 8..11], [4..7, 12..15]] under both profiles."""
    kw = dict(REF16, expert_model_parallel_size=2, expert_tensor_parallel_size=2,
              num_distributed_optimizer_instances=2)
    want = [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]]
    assert lay("0.19", **kw).groups("intra_dist_opt").tolist() == want
    assert lay("0.16", **kw).groups("intra_dist_opt").tolist() == want


# ----------------------------------------------------------- pure: AG groups
def test_ag_groups_after_init_dense_only_without_ep():
    """notes §4: created by create_all_gather_groups() after init, so last; expert AG only
    when ep > 1."""
    layout = lay(**REF16, create_all_gather_group=True)
    calls = list(layout.creation_order)
    n = layout.source("dp_cp").n_groups
    assert [c.desc for c in calls[-n:]] == ["DATA_PARALLEL_GROUP_WITH_CP_AG"] * n
    assert "DATA_PARALLEL_GROUP_WITH_CP_AG" not in [c.desc for c in calls[:-n]]
    assert not layout.has("ep_dp_ag")
    # pp-last order: the AG groups equal dp-cp (reference §3.2).
    assert layout.groups("dp_cp_ag").tolist() == layout.groups("dp_cp").tolist()


def test_expert_ag_group_with_ep():
    layout = lay(world_size=8, context_parallel_size=4, expert_model_parallel_size=2,
                 create_all_gather_group=True)
    assert descs(layout)[-3:] == ["DATA_PARALLEL_GROUP_WITH_CP_AG"] + [
        "EXPERT_DATA_PARALLEL_GROUP_AG"] * 2
    # reference §5 test_expert_all_gather_group: expert dp [[0,2,4,6],[1,3,5,7]].
    assert layout.groups("ep_dp_ag").tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert layout.groups("ep_dp").tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert layout.groups("dp_cp_ag").tolist() == [list(range(8))]


def test_ag_hard_coded_order_w16_example():
    """reference §3.2: order tp-cp-ep-pp-dp, W=16 tp2 pp2 cp2: the real dp-cp group of rank 0
    is [0,2,8,10] but create_all_gather_groups() gives [0,2,4,6] (issue #4261)."""
    layout = lay(**REF16, expert_model_parallel_size=2, order=TP_PP_DP,
                 create_all_gather_group=True)
    view = layout.rank(0)
    assert view.groups["dp_cp"].ranks.tolist() == [0, 2, 8, 10]
    assert view.groups["dp_cp_ag"].ranks.tolist() == [0, 2, 4, 6]
    c = layout.resolve_collectives(0)
    assert c.dense_reduce_scatter.ranks == (0, 2, 8, 10)
    assert c.dense_all_gather.ranks == (0, 2, 4, 6)
    # Under 0.16 the AG group is created inside init with the real order.
    old = lay("0.16", **REF16, expert_model_parallel_size=2, order=TP_PP_DP,
              create_all_gather_group=True)
    assert old.rank(0).groups["dp_cp_ag"].ranks.tolist() == [0, 2, 8, 10]


def test_ag_hard_coded_offset():
    """notes §4/§5: create_all_gather_groups() hard-codes rank_offset 0."""
    layout = lay(**REF16, rank_offset=16, create_all_gather_group=True)
    assert layout.groups("dp_cp")[0].tolist() == [16, 18, 20, 22]
    assert layout.groups("dp_cp_ag")[0].tolist() == [0, 2, 4, 6]
    assert layout.rank(16).groups.get("dp_cp_ag") is None


# ----------------------------------------------------------- pure: API shape
def test_inject_gtp_examples():
    """notes §2.1."""
    assert inject_gtp("tp-cp-ep-dp-pp") == "tp-gtp_remat-cp-ep-dp-pp"
    assert inject_gtp("tp-cp-ep-dp-pp", after="ep") == "tp-cp-ep-gtp_remat-dp-pp"
    assert inject_gtp("tp-cp-dp-pp", after="ep") == "tp-gtp_remat-cp-dp-pp"   # ep absent
    assert inject_gtp("cp-dp-pp") == "gtp_remat-cp-dp-pp"                    # tp absent too
    assert inject_gtp("TP-CP-EP-DP-PP") == "gtp_remat-TP-CP-EP-DP-PP"        # case-sensitive
    assert inject_gtp("tp-gtp_remat-dp") == "tp-gtp_remat-dp"


def test_keywords_per_profile():
    with pytest.raises(LayoutError) as info:
        ParallelismConfig.from_megatron(world_size=8, mcore="0.19", create_all_gather_group=True)
    assert info.value.megatron_error == "TypeError"
    cfg = ParallelismConfig.from_megatron(world_size=32, mcore="0.19", gtp_remat_size=2,
                                          rank_offset=16, local_world_size=16)
    assert (cfg.world_size, cfg.rank_offset, cfg.gtp_remat_size) == (16, 16, 2)


def test_getter_signature_019():
    layout = lay(**REF16, gtp_remat_size=1)
    with pytest.raises(LayoutError) as info:
        layout.get_data_parallel_group(0, with_context_parallel=True, independent_all_gather=True)
    assert info.value.megatron_error == "TypeError"
    g = lay(world_size=8, tensor_model_parallel_size=2, gtp_remat_size=2)
    assert g.get_data_parallel_group(0) == (0, 2, 4, 6)                     # dp x gtp
    assert g.get_data_parallel_group(0, with_gtp_remat=False) == (0, 4)     # replicate
    with pytest.raises(GroupNotInitialized):
        g.get_data_parallel_group(0, partial_data_parallel=True)


@pytest.mark.parametrize("kw,error", [
    (dict(world_size=8, tensor_model_parallel_size=2, gtp_remat_size=2,
          num_distributed_optimizer_instances=2), "AssertionError"),
    (dict(world_size=12, tensor_model_parallel_size=4, gtp_remat_size=2,
          num_distributed_optimizer_instances=2), "AssertionError"),   # before divisibility
    (dict(world_size=8, tensor_model_parallel_size=2, gtp_remat_size=3), "RuntimeError"),
    (dict(world_size=8, tensor_model_parallel_size=2, gtp_remat_size=2,
          create_all_gather_group=True), "ValueError"),
    (dict(world_size=8, expert_model_parallel_size=2, expert_gtp_remat_size=3),
     "RuntimeError"),
])
def test_019_rejections(kw, error):
    """notes §3 (in execution order) and §4 (gtp > 1 with the AG groups)."""
    with pytest.raises(LayoutError) as info:
        lay("0.19", **kw)
    assert info.value.megatron_error == error
