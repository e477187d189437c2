"""``ParallelismConfig``: construction paths, keyword profiles, validation messages.

Expected values come from the reference (NeMo's field names and defaults §4.1-§4.2,
Megatron's messages §2/§7, the NeMo MagicMock hazard §4.4).
"""

from __future__ import annotations

import dataclasses
import json
import types
from typing import Any
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


def test_resolved_fields_are_the_constructed_values():
    # world_size=None and order=None are filled in at construction; the typed
    # *_resolved views return exactly those values (also without validation).
    for make in (ParallelismConfig, ParallelismConfig.unchecked):
        cfg = make(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                   use_tp_pp_dp_mapping=True)
        assert (cfg.world_size_resolved, cfg.order_resolved) == (4, TP_PP_DP_ORDER)
        assert (cfg.world_size, cfg.order) == (4, TP_PP_DP_ORDER)
    # A None that escaped construction is a bug, reported as one, not a TypeError later.
    broken = ParallelismConfig(world_size=4)
    object.__setattr__(broken, "world_size", None)
    with pytest.raises(AssertionError, match="world_size was not resolved"):
        _ = broken.data_parallel_size


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
    assert "'tensor_model_paralel_size'" in msg
    assert "did you mean 'tensor_model_parallel_size'" in msg


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
    virtual_pipeline_model_parallel_size: int | None
    microbatch_group_size_per_vp_stage: int
    context_parallel_size: int
    sequence_parallel: bool
    expert_model_parallel_size: int
    moe_extended_tp: bool
    pipeline_dtype: Any
    encoder_tensor_model_parallel_size: int = 0
    encoder_pipeline_model_parallel_size: int = 0
    pipeline_model_parallel_comm_backend: str | None = None
    expert_tensor_parallel_size: int | None = None
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
    expected = "Expected world_size (2) to be greater than/equal to pipeline size (4)"
    assert expected in str(info.value)


@pytest.mark.parametrize("kwargs", [
    dict(encoder_pipeline_model_parallel_size=1),
    dict(encoder_tensor_model_parallel_size=3, tensor_model_parallel_size=2),
])
def test_nemo_encoder_asserts(kwargs):
    """reference §4.3: NeMo asserts encoder_pp == 0 and encoder_tp in {0, tp}."""
    with pytest.raises(LayoutError) as info:
        ParallelismConfig(world_size=8, **kwargs)
    assert info.value.megatron_error == "AssertionError"


# -------------------------------------- one rule table, one home for profile facts
def test_profile_facts_have_one_home():
    """Profile names, the default profile and the default order are defined in
    ``profiles`` (config re-exports them); the dead aliases are gone."""
    from simharness import config, profiles

    assert config.MCORE_PROFILES is profiles.MCORE_PROFILES == tuple(profiles.PROFILES)
    assert config.DEFAULT_MCORE is profiles.DEFAULT_MCORE in profiles.PROFILES
    assert config.DEFAULT_ORDER is profiles.DEFAULT_ORDER
    for module, name in ((config, "order_problem"), (config, "_order_problem"),
                         (config, "ORDER_TOKENS"), (profiles, "ag_grids_019"),
                         (profiles, "all_gather_loops_019"), (profiles, "validate_profile"),
                         (profiles, "AG_ORDER")):
        assert not hasattr(module, name), name


def test_explain_lists_the_rule_table_and_validate_raises_its_first_failure():
    from simharness.config import validate
    from simharness.explain import explain
    from simharness.rules import RULES

    names = [r.name for r in RULES]
    fields = dict(world_size=12, tensor_model_parallel_size=8, expert_model_parallel_size=5)
    ex = explain(fields, "0.18")
    listed = [r.name for r in ex.rules]
    assert listed == sorted(listed, key=names.index)      # the table's order
    failed = [r.name for r in ex.rules if r.holds is False]
    assert failed[:2] == ["world-divisible", "world-divisible-expert"]
    cfg = ParallelismConfig.unchecked(**fields)
    with pytest.raises(LayoutError) as info:
        validate(cfg, "0.18")
    assert info.value.values["rule"] == failed[0] and str(info.value) == ex.error


def test_validate_raises_in_megatrons_order():
    """0.18 has no gtp_remat_size keyword: TypeError comes before the 0.19-only
    GTP/instances assert that a bare config (any profile) reports."""
    kw = dict(world_size=8, tensor_model_parallel_size=2, gtp_remat_size=2,
              num_distributed_optimizer_instances=2)
    with pytest.raises(LayoutError) as bare:
        ParallelismConfig(**kw)
    assert bare.value.megatron_error == "AssertionError"          # 0.19, the default
    with pytest.raises(LayoutError) as old:
        build_layout(ParallelismConfig.unchecked(**kw), "0.18")
    assert old.value.megatron_error == "TypeError"


# ------------------------------------------------------------ validation edges
def test_window_past_the_world_is_megatrons_value_error():
    with pytest.raises(LayoutError) as info:
        ParallelismConfig.from_megatron(world_size=16, mcore="0.18", tensor_model_parallel_size=2,
                                        rank_offset=12, local_world_size=8)
    e = info.value
    assert e.megatron_error == "ValueError" and "Rank 16 is out of range" in str(e)
    assert (e.values["rank_offset"], e.values["world_size"], e.values["torch_world"]) == (12, 8, 16)
    with pytest.raises(LayoutError) as whole:   # no local_world_size: the window is the world
        ParallelismConfig.from_megatron(world_size=8, mcore="0.19", rank_offset=1)
    assert whole.value.megatron_error == "ValueError"
    ok = ParallelismConfig.from_megatron(world_size=16, mcore="0.18", rank_offset=8,
                                         local_world_size=8)
    assert ok.ranks == range(8, 16)


PAIRS_1, PAIRS_2, PAIRS_4 = ([[0, 1], [2, 3], [4, 5], [6, 7]], [[0, 2], [1, 3], [4, 6], [5, 7]],
                             [[0, 4], [1, 5], [2, 6], [3, 7]])


@pytest.mark.parametrize("order,gtp_groups,tp_groups", [
    ("tp-gtp_remat-cp-ep-dp-pp", PAIRS_2, PAIRS_1),     # where 0.19 injects it by default
    ("gtp_remat-tp-cp-ep-dp-pp", PAIRS_1, PAIRS_2),
    ("tp-cp-ep-dp-pp-gtp_remat", PAIRS_4, PAIRS_1),
])
def test_019_explicit_gtp_remat_token_keeps_its_place(order, gtp_groups, tp_groups):
    cfg = ParallelismConfig(world_size=8, tensor_model_parallel_size=2, gtp_remat_size=2,
                            order=order)
    lay = build_layout(cfg, "0.19")
    assert lay.groups("gtp_remat").tolist() == gtp_groups
    assert lay.groups("tp").tolist() == tp_groups
    with pytest.raises(LayoutError) as info:      # 0.18's RankGenerator has no such name
        build_layout(cfg.replace(gtp_remat_size=1), "0.18")
    assert info.value.megatron_error == "KeyError"


@pytest.mark.parametrize("tp,etp,error", [(1, None, "ValueError"), (2, None, "AssertionError"),
                                          (1, 2, "AssertionError")])
def test_019_order_without_tp(tp, etp, error):
    """0.19 injects 'gtp_remat'; 'tp' is a substring of it, so a missing 'tp' is neither
    appended nor reported: size 1 fails at get_ranks('tp-...') ('tp' is not in list),
    size > 1 in the enumeration of the first get_ranks (AssertionError)."""
    kw = dict(world_size=8, tensor_model_parallel_size=tp, expert_tensor_parallel_size=etp,
              order="cp-ep-dp-pp")
    cfg = ParallelismConfig.unchecked(**kw)
    with pytest.raises(LayoutError) as info:
        build_layout(cfg, "0.19")
    assert info.value.megatron_error == error
    if tp == 1 and etp is None:
        assert build_layout(cfg, "0.18").groups("tp").shape == (8, 1)


@pytest.mark.parametrize("gtp,egtp,ep,error", [
    (1, 2, 1, None), (1, 2, 2, "ValueError"), (2, 1, 1, "ValueError"), (1, 1, 2, None)])
def test_019_all_gather_with_gtp(gtp, egtp, ep, error):
    """create_all_gather_groups() fails only when a generator it builds outgrows the world:
    gtp > 1, or egtp > 1 with ep > 1 (no expert AG group when ep == 1)."""
    kw = dict(world_size=8, expert_model_parallel_size=ep, expert_tensor_parallel_size=1,
              gtp_remat_size=gtp, expert_gtp_remat_size=egtp, create_all_gather_group=True)
    if error is None:
        lay = build_layout(ParallelismConfig(**kw), "0.19")
        assert lay.has("dp_cp_ag") and lay.has("ep_dp_ag") == (ep > 1)
    else:
        with pytest.raises(LayoutError) as info:
            build_layout(ParallelismConfig.unchecked(**kw), "0.19")
        assert info.value.megatron_error == error


@pytest.mark.parametrize("repeated,plain", [
    ("pp-cp-dp-tp-tp-ep", "pp-cp-dp-tp-ep"),          # tp = 1
    ("tp-cp-ep-dp-pp-pp", "tp-cp-ep-dp-pp"),          # pp = 2, nothing after the repeat
])
def test_repeated_token_that_changes_no_group_is_the_normal_layout(repeated, plain):
    from simharness.checks import check

    def lay(order):
        return build_layout(ParallelismConfig(world_size=8, pipeline_model_parallel_size=2,
                                              order=order))

    rep = lay(repeated)
    assert [(c.desc, c.ranks) for c in rep.creation_order] == \
        [(c.desc, c.ranks) for c in lay(plain).creation_order]
    assert "suspicious-order" in {f.code for f in check(rep)}


def test_repeated_token_that_overruns_is_megatrons_value_error():
    with pytest.raises(LayoutError) as info:   # a repeat of size 2 overruns the world
        ParallelismConfig(world_size=8, tensor_model_parallel_size=2, order="tp-tp-cp-ep-dp-pp")
    assert info.value.megatron_error == "ValueError"


def test_explain_follows_the_profile():
    """The same order is a different Megatron error per profile, and explain says which."""
    from simharness.explain import explain

    fields = {"world_size": 8, "tp": 2, "order": "cp-dp-pp"}
    old, new = explain(fields, "0.18"), explain(fields, "0.19")
    assert "haven'tspecified" in old.error and "order-dense" in [
        r.name for r in old.rules if r.holds is False]
    assert "gtp_remat" in new.error and "same-pipeline-groups" in [
        r.name for r in new.rules if r.holds is False]
    assert explain({"world_size": 8, "order": "tp-gtp_remat-dp"}, "0.19").valid
    assert not explain({"world_size": 8, "order": "tp-gtp_remat-dp"}, "0.18").valid
