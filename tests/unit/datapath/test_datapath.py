"""Data-path replay, pure parts (no processes): tags, the exact reference, the plan swap,
the analysis of hand-made observations, and bad input (one CLI line, exit 2)."""

from __future__ import annotations

import numpy as np
import pytest
from support.cli_errors import fails

from simharness import ParallelismConfig, build_layout
from simharness.replay.datapath import (
    DataPathOptions,
    analyse_megatron,
    buckets_of,
    check_data_replayable,
    max_steps,
    pack_tag,
    parse_swap,
    reference,
    swap_ranks,
    unpack_tag,
    variants,
)
from simharness.replay.options import ReplayError


def cfg(world, **kw):
    return ParallelismConfig(world_size=world, **kw)


def test_tags_round_trip_at_the_limits():
    for src, shard, bucket, step in [(0, 0, 0, 0), (8, 1, 2, 3), ((1 << 22) - 1, 8191, 16383,
                                                                    16383)]:
        tag = pack_tag(src, shard, bucket, step)
        assert 0 <= tag < 1 << 63  # a non-negative int64
        assert unpack_tag(tag) == (src, shard, bucket, step)


def test_reference_is_exact_in_any_summation_order():
    """Every value is a short dyadic rational: float64 sums in any order give the same bits,
    which is what makes 'bit-identical' a fair test of a reduce-scatter."""
    lay = build_layout(cfg(16, tensor_model_parallel_size=2), "0.16")
    opts = DataPathOptions(steps=max_steps(8))
    ref = reference(lay, opts)
    from simharness.replay.datapath import grad_term, initial_params, step_lr_exponent
    members = lay.groups("dp_cp")[1].tolist()
    numel = opts.shard_numel * len(members)
    p = initial_params(1, 0, numel)
    lr = 2.0 ** -step_lr_exponent(len(members))
    for t in range(opts.steps):
        g = np.zeros(numel)
        for r in reversed(members):       # the other order, one term at a time
            g = g + (p + grad_term(r, t, 0, numel))
        p = p - lr * g
    want = ref[("dense", 1, 0)]["final"]
    assert np.array_equal(p.view(np.int64), want.view(np.int64))
    scaled = want * 2.0 ** (opts.steps * step_lr_exponent(len(members)))
    assert np.array_equal(scaled, np.round(scaled))  # dyadic: exact in float64
    assert len({float(x) for x in want}) > 4          # and not a trivial constant


def test_variants_put_the_plan_first():
    on = build_layout(cfg(8, tensor_model_parallel_size=2, create_all_gather_group=True), "0.16")
    v = variants(on)
    assert [x.name for x in v] == ["separate", "shared"] and v[0].is_plan
    assert v[0].ag == {"dense": "plan", "expert": "rs"}   # 0.16: no expert AG group
    off = build_layout(cfg(16, tensor_model_parallel_size=2, expert_model_parallel_size=2,
                           expert_tensor_parallel_size=1), "0.19")
    v = variants(off)
    assert [x.name for x in v] == ["shared", "separate"] and v[0].is_plan
    assert v[1].ag == {"dense": "twin", "expert": "twin"}  # 0.19 makes an expert AG group


def test_swap_between_groups_and_within_one():
    lay = build_layout(cfg(8, tensor_model_parallel_size=2, create_all_gather_group=True), "0.16")
    bad = swap_ranks(lay, 2, 3)
    assert bad.groups("dp_cp_ag").tolist()[:2] == [[0, 3, 4, 6], [1, 2, 5, 7]]
    assert bad.groups("dp_cp").tolist() == lay.groups("dp_cp").tolist()
    same = swap_ranks(lay, 0, 2)
    assert same.groups("dp_cp_ag").tolist()[0] == [2, 0, 4, 6]
    assert parse_swap("4, 8@dp_cp") == (4, 8, "dp_cp")


def test_analysis_names_whose_shard_landed_where():
    """Hand-made observations: rank 0 received rank 3's shard in slot 1."""
    lay = build_layout(cfg(4, create_all_gather_group=True), "0.16")
    opts = DataPathOptions(steps=1, dense_buckets=1, expert_buckets=0, shard_numel=2)
    ref = reference(lay, opts)
    r = ref[("dense", 0, 0)]
    gathered = []
    for rank in range(4):
        b = buckets_of(lay, rank, opts)[0]
        j = b.shard_of(rank)
        tags = [[s, s, 0, 0, 0] for s in range(4)]
        final = r["final"].tolist()
        if rank == 0:
            tags[1] = [3, 3, 0, 0, 0]
            final[2:4] = r["final"][6:8].tolist()
        obs = {"tags": [tags], "reduced": [r["reduced"][0][2 * j:2 * j + 2].tolist()],
               "final": final, "ag_ranks": [0, 1, 2, 3]}
        gathered.append({"rank": rank, "variants": {v: {"step_s": [0.01], "buckets": [obs]}
                                                    for v in ("shared", "separate")}})
    out = analyse_megatron(lay, opts, gathered)
    errors = [f for f in out["findings"] if f.severity == "error"]
    assert [f.code for f in errors].count("datapath-ag-source") == 2  # both variants
    msg = errors[0].message
    assert "rank 0 holds shard 1 of dense bucket 0 at step 0 but it came from rank 3 " \
           "(its shard 3), expected rank 1" in msg, msg
    assert errors[0].ranks == (0, 1, 3)
    params = [f for f in errors if f.code == "datapath-params"]
    assert params and params[0].ranks == (0,)
    assert not out["variants"]["separate"]["ok"] and out["variants"]["separate"]["plan"]


def test_refused_before_any_process_starts():
    lay = build_layout(cfg(8, context_parallel_size=2, num_distributed_optimizer_instances=2),
                       "0.19")
    with pytest.raises(ReplayError, match="num_distributed_optimizer_instances=2"):
        check_data_replayable(lay, DataPathOptions())
    lay = build_layout(cfg(16), "0.19")
    with pytest.raises(ReplayError, match=r"--steps 40: .* at most \d+ steps"):
        check_data_replayable(lay, DataPathOptions(steps=40))
    for bad, match in ((dict(kind="deepspeed"), "kind 'deepspeed' is unknown"),
                       (dict(steps=0), "steps must be"), (dict(backend="mpi"), "backend 'mpi'"),
                       (dict(dense_buckets=0, expert_buckets=0), "nothing to replay"),
                       (dict(timeout=-1.0), "timeout")):
        with pytest.raises(ReplayError, match=match):
            DataPathOptions(**bad).validate()


@pytest.mark.parametrize("args, fragments", [
    (["-n", "8", "--tp", "3"], ["world_size (8) is not divisible by 3"]),
    (["-n", "8", "--kind", "deepspeed"], ["--kind", "deepspeed"]),
    (["-n", "8", "--swap", "1,x"], ["must look like A,B"]),
    (["-n", "8", "--swap", "1,2"], ["no dp_cp_ag groups", "create_all_gather_group is off"]),
    (["-n", "8", "--create-all-gather-group", "--swap", "1,99"], ["rank 99 is outside"]),
    (["-n", "8", "--steps", "40"], ["--steps 40"]),
    (["-n", "8", "--cp", "2", "--num-distributed-optimizer-instances", "2"],
     ["one distributed-optimizer instance"]),
    (["-n", "4096"], ["4096 gloo processes"]),
    (["--plan", "no/such/plan.json"], ["no/such/plan.json", "no such file"]),
    (["--plan", "p.json", "--tp", "2"], ["drop the configuration flags"]),
])
def test_cli_bad_input_is_one_line(args, fragments):
    fails(["replay-data", *args], *fragments)


def test_large_arrays_travel_as_digests_and_still_compare_bit_for_bit():
    from simharness.replay.datapath import FULL_VALUES, encode_values, value_difference

    a = np.arange(FULL_VALUES + 1, dtype=np.float64) / 8
    enc = encode_values(a)
    assert set(enc) == {"n", "sha256"}
    assert value_difference(enc, a) is None
    b = a.copy()
    b[7] = -0.0 if b[7] == 0 else b[7] + 2.0 ** -40
    assert "differ (SHA-256" in value_difference(enc, b)
    assert value_difference([0.0], np.array([-0.0])) is not None  # bits, not ==


def test_plans_that_leave_a_rank_without_its_group_are_refused():
    from simharness import Layout

    lay = build_layout(cfg(8, tensor_model_parallel_size=2, create_all_gather_group=True), "0.16")
    d = lay.to_dict()
    d["kinds"]["dp_cp_ag"]["groups"] = [[0, 2, 4, 6], [0, 3, 5, 7]]   # rank 0 twice, 1 never
    with pytest.raises(ReplayError, match=r"dp_cp_ag does not put every rank .*\[0, 1\]"):
        check_data_replayable(Layout.from_dict(d), DataPathOptions())
    d = build_layout(cfg(4, create_all_gather_group=True), "0.16").to_dict()
    d["kinds"]["dp_cp_ag"]["groups"] = [[0, 1], [2, 3]]  # the creation order makes one group
    with pytest.raises(ReplayError, match=r"creates no dp_cp_ag group for rank\(s\) \[2, 3\]"):
        check_data_replayable(Layout.from_dict(d), DataPathOptions())
