"""The data-path comparison on simulated observations: what every rank would
report from a correct replay (built from the single-process reference), then one fault at
a time, and every finding and summary field the analysis returns, in full.

World 4, expert parallelism 2, the all-gather option on (0.16): the dense buckets are
reduce-scattered on dp_cp [0, 1, 2, 3] and gathered on dp_cp_ag (the plan, variant
``separate``) or on dp_cp itself (``shared``); the expert buckets on ep_dp [0, 2] / [1, 3].
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from simharness import Finding, ParallelismConfig, build_layout
from simharness.replay.datapath import (
    MAX_AG_FINDINGS,
    SEPARATE,
    SHARED,
    DataPathOptions,
    analyse_fsdp,
    analyse_megatron,
    buckets_of,
    fsdp_batch,
    fsdp_reference,
    fsdp_weights,
    grad_term,
    initial_params,
    reference,
    step_lr_exponent,
    value_difference,
)

LAY = build_layout(ParallelismConfig(world_size=4, expert_model_parallel_size=2,
                                     create_all_gather_group=True), "0.16")
OPTS = DataPathOptions(steps=2, dense_buckets=1, expert_buckets=1, shard_numel=2)
# A finding's kinds name the kind the all-gather ran on: dp_cp in the shared variant (not
# the plan's dp_cp_ag), the plan's all-gather kind in the separate one.
SEP = "separate (dense AG on dp_cp_ag, expert AG on ep_dp)"
SHA = "shared (dense AG on dp_cp, expert AG on ep_dp)"
STEP_S = {0: [0.5, 0.25], 1: [0.25, 1.0], 2: [0.125, 0.5], 3: [0.75, 0.0625]}


def observations(lay=LAY, opts=OPTS):
    """What each rank reports from a correct replay: the right sender in every slot, its
    reduced shard and the final parameters of the reference, per variant."""
    ref = reference(lay, opts)
    out = []
    for rank in lay.ranks:
        bks = []
        for b in buckets_of(lay, rank, opts):
            r = ref[(b.side, b.partition, b.number)]
            j, S = b.shard_of(rank), opts.shard_numel
            want = sorted(b.replicas)
            bks.append({"tags": [[[src, s, b.number, t, 0] for s, src in enumerate(want)]
                                 for t in range(opts.steps)],
                        "reduced": [r["reduced"][t][j * S:(j + 1) * S].tolist()
                                    for t in range(opts.steps)],
                        "final": r["final"].tolist(), "ag_ranks": list(want)})
        out.append({"rank": rank, "variants": {
            v: {"step_s": STEP_S.get(rank, [0.125] * opts.steps), "buckets": copy.deepcopy(bks)}
            for v in (SEPARATE, SHARED)}})
    return out


def only(gathered, variant):
    """The other variant made correct again (a fault injected into one variant only)."""
    clean = observations()
    for res, ok in zip(gathered, clean, strict=True):
        other = SHARED if variant == SEPARATE else SEPARATE
        res["variants"][other] = ok["variants"][other]
    return gathered


def bucket(gathered, rank, variant, side):
    return gathered[rank]["variants"][variant]["buckets"][0 if side == "dense" else 1]


def errors(out):
    return [f for f in out["findings"] if f.severity == "error"]


# ------------------------------------------------------------------ reference
def test_reference_trains_each_partition_on_its_replicas():
    opts = DataPathOptions(steps=3, dense_buckets=2, expert_buckets=1, shard_numel=2)
    ref = reference(LAY, opts)
    # dense: one partition (dp_cp [0, 1, 2, 3]), buckets 0 and 1; expert: ep_dp [0, 2] and
    # [1, 3], bucket 2
    parts = {("dense", 0, 0): [0, 1, 2, 3], ("dense", 0, 1): [0, 1, 2, 3],
             ("expert", 0, 2): [0, 2], ("expert", 1, 2): [1, 3]}
    assert set(ref) == set(parts)
    for (side, g, number), members in parts.items():
        n = len(members)
        numel = 2 * n
        lr = 2.0 ** -step_lr_exponent(n)
        p = initial_params(g, number, numel)
        reduced = []
        for t in range(3):
            g_t = np.stack([grad_term(r, t, number, numel) for r in members]).sum(0) + n * p
            reduced.append(g_t)
            p = p - lr * g_t
        got = ref[(side, g, number)]
        assert got["lr"] == lr == {4: 0.125, 2: 0.25}[n]
        assert np.array_equal(got["final"], p), (side, g, number)
        assert len(got["reduced"]) == 3
        assert all(np.array_equal(a, b) for a, b in zip(got["reduced"], reduced, strict=True))
    # no expert buckets asked for: no expert entries; the numbering still counts them
    ref = reference(LAY, DataPathOptions(steps=1, dense_buckets=0, expert_buckets=2))
    assert sorted(ref) == [("expert", 0, 0), ("expert", 0, 1), ("expert", 1, 0),
                           ("expert", 1, 1)]


def test_value_difference_compares_bits():
    assert value_difference([1.0, 2.0], np.array([1.0, 2.0])) is None
    assert value_difference([0.0, -0.0, 3.0], np.array([0.0, 0.0, 3.5])) == \
        "2 of 3 elements differ, first element 1: got -0.0, expected 0.0"
    assert value_difference([1.0], np.array([1.0, 2.0])) == "1 elements, expected 2"
    assert value_difference([[1.0], [2.0]], np.array([[1.0, 2.0]])) is None  # both flattened
    digest = {"n": 3, "sha256": "0" * 64}
    assert value_difference(digest, np.zeros(2)) == "3 elements, expected 2"
    assert value_difference(digest, np.zeros(3)) == \
        "the 3 elements differ (SHA-256 of their bits)"


# ------------------------------------------------------------------ megatron
def test_a_correct_replay_matches_on_both_variants():
    out = analyse_megatron(LAY, OPTS, observations())
    tail = ("the parameters after 2 steps are bit-identical to the single-process reference "
            "on all 4 ranks (1 dense + 1 expert buckets, every reduced gradient shard too)")
    assert out["findings"] == [
        Finding("datapath-match", "info", f"{SEP}: {tail}", (), ("separate",)),
        Finding("datapath-match", "info", f"{SHA}: {tail}", (), ("shared",))]
    # each step's time is the slowest rank's; the median and the minimum over the steps
    summary = {"ok": True, "ranks_matched": 4, "attribution_errors": 0,
               "step_s": [0.75, 1.0], "median_step_s": 0.875, "min_step_s": 0.75}
    assert out["variants"] == {
        "separate": {"label": SEP[10:-1], "plan": True, **summary},
        "shared": {"label": SHA[8:-1], "plan": False, **summary}}
    # the ranks may come in any order
    assert analyse_megatron(LAY, OPTS, observations()[::-1]) == out


def test_a_shard_from_the_wrong_rank():
    g = observations()
    # rank 1, dense bucket, step 1: slot 2 holds rank 3's shard 3 (expected rank 2's)
    bucket(g, 1, SEPARATE, "dense")["tags"][1][2] = [3, 3, 0, 1, 0]
    out = analyse_megatron(LAY, OPTS, only(g, SEPARATE))
    assert errors(out) == [Finding(
        "datapath-ag-source", "error",
        "separate: rank 1 holds shard 2 of dense bucket 0 at step 1 but it came from rank 3 "
        "(its shard 3), expected rank 2; the all-gather ran on [0, 1, 2, 3], the dp_cp "
        "replicas are [0, 1, 2, 3]", (1, 2, 3), ("separate", "dp_cp_ag"))]
    assert out["variants"]["separate"]["ok"] is False
    assert out["variants"]["separate"]["ranks_matched"] == 3
    assert out["variants"]["separate"]["attribution_errors"] == 1
    assert out["variants"]["shared"]["ok"] is True
    assert [f.code for f in out["findings"]] == ["datapath-ag-source", "datapath-match"]


def test_a_shard_from_the_right_rank_in_the_wrong_place_or_time():
    g = observations()
    # expert bucket of rank 2 (ep_dp [0, 2]): slot 0 holds rank 0's shard 1
    bucket(g, 2, SHARED, "expert")["tags"][0][0] = [0, 1, 1, 0, 0]
    # rank 3's expert bucket, slot 1: rank 3's shard, but sent at step 0 for step 1
    bucket(g, 3, SHARED, "expert")["tags"][1][1] = [3, 1, 1, 0, 0]
    # rank 0, dense, step 0, slot 0: bucket 1's data from rank 0
    bucket(g, 0, SHARED, "dense")["tags"][0][0] = [0, 0, 1, 0, 0]
    out = analyse_megatron(LAY, OPTS, only(g, SHARED))
    tail = "the all-gather ran on {}, the {} replicas are {}"
    assert errors(out) == [
        Finding("datapath-ag-source", "error",
                "shared: rank 0 holds shard 0 of dense bucket 0 at step 0 from rank 0, sent as "
                "bucket 1 at step 0 (expected bucket 0 at step 0); "
                + tail.format([0, 1, 2, 3], "dp_cp", [0, 1, 2, 3]), (0,), ("shared", "dp_cp")),
        Finding("datapath-ag-source", "error",
                "shared: rank 2 holds shard 0 of expert bucket 0 at step 0 from rank 0, but as "
                "its shard 1; " + tail.format([0, 2], "ep_dp", [0, 2]), (0, 2),
                ("shared", "ep_dp")),
        Finding("datapath-ag-source", "error",
                "shared: rank 3 holds shard 1 of expert bucket 0 at step 1 from rank 3, sent as "
                "bucket 1 at step 0 (expected bucket 1 at step 1); "
                + tail.format([1, 3], "ep_dp", [1, 3]), (3,), ("shared", "ep_dp"))]
    assert out["variants"]["shared"]["attribution_errors"] == 3
    assert out["variants"]["shared"]["ranks_matched"] == 1  # ranks 0, 2, 3 misrouted


def test_mixed_senders_extra_slots_and_repeats():
    g = observations()
    dense = bucket(g, 2, SEPARATE, "dense")
    dense["tags"][0][1] = [1, 1, 0, 0, 1]            # mixed: first sender rank 1
    dense["tags"][1][1] = [1, 1, 0, 1, 1]            # the same at step 1: counted twice
    bucket(g, 0, SEPARATE, "expert")["tags"][0].append([1, 1, 1, 0, 0])  # a slot too many
    dense["ag_ranks"] = [3, 2, 1, 0]
    out = analyse_megatron(LAY, OPTS, only(g, SEPARATE))
    assert errors(out) == [
        Finding("datapath-ag-source", "error",
                "separate: rank 0 holds shard 2 of expert bucket 0 at step 0 but it came from "
                "rank 1 (its shard 1), expected rank None; the all-gather ran on [0, 2], the "
                "ep_dp replicas are [0, 2]", (0, 1), ("separate", "ep_dp")),
        Finding("datapath-ag-source", "error",
                "separate: rank 2 holds shard 1 of dense bucket 0 at step 0, but its elements "
                "came from several senders (first rank 1); expected rank 1; the all-gather ran "
                "on [3, 2, 1, 0], the dp_cp replicas are [0, 1, 2, 3] (2 times over the dense "
                "buckets and steps)", (1, 2), ("separate", "dp_cp_ag"))]
    assert out["variants"]["separate"]["attribution_errors"] == 3


def test_more_misrouted_shards_than_listed():
    g = observations()
    # every dense slot of every rank at step 0 names rank 0's shard 0: 3 wrong per rank
    # (12), plus expert slot 1 of every rank (4): 16
    for r in range(4):
        for s in range(4):
            bucket(g, r, SHARED, "dense")["tags"][0][s] = [0, 0, 0, 0, 0]
        bucket(g, r, SHARED, "expert")["tags"][0][1] = [0, 0, 1, 0, 0]
    out = analyse_megatron(LAY, OPTS, only(g, SHARED))
    found = [f for f in errors(out) if f.code == "datapath-ag-source"]
    assert len(found) == MAX_AG_FINDINGS + 1
    # sorted by step, rank, slot: rank 0's dense 1-3 and expert 1, rank 1's dense 1-3 ...
    assert [f.message.split(" holds shard ")[0] for f in found[:4]] == ["shared: rank 0"] * 4
    assert found[-1] == Finding(
        "datapath-ag-source", "error", "shared: 4 more misrouted shard(s) on rank(s) [3]",
        (3,), ("shared",))


def test_wrong_values_after_the_reduce_scatter_and_the_steps():
    g = observations()
    # rank 2's reduced dense shard at step 1 and its final parameters; rank 1's final ones
    bucket(g, 2, SEPARATE, "dense")["reduced"][1][1] += 0.5
    bucket(g, 2, SEPARATE, "dense")["final"][0] = 9.0
    bucket(g, 1, SEPARATE, "expert")["final"][3] = 7.0
    ref = reference(LAY, OPTS)
    want_rs = float(ref[("dense", 0, 0)]["reduced"][1][5])
    out = analyse_megatron(LAY, OPTS, only(g, SEPARATE))
    f_dense0 = ref[("dense", 0, 0)]["final"][0]
    f_exp3 = float(ref[("expert", 1, 1)]["final"][3])
    assert errors(out) == [
        Finding("datapath-reduce-scatter", "error",
                f"{SEP}: the reduced gradient shards differ from the single-process reference "
                f"on 1 rank(s) [2]; rank 2: step 1, dense bucket 0 (shard 2): 1 of 2 elements "
                f"differ, first element 1: got {want_rs + 0.5!r}, expected {want_rs!r}", (2,),
                ("separate",)),
        Finding("datapath-params", "error",
                f"{SEP}: the parameters after 2 steps differ from the single-process reference "
                f"on 2 rank(s) [1, 2]; rank 1: expert bucket 0: 1 of 4 elements differ, first "
                f"element 3: got 7.0, expected {f_exp3!r}", (1, 2), ("separate",))]
    assert f_dense0 != 9.0
    s = out["variants"]["separate"]
    assert (s["ok"], s["ranks_matched"], s["attribution_errors"]) == (False, 2, 0)


def test_value_errors_after_misrouted_shards_say_they_follow():
    g = observations()
    bucket(g, 1, SHARED, "dense")["tags"][0][2] = [3, 3, 0, 0, 0]
    bucket(g, 3, SHARED, "dense")["final"][2] = 5.0
    out = analyse_megatron(LAY, OPTS, only(g, SHARED))
    (params,) = [f for f in errors(out) if f.code == "datapath-params"]
    assert params.message.startswith(
        f"{SHA}: the parameters after 2 steps differ from the single-process reference on 1 "
        "rank(s) [3] (follows from the all-gather errors above); rank 3: dense bucket 0: ")
    # ranks with misrouted shards and ranks with wrong values: both unmatched, once each
    assert out["variants"]["shared"]["ranks_matched"] == 2


# ---------------------------------------------------------------------- fsdp2
def test_fsdp_reference_is_sgd_on_the_summed_loss():
    w1, w2 = fsdp_weights(1)
    assert w1.shape == (16, 8) and w2.shape == (4, 16)
    members, lr = [0, 2], 2.0 ** -8
    for t in range(2):   # loss = sum over ranks of sum(c * (x W1^T W2^T)): gradients by hand
        g1, g2 = np.zeros_like(w1), np.zeros_like(w2)
        for r in members:
            x, c = fsdp_batch(r, t)
            h = x @ w1.T                       # (batch, hidden)
            g2 += np.einsum("bo,bh->oh", c, h)
            g1 += np.einsum("bh,bi->hi", c @ w2, x)
        w1, w2 = w1 - lr * g1, w2 - lr * g2
    got = fsdp_reference(members, 1, 2)
    assert np.array_equal(got[0], w1) and np.array_equal(got[1], w2)
    assert not np.array_equal(got[0], fsdp_reference([0], 1, 2)[0])   # every replica counts


FS = build_layout(ParallelismConfig(world_size=4, tensor_model_parallel_size=2), "0.16")
FOPTS = DataPathOptions(kind="fsdp2", steps=2)


def fsdp_observations():
    groups = FS.groups("dp_cp").tolist()       # [0, 2] and [1, 3]
    out = []
    for rank in range(4):
        g = next(i for i, m in enumerate(groups) if rank in m)
        w = fsdp_reference(groups[g], g, FOPTS.steps)
        out.append({"rank": rank, "variants": {
            name: {"step_s": STEP_S[rank], "weights": [a.tolist() for a in w],
                   "rs_group": {"separate": name == SEPARATE, "ranks": groups[g],
                                "shard_ranks": groups[g]}}
            for name in (SHARED, SEPARATE)}})
    return out


def test_fsdp_correct_replay():
    out = analyse_fsdp(FS, FOPTS, fsdp_observations())
    tail = ("the weights after 2 steps are bit-identical to the single-process reference on "
            "all 4 ranks")
    lab_sh = "reduce-scatter and all-gather on the shard group"
    lab_sep = "set_separate_reduce_scatter_group(): reduce-scatter on its own group"
    assert out["findings"] == [
        Finding("datapath-match", "info", f"fsdp2 shared ({lab_sh}): {tail}", (), ("shared",)),
        Finding("datapath-match", "info", f"fsdp2 separate ({lab_sep}): {tail}", (),
                ("separate",))]
    common = {"plan": None, "ok": True, "ranks_matched": 4, "step_s": [0.75, 1.0],
              "median_step_s": 0.875, "min_step_s": 0.75}
    assert out["variants"] == {"shared": {"label": lab_sh, **common},
                               "separate": {"label": lab_sep, **common}}


def test_fsdp_wrong_weights_and_groups():
    g = fsdp_observations()
    g[3]["variants"][SEPARATE]["weights"][1][0][2] += 1.0
    g[1]["variants"][SEPARATE]["weights"][0][0][0] += 1.0
    g[2]["variants"][SHARED]["rs_group"]["separate"] = True                 # not the shard group
    g[1]["variants"][SEPARATE]["rs_group"]["ranks"] = [1, 2]              # other ranks
    g[3]["variants"][SEPARATE]["rs_group"]["separate"] = False
    out = analyse_fsdp(FS, FOPTS, g)
    want = float(fsdp_reference([1, 3], 1, 2)[0][0][0])
    assert errors(out) == [
        Finding("datapath-fsdp-group", "error",
                "fsdp2 shared: rank 2: reduce-scatter group [0, 2] (its own), shard group "
                "[0, 2], expected the shard group with the same ranks (1 rank(s))", (2,),
                ("shared",)),
        Finding("datapath-fsdp-group", "error",
                "fsdp2 separate: rank 1: reduce-scatter group [1, 2] (its own), shard group "
                "[1, 3], expected a separate group with the same ranks (2 rank(s))", (1, 3),
                ("separate",)),
        Finding("datapath-params", "error",
                "fsdp2 separate: the weights after 2 steps differ from the single-process "
                "reference on rank(s) [1, 3]; rank 1: layer 0: 1 of 128 elements differ, first "
                f"element 0: got {want + 1.0!r}, expected {want!r}", (1, 3),
                ("separate",))]
    assert out["variants"]["shared"]["ok"] is False
    assert out["variants"]["shared"]["ranks_matched"] == 4   # the weights are right
    assert out["variants"]["separate"]["ranks_matched"] == 2
    # rank 3's own message: layer 1
    g2 = copy.deepcopy(fsdp_observations())
    g2[3]["variants"][SHARED]["weights"][1][0][2] += 1.0
    (f,) = errors(analyse_fsdp(FS, FOPTS, g2))
    assert f.message.startswith("fsdp2 shared: the weights after 2 steps differ from the "
                                "single-process reference on rank(s) [3]; rank 3: layer 1: "
                                "1 of 64 elements differ, first element 2:")


@pytest.mark.parametrize("steps", [1, 3])
def test_fsdp_summary_steps(steps):
    opts = DataPathOptions(kind="fsdp2", steps=steps)
    g = fsdp_observations()
    groups = FS.groups("dp_cp").tolist()
    for res in g:
        gi = next(i for i, m in enumerate(groups) if res["rank"] in m)
        for name in (SHARED, SEPARATE):
            v = res["variants"][name]
            v["step_s"] = [0.25 * (res["rank"] + 1) + t for t in range(steps)]
            v["weights"] = [a.tolist() for a in fsdp_reference(groups[gi], gi, steps)]
    out = analyse_fsdp(FS, opts, g)
    want = [1.0 + t for t in range(steps)]
    assert out["variants"]["shared"]["step_s"] == want
    assert out["variants"]["shared"]["min_step_s"] == 1.0
    assert out["variants"]["shared"]["median_step_s"] == float(np.median(want))


def test_the_same_misrouting_in_every_bucket_is_one_finding():
    opts = DataPathOptions(steps=1, dense_buckets=2, expert_buckets=0, shard_numel=2)
    g = observations(opts=opts)
    # rank 1, slot 1 (its own): in bucket 0 it holds bucket 1's data, in bucket 1 bucket 2's
    # (one bucket ahead both times: one fault, counted twice)
    for bi in (0, 1):
        g[1]["variants"][SEPARATE]["buckets"][bi]["tags"][0][1] = [1, 1, bi + 1, 0, 0]
    for res, ok in zip(g, observations(opts=opts), strict=True):
        res["variants"][SHARED] = ok["variants"][SHARED]
    (f,) = errors(analyse_megatron(LAY, opts, g))
    assert f.message == (
        "separate: rank 1 holds shard 1 of dense bucket 0 at step 0 from rank 1, sent as bucket "
        "1 at step 0 (expected bucket 0 at step 0); the all-gather ran on [0, 1, 2, 3], the "
        "dp_cp replicas are [0, 1, 2, 3] (2 times over the dense buckets and steps)")


def test_no_ranks_reported():
    for out in (analyse_megatron(LAY, OPTS, []), analyse_fsdp(FS, FOPTS, [])):
        for v in out["variants"].values():
            assert (v["step_s"], v["median_step_s"], v["min_step_s"]) == ([], None, None)


def test_fsdp_many_ranks_and_the_shard_group_named():
    lay = build_layout(ParallelismConfig(world_size=20), "0.16")   # one dp_cp group of 20
    want = fsdp_reference(list(range(20)), 0, 1)
    g = []
    for r in range(20):
        w = [a.tolist() for a in want]
        w[0][0][0] += 1.0                                   # every rank wrong
        sep = {"separate": True, "ranks": list(range(20)), "shard_ranks": list(range(20))}
        shared = {**sep, "separate": False, "ranks": [0, 3] if r == 0 else list(range(20))}
        g.append({"rank": r, "variants": {
            SHARED: {"step_s": [0.5], "weights": w, "rs_group": shared},
            SEPARATE: {"step_s": [0.5], "weights": w, "rs_group": sep}}})
    out = analyse_fsdp(lay, DataPathOptions(kind="fsdp2", steps=1), g)
    by = {(f.code, f.groups): f for f in errors(out)}
    first16 = str(list(range(16)))
    assert by[("datapath-params", ("shared",))].message.startswith(
        f"fsdp2 shared: the weights after 1 steps differ from the single-process reference on "
        f"rank(s) {first16}; rank 0: layer 0: 1 of 128 elements differ")
    assert by[("datapath-params", ("shared",))].ranks == tuple(range(20))
    assert by[("datapath-fsdp-group", ("shared",))] == Finding(
        "datapath-fsdp-group", "error",
        "fsdp2 shared: rank 0: reduce-scatter group [0, 3] (the shard group), shard group "
        f"{list(range(20))}, expected the shard group with the same ranks (1 rank(s))", (0,),
        ("shared",))


def test_only_the_reduced_gradients_wrong_and_a_dense_only_label():
    opts = DataPathOptions(steps=2, dense_buckets=1, expert_buckets=0, shard_numel=2)
    g = observations(opts=opts)
    g[0]["variants"][SHARED]["buckets"][0]["reduced"][0][0] += 1.0   # final values right
    out = analyse_megatron(LAY, opts, g)
    assert [f.code for f in errors(out)] == ["datapath-reduce-scatter"]
    assert errors(out)[0].message.startswith(
        "shared (dense AG on dp_cp): the reduced gradient shards differ")
    assert out["variants"]["shared"]["ok"] is False
    assert out["variants"]["shared"]["ranks_matched"] == 4    # the parameters match
    # no expert buckets: the labels leave the expert side out
    assert out["variants"]["separate"]["label"] == "dense AG on dp_cp_ag"
    assert out["findings"][0].message.startswith(
        "separate (dense AG on dp_cp_ag): the parameters after 2 steps are bit-identical")


def test_megatron_lists_sixteen_ranks():
    lay = build_layout(ParallelismConfig(world_size=20), "0.16")
    opts = DataPathOptions(steps=1, dense_buckets=1, expert_buckets=0, shard_numel=1)
    g = observations(lay, opts)
    for res in g:
        res["variants"][SHARED]["buckets"][0]["final"][0] += 1.0
    (f,) = errors(analyse_megatron(lay, opts, g))
    assert f.message.startswith(
        f"shared (dense AG on dp_cp): the parameters after 1 steps differ from the "
        f"single-process reference on 20 rank(s) {list(range(16))}; rank 0: dense bucket 0:")
    assert f.ranks == tuple(range(20))


def test_twelve_misrouted_shards_are_all_listed_and_more_are_counted():
    lay = build_layout(ParallelismConfig(world_size=32), "0.16")   # one dp_cp group of 32
    opts = DataPathOptions(steps=1, dense_buckets=1, expert_buckets=0, shard_numel=1)

    def misroute(n):   # ranks 0..n-1 hold rank 31's shard in slot 0
        g = observations(lay, opts)
        for res in g[:n]:
            res["variants"][SHARED]["buckets"][0]["tags"][0][0] = [31, 31, 0, 0, 0]
        return [f for f in errors(analyse_megatron(lay, opts, g))
                if f.code == "datapath-ag-source"]

    assert len(misroute(MAX_AG_FINDINGS)) == MAX_AG_FINDINGS      # exactly 12: no "more"
    found = misroute(32)
    assert len(found) == MAX_AG_FINDINGS + 1
    assert found[-1] == Finding(
        "datapath-ag-source", "error",
        f"shared: 20 more misrouted shard(s) on rank(s) {list(range(12, 28))}",
        tuple(range(12, 32)), ("shared",))


def test_expected_values_given_as_integers_compare_as_float64():
    from simharness.replay.datapath import FULL_VALUES, encode_values

    n = FULL_VALUES + 1
    assert value_difference(encode_values(np.arange(n, dtype=np.float64)), np.arange(n)) is None
    assert value_difference([0.0, 1.0], np.array([[0], [1]])) is None
