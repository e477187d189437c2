"""The getter table (getters.py) against megatron-core's ``parallel_state``.

For every profile and every kind, ``getters.getter`` names a function that the matching
megatron-core release defines, called only with keywords that function takes (an index
only on a function returning a list), an alias that is itself a kind of the table, and a
label that spells the call; the numbered hierarchical-CP and hybrid DP-CP kinds included.
"""

from __future__ import annotations

import inspect

import pytest
from support import megatron_harness as H
from support.paths import ROOT

from simharness import ParallelismConfig, build_layout
from simharness.getters import Getter, getter, megatron_getters

RELEASES = [("0.16", "0.17.1"), ("0.18", "0.18.2"), ("0.19", "0.19.2")]
NUMBERED = ["hcp_l0", "hcp_l1", "hcp_l2", "hybrid_dp_cp_2", "hybrid_dp_cp_16"]


@pytest.mark.parametrize("mcore,release", RELEASES, ids=[r for _, r in RELEASES])
def test_every_getter_is_a_megatron_call(mcore, release):
    ps = H.parity_module(ROOT, release)
    table = megatron_getters(mcore)
    for kind in [*table, *NUMBERED]:
        g = getter(kind, mcore)
        assert isinstance(g, Getter), kind
        fn = getattr(ps, g.function)  # AttributeError: no such Megatron function
        params = inspect.signature(fn).parameters
        assert all(k in params for k, _ in g.kwargs), (kind, g.kwargs, list(params))
        assert g.alias is None or g.alias in table, (kind, g.alias)
        args = ", ".join(f"{k}={v}" for k, v in g.kwargs)
        suffix = "" if g.index is None else f"[{g.index}]"
        assert g.label == f"{g.function}({args}){suffix}", kind
        assert g.raises_when_missing == (dict(g.kwargs).get("check_initialized") is not False)


@pytest.mark.parametrize("mcore,release", [("0.16", "0.16.1"), *RELEASES],
                         ids=["0.16.1"] + [r for _, r in RELEASES])
def test_aliases_are_megatrons(mcore, release):
    """The aliases as megatron-core has them: with one optimizer instance, expert parallelism
    and (0.19) a GTP size of 1, the kinds the layout does not build whose getter still
    returns a group return the very group object of another getter of the table; that
    kind is the alias, and no other kind has one."""
    ps = H.parity_module(ROOT, release)
    table = megatron_getters(mcore)
    kw = dict(tensor_model_parallel_size=2, expert_model_parallel_size=2)
    built = build_layout(ParallelismConfig.from_megatron(world_size=8, mcore=mcore, **kw),
                         mcore=mcore).kinds

    def same_objects(ps):
        objs = {}
        for kind, g in table.items():
            try:
                objs[kind] = getattr(ps, g.function)(**dict(g.kwargs))
            except AssertionError:   # not built, and Megatron checks
                objs[kind] = None
        return {kind: [k for k in built if k in table and objs[k] is o]
                for kind, o in objs.items() if o is not None and kind not in built}

    for rank in (0, 5):
        run = H.run_rank(ps, 8, rank, kw, mcore=mcore, record=False, getters=False,
                         after_init=same_objects)
        assert run.extra == {k: [g.alias] for k, g in table.items() if g.alias}, rank


def test_numbered_and_unknown_kinds():
    hcp = getter("hcp_l2", "0.18")
    assert (hcp.function, hcp.index, hcp.kwargs) == (
        "get_hierarchical_context_parallel_groups", 2, ())
    assert hcp.label == "get_hierarchical_context_parallel_groups()[2]"
    hy = getter("hybrid_dp_cp_4", "0.16")
    assert (hy.function, hy.kwargs, hy.index) == (
        "get_hybrid_data_context_parallel_groups", (("group_size", 4),), None)
    assert hy.label == "get_hybrid_data_context_parallel_groups(group_size=4)"
    for kind in ("hcp_lx", "hcp_l", "hybrid_dp_cp_", "hybrid_dp_cp_a", "nope"):
        assert getter(kind, "0.18") is None, kind
    assert getter("dp_cp_ag", "0.16").kwargs == (("with_context_parallel", True),
                                                 ("independent_all_gather", True))
    assert getter("dp_cp_ag", "0.18") is None
    assert getter("dp", "0.19").kwargs == (("with_gtp_remat", False),)
    assert getter("dp", "0.18").kwargs == ()
    assert getter("intra_dp_cp", "0.16").alias == "dp_cp"
    built = megatron_getters.__wrapped__("0.19")  # the table as built, not a cached copy
    assert built == megatron_getters("0.19")
    assert {k for k, g in built.items() if g.alias} == {
        "intra_dp_cp", "intra_dp_cp_gloo", "intra_ep_dp", "intra_ep_dp_gloo", "gtp_remat_dp",
        "gtp_remat_dp_cp", "ep_gtp_remat_dp"}   # what each names: test_aliases_are_megatrons
    assert not getter("embd", "0.16").raises_when_missing
    assert getter("tp", "0.16").raises_when_missing
