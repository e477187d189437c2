"""Who reads the all-gather group, per data-parallel implementation, in every command.

The words come from :mod:`simharness.ag_readers`; each test runs one command for
Megatron-FSDP, the distributed optimizer, plain DDP and an unknown implementation, and
checks that the output names the reader and says the same thing as the table.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli import main
from simharness.ag_readers import LAUNCH_WORDS, DPImpl, ag_reader_sentence, option_off_sentence

EX = ["-n", "16", "--tp", "2", "--pp", "2", "--cp", "2"]
IMPLS = {"fsdp": ["--dp-impl", "fsdp"], "dist-opt": ["--dp-impl", "dist-opt"],
         "ddp": ["--dp-impl", "ddp"], "unknown": []}


def run(*args, code=0):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    return result


def error_line(*args) -> str:
    err = run(*args, code=2).stderr
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    return err


def write(tmp_path, name: str, ddp: str, strategy: str = "") -> str:
    path = tmp_path / name
    path.write_text("trainer:\n  devices: 8\n  num_nodes: 2\n  strategy:\n"
                    "    tensor_model_parallel_size: 2\n    pipeline_model_parallel_size: 2\n"
                    "    context_parallel_size: 2\n    create_all_gather_group: true\n"
                    + strategy + ddp)
    return str(path)


DIST_OPT_DDP = ("ddp:\n  use_distributed_optimizer: true\n  overlap_param_gather: true\n"
                "  overlap_grad_reduce: true\n")
FSDP_DDP = ("ddp:\n  use_megatron_fsdp: true\n  data_parallel_sharding_strategy: "
            "optim_grads_params\n  grad_reduce_in_fp32: true\n")


# ------------------------------------------------------------------- inspect --rank
@pytest.mark.parametrize("impl", IMPLS)
def test_inspect_rank_names_the_reader(impl):
    out = run("inspect", *EX, "--rank", 5, "--create-all-gather-group", *IMPLS[impl]).stdout
    block = out.split("optimizer collectives", 1)[1]
    ag_line = next(line for line in block.splitlines() if "dense all-gather" in line)
    assert ag_reader_sentence("0.19", impl) in block
    if impl == "fsdp":
        assert ag_line.split()[2] == "dp_cp_ag" and "own communicator" in ag_line
    elif impl == "dist-opt":
        assert ag_line.split()[2] == "dp_cp" and "does not read dp_cp_ag" in ag_line
    elif impl == "ddp":
        assert "gathers no parameters" in ag_line
    else:
        assert "not known" in block and "under Megatron-FSDP" in ag_line \
            and "under DDP with the distributed optimizer" in ag_line
    assert "overlaps the reduce-scatter" not in out


@pytest.mark.parametrize("impl", IMPLS)
def test_inspect_rank_json_resolves_the_all_gather_for_the_implementation(impl):
    doc = json.loads(run("inspect", *EX, "--rank", 5, "--create-all-gather-group",
                         *IMPLS[impl], "-f", "json").stdout)
    ag = doc["collectives"]["dense_all_gather"]["kind"]
    assert ag == ("dp_cp_ag" if impl in ("fsdp", "unknown") else "dp_cp")
    assert doc["collectives"]["dp_impl"] == impl == doc["dp_impl"]["impl"]


def test_inspect_summary_row_for_dist_opt_does_not_claim_an_overlap():
    out = run("inspect", *EX, "--create-all-gather-group", "--dp-impl", "dist-opt").stdout
    row = next(line for line in out.splitlines() if line.startswith("all-gather"))
    assert "on dp_cp, the reduce-scatter group" in row and "dp_cp_ag" in row


# ------------------------------------------------------------------- diff --toggle
@pytest.mark.parametrize("impl", IMPLS)
def test_diff_toggle_says_what_changes_for_the_implementation(impl):
    out = run("diff", *EX, "--toggle", "create_all_gather_group", *IMPLS[impl]).stdout
    section = out.split("parameter all-gather", 1)[1]
    dense = next(line for line in section.splitlines() if line.strip().startswith("dense"))
    if impl in ("fsdp", "unknown"):
        assert "-> dp_cp_ag (own communicator)" in dense
    else:
        assert "unchanged" in dense and "dp_cp_ag" not in dense
    assert ag_reader_sentence("0.19", impl) in section
    if impl == "unknown":
        assert "as Megatron-FSDP runs it" in out and "stays on dp_cp: unchanged" in section
    assert "priced as" in section


def test_diff_json_carries_the_implementation_and_the_memory_case():
    doc = json.loads(run("diff", *EX, "--toggle", "create_all_gather_group", "--dp-impl",
                         "dist-opt", "-f", "json").stdout)
    assert doc["dp_impl"]["impl"] == "dist-opt"
    assert doc["all_gather"]["dense"]["kinds"] == ["dp_cp", "dp_cp"]
    assert doc["all_gather_memory"].startswith("priced as none")


# ------------------------------------------------------------------- check
@pytest.mark.parametrize("impl", IMPLS)
def test_check_ag_off_names_the_reader(impl):
    doc = json.loads(run("check", *EX, *IMPLS[impl], "-f", "json").stdout)
    off = [f for f in doc["findings"] if f["code"] == "ag-off"]
    assert len(off) == 1
    dp = DPImpl(impl) if impl != "unknown" else DPImpl()
    assert off[0]["message"] == option_off_sentence("0.19", dp)
    if impl == "fsdp":
        assert "serialise" in off[0]["message"]
    elif impl in ("dist-opt", "ddp"):
        assert "changes nothing" in off[0]["message"] and "serialise" not in off[0]["message"]
    else:
        assert "serialise" in off[0]["message"] and "changes nothing" in off[0]["message"]


@pytest.mark.parametrize("impl,fires", [("fsdp", False), ("dist-opt", True), ("ddp", True),
                                        ("unknown", False)])
def test_check_ag_unread_fires_only_when_nothing_reads_the_group(impl, fires):
    doc = json.loads(run("check", *EX, "--create-all-gather-group", *IMPLS[impl],
                         "-f", "json").stdout)
    unread = [f for f in doc["findings"] if f["code"] == "ag-unread"]
    assert bool(unread) is fires
    if fires:
        assert unread[0]["severity"] == "info"  # lazy: no memory, no effect
        assert ag_reader_sentence("0.19", impl) in unread[0]["message"]


def test_check_ag_unread_is_a_warning_with_eager_communicators_and_fails_strict():
    args = ["check", *EX, "--create-all-gather-group", "--dp-impl", "dist-opt",
            "--eager-communicators"]
    doc = json.loads(run(*args, "-f", "json").stdout)
    unread = [f for f in doc["findings"] if f["code"] == "ag-unread"]
    assert unread[0]["severity"] == "warning" and "memory for nothing" in unread[0]["message"]
    assert LAUNCH_WORDS["eager"] in unread[0]["message"]
    run(*args, "--strict", code=1)
    run("check", *EX, "--create-all-gather-group", "--dp-impl", "fsdp", "--eager-communicators",
        "--strict")


@pytest.mark.parametrize("launch,impl,case", [
    ([], "dist-opt", "priced as none"), ([], "fsdp", "priced as paid at the first all-gather"),
    ([], "unknown", "priced as paid when read"),
    (["--eager-communicators"], "dist-opt", "priced as paid at creation")])
def test_check_ag_cost_says_which_memory_case_it_prices(launch, impl, case):
    out = run("check", *EX, "--create-all-gather-group", *IMPLS[impl], *launch).stdout
    assert case in " ".join(out.split())
    assert ("communicators lazy (default: Megatron-LM's own init)" in out) is (not launch)


# ------------------------------------------------------------------- recipes
def test_a_dist_opt_recipe_gets_no_effect_from_check_and_simulate(tmp_path):
    recipe = write(tmp_path, "distopt.yaml", "    " + DIST_OPT_DDP.replace("\n  ", "\n      "))
    out = " ".join(run("check", "--config", recipe).stdout.split())
    assert "DDP with the distributed optimizer (from " in out and "trainer.strategy.ddp" in out
    assert "ag-unread: create_all_gather_group is on: no effect for the distributed optimizer: " \
        in out and ag_reader_sentence("0.19", "dist-opt") in out
    sim = run("simulate", "--config", recipe, "--topology", "dgx-h100-superpod",
              "--model-bytes", "4GB", "--layers", 8, "--compute-ms", 1).stdout
    assert "schedule dist-opt (from " in sim
    verdict = next(line for line in sim.splitlines() if line.startswith("verdict:"))
    assert verdict.startswith("verdict: no effect for the distributed optimizer: ")
    assert ag_reader_sentence("0.19", "dist-opt") in verdict
    assert "costs no memory under this launch" in verdict


def test_a_megatron_fsdp_recipe_gets_the_fsdp_schedule_with_fp32_gradients(tmp_path):
    recipe = write(tmp_path, "fsdp.yaml", FSDP_DDP)  # Megatron-Bridge: top-level ddp:
    args = ["simulate", "--config", recipe, "--topology", "dgx-h100-superpod",
            "--model-bytes", "4GB", "--layers", 8, "--compute-ms", 1]
    doc = json.loads(run(*args, "-f", "json").stdout)
    assert doc["schedule"] == "fsdp" and doc["inputs_from"]["schedule"][1].endswith(" ddp")
    assert doc["inputs_from"]["grad_scale"][0] == 2.0
    rows = {c["what"]: c for c in doc["collectives"]}
    rs, ag = rows["dense reduce-scatter"], rows["dense all-gather"]
    assert rs["size_bytes"] == pytest.approx(2 * ag["size_bytes"])  # fp32 grads, bf16 params
    text = run(*args).stdout
    assert "gradient reduce-scatter 2 x the parameter bytes (fp32, from " in text
    assert "priced as paid at the first all-gather" in text


def test_simulate_default_says_where_schedule_and_dtype_came_from():
    out = run("simulate", *EX, "--topology", "dgx-h100-superpod", "--model-bytes", "4GB",
              "--layers", 8, "--compute-ms", 1).stdout
    assert "schedule fsdp (from default)" in out and "the parameters' dtype, from default" in out
    assert "data-parallel implementation: not known" in out


def test_a_flag_that_contradicts_the_recipe_is_refused_naming_both(tmp_path):
    recipe = write(tmp_path, "distopt.yaml", DIST_OPT_DDP)
    err = error_line("check", "--config", recipe, "--dp-impl", "fsdp")
    assert "--dp-impl fsdp" in err and recipe in err and "DDP with the distributed optimizer" \
        in err
    sim = ["simulate", "--config", recipe, "--topology", "dgx-h100-superpod", "--model-bytes",
           "4GB", "--layers", 8, "--compute-ms", 1]
    err = error_line(*sim, "--schedule", "fsdp")
    assert "--schedule fsdp" in err and recipe in err
    fsdp = write(tmp_path, "fsdp.yaml", FSDP_DDP)
    err = error_line("simulate", "--config", fsdp, *sim[3:], "--grad-scale", 1)
    assert "--grad-scale 1" in err and "grad_reduce_in_fp32 true" in err
    # the same implementation twice is no conflict
    run("check", "--config", recipe, "--dp-impl", "dist-opt")


def test_a_bad_ddp_block_is_one_error_line(tmp_path):
    bad = write(tmp_path, "bad.yaml", 'ddp:\n  use_distributed_optimizer: "true"\n')
    err = error_line("check", "--config", bad)
    assert "ddp.use_distributed_optimizer" in err and "without quotes" in err


def test_simulate_refuses_an_implementation_it_does_not_model(tmp_path):
    err = error_line("simulate", *EX, "--topology", "dgx-h100-superpod", "--model-bytes", "4GB",
                     "--layers", 8, "--compute-ms", 1, "--dp-impl", "ddp")
    assert "--dp-impl names DDP without the distributed optimizer" in err


# ------------------------------------------------------------------- explain, replay-data
@pytest.mark.parametrize("impl", IMPLS)
def test_explain_has_the_reader_table_and_the_sentence(impl):
    out = run("explain", *EX, "--create-all-gather-group", *IMPLS[impl]).stdout
    section = out.split("all-gather group readers", 1)[1]
    assert "Megatron-FSDP" in section and "reads dp_cp_ag" in section
    assert "DDP with the distributed optimizer     reads no AG group" in section
    assert ag_reader_sentence("0.19", impl) in section


def test_replay_data_help_no_longer_puts_the_distributed_optimizer_on_the_ag_group():
    text = " ".join(run("replay-data", "--help").stdout.split())
    assert "what DDP with the distributed optimizer does" in text
    assert "Megatron-FSDP, the AG group's one reader" in text
    assert "the distributed optimizer's data path" not in text
