"""The megatron-core 0.19 profile against megatron-core 0.19.2's own ``parallel_state.py``.

The wheel is fetched with pip into ``.cache/mcore019`` (``tests/support/fetch_mcore019.sh``
does the same by hand), the one file is loaded under Python 3.11 with stubs for its
non-torch imports, and run rank by rank under the fake backend exactly like the 0.16.1
parity; the replay's getter checks are compared with it under GTP > 1. The tests skip,
with the reason, when the download fails (fail under SIMHARNESS_REQUIRE_PARITY=1, as in CI).
"""

from __future__ import annotations

import pytest
from support import megatron_harness as H
from support.paths import ROOT
from support.profile_cases import lay as _lay

from simharness import LayoutError, ParallelismConfig, build_layout

TP_PP_DP = "tp-cp-ep-pp-dp"

def lay(mcore="0.19", **kw):
    return _lay(mcore, **kw)


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


def test_019_rejects_016_keyword(ps019):
    assert H.megatron_error(ps019, 8, dict(create_all_gather_group=True)) == "TypeError"


def test_profile_keywords_match_megatron_signature_019(ps019):
    import inspect

    from simharness.profiles import megatron_kwargs

    assert set(inspect.signature(ps019.initialize_model_parallel).parameters) == set(
        megatron_kwargs("0.19"))


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
    from simharness.live.verify import compare_getters

    return {r: H.run_rank(ps, world, r, kwargs, mcore="0.19", record=False, getters=False,
                          after_init=lambda ps, r=r: compare_getters(ps, layout, r)).extra
            for r in ranks}


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


def test_compare_getters_019_reports_a_wrong_plan(ps019):
    """The same check fails when the plan is not what Megatron built (gtp 1 planned, 2 run)."""
    kwargs = dict(tensor_model_parallel_size=2, gtp_remat_size=2)
    wrong = lay(world_size=8, tensor_model_parallel_size=2)
    res = _compare_getters_on(ps019, 8, kwargs, wrong, [0])[0]
    bad = {m["kind"] for m in res["mismatches"]}
    assert {"gtp_remat", "mp"} <= bad, res["mismatches"]
