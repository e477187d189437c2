"""The pure modules behind the CLI: configfile, views, diff, explain, output helpers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simharness import LayoutError, ParallelismConfig, build_layout
from simharness._cli import output as out
from simharness.config import MCORE_PROFILES
from simharness.configfile import ConfigFileError, parse_config_text
from simharness.diff import diff_layouts
from simharness.explain import explain
from simharness.views import group_index, kind_rows, node_spans


@st.composite
def configs(draw):
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 2]))
    cp = draw(st.sampled_from([1, 2]))
    ep = draw(st.sampled_from([1, 2]))
    dp = draw(st.sampled_from([1, 2, 4]))
    world = tp * pp * cp * dp
    etp = draw(st.sampled_from([None, 1]))
    if world % ((etp or tp) * ep * pp):
        ep = 1
    ag = draw(st.booleans())
    mapping = draw(st.booleans())
    mcore = draw(st.sampled_from(MCORE_PROFILES))
    try:
        cfg = ParallelismConfig(world_size=world, tensor_model_parallel_size=tp,
                                pipeline_model_parallel_size=pp, context_parallel_size=cp,
                                expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
                                create_all_gather_group=ag, use_tp_pp_dp_mapping=mapping)
    except LayoutError:
        cfg = ParallelismConfig(world_size=world, tensor_model_parallel_size=tp,
                                pipeline_model_parallel_size=pp, context_parallel_size=cp,
                                create_all_gather_group=ag)
    return cfg, mcore


SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ views
@SETTINGS
@given(configs())
def test_group_index_agrees_with_rank_view(c):
    cfg, mcore = c
    lay = build_layout(cfg, mcore)
    idx = {k: group_index(lay, k) for k in lay.kinds}
    for r in {0, cfg.world_size // 2, cfg.world_size - 1}:
        view = lay.rank(r)
        for k, ix in idx.items():
            m = view.groups.get(k)
            if m is None:
                assert ix.group[r] == -1
            else:
                assert (ix.group[r], ix.position[r], ix.group_rank[r]) == (
                    m.group, m.position, m.group_rank)


def test_kind_rows_and_node_spans():
    lay = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2,
                                         pipeline_model_parallel_size=2))
    rows = kind_rows(lay, "pos_embd")  # only first-stage ranks
    assert rows[:, 0].tolist() == [0, 1, 2, 3]
    spans = node_spans(lay, "pp", 4)
    assert spans.n_nodes.tolist() == [2, 2, 2, 2] and spans.crossing.size == 4
    assert node_spans(lay, "tp", 4).crossing.size == 0


# ------------------------------------------------------------------- diff
@SETTINGS
@given(configs())
def test_diff_with_itself_is_identical(c):
    cfg, mcore = c
    d = diff_layouts(build_layout(cfg, mcore), build_layout(cfg, mcore))
    assert d.identical and not d.changed_kinds and not d.config_changes
    assert all(not ag.changed for ag in d.all_gather.values())


@SETTINGS
@given(configs(), configs())
def test_diff_is_antisymmetric(c1, c2):
    a, b = build_layout(*c1), build_layout(*c2)
    ab, ba = diff_layouts(a, b), diff_layouts(b, a)
    kab = {k.kind: k for k in ab.kinds}
    for k in ba.kinds:
        assert len(k.added) == len(kab[k.kind].removed)
        assert len(k.removed) == len(kab[k.kind].added)
    assert ab.identical == ba.identical
    for w in ("dense", "expert"):
        assert np.array_equal(ab.all_gather[w].ranks_changed, ba.all_gather[w].ranks_changed)


def test_diff_toggle_all_gather():
    cfg = ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
                            pipeline_model_parallel_size=2, context_parallel_size=2)
    for mcore in MCORE_PROFILES:
        d = diff_layouts(build_layout(cfg, mcore),
                         build_layout(cfg.replace(create_all_gather_group=True), mcore))
        assert [k.kind for k in d.changed_kinds] == ["dp_cp_ag"]
        dense = d.all_gather["dense"]
        assert dense.kinds == ("dp_cp", "dp_cp_ag") and dense.shared == (True, False)
        assert dense.ranks_changed.tolist() == list(range(16))
        assert dense.ranks_members_changed.size == 0
        assert (d.communicators[1] - d.communicators[0]).tolist() == [1] * 16


@pytest.mark.parametrize("mcore", ["0.18", "0.19"])
def test_diff_0_19_all_gather_ignores_order(mcore):
    # 0.18+'s create_all_gather_groups() hard-codes tp-cp-ep-dp-pp (upstream #4261): with the
    # tp-pp-dp mapping the AG groups hold other ranks than the reduce-scatter groups.
    cfg = ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
                            pipeline_model_parallel_size=2, use_tp_pp_dp_mapping=True)
    d = diff_layouts(build_layout(cfg, mcore),
                     build_layout(cfg.replace(create_all_gather_group=True), mcore))
    assert d.all_gather["dense"].ranks_members_changed.size > 0


def test_diff_different_worlds():
    a = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2))
    b = build_layout(ParallelismConfig(world_size=16, tensor_model_parallel_size=2))
    d = diff_layouts(a, b)
    assert not d.identical and len(d.common_ranks) == 8
    assert d.to_dict(limit=4)["config_changes"]["world_size"] == [8, 16]


# ---------------------------------------------------------------- explain
@SETTINGS
@given(configs())
def test_explain_valid_config_every_rule_holds(c):
    cfg, mcore = c
    ex = explain(cfg.to_dict(), mcore)
    assert ex.valid and ex.rules
    assert all(r.holds for r in ex.rules), [r for r in ex.rules if not r.holds]
    dp = next(d for d in ex.derived if d.name == "data_parallel_size")
    assert dp.value == cfg.dp and dp.formula.endswith(f"= {cfg.dp}")


@pytest.mark.parametrize("fields, rule", [
    ({"world_size": 12, "tp": 8}, "world-divisible"),
    ({"world_size": 8, "pp": 2, "vpp": 2, "tp": 4}, None),
    ({"world_size": 4, "pp": 8}, "world-covers-pipeline"),
    ({"world_size": 8, "num_distributed_optimizer_instances": 3}, "instances-divide-dp"),
    ({"world_size": 8, "cp": 4, "hierarchical_context_parallel_sizes": [2, 4]},
     "hierarchical-cp"),
    ({"world_size": 8, "order": "tp-pp"}, "order-dense"),
    ({"world_size": 8, "gtp_remat_size": 2}, "gtp-needs-0.19"),
])
def test_explain_invalid_marks_the_rule(fields, rule):
    ex = explain(fields, "0.16")
    if rule is None:
        assert ex.valid
        return
    assert not ex.valid and ex.error
    assert rule in [r.name for r in ex.rules if r.holds is False]


def test_explain_world_chosen():
    ex = explain({"tp": 2, "pp": 2})
    world = next(d for d in ex.derived if d.name == "world_size")
    assert world.value == 4 and "lcm" in world.formula


# ------------------------------------------------------------- configfile
def test_configfile_shapes():
    cf = parse_config_text("tp: 2\nworld_size: 8\nmcore: 0.16\n", "a.yaml")
    assert cf.fields == {"tensor_model_parallel_size": 2, "world_size": 8}
    assert cf.mcore == "0.16"
    cf = parse_config_text('{"trainer": {"devices": "auto", "num_nodes": 2, "strategy": '
                           '{"context_parallel_size": 2}}}', "r.json")
    assert cf.world_size is None and cf.fields == {"context_parallel_size": 2}
    cf = parse_config_text("nodes = 2\ngpus_per_node = 4\n", "n.toml")
    assert cf.world_size == 8


@pytest.mark.parametrize("text, name, fragment", [
    ("a: [1\n", "x.yaml", "x.yaml:"),
    ("a = \n", "x.toml", "x.toml:1:"),
    ("{\n\n,}", "x.json", "x.json:3:"),
    ("nodes: zero\n", "x.yaml", "nodes must be a whole number"),
    ("trainer: 3\n", "x.yaml", "'trainer' must be a mapping"),
    ("trainer:\n  strategy:\n    parallelism: 2\n", "x.yaml", "must be a mapping"),
])
def test_configfile_errors(text, name, fragment):
    with pytest.raises(ConfigFileError) as info:
        parse_config_text(text, name)
    assert fragment in str(info.value)


# ----------------------------------------------------------------- output
def test_output_helpers():
    assert out.format_ranks([1, 5, 2]) == "[1, 5, 2]"
    assert out.format_ranks(list(range(20)) + [99]).endswith("(21 ranks)")
    assert out.format_rank_set([0, 1, 2, 3, 8, 10, 11]) == "0-3, 8, 10-11"
    assert out.format_rank_set([]) == "none"
    assert out.head_tail(5) == ([0, 1, 2, 3, 4], [])
    assert out.head_tail(1000, show_all=True)[1] == []
    assert out.row_strings(np.array([[10, 2, 3]])) == ["10 2 3"]
    assert out.row_strings(np.zeros((0, 3), dtype=int)) == []
    assert out.to_json({"a": np.int64(3), "b": np.arange(2)}, indent=None) == \
        '{"a": 3, "b": [0, 1]}'


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(0, 10 ** 12), min_size=3, max_size=3), min_size=1,
                max_size=20), st.sampled_from(["", "tp,TENSOR_MODEL_PARALLEL_GROUP,nccl"]))
def test_int_csv_block_matches_plain_formatting(rows, insert):
    expected = "".join(
        ",".join([str(r[0])] + ([insert] if insert else []) + [str(x) for x in r[1:]]) + "\n"
        for r in rows)
    assert out.int_csv_block(np.array(rows, dtype=np.int64), insert, at=1) == expected
