"""The backward-pass step model: what a separate all-gather communicator buys."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simharness import ParallelismConfig, build_layout
from simharness.topology import TopologyError, load_cluster
from simharness.topology.overlap import OpCost, simulate, simulate_ops
from simharness.topology.placement import place_layout


def run(world, topology, nodes, *, flag=True, **model):
    sizes = {k: model.pop(k) for k in ("tp", "pp", "cp", "ep") if k in model}
    cfg = ParallelismConfig(world_size=world, create_all_gather_group=flag,
                            tensor_model_parallel_size=sizes.get("tp", 1),
                            pipeline_model_parallel_size=sizes.get("pp", 1),
                            context_parallel_size=sizes.get("cp", 1),
                            expert_model_parallel_size=sizes.get("ep", 1))
    lay = build_layout(cfg)
    return simulate(lay, place_layout(lay, load_cluster(topology, nodes)), **model)


# ------------------------------------------------------------------ the event model
def op(alpha=0.0, volume=0.0, alone=1e9, shared=None):
    return OpCost(alpha, volume, alone, alone / 2 if shared is None else shared)


def test_no_gain_when_the_collectives_are_never_concurrent():
    # Two layers whose compute outlasts a collective (5.1 ms): AG_0, then AG_1 during
    # layer 0, then RS_0 and RS_1 -- no all-gather is in flight with a reduce-scatter.
    rs = ag = op(alpha=1e-4, volume=5e6)
    for compute in (6e-3, 20e-3):
        r = simulate_ops(2, compute, rs, ag)
        assert r.separate.overlap_s == 0.0
        assert r.gain_s == 0.0
        assert r.one.step_s == pytest.approx(ag.alone_s() + 2 * compute + rs.alone_s())
    # with no compute to hide AG_1, it meets RS_0 and the separate communicator gains
    r = simulate_ops(2, 0.0, rs, ag)
    assert r.separate.overlap_s > 0 and r.gain_s > 0


@settings(max_examples=80, deadline=None)
@given(layers=st.integers(1, 10), compute=st.floats(0, 5e-3), a_rs=st.floats(0, 2e-3),
       a_ag=st.floats(0, 2e-3), v_rs=st.sampled_from([0.0, 1e5, 3e6]),
       v_ag=st.sampled_from([0.0, 1e5, 3e6]))
def test_gain_is_zero_exactly_when_nothing_overlaps(layers, compute, a_rs, a_ag, v_rs, v_ag):
    """Both directions: nothing in flight together -> no gain and no loss; a gain -> the
    collectives overlapped outside bandwidth sharing (here sharing halves each rate, so only
    overlapped latency can gain; overlap alone need not: compute may hide it); a loss ->
    they shared bandwidth."""
    r = simulate_ops(layers, compute, op(a_rs, v_rs), op(a_ag, v_ag))
    assert r.one.overlap_s == 0.0 and r.separate.shared_s <= r.separate.overlap_s
    if r.separate.overlap_s == 0.0:
        assert r.gain_s == pytest.approx(0.0, abs=1e-15)
    if r.gain_s > 1e-12:
        assert r.separate.overlap_s > r.separate.shared_s
    if r.gain_s < -1e-12:
        assert r.separate.shared_s > 0.0


def test_gain_when_they_are_concurrent():
    rs = ag = op(alpha=1e-3, volume=0.0)  # latency-bound: 1 ms each, no bandwidth
    r = simulate_ops(8, 1e-3, rs, ag)
    assert r.separate.step_s < r.one.step_s
    # serial: AG and RS alternate on one queue, 2 ms per layer; concurrent: 1 ms per layer
    assert r.one.step_s == pytest.approx(1e-3 + 8 * 2e-3, rel=0.15)
    assert r.separate.step_s == pytest.approx(1e-3 + 8 * 1e-3 + 1e-3, rel=0.15)


def test_bandwidth_bound_on_shared_links_gains_almost_nothing():
    rs = ag = op(volume=1e7, alone=1e9)  # 10 ms each; sharing halves both rates
    r = simulate_ops(8, 1e-3, rs, ag)
    assert r.separate.shared_s > 0
    assert r.gain_s / r.one.step_s < 0.07


def test_disjoint_bottlenecks_gain_a_lot():
    rs = op(volume=1e7, alone=1e9, shared=1e9)  # the other collective does not slow it
    ag = op(volume=1e7, alone=1e9, shared=1e9)
    r = simulate_ops(8, 1e-3, rs, ag)
    assert r.gain_s / r.one.step_s > 0.4


@settings(max_examples=80, deadline=None)
@given(layers=st.integers(1, 12), compute=st.floats(0, 5e-3), a_rs=st.floats(0, 2e-3),
       a_ag=st.floats(0, 2e-3), v_rs=st.floats(0, 5e6), v_ag=st.floats(0, 5e6),
       share=st.sampled_from([0.5, 0.7, 1.0]))
def test_step_model_bounds(layers, compute, a_rs, a_ag, v_rs, v_ag, share):
    rs = OpCost(a_rs, v_rs, 1e9, 1e9 * share)
    ag = OpCost(a_ag, v_ag, 1e9, 1e9 * share)
    r = simulate_ops(layers, compute, rs, ag)
    serial = layers * (compute + rs.alone_s() + ag.alone_s())
    for t in (r.one, r.separate):
        assert t.step_s >= layers * compute - 1e-12
        assert t.step_s >= ag.alone_s() + compute + rs.alone_s() - 1e-12  # the critical chain
        assert t.step_s <= serial + 1e-9
        assert t.exposed_s == pytest.approx(max(t.step_s - layers * compute, 0.0), abs=1e-12)
    # one communicator never overlaps; when the collectives do not slow each other the
    # separate communicator is never slower (with shared links it can be, by a little:
    # a reduce-scatter may steal bandwidth from an all-gather the next layer waits for)
    assert r.one.overlap_s == 0.0 and r.one.shared_s == 0.0
    if share == 1.0:
        assert r.separate.step_s <= r.one.step_s * (1 + 1e-9) + 1e-12


def test_a_reduce_scatter_can_slow_a_critical_all_gather():
    # AG_1 (2 ms) just outlasts layer 0's compute; RS_0 arrives and halves its rate.
    rs, ag = op(volume=1e5), op(volume=2e6)
    r = simulate_ops(2, 1.9e-3, rs, ag)
    assert r.separate.step_s > r.one.step_s


# ------------------------------------------------------------------ on real layouts
def test_real_layout_bandwidth_bound_same_links():
    # 2 DGX nodes, tp1: dp_cp rings over 16 GPUs; big layers, little compute
    rep = run(16, "dgx-h100-superpod", 2, model_bytes=70e9, layers=32, compute_ms=1.0)
    assert rep.ag_kind == "dp_cp_ag" and rep.rs_kind == "dp_cp"
    assert rep.shared_slowdown == pytest.approx(2.0)
    assert rep.latency_share < 0.05
    assert 0 <= rep.gain_pct < 3
    assert rep.verdict.startswith("helps little: bandwidth-bound")


def test_real_layout_latency_bound():
    # 512 nodes, one DP rank per node on each rail: 511-step rings, small layers
    rep = run(4096, "dgx-h100-superpod", 512, tp=8, model_bytes=2e9, layers=64,
              compute_ms=0.5)
    assert rep.latency_share > 0.8
    assert rep.gain_pct > 30
    assert rep.verdict.startswith("helps: latency-bound")


def test_real_layout_hidden_behind_compute():
    rep = run(16, "dgx-h100-superpod", 2, model_bytes=1e9, layers=32, compute_ms=50)
    assert rep.gain_s == pytest.approx(0.0, abs=1e-9)
    assert "hidden" in rep.verdict


def test_disjoint_bottlenecks_on_a_real_cluster():
    """Reduce-scatter over DP (NICs) while the all-gather runs over TP (NVLink)."""
    rep = run(16, "dgx-h100-superpod", 2, tp=8, model_bytes=16e9, layers=16, compute_ms=1.0,
              ag_kind="tp")
    assert rep.shared_slowdown == pytest.approx(1.0)
    assert rep.verdict == "helps: the two collectives are bottlenecked on different links"
    assert rep.gain_pct > 5


def test_no_data_parallelism_means_nothing_to_overlap():
    rep = run(8, "dgx-h100", 1, tp=8, model_bytes=1e9, layers=4, compute_ms=2.0)
    assert rep.one.step_s == rep.separate.step_s == pytest.approx(4 * 2e-3)
    assert rep.verdict.startswith("nothing to overlap")


def test_memory_cost_of_the_extra_communicators():
    dense = run(16, "dgx-h100-superpod", 2, model_bytes=1e9, layers=4)
    # computed: the all-gather communicator connects only what it runs (NCCL >= 2.22)
    from simharness.topology.comm_memory import CommMemoryInputs, comm_memory
    algo = dense.ag_pick.split("/")[0]
    expect = comm_memory(CommMemoryInputs(algos=(algo,))).total_mb
    assert (dense.extra_communicators, dense.extra_memory_mb) == (1, pytest.approx(expect))
    assert any("lazily" in line for line in dense.memory_lines)
    moe = run(16, "dgx-h100-superpod", 2, ep=2, model_bytes=1e9, layers=4, comm_memory_mb=544)
    assert (moe.extra_communicators, moe.extra_memory_mb) == (2, 1088.0)
    off = run(16, "dgx-h100-superpod", 2, flag=False, model_bytes=1e9, layers=4)
    assert off.ag_kind == "dp_cp" and off.extra_communicators == 1  # what turning it on adds
    # megatron-core 0.16-0.17 has no expert all-gather group
    lay = build_layout(ParallelismConfig(world_size=16, expert_model_parallel_size=2,
                                         create_all_gather_group=True), mcore="0.16")
    old = simulate(lay, place_layout(lay, load_cluster("dgx-h100-superpod", 2)),
                   model_bytes=1e9, layers=4)
    assert old.extra_communicators == 1
    expert = run(16, "dgx-h100-superpod", 2, ep=2, model_bytes=1e9, layers=4, rs_kind="ep_dp")
    assert (expert.rs_kind, expert.ag_kind) == ("ep_dp", "ep_dp_ag")


def test_per_layer_sizes():
    rep = run(32, "dgx-h100-superpod", 4, tp=2, pp=2, model_bytes=8e9, layers=8, grad_scale=2.0)
    assert rep.layers_per_stage == 4
    assert rep.ag_bytes == pytest.approx(8e9 / (8 * 2))
    assert rep.rs_bytes == pytest.approx(2 * rep.ag_bytes)


@pytest.mark.parametrize("model, words", [
    (dict(model_bytes=1e9, layers=1, pp=2), "--layers 1 is fewer than the 2 pipeline stages"),
    (dict(model_bytes=1e9, layers=4, rs_kind="nope"), "no 'nope' groups; kinds present"),
    (dict(model_bytes=-1.0, layers=4), "--model-bytes must be a number >= 0"),
    (dict(model_bytes=1e9, layers=0), "--layers must be a whole number >= 1"),
    (dict(model_bytes=1e9, layers=4, pp=2, rs_kind="pos_embd"), "do not cover every rank"),
])
def test_bad_model_inputs(model, words):
    with pytest.raises(TopologyError, match=words):
        run(16, "dgx-h100-superpod", 2, **model)


def test_report_serialises():
    import json
    d = run(16, "dgx-h100-superpod", 2, model_bytes=1e9, layers=4).to_dict()
    back = json.loads(json.dumps(d))
    assert set(back) >= {"gain_s", "gain_pct", "one_communicator", "separate_ag_communicator",
                         "extra_memory_mb", "verdict"}
    assert np.isfinite(back["one_communicator"]["step_s"])


# ------------------------------------------------------------------ SMs, launch queue, range
def test_one_launch_queue_can_hold_an_all_gather_behind_a_waiting_reduce_scatter():
    rs = OpCost(0.000691400829417505, 3e6, 1e9, 5e8)
    ag = OpCost(0.0015218954750836412, 1e6, 1e9, 5e8)
    free = simulate_ops(6, 1e-4, rs, ag)
    queued = simulate_ops(6, 1e-4, rs, ag, single_queue=True)
    assert queued.one.step_s == free.one.step_s       # one communicator is FIFO anyway
    assert queued.separate.step_s > free.separate.step_s


@settings(max_examples=60, deadline=None)
@given(layers=st.integers(1, 8), compute=st.floats(0, 3e-3), a_rs=st.floats(0, 2e-3),
       a_ag=st.floats(0, 2e-3), v_rs=st.floats(0, 3e6), v_ag=st.floats(0, 3e6),
       sm=st.sampled_from([0.0, 0.1, 0.3]))
def test_sm_contention_and_one_queue_bounds(layers, compute, a_rs, a_ag, v_rs, v_ag, sm):
    rs, ag = OpCost(a_rs, v_rs, 1e9, 1e9), OpCost(a_ag, v_ag, 1e9, 1e9)
    base = simulate_ops(layers, compute, rs, ag)
    r = simulate_ops(layers, compute, rs, ag, sm_fraction=sm, single_queue=True)
    # compute never runs faster than alone, and at most 1/(1 - 2 sm) slower
    assert r.separate.step_s >= layers * compute - 1e-12
    assert r.one.step_s >= base.one.step_s - 1e-12
    # without link sharing, launching in issue order still beats one communicator
    assert r.separate.step_s <= r.one.step_s + 1e-12


def test_gain_is_a_range_with_what_it_depends_on():
    rep = run(16, "dgx-h100-superpod", 2, model_bytes=16e9, layers=16, compute_ms=1.0)
    names = [sc.name for sc in rep.scenarios]
    assert names == ["links shared", "links + SMs", "links + SMs + one launch queue"]
    lo, hi = rep.gain_range_pct
    assert lo <= rep.gain_pct <= hi
    assert any("issues collectives" in u for u in rep.unknowns)
    assert rep.hbm_share is not None and rep.hbm_share > 0
    # a topology without [node] sms: the SM scenario is not guessed, it is named unknown
    gloo = run(8, "cpu-loopback", 1, model_bytes=1e8, layers=4, compute_ms=1.0)
    assert [sc.name for sc in gloo.scenarios] == ["links shared", "links + one launch queue"]
    assert any("SM contention" in u for u in gloo.unknowns)


def test_the_report_names_nccl_s_pick():
    rep = run(16, "dgx-h100-superpod", 2, tp=8, model_bytes=16e9, layers=16, compute_ms=1.0)
    assert rep.rs_pick.endswith(("/simple", "/ll128", "/ll")) and rep.rs_options
    assert rep.ag_shape.startswith("2 ranks on 2 node(s)")
