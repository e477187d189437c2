"""The CTAs of a unit's compute: its largest GEMM's output tiles, where the shapes say."""

from __future__ import annotations

from simharness import ParallelismConfig, build_layout
from simharness.step import SimulateInputs, job_stages, simulate
from simharness.step.compute import GEMM_TILE, gemm_ctas
from simharness.topology import load_cluster, place_layout

DENSE = dict(hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
             num_query_groups=8, vocab_size=32000)
MOE = dict(DENSE, num_moe_experts=8, moe_ffn_hidden_size=14336, moe_router_topk=2,
           moe_first_dense_layers=1)


def _stages(fields, tp=2, cp=2, ep=1, tokens=True, flag=True):
    cfg = ParallelismConfig(world_size=16, tensor_model_parallel_size=tp,
                            context_parallel_size=cp, expert_model_parallel_size=ep,
                            create_all_gather_group=flag)
    layout = build_layout(cfg)
    stages, _ = job_stages(layout.config, layers=4, model_fields=fields,
                           micro_batch_size=2 if tokens else None,
                           seq_length=4096 if tokens else None)
    return layout, stages


def test_gemm_tiles():
    assert gemm_ctas(GEMM_TILE[0], GEMM_TILE[1]) == 1
    assert gemm_ctas(GEMM_TILE[0] + 1, GEMM_TILE[1]) == 2
    assert gemm_ctas(1536, 2816) == 132   # one wave on an H100
    assert gemm_ctas(0, 100) == gemm_ctas(100, 0) == 0


def test_dense_layer_gemm_is_fc1_on_the_ranks_tokens_moe_layers_unknown():
    _, stages = _stages(MOE, ep=2)
    slots = {s.name: s for s in stages[0].slots}
    tokens = 2 * 4096 // 2                    # micro-batch x sequence / cp
    assert slots["layer 0"].gemm == (tokens, 2 * 14336 // 2)   # gated fc1 / tp
    assert slots["layer 1"].gemm == (0, 0)                       # MoE: routing decides
    assert slots["embedding"].gemm == (0, 0)
    assert slots["output layer"].gemm == (tokens, 32000 // 2)


def test_no_tokens_no_gemm():
    _, stages = _stages(DENSE, tokens=False)
    assert all(s.gemm == (0, 0) for s in stages[0].slots)


def _scenarios(fields, tokens):
    layout, stages = _stages(fields, tokens=tokens)
    placement = place_layout(layout, load_cluster("dgx-h100-superpod", nodes=2))
    inputs = SimulateInputs(stages=stages, mfu=0.4) if tokens else \
        SimulateInputs(stages=stages, compute_ms=2.0)
    return simulate(layout, placement, inputs).scenarios


def test_simulate_adds_the_waves_scenario_only_where_ctas_are_known():
    with_waves = _scenarios(DENSE, tokens=True)
    assert [s.name for s in with_waves] == ["links shared", "links + SMs",
                                            "links + SMs in GEMM waves"]
    fluid, waves = with_waves[1], with_waves[2]
    assert (fluid.one_step_s, fluid.separate_step_s) != (waves.one_step_s, waves.separate_step_s)
    assert [s.name for s in _scenarios(DENSE, tokens=False)] == ["links shared", "links + SMs"]

