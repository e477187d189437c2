"""Profiles ``"0.18"`` and ``"0.16"`` against the releases they model, judged by the real
megatron-core.

* parity of profile ``"0.18"`` with megatron-core 0.18.2's own ``parallel_state.py``
  (wheel fetched into ``.cache/mcore018`` and loaded alone with stubs, like 0.19.2 in
  ``test_profile_019_parity.py``): every configuration of ``parity_cases.CASES`` with
  the option as given and toggled, plus rank offsets, and the invalid inputs;
* parity of profile ``"0.16"`` with megatron-core 0.17.1 (``.cache/mcore017``), which
  added ``rank_offset`` / ``local_world_size`` (0.16.1 lacks them).

The tests skip, with the reason, when a wheel cannot be downloaded (fail under
SIMHARNESS_REQUIRE_PARITY=1, as in CI).
"""

from __future__ import annotations

import inspect
import random

import pytest
from support import megatron_harness as H
from support.parity_cases import CASES, INVALID, TP_PP_DP, case, split_ag
from support.paths import ROOT
from support.profile_cases import calls
from support.profile_cases import lay as _lay

from simharness import (
    LayoutError,
    ParallelismConfig,
    build_layout,
)
from simharness.mcore import profile_for_version
from simharness.profiles import get_profile


def lay(mcore="0.18", **kw):
    return _lay(mcore, **kw)


# ---------------------------------------------------------------- fixtures
def _load(version):
    return H.parity_module(ROOT, version)


@pytest.fixture(scope="module")
def ps018():
    return _load("0.18.2")


@pytest.fixture(scope="module")
def ps017():
    return _load("0.17.1")


def _after_init(ag, ep):
    if not ag:
        return None
    return lambda ps: ps.create_all_gather_groups(for_expert_parallelism=ep > 1)


def _check_world(ps, mcore, torch_world, kwargs, ag=False):
    """Megatron's call log and getters against simharness, rank by rank (as in the 0.19
    parity): full log on up to 16 ranks (first and last above), getters on every rank up
    to 32 and on a fixed sample above; with ``ag`` (0.18+) the AG groups returned."""
    cfg = ParallelismConfig.from_megatron(world_size=torch_world, mcore=mcore, **kwargs)
    if ag:
        cfg = cfg.replace(create_all_gather_group=True)
    layout = build_layout(cfg, mcore=mcore)
    expected = calls(layout)
    inside = list(layout.ranks)
    if len(inside) <= 32:
        # create_all_gather_groups() raises on ranks outside the window (not initialized).
        getter_ranks = inside if ag else list(range(torch_world))
        record = getter_ranks if len(getter_ranks) <= 16 else [inside[0], inside[-1]]
    else:
        rng = random.Random(torch_world)
        getter_ranks = sorted({inside[0], inside[-1], inside[len(inside) // 2],
                               *rng.sample(inside, 8)})
        record = [inside[0], inside[-1]]
    runs = H.run_world(ps, torch_world, kwargs, ranks=getter_ranks, record_ranks=record,
                       mcore=mcore, after_init=_after_init(ag, cfg.ep))
    H.assert_runs_match(runs, expected, layout, ag)
    return layout


# ------------------------------------------------------- parity with 0.18.2
def _toggled(params):
    """Each case with the option as given and toggled: ``(world, ag, kwargs)``."""
    out = []
    for p in params:
        world, kwargs = p.values
        ag, rest = split_ag(kwargs)
        for flag in (ag, not ag):
            out.append(pytest.param(world, flag, rest, id=f"{p.id}-AG{'on' if flag else 'off'}"))
    return out


EXTRA_018 = [
    case(16, tp=2, pp=2, cp=2, ep=2, order=TP_PP_DP, ag=True),      # issue #4261, expert AG
    case(64, tp=2, pp=4, cp=2, ep=4, etp=1, order=TP_PP_DP, ag=True, gloo=False),
    case(8, tp=2, pp=2, order="tp-pp-dp", ag=True),                 # AG == the pp groups
    case(32, tp=2, cp=2, ep=4, etp=1, n=4, ag=True),
    case(64, tp=4, pp=2, cp=2, hcp=[2, 1], ep=2, etp=2, n=2, vpp=2, ag=True),
    case(48, tp=2, pp=3, cp=2, ep=4, etp=1, order=TP_PP_DP, ag=True),
    case(24, tp=2, cp=3, ep=2, etp=2, n=2, ag=True, gloo=False),
]
OFFSET_018 = [
    case(32, tp=2, pp=2, cp=2, offset=16, local=16),
    case(32, tp=2, pp=2, cp=2, offset=16, local=16, ag=True),         # AG ignores the offset
    case(12, tp=2, pp=2, offset=4, local=8, ep=2, etp=1, n=2),         # ranks 0..3 outside
    case(24, tp=2, cp=2, offset=8, local=16, ep=2, order=TP_PP_DP, pp=2),
    case(16, local=8, cp=4, hcp=[2, 2], hybrid=True),                  # ranks 8..15 outside
]
CASES_018 = _toggled(CASES + EXTRA_018 + OFFSET_018)


@pytest.mark.parametrize("torch_world,ag,kwargs", CASES_018)
def test_parity_018(ps018, torch_world, ag, kwargs):
    _check_world(ps018, "0.18", torch_world, kwargs, ag)


def test_case_count_018():
    worlds = [p.values[0] for p in CASES_018]
    ags = [p.values[1] for p in CASES_018]
    assert len(CASES_018) >= 100 and min(worlds) == 1 and max(worlds) >= 64
    assert sum(ags) == len(ags) // 2
    orders = {p.values[2].get("order") for p in CASES_018}
    assert TP_PP_DP in orders and None in orders


INVALID_018 = [p for p in INVALID] + [
    pytest.param(8, dict(create_all_gather_group=True), id="no-ag-keyword"),
    pytest.param(8, dict(tensor_model_parallel_size=2, gtp_remat_size=2), id="no-gtp-keyword"),
    pytest.param(8, dict(expert_model_parallel_size=2, expert_gtp_remat_size=1),
                 id="no-egtp-keyword"),
    pytest.param(16, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                          context_parallel_size=2, local_world_size=12), id="local-world-12"),
]


@pytest.mark.parametrize("world,kwargs", INVALID_018)
def test_invalid_parity_018(ps018, world, kwargs):
    megatron = H.megatron_error(ps018, world, kwargs)
    assert megatron is not None, "Megatron accepted this input"
    with pytest.raises(LayoutError) as info:
        build_layout(ParallelismConfig.from_megatron(world_size=world, mcore="0.18", **kwargs),
                     mcore="0.18")
    assert info.value.megatron_error == megatron, str(info.value)


def test_megatron_018_ag_differs_from_dp_cp_with_tp_pp_dp_order(ps018):
    """Issue #4261 in 0.18.2 itself: rank 0's dp-cp group is [0,2,8,10], its AG group
    [0,2,4,6] (reference §3.2)."""
    kwargs = dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                  context_parallel_size=2, expert_model_parallel_size=2, order=TP_PP_DP)
    run = H.run_rank(ps018, 16, 0, kwargs, mcore="0.18", record=False,
                     after_init=_after_init(True, 2))
    assert run.getters["dp_cp"] == [0, 2, 8, 10]
    assert run.extra[0] == [0, 2, 4, 6]


# ------------------------------------------- every profile's API, from Megatron
def _module(version):
    return H.parity_module(ROOT, version)


@pytest.mark.parametrize("version,mcore", [("0.16.1", "0.16"), ("0.17.1", "0.16"),
                                           ("0.18.2", "0.18"), ("0.19.2", "0.19")])
def test_profile_api_matches_megatron(version, mcore):
    """The profile's keyword lists and capability flags are read off the release itself:
    ``initialize_model_parallel`` (0.16.1 lacks only rank_offset/local_world_size, which
    0.17.0 added), ``get_data_parallel_group``, the AG functions and the GTP getters."""
    ps = _module(version)
    prof = get_profile(mcore)
    init = set(inspect.signature(ps.initialize_model_parallel).parameters)
    missing_016 = {"rank_offset", "local_world_size"} if version == "0.16.1" else set()
    assert init == set(prof.init_kwargs) - missing_016
    assert set(inspect.signature(ps.get_data_parallel_group).parameters) == set(
        prof.dp_group_kwargs)
    assert hasattr(ps, "has_separate_all_gather_group") == prof.ag_in_init
    assert hasattr(ps, "create_all_gather_groups") == prof.ag_after_init
    assert hasattr(ps, "get_gtp_weight_remat_group") == prof.gtp_axis
    assert profile_for_version(version) == mcore


# ------------------------------------------------ parity: 0.16 vs 0.17.1
OFFSET_017 = [
    case(32, tp=2, pp=2, cp=2, offset=16, local=16, ag=True),          # AG uses the offset
    case(21, tp=2, pp=2, cp=2, ep=2, etp=2, n=2, order=TP_PP_DP, offset=5, local=16),
    case(16, cp=4, hcp=[2, 2], hybrid=True, offset=8, local=8),
    case(12, tp=2, pp=2, offset=4, local=8, ep=2, etp=1, n=2, ag=True),  # ranks 0..3 outside
    case(24, tp=2, cp=2, offset=8, local=16, ep=2, order=TP_PP_DP, pp=2, gloo=False),
    case(64, tp=2, pp=2, cp=2, ep=4, offset=32, local=32, ag=True, vpp=2),
]

CASES_017 = CASES + OFFSET_017


@pytest.mark.parametrize("world,kwargs", CASES_017)
def test_parity_017(ps017, world, kwargs):
    """Profile 0.16 against 0.17.1: the in-init AG group and its getter, rank_offset and
    local_world_size passed to Megatron itself (not shifted from an offset-0 run)."""
    layout = _check_world(ps017, "0.16", world, kwargs)
    assert layout.has("dp_cp_ag") == bool(kwargs.get("create_all_gather_group"))


@pytest.mark.parametrize("world,kwargs", INVALID + [
    pytest.param(8, dict(gtp_remat_size=2), id="no-gtp-keyword"),
    pytest.param(16, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                          context_parallel_size=2, local_world_size=12), id="local-world-12"),
])
def test_invalid_parity_017(ps017, world, kwargs):
    megatron = H.megatron_error(ps017, world, kwargs)
    assert megatron is not None, "Megatron accepted this input"
    with pytest.raises(LayoutError) as info:
        build_layout(ParallelismConfig.from_megatron(world_size=world, mcore="0.16", **kwargs),
                     mcore="0.16")
    assert info.value.megatron_error == megatron, str(info.value)
