"""Inputs: every value means what the user meant or is refused.

One strict parser for every source (simharness.fieldtypes), conflicts between two sources
of one value, NeMo's silent changes as notes, file errors that name the user's path,
warnings that mean likely mistakes (real published layouts check clean), help examples.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.paths import ROOT

from cli import main
from simharness import LayoutError, ParallelismConfig, SimharnessError, build_layout, check
from simharness.config import ALIASES
from simharness.configfile import ConfigFileError, config_from_mapping, parse_config_text
from simharness.fieldtypes import FALSE_WORDS, FIELD_TYPES, TRUE_WORDS, parse_field

PUBLISHED = yaml.safe_load((ROOT / "tests" / "data" / "published_layouts.yaml").read_text())


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def fails(*args, fragments=(), absent=()):
    """One ``error:`` line, exit 2, no traceback; ``fragments`` in it, ``absent`` not."""
    result = invoke(*args)
    assert result.exit_code == 2, (result.exit_code, result.output)
    err = result.stderr
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert "Traceback" not in result.output
    for f in fragments:
        assert f in err, (f, err)
    for f in absent:
        assert f not in err, (f, err)
    return err


# --------------------------------------------------------------- the strict parser
def test_every_config_field_has_one_type():
    assert set(FIELD_TYPES) == set(ParallelismConfig.field_names())


@pytest.mark.parametrize("word", TRUE_WORDS + tuple(w.upper() for w in TRUE_WORDS))
def test_command_line_true_spellings(word):
    assert parse_field("use_sharp", word, where="--set", from_text=True) is True


@pytest.mark.parametrize("word", FALSE_WORDS + ("False", "OFF"))
def test_command_line_false_spellings(word):
    assert parse_field("use_sharp", word, where="--set", from_text=True) is False


@pytest.mark.parametrize("name, value, text, fragment", [
    ("use_sharp", "maybe", True, "true/yes/on/1 or false/no/off/0"),
    ("sequence_parallel", "yes_please", False, "must be true or false"),
    ("create_all_gather_group", "false", False, "write false without quotes"),
    ("create_all_gather_group", 0, False, "must be true or false, got 0"),
    ("tensor_model_parallel_size", 2.0, False, "write 2"),
    ("tensor_model_parallel_size", "4", False, "write it without quotes"),
    ("tensor_model_parallel_size", True, False, "whole number >= 1, got True"),
    ("tensor_model_parallel_size", "2.0", True, "whole number"),
    ("tensor_model_parallel_size", "0", True, "use a value >= 1"),
    ("rank_offset", -1, False, ">= 0"),
    ("tensor_model_parallel_size", None, False, "give tensor_model_parallel_size a value"),
    ("pipeline_model_parallel_comm_backend", "gloo", True, "use one of nccl, ucc"),
    ("sharp_enabled_group", "tp", False, "use one of dp, dp_replica"),
    ("hierarchical_context_parallel_sizes", "2,x", True, "like [2, 2]"),
    ("order", 7, False, "write it as a string"),
    ("high_priority_stream_groups", "dp_cp,bogus", True, "'bogus' is no group Megatron"),
    ("high_priority_stream_groups", [1], False, "like [dp_cp, ep_dp]"),
])
def test_bad_values_are_refused_naming_source_and_fix(name, value, text, fragment):
    with pytest.raises(LayoutError) as info:
        parse_field(name, value, where="SRC", from_text=text)
    msg = str(info.value)
    assert msg.startswith("SRC: ") and name in msg and fragment in msg, msg


def test_good_values_keep_their_meaning():
    assert parse_field("world_size", "16", where="x", from_text=True) == 16
    assert parse_field("virtual_pipeline_model_parallel_size", "none", where="x",
                       from_text=True) is None
    assert parse_field("hierarchical_context_parallel_sizes", [2, 2], where="x") == (2, 2)
    assert parse_field("high_priority_stream_groups", "dp_cp,ep_dp", where="x",
                       from_text=True) == ("dp_cp", "ep_dp")


def test_the_library_refuses_string_booleans():
    with pytest.raises(LayoutError, match="the string 'false'"):
        ParallelismConfig(world_size=8, create_all_gather_group="false")  # type: ignore[arg-type]
    with pytest.raises(LayoutError, match="use_sharp must be True or False, got 1"):
        ParallelismConfig(world_size=8, use_sharp=1)  # type: ignore[arg-type]


# ------------------------------------------------------------------ files
@pytest.mark.parametrize("text, name, fragment", [
    ('create_all_gather_group: "false"\n', "a.yaml", "a.yaml: create_all_gather_group"),
    ("sequence_parallel: yes_please\n", "a.yaml", "'yes_please'"),
    ("tp: 2\ntp: 4\n", "a.yaml", "a.yaml:2: key 'tp' appears twice (lines 1 and 2)"),
    ('{"tp": 2, "tp": 4}', "a.json", "key 'tp' appears twice (values 2 and 4)"),
    ("trainer:\n  devices: 8\n  devices: 4\n  strategy: {}\n", "r.yaml", "'devices' appears"),
    ("tp: 2\ntensor_model_parallel_size: 4\n", "a.yaml",
     "tp: 2 and tensor_model_parallel_size: 4 in the file"),
    ("world_size: 8\nnodes: 2\ngpus_per_node: 8\n", "a.yaml",
     "world_size 8 conflicts with nodes x gpus_per_node = 2 x 8 = 16"),
    ("world_size: 8\ntrainer:\n  devices: 8\n  num_nodes: 2\n  strategy:\n    tp: 2\n",
     "r.yaml", "conflicts with trainer.num_nodes x trainer.devices = 2 x 8 = 16"),
    ("trainer:\n  strategy:\n    tensor_model_parallel_size: 2\n    parallelism:\n"
     "      tensor_model_parallel_size: 4\n", "r.yaml",
     "trainer.strategy.tensor_model_parallel_size is 2 but "
     "trainer.strategy.parallelism.tensor_model_parallel_size is 4"),
    ('trainer:\n  devices: "8"\n  strategy: {}\n', "r.yaml", "write 8 without quotes"),
    ("trainer:\n  devices: 0\n  strategy: {}\n", "r.yaml", "trainer.devices must be"),
    ("tensor_model_parallel_size = 2.0\n", "a.toml", "write 2"),
])
def test_file_values_are_strict(text, name, fragment):
    with pytest.raises(ConfigFileError) as info:
        parse_config_text(text, name)
    assert fragment in str(info.value), str(info.value)


def test_parallelism_outside_the_strategy_is_not_ignored():
    with pytest.raises(ConfigFileError, match="tensor_model_parallel_size at the top level"):
        parse_config_text("tensor_model_parallel_size: 4\ntrainer:\n  devices: 8\n"
                          "  strategy: {pp: 2}\n", "r.yaml")


def test_order_and_the_mapping_must_agree():
    with pytest.raises(LayoutError, match="conflicts with use_tp_pp_dp_mapping=True"):
        ParallelismConfig(world_size=8, use_tp_pp_dp_mapping=True, order="tp-cp-ep-dp-pp")
    cfg = ParallelismConfig(world_size=8, use_tp_pp_dp_mapping=True, order="tp-cp-ep-pp-dp")
    assert cfg.order == "tp-cp-ep-pp-dp"
    fails("check", "-n", "8", "--set", "use_tp_pp_dp_mapping=true", "--order", "tp-cp-ep-dp-pp",
          fragments=("use_tp_pp_dp_mapping=True",))


def test_yaml_merge_keys_may_be_overridden():
    cf = parse_config_text("base: &b {}\ntrainer:\n  strategy:\n    <<: {tp: 2}\n    tp: 4\n",
                           "m.yaml")
    assert cf.fields == {"tensor_model_parallel_size": 4}


def test_recipe_devices_forms():
    cf = parse_config_text("trainer:\n  devices: [0, 1, 2, 3]\n  num_nodes: 2\n"
                           "  strategy: {tp: 2}\n", "r.yaml")
    assert cf.world_size == 8
    cf = parse_config_text('trainer:\n  devices: "0,1"\n  strategy: {}\n', "r.yaml")
    assert cf.gpus_per_node == 2
    cf = parse_config_text("trainer:\n  devices: auto\n  num_nodes: 2\n  strategy: {}\n",
                           "r.yaml")
    assert cf.world_size is None and cf.devices_auto and cf.nodes == 2


def test_cli_file_errors_are_one_line(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text('world_size: 8\ncreate_all_gather_group: "false"\n')
    fails("check", "--config", p, fragments=(str(p), "write false without quotes"))


def test_devices_auto_needs_the_node_size(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("trainer:\n  devices: auto\n  num_nodes: 2\n  strategy:\n"
                 "    tensor_model_parallel_size: 2\n")
    fails("inspect", "--config", p, fragments=("devices is 'auto'", "--gpus-per-node"))
    result = invoke("export", "--config", p, "--gpus-per-node", "4")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["config"]["world_size"] == 8


@pytest.mark.parametrize("text, world", [
    ("nodes: 2\ntp: 2\n", 16),                                   # like --nodes 2: 8 per node
    ("trainer:\n  devices: 4\n  strategy: {tp: 2}\n", 4),        # Lightning: num_nodes 1
    ("trainer:\n  devices: 4\n  num_nodes: 3\n  strategy: {tp: 2}\n", 12),
])
def test_a_files_node_count_is_never_dropped(tmp_path, text, world):
    p = tmp_path / "w.yaml"
    p.write_text(text)
    result = invoke("export", "--config", p)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["config"]["world_size"] == world
    p.write_text("trainer:\n  num_nodes: 2\n  strategy: {tp: 2}\n")  # devices: Lightning's auto
    fails("export", "--config", p, fragments=("Lightning's default", "--gpus-per-node"))


def test_gpus_per_node_flag_against_the_files(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("trainer:\n  devices: 8\n  num_nodes: 2\n  strategy: {tp: 2}\n")
    fails("inspect", "--config", p, "--gpus-per-node", "4", "--grid",
          fragments=("--gpus-per-node 4 conflicts with", "8 GPUs per node", "16 ranks"))
    result = invoke("export", "--config", p, "--gpus-per-node", "4", "--nodes", "2")
    assert result.exit_code == 0 and json.loads(result.stdout)["config"]["world_size"] == 8
    assert invoke("inspect", "--config", p, "--gpus-per-node", "8", "-q").exit_code == 0


def test_diff_change_reads_values_like_set():
    assert invoke("diff", "-n", "8", "--change", "use_sharp=1").exit_code == 0
    fails("diff", "-n", "8", "--change", "use_sharp=maybe",
          fragments=("--change use_sharp=maybe", "true/yes/on/1"))
    fails("diff", "-n", "8", "--change", "tp=2.0", fragments=("--change tp=2.0", "whole number"))


# ------------------------------------------------------- conflicts on the command line
@pytest.mark.parametrize("args, fragments", [
    (["--tp", "2", "--set", "tensor_model_parallel_size=4"],
     ["--tensor-model-parallel-size/--tp 2", "--set tensor_model_parallel_size=4"]),
    (["--tp", "2", "--set", "tp=4"], ["--set tp=4"]),
    (["--set", "tp=2", "--set", "tp=4"], ["--set tp=2 and --set tp=4"]),
    (["-n", "8", "--set", "world_size=16"], ["--world-size", "8", "world_size=16"]),
    (["--nodes", "2", "--set", "world_size=8"], ["--nodes 2 x --gpus-per-node 8 = 16"]),
    (["--use-tp-pp-dp-mapping", "--set", "order=tp-cp-ep-dp-pp"], ["--use-tp-pp-dp-mapping"]),
    (["--gloo", "--set", "use_gloo_process_groups=false"], ["error: --gloo conflicts"]),
    (["--no-gloo", "--set", "create_gloo_process_groups=on"], ["error: --no-gloo conflicts"]),
    (["--set", "use_sharp=maybe"], ["use_sharp must be true or false", "'maybe'"]),
    (["--set", "sharp_enabled_group=tp"], ["use one of dp, dp_replica"]),
    (["--set", "world_size=2.0"], ["whole number"]),
    (["--set", "sequence_paralel=true"], ["did you mean 'sequence_parallel'"]),
    (["--cp", "4", "--hierarchical-cp-sizes", ""], ["integers separated by commas"]),
])
def test_two_sources_of_one_value_are_an_error(args, fragments):
    fails("check", *args, fragments=fragments)


def test_agreeing_sources_are_fine():
    result = invoke("check", "-q", "--tp", "2", "--set", "tp=2", "-n", "8", "--set",
                    "world_size=8", "--set", "use_sharp=on")
    assert result.exit_code == 0, result.output


# ------------------------------------------------ what NeMo changes: a note, not silence
def test_sequence_parallel_with_tp1_is_noted():
    fs = check(build_layout(ParallelismConfig(world_size=8, sequence_parallel=True)))
    note = [f for f in fs if f.code == "sequence-parallel-off"]
    assert len(note) == 1 and note[0].severity == "info"
    assert "switches it off" in note[0].message
    fs = check(build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2,
                                              sequence_parallel=True)))
    assert "sequence-parallel-off" not in {f.code for f in fs}


# ---------------------------------------------- warnings: real layouts check clean
def _published(entry) -> ParallelismConfig:
    cf = config_from_mapping(entry["config"], entry["name"])
    return ParallelismConfig.from_dict({**cf.fields, "world_size": cf.world_size})


@pytest.mark.parametrize("mcore", ["0.16", "0.18", "0.19"])
@pytest.mark.parametrize("entry", PUBLISHED, ids=[e["name"] for e in PUBLISHED])
def test_published_layouts_check_clean(entry, mcore):
    assert entry["source"].startswith("https://")
    fs = check(build_layout(_published(entry), mcore))
    bad = [(f.code, f.message) for f in fs if f.severity in ("error", "warning")]
    assert not bad, bad


def test_deepseek_v3_passes_strict_on_the_command_line(tmp_path):
    entry = next(e for e in PUBLISHED if e["name"].startswith("DeepSeek-V3 pre-training"))
    p = tmp_path / "deepseek.yaml"
    p.write_text(yaml.safe_dump(entry["config"]))
    result = invoke("check", "--config", p, "--strict", "-q")
    assert result.exit_code == 0, result.output
    assert invoke("check", "-n", "2048", "--pp", "16", "--ep", "64", "--etp", "1",
                  "--strict", "-q").exit_code == 0


@pytest.mark.parametrize("kw, warned", [
    (dict(world_size=12, tensor_model_parallel_size=4, expert_tensor_parallel_size=2,
          expert_model_parallel_size=3), True),   # 6 and 4 do not nest
    (dict(world_size=8, expert_model_parallel_size=4), False),   # EP over DP: standard
    (dict(world_size=64, tensor_model_parallel_size=4, expert_tensor_parallel_size=1,
          expert_model_parallel_size=8), False),   # 8 is a multiple of 4
    (dict(world_size=16, tensor_model_parallel_size=8, expert_tensor_parallel_size=1,
          expert_model_parallel_size=2), False),   # 2 divides 8
])
def test_suspicious_ep_means_misaligned_blocks(kw, warned):
    fs = check(build_layout(ParallelismConfig(**kw)))
    assert ("suspicious-ep" in {f.code for f in fs if f.severity == "warning"}) is warned


@pytest.mark.parametrize("tp, etp, warned", [
    (2, 4, False),   # NeMo's Llama 4 Maverick fine-tuning: experts split wider than TP
    (4, 1, False), (8, 2, False), (4, 4, False),
    (2, 3, True), (4, 3, True), (6, 4, True),
])
def test_suspicious_etp_means_groups_that_do_not_nest(tp, etp, warned):
    cfg = ParallelismConfig(tensor_model_parallel_size=tp, expert_tensor_parallel_size=etp)
    warnings = {f.code for f in check(build_layout(cfg)) if f.severity == "warning"}
    assert ("suspicious-etp" in warnings) is warned
    assert "suspicious-ep" not in warnings  # ep 1: one finding for one cause


# ------------------------------------------------------------ property tests
_WRONG = st.one_of(
    st.text(max_size=6), st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(), st.none(), st.integers(-3, 3), st.lists(st.integers(0, 3), max_size=2),
    st.sampled_from(["false", "true", "4", "2.0", "yes", "nccl", "dp", "2,2"]))
_KEYS = st.sampled_from(sorted(set(FIELD_TYPES) | set(ALIASES)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(_KEYS, _WRONG, min_size=1, max_size=4),
       fmt=st.sampled_from(["yaml", "json"]))
def test_random_documents_are_refused_or_taken_literally(doc, fmt):
    """Never a wrong configuration: either a typed error, or every value as written."""
    text = json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc)
    try:
        cf = parse_config_text(text, f"doc.{fmt}")
        cfg = ParallelismConfig.from_dict(cf.fields)
    except SimharnessError:
        return
    for key, value in doc.items():
        name = ALIASES.get(key, key)
        got = getattr(cfg, name)
        kind = FIELD_TYPES[name].kind
        if value is None:
            continue  # a nullable field left to its default
        if kind == "bool":
            assert isinstance(value, bool) and got is value
        elif kind == "int":
            assert type(value) is int and got == value
        elif kind == "ints":  # [] is "no hierarchy", as in Megatron (a falsy list)
            assert (tuple(value) or None) == got
        elif kind in ("choice", "str"):
            assert isinstance(value, str) and got == value
        elif kind == "names":
            assert tuple(value.split(",") if isinstance(value, str) else value) == got


@settings(max_examples=80, deadline=None)
@given(a=st.integers(1, 8), b=st.integers(1, 8), key=st.sampled_from(["tp", "pp", "cp"]))
def test_random_conflicting_fields_are_refused(a, b, key):
    doc = {key: a, ALIASES[key]: b}
    if a == b:
        assert parse_config_text(json.dumps(doc), "c.json").fields == {ALIASES[key]: a}
    else:
        with pytest.raises(ConfigFileError, match="different values"):
            parse_config_text(json.dumps(doc), "c.json")


@settings(max_examples=80, deadline=None)
@given(world=st.integers(1, 64), nodes=st.integers(1, 8), gpus=st.integers(1, 8),
       recipe=st.booleans())
def test_random_worlds_against_nodes_are_refused_unless_equal(world, nodes, gpus, recipe):
    doc = ({"world_size": world, "trainer": {"num_nodes": nodes, "devices": gpus,
                                             "strategy": {}}} if recipe else
           {"world_size": world, "nodes": nodes, "gpus_per_node": gpus})
    if world == nodes * gpus:
        assert parse_config_text(json.dumps(doc), "w.json").world_size == world
    else:
        with pytest.raises(ConfigFileError, match=f"world_size {world} conflicts"):
            parse_config_text(json.dumps(doc), "w.json")


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(FIELD_TYPES)), text=st.text(max_size=8))
@example(name="pipeline_dtype", text="#")  # YAML reads a lone comment as null
def test_random_command_line_text_is_refused_or_exact(name, text):
    try:
        value = parse_field(name, text, where="--set", from_text=True)
    except LayoutError:
        return
    kind, word = FIELD_TYPES[name].kind, text.strip().lower()
    if value is None:
        assert FIELD_TYPES[name].nullable and word in ("null", "none", "~")
    elif kind == "bool":
        assert value is (word in TRUE_WORDS) and word in TRUE_WORDS + FALSE_WORDS
    elif kind == "int":
        assert type(value) is int and str(value) == text.strip().lstrip("+")
    elif kind == "choice":
        assert value in FIELD_TYPES[name].choices


# ------------------------------------------------------------ file errors
@pytest.fixture
def binary(tmp_path):
    p = tmp_path / "blob.json"
    p.write_bytes(bytes(range(256)) * 4)
    return p


def test_export_to_an_unwritable_path_names_that_path():
    err = fails("export", "-n", "8", "--out", "/proc/nope.json",
                fragments=("/proc/nope.json:", "choose a writable path"), absent=(".tmp",))
    assert "nope.json.tmp" not in err


@pytest.mark.parametrize("cmd", ["replay", "replay-data"])
def test_an_unwritable_report_fails_before_any_rank_starts(tmp_path, cmd):
    bad = tmp_path / "missing" / "report.json"
    fails(cmd, "-n", "4", "--report", bad, "--deadline", "5",
          fragments=(str(bad), "choose a writable path for --report"))


def test_check_writable_leaves_no_file_and_keeps_contents(tmp_path):
    from simharness._cli.output import check_writable

    new = tmp_path / "new.json"
    check_writable(str(new), "--report")
    assert not new.exists()
    old = tmp_path / "old.json"
    old.write_text("keep")
    check_writable(str(old), "--report")
    assert old.read_text() == "keep"


def test_os_errors_name_the_path_and_a_fix(tmp_path):
    fails("topology", "show", "dgx-h100", "--out", tmp_path / "no" / "x.svg",
          fragments=(str(tmp_path / "no" / "x.svg"), "check the path"))
    fails("diff", tmp_path / "none.json", tmp_path / "none.yaml",
          fragments=("none.json: no such file; check the path",))


@pytest.mark.parametrize("cmd", [
    lambda p: ["verify-export", p],
    lambda p: ["diff", p, p],
    lambda p: ["check", "--config", p],
    lambda p: ["topology", "show", p.with_suffix(".toml")],
    lambda p: ["place", "-n", "8", "--topology", "dgx-h100", "--hosts", p],
])
def test_binary_files_give_no_codec_error(binary, cmd):
    shutil.copy(binary, binary.with_suffix(".toml"))
    args = cmd(binary)
    fails(*args, fragments=(Path(args[-1]).name, "not a text file"),
          absent=("codec", "0x"))


# ------------------------------------------------------- messages that mislead
def test_place_without_nodes_does_not_name_nodes():
    fails("place", "-n", "16", "--topology", "dgx-h100",
          fragments=("16 ranks need 2 nodes of 8 GPUs", "at most 1 node", "at most 8 ranks"),
          absent=("--nodes",))
    fails("place", "--set", "world_size=16", "--topology", "dgx-h100", absent=("--nodes",))
    fails("place", "--nodes", "2", "--topology", "dgx-h100", fragments=("--nodes 2",))


def test_place_names_the_files_node_size_not_a_flag(tmp_path):
    p = tmp_path / "r4.yaml"
    p.write_text("trainer:\n  devices: 4\n  num_nodes: 2\n  strategy: {tp: 2}\n")
    fails("place", "--config", p, "--topology", "dgx-h100-superpod",
          fragments=("r4.yaml runs 4 GPUs per node", "has 8"), absent=("--gpus-per-node",))
    assert invoke("place", "--config", p, "--topology", "dgx-h100-superpod", "--hosts",
                  "a,a,a,a,b,b,b,b", "-q").exit_code == 0


@pytest.mark.parametrize("args, fragment, absent", [
    (["check", "--sequence-parallel"], "--set sequence_parallel=true", "--context-parallel"),
    (["check", "--use-sharp"], "--set use_sharp=true", "did you mean"),
    (["check", "--tpp", "2"], "did you mean '--tp'", "--set"),
    (["inspect", "--nods", "2"], "did you mean '--nodes'", "--set"),
    (["topology", "list", "--bogus"], "no such option '--bogus'.", "did you mean"),
])
def test_no_such_option_suggests_only_likely_fixes(args, fragment, absent):
    fails(*args, fragments=(fragment,), absent=(absent,))


def test_grid_notes_a_part_filled_node():
    result = invoke("inspect", "-n", "12", "--grid")
    assert result.exit_code == 0
    assert "node 1 holds 4 rank(s) and 4 idle GPU(s)" in result.stderr
    assert json.loads(invoke("inspect", "-n", "12", "--grid", "-f", "json").stdout)["note"]
    full = invoke("inspect", "-n", "16", "--grid")
    assert "note:" not in full.stderr and json.loads(
        invoke("inspect", "-n", "16", "--grid", "-f", "json").stdout)["note"] is None


# ------------------------------------------------------ help and install
def _commands(group: click.Group, prefix=()):
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*prefix, name))
        yield (*prefix, name)


@pytest.mark.parametrize("path", sorted(set(_commands(main))), ids=" ".join)
def test_every_help_has_examples(path):
    result = invoke(*path, "--help")
    assert result.exit_code == 0 and "Example" in result.output, result.output
