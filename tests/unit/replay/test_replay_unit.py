"""Replay pieces that start no process: options, plan checks, report, CLI refusals."""

from __future__ import annotations

import importlib.util

import pytest
from click.testing import CliRunner

from cli import main
from simharness import Layout, LayoutError, ParallelismConfig, build_layout
from simharness.replay import Fault, ReplayError, ReplayOptions, preflight, torchrun_command
from simharness.replay.options import max_local_gloo_ranks, parse_bytes
from simharness.replay.plan_checks import (
    check_replayable,
    compare_with_config,
    partition_mismatches,
)
from simharness.replay.report import build_report, merge_mismatches, summary_lines


def layout16(**kw):
    return build_layout(ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
                                          pipeline_model_parallel_size=2,
                                          context_parallel_size=2, **kw), "0.16")


def corrupt(layout: Layout, kind="dp_cp", a=0, b=1, pos=1) -> Layout:
    """Swap one rank between two groups of ``kind`` in the export (a hand-edited plan)."""
    d = layout.to_dict()
    g = d["kinds"][kind]["groups"]
    g[a][pos], g[b][pos] = g[b][pos], g[a][pos]
    return Layout.from_dict(d)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# ----------------------------------------------------------------- options
def test_fault_parse():
    assert Fault.parse("3:hang@create") == Fault(3, "hang", "create")
    assert Fault.parse("1:exit").phase == "verify"
    for bad in ("x:exit", "3:boom@verify", "3:exit@nowhere", "3"):
        with pytest.raises(ReplayError):
            Fault.parse(bad)


@pytest.mark.parametrize("kw", [dict(backend="mpi"), dict(engine="x"), dict(timeout=0),
                                dict(timeout=float("nan")), dict(iters=-1),
                                dict(overlap_bytes=1.5)])
def test_options_refused(kw):
    with pytest.raises(ReplayError):
        ReplayOptions(**kw).validate()


def test_backend_map_records_nccl_as_gloo():
    assert ReplayOptions().backend_map()["nccl"] == "gloo"
    assert ReplayOptions(backend="nccl").backend_map() == {"nccl": "nccl", "ucc": "nccl",
                                                           "gloo": "gloo"}


# ------------------------------------------------------------- plan checks
def test_clean_plan_equals_its_config():
    assert compare_with_config(layout16(create_all_gather_group=True))["mismatches"] == []
    assert partition_mismatches(layout16()) == []


def test_corrupted_plan_is_named_against_the_config():
    bad = corrupt(layout16(), "dp_cp", 0, 1, pos=1)  # [0,2,4,6] <-> [1,3,5,7]: 2 <-> 3
    diffs = compare_with_config(bad)["mismatches"]
    assert [(d["kind"], d["group"]) for d in diffs] == [("dp_cp", 0), ("dp_cp", 1)]
    assert diffs[0]["plan"] == [0, 3, 4, 6] and diffs[0]["config"] == [0, 2, 4, 6]
    assert diffs[0]["extra"] == [3] and diffs[0]["missing"] == [2]
    assert "rank 3 belongs in group 1" in diffs[0]["message"]
    # Each rank's view stays self-consistent: it still partitions the world.
    assert partition_mismatches(bad) == []


def test_partition_problem_is_named():
    d = layout16().to_dict()
    d["kinds"]["tp"]["groups"][0] = [0, 2]  # rank 2 twice, rank 1 nowhere
    diffs = partition_mismatches(Layout.from_dict(d))
    assert diffs and diffs[0]["kind"] == "tp" and diffs[0]["ranks"] == [1, 2]


def test_unreplayable_plans_are_refused():
    d = layout16().to_dict()
    d["kinds"]["tp"]["groups"][0] = [0, 16]
    with pytest.raises(LayoutError, match="outside the world"):
        check_replayable(Layout.from_dict(d))
    d = layout16().to_dict()
    d["kinds"]["tp"]["groups"][0] = [0, 0]
    with pytest.raises(LayoutError, match="twice"):
        check_replayable(Layout.from_dict(d))
    with pytest.raises(LayoutError, match="rank_offset"):
        check_replayable(build_layout(ParallelismConfig(world_size=8, rank_offset=8)))


def test_world_larger_than_machine_needs_force(monkeypatch):
    # the memory guard is another check (its own tests): give this one ample memory, so the
    # outcome does not hang on what else the machine runs
    from simharness import resources

    monkeypatch.setattr(resources, "available_memory",
                        lambda: resources.MemoryLimit(available=1 << 40, source="test"))
    limit = max_local_gloo_ranks()
    lay = build_layout(ParallelismConfig(world_size=limit * 2, tensor_model_parallel_size=2))
    with pytest.raises(ReplayError, match="--force"):
        preflight(lay, ReplayOptions())
    preflight(lay, ReplayOptions(force=True))  # accepted (nothing started here)


@pytest.mark.skipif(importlib.util.find_spec("megatron") is None, reason="no megatron-core")
def test_megatron_mode_needs_the_installed_profile():
    with pytest.raises(Exception, match="profile"):
        preflight(build_layout(ParallelismConfig(world_size=8), "0.19"),
                  ReplayOptions(engine="megatron"))


# ------------------------------------------------------------------ report
def test_merge_mismatches_collects_ranks():
    m = {"check": "getter", "kind": "tp", "group": 0, "expected": [0, 1], "actual": [0, 2],
         "message": "x"}
    merged = merge_mismatches([[{**m, "rank": 1}], [{**m, "rank": 0}], [{**m, "rank": 1}]])
    assert len(merged) == 1 and merged[0]["ranks"] == [0, 1]


def test_failure_report_without_results():
    lay = layout16()
    rep = build_report(lay, ReplayOptions(), None, failure={"kind": "rank_died", "rank": 3,
                                                            "message": "rank 3 died"})
    assert rep["status"] == "failed" and rep["exit_code"] == 3 and not rep["ok"]
    assert any("rank 3 died" in line for line in summary_lines(rep))


def test_torchrun_command():
    cmd = torchrun_command("plan.json", world_size=16, nnodes=2)
    assert cmd.startswith("torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d "
                          "--rdzv-endpoint=$MASTER_ADDR:29500")
    assert "-m simharness.replay.worker --plan plan.json --backend nccl" in cmd
    assert "--standalone --nproc-per-node=8" in torchrun_command("p.json", world_size=8)
    with pytest.raises(ReplayError, match="divide"):
        torchrun_command("p.json", world_size=16, nnodes=3)


# -------------------------------------------------------------------- CLI
def test_cli_invalid_config_refused_before_start():
    r = run("replay", "-n", "12", "--tp", "8")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert "not divisible" in r.stderr


def test_cli_too_many_ranks_asks_for_force():
    r = run("replay", "-n", str(max_local_gloo_ranks() * 2), "--tp", "2")
    assert r.exit_code == 2 and "--force" in r.stderr


def test_cli_plan_and_flags_conflict(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(layout16().to_json())
    r = run("replay", "--plan", plan, "--tp", "2")
    assert r.exit_code == 2 and "drop the configuration flags" in r.stderr
    r = run("replay", "--plan", tmp_path / "missing.json")
    assert r.exit_code == 2 and "no such file" in r.stderr
    (tmp_path / "bad.json").write_text("{")
    r = run("replay", "--plan", tmp_path / "bad.json")
    assert r.exit_code == 2 and "not valid JSON" in r.stderr


def test_cli_bad_options():
    assert run("replay", "-n", "8", "--overlap-bytes", "lots").exit_code == 2
    assert run("replay", "-n", "8", "--timeout", "0").exit_code == 2
    r = run("replay", "-n", "8", "--inject-fault", "99:exit@verify")
    assert r.exit_code == 2 and "fault rank 99" in r.stderr


def test_cli_print_torchrun(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run("replay", "-n", "16", "--tp", "2", "--pp", "2", "--print-torchrun", "--nnodes", "2",
            "--save-plan", "plan.json")
    assert r.exit_code == 0, r.output
    assert "torchrun --nnodes=2 --nproc-per-node=8" in r.stdout
    assert "--plan plan.json" in r.stdout
    saved = Layout.from_json((tmp_path / "plan.json").read_text())
    assert saved.groups("dp_cp").tolist() == layout16().groups("dp_cp").tolist()
    r = run("replay", "-n", "16", "--print-torchrun", "--nnodes", "3")
    assert r.exit_code == 2 and "does not divide" in r.stderr


def test_verify_live_outside_a_job_is_a_clear_error():
    import simharness
    from simharness import SimharnessError

    with pytest.raises(SimharnessError, match="inside a job"):
        simharness.verify_live(layout16())


@pytest.mark.parametrize("text", ["24G", "512MiB", "4Gi", "1.5K", "64b", "1000", "1T", "0",
                                  "1.5", "4 GB/s", "-1", "2X", "", "0.5M"])
def test_every_size_is_read_one_way(text):
    """--overlap-bytes and SIMHARNESS_MEMORY_LIMIT read sizes alike (they once disagreed on
    decimals, ``T`` and ``Gi``; ``1.5`` was one byte for one and an error for the other)."""
    from simharness.resources import ResourceError, parse_size

    try:
        want: int | None = parse_size(text)
    except ResourceError:
        want = None
    try:
        got: int | None = parse_bytes(text)
    except ReplayError:
        got = None
    assert got == want
    assert (want is None) == (text in ("1.5", "4 GB/s", "-1", "2X", ""))
