"""The ``ddp:`` block of a recipe (NeMo's trainer.strategy.ddp, Megatron-Bridge's top-level
ddp) as read by configfile and turned into a :class:`~simharness.ag_readers.DPImpl`."""

from __future__ import annotations

import pytest

from simharness.ag_readers import DPImpl, dp_impl_from_ddp_block, memory_case, memory_paid
from simharness.configfile import ConfigFileError, parse_config_text

STRATEGY = "trainer:\n  devices: 8\n  strategy:\n    tensor_model_parallel_size: 2\n"


def test_nemo_strategy_ddp_block_is_kept():
    cf = parse_config_text(STRATEGY + "    ddp:\n      use_distributed_optimizer: true\n",
                           "r.yaml")
    assert cf.ddp == {"use_distributed_optimizer": True}
    assert cf.ddp_where == "trainer.strategy.ddp"
    dp = dp_impl_from_ddp_block(cf.ddp, profile="0.19", where="r.yaml trainer.strategy.ddp")
    assert (dp.impl, dp.source) == ("dist-opt", "r.yaml trainer.strategy.ddp")


def test_bridge_top_level_ddp_block_with_fsdp_and_fp32_grads():
    cf = parse_config_text(STRATEGY + "ddp:\n  use_megatron_fsdp: true\n"
                           "  data_parallel_sharding_strategy: optim_grads\n"
                           "  grad_reduce_in_fp32: true\n", "b.yaml")
    dp = dp_impl_from_ddp_block(cf.ddp, profile="0.19", where="b.yaml ddp")
    assert (dp.impl, dp.sharding, dp.grad_reduce_in_fp32) == ("fsdp", "optim_grads", True)
    assert dp.overlap_param_gather is None  # not written
    assert dp.reads("0.19") is True


def test_the_string_form_of_nemo_ddp_says_nothing_of_the_implementation():
    cf = parse_config_text(STRATEGY + "    ddp: megatron\n", "r.yaml")
    assert cf.ddp is None
    assert dp_impl_from_ddp_block(cf.ddp, profile=None, where="r.yaml").impl == "unknown"


def test_two_ddp_blocks_that_disagree_are_refused():
    text = (STRATEGY + "    ddp:\n      use_distributed_optimizer: true\n"
            "ddp:\n  use_distributed_optimizer: false\n")
    with pytest.raises(ConfigFileError, match="disagree"):
        parse_config_text(text, "r.yaml")


def test_the_bare_form_takes_a_ddp_block():
    cf = parse_config_text("tensor_model_parallel_size: 2\nddp:\n  use_distributed_optimizer: "
                           "false\n", "bare.yaml")
    assert dp_impl_from_ddp_block(cf.ddp, profile=None, where="bare.yaml ddp").impl == "ddp"


def test_unknown_describes_both_cases():
    text = DPImpl().describe()
    assert "not known" in text and "--dp-impl" in text and "both cases" in text
    assert DPImpl().reads("0.19") is None


@pytest.mark.parametrize("launch,read,paid", [("lazy", False, False), ("lazy", True, True),
                                              ("lazy", None, True), ("eager", False, True)])
def test_memory_cases(launch, read, paid):
    assert memory_paid(launch, read) is paid
    words = memory_case(launch, read)
    assert words.startswith("priced as ") and ("device_id" in words)
    with pytest.raises(ValueError):
        memory_case("soon", read)


@pytest.mark.parametrize("impl,path", [("fsdp", "'separate'"), ("dist-opt", "'shared'"),
                                       ("ddp", "neither variant"), ("unknown", None)])
def test_replay_data_names_the_variant_of_the_implementation(impl, path):
    from simharness.ag_readers import datapath_variants

    lines = datapath_variants("0.19", DPImpl(impl))
    assert lines[0].startswith("shared: ") and "distributed optimizer" in lines[0]
    assert lines[1].startswith("separate: ") and "Megatron-FSDP" in lines[1]
    if path is None:
        assert "not known" in lines[2]
    else:
        assert path in lines[2]
