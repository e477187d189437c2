"""``simharness run`` ends the processes a rank's tests started and left running
(tests/fixtures/run/leaves_children.py): at the end of a rank's session, when a rank left
with ``os._exit`` (the launcher then stops the others) and when the watchdog ends a rank
whose test hung. None outlives the run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
from support.paths import ROOT

FIXTURE = "tests/fixtures/run/leaves_children.py"
SLEEP_S = 120  # the fixture's processes sleep this long


def _ours(pid: int, marker: str) -> bool:
    """``pid`` is alive (not a zombie) and is one of this test's processes (its
    environment holds ``marker``), not an unrelated process that reused the number."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            if fh.read().rpartition(")")[2].split()[0] == "Z":
                return False
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return marker.encode() in fh.read()
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize("select,code,summary,kinds", [
    ("leaves_them_running", 0, "1 passed, 0 failed",
     [f"{r}-{k}" for r in (0, 1) for k in ("worker", "session", "daemon")]),
    ("dies or hangs", 1, "0 passed, 1 failed, 0 skipped, 1 hung",
     ["0-hang", "1-died", "1-hang"]),
], ids=["session-end", "died-then-hung"])
def test_processes_a_rank_started_do_not_outlive_the_run(tmp_path, select, code, summary,
                                                         kinds):
    marker = str(tmp_path / "pids")
    os.makedirs(marker)
    env = dict(os.environ, LEFT_CHILDREN_DIR=marker)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "cli.py", "run", "-n", "2", "--timeout", "8",
                          "--", "pytest", "-q", "-p", "no:randomly", "-k", select, FIXTURE],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    wall = time.monotonic() - t0
    pids = {}
    for name in sorted(os.listdir(marker)):
        with open(os.path.join(marker, name), encoding="ascii") as fh:
            pids[name.removesuffix(".pid")] = int(fh.read())
    survivors = {name: pid for name, pid in pids.items() if _ours(pid, marker)}
    for pid in survivors.values():  # leave nothing behind, whatever the outcome
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert out.returncode == code, out.stdout + out.stderr
    assert summary in out.stdout, out.stdout
    assert sorted(pids) == sorted(kinds), pids
    assert survivors == {}, (survivors, out.stdout + out.stderr)
    # ended, not waited for (multiprocessing joins a worker at exit)
    assert wall < SLEEP_S / 2, f"{wall:.0f} s"
