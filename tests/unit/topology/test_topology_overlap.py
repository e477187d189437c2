"""The backward-pass step model: what a separate all-gather communicator buys."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simharness import ParallelismConfig, build_layout
from simharness.topology import TopologyError, load_cluster
from simharness.topology.overlap import OpCost, simulate, simulate_ops
from simharness.topology.placement import place_layout
from simharness.topology.workload import job_stages

JOB = ("model_bytes", "layers", "model_fields", "model_config", "micro_batch_size",
       "seq_length", "first", "last", "embedding", "loss", "expert_bytes")


def run(world, topology, nodes, *, flag=True, mcore=None, **model):
    sizes = {k: model.pop(k) for k in ("tp", "pp", "cp", "ep", "vpp") if k in model}
    cfg = ParallelismConfig(world_size=world, create_all_gather_group=flag,
                            tensor_model_parallel_size=sizes.get("tp", 1),
                            pipeline_model_parallel_size=sizes.get("pp", 1),
                            virtual_pipeline_model_parallel_size=sizes.get("vpp"),
                            context_parallel_size=sizes.get("cp", 1),
                            expert_model_parallel_size=sizes.get("ep", 1))
    lay = build_layout(cfg, **({"mcore": mcore} if mcore else {}))
    stages, _ = job_stages(cfg, **{k: model.pop(k) for k in JOB if k in model})
    return simulate(lay, place_layout(lay, load_cluster(topology, nodes)), stages=stages,
                    **model)


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


# ------------------------------------------------------------------ SMs, launch queue, range
def test_one_launch_queue_holds_compute_behind_a_waiting_collective():
    """CUDA_DEVICE_MAX_CONNECTIONS=1: the next layer's compute is issued after the prefetch
    of the following all-gather; on one communicator that all-gather waits for the previous
    reduce-scatter, and the compute behind it in the hardware queue waits too."""
    rs = OpCost(1e-3, 0.0, 1e9, 1e9)
    ag = OpCost(1e-4, 0.0, 1e9, 1e9)
    free = simulate_ops(6, 1e-3, rs, ag)
    queued = simulate_ops(6, 1e-3, rs, ag, single_queue=True)
    assert queued.one.step_s > free.one.step_s
    assert queued.separate.step_s == pytest.approx(free.separate.step_s)
    assert queued.gain_s > free.gain_s


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


DSV3 = dict(hidden_size=7168, num_layers=61, ffn_hidden_size=18432, vocab_size=129280,
            num_attention_heads=128, num_moe_experts=256, moe_ffn_hidden_size=2048,
            moe_router_topk=8, moe_shared_expert_intermediate_size=2048,
            moe_first_dense_layers=3, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
            qk_pos_emb_head_dim=64, v_head_dim=128)


def test_deepseek_v3_experts_on_expert_dp_and_uneven_stages():
    """--pp 16 --ep 64 --layers 61: expert bytes ride on ep_dp (2 ranks), dense on dp_cp
    (128 ranks); 61 layers split 2, 4 x 14, 3 as Megatron's first/last options say."""
    rep = run(2048, "dgx-h100-superpod", 256, pp=16, ep=64, model_fields=DSV3, first=2,
              last=3, micro_batch_size=1, seq_length=4096, mfu=0.4, launch_queue=True)
    assert rep.groups == {"dense_rs": "dp_cp", "dense_ag": "dp_cp_ag", "exp_rs": "ep_dp",
                          "exp_ag": "ep_dp_ag"}
    assert [sum(s.layers) for s in rep.stages] == [2] + [4] * 14 + [3]
    assert [s.first_layer for s in rep.stages[:3]] == [0, 2, 6]
    # stage 0: layers 0-1 are dense (first_k_dense_replace 3): no expert bytes there
    assert rep.stages[0].expert_bytes == 0 and rep.stages[1].expert_bytes > 0
    # 256 experts x 3 x 7168 x 2048 params x 2 B / (ep 64) per MoE layer
    per_layer = 256 * 3 * 7168 * 2048 * 2 / 64
    assert rep.stages[2].expert_bytes == pytest.approx(4 * per_layer)
    sizes = {c.group: c.group_size for c in rep.collectives}
    assert sizes == {"dp_cp_ag": 128, "dp_cp": 128, "ep_dp_ag": 2, "ep_dp": 2}
    assert all(c.channels > 0 for c in rep.collectives)
    # the three scenarios differ here: SMs slow compute, one launch queue holds it
    # (the dense layers 0-2 and the output layer state their GEMM's CTAs: a waves scenario;
    # the launch queue shares the SMs as the scenario before it does)
    links, sms, waves, queue = rep.scenarios
    assert (sms.name, waves.name) == ("links + SMs", "links + SMs in GEMM waves")
    assert queue.name == "links + SMs + one launch queue"
    assert queue.one_step_s > waves.one_step_s and queue.one_held_s > 0
    assert queue.gain_pct != pytest.approx(waves.gain_pct)
    assert any(n.startswith("one launch queue (CUDA_DEVICE_MAX_CONNECTIONS=1) holds compute")
               for n in rep.notes)
    # by default fsdp has no launch-queue scenario: Megatron-LM refuses CDMC=1 with FSDP
    plain = run(2048, "dgx-h100-superpod", 256, pp=16, ep=64, model_fields=DSV3, first=2,
                last=3, micro_batch_size=1, seq_length=4096, mfu=0.4)
    assert [sc.name for sc in plain.scenarios] == ["links shared", "links + SMs",
                                                   "links + SMs in GEMM waves"]
    assert any("Megatron-LM refuses it with Megatron-FSDP" in n for n in plain.notes)
    assert "MFU 0.4 of 989" in rep.compute_how
    assert rep.extra_communicators == 2
    mem = dict(rep.comm_memories)
    assert set(mem) == {"dp_cp_ag", "ep_dp_ag"} and mem["dp_cp_ag"] != mem["ep_dp_ag"]
    assert rep.extra_memory_mb == pytest.approx(sum(mem.values()))


def test_the_issue_s_deepseek_bytes_case():
    """--pp 16 --ep 64 --model-bytes 1342GB --layers 61: every byte dense on dp_cp is refused;
    with --expert-bytes the experts ride on ep_dp, and the split is uneven as asked."""
    with pytest.raises(TopologyError, match="--ep 64 with --model-bytes: give --expert-bytes"):
        run(2048, "dgx-h100-superpod", 256, pp=16, ep=64, model_bytes=1342e9, layers=61,
            compute_ms=10.0)
    rep = run(2048, "dgx-h100-superpod", 256, pp=16, ep=64, model_bytes=1342e9,
              expert_bytes=1300e9, layers=61, compute_ms=10.0, first=2, last=3,
              model_fields={"moe_first_dense_layers": 3})
    assert [sum(s.layers) for s in rep.stages] == [2] + [4] * 14 + [3]
    assert rep.stages[0].expert_bytes == 0.0           # layers 0-1 dense
    per_moe = 1300e9 / 58 / 64
    assert rep.stages[2].expert_bytes == pytest.approx(4 * per_moe)
    assert rep.stages[2].dense_bytes == pytest.approx(4 * 42e9 / 61)
    assert {c.group for c in rep.collectives if c.what.startswith("expert")} == {"ep_dp_ag",
                                                                               "ep_dp"}


def test_model_bytes_refused_or_split_as_megatron_does():
    with pytest.raises(TopologyError, match="--model-bytes 0 is out of range"):
        run(16, "dgx-h100-superpod", 2, model_bytes=0.0, layers=4, compute_ms=1.0)
    with pytest.raises(TopologyError, match="--model-bytes 1e\\+30 is out of range"):
        run(16, "dgx-h100-superpod", 2, model_bytes=1e30, layers=4, compute_ms=1.0)
    with pytest.raises(TopologyError, match="--layers 10 does not divide by --pp 4.*"
                                            "num_layers_in_first_pipeline_stage=2"):
        run(32, "dgx-h100-superpod", 4, pp=4, model_bytes=1e9, layers=10, compute_ms=1.0)
    rep = run(32, "dgx-h100-superpod", 4, pp=4, model_bytes=1e9, layers=10, compute_ms=1.0,
              first=2, last=2)
    assert [s.layers for s in rep.stages] == [(2,), (3,), (3,), (2,)]
    assert rep.stages[1].dense_bytes == pytest.approx(3 * 1e9 / 10)


def test_ag_kind_must_have_the_reduce_scatter_ranks():
    with pytest.raises(TopologyError, match="--ag-kind tp: the all-gather must run over"):
        run(16, "dgx-h100-superpod", 2, tp=8, model_bytes=16e9, layers=16, compute_ms=1.0,
            ag_kind="tp")
    ok = run(16, "dgx-h100-superpod", 2, tp=8, flag=False, model_bytes=16e9, layers=16,
             compute_ms=1.0, ag_kind="dp_cp")
    assert ok.groups["dense_ag"] == "dp_cp"


@pytest.mark.parametrize("kw, words", [
    (dict(model_bytes=1e9, layers=4), "no compute time"),
    (dict(model_bytes=1e9, layers=4, compute_ms=1.0, mfu=0.5), "not both"),
    (dict(model_fields=dict(hidden_size=1024, num_layers=4, ffn_hidden_size=4096),
          micro_batch_size=1, seq_length=1024, mfu=0.0), "--mfu must be in \\(0, 1\\]"),
    (dict(model_fields=dict(hidden_size=1024, num_layers=4, ffn_hidden_size=4096),
          micro_batch_size=1, seq_length=1024, mfu=1.2), "--mfu must be in"),
    (dict(model_bytes=1e9, layers=4, mfu=0.5), "--mfu needs FLOPs"),
    (dict(model_fields=dict(hidden_size=1024, num_layers=4), compute_ms=1.0),
     "lacks ffn_hidden_size"),
    (dict(model_fields=dict(hidden_size=1024, num_layers=4, ffn_hidden_size=8,
                            num_moe_experts=8), compute_ms=1.0),
     "lacks moe_ffn_hidden_size .*; moe_router_topk"),
    (dict(model_fields=dict(hidden_size=1024, num_layers=4, ffn_hidden_size=8), layers=6,
          compute_ms=1.0), "--layers 6 contradicts num_layers=4"),
    (dict(model_bytes=1e9, layers=4, model_fields=dict(hidden_size=8), compute_ms=1.0),
     "not both"),
    (dict(model_bytes=1e9, layers=4, compute_ms=1.0, schedule="dist-opt",
          param_gather_with_optimizer_step=True), "needs interleaved pipelining"),
    (dict(model_bytes=1e9, layers=4, compute_ms=1.0, schedule="dist-opt", ag_kind="dp_cp_ag"),
     "gathers parameters on its reduce-scatter group"),
    (dict(model_bytes=1e9, layers=4, compute_ms=1.0, nccl="2.99"), "2.99"),
])
def test_bad_job_inputs_name_the_value(kw, words):
    with pytest.raises(TopologyError, match=words):
        run(16, "dgx-h100-superpod", 2, **kw)


def test_model_config_files(tmp_path):
    import json
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps({"hidden_size": 4096, "intermediate_size": 14336,
                              "num_hidden_layers": 32, "num_attention_heads": 32,
                              "num_key_value_heads": 8, "num_local_experts": 8,
                              "num_experts_per_tok": 2, "vocab_size": 32000,
                              "hidden_act": "silu", "tie_word_embeddings": False}))
    rep = run(16, "dgx-h100-superpod", 2, ep=2, model_config=str(hf), compute_ms=2.0)
    # Mixtral: every layer MoE, 8 experts of 3 x 4096 x 14336, 2 B per param, ep 2
    assert rep.stages[0].expert_bytes == pytest.approx(32 * 8 * 3 * 4096 * 14336 * 2 / 2)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hidden_size": 4096, "d_model": 2048, "num_layers": 2,
                               "ffn_hidden_size": 8}))
    with pytest.raises(TopologyError, match="contradictory fields hidden_size=4096, "
                                            "d_model=2048"):
        run(16, "dgx-h100-superpod", 2, model_config=str(bad), compute_ms=1.0)
    with pytest.raises(TopologyError, match="--hidden-size 1024 contradicts hidden_size=4096"):
        run(16, "dgx-h100-superpod", 2, model_config=str(hf), compute_ms=1.0,
            model_fields={"hidden_size": 1024})


def test_deepseek_hugging_face_config(tmp_path):
    import json
    cfg = {"first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
           "intermediate_size": 18432, "kv_lora_rank": 512, "moe_intermediate_size": 2048,
           "moe_layer_freq": 1, "n_routed_experts": 256, "n_shared_experts": 1,
           "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
           "num_key_value_heads": 128, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
           "qk_rope_head_dim": 64, "tie_word_embeddings": False, "v_head_dim": 128,
           "vocab_size": 129280}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    from simharness.topology.workload import model_fields_from_file, model_spec
    model = model_spec(model_fields_from_file(path))
    assert model.total_params() / 1e9 == pytest.approx(671, abs=1)  # DeepSeek-V3: 671B
    assert model.num_moe_experts == 256 and model.moe_first_dense_layers == 3
    path.write_text(json.dumps(dict(cfg, moe_layer_freq=[0, 1, 0, 1])))
    with pytest.raises(TopologyError, match="moe_layer_freq \\[0, 1, 0, 1\\] is not modelled"):
        model_fields_from_file(path)
    path.write_text(json.dumps(dict(cfg, first_k_dense_replace=None,
                                    moe_layer_freq="([0]*3+[1]*58)")))
    assert model_fields_from_file(path)["moe_first_dense_layers"] == 3


def test_compute_from_flops_uses_the_topology_peak():
    small = dict(hidden_size=1024, num_layers=4, ffn_hidden_size=4096, num_attention_heads=16)
    rep = run(16, "dgx-h100-superpod", 2, model_fields=small, micro_batch_size=2,
              seq_length=1024, mfu=0.5)
    # per layer: 2 x (4 h^2 + 3 h ffn + 2 h) FLOPs per token + causal scores 2 s h
    h, f, toks = 1024, 4096, 2 * 1024
    flops = toks * (2 * (4 * h * h + 3 * h * f + 2 * h) + 2 * 1024 * h)
    assert rep.stages[0].forward_s == pytest.approx(4 * flops / (989e12 * 0.5))
    assert rep.stages[0].backward_s == pytest.approx(2 * rep.stages[0].forward_s)
    given = run(16, "dgx-h100-superpod", 2, model_fields=small, micro_batch_size=2,
                seq_length=1024, mfu=0.5, peak_tflops=494.5)
    assert given.stages[0].forward_s == pytest.approx(2 * rep.stages[0].forward_s)
    with pytest.raises(TopologyError, match="gives no \\[node\\] peak_bf16_tflops"):
        run(8, "cpu-loopback", 1, model_fields=small, micro_batch_size=2, seq_length=1024,
            mfu=0.5)


def test_dist_opt_never_uses_the_all_gather_group():
    fsdp = run(32, "dgx-h100-superpod", 4, pp=4, vpp=2, model_bytes=40e9, layers=16,
               compute_ms=1.0)
    dist = run(32, "dgx-h100-superpod", 4, pp=4, vpp=2, model_bytes=40e9, layers=16,
               compute_ms=1.0, schedule="dist-opt")
    assert dist.groups["dense_ag"] == "dp_cp" and not dist.ag_used
    assert all(sc.gain_pct == 0.0 for sc in dist.scenarios)
    assert dist.verdict.startswith("no effect for the distributed optimizer: ")

    assert f"+{dist.extra_memory_mb:.0f} MB" in dist.verdict
    # fewer collectives than fsdp (buckets of >= 40M params, one all-gather per bucket)
    assert sum(c.count for c in dist.collectives) < sum(c.count for c in fsdp.collectives)
    opt = run(32, "dgx-h100-superpod", 4, pp=4, vpp=2, model_bytes=40e9, layers=16,
              compute_ms=1.0, schedule="dist-opt", param_gather_with_optimizer_step=True)
    assert opt.one.step_s <= dist.one.step_s + 1e-12  # every gather dispatched up front


@pytest.mark.parametrize("compute", [0.2, 1.0, 5.0, 50.0])
def test_verdict_agrees_with_the_numbers(compute):
    rep = run(16, "dgx-h100-superpod", 2, tp=8, model_bytes=16e9, layers=16,
              compute_ms=compute)
    lo, hi = rep.gain_range_pct
    v = rep.verdict
    assert f"+{rep.extra_memory_mb:.0f} MB per GPU" in v
    if v.startswith("helps"):
        assert lo > 0
    if lo < -0.05:
        assert v.startswith(("may hurt", "hurts"))
    if hi < -0.05:
        assert v.startswith("hurts")
    if abs(lo) <= 0.05 and abs(hi) <= 0.05:
        assert v.startswith("no measurable gain")


def test_gain_is_a_range_with_what_it_depends_on():
    rep = run(16, "dgx-h100-superpod", 2, model_bytes=16e9, layers=16, compute_ms=1.0,
              launch_queue=True)
    names = [sc.name for sc in rep.scenarios]
    assert names == ["links shared", "links + SMs", "links + SMs + one launch queue"]
    lo, hi = rep.gain_range_pct
    assert lo <= rep.gain_pct <= hi
    assert any("issues collectives" in u for u in rep.unknowns)
    assert rep.hbm_share is not None and rep.hbm_share > 0
    # a topology without [node] sms: the SM scenario is not guessed, it is named unknown
    gloo = run(8, "cpu-loopback", 1, model_bytes=1e8, layers=4, compute_ms=1.0,
               launch_queue=True)
    assert [sc.name for sc in gloo.scenarios] == ["links shared", "links + one launch queue"]
    assert any("SM contention" in u for u in gloo.unknowns)


def test_the_report_names_nccl_s_pick():
    rep = run(16, "dgx-h100-superpod", 2, tp=8, model_bytes=16e9, layers=16, compute_ms=1.0)
    picks = [c.pick for c in rep.collectives]
    assert picks and all(p.endswith(("/simple", "/ll128", "/ll")) for p in picks)
    assert rep.collectives[0].shape.startswith("2 ranks on 2 node(s)")
    assert rep.collectives[0].options


def test_no_data_parallelism_means_nothing_to_overlap():
    rep = run(8, "dgx-h100", 1, tp=8, model_bytes=1e9, layers=4, compute_ms=2.0)
    assert rep.one.step_s == rep.separate.step_s == pytest.approx(4 * 3e-3)
    assert rep.verdict.startswith("nothing to overlap")


def test_memory_cost_of_the_extra_communicators():
    moe = run(16, "dgx-h100-superpod", 2, ep=2, model_bytes=1e9, expert_bytes=5e8, layers=4,
              compute_ms=1.0, comm_memory_mb=544)
    assert (moe.extra_communicators, moe.extra_memory_mb) == (2, 1088.0)
    off = run(16, "dgx-h100-superpod", 2, flag=False, model_bytes=1e9, layers=4,
              compute_ms=1.0)
    assert off.groups["dense_ag"] == "dp_cp" and off.extra_communicators == 1
    old = run(16, "dgx-h100-superpod", 2, ep=2, mcore="0.16", model_bytes=1e9,
              expert_bytes=5e8, layers=4, compute_ms=1.0)
    assert old.extra_communicators == 1  # no expert all-gather group before 0.18
    # expert parallelism without expert parameters: the expert AG communicator is created
    # but never used, so it holds NCCL's init structures only
    idle = run(16, "dgx-h100-superpod", 2, ep=2, model_bytes=1e9, expert_bytes=0.0, layers=4,
               compute_ms=1.0)
    mem = dict(idle.comm_memories)
    assert mem["ep_dp_ag"] < mem["dp_cp_ag"]
    assert any(line.startswith("ep_dp_ag (no traffic here") for line in idle.memory_lines)


def test_the_step_models_dist_opt_words_are_ag_readers_words():
    from simharness.ag_readers import ag_reader_sentence
    from simharness.step.report import DIST_OPT_WORDS

    # the distributed optimizer gathers on its reduce-scatter group in every profile
    assert ag_reader_sentence("0.19", "dist-opt") == DIST_OPT_WORDS
    assert "start_param_sync" in DIST_OPT_WORDS and "buys nothing" in DIST_OPT_WORDS
    from simharness.ag_readers import DPImpl, no_effect_words

    assert no_effect_words(DPImpl("dist-opt")) == "no effect for the distributed optimizer"
