"""Replay faults: a rank that dies, a rank that never arrives, Ctrl-C. No process is left."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from test_replay_gloo import DEADLINE, alive, assert_no_leftovers

from simharness import ParallelismConfig, build_layout
from simharness.replay import ReplayOptions, replay, summary_lines

pytestmark = pytest.mark.replay


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
    timeout = 10.0
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
    """The CLI as a user starts it: SIGINT neither blocked nor ignored. A test run earlier in
    the same xdist worker may leave either inherited (seen in the full suite only: the CLI
    then never got the SIGINT and this test timed out); not root-caused."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_every_rank():
    cmd = [sys.executable, "-m", "cli", "replay", "-n", "4", "--tp", "2", "--overlap-bytes", "0",
           "--timeout", "120", "--inject-fault", "1:hang@verify"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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
        out, err = p.communicate(timeout=60)
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
