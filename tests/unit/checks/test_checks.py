"""Each named check fires on the fault it is named for, and names the ranks.

Faults are injected into an exported plan (``Layout.to_dict`` -> edit ->
``Layout.from_dict``), the way a hand-edited or stale plan reaches a user.
"""

import numpy as np
import pytest
from support.layouts import edited, layout

from simharness import Layout, ParallelismConfig, build_layout, check


def codes(findings, severity=None):
    return {f.code for f in findings if severity is None or f.severity == severity}


def only(findings, code):
    out = [f for f in findings if f.code == code]
    assert out, f"no {code} finding in {[(f.code, f.message) for f in findings]}"
    return out


@pytest.mark.parametrize("mcore", ["0.16", "0.18", "0.19"])
@pytest.mark.parametrize("ag", [False, True])
def test_clean_layouts_have_no_errors_or_warnings(mcore, ag):
    findings = check(layout(mcore, create_all_gather_group=ag))
    assert codes(findings, "error") == set() and codes(findings, "warning") == set()
    # And the same plan read back from its export is still clean.
    again = check(Layout.from_json(layout(mcore, create_all_gather_group=ag).to_json()))
    assert codes(again, "error") == set()


def test_partition_names_missing_and_doubled_ranks():
    def edit(d):
        d["kinds"]["tp"]["groups"][0] = [0, 2]  # rank 2 twice, rank 1 nowhere
    f = only(check(edited(layout(), edit)), "partition")[0]
    assert f.severity == "error" and set(f.ranks) == {1, 2} and f.groups == ("tp",)


def test_group_size_mismatch():
    def edit(d):
        d["kinds"]["cp"]["groups"] = [[r] for r in range(16)]
    f = only(check(edited(layout(), edit)), "group-size")[0]
    assert "needs 2" in f.message and f.groups == ("cp",)


def test_orthogonality_when_dp_equals_tp():
    def edit(d):
        d["kinds"]["dp"]["groups"] = d["kinds"]["tp"]["groups"]
    fs = only(check(edited(layout(), edit)), "orthogonality")
    assert any(f.groups == ("tp", "dp") for f in fs)


def swap_dp_cp(d):
    g = d["kinds"]["dp_cp"]["groups"]
    g[0][1], g[1][1] = g[1][1], g[0][1]  # [0,2,4,6] <-> [1,3,5,7]: ranks 2 and 3


def test_corrupted_dp_group_is_named_by_composition_twin_and_config_checks():
    fs = check(edited(layout(), swap_dp_cp))
    assert {"composition", "gloo-twin", "matches-config"} <= codes(fs, "error")
    cfg = only(fs, "matches-config")[0]
    assert "group 0: [0, 3, 4, 6] should be [0, 2, 4, 6]" in cfg.message
    assert {2, 3} <= set(cfg.ranks)


def test_pipeline_groups_must_agree_with_the_expert_generator():
    def edit(d):
        g = d["kinds"]["pp"]["groups"]
        g[0], g[1] = g[1], g[0]
    assert "pp-agree" in codes(check(edited(layout(), edit)), "error")


def test_embedding_group_must_hold_first_and_last_stage():
    def edit(d):
        d["kinds"]["embd"]["groups"][0] = [8, 0]
    f = only(check(edited(layout(), edit)), "embedding")[0]
    assert f.severity == "error" and set(f.ranks) == {0, 8}


def test_upstream_misalignment_is_an_error_that_names_the_groups():
    lay = layout("0.19", create_all_gather_group=True, use_tp_pp_dp_mapping=True)
    fs = only(check(lay), "ag-mismatch")
    dense = [f for f in fs if f.groups == ("dp_cp_ag", "dp_cp")][0]
    assert "[0, 2, 4, 6]" in dense.message and "[0, 2, 8, 10]" in dense.message
    assert "#4261" in dense.message and set(dense.ranks) == set(range(16))
    assert any(f.groups == ("ep_dp_ag", "ep_dp") for f in fs)
    # The same job with the default order lines up.
    assert "ag-mismatch" not in codes(check(layout("0.19", create_all_gather_group=True)))


def test_ag_group_in_a_different_order_is_caught():
    def edit(d):
        g = d["kinds"]["dp_cp_ag"]["groups"][0]
        g[1], g[2] = g[2], g[1]
    f = only(check(edited(layout(create_all_gather_group=True), edit)), "ag-mismatch")[0]
    assert "different order" in f.message and set(f.ranks) == {0, 2, 4, 6}


def test_ag_group_must_be_its_own_nccl_communicator():
    def edit(d):
        d["kinds"]["dp_cp_ag"]["backend"] = "gloo"
    assert "ag-communicator" in codes(check(edited(layout(create_all_gather_group=True), edit)),
                                      "error")


def test_option_on_without_ag_groups():
    def edit(d):
        del d["kinds"]["dp_cp_ag"]
        for lp in d["creation_order"]["loops"]:
            for s in lp["steps"]:
                s["kinds"] = [k for k in s["kinds"] if k != "dp_cp_ag"]
    f = only(check(edited(layout(create_all_gather_group=True), edit)), "ag-missing")[0]
    assert "dp_cp_ag" in f.groups


def test_option_off_with_ag_groups_left_in_the_plan():
    def edit(d):
        d["config"]["create_all_gather_group"] = False
    fs = check(edited(layout(create_all_gather_group=True), edit))
    assert "ag-off" in codes(fs, "error")


def test_option_off_resolves_all_gather_to_dp_cp():
    lay = layout()
    f = only(check(lay), "ag-off")[0]
    assert f.severity == "info"
    for r in lay.ranks:
        col = lay.resolve_collectives(r)
        assert col.dense_all_gather == col.dense_reduce_scatter
        assert col.dense_all_gather.ranks == tuple(lay.group_of("dp_cp", r).tolist())


@pytest.mark.parametrize("mcore,added", [("0.16", 1), ("0.18", 2), ("0.19", 2)])
def test_ag_cost_equals_the_communicator_difference(mcore, added):
    on, off = layout(mcore, create_all_gather_group=True), layout(mcore)
    diff = on.communicators_per_rank()["nccl"] - off.communicators_per_rank()["nccl"]
    assert set(diff.tolist()) == {added}
    f = only(check(on), "ag-cost")[0]
    assert f"adds {added} NCCL communicator(s) per rank" in f.message


def test_expert_parameters_have_no_ag_group_under_016():
    lay = layout("0.16", create_all_gather_group=True)
    assert "ag-expert-none" in codes(check(lay), "info")
    col = lay.resolve_collectives(3)
    assert col.dense_overlap and not col.expert_overlap


def test_ag_scope_warning_with_several_optimizer_instances():
    lay = layout(create_all_gather_group=True, num_distributed_optimizer_instances=2)
    f = only(check(lay), "ag-scope")[0]
    assert f.severity == "warning" and "2 ranks" in f.message


def test_creation_order_that_skips_groups_is_caught():
    def edit(d):
        for lp in d["creation_order"]["loops"]:
            if any("dp" in s["kinds"] for s in lp["steps"]):
                lp["n_iter"] = lp["n_iter"] // 2  # the last dp groups are never created
    fs = check(edited(layout(), edit))
    assert "creation-order" in codes(fs, "error")


@pytest.mark.parametrize("kw,code", [
    (dict(world_size=6, tensor_model_parallel_size=2, expert_tensor_parallel_size=3),
     "suspicious-etp"),
    (dict(world_size=24, tensor_model_parallel_size=4, expert_tensor_parallel_size=3),
     "suspicious-etp"),
    (dict(world_size=12, tensor_model_parallel_size=4, expert_tensor_parallel_size=2,
          expert_model_parallel_size=3), "suspicious-ep"),
    (dict(world_size=8, tensor_model_parallel_size=2, context_parallel_size=4,
          num_distributed_optimizer_instances=2), "suspicious-instances"),
])
def test_suspicious_inputs_are_warnings(kw, code):
    fs = check(build_layout(ParallelismConfig(**kw)))
    assert code in codes(fs, "warning") and not codes(fs, "error")


def test_check_handles_a_large_world_quickly_enough_to_run_here():
    lay = build_layout(ParallelismConfig(world_size=65536, tensor_model_parallel_size=8,
                                         pipeline_model_parallel_size=8,
                                         create_all_gather_group=True))
    fs = check(lay)
    assert not codes(fs, "error")
    assert np.array_equal(lay.groups("dp_cp_ag"), lay.groups("dp_cp"))


def test_creation_order_that_joins_other_groups_as_many_times_is_caught():
    """The creation sequence and the per-rank view disagree in content with the same count:
    rank 15's cp group is never created, and it joins a second tp group instead."""
    def edit(d):
        for lp in d["creation_order"]["loops"]:
            if [s["kinds"] for s in lp["steps"]] == [["cp"]]:
                lp["n_iter"] -= 1  # the last cp group ([13, 15]) is never created
        d["kinds"]["tp"]["groups"][6] = [12, 15]  # rank 15 joins tp [12, 15] and [14, 15]
    lay = edited(layout(), edit)
    view = lay.rank(15).groups
    joined = [gc for gc in lay.creation_order if 15 in gc.ranks]
    assert len(joined) == len(view)  # same length: only the contents differ
    messages = [f.message for f in only(check(lay), "creation-order")]
    assert ("rank 15: the groups it joins in the creation sequence differ from its per-rank "
            "view") in messages


@pytest.mark.parametrize("offset", [0, 16])
def test_4261_cause_names_the_rank_offset_exactly_when_there_is_one(offset):
    """A misaligned AG group under 0.19 with the default order: the #4261 cause (the
    generator's hard-coded rank_offset 0) is named when the job has an offset, not otherwise."""
    cfg = ParallelismConfig.from_megatron(
        world_size=16 + offset, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
        context_parallel_size=2, rank_offset=offset, local_world_size=16, mcore="0.19")
    lay = build_layout(cfg.replace(create_all_gather_group=True), "0.19")

    def edit(d):  # the AG groups inside the job's ranks, one in another order
        groups = lay.groups("dp_cp").tolist()
        groups[0][1], groups[0][2] = groups[0][2], groups[0][1]
        d["kinds"]["dp_cp_ag"]["groups"] = groups
    message = only(check(edited(lay, edit)), "ag-mismatch")[0].message
    if offset:
        assert "cause:" in message and "#4261" in message
        assert f"rank_offset {offset}" in message
    else:
        assert "cause" not in message and "#4261" not in message
