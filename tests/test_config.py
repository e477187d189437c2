"""``ParallelismConfig``: construction paths, keyword profiles, validation messages.

Expected values come from the reference (NeMo's field names and defaults §4.1-§4.2,
Megatron's messages §2/§7, the NeMo MagicMock hazard §4.4).
"""

from __future__ import annotations

import dataclasses
import json
import types
from typing import Any, Optional
from unittest import mock

import pytest

from simharness import LayoutError, ParallelismConfig, build_layout
from simharness.config import DEFAULT_ORDER, TP_PP_DP_ORDER


# ------------------------------------------------------------ basics
def test_defaults_and_derived_sizes():
    cfg = ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
                            pipeline_model_parallel_size=2, context_parallel_size=2)
    assert cfg.order == DEFAULT_ORDER
    assert (cfg.dp, cfg.data_parallel_size_with_cp, cfg.model_parallel_size) == (2, 4, 4)
    assert (cfg.etp, cfg.edp) == (2, 4)        # etp defaults to tp; edp = W / (etp*ep*pp)
    assert cfg.ranks == range(16)
    # MegatronStrategy defaults (reference §4.2).
    d = ParallelismConfig(world_size=1)
    assert (d.tp, d.pp, d.cp, d.ep, d.virtual_pipeline_model_parallel_size) == (1, 1, 1, 1, None)
    assert d.use_gloo_process_groups is True and d.create_all_gather_group is False
    assert d.num_distributed_optimizer_instances == 1 and d.use_tp_pp_dp_mapping is False


def test_smallest_world():
    assert ParallelismConfig(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                             context_parallel_size=2).world_size == 8
    # lcm of tp*pp*cp and etp*ep*pp
    assert ParallelismConfig(tensor_model_parallel_size=2, expert_model_parallel_size=3,
                             expert_tensor_parallel_size=1).world_size == 6
    # grown until the instances divide dp*cp and the expert dp
    assert ParallelismConfig(tensor_model_parallel_size=2,
                             num_distributed_optimizer_instances=4).world_size == 8


def test_use_tp_pp_dp_mapping_and_replace():
    cfg = ParallelismConfig(world_size=8, use_tp_pp_dp_mapping=True)
    assert cfg.order == TP_PP_DP_ORDER
    assert cfg.replace(use_tp_pp_dp_mapping=False).order == DEFAULT_ORDER
    assert cfg.replace(order="tp-pp-dp").order == "tp-pp-dp"
    with pytest.raises(LayoutError):
        cfg.replace(tensor_model_parallel_size=3)


def test_to_dict_is_json_ready_and_round_trips():
    cfg = ParallelismConfig(world_size=8, context_parallel_size=4,
                            hierarchical_context_parallel_sizes="2, 2",
                            high_priority_stream_groups=["dp_cp"])
    assert cfg.hierarchical_context_parallel_sizes == (2, 2)
    d = cfg.to_dict()
    assert d["hierarchical_context_parallel_sizes"] == [2, 2]
    assert ParallelismConfig.from_dict(json.loads(json.dumps(d))) == cfg


# ------------------------------------------------------------ from_dict
def test_from_dict_aliases():
    cfg = ParallelismConfig.from_dict({"tp": 2, "pp": 2, "vpp": 2, "cp": 2, "ep": 2, "etp": 1,
                                       "world": 16, "create_gloo_process_groups": False,
                                       "num-distributed-optimizer-instances": 2})
    assert (cfg.tp, cfg.pp, cfg.virtual_pipeline_model_parallel_size, cfg.cp, cfg.ep,
            cfg.expert_tensor_parallel_size, cfg.world_size) == (2, 2, 2, 2, 2, 1, 16)
    assert cfg.use_gloo_process_groups is False and cfg.num_distributed_optimizer_instances == 2


def test_from_dict_unknown_key_suggests():
    with pytest.raises(LayoutError) as info:
        ParallelismConfig.from_dict({"tensor_model_paralel_size": 2})
    msg = str(info.value)
    assert "'tensor_model_paralel_size'" in msg and "did you mean 'tensor_model_parallel_size'" in msg


# ------------------------------------------------------------ from_object
NEMO_FIELDS = dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                   virtual_pipeline_model_parallel_size=None,
                   microbatch_group_size_per_vp_stage=2, context_parallel_size=2,
                   sequence_parallel=True, expert_model_parallel_size=2, moe_extended_tp=False,
                   pipeline_dtype="torch.bfloat16")


@dataclasses.dataclass
class NemoParallelismConfig:
    """The shape of NeMo's ``ParallelismConfig`` (reference §4.1): required fields first."""

    tensor_model_parallel_size: int
    pipeline_model_parallel_size: int
    virtual_pipeline_model_parallel_size: Optional[int]
    microbatch_group_size_per_vp_stage: int
    context_parallel_size: int
    sequence_parallel: bool
    expert_model_parallel_size: int
    moe_extended_tp: bool
    pipeline_dtype: Any
    encoder_tensor_model_parallel_size: int = 0
    encoder_pipeline_model_parallel_size: int = 0
    pipeline_model_parallel_comm_backend: Optional[str] = None
    expert_tensor_parallel_size: Optional[int] = None
    use_tp_pp_dp_mapping: bool = False
    num_distributed_optimizer_instances: int = 1
    use_sharp: bool = False
    use_gloo_process_groups: bool = True
    nemo_only_field: str = "ignored"


def test_from_object_dataclass_namespace_and_mapping_agree():
    a = ParallelismConfig.from_object(NemoParallelismConfig(**NEMO_FIELDS), world_size=16)
    b = ParallelismConfig.from_object(types.SimpleNamespace(**NEMO_FIELDS, world_size=16))
    c = ParallelismConfig.from_object(dict(NEMO_FIELDS, world_size=16))
    assert a == b == c
    assert (a.tp, a.pp, a.cp, a.ep, a.dp, a.sequence_parallel) == (2, 2, 2, 2, 2, True)


def test_from_object_magicmock_skips_unset_attributes():
    """NeMo's test hazard (reference §4.4): a MagicMock returns a truthy mock for every
    attribute it was not given; only the attributes set are values."""
    m = mock.MagicMock()
    for k, v in NEMO_FIELDS.items():
        setattr(m, k, v)
    m.world_size = 16
    assert bool(m.create_all_gather_group)            # the hazard itself
    cfg = ParallelismConfig.from_object(m)
    assert cfg == ParallelismConfig.from_dict(dict(NEMO_FIELDS, world_size=16))
    assert cfg.create_all_gather_group is False
    assert cfg.use_sharp is False and cfg.rank_offset == 0 and cfg.order == DEFAULT_ORDER
    # build_layout takes such objects directly.
    assert build_layout(m, mcore="0.16").world_size == 16


def test_from_object_overrides_win():
    ns = types.SimpleNamespace(**NEMO_FIELDS)
    assert ParallelismConfig.from_object(ns, world_size=32, context_parallel_size=1).dp == 8


# ------------------------------------------------------------ from_megatron
def test_from_megatron_keywords_per_profile():
    cfg = ParallelismConfig.from_megatron(world_size=8, mcore="0.16",
                                          tensor_model_parallel_size=2,
                                          create_all_gather_group=True,
                                          create_gloo_process_groups=False)
    assert cfg.create_all_gather_group and not cfg.use_gloo_process_groups
    assert cfg.order == DEFAULT_ORDER
    for mcore, bad in (("0.16", "gtp_remat_size"), ("0.16", "expert_gtp_remat_size"),
                       ("0.19", "create_all_gather_group"), ("0.16", "world"),
                       ("0.19", "use_tp_pp_dp_mapping"), ("0.18", "create_all_gather_group"),
                       ("0.18", "gtp_remat_size"), ("0.18", "expert_gtp_remat_size")):
        with pytest.raises(LayoutError) as info:
            ParallelismConfig.from_megatron(world_size=8, mcore=mcore, **{bad: 2})
        assert info.value.megatron_error == "TypeError"
        assert bad in str(info.value) and mcore in str(info.value)
    g = ParallelismConfig.from_megatron(world_size=8, mcore="0.19", tensor_model_parallel_size=2,
                                        gtp_remat_size=2, expert_gtp_remat_size=2)
    assert (g.gtp_remat_size, g.expert_gtp_remat_size, g.dp) == (2, 2, 2)


def test_from_megatron_local_world_and_offset():
    cfg = ParallelismConfig.from_megatron(world_size=32, mcore="0.19", local_world_size=16,
                                          rank_offset=16)
    assert cfg.world_size == 16 and cfg.ranks == range(16, 32)
    assert ParallelismConfig.from_megatron(world_size=8, local_world_size=None).world_size == 8


def test_from_megatron_embedding_callables():
    assert ParallelismConfig.from_megatron(world_size=8, get_embedding_ranks=None,
                                           get_position_embedding_ranks=None).world_size == 8
    with pytest.raises(LayoutError) as info:
        ParallelismConfig.from_megatron(world_size=8, get_embedding_ranks=lambda r: r[:1])
    assert "get_embedding_ranks" in str(info.value)


def test_unknown_profile():
    with pytest.raises(LayoutError) as info:
        build_layout(ParallelismConfig(world_size=8), mcore="0.15")
    assert "'0.15'" in str(info.value) and "0.16" in str(info.value)


# ------------------------------------------------------------ messages
@pytest.mark.parametrize("kwargs,error,parts", [
    (dict(world_size=8, tensor_model_parallel_size=3), "RuntimeError",
     ["world_size (8) is not divisible by 3", "tp(3)"]),
    (dict(world_size=12, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
          context_parallel_size=2), "RuntimeError", ["(12)", "8", "e.g. 16"]),
    (dict(world_size=16, expert_tensor_parallel_size=1, expert_model_parallel_size=3),
     "RuntimeError", ["world_size (16)", "(3)", "ep(3)"]),
    (dict(world_size=8, tensor_model_parallel_size=2, num_distributed_optimizer_instances=3),
     "AssertionError", ["(3)", "dp*cp", "4"]),
    (dict(world_size=8, context_parallel_size=2, expert_model_parallel_size=2,
          num_distributed_optimizer_instances=8), "AssertionError", ["(8)", "(4)"]),
    (dict(world_size=8, virtual_pipeline_model_parallel_size=2), "RuntimeError",
     ["virtual_pipeline_model_parallel_size=2", "(got 1)"]),
    (dict(world_size=8, context_parallel_size=2, order="tp-ep-dp-pp"), "RuntimeError",
     ["'tp-ep-dp-pp'", "'cp'", "size is 2"]),
    (dict(world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
          expert_tensor_parallel_size=1, order=TP_PP_DP_ORDER), "AssertionError",
     ["'tp-cp-ep-pp-dp'", "pp=2", "(8)", "(4)"]),
    (dict(world_size=8, context_parallel_size=4, hierarchical_context_parallel_sizes=[2, 4]),
     "AssertionError", ["[2, 4]", "8", "(4)"]),
    (dict(world_size=2, pipeline_model_parallel_size=4), "RuntimeError",
     ["world_size (2)", "(4)"]),
    (dict(world_size=8, pipeline_model_parallel_size=2, pipeline_model_parallel_comm_backend="mpi"),
     "AssertionError", ["'mpi'"]),
    (dict(world_size=8, sharp_enabled_group="dp"), "AssertionError", ["'dp'", "use_sharp"]),
])
def test_errors_name_the_values(kwargs, error, parts):
    with pytest.raises(LayoutError) as info:
        ParallelismConfig(**kwargs)
    assert info.value.megatron_error == error
    for p in parts:
        assert p in str(info.value), (p, str(info.value))


def test_world_smaller_than_pp_keeps_nemo_error():
    """NeMo raises ValueError before Megatron runs; megatron-core alone raises RuntimeError."""
    with pytest.raises(LayoutError) as info:
        ParallelismConfig(world_size=2, pipeline_model_parallel_size=4)
    assert info.value.megatron_error == "RuntimeError"
    assert info.value.values["nemo_error"] == "ValueError"
    assert "Expected world_size (2) to be greater than/equal to pipeline size (4)" in str(info.value)


@pytest.mark.parametrize("kwargs", [
    dict(encoder_pipeline_model_parallel_size=1),
    dict(encoder_tensor_model_parallel_size=3, tensor_model_parallel_size=2),
])
def test_nemo_encoder_asserts(kwargs):
    """reference §4.3: NeMo asserts encoder_pp == 0 and encoder_tp in {0, tp}."""
    with pytest.raises(LayoutError) as info:
        ParallelismConfig(world_size=8, **kwargs)
    assert info.value.megatron_error == "AssertionError"
