"""The megatron-core 0.18 profile, pure: the 0.18 sequence (``notes/mcore018.md``) is
0.19's sequence without any GTP group, and 0.17's sequence with the all-gather groups
moved after init (``create_all_gather_groups()``, hard-coded order and offset 0); the
profile table, keywords and getter signature. The parity with megatron-core 0.17.1 and
0.18.2 is tests/parity/test_profile_018_parity.py.
"""

from __future__ import annotations

import pytest
from support.parity_cases import TP_PP_DP
from support.profile_cases import AG_DESCS, GTP_DESCS, REF16, calls
from support.profile_cases import lay as _lay

from simharness import (
    GroupNotInitialized,
    LayoutError,
    ParallelismConfig,
    SimharnessError,
    check,
)
from simharness.config import MCORE_PROFILES
from simharness.mcore import profile_for_version
from simharness.profiles import PROFILES, megatron_kwargs


def lay(mcore="0.18", **kw):
    return _lay(mcore, **kw)


# ------------------------------------------------------------ pure: profiles
def test_profile_table():
    assert MCORE_PROFILES == ("0.16", "0.18", "0.19") == tuple(PROFILES)
    flags = {name: (p.ag_in_init, p.ag_after_init, p.gtp_axis) for name, p in PROFILES.items()}
    assert flags == {"0.16": (True, False, False), "0.18": (False, True, False),
                     "0.19": (False, True, True)}
    assert lay(world_size=8).profile is PROFILES["0.18"]


@pytest.mark.parametrize("ver,profile", [
    ("0.16.0", "0.16"), ("0.16.1", "0.16"), ("0.17.0", "0.16"), ("0.17.1", "0.16"),
    ("0.18.0", "0.18"), ("0.18.2", "0.18"), ("0.18.3rc1", "0.18"), ("0.19.2", "0.19"),
    ("0.20.0.dev0", "0.19"), ("1.0.0", "0.19"),
])
def test_profile_for_version(ver, profile):
    assert profile_for_version(ver) == profile


def test_profile_for_version_before_016():
    with pytest.raises(SimharnessError, match="0.16"):
        profile_for_version("0.15.3")


# ------------------------------------------------------------ pure: sequence
SEQ_CASES = [
    REF16,
    dict(REF16, expert_model_parallel_size=2, num_distributed_optimizer_instances=2),
    dict(world_size=32, tensor_model_parallel_size=4, expert_model_parallel_size=8,
         expert_tensor_parallel_size=1, use_gloo_process_groups=False),
    dict(REF16, expert_model_parallel_size=2, use_tp_pp_dp_mapping=True),
    dict(world_size=16, context_parallel_size=4, hierarchical_context_parallel_sizes=[2, 2],
         hybrid_context_parallel=True, rank_offset=8),
]


@pytest.mark.parametrize("ag", [False, True])
@pytest.mark.parametrize("kw", SEQ_CASES)
def test_018_is_019_without_gtp_groups(kw, ag):
    """0.19's calls less the GTP/EGTP singletons and the _WITH_EGTP duplicates, in order,
    AG groups (after init, hard-coded order/offset) included."""
    new = calls(lay("0.19", **kw, create_all_gather_group=ag))
    assert [c for c in new if c[0] not in GTP_DESCS] == calls(
        lay("0.18", **kw, create_all_gather_group=ag))


@pytest.mark.parametrize("ag", [False, True])
@pytest.mark.parametrize("kw", SEQ_CASES)
def test_018_is_016_with_ag_moved_after_init(kw, ag):
    """0.18 = 0.17 with DATA_PARALLEL_GROUP_WITH_CP_AG moved out of the dp-cp loop into
    create_all_gather_groups() (dense, then expert when ep > 1), after every init call."""
    old = calls(lay("0.16", **kw, create_all_gather_group=ag))
    new = calls(lay("0.18", **kw, create_all_gather_group=ag))
    assert [c for c in new if c[0] not in AG_DESCS] == [c for c in old if c[0] not in AG_DESCS]
    ag_calls = [c for c in new if c[0] in AG_DESCS]
    assert bool(ag_calls) == ag
    assert new[len(new) - len(ag_calls):] == ag_calls  # all last
    assert ag_calls == [c for c in calls(lay("0.19", **kw, create_all_gather_group=ag))
                        if c[0] in AG_DESCS]


def test_018_tokens_and_kinds():
    layout = lay(**REF16, expert_model_parallel_size=2)
    assert not any(k.startswith("gtp") or "gtp" in k for k in layout.kinds)
    assert (layout.source("mp").token, layout.source("tp_dp_cp").token,
            layout.source("tp_dp").token) == ("tp-pp", "tp-dp-cp", "tp-dp")
    assert "gtp_remat" not in layout.source("mp").grid.names
    g19 = lay("0.19", **REF16, expert_model_parallel_size=2)
    assert g19.source("mp").token == "tp-gtp_remat-pp"
    for kind in layout.kinds:
        assert layout.groups(kind).tolist() == g19.groups(kind).tolist(), kind


def test_018_ag_groups_after_init_hard_coded_order_and_offset():
    """reference §3.2 (W=16 tp-cp-ep-pp-dp) and the offset: as in 0.19."""
    layout = lay(**REF16, expert_model_parallel_size=2, order=TP_PP_DP,
                 create_all_gather_group=True)
    assert layout.rank(0).groups["dp_cp"].ranks.tolist() == [0, 2, 8, 10]
    assert layout.rank(0).groups["dp_cp_ag"].ranks.tolist() == [0, 2, 4, 6]
    assert layout.has("ep_dp_ag")
    off = lay(**REF16, rank_offset=16, create_all_gather_group=True)
    assert off.groups("dp_cp")[0].tolist() == [16, 18, 20, 22]
    assert off.groups("dp_cp_ag")[0].tolist() == [0, 2, 4, 6]


def test_018_checks_follow_the_capabilities():
    kw = dict(REF16, expert_model_parallel_size=2, create_all_gather_group=True)
    codes = {m: {f.code for f in check(lay(m, **kw))} for m in MCORE_PROFILES}
    assert "ag-expert-none" in codes["0.16"]
    assert "ag-expert-none" not in codes["0.18"] and "ag-expert-none" not in codes["0.19"]
    for m in MCORE_PROFILES:
        assert not [f for f in check(lay(m, **kw)) if f.severity == "error"], m
    bad = check(lay("0.18", **kw, order=TP_PP_DP))
    mism = [f for f in bad if f.code == "ag-mismatch"]
    assert mism and "#4261" in mism[0].message
    notes = [f.message for f in check(lay("0.18", **kw)) if f.code == "communicators"]
    assert not any("_WITH_EGTP" in n for n in notes)


def test_018_keywords():
    for bad in ("create_all_gather_group", "gtp_remat_size", "expert_gtp_remat_size"):
        with pytest.raises(LayoutError) as info:
            ParallelismConfig.from_megatron(world_size=8, mcore="0.18", **{bad: 1})
        assert info.value.megatron_error == "TypeError", bad
    cfg = ParallelismConfig.from_megatron(world_size=32, mcore="0.18", rank_offset=16,
                                          local_world_size=16, tensor_model_parallel_size=2)
    assert (cfg.world_size, cfg.rank_offset) == (16, 16)
    assert set(megatron_kwargs("0.19")) - set(megatron_kwargs("0.18")) == {
        "gtp_remat_size", "expert_gtp_remat_size"}
    assert set(megatron_kwargs("0.16")) - set(megatron_kwargs("0.18")) == {
        "create_all_gather_group"}


def test_018_rejects_gtp():
    with pytest.raises(LayoutError) as info:
        lay(world_size=8, tensor_model_parallel_size=2, gtp_remat_size=2)
    assert info.value.megatron_error == "TypeError" and "0.19" in str(info.value)


def test_018_getter_signature():
    layout = lay(**REF16, create_all_gather_group=True)
    assert layout.get_data_parallel_group(0, with_context_parallel=True) == (0, 2, 4, 6)
    assert layout.get_data_parallel_group(0) == (0, 4)
    for bad in (dict(independent_all_gather=True), dict(with_gtp_remat=False)):
        with pytest.raises(LayoutError) as info:
            layout.get_data_parallel_group(0, with_context_parallel=True, **bad)
        assert info.value.megatron_error == "TypeError"
    with pytest.raises(GroupNotInitialized):
        layout.get_data_parallel_group(0, partial_data_parallel=True)
