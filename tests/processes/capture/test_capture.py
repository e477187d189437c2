"""``simharness capture``: the user's own init code, every rank, under torch's fake backend.

megatron-core is the judge: the captured calls of its real ``initialize_model_parallel``
(0.16.1 installed; 0.18.2 and 0.19.2 loaded from their wheels by ``megatron_harness``)
must equal ``build_layout`` call for call, and the bugs the checks exist for (#4261's
misaligned all-gather groups, NeMo's dropped keyword, ranks creating groups in different
orders) must be named from the captured calls alone.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys

import pytest
import torch.distributed as dist
from click.testing import CliRunner
from support import megatron_harness as H
from support.paths import ROOT

import simharness
from simharness import ParallelismConfig, build_layout
from simharness.capture import (
    Capture,
    CaptureError,
    GetterSpec,
    check_capture,
    parse_rank_spec,
)
from simharness.capture.inprocess import Program, capture, failure_message, run_program

EXAMPLES = ROOT / "examples" / "capture"
T = 60  # seconds one rank may take (a bound, never reached by a passing test)


def example(name):
    return runpy.run_path(str(EXAMPLES / name))


def codes(findings, severity=None):
    return [f.code for f in findings if severity is None or f.severity == severity]


def plan_calls(layout):
    return [(gc.desc, gc.ranks, gc.backend) for gc in layout.creation_order]


def captured_calls(cap, rank):
    return [(c.desc, c.ranks, c.backend or "nccl") for c in cap.calls(rank)]


def cfg16(**kw):
    base = dict(world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                context_parallel_size=2)
    base.update(kw)
    return ParallelismConfig(**base)


def load(version):
    try:
        return H.load_version(ROOT, version)
    except RuntimeError as exc:
        pytest.skip(f"megatron-core {version} not available: {exc}")


# ------------------------------------------------------------- megatron 0.16
def test_megatron_016_init_equals_the_plan_on_every_rank():
    ps = H.load_parallel_state_016()
    meg = example("megatron_init.py")
    args = meg["parse"](["--tp", "2", "--pp", "2", "--cp", "2", "--create-all-gather-group"])
    getter = ("megatron.core.parallel_state:get_data_parallel_group(with_context_parallel=True,"
              " independent_all_gather=True)")
    cap = capture(lambda: meg["init"](ps, args), 16, getters=[getter], timeout=T)
    layout = build_layout(cfg16(create_all_gather_group=True), "0.16")
    assert cap.complete and len(cap.sequences) == 1
    for r in (0, 7, 15):
        assert captured_calls(cap, r) == plan_calls(layout)
        got = cap.records[r].getters[getter]
        assert got["desc"] == "DATA_PARALLEL_GROUP_WITH_CP_AG"
        assert got["ranks"] == sorted(layout.group_of("dp_cp_ag", r).tolist())
    sites = {c.site for c in cap.calls(0)}
    assert any("parallel_state.py" in s and "create_group" in s for s in sites)
    findings = check_capture(cap, layout)
    assert codes(findings, "error") == []
    assert "capture-vs-config" in codes(findings, "info")
    assert "capture-twin" in codes(findings, "info")  # AG matches DP-with-CP


def test_shortcuts_change_no_call():
    """Non-member skipping, the Megatron memo and in-process ranks give the calls (and
    torch group names) a per-rank process with torch's own new_group gives."""
    ps = H.load_parallel_state_016()
    meg = example("megatron_init.py")
    args = meg["parse"](["--tp", "2", "--cp", "2", "--create-all-gather-group"])
    prog = Program(lambda: meg["init"](ps, args), None, "init")
    getter = "megatron.core.parallel_state:get_context_parallel_group"
    fast = run_program(prog, 8, auto_init=True, jobs=2, timeout=T, getters=[getter])
    slow = run_program(prog, 8, auto_init=True, jobs=1, isolate=True, accelerate=False,
                       skip_non_members=False, timeout=T, getters=[getter])
    for r in range(8):
        assert fast.calls(r) == slow.calls(r)
        got = fast.records[r].getters[getter]  # torch's own name for a member group
        assert got["name"] == fast.calls(r)[got["group"]].group_name
    names = [c.group_name for c in fast.calls(3)]
    assert names == [str(i) for i in range(1, 1 + len(names))]


# ------------------------------------------------------------ 0.18 / 0.19
@pytest.mark.parametrize("version,profile", [("0.18.2", "0.18"), ("0.19.2", "0.19")])
def test_megatron_018_019_files(version, profile):
    ps = load(version)
    meg = example("megatron_init.py")
    ok = meg["parse"](["--tp", "2", "--pp", "2", "--cp", "2", "--create-all-gather-group"])
    cap = capture(lambda: meg["init"](ps, ok), 16, timeout=T)
    layout = build_layout(cfg16(create_all_gather_group=True), profile)
    assert captured_calls(cap, 5) == plan_calls(layout)
    assert codes(check_capture(cap, layout), "error") == []
    # Issue #4261: NeMo's tp-pp-dp mapping + the 0.18+ all-gather groups. The capture alone
    # (no configuration) names the misaligned twins; with the config, ag-mismatch too.
    bug = meg["parse"](["--tp", "2", "--pp", "2", "--cp", "2", "--ep", "2",
                        "--use-tp-pp-dp-mapping", "--create-all-gather-group"])
    cap = capture(lambda: meg["init"](ps, bug), 16, timeout=T)
    twins = [f for f in check_capture(cap) if f.code == "capture-twin" and f.severity == "error"]
    assert len(twins) == 2
    assert ("rank 0 is in DATA_PARALLEL_GROUP_WITH_CP_AG group [0, 2, 4, 6]" in twins[0].message
            and "DATA_PARALLEL_GROUP_WITH_CP group is [0, 2, 8, 10]" in twins[0].message)
    assert "create_all_gather_groups" in twins[0].message  # the call site's function
    layout = build_layout(cfg16(expert_model_parallel_size=2, use_tp_pp_dp_mapping=True,
                                create_all_gather_group=True), profile)
    found = check_capture(cap, layout)
    assert "ag-mismatch" in codes(found, "error")
    assert "capture-vs-config" in codes(found, "info")  # Megatron's calls are the plan's


@pytest.mark.parametrize("version,profile", [("0.16.1", "0.16"), ("0.18.2", "0.18")])
def test_nemo_style_init_drops_the_option_on_018(version, profile):
    ps = H.load_parallel_state_016() if version == "0.16.1" else load(version)
    nemo = example("nemo_style_init.py")
    app = nemo["AppState"](2, 1, 2, False, True)
    cap = capture(lambda: nemo["init_model_parallel"](ps, app), 8, timeout=T)
    layout = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2,
                                            context_parallel_size=2,
                                            create_all_gather_group=True), profile)
    found = check_capture(cap, layout)
    descs = {c.desc for c in cap.calls(0)}
    if profile == "0.16":
        assert "DATA_PARALLEL_GROUP_WITH_CP_AG" in descs
        assert codes(found, "error") == []
    else:
        assert "DATA_PARALLEL_GROUP_WITH_CP_AG" not in descs
        dropped = [f for f in found if f.code == "ag-dropped"]
        assert len(dropped) == 1 and "silently" in dropped[0].message
        assert "create_all_gather_groups" in dropped[0].message


# ------------------------------------------------------------------ FSDP2
def _fsdp(separate):
    fsdp = example("fsdp2_init.py")
    return capture(lambda: fsdp["build"](4, separate), 8, timeout=T)


def test_fsdp2_separate_reduce_scatter_group():
    cap = _fsdp(True)
    rs = [c for c in cap.groups() if c.desc == "fsdp_reduce_scatter"]
    assert sorted(c.ranks for c in rs) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert all(c.local_sync for c in rs)
    found = check_capture(cap)
    assert codes(found, "error") == []
    assert [f.severity for f in found if f.code == "capture-twin"] == ["info"]
    off = _fsdp(False)
    assert not [c for c in off.groups() if c.desc == "fsdp_reduce_scatter"]


def _twin_init(keep_order):
    def init():
        r = dist.get_rank()
        for g in ([0, 1, 2, 3], [4, 5, 6, 7]):
            dist.new_group(g, group_desc="mesh_shard")
        mine = [0, 1, 2, 3] if r < 4 else [4, 5, 6, 7]
        extra = {"sort_ranks": False} if keep_order else {}
        dist.new_group(mine[::-1] if r < 4 else mine, use_local_synchronization=True,
                       group_desc="fsdp_reduce_scatter", **extra)
    return init


def test_twin_in_a_different_order_is_named_only_when_torch_keeps_the_order():
    # torch sorts a group's ranks (new_group's sort_ranks=True): a reversed list builds the
    # same communicator, so the twins line up ...
    same = check_capture(capture(_twin_init(False), 8, timeout=T))
    assert [f.severity for f in same if f.code == "capture-twin"] == ["info"]
    assert codes(same, "error") == []
    # ... but with sort_ranks=False the group's rank order is the list's.
    twin = [f for f in check_capture(capture(_twin_init(True), 8, timeout=T))
            if f.code == "capture-twin"]
    assert len(twin) == 1 and twin[0].severity == "error"
    assert "same ranks in a different order" in twin[0].message
    assert twin[0].ranks == (0, 1, 2, 3)


# ------------------------------------------------------- correct code stays clean
def test_same_ranks_in_another_order_is_the_same_group():
    def init():
        r = dist.get_rank()
        dist.new_group([1, 0] if r % 2 else [0, 1], group_desc="PAIRS")
        dist.new_group([3, 2] if r % 2 else [2, 3], group_desc="PAIRS")

    cap = capture(init, 4, timeout=T)
    assert {c.group for r in range(4) for c in cap.calls(r)} == {(0, 1), (2, 3)}
    assert cap.calls(1)[0].ranks == (1, 0)  # as the code passed it
    found = check_capture(cap)
    assert codes(found, "error") == [] and codes(found, "warning") == []


def test_kinds_without_group_desc_are_told_apart_by_site_and_call():
    def make(ranks):
        return dist.new_group(ranks)

    def by_line():      # one helper, called from two lines: TP pairs then DP pairs
        for g in ([0, 1], [2, 3]):
            make(g)
        for g in ([0, 2], [1, 3]):
            make(g)

    def one_line():     # one helper, one line: the kinds follow each other
        for groups in (([0, 1], [2, 3]), ([0, 2], [1, 3])):
            for g in groups:
                make(g)

    for init in (by_line, one_line):
        found = check_capture(capture(init, 4, timeout=T))
        assert codes(found, "error") == [] and codes(found, "warning") == [], init.__name__
    # Overlapping groups built at one site by one loop are still two kinds, not an error;
    # the same kind twice is still a duplicate.
    def twice():
        for g in ([0, 1], [2, 3], [0, 1], [2, 3]):
            dist.new_group(g, group_desc="TENSOR_MODEL_PARALLEL_GROUP")

    assert "capture-duplicate" in codes(check_capture(capture(twice, 4, timeout=T)), "warning")


def test_members_only_creation_with_local_synchronization_is_legal():
    def init():
        r = dist.get_rank()
        if r in (0, 1):
            dist.new_group([0, 1], use_local_synchronization=True, group_desc="EXPERT_PAIR")
        if r in (4, 5):
            dist.new_group([4, 5], use_local_synchronization=True,
                           group_desc="TENSOR_MODEL_PARALLEL_GROUP")

    found = check_capture(capture(init, 8, timeout=T))
    assert codes(found, "error") == [] and codes(found, "warning") == [], \
        [f.message for f in found]


# ----------------------------------------------------------- sequence bugs
def test_divergent_order_names_rank_call_and_both_sites(tmp_path):
    out = tmp_path / "cap.json"
    res = CliRunner().invoke(simharness_cli(), [
        "capture", "-n", "16", "--fast", "--no-crosscheck", "--out", str(out), "--", "python",
        str(EXAMPLES / "divergent_groups.py"), "--pp", "4"])
    assert res.exit_code == 1, res.output
    assert "capture-divergence: rank 1 creates its groups in a different order from rank 0" \
        in " ".join(res.output.split())
    text = " ".join(res.output.split())
    assert "call 0 is EMBEDDING_GROUP [0, 12] at" in text and "but EMBEDDING_GROUP [1, 13] at" \
        in text
    assert text.count("divergent_groups.py:25 embedding_groups") >= 2
    assert json.loads(out.read_text())["schema"] == "simharness.capture/1"


def test_cli_megatron_script_against_the_config_json(tmp_path):
    out = tmp_path / "cap.json"
    getter = "megatron.core.parallel_state:get_tensor_model_parallel_group"
    res = CliRunner().invoke(simharness_cli(), [
        "capture", "-n", "8", "--fast", "--no-crosscheck", "--tp", "2", "--cp", "2",
        "--mcore", "0.16", "--ranks", "0-3",
        "--getter", getter, "--format", "json", "--out", str(out), "--", "python",
        str(EXAMPLES / "megatron_init.py"), "--tp", "2", "--cp", "2"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    info = [f["message"] for f in report["findings"] if f["code"] == "capture-vs-config"]
    assert info and "call for call" in info[0]
    saved = Capture.from_dict(json.loads(out.read_text()))
    assert sorted(saved.records) == [0, 1, 2, 3]
    assert saved.records[3].getters[getter]["ranks"] == [2, 3]
    assert saved.meta["command"].startswith("python ")
    (init,) = saved.records[3].init["calls"]  # the script's own init_process_group
    assert init["backend"] == "gloo" and "megatron_init.py" in init["site"]


def test_missing_calls_are_named():
    def init():
        r = dist.get_rank()
        dist.new_group([0, 1], group_desc="A")
        if r != 3:
            dist.new_group([2, 3], group_desc="B")
        mine = [0, 1] if r < 2 else [2, 3]
        if r != 2:
            dist.new_group(mine, use_local_synchronization=True, group_desc="L")

    found = [f for f in check_capture(capture(init, 4, timeout=T))
             if f.code == "capture-missing-call"]
    msgs = " | ".join(f.message for f in found)
    assert "rank 3 makes 1 collective new_group calls but rank 0 makes 2" in msgs
    assert "B [2, 3]" in msgs
    assert "L [2, 3]" in msgs and "not by its member(s) 2" in msgs


def test_partition_overlap_and_gaps():
    def init():
        dist.new_group([0, 1, 2], group_desc="TENSOR_MODEL_PARALLEL_GROUP")
        dist.new_group([2, 3], group_desc="TENSOR_MODEL_PARALLEL_GROUP")
        dist.new_group([0, 1], group_desc="DATA_PARALLEL_GROUP")
        dist.new_group([0, 1], group_desc="my_pairs")

    found = [f for f in check_capture(capture(init, 4, timeout=T))
             if f.code == "capture-partition"]
    by = {(f.groups[0], f.severity): f.message for f in found}
    assert "rank 2 in [0, 1, 2] and [2, 3]" in by[("TENSOR_MODEL_PARALLEL_GROUP", "error")]
    assert "2 of 4 ranks are in no group (2-3)" in by[("DATA_PARALLEL_GROUP", "error")]
    assert ("my_pairs", "warning") in by


# --------------------------------------------------------------- bad input
BAD = {
    "crash.py": ("import torch.distributed as dist\ndist.init_process_group('nccl')\n"
                 "dist.new_group([0, 1], group_desc='A')\n"
                 "def build():\n    if dist.get_rank() == 3:\n"
                 "        raise ValueError('bad shard count')\n"
                 "    dist.new_group([2, 3], group_desc='B')\nbuild()\n"),
    "hang.py": ("import time\nimport torch.distributed as dist\n"
                "def wait_for_peer():\n    while True:\n        time.sleep(0.05)\n"
                "dist.init_process_group('nccl')\ndist.new_group([0, 1])\n"
                "if dist.get_rank() == 2:\n    wait_for_peer()\n"),
    "noinit.py": "import torch.distributed as dist\nx = 1\n",
    # torch.cuda.set_device is a no-op under --fast (recorded as ignored); a device query
    # is not
    "gpu_init.py": ("import os, torch, torch.distributed as dist\n"
                    "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
                    "dist.init_process_group('nccl')\n"
                    "torch.cuda.current_device()\n"),
}
EXPECT = {
    "crash.py": ("rank 3 failed at crash.py:6 build (called from crash.py:8 <module>) after 1 "
                 "new_group call(s): ValueError: bad shard count", 3, "failed"),
    "hang.py": ("rank 2 did not finish within 2.0 s: it was in hang.py:5 wait_for_peer "
                "(called from hang.py:9 <module>)", 2, "timeout"),
    "noinit.py": ("rank 0: the code finished without calling "
                  "torch.distributed.init_process_group", 0, "failed"),
    "gpu_init.py": ("rank 0 calls a GPU/NCCL-only API at torch/cuda/", 0, "failed"),
}


def simharness_cli():
    import cli

    return cli.main


def _run_cli(tmp_path, script, *, subprocess_cli=False):
    (tmp_path / script).write_text(BAD[script])
    out = tmp_path / "cap.json"
    args = ["capture", "-n", "4", "--fast", "--timeout", "2", "--jobs", "1", "--out", str(out),
            "--",
            "python", str(tmp_path / script)]
    if subprocess_cli:  # the installed entry point's path: a real process, real stderr
        proc = subprocess.run(
            [sys.executable, "-c", "import cli; cli.main()", *args], cwd=tmp_path,
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(ROOT), os.environ.get("PYTHONPATH", "")])})
        return proc.returncode, proc.stderr, out
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = CliRunner().invoke(simharness_cli(), args)
    finally:
        os.chdir(cwd)
    return res.exit_code, res.stderr, out


@pytest.mark.parametrize("script", sorted(BAD))
def test_bad_scripts_one_error_line_and_partial_capture(tmp_path, script):
    code, stderr, out = _run_cli(tmp_path, script, subprocess_cli=script == "crash.py")
    assert code == 3, stderr  # the ranks ran and one failed: a runtime failure
    lines = [ln for ln in stderr.splitlines() if not ln.startswith("capture: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    text, rank, status = EXPECT[script]
    assert text in lines[0]
    assert f"the partial capture is in {out}" in lines[0]
    saved = Capture.from_dict(json.loads(out.read_text()))
    assert saved.records[rank].status == status
    if script in ("crash.py", "hang.py"):  # the ranks before the failure are kept
        assert [r for r in saved.ok_ranks if r < rank] == list(range(rank))


def test_a_misspelt_option_is_named_not_taken_for_the_command():
    res = CliRunner().invoke(simharness_cli(), ["capture", "-n", "2", "--tpp", "2", "--",
                                                "python", str(EXAMPLES / "megatron_init.py")])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        "error: no such option '--tpp'; did you mean '--tp'? (see 'simharness capture --help')"]


def test_command_errors():
    from simharness.capture.inprocess import program_from_command

    with pytest.raises(CaptureError, match="drop torchrun"):
        program_from_command(["torchrun", "--nproc-per-node", "8", "train.py"])
    with pytest.raises(CaptureError, match="no command to capture"):
        program_from_command(["python"])
    with pytest.raises(CaptureError, match="cannot read the script"):
        program_from_command(["python", "/nonexistent/init.py"])


# ------------------------------------------------------------------- pieces
def test_capture_round_trip_and_rank_subset():
    ps = H.load_parallel_state_016()
    meg = example("megatron_init.py")
    args = meg["parse"](["--tp", "2"])
    cap = capture(lambda: meg["init"](ps, args), 8, ranks="0-2,7", timeout=T)
    assert sorted(cap.records) == [0, 1, 2, 7] and cap.complete
    back = Capture.from_dict(json.loads(cap.to_json()))
    assert back.sequences == cap.sequences and back.ok_ranks == cap.ok_ranks
    assert [f.to_dict() for f in check_capture(back)] == \
        [f.to_dict() for f in check_capture(cap)]


def test_library_entry_point_is_lazy_and_getter_errors_are_values():
    cap = simharness.capture(lambda: None, 2, getters=["os:no_such_name"], timeout=T)
    assert cap.records[1].getters["os:no_such_name"]["raises"].startswith("AttributeError")
    assert failure_message(cap) is None


def test_input_parsers():
    assert parse_rank_spec("all", 4) == (0, 1, 2, 3)
    with pytest.raises(CaptureError, match="outside the world 0..3"):
        parse_rank_spec("2-9", 4)
    with pytest.raises(CaptureError, match="MODULE:NAME"):
        GetterSpec.parse("get_data_parallel_group")
    with pytest.raises(CaptureError, match="literals"):
        GetterSpec.parse("m:f(x=y)")
    assert GetterSpec.parse("__main__:model.layer").path == ("model", "layer")
