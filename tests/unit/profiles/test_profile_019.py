"""The megatron-core 0.19 profile.

Two halves:

* pure tests pinning the 0.19 differences documented in ``notes/mcore019.md``
  (§2.3 example, §2.4 creation sequence, §4 ``create_all_gather_groups``, §6
  differences) and the reference (§3.2: the W=16 ``tp-cp-ep-pp-dp`` example);
* parity with megatron-core 0.19.2's own ``parallel_state.py``: the wheel is
  fetched with pip into ``.cache/mcore019`` (``tests/fetch_mcore019.sh`` does
  the same by hand), the one file is loaded under Python 3.11 with stubs for its
  non-torch imports, and run rank by rank under the fake backend exactly like
  the 0.16.1 parity. Those tests skip, with the reason, when the download fails (fail
  under SIMHARNESS_REQUIRE_PARITY=1, as in CI).
"""

from __future__ import annotations

from pathlib import Path

import megatron_harness as H
import pytest

from simharness import GroupNotInitialized, LayoutError, ParallelismConfig, build_layout
from simharness.grid import inject_gtp

ROOT = Path(__file__).resolve().parent.parent
TP_PP_DP = "tp-cp-ep-pp-dp"


def lay(mcore="0.19", **kw):
    return build_layout(ParallelismConfig(**kw), mcore=mcore)


def descs(layout):
    return [c.desc for c in layout.creation_order]


REF16 = dict(world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
             context_parallel_size=2)


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


# ---------------------------------------------------- parity with 0.19.2
@pytest.fixture(scope="module")
def ps019():
    return H.parity_module(ROOT, H.MCORE019_VERSION)


def c19(torch_world, ag=False, **kw):
    names = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
             "vpp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
             "ep": "expert_model_parallel_size", "etp": "expert_tensor_parallel_size",
             "n": "num_distributed_optimizer_instances",
             "hcp": "hierarchical_context_parallel_sizes",
             "gloo": "create_gloo_process_groups", "gtp": "gtp_remat_size",
             "egtp": "expert_gtp_remat_size", "offset": "rank_offset",
             "local": "local_world_size", "pp_backend": "pipeline_model_parallel_comm_backend",
             "hybrid": "hybrid_context_parallel"}
    kwargs = {names.get(k, k): v for k, v in kw.items()}
    label = f"W{torch_world}" + ("-ag" if ag else "") + "".join(f"-{k}{v}" for k, v in kw.items())
    return pytest.param(torch_world, ag, kwargs, id=label.replace(" ", "").replace("'", ""))


CASES_019 = [
    c19(1),
    c19(8, tp=2, pp=4),
    c19(16, tp=2, pp=2, cp=2),
    c19(16, ag=True, tp=2, pp=2, cp=2),
    c19(16, ag=True, tp=2, pp=2, cp=2, ep=2, order=TP_PP_DP),          # issue #4261
    c19(8, ag=True, tp=2, pp=2, order="tp-pp-dp"),                      # AG == pp groups
    c19(8, ag=True, cp=8),
    c19(8, ag=True, cp=4, ep=2),                                        # expert AG
    c19(16, tp=2, pp=2, cp=2, ep=2, etp=2, n=2),
    c19(16, tp=2, pp=2, cp=2, ep=2, etp=1, n=2, gloo=False),
    c19(32, ag=True, tp=2, cp=2, ep=4, etp=1, n=4),
    c19(8, tp=2, gtp=2),                                                # notes §2.3
    c19(16, tp=2, pp=2, cp=2, gtp=2),
    c19(16, tp=2, cp=4, hcp=[2, 2], gtp=2, pp=1),
    c19(16, ep=2, etp=1, egtp=2),
    c19(32, tp=2, cp=2, gtp=2, ep=2, egtp=2, order=TP_PP_DP, pp=2),
    c19(16, tp=2, pp=4, vpp=2, pp_backend="ucc", order=TP_PP_DP),
    c19(8, cp=2, hybrid=True),
    c19(32, ag=True, tp=2, pp=2, cp=2, offset=16, local=16),           # AG ignores the offset
    c19(12, tp=2, pp=2, offset=4, local=8, ep=2, etp=1, n=2),           # ranks 0..3 outside
    c19(128, ag=True, tp=8, pp=4, cp=2, ep=8, etp=1, n=2),
    c19(128, tp=4, pp=2, gtp=2, ep=2, etp=2, egtp=2, order=TP_PP_DP, vpp=2),
]


def _after_init(ag, ep):
    if not ag:
        return None
    return lambda ps: ps.create_all_gather_groups(for_expert_parallelism=ep > 1)


@pytest.mark.parity
@pytest.mark.parametrize("torch_world,ag,kwargs", CASES_019)
def test_parity_019(ps019, torch_world, ag, kwargs):
    cfg = ParallelismConfig.from_megatron(world_size=torch_world, mcore="0.19", **kwargs)
    layout = build_layout(cfg.replace(create_all_gather_group=ag), mcore="0.19")
    expected = [(c.desc, c.ranks, c.backend) for c in layout.creation_order]
    inside = list(layout.ranks)
    if len(inside) <= 32:
        # create_all_gather_groups() raises on ranks outside the window (not initialized).
        getter_ranks = inside if ag else list(range(torch_world))
        record = getter_ranks if len(getter_ranks) <= 16 else [inside[0], inside[-1]]
    else:
        import random
        rng = random.Random(torch_world)
        getter_ranks = sorted({inside[0], inside[-1], *rng.sample(inside, 8)})
        record = [inside[0], inside[-1]]
    runs = H.run_world(ps019, torch_world, kwargs, ranks=getter_ranks, record_ranks=record,
                       mcore="0.19", after_init=_after_init(ag, cfg.ep))
    H.assert_runs_match(runs, expected, layout, ag)


INVALID_019 = [
    pytest.param(8, False, dict(tensor_model_parallel_size=2, gtp_remat_size=2,
                                num_distributed_optimizer_instances=2), id="gtp-with-instances"),
    pytest.param(12, False, dict(tensor_model_parallel_size=4, gtp_remat_size=2,
                                 num_distributed_optimizer_instances=2),
                 id="gtp-with-instances-before-divisibility"),
    pytest.param(8, False, dict(tensor_model_parallel_size=2, gtp_remat_size=3),
                 id="gtp-not-dividing"),
    pytest.param(8, False, dict(expert_model_parallel_size=2, expert_gtp_remat_size=3),
                 id="egtp-not-dividing"),
    pytest.param(8, True, dict(tensor_model_parallel_size=2, gtp_remat_size=2),
                 id="ag-with-gtp"),
    pytest.param(8, False, dict(tensor_model_parallel_size=3), id="tp-not-dividing"),
    pytest.param(16, False, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                                 expert_tensor_parallel_size=1, order=TP_PP_DP),
                 id="not-pp-last-expert-dp-differs"),
    pytest.param(8, False, dict(virtual_pipeline_model_parallel_size=2), id="vpp-without-pp"),
    pytest.param(8, False, dict(context_parallel_size=2, order="tp-xx-dp-pp"),
                 id="order-missing-cp-and-unknown-token"),
]


@pytest.mark.parity
@pytest.mark.parametrize("torch_world,ag,kwargs", INVALID_019)
def test_invalid_parity_019(ps019, torch_world, ag, kwargs):
    megatron = H.megatron_error(ps019, torch_world, kwargs,
                                after_init=_after_init(ag, kwargs.get(
                                    "expert_model_parallel_size", 1)))
    assert megatron is not None, "Megatron accepted this input"
    with pytest.raises(LayoutError) as info:
        cfg = ParallelismConfig.from_megatron(world_size=torch_world, mcore="0.19", **kwargs)
        build_layout(cfg.replace(create_all_gather_group=ag), mcore="0.19")
    assert info.value.megatron_error == megatron, str(info.value)


@pytest.mark.parity
def test_019_rejects_016_keyword(ps019):
    assert H.megatron_error(ps019, 8, dict(create_all_gather_group=True)) == "TypeError"


@pytest.mark.parity
def test_profile_keywords_match_megatron_signature_019(ps019):
    import inspect

    from simharness.profiles import megatron_kwargs

    assert set(inspect.signature(ps019.initialize_model_parallel).parameters) == set(
        megatron_kwargs("0.19"))


@pytest.mark.parity
def test_megatron_019_ag_differs_from_dp_cp_with_tp_pp_dp_order(ps019):
    """The bug itself, read from Megatron: order tp-cp-ep-pp-dp, W=16 tp2 pp2 cp2 (ep2 keeps
    expert dp == dp). Rank 0's dp-cp group is [0,2,8,10]; create_all_gather_groups() gives
    it [0,2,4,6] (reference §3.2, issue #4261). simharness models the same."""
    kwargs = dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                  context_parallel_size=2, expert_model_parallel_size=2, order=TP_PP_DP)
    run = H.run_rank(ps019, 16, 0, kwargs, mcore="0.19", record=False,
                     after_init=_after_init(True, 2))
    assert run.getters["dp_cp"] == [0, 2, 8, 10]
    assert run.extra[0] == [0, 2, 4, 6]
    layout = build_layout(ParallelismConfig.from_megatron(world_size=16, mcore="0.19", **kwargs)
                          .replace(create_all_gather_group=True), mcore="0.19")
    assert layout.get_data_parallel_group(0, with_context_parallel=True) == (0, 2, 8, 10)
    assert layout.rank(0).groups["dp_cp_ag"].ranks.tolist() == [0, 2, 4, 6]


# ------------------------------ replay's getter checks against 0.19.2 (GTP > 1)
GTP_GETTER_CASES = [
    c19(8, tp=2, gtp=2),                                   # once: dp, dp_cp wrongly reported
    c19(8, ep=2, etp=1, egtp=2),                           # once: ep_dp wrongly reported
    c19(16, tp=2, pp=2, cp=2, gtp=2),
    c19(16, tp=2, cp=4, hcp=[2, 2], gtp=2, pp=1),
    c19(32, tp=2, cp=2, gtp=2, ep=2, egtp=2, order=TP_PP_DP, pp=2),
]


def _compare_getters_on(ps, world, kwargs, layout, ranks):
    """``compare_getters`` (what replay --engine megatron and verify_live run) on each rank."""
    from simharness.replay.verify import compare_getters

    return {r: H.run_rank(ps, world, r, kwargs, mcore="0.19", record=False, getters=False,
                          after_init=lambda ps, r=r: compare_getters(ps, layout, r)).extra
            for r in ranks}


@pytest.mark.parity
@pytest.mark.parametrize("torch_world,ag,kwargs", GTP_GETTER_CASES)
def test_compare_getters_019_with_gtp(ps019, torch_world, ag, kwargs):
    """Every kind of the 0.19 plan has a getter, and on every rank (up to 16 checked) each
    getter returns the plan's group: no false errors with GTP / expert GTP > 1."""
    layout = lay(**dict(kwargs, world_size=torch_world))
    ranks = range(torch_world) if torch_world <= 16 else (0, 5, 17, torch_world - 1)
    for r, res in _compare_getters_on(ps019, torch_world, kwargs, layout, ranks).items():
        assert res["n_mismatches"] == 0, f"rank {r}: {res['mismatches'][:3]}"
        assert res["no_getter"] == [], f"rank {r}"
        assert set(res["checked"]) == set(layout.kinds)
    gtp_kinds = {"gtp_remat_dp", "gtp_remat_dp_cp"} if kwargs.get("gtp_remat_size", 1) > 1 \
        else {"ep_gtp_remat_dp"}
    assert gtp_kinds <= set(layout.kinds)


@pytest.mark.parity
def test_compare_getters_019_reports_a_wrong_plan(ps019):
    """The same check fails when the plan is not what Megatron built (gtp 1 planned, 2 run)."""
    kwargs = dict(tensor_model_parallel_size=2, gtp_remat_size=2)
    wrong = lay(world_size=8, tensor_model_parallel_size=2)
    res = _compare_getters_on(ps019, 8, kwargs, wrong, [0])[0]
    bad = {m["kind"] for m in res["mismatches"]}
    assert {"gtp_remat", "mp"} <= bad, res["mismatches"]
