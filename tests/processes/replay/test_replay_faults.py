"""Replay faults: a rank that dies, a rank that never arrives, Ctrl-C. No process is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from support.replay import DEADLINE, alive, assert_no_leftovers

from simharness import ParallelismConfig, build_layout
from simharness.replay import ReplayOptions, replay, summary_lines


def layout4():
    return build_layout(ParallelismConfig(world_size=4, tensor_model_parallel_size=2,
                                          context_parallel_size=2), "0.16")


@pytest.mark.parametrize("fault, kind", [("2:exit@verify", "rank_died"),
                                         ("3:exit@create", "rank_died"),
                                         ("1:raise@create", "rank_error")])
def test_rank_that_fails_is_named_within_the_timeout(fault, kind):
    timeout = 60.0
    t0 = time.time()
    rep = replay(layout4(), ReplayOptions(timeout=timeout, overlap_bytes=0, fault=fault),
                 deadline=DEADLINE)
    elapsed = time.time() - t0
    f = rep["failure"]
    rank = int(fault.split(":")[0])
    assert rep["status"] == "failed" and rep["exit_code"] == 3, "\n".join(summary_lines(rep))
    assert f["kind"] == kind and f["rank"] == rank
    assert f"rank {rank}" in f["message"]
    if kind == "rank_died":
        assert f["exit_code"] == 17 and "injected fault" in f["message"]
    else:
        assert "injected fault" in f["error"]
    # Detected when the process ended, well before the collective timeout (60 s).
    assert elapsed - rep["timings"]["helper_start_s"] < 20, elapsed
    assert_no_leftovers(rep)


def test_rank_that_never_arrives_times_out_naming_group_and_ranks():
    timeout = 6.0
    t0 = time.time()
    rep = replay(layout4(), ReplayOptions(timeout=timeout, overlap_bytes=0,
                                          fault="3:hang@verify"), deadline=DEADLINE)
    elapsed = time.time() - t0
    f = rep["failure"]
    assert rep["status"] == "failed", "\n".join(summary_lines(rep))
    assert f["kind"] == "timeout" and f["missing_ranks"] == [3]
    assert f["phase"] == "verify" and 3 in f["group"]["ranks"]
    assert f["group"]["kind"] in {k for k in layout4().kinds}
    assert "did not arrive" in f["message"] and "rank 3" in f["message"]
    assert elapsed < rep["timings"]["helper_start_s"] + timeout + 30
    assert_no_leftovers(rep)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def _sigint_as_at_a_terminal():
    """The CLI as a user starts it: SIGINT neither blocked nor ignored. This test timed out
    twice in full-suite runs (the CLI still running 60 s after the SIGINT). Logging every
    test's SIGINT mask, disposition and environment in two later full runs found no test
    that changes them in the xdist worker (only launch() leaked torch's agent env and
    handlers, now fixed, and those do not survive exec), so this is not known to be the
    cause; on a timeout the test now reports the CLI's signal state and stacks."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _why_still_running(p: subprocess.Popen) -> str:
    """The CLI's signal state from /proc, then its Python stacks (SIGABRT with
    PYTHONFAULTHANDLER=1 makes faulthandler print every thread)."""
    try:
        with open(f"/proc/{p.pid}/status") as fh:
            state = "".join(ln for ln in fh if ln.startswith(("State", "Sig", "Shd")))
    except OSError as exc:
        state = f"(no /proc status: {exc})\n"
    p.send_signal(signal.SIGABRT)
    try:
        _, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    return f"the CLI did not stop within 60 s of the SIGINT\n{state}{err}"


def test_ctrl_c_stops_every_rank():
    cmd = [sys.executable, "-m", "cli", "replay", "-n", "4", "--tp", "2", "--overlap-bytes", "0",
           "--timeout", "120", "--inject-fault", "1:hang@verify"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONFAULTHANDLER": "1"},
                         preexec_fn=_sigint_as_at_a_terminal)
    helper, ranks = None, []
    try:
        t0 = time.time()
        while time.time() - t0 < 120 and len(ranks) < 4:
            kids = _children(p.pid)
            if kids:
                helper = kids[0]
                ranks = _children(helper)
            time.sleep(0.1)
        assert helper and len(ranks) == 4, "the ranks did not start"
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(_why_still_running(p))
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err
    assert "error: aborted" in err
    deadline = time.time() + 10
    while time.time() < deadline and any(alive(x) for x in [helper, *ranks]):
        time.sleep(0.1)
    assert not [x for x in [helper, *ranks] if alive(x)], "ranks left behind after Ctrl-C"
