"""Every bad input: one line ``error: ...`` on stderr, exit status 2, never a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from support.cli_errors import fails

from cli import main

EX = ["-n", "16", "--tp", "2", "--pp", "2", "--cp", "2"]


@pytest.fixture
def files(tmp_path):
    def write(name, text):
        p = tmp_path / name
        p.write_text(text)
        return p
    return write


def test_broken_yaml_names_file_and_line(files):
    p = files("bad.yaml", "tensor_model_parallel_size: 2\npipeline_model_parallel_size: [2\n"
                          "world_size: 8\n")
    fails(["inspect", "--config", p], "bad.yaml:3:", "invalid YAML")


def test_broken_toml_names_file_and_line(files):
    p = files("bad.toml", "tensor_model_parallel_size = 2\nworld_size = \n")
    fails(["check", "--config", p], "bad.toml:2:", "invalid TOML")


def test_broken_json_names_file_and_line(files):
    p = files("bad.json", '{"tensor_model_parallel_size": 2,\n "world_size": 8,,}\n')
    fails(["export", "--config", p], "bad.json:2:", "invalid JSON")


def test_missing_config_file():
    fails(["inspect", "--config", "no/such/file.yaml"], "no/such/file.yaml", "no such file")


def test_config_not_a_mapping(files):
    fails(["inspect", "--config", files("l.yaml", "- 1\n- 2\n")], "expected a mapping")
    fails(["inspect", "--config", files("e.yaml", "")], "the file is empty")


def test_unknown_fields_are_named(files):
    p = files("typo.yaml", "tensor_model_parallel_sise: 2\n")
    fails(["inspect", "--config", p], "'tensor_model_parallel_sise'",
          "did you mean 'tensor_model_parallel_size'")
    p = files("r.yaml", "trainer:\n  strategy:\n    tensor_model_paralel_size: 2\n"
                        "    ddp: megatron\n")
    fails(["inspect", "--config", p], "trainer.strategy", "'tensor_model_paralel_size'")
    p = files("s.yaml", "trainer:\n  devices: 8\n")
    fails(["inspect", "--config", p], "trainer.strategy")


def test_invalid_config_values_in_file(files):
    p = files("v.yaml", "world_size: 12\ntensor_model_parallel_size: 8\n")
    fails(["inspect", "--config", p], "world_size (12) is not divisible by 8")
    p = files("w.yaml", "tensor_model_parallel_size: two\n")
    fails(["inspect", "--config", p], "tensor_model_parallel_size must be a whole number")


@pytest.mark.parametrize("args, fragment", [
    (["-n", "12", "--tp", "8"], "not divisible by 8"),
    (["-n", "16", "--tp", "2", "--vpp", "2"], "virtual_pipeline_model_parallel_size=2"),
    (["-n", "16", "--cp", "4", "--hierarchical-cp-sizes", "2,4"], "multiply to 8"),
    (["-n", "8", "--order", "tp-xx-pp"], "order 'tp-xx-pp'"),
    (["-n", "8", "--num-distributed-optimizer-instances", "3"], "does not divide"),
    (["-n", "8", "--gtp-remat-size", "2", "--mcore", "0.16"], "only from megatron-core 0.19"),
])
def test_invalid_configs(args, fragment):
    for cmd in ("inspect", "check", "export"):
        fails([cmd, *args], fragment)


@pytest.mark.parametrize("args, fragment", [
    (["--tp", "0"], "'--tp'"),
    (["--tp", "two"], "'two' is not a whole number"),
    (["--mcore", "0.17"], "'0.17' is not one of"),
    (["--hierarchical-cp-sizes", "2,x"], "integers separated by commas"),
    (["--bogus"], "no such option '--bogus'"),
    (["--tpp", "2"], "did you mean '--tp'"),
    (["--set", "foo"], "FIELD=VALUE"),
    (["--set", "foo=1"], "unknown field 'foo'"),
    (["--format", "xml"], "'xml' is not one of"),
])
def test_bad_flags(args, fragment):
    err = fails(["inspect", *args], fragment)
    assert "simharness inspect --help" in err or "unknown parallelism" in err


def test_conflicting_flags():
    fails(["inspect", "-n", "16", "--nodes", "2", "--gpus-per-node", "4"],
          "--world-size 16 conflicts with --nodes 2 x --gpus-per-node 4 = 8")
    fails(["inspect", "-n", "8", "--order", "tp-cp-ep-dp-pp", "--use-tp-pp-dp-mapping"],
          "conflicts with --use-tp-pp-dp-mapping")
    fails(["inspect", *EX, "--rank", "1", "--grid"], "--rank and --grid")
    fails(["inspect", *EX, "--grid", "-k", "tp", "-k", "dp"], "give one --kind")


def test_rank_out_of_range_and_unknown_kind():
    fails(["inspect", *EX, "--rank", "16"], "rank 16 is out of range", "0..15")
    fails(["inspect", *EX, "--rank", "-1"], "rank -1 is out of range")
    fails(["inspect", *EX, "--rank", "x"], "'x' is not a valid integer")
    fails(["inspect", *EX, "--kind", "dpcp"], "unknown group kind 'dpcp'", "dp_cp")
    fails(["inspect", *EX, "--grid", "--kind", "nope"], "unknown group kind 'nope'")


def test_unknown_command():
    fails(["frobnicate"], "no such command 'frobnicate'")
    fails(["chek"], "did you mean 'check'")


def test_diff_errors(files, tmp_path):
    fails(["diff", *EX], "nothing to compare")
    fails(["diff", *EX, "--toggle", "nope"], "'nope' is not one of")
    fails(["diff", *EX, "--change", "tp"], "FIELD=VALUE")
    fails(["diff", *EX, "--change", "tpp=2"], "unknown field 'tpp'")
    fails(["diff", "-n", "64", "--tp", "2", "--pp", "2", "--cp", "2",
           "--toggle", "use_tp_pp_dp_mapping"], "side B (use_tp_pp_dp_mapping on) is invalid")
    a = files("a.yaml", "world_size: 8\n")
    fails(["diff", a], "two files")
    fails(["diff", a, a, "--toggle", "create_all_gather_group"], "not both")
    fails(["diff", a, tmp_path / "missing.yaml"], "missing.yaml", "no such file")
    fails(["diff", *EX, "--mcore", "0.16", "--mcore", "0.19", "--mcore", "0.16"], "3 times")
    bad = files("b.yaml", "world_size: 12\ntensor_model_parallel_size: 8\n")
    fails(["diff", a, bad], "b.yaml: world_size (12)")
    exp = tmp_path / "plan.json"
    CliRunner().invoke(main, ["export", "-n", "8", "--out", str(exp)])
    fails(["diff", exp, exp, "--tp", "2"], "exported layout", "tensor_model_parallel_size")


def test_export_errors(tmp_path):
    fails(["export", *EX, "--out", tmp_path / "no" / "dir" / "plan.json"], "no such directory")
    fails(["export", *EX, "--format", "table"], "'table' is not one of")


def test_verify_export_errors(files, tmp_path):
    fails(["verify-export", tmp_path / "missing.json"], "missing.json", "no such file")
    fails(["verify-export", files("x.json", '{"schema": 1,\n')], "x.json", "not valid JSON",
          "line 2")
    fails(["verify-export", files("y.json", '{"schema": "other/9"}')], "y.json",
          "unsupported layout schema")
    fails(["verify-export", files("z.json", '{"schema": "simharness.layout/1"}')],
          "missing the field")


def test_explain_error_is_one_line_after_the_table():
    fails(["explain", "-n", "16", "--tp", "two"], "'two'")
    fails(["explain", "-n", "12", "--tp", "8"], "world_size (12)")


def test_explain_lists_rules_after_a_failure_that_leaves_a_later_rule_dividing_by_zero():
    # A repeated order token with a world too small for etp*ep: a later rule's group
    # arithmetic divides by zero. explain lists it as not evaluable, never a crash (exit 3).
    args = ["explain", "-n", "2", "--tp", "2", "--ep", "2", "--order", "cp-dp-ep-tp-pp-tp",
            "--mcore", "0.16"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "internal error" not in result.stderr and "Traceback" not in result.output
    assert "cannot be evaluated after the failure above (ZeroDivisionError" in result.stdout
    assert result.stderr.startswith("error: world_size (2) is not divisible")
