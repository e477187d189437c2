"""``--megatron-args FILE`` and ``-- ARGS``: a real ``pretrain_gpt.py`` argument list read
whole by ``check``, ``inspect`` and ``simulate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli_errors import invoke, one_error_line

from simharness._cli.options import apply_megatron_args

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "megatron_args"
GPT3 = str(FIXTURES / "gpt3_175b.args")
MIXTRAL = str(FIXTURES / "mixtral_8x7b.args")


def note(result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.startswith("note: Megatron-LM")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_check_reads_the_gpt3_example_whole():
    r = invoke("check", "--megatron-args", GPT3)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("128 ranks  tp 8 pp 16 cp 1 dp 1")  # torchrun 8 x 16 nodes
    n = note(r)
    assert "read 2 (--tensor-model-parallel-size --pipeline-model-parallel-size)" in n
    assert "data-parallel implementation ddp (Megatron-LM's default" in n
    # check does not use the model: those are listed with the rest
    assert "not affecting the result: 32 (" in n and "--num-layers" in n and "--lr " in n


def test_inspect_takes_the_arguments_after_a_double_dash():
    words = Path(MIXTRAL).read_text().split("\n", 3)[3].split()  # past the header comments
    r = invoke("inspect", "--nodes", 8, "--", *words)
    assert r.exit_code == 0, r.output
    assert "tp 1  pp 4  cp 1  dp 16  dp*cp 16  ep 8" in r.stdout
    assert "data-parallel implementation dist-opt;" in note(r)


def test_file_and_double_dash_together_and_quiet():
    r = invoke("check", "-q", "-n", 32, "--megatron-args", MIXTRAL, "--",
               "--create-all-gather-group")
    assert r.exit_code in (0, 1), r.output
    assert r.stderr == ""  # -q: no note
    r = invoke("check", "-n", 32, "-f", "json", "--megatron-args", MIXTRAL, "--",
               "--create-all-gather-group")
    data = json.loads(r.stdout)
    assert data["summary"]["create_all_gather_group"] is True
    assert (data["summary"]["pp"], data["summary"]["ep"]) == (4, 8)


def test_simulate_takes_the_model_from_the_arguments():
    r = invoke("simulate", "--topology", "dgx-h100-superpod", "--nodes", 4, "--mfu", 0.4,
               "--schedule", "dist-opt", "-f", "json", "--megatron-args", MIXTRAL)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["groups"]["dense_rs"] == "dp_cp" and len(data["stages"]) == 4
    n = note(r)
    assert "--num-layers" in n.split("not affecting")[0]  # read by simulate
    assert "--global-batch-size" in n.split("not affecting")[1]


@pytest.mark.parametrize(("args", "words"), [
    (["check", "--tp", 4, "--megatron-args", GPT3],
     "--tensor-model-parallel-size 4 conflicts with Megatron-LM's --tensor-model-parallel-size 8"),
    (["check", "-n", 64, "--megatron-args", GPT3],
     "-n 64 conflicts with the torchrun line's --nproc-per-node x --nnodes = 128"),
    (["check", "-n", 16, "--", "--tensor-model-parallel-size", 2, "--num-layer", 4],
     "Megatron-LM has no argument --num-layer"),
    (["inspect", "-n", 16, "--", "--use-distributed-optimiser"],
     "did you mean --use-distributed-optimizer?"),
    (["check", "--megatron-args", " "], "--megatron-args was given an empty path"),
    (["simulate", "--topology", "dgx-h100-superpod", "--nodes", 2, "--compute-ms", 8,
      "--layers", 4, "--megatron-args", GPT3],
     "--layers 4 conflicts with Megatron-LM's --num-layers 96"),
])
def test_bad_or_conflicting_arguments_are_one_error_line(args, words):
    assert words in one_error_line(invoke(*args))


def test_apply_keeps_the_ddp_mapping_and_sets_unflagged_fields():
    kwargs = {"tensor_model_parallel_size": None, "world_size": None, "nodes": None,
              "set_fields": (), "megatron_args_file": None, "quiet": True,
              "megatron_argv": ("--tensor-model-parallel-size", "2", "--hybrid-context-parallel",
                                "--use-megatron-fsdp", "--bf16")}
    a = apply_megatron_args(kwargs)
    assert kwargs["tensor_model_parallel_size"] == 2
    assert "megatron_argv" not in kwargs and "megatron_args_file" not in kwargs
    assert kwargs["set_fields"] == (("hybrid_context_parallel", True,
                                     "--hybrid-context-parallel (Megatron-LM)"),)
    assert a.ddp == {"use_megatron_fsdp": True, "grad_reduce_in_fp32": True}
    assert apply_megatron_args({"megatron_argv": ()}) is None


def test_the_implementation_flows_to_check_and_simulate():
    """Mixtral's arguments say --use-distributed-optimizer and --bf16: check says the AG
    group is unread, simulate takes the dist-opt schedule and fp32 gradients from them."""
    r = invoke("check", "-n", 32, "--megatron-args", MIXTRAL, "--", "--create-all-gather-group")
    text = " ".join(r.stdout.split())  # findings wrap to the terminal's width
    assert "DDP with the distributed optimizer (from the Megatron-LM arguments)" in text
    assert "ag-unread" in text and "no effect for the distributed optimizer" in text
    r = invoke("simulate", "--topology", "dgx-h100-superpod", "--nodes", 4, "--mfu", 0.4,
               "-f", "json", "--megatron-args", MIXTRAL, "--", "--create-all-gather-group")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["schedule"] == "dist-opt" and data["inputs_from"]["grad_scale"][0] == 2.0
    assert "Megatron-LM arguments" in data["inputs_from"]["schedule"][1]
    assert data["verdict"].startswith("no effect for the distributed optimizer")
    r = invoke("check", "-n", 32, "--dp-impl", "fsdp", "--megatron-args", MIXTRAL)
    assert r.exit_code == 2
    errors = [x for x in r.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in r.output  # after the note of what was read
    assert "--dp-impl fsdp conflicts with the Megatron-LM arguments" in errors[0]
