"""simharness.ag_readers: the readers table's API, its one sentence, and the ``ddp:`` block.

Pure: no megatron-core, no torch (``tests/parity/test_ag_readers_parity.py`` holds the table
against Megatron's source).
"""

from __future__ import annotations

import pytest

from simharness.ag_readers import (
    AG_PROFILES,
    IMPLS,
    SHARDING_STRATEGIES,
    TABLE,
    DDPBlockError,
    ag_reader_sentence,
    impl_from_ddp_block,
    readers,
    reads_ag_group,
    row,
)
from simharness.configfile import ConfigFileError
from simharness.errors import SimharnessError
from simharness.profiles import MCORE_PROFILES

SHARDED = ("optim", "optim_grads", "optim_grads_params")


def test_every_profile_has_a_row_per_implementation():
    assert AG_PROFILES == MCORE_PROFILES + ("main",)
    for profile in AG_PROFILES:
        impls = [r.impl for r in TABLE[profile]]
        assert len(impls) == len(set(impls))
        assert set(impls) == set(IMPLS) - {"unknown"} - ({"fsdp-v2"} if profile != "main"
                                                         else set())


@pytest.mark.parametrize("profile", AG_PROFILES)
def test_only_megatron_fsdp_reads_the_dense_group(profile):
    assert [r.impl for r in readers(profile)] == ["fsdp"]
    for impl in ("dist-opt", "ddp", "torch-fsdp2", "fsdp-v2"):
        assert not reads_ag_group(profile, impl)
        for sharding in SHARDING_STRATEGIES:
            assert not reads_ag_group(profile, impl, sharding=sharding)


@pytest.mark.parametrize("profile", AG_PROFILES)
def test_megatron_fsdp_reads_it_when_it_shards(profile):
    assert reads_ag_group(profile, "fsdp")  # strategy not known: as for a sharded one
    assert not reads_ag_group(profile, "fsdp", sharding="no_shard")
    for sharding in SHARDED:
        assert reads_ag_group(profile, "fsdp", sharding=sharding)
    assert row(profile, "fsdp").sharding == SHARDED


def test_expert_twin_exists_from_018():
    assert readers("0.16", expert=True) == ()
    assert not reads_ag_group("0.16", "fsdp", expert=True, sharding="optim_grads_params")
    for profile in ("0.18", "0.19", "main"):
        assert [r.impl for r in readers(profile, expert=True)] == ["fsdp"]
        assert reads_ag_group(profile, "fsdp", expert=True, sharding="optim")
        assert not reads_ag_group(profile, "dist-opt", expert=True)


def test_unknown_means_some_implementation_might():
    assert reads_ag_group("0.19", "unknown")
    assert reads_ag_group("0.19", "unknown", expert=True)
    assert not reads_ag_group("0.16", "unknown", expert=True)


def test_every_row_cites_megatron_for_what_it_reads():
    for profile in AG_PROFILES:
        for r in TABLE[profile]:
            assert bool(r.sites) == (r.dense or r.expert), (profile, r.impl)
            assert r.where
            for s in r.sites:
                assert s.path.endswith(".py") and s.function and s.what
                assert s.side in ("dense", "expert", "both")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown megatron-core profile '0.15'.*0.16, 0.18"):
        readers("0.15")
    with pytest.raises(ValueError, match="unknown data-parallel implementation 'zero3'"):
        reads_ag_group("0.19", "zero3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown data_parallel_sharding_strategy 'full'"):
        reads_ag_group("0.19", "fsdp", sharding="full")


# ---------------------------------------------------------------- the one sentence
def test_sentence_names_the_reader_and_the_waste():
    fsdp = ag_reader_sentence("0.16", "fsdp")
    assert fsdp.startswith("Megatron-FSDP's parameter all-gather reads dp_cp_ag (megatron-core "
                           "0.16.1: FSDPDistributedIndex.__init__")
    dist = ag_reader_sentence("0.19", "dist-opt")
    assert dist.startswith("nothing in DDP with the distributed optimizer reads dp_cp_ag")
    assert dist.endswith("the option costs a communicator and buys nothing")
    both = ag_reader_sentence("0.19", "unknown")
    assert both.startswith(ag_reader_sentence("0.19", "fsdp") + "; ")
    assert "buys nothing" in both
    assert "ep_dp_ag" in ag_reader_sentence("0.18", "fsdp", expert=True)
    assert ag_reader_sentence("0.16", "dist-opt", expert=True) == (
        "megatron-core 0.16.x-0.17.x builds no expert all-gather group: nothing reads ep_dp_ag")
    assert "gathers no parameters" in ag_reader_sentence("0.18", "fsdp", sharding="no_shard")
    assert "set_separate_reduce_scatter_group()" in ag_reader_sentence("main", "torch-fsdp2")
    assert "only on Megatron-LM main" in ag_reader_sentence("0.19", "fsdp-v2")
    assert "Megatron-FSDP v2" in ag_reader_sentence("main", "unknown")


@pytest.mark.parametrize("profile", AG_PROFILES)
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("expert", (False, True))
def test_sentence_agrees_with_reads_ag_group(profile, impl, expert):
    text = ag_reader_sentence(profile, impl, expert=expert)
    kind = "ep_dp_ag" if expert else "dp_cp_ag"
    assert kind in text
    if reads_ag_group(profile, impl, expert=expert):
        assert f"all-gather reads {kind}" in text
    else:
        assert f"all-gather reads {kind}" not in text and "nothing" in text


# ---------------------------------------------------------------- the ddp: block
@pytest.mark.parametrize(("block", "impl", "sharding"), [
    (None, "unknown", None),
    ({}, "ddp", None),
    ({"use_distributed_optimizer": False, "overlap_grad_reduce": True}, "ddp", None),
    ({"use_distributed_optimizer": True, "overlap_param_gather": True,
      "overlap_grad_reduce": True, "grad_reduce_in_fp32": True}, "dist-opt", None),
    ({"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params",
      "use_distributed_optimizer": True}, "fsdp", "optim_grads_params"),
    ({"use_custom_fsdp": True, "data_parallel_sharding_strategy": "optim"}, "fsdp", "optim"),
    ({"use_megatron_fsdp": True}, "fsdp", "no_shard"),
    ({"use_megatron_fsdp": True, "megatron_fsdp_version": 2,
      "data_parallel_sharding_strategy": "optim_grads_params"}, "fsdp-v2",
     "optim_grads_params"),
    ({"use_megatron_fsdp": None, "use_distributed_optimizer": True}, "dist-opt", None),
])
def test_impl_from_ddp_block(block, impl, sharding):
    got_impl, got_sharding, notes = impl_from_ddp_block(block)
    assert (got_impl, got_sharding) == (impl, sharding)
    assert isinstance(notes, tuple) and all(isinstance(n, str) for n in notes)


def test_ddp_block_notes_say_what_is_implied():
    _, _, notes = impl_from_ddp_block({"use_megatron_fsdp": True})
    assert any("default 'no_shard'" in n for n in notes)
    assert any("gathers no parameters" in n for n in notes)
    _, _, notes = impl_from_ddp_block({"use_custom_fsdp": True,
                                       "data_parallel_sharding_strategy": "optim"})
    assert any("deprecated name of use_megatron_fsdp" in n for n in notes)
    _, _, notes = impl_from_ddp_block({"overlap_param_gather": True})
    assert any("needs the distributed optimizer or Megatron-FSDP" in n for n in notes)
    _, _, notes = impl_from_ddp_block({"data_parallel_sharding_strategy": "optim_grads"})
    assert any("read only by Megatron-FSDP" in n for n in notes)


@pytest.mark.parametrize(("block", "key", "message"), [
    ({"use_megatron_fsdp": "true"}, "use_megatron_fsdp",
     "job.yaml: ddp.use_megatron_fsdp must be true or false, got the string 'true'; write true "
     "without quotes."),
    ({"use_distributed_optimizer": 1}, "use_distributed_optimizer",
     "job.yaml: ddp.use_distributed_optimizer must be true or false, got 1; write true or "
     "false."),
    ({"overlap_param_gather": "yes"}, "overlap_param_gather",
     "job.yaml: ddp.overlap_param_gather must be true or false, got the string 'yes'; write "
     "true or false."),
    ({"grad_reduce_in_fp32": [True]}, "grad_reduce_in_fp32", "got [True]"),
    ({"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "full_shard"},
     "data_parallel_sharding_strategy",
     "job.yaml: ddp.data_parallel_sharding_strategy must be one of 'no_shard', 'optim', "
     "'optim_grads', 'optim_grads_params', got 'full_shard'; use one of them"),
    ({"megatron_fsdp_version": 3}, "megatron_fsdp_version", "must be 1 or 2, got 3"),
    ({"use_megatron_fsdp": True, "megatron_fsdp_version": 2}, "data_parallel_sharding_strategy",
     "Megatron-FSDP v2 requires data_parallel_sharding_strategy 'optim_grads_params', got "
     "'no_shard'"),
    (["use_megatron_fsdp"], "ddp", "ddp must be a mapping"),
])
def test_bad_ddp_block_names_the_key_and_the_fix(block, key, message):
    with pytest.raises(DDPBlockError) as info:
        impl_from_ddp_block(block, where="job.yaml")
    assert info.value.key == key
    assert message in str(info.value)
    assert isinstance(info.value, ConfigFileError) and isinstance(info.value, SimharnessError)


def test_megatron_fsdp_version_only_on_main():
    block = {"use_megatron_fsdp": True, "megatron_fsdp_version": 1,
             "data_parallel_sharding_strategy": "optim"}
    assert impl_from_ddp_block(block, profile="main")[0] == "fsdp"
    with pytest.raises(DDPBlockError, match="not a field of megatron-core 0.19.2's "
                       "DistributedDataParallelConfig.*use the 'main' profile") as info:
        impl_from_ddp_block(block, profile="0.19")
    assert info.value.key == "megatron_fsdp_version"
    with pytest.raises(ValueError, match="unknown megatron-core profile"):
        impl_from_ddp_block({}, profile="0.15")
