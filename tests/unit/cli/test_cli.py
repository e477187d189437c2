"""The click CLI: every command and format, through click's CliRunner."""

from __future__ import annotations

import csv
import io
import json

from click.testing import CliRunner

import simharness
from cli import main
from simharness import Layout

EX = ["-n", "16", "--tp", "2", "--pp", "2", "--cp", "2"]
BIG = ["-n", "131072", "--tp", "8", "--pp", "8"]


def run(*args, ok=(0,)):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code in ok, (result.exit_code, result.output)
    return result


# ------------------------------------------------------------------- inspect
def test_inspect_default_summary_and_every_kind():
    out = run("inspect", *EX).stdout
    assert "16 ranks" in out and "tp 2  pp 2  cp 2  dp 2" in out
    assert "create_all_gather_group off" in out
    lay = simharness.build_layout(simharness.ParallelismConfig(
        world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
        context_parallel_size=2))
    for kind in lay.kinds:
        assert f"{kind}  {lay.desc(kind)}" in out
    assert "g0 [0, 2, 4, 6]" in out  # dp_cp
    assert "\x1b[" not in out  # no colour off a terminal


def test_inspect_picks_smallest_world_and_says_so():
    out = run("inspect", "--tp", "2", "--pp", "2").stdout
    assert "4 ranks (smallest world" in out


def test_inspect_kind_table_json_csv():
    out = run("inspect", *EX, "--kind", "dp_cp").stdout
    assert "DATA_PARALLEL_GROUP_WITH_CP" in out and "TENSOR_MODEL_PARALLEL_GROUP" not in out
    data = json.loads(run("inspect", *EX, "--kind", "dp_cp", "--format", "json").stdout)
    assert data["kinds"]["dp_cp"]["groups"] == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14],
                                                [9, 11, 13, 15]]
    assert data["summary"]["world_size"] == 16
    rows = list(csv.reader(io.StringIO(run("inspect", *EX, "-k", "tp", "-f", "csv").stdout)))
    assert rows[0] == ["kind", "group", "group_size", "ranks"]
    assert rows[1] == ["tp", "0", "2", "0 1"] and len(rows) == 9


def test_inspect_quiet_has_no_summary():
    out = run("inspect", *EX, "--kind", "tp", "--quiet").stdout
    assert "ranks" not in out.split("\n")[0] and "[0, 1]" in out


def test_inspect_rank_view_all_formats():
    out = run("inspect", *EX, "--rank", "5").stdout
    assert "rank 5 of 16" in out
    assert "tp 1  cp 0  dp 1  pp 0" in out
    assert "dense all-gather" in out and "they serialise" in out
    data = json.loads(run("inspect", *EX, "--rank", "5", "-f", "json").stdout)
    assert data["groups"]["dp_cp"]["ranks"] == [1, 3, 5, 7]
    assert data["collectives"]["dense_all_gather"]["kind"] == "dp_cp"
    on = json.loads(run("inspect", *EX, "--rank", "5", "-f", "json",
                        "--create-all-gather-group").stdout)
    assert on["collectives"]["dense_all_gather"]["kind"] == "dp_cp_ag"
    rows = list(csv.DictReader(io.StringIO(
        run("inspect", *EX, "--rank", "5", "-f", "csv", "-k", "pp").stdout)))
    assert rows == [{"rank": "5", "kind": "pp", "group_desc": "PIPELINE_MODEL_PARALLEL_GROUP",
                     "backend": "nccl", "group": "5", "position": "0", "group_rank": "0",
                     "group_size": "2", "ranks": "5 13"}]


def test_inspect_grid_marks_groups_crossing_nodes():
    out = run("inspect", *EX, "--grid", "--gpus-per-node", "4", "--kind", "dp_cp").stdout
    assert "dp_cp groups on 4 nodes x 4 GPUs" in out
    assert "4 of 4 dp_cp groups cross nodes" in out
    assert "0:g0*" in out
    out = run("inspect", *EX, "--grid", "--kind", "tp").stdout
    assert "all 8 tp groups stay inside one node" in out
    data = json.loads(run("inspect", *EX, "--grid", "-f", "json").stdout)
    assert data["kind"] == "dp_cp" and data["gpus_per_node"] == 8 and data["nodes"] == 2
    assert data["groups_crossing_nodes"] == 0
    assert data["grid"][0]["groups"] == [0, 1, 0, 1, 0, 1, 0, 1]
    rows = list(csv.DictReader(io.StringIO(run("inspect", *EX, "--grid", "-f", "csv").stdout)))
    assert len(rows) == 16 and rows[9] == {"node": "1", "gpu": "1", "rank": "9", "group": "3",
                                           "crosses_nodes": "0"}


def test_inspect_nodes_flags_set_the_world():
    data = json.loads(run("inspect", "--nodes", "2", "--gpus-per-node", "4", "--tp", "2",
                          "-f", "json", "-k", "tp").stdout)
    assert data["summary"]["world_size"] == 8


def test_inspect_large_world_is_summarised():
    out = run("inspect", *BIG, "--kind", "tp").stdout
    assert "16384 groups of 8" in out and "more groups" in out
    assert len(out.splitlines()) < 20
    data = json.loads(run("inspect", *BIG, "--kind", "tp", "-f", "json").stdout)
    assert data["kinds"]["tp"]["truncated"] is True
    assert data["kinds"]["tp"]["last_groups"][-1] == list(range(131064, 131072))
    full = run("inspect", *BIG, "--kind", "pp", "--all").stdout
    assert len(full.splitlines()) > 16384


def test_inspect_large_world_rank_and_grid():
    out = run("inspect", *BIG, "--rank", "131071").stdout
    assert "rank 131071 of 131072" in out
    out = run("inspect", *BIG, "--grid", "--kind", "tp").stdout
    assert "more nodes" in out and "all 16384 tp groups stay inside one node" in out


# --------------------------------------------------------------------- check
def test_check_clean_exit_0_and_formats():
    res = run("check", *EX)
    assert "OK" in res.stdout
    data = json.loads(run("check", *EX, "-f", "json").stdout)
    assert data["exit_code"] == 0 and set(data["counts"]) == {"error", "warning", "info"}
    head = run("check", *EX, "-f", "csv").stdout.splitlines()[0]
    assert head == "code,severity,message,ranks,groups"
    assert run("check", *EX, "-q").stdout == ""


# Real inputs, no mocked checks: issue #4261 (0.19, AG on, tp-cp-ep-pp-dp) is an error,
# etp > tp a warning.
AG_4261 = ["-n", "16", "--tp", "2", "--pp", "2", "--cp", "2", "--ep", "2", "--mcore", "0.19",
           "--create-all-gather-group", "--order", "tp-cp-ep-pp-dp"]
ETP_OVER_TP = ["-n", "6", "--tp", "2", "--etp", "3"]  # etp and tp do not nest


def test_check_error_finding_exits_1():
    out = run("check", *AG_4261, ok=(1,)).stdout
    assert out.index("errors (2)") < out.index("info (")
    assert "x ag-mismatch: dp_cp_ag" in out and "[0, 2, 4, 6]" in out and "[0, 2, 8, 10]" in out
    assert "ranks 0-15" in out and "FAIL (exit 1)" in out
    data = json.loads(run("check", *AG_4261, "-f", "json", ok=(1,)).stdout)
    assert [f["code"] for f in data["findings"] if f["severity"] == "error"] == [
        "ag-mismatch", "ag-mismatch"]
    assert data["exit_code"] == 1 and data["counts"]["error"] == 2
    # The same job with the default order is clean: the exit status follows the findings.
    assert json.loads(run("check", *AG_4261[:-2], "-f", "json").stdout)["counts"]["error"] == 0


def test_check_strict_turns_warnings_into_failures():
    out = run("check", *ETP_OVER_TP, ok=(0,)).stdout
    assert "! suspicious-etp" in out and "0 errors, 1 warning," in out and "OK" in out
    res = run("check", *ETP_OVER_TP, "--strict", ok=(1,))
    assert "failures under --strict" in res.stdout
    run("check", *EX, "--strict", ok=(0,))  # no warnings: --strict passes


# ---------------------------------------------------------------------- diff
def test_diff_toggle_create_all_gather_group():
    out = run("diff", *EX, "--toggle", "create_all_gather_group").stdout
    assert "create_all_gather_group off -> on" in out
    assert "+ dp_cp_ag" in out and "(new kind)" in out
    assert "159 -> 163 (+4)" in out
    assert "dp_cp (shared with the reduce-scatter) -> dp_cp_ag (own communicator)" in out
    assert "ranks whose all-gather group changes  0-15 (16 of 16)" in out
    data = json.loads(run("diff", *EX, "--toggle", "create_all_gather_group", "-f",
                          "json").stdout)
    assert [k["kind"] for k in data["kinds"]] == ["dp_cp_ag"]
    assert data["all_gather"]["dense"]["n_ranks_changed"] == 16
    assert data["all_gather"]["dense"]["n_ranks_members_changed"] == 0
    rows = run("diff", *EX, "--toggle", "create_all_gather_group", "-f", "csv").stdout
    assert rows.splitlines()[:2] == ["kind,change,ranks", "dp_cp_ag,added,0 2 4 6"]


def test_diff_mcore_profiles_and_change():
    data = json.loads(run("diff", *EX, "--mcore", "0.16", "--mcore", "0.19", "-f",
                          "json").stdout)
    assert data["a"]["mcore"] == "0.16" and data["b"]["mcore"] == "0.19"
    assert "gtp_remat" in [k["kind"] for k in data["kinds"]]
    data = json.loads(run("diff", "-n", "16", "--tp", "2", "--change", "tp=4", "-f",
                          "json").stdout)
    assert data["config_changes"]["tensor_model_parallel_size"] == [2, 4]


def test_diff_tp_pp_dp_mapping_changes_members():
    data = json.loads(run("diff", "-n", "16", "--tp", "2", "--pp", "2",
                          "--toggle", "use_tp_pp_dp_mapping", "-f", "json").stdout)
    assert data["config_changes"]["order"] == ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]
    assert data["all_gather"]["dense"]["n_ranks_members_changed"] > 0


def test_diff_two_files_and_exports(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text("world_size: 16\ntensor_model_parallel_size: 2\n")
    b = tmp_path / "b.toml"
    b.write_text("world_size = 16\ntensor_model_parallel_size = 2\n"
                 "create_all_gather_group = true\n")
    data = json.loads(run("diff", a, b, "-f", "json").stdout)
    assert [k["kind"] for k in data["kinds"]] == ["dp_cp_ag"]
    exp = tmp_path / "plan.json"
    run("export", "-n", "16", "--tp", "2", "--out", exp)
    same = run("diff", a, exp, "--exit-code")
    assert "no difference" in same.stdout
    run("diff", a, b, "--quiet", ok=(1,))


def test_diff_identical_and_exit_code():
    out = run("diff", *EX, "--mcore", "0.19", "--mcore", "0.19").stdout
    assert "no difference" in out
    run("diff", *EX, "--toggle", "create_all_gather_group", "--exit-code", ok=(1,))


def test_diff_large_world_is_fast_and_short():
    res = run("diff", *BIG, "--toggle", "create_all_gather_group")
    assert "131072 of 131072" in res.stdout and len(res.stdout.splitlines()) < 40


# -------------------------------------------------------------------- export
def test_export_json_roundtrip(tmp_path):
    text = run("export", *EX).stdout
    lay = Layout.from_json(text)
    ref = simharness.build_layout(lay.config, lay.mcore)
    assert lay.kinds == ref.kinds
    for k in ref.kinds:
        assert lay.groups(k).tolist() == ref.groups(k).tolist()
    assert json.loads(text)["schema"] == "simharness.layout/1"
    path = tmp_path / "plan.json"
    res = run("export", *EX, "--out", path)
    assert path.read_text() == text and "wrote" in res.stderr and res.stdout == ""
    assert run("export", *EX, "--out", tmp_path / "q.json", "-q").stderr == ""


def test_export_csv_one_row_per_rank_and_kind():
    text = run("export", *EX, "-f", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    lay = simharness.build_layout(simharness.ParallelismConfig(
        world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
        context_parallel_size=2))
    expected = sum(lay.groups(k).size for k in lay.kinds)
    assert len(rows) == expected
    view = lay.rank(5)
    mine = {r["kind"]: r for r in rows if r["rank"] == "5"}
    assert set(mine) == set(view.groups)
    for kind, m in view.groups.items():
        r = mine[kind]
        assert (int(r["group"]), int(r["position"]), int(r["group_rank"]),
                int(r["group_size"])) == (m.group, m.position, m.group_rank, len(m.ranks))
        assert r["group_desc"] == lay.desc(kind) and r["backend"] == lay.backend(kind)


def test_verify_export(tmp_path):
    path = tmp_path / "plan.json"
    run("export", *EX, "--out", path)
    res = run("verify-export", path)
    assert "plan.json" in res.stdout and "OK" in res.stdout
    data = json.loads(run("verify-export", path, "-f", "json").stdout)
    assert data["exit_code"] == 0 and data["summary"]["world_size"] == 16


def test_verify_export_failing_findings(tmp_path):
    path = tmp_path / "plan.json"
    run("export", *EX, "--out", path)
    plan = json.loads(path.read_text())
    plan["kinds"]["embd"]["groups"][0] = [8, 0]  # a hand edit: the stages swapped
    path.write_text(json.dumps(plan))
    out = run("verify-export", path, ok=(1,)).stdout
    assert "x embedding: embd group(s)" in out and "FAIL" in out


# ------------------------------------------------------------ explain/version
def test_explain_formulas_and_rules():
    out = run("explain", "-n", "64", "--tp", "4", "--pp", "2").stdout
    assert "dp = world / (tp*pp*cp) = 64 / (4*2*1) = 8" in out
    assert "world % (tp*pp*cp) = 64 % 8 = 0" in out
    data = json.loads(run("explain", "-n", "64", "--tp", "4", "--pp", "2", "-f", "json").stdout)
    assert data["valid"] and all(r["holds"] for r in data["rules"])
    assert "data_parallel_size=8" in run("explain", "-n", "64", "--tp", "4", "--pp", "2",
                                         "-q").stdout


def test_explain_invalid_marks_rule_then_errors():
    res = run("explain", "-n", "12", "--tp", "8", ok=(2,))
    assert "FAIL" in res.stdout and "12 % 8 = 4" in res.stdout
    assert res.stderr.startswith("error: world_size (12) is not divisible")
    assert len(res.stderr.splitlines()) == 1


def test_version():
    out = run("version").stdout
    assert simharness.__version__ in out and "torch" in out and "default 0.19" in out
    data = json.loads(run("version", "-f", "json").stdout)
    assert data["simharness"] == simharness.__version__
    assert data["default_mcore"] == simharness.DEFAULT_MCORE
    assert run("version", "-q").stdout.strip() == simharness.__version__
    assert run("--version").stdout.strip() == f"simharness {simharness.__version__}"


# ---------------------------------------------------------------- config file
def test_config_file_bare_and_flag_override(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("world_size: 16\ntensor_model_parallel_size: 2\ncontext_parallel_size: 2\n"
                 "mcore: '0.16'\n")
    data = json.loads(run("inspect", "--config", f, "-f", "json", "-k", "tp").stdout)
    assert data["summary"]["tp"] == 2 and data["summary"]["mcore"] == "0.16"
    data = json.loads(run("inspect", "--config", f, "--tp", "4", "--cp", "1", "--mcore", "0.19",
                          "-f", "json", "-k", "tp").stdout)
    assert data["summary"]["tp"] == 4 and data["summary"]["mcore"] == "0.19"


def test_config_file_nemo_recipe(tmp_path):
    f = tmp_path / "recipe.yaml"
    f.write_text("trainer:\n  devices: 8\n  num_nodes: 4\n  strategy:\n"
                 "    _target_: nemo.lightning.MegatronStrategy\n"
                 "    tensor_model_parallel_size: 4\n    pipeline_model_parallel_size: 2\n"
                 "    ckpt_async_save: true\n    ddp: megatron\n")
    s = json.loads(run("inspect", "--config", f, "-f", "json", "-k", "tp").stdout)["summary"]
    assert (s["world_size"], s["tp"], s["pp"], s["dp"]) == (32, 4, 2, 4)
    t = tmp_path / "recipe.toml"
    t.write_text("[trainer.strategy]\ntensor_model_parallel_size = 2\n"
                 "[trainer.strategy.parallelism]\ncontext_parallel_size = 2\n")
    s = json.loads(run("inspect", "--config", t, "-n", "8", "-f", "json", "-k", "tp").stdout)
    assert (s["summary"]["tp"], s["summary"]["cp"]) == (2, 2)
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"trainer": {"strategy": {"parallel_config": {"tp": 2}}}}))
    s = json.loads(run("inspect", "--config", j, "-n", "4", "-f", "json", "-k", "tp").stdout)
    assert s["summary"]["tp"] == 2


def test_set_any_field():
    """--set reaches fields that have no flag of their own, and they take effect."""
    plain = Layout.from_json(run("export", "-n", "8").stdout)
    assert plain.config.use_sharp is False and plain.has("dp_gloo")
    lay = Layout.from_json(run("export", "-n", "8", "--set", "use_sharp=true", "--set",
                               "sharp_enabled_group=dp", "--set",
                               "create_gloo_process_groups=false").stdout)
    assert lay.config.use_sharp is True and lay.config.sharp_enabled_group == "dp"
    assert not lay.has("dp_gloo") and not lay.has("dp_cp_gloo")  # no Gloo groups made
    assert len(lay.creation_order) < len(plain.creation_order)


# ---------------------------------------------------------------------- misc
def test_help_on_every_command_has_an_example():
    for cmd in ("inspect", "check", "diff", "export", "verify-export", "explain", "version",
                "demo"):
        out = run(cmd, "--help").stdout
        assert "Example" in out and "simharness" in out, cmd


def test_command_prefix_and_color_flag():
    assert "rank 5 of 16" in run("insp", *EX, "-r", "5").stdout
    out = run("--color", "inspect", *EX, "-r", "5").stdout
    assert "\x1b[" in out


def test_demo_prints_both_settings_and_checks():
    out = run("demo").stdout
    assert "create_all_gather_group off ==" in out and "create_all_gather_group on ==" in out
    assert "dp_cp_ag  DATA_PARALLEL_GROUP_WITH_CP_AG" in out
    assert out.count("checks") >= 2


def test_bare_command_prints_help():
    res = run()
    assert "Usage: simharness" in res.stdout and "inspect" in res.stdout
