"""Megatron-LM's own ``pretrain_gpt.py`` arguments as an input (simharness.megatron_args):
real argument lists from Megatron-LM's example scripts read whole, every known argument
accepted, an unknown one refused with the closest name."""

from __future__ import annotations

from pathlib import Path

import pytest

from simharness.ag_readers import impl_from_ddp_block
from simharness.megatron_args import (
    ARGUMENTS_FILE,
    MEGATRON_LM_COMMIT,
    MegatronArgsError,
    known_arguments,
    parse_megatron_args,
    read_args_file,
    split_text,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "megatron_args"


def parse(text: str):
    return parse_megatron_args(split_text(text))


def test_the_argument_list_is_data_with_its_source():
    head = ARGUMENTS_FILE.read_text().splitlines()[:8]
    assert any(MEGATRON_LM_COMMIT in line for line in head)
    assert any("megatron/training/arguments.py" in line for line in head)
    known = known_arguments()
    assert len(known) > 800
    # a sample with each arity, and arguments generated from TransformerConfig
    assert known["--create-all-gather-group"] == "flag"
    assert known["--tensor-model-parallel-size"] == "value"
    assert known["--hierarchical-context-parallel-sizes"] == "list"
    assert known["--num-query-groups"] == "value"
    assert known["--no-fp8-wgrad"] == known["--disable-fp8-wgrad"] == "flag"


def test_gpt3_175b_example_is_read_whole():
    """examples/gpt3/train_gpt3_175b_distributed.sh at d98e8a6 (see the fixture's header)."""
    a = parse_megatron_args(read_args_file(FIXTURES / "gpt3_175b.args"))
    assert a.parallel == {"tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 16}
    assert a.world_size == 128  # torchrun --nproc_per_node 8 --nnodes 16
    assert a.model == {"layers": 96, "hidden_size": 12288, "num_attention_heads": 96,
                       "seq_length": 2048, "micro_batch_size": 1,
                       "ffn_hidden_size": 4 * 12288}  # Megatron-LM's default width
    assert a.ddp == {"grad_reduce_in_fp32": False}  # --fp16: no fp32 reduce
    assert impl_from_ddp_block(a.ddp)[0] == "ddp"   # Megatron-LM's default: plain DDP
    assert "--lr" in a.unused and "--step-batch-size-schedule" in a.unused
    assert "--global-batch-size" in a.unused and "--tensor-model-parallel-size" not in a.unused


def test_mixtral_example_gives_the_distributed_optimizer_and_fp32_grads():
    """examples/mixtral/train_mixtral_8x7b_distributed.sh at d98e8a6."""
    a = parse_megatron_args(read_args_file(FIXTURES / "mixtral_8x7b.args"))
    assert a.parallel == {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 4,
                          "expert_model_parallel_size": 8}
    assert a.ddp == {"use_distributed_optimizer": True, "overlap_param_gather": True,
                     "overlap_grad_reduce": True, "grad_reduce_in_fp32": True}  # --bf16
    assert impl_from_ddp_block(a.ddp)[0] == "dist-opt"
    assert a.model["num_moe_experts"] == 8 and a.model["num_query_groups"] == 8
    assert a.model["ffn_hidden_size"] == 14336 and a.world_size is None
    assert a.model["moe_ffn_hidden_size"] == 14336  # Megatron-LM: the dense width
    assert "--swiglu" in a.used and "--swiglu" not in a.unused
    assert "--sequence-parallel" in a.unused and "--moe-grouped-gemm" in a.unused


@pytest.mark.parametrize(("text", "want"), [
    ("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params",
     {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params",
      "grad_reduce_in_fp32": False}),
    ("--use-custom-fsdp --use-distributed-optimizer --bf16 --grad-reduce-in-bf16",
     {"use_custom_fsdp": True, "use_distributed_optimizer": True, "grad_reduce_in_fp32": False}),
    ("--bf16 --main-grads-dtype bf16", {"grad_reduce_in_fp32": False}),
    ("--accumulate-allreduce-grads-in-fp32", {"grad_reduce_in_fp32": True}),
    ("--use-megatron-fsdp --megatron-fsdp-version 2 --data-parallel-sharding-strategy "
     "optim_grads_params",
     {"use_megatron_fsdp": True, "megatron_fsdp_version": 2,
      "data_parallel_sharding_strategy": "optim_grads_params", "grad_reduce_in_fp32": False}),
])
def test_data_parallel_implementation_arguments(text, want):
    a = parse(text)
    assert a.ddp == want
    impl = impl_from_ddp_block(a.ddp)[0]
    assert impl == ("dist-opt" if "use_distributed_optimizer" in want and
                    "use_custom_fsdp" not in want else
                    "fsdp-v2" if want.get("megatron_fsdp_version") == 2 else
                    "fsdp" if "fsdp" in text else "ddp")


@pytest.mark.parametrize(("text", "vpp"), [
    ("--num-layers 32 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2",
     4),
    ("--num-layers 30 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 4 "
     "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split", 2),
    ("--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 3", 3),
    ("--num-layers 32 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 8",
     None),  # one chunk per stage: no virtual pipeline
])
def test_the_virtual_pipeline_size_is_derived_as_megatron_lm_does(text, vpp):
    assert parse(text).parallel.get("virtual_pipeline_model_parallel_size") == vpp


def test_parallel_flags_and_lists():
    a = parse("--context-parallel-size 4 --hierarchical-context-parallel-sizes 2 2 "
              "--create-all-gather-group --use-tp-pp-dp-mapping --disable-gloo-process-groups "
              "--expert-tensor-parallel-size 1 --num-distributed-optimizer-instances 2")
    assert a.parallel == {"context_parallel_size": 4, "hierarchical_context_parallel_sizes": [2, 2],
                          "create_all_gather_group": True, "use_tp_pp_dp_mapping": True,
                          "use_gloo_process_groups": False, "expert_tensor_parallel_size": 1,
                          "num_distributed_optimizer_instances": 2}


def test_swiglu_width_default():
    assert parse("--hidden-size 4096 --swiglu").model["ffn_hidden_size"] == 10880
    assert parse("--hidden-size 4096").model["ffn_hidden_size"] == 16384


def test_values_that_look_like_options_and_inline_values():
    a = parse("--adam-eps -1e-8 --num-layers=12 --lr 1e-4")
    assert a.model == {"layers": 12} and a.unused == ("--adam-eps", "--lr")


@pytest.mark.parametrize(("text", "words"), [
    ("--num-layer 32", "Megatron-LM has no argument --num-layer (megatron/training/arguments.py "
                       "at d98e8a64dd); did you mean --num-layers?"),
    ("--tensor-model-paralel-size 8", "did you mean --tensor-model-parallel-size?"),
    ("--tp 8", "Megatron-LM has no argument --tp"),
    ("--num-layers", "--num-layers needs a value"),
    ("--num-layers --hidden-size 8", "--num-layers needs a value"),
    ("--bf16=1", "--bf16 is a switch and takes no value"),
    ("--tensor-model-parallel-size 0", "expected a whole number >= 1"),
    ("--tensor-model-parallel-size eight", "'eight': expected a whole number"),
    ("8 --num-layers 2", "'8' is not an --option"),
    ("--num-layers 2 --num-layers 4", "--num-layers is given twice"),
    ("--num-layers 32 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 3",
     "does not divide by --num-layers-per-virtual-pipeline-stage 3"),
    ('--split "949,50', "unclosed quote"),
])
def test_bad_lists_are_refused_naming_the_argument(text, words):
    with pytest.raises(MegatronArgsError) as info:
        parse(text)
    assert words in str(info.value)
