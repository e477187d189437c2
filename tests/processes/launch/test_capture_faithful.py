"""Faithful capture: every rank its own interpreter, started as torchrun starts it.

Each test that starts ranks runs a small world (2-4 processes) through torch's elastic
agent; the expectations come from what a real torchrun job does (per-process hash seeds,
the rank environment set before the interpreter starts, real gloo collectives), not from
the code under test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from support.paths import ROOT

from simharness.capture import Capture, CaptureError, check_capture
from simharness.capture.command import parse_command
from simharness.capture.merge import merge_records, rank_record, record_name, write_record
from simharness.capture.record import GroupCall

SCRIPTS = ROOT / "tests" / "fixtures" / "capture"

def cli():
    import cli as entry

    return entry.main


def run_cli(args, *, env=None, timeout=180, cwd=None):
    """The installed CLI in a real process (real stderr, real signals)."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    return subprocess.run([sys.executable, "-c", "import cli; cli.main()", *args],
                          capture_output=True, text=True, timeout=timeout, env=full_env,
                          cwd=cwd)


def line_of(script, text):
    """The line number of the first line of ``script`` that contains ``text``."""
    lines = (SCRIPTS / script).read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if text in ln)


def error_lines(stderr):
    return [ln for ln in stderr.splitlines() if ln.startswith("error:")]


# ------------------------------------------------------------- a real job's view
def test_faithful_capture_sees_what_torchrun_sees(tmp_path):
    from simharness.capture.faithful import run_faithful

    target = parse_command(["python", str(SCRIPTS / "faithful_job.py")])
    census = "simharness.capture.lazy_group:census()"
    cap = run_faithful(target, 4, timeout=120, getters=["__main__:SUMMARY", census],
                       check_memory=False)  # other processes may hold memory here
    assert cap.complete, {r: rec.error for r, rec in cap.records.items()}
    for r in range(4):
        got = cap.records[r].getters["__main__:SUMMARY"]
        assert got["rank_at_import"] == r          # the env was set before the import
        assert got["sum"] == 10.0                  # all_reduce of 1+2+3+4 on real gloo
        assert got["hosts"] == ["node0", "node0", "node1", "node1"]   # all_gather_object
        assert got["box"] == {"from": 0}           # broadcast_object_list
        node = [1, 2] if r < 2 else [3, 4]         # on the rank's NODE subgroup:
        assert got["node_sum"] == sum(node)        # all_reduce
        assert got["node_ranks"] == [n - 1 for n in node]   # all_gather_object
        assert got["node_backend"] == "gloo"
        # all_reduce of 0+1+2+3, then rank 1's first element broadcast over it (a view)
        assert got["cuda_moved"] == [[6.0, 6.0], [0.5, 1.5, 2.5, 3.5], "torch.float32"]
        # Only the default group and the NODE group ran collectives: the other groups
        # this rank is in (SUBGROUP, SPLIT, mesh_dp, mesh_tp, the set-order groups of
        # ranks 0-1) have no communicator.
        assert cap.records[r].getters[census] == {"idle": 4 + 8 * (r < 2), "connected": 2}
        (init,) = cap.records[r].init["calls"]
        assert init["backend"] == "cuda:nccl,cpu:gloo" and init["device_id"] == f"cuda:{r}"
    groups = {(c.desc, c.group) for c in cap.groups()}
    for desc in ("NODE", "SUBGROUP", "SPLIT", "mesh_tp"):
        assert {(desc, (0, 1)), (desc, (2, 3))} <= groups, desc
    assert {("mesh_dp", (0, 2)), ("mesh_dp", (1, 3))} <= groups
    found = check_capture(cap)
    errors = [f for f in found if f.severity == "error"]
    # Each rank iterates the set of names in its own hash order: a real gloo run hangs.
    assert errors and {f.code for f in errors} == {"capture-divergence"}, errors
    line = line_of("faithful_job.py", "group_desc=name)")
    assert f"faithful_job.py:{line} <module>" in errors[0].message
    assert cap.meta["mode"] == "faithful" and cap.meta["peak_rss_kb_sum"] > 0


# ------------------------------------------------------------------ failures
def _broken(tmp_path, how, *extra, world="2"):
    out = tmp_path / "cap.json"
    res = run_cli(["capture", "-n", world, "--out", str(out), *extra, "--", "python",
                   str(SCRIPTS / "broken_job.py")], env={"BROKEN": how, "TMPDIR": str(tmp_path)})
    return res, out


def test_import_failure_on_one_rank_is_that_ranks_failure(tmp_path):
    res, out = _broken(tmp_path, "import")
    assert res.returncode == 3, res.stderr
    (line,) = error_lines(res.stderr)
    at = f"broken_job.py:{line_of('broken_job.py', 'no_such_triton')} <module>"
    assert line.startswith("error: rank 1 cannot import what the script needs at ") \
        and at in line, line
    assert "simharness_no_such_triton" in line and f"partial capture is in {out}" in line
    saved = Capture.from_dict(json.loads(out.read_text()))
    assert saved.records[1].status == "failed" and saved.records[1].error["kind"] == "import"
    assert not list(tmp_path.glob("simharness-*")), "temporary files left behind"


def test_stuck_rank_is_named_with_its_stack_within_the_grace(tmp_path):
    # --timeout 300 is never reached: the rank is named by the grace (its message says so).
    res, out = _broken(tmp_path, "hang", "--grace", "1", "--timeout", "300")
    assert res.returncode == 3, res.stderr
    (line,) = error_lines(res.stderr)
    assert "rank 1 was still running 1 s after every other rank had finished: it was in " \
        in line, line
    assert f"broken_job.py:{line_of('broken_job.py', 'time.sleep')} wait_for_peer" in line
    assert json.loads(out.read_text())["records"][1]["status"] == "timeout"


def test_compute_on_a_cuda_tensor_or_a_gpu_call_stops_the_rank_naming_its_line(tmp_path):
    # Both ranks put a tensor on "cuda" and all_reduce it (data movement); then rank 0
    # multiplies it (compute) and rank 1 asks for a CUDA graph.
    res, out = _broken(tmp_path, "cuda")
    assert res.returncode == 3, res.stderr
    (line,) = error_lines(res.stderr)
    at = f"broken_job.py:{line_of('broken_job.py', 'y = x * 2')}"
    assert line.startswith("error: rank 0 stopped after 1 new_group call(s): needs a real GPU: "
                           "torch.Tensor.mul on a CUDA tensor at ") and f"{at} (" in line, line
    assert line.endswith(f"1 more rank(s) failed; 0 of 2 ranks completed; the partial capture "
                         f"is in {out}"), line
    saved = Capture.from_dict(json.loads(out.read_text()))
    for r in (0, 1):  # what each rank recorded before it stopped is kept
        assert saved.records[r].status == "failed" and saved.calls(r)
        assert saved.records[r].error["kind"] == "gpu-only"
    stream = f"broken_job.py:{line_of('broken_job.py', 'CUDAGraph()')}"
    assert "needs a real GPU: torch.cuda.CUDAGraph at " in saved.records[1].error["message"]
    assert stream in saved.records[1].error["message"]


def test_sigterm_saves_the_partial_capture_and_leaves_nothing(tmp_path):
    out = tmp_path / "cap.json"
    env = {**os.environ, "BROKEN": "hang", "TMPDIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import cli; cli.main()", "capture", "-n", "2", "--grace",
         "100", "--timeout", "200", "--out", str(out), "--", "python",
         str(SCRIPTS / "broken_job.py")], stderr=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=env)
    stderr = _terminate_when_waiting(proc)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    (line,) = error_lines(stderr)
    assert "interrupted by SIGTERM" in line and str(out) in line
    saved = Capture.from_dict(json.loads(out.read_text()))
    assert saved.records[0].status == "ok"
    assert saved.records[1].status == "stopped" and saved.calls(1)  # what it had recorded
    assert not list(tmp_path.glob("simharness-*")), "temporary files left behind"
    time.sleep(0.5)
    # this run's ranks only (their environment names this test's TMPDIR): other tests may run
    # broken_job.py at the same time under xdist
    left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, "broken_job.py")
            and _environ_has(p, f"TMPDIR={tmp_path}")]
    assert not left, f"rank processes left running: {left}"


def _terminate_when_waiting(proc):
    """SIGTERM ``proc`` once its last rank says it waits (rank 0 has finished by then)."""
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "rank 1 waits" in line:
                time.sleep(1.0)  # rank 0's record is written just after its last call
                proc.send_signal(signal.SIGTERM)
                break
        rest, _ = proc.communicate(timeout=60)[::-1]
    finally:
        if proc.poll() is None:
            proc.kill()
    return "".join(lines) + (rest or "")


def test_fast_mode_sigterm_keeps_the_partial_capture(tmp_path):
    out = tmp_path / "cap.json"
    env = {**os.environ, "BROKEN": "hang", "TMPDIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import cli; cli.main()", "capture", "-n", "2", "--fast",
         "--jobs", "2", "--timeout", "200", "--out", str(out), "--", "python",
         str(SCRIPTS / "broken_job.py")], stderr=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=env)
    stderr = _terminate_when_waiting(proc)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    saved = Capture.from_dict(json.loads(out.read_text()))
    assert saved.records[0].status == "ok" and saved.records[1].status == "stopped"
    assert not list(tmp_path.glob("simharness-*")), "temporary files left behind"


def test_fast_mode_sees_import_time_rank_and_crosschecks_hash_order(tmp_path):
    out = tmp_path / "cap.json"
    res = run_cli(["capture", "-n", "2", "--fast", "-f", "json", "--out", str(out), "--",
                   "python", str(SCRIPTS / "fast_job.py")], env={"SETS": "1"})
    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)  # the script's prints are not in it ...
    assert "[rank1]:hello from rank 1" in res.stderr  # ... they are on stderr, prefixed
    saved = Capture.from_dict(json.loads(out.read_text()))
    assert sorted(c.group for c in saved.groups() if c.desc == "SELF") == [(0,), (1,)]
    # Both ranks run in the parent's forked workers (one hash seed): the same order; each
    # alone in its own interpreter: another order, named.
    differs = [f for f in report["findings"] if f["code"] == "capture-fast-differs"]
    assert [f["severity"] for f in differs] == ["error", "error"], report["meta"]["crosscheck"]
    line = line_of("fast_job.py", "group_desc=name)")
    assert f"fast_job.py:{line} <module>" in differs[0]["message"]


def _cmdline_has(pid, text):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return text.encode() in fh.read()
    except OSError:
        return False


def _environ_has(pid, entry):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return entry.encode() in fh.read().split(b"\0")
    except OSError:
        return False


# ------------------------------------------------------------------- bad input
@pytest.mark.parametrize("args,expect", [
    (["-n", "2", "--", "python", "/nonexistent/init.py"], "cannot read the script"),
    (["-n", "0", "--", "python", "x.py"], "-n"),
    (["-n", "2", "--getter", "nosuchmod_xyz:f", "--", "python", "SCRIPT"], "no module"),
    (["-n", "2", "--out", "/proc/nope/cap.json", "--", "python", "SCRIPT"], "--out"),
    (["-n", "2", "--ranks", "0", "--", "python", "SCRIPT"], "--fast"),
    (["--merge", "EMPTY"], "no rank records"),
])
def test_bad_input_is_one_error_line_before_any_rank_runs(tmp_path, args, expect):
    script = tmp_path / "init.py"
    script.write_text("raise SystemExit('must not run')\n")
    (tmp_path / "empty").mkdir()
    args = [str(script) if a == "SCRIPT" else str(tmp_path / "empty") if a == "EMPTY" else a
            for a in args]
    res = CliRunner().invoke(cli(), ["capture", "--out", str(tmp_path / "c.json"), *args]
                             if "--out" not in args else ["capture", *args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and expect in lines[0], res.stderr
    assert not (tmp_path / "c.json").exists()


def test_fast_and_crosscheck_ranks_get_torchruns_environment():
    from simharness.capture.runtime import rank_environment
    from simharness.launch.env import TORCHRUN_VARS, RankEnv

    env = rank_environment(1023, 1024, 8)
    got = RankEnv.from_environ(env)
    assert (got.rank, got.local_rank, got.group_rank, got.group_world_size) == (1023, 7, 127, 128)
    assert set(TORCHRUN_VARS) <= set(env)


def test_not_a_python_script(tmp_path):
    for name, data in (("run.sh", b"#!/bin/sh\necho hi\n"), ("blob.py", b"\x00\xff\xfe\x00")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(CaptureError, match="not a Python script"):
            parse_command(["python", str(tmp_path / name)])


def test_a_world_that_does_not_fit_is_refused_up_front(tmp_path, monkeypatch):
    from simharness.capture import faithful

    monkeypatch.setattr(faithful, "available_memory_mb", lambda: 1000)
    script = tmp_path / "init.py"
    script.write_text("raise SystemExit('must not run')\n")
    res = CliRunner().invoke(cli(), ["capture", "-n", "64", "--out", str(tmp_path / "c.json"),
                                     "--", "python", str(script)])
    assert res.exit_code == 2
    (line,) = res.stderr.splitlines()
    assert "64 ranks needs about 16640 MB" in line and "1000 MB are available" in line
    assert "largest world that fits is 3 ranks" in line


# ----------------------------------------------------------------------- merge
def _call(ranks, desc="PAIR"):
    return GroupCall(tuple(ranks), desc, None, False, None, None, ("init.py:3 <module>",))


def test_merge_checks_missing_duplicate_and_corrupt_records(tmp_path):
    d = str(tmp_path)
    for r in range(3):
        write_record(d, rank_record(r, 4, "ok", [_call([0, 1])]))
    with pytest.raises(CaptureError, match=r"1 of 4 rank records are missing \(ranks 3\)"):
        merge_records(d, complete=True)
    write_record(d, rank_record(3, 4, "ok", [_call([0, 1])]))
    assert merge_records(d, complete=True).ok_ranks == [0, 1, 2, 3]
    (tmp_path / "rank-3.json").write_text((tmp_path / record_name(3)).read_text())
    with pytest.raises(CaptureError, match="rank 3 has two records"):
        merge_records(d, complete=True)
    (tmp_path / "rank-3.json").unlink()
    (tmp_path / record_name(2)).write_text('{"schema": "simharness.capture-rank/1", "ra')
    with pytest.raises(CaptureError, match="rank-00002.json: corrupt rank record"):
        merge_records(d, complete=True)
    res = CliRunner().invoke(cli(), ["capture", "--merge", d, "--out",
                                     str(tmp_path / "c.json")])
    assert res.exit_code == 2 and res.stderr.startswith("error: ") \
        and len(res.stderr.splitlines()) == 1


def _two_agents(out_dirs, *extra, env_extra=None):
    """Two torchrun agents on loopback (``--nnodes 2``), one rank each, agent i writing into
    ``out_dirs[i]``; returns their (stdout, stderr) after both exit 0."""
    from simharness.launch.launcher import free_port

    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]), **(env_extra or {})}
    env.pop("PYTHONHASHSEED", None)
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node",
         "1", "--node-rank", str(i), "--rdzv-backend", "c10d", "--rdzv-endpoint",
         f"127.0.0.1:{port}", "--rdzv-id", "capture-test", "--local-addr", "127.0.0.1",
         "-m", "simharness.capture.rank", "--out-dir", str(out_dirs[i]), *extra, "--",
         str(SCRIPTS / "broken_job.py")], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [a.communicate(timeout=150) for a in agents]
    assert [a.returncode for a in agents] == [0, 0], outs
    return outs


def _merged(rec):
    out = rec.parent / "cap.json"
    res = CliRunner().invoke(cli(), ["capture", "--merge", str(rec), "--out", str(out),
                                     "-f", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["meta"]["records"] == 2
    saved = Capture.from_dict(json.loads(out.read_text()))
    assert saved.ok_ranks == [0, 1] and [c.group for c in saved.calls(1)] == [(0, 1)]
    return saved


def test_two_torchrun_agents_on_loopback_then_merge(tmp_path):
    """``--nnodes 2``: two agents, one rank each, records in a shared folder, then merged."""
    rec = tmp_path / "records"
    _two_agents([rec, rec])
    _merged(rec)


def test_two_torchrun_agents_hand_their_records_to_rank_0_through_the_store(tmp_path):
    """``--via-store``: each agent has a folder of its own; the records travel through
    torchrun's c10d store, and only rank 0's folder gets them, with the merged capture."""
    dirs = [tmp_path / "node0", tmp_path / "node1"]
    outs = _two_agents(dirs, "--via-store", "--store-wait", "60",
                       env_extra={"ATEXIT_DIR": str(tmp_path)})
    # the ranks end by os._exit after their record, but the script's atexit handlers ran
    assert sorted(p.name for p in tmp_path.glob("atexit-*")) == ["atexit-0", "atexit-1"]
    full = [d for d in dirs if (d / "capture.json").exists()]
    assert len(full) == 1, outs                       # rank 0's node, whichever it was
    other = dirs[1 - dirs.index(full[0])]
    assert not other.exists() or not list(other.glob("rank-*.json"))
    assert sorted(p.name for p in full[0].glob("rank-*.json")) == [
        "rank-00000.json", "rank-00001.json"]
    direct = Capture.from_dict(json.loads((full[0] / "capture.json").read_text()))
    assert direct.ok_ranks == [0, 1] and direct.meta["route"] == "c10d-store"
    assert _merged(full[0]).sequences == direct.sequences


# ------------------------------------------------------------- replay-data --capture
def test_replay_data_replays_the_captured_groups(tmp_path):
    """Megatron 0.16's own init captured, then the all-gather groups of the file misaligned
    by hand (as #4261 misaligns them): the data path on the captured groups names it."""
    from support import megatron_harness as H

    from simharness.capture.inprocess import capture

    ps = H.load_parallel_state_016()
    cap = capture(lambda: ps.initialize_model_parallel(tensor_model_parallel_size=2,
                                                       create_all_gather_group=True), 4,
                  timeout=60)
    data = json.loads(cap.to_json())  # (the model's own groups match: tests/*/test_datapath*)
    for seq in data["sequences"]:
        for call in seq:
            if call["desc"] == "DATA_PARALLEL_GROUP_WITH_CP_AG":  # [0, 2], [1, 3] -> swapped
                call["ranks"] = {(0, 2): [0, 3], (1, 3): [1, 2]}[tuple(call["ranks"])]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    args = ["replay-data", "-n", "4", "--tp", "2", "--create-all-gather-group", "--mcore",
            "0.16", "--steps", "1", "-f", "json", "--capture"]
    res = CliRunner().invoke(cli(), [*args, str(bad)])
    assert res.exit_code == 1, res.output
    report = json.loads(res.stdout)
    assert report["capture"]["file"] == str(bad)
    msgs = " ".join(f["message"] for f in report["findings"])
    assert "but it came from rank" in msgs, msgs
