"""Capture on the scripts people have today: how they end, the groups they add, the bugs they
hang on, the processes they start, and output paths refused up front.

Scripts are under tests/fixtures/capture/. The expectations come from what a torchrun job of
the same script does: a script ending with ``destroy_process_group`` ran clean; a rank that
leaves with ``os._exit`` made the calls it made; ranks whose ``new_group`` calls differ and
then use their groups never finish (torch pairs ``new_group`` calls by position).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from support.paths import ROOT

from simharness.capture import Capture

SCRIPTS = ROOT / "tests" / "fixtures" / "capture"
FAST = ("--fast", "--no-crosscheck")


def run_cli(args, *, env=None, timeout=240):
    """The CLI in a real process (faithful ranks need real stdio and signals)."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    return subprocess.run([sys.executable, "-c", "import cli; cli.main()", *args],
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def capture(tmp_path, script, world, *extra, env=None, args=()):
    out = tmp_path / "cap.json"
    t0 = time.monotonic()
    res = run_cli(["capture", "-n", str(world), "--out", str(out), *extra, "--", "python",
                   str(SCRIPTS / script), *args], env={"TMPDIR": str(tmp_path), **(env or {})})
    return res, Capture.from_dict(json.loads(out.read_text())), time.monotonic() - t0


def text(res):
    return " ".join(res.stdout.split())


# ------------------------------------------------------------ how scripts end
@pytest.mark.parametrize("mode", [(), FAST], ids=["faithful", "fast"])
@pytest.mark.parametrize("end", ["destroy", "atexit", "exit0"])
def test_a_clean_script_is_clean_however_it_ends(tmp_path, mode, end):
    res, cap, _ = capture(tmp_path, "clean_end.py", 2, *mode, env={"END": end})
    assert res.returncode == 0, res.stderr
    assert "captured 2 of 2 ranks" in text(res) and "0 errors, 0 warnings" in text(res)
    for r in (0, 1):  # rank 1 of exit0 left by os._exit(0): its record was written first
        assert cap.records[r].status == "ok" and [c.group for c in cap.calls(r)] == [(0, 1)]


@pytest.mark.parametrize("mode", [(), FAST], ids=["faithful", "fast"])
def test_os_exit_with_a_failure_status_is_that_ranks_failure(tmp_path, mode):
    res, cap, _ = capture(tmp_path, "clean_end.py", 2, *mode, env={"END": "exit1"})
    assert res.returncode == 3, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert "rank 1 failed" in line and "the code ended the process with os._exit(1)" in line
    assert cap.records[1].status == "failed" and cap.calls(1)  # its calls are kept


def test_a_rank_gone_without_its_record_is_reported_lost_not_ok(tmp_path):
    # posix._exit(0) passes by the os._exit hook: the rank is lost, and said to be
    res, cap, _ = capture(tmp_path, "clean_end.py", 2, env={"END": "posix_exit"})
    assert res.returncode == 3, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert "the process of rank 1 ended (exit status 0) without writing its record" in line
    assert "1 of 2 ranks completed" in line
    assert cap.records[1].status == "failed" and cap.records[1].error["kind"] == "died"


# ------------------------------------------------ groups of the script's own
def test_groups_of_the_scripts_own_beside_megatrons_are_named_not_errors(tmp_path):
    pytest.importorskip("megatron.core")
    res, _, _ = capture(tmp_path, "megatron_own_groups.py", 4, *FAST, "--tp", "2", "--mcore",
                        "0.16", "-f", "json", args=("--tp", "2"))
    assert res.returncode == 0, res.stdout + res.stderr
    findings = json.loads(res.stdout)["findings"]
    assert [f for f in findings if f["severity"] != "info"] == [], findings
    vs = [f["message"] for f in findings if f["code"] == "capture-vs-config"]
    assert vs[0].startswith("the captured code makes the 47 new_group calls "
                            "build_layout(config) predicts (mcore 0.16), call for call")
    assert "besides 5 new_group call(s) of its own" in vs[0]   # LOGGING, 2 mesh_dp, 2 mesh_tp
    line = next(i for i, ln in enumerate((SCRIPTS / "megatron_own_groups.py").read_text()
                                         .splitlines(), 1) if "LOGGING" in ln)
    assert any(m.startswith("the code creates 1 LOGGING group(s) (at ") and
               f"megatron_own_groups.py:{line} <module>" in m for m in vs), vs
    assert not [f for f in findings if f["code"] == "matches-config"]


# ------------------------------------------------ bugs that hang a real job
def line_of(script, needle):
    return next(i for i, ln in enumerate((SCRIPTS / script).read_text().splitlines(), 1)
                if needle in ln)


@pytest.mark.parametrize("how", ["order", "some"])
def test_ranks_blocked_on_diverging_calls_are_named_within_seconds(tmp_path, how):
    # Faithful mode: the ranks run the script for real, block in all_reduce/barrier, and the
    # capture compares what they recorded instead of waiting for --timeout (120 s).
    res, cap, elapsed = capture(tmp_path, "order_hang.py", 4, env={"HOW": how})
    assert elapsed < 30, f"named after {elapsed:.0f} s"
    assert res.returncode == 1, res.stderr   # an error finding, not a timeout
    out = text(res)
    site = f"order_hang.py:{line_of('order_hang.py', 'dist.new_group(SPECS[name]')}"
    if how == "order":
        assert ("capture-divergence: rank 2 creates its groups in a different order from "
                "rank 0: collective new_group call 0 is ALL [0, 1, 2, 3] at") in out, out
        assert "but PAIR [0, 1] at" in out and "ranks 2-3; groups ALL, PAIR" in out
    else:
        assert ("capture-missing-call: rank 3 never makes collective new_group call 0 "
                "(LOGGING [0, 1, 2, 3] at") in out, out
        assert "ranks 3; groups LOGGING" in out
    assert out.count(site) >= 2, out   # the call sites, on both sides
    assert "waited for each other in torch.distributed" in out
    assert all(cap.records[r].status in ("timeout", "stopped", "failed") for r in range(4))
    assert "did not finish within" not in res.stderr


@pytest.mark.parametrize("how", ["order", "some"])
def test_via_store_names_the_divergence_within_seconds_too(tmp_path, how):
    # The rank entry under torchrun with --via-store (no shared folder): the blocked ranks
    # post their partial records on the job's store, stop within the grace, and rank 0
    # gathers every record and the merged capture, whose findings name the divergence.
    from simharness.launch.launcher import free_port

    out_dir = tmp_path / "node0"
    env = {**os.environ, "HOW": how, "TMPDIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTHONHASHSEED", None)
    t0 = time.monotonic()
    job = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
         "4", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
         "--local-addr", "127.0.0.1", "-m", "simharness.capture.rank", "--out-dir",
         str(out_dir), "--via-store", "--store-wait", "60", "--timeout", "120", "--",
         str(SCRIPTS / "order_hang.py")], env=env, capture_output=True, text=True, timeout=240)
    elapsed = time.monotonic() - t0
    assert elapsed < 30, f"named after {elapsed:.0f} s: {job.stderr[-2000:]}"
    assert job.returncode != 0   # the ranks were stopped, as a real job would hang
    assert sorted(p.name for p in out_dir.glob("rank-*.json")) == [
        f"rank-0000{r}.json" for r in range(4)], job.stderr[-2000:]
    assert not list(out_dir.glob("partial-*"))   # partial records stay on the store
    res = run_cli(["capture", "--merge", str(out_dir), "--out", str(tmp_path / "cap.json")])
    assert res.returncode == 1, res.stdout + res.stderr
    out = text(res)
    if how == "order":
        assert ("capture-divergence: rank 2 creates its groups in a different order from "
                "rank 0: collective new_group call 0 is ALL [0, 1, 2, 3] at") in out, out
    else:
        assert ("capture-missing-call: rank 3 never makes collective new_group call 0 "
                "(LOGGING [0, 1, 2, 3] at") in out, out
    assert "waited for each other in torch.distributed" in out
    cap = Capture.from_dict(json.loads((out_dir / "capture.json").read_text()))
    assert cap.meta["route"] == "c10d-store"
    assert all(cap.records[r].status in ("timeout", "stopped") for r in range(4))


@pytest.mark.parametrize("how", ["order", "some"])
def test_fast_names_the_same_bugs_in_a_gpu_style_script(tmp_path, how):
    # torch.cuda.set_device is a no-op under --fast, recorded as ignored
    res, cap, _ = capture(tmp_path, "order_hang.py", 4, *FAST, env={"HOW": how})
    assert res.returncode == 1, res.stderr
    code = "capture-divergence" if how == "order" else "capture-missing-call"
    assert f"x {code}: rank " in res.stdout
    (ignored,) = cap.records[2].init["ignored"]
    assert ignored["call"] == "torch.cuda.set_device(2)"
    at = line_of("order_hang.py", "torch.cuda.set_device(int")
    assert ignored["site"].endswith(f"order_hang.py:{at} <module>")


# ------------------------------------------------ groups created by their members only
@pytest.mark.parametrize("how,who", [("pairs", "0-1 and 3 more such group(s)"), ("one", "0-1")])
def test_members_only_creation_states_the_rule_and_the_fix(tmp_path, how, who):
    res, _, _ = capture(tmp_path, "members_only.py", 8, *FAST, env={"HOW": how})
    assert res.returncode == 1, res.stderr
    out = text(res)
    at = line_of("members_only.py", "dist.new_group(mine")
    assert (f"capture-members-only: MY_PAIRS [0, 1] (at members_only.py:{at} <module>)"
            in out.replace("tests/fixtures/capture/", "")), out
    assert f"is created only by its member(s) {who}" in out
    assert "torch requires every rank of the job to call new_group for such a group" in out
    assert ("pass use_local_synchronization=True (then only the members call it), or call "
            "new_group for every group on every rank") in out
    assert "in no group" not in out   # not a partition gap


# ------------------------------------------------ processes a rank started
def _processes_with(entry):
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as fh:
                if entry.encode() in fh.read().split(b"\0"):
                    found.append(int(p))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("mode", [(), FAST], ids=["faithful", "fast"])
def test_processes_a_rank_started_end_with_it(tmp_path, mode):
    mark = tmp_path / "child"
    res, cap, _ = capture(tmp_path, "clean_end.py", 2, *mode,
                          env={"END": "child", "CHILD_MARK": str(mark)})
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.glob("child-*")) == ["child-0", "child-1"]
    time.sleep(0.5)
    left = _processes_with(f"CHILD_MARK={mark}")
    for pid in left:  # do not leave them to the next test, then fail
        os.kill(pid, 9)
    assert not left, f"processes the ranks started are still running: {left}"


# ------------------------------------------- collectives on the lazily connected groups
def test_a_coalesced_first_use_of_a_subgroup_computes_and_is_clean(tmp_path):
    # A faithful rank's subgroups connect on first use (simharness.launch.lazy_group); here
    # the first use of each is a coalesced reduce-scatter or all-gather, 50 steps, each
    # result checked by the script (a wrong one is a failed rank, exit 3).
    res, cap, _ = capture(tmp_path, "coalesced_first_use.py", 2)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "captured 2 of 2 ranks" in text(res) and "0 errors, 0 warnings" in text(res)
    for r in (0, 1):
        assert cap.records[r].status == "ok"
        assert [c.desc for c in cap.calls(r)] == ["GRADS", "PARAMS"]


# --------------------------------------------------------------- bad input
@pytest.mark.parametrize("mode", [(), FAST], ids=["faithful", "fast"])
def test_an_output_path_that_cannot_be_written_is_refused_before_any_rank(tmp_path, mode):
    import cli

    res = CliRunner().invoke(cli.main, ["capture", "-n", "2", *mode, "--out", "/proc/x.json",
                                        "--", "python", str(SCRIPTS / "clean_end.py")],
                             env={"END": "child", "CHILD_MARK": str(tmp_path / "ran")})
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.splitlines()
    assert line.startswith("error: --out /proc/x.json: not writable")
    assert not list(tmp_path.glob("ran-*"))   # no rank ran


def test_help_states_the_exit_status_the_code_returns():
    import cli

    res = CliRunner().invoke(cli.main, ["capture", "--help"])
    help_text = " ".join(res.output.split())
    assert "3 when the script fails, hangs or needs a real GPU on a rank" in help_text
    assert "2 on bad input, refused before any rank starts" in help_text
    assert "2 when the script fails" not in help_text
