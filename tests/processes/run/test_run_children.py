"""``simharness run`` ends the processes a rank's tests started and left running
(tests/fixtures/run/leaves_children.py), at the end of a rank's session and when the
watchdog ends a rank whose test hung: none outlives the run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from support.paths import ROOT

FIXTURE = "tests/fixtures/run/leaves_children.py"
KINDS = ("worker", "session", "daemon", "hang")


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


def test_processes_a_rank_started_do_not_outlive_the_run(tmp_path):
    marker = str(tmp_path / "pids")
    os.makedirs(marker)
    env = dict(os.environ, LEFT_CHILDREN_DIR=marker)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "cli.py", "run", "-n", "2", "--timeout", "15",
                          "--", "pytest", "-q", "-p", "no:randomly", FIXTURE],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    pids = {}
    for name in sorted(os.listdir(marker)):
        with open(os.path.join(marker, name), encoding="ascii") as fh:
            pids[name] = int(fh.read())
    survivors = {name: pid for name, pid in pids.items() if _ours(pid, marker)}
    for pid in survivors.values():  # leave nothing behind, whatever the outcome
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 passed" in out.stdout and "1 hung" in out.stdout, out.stdout
    assert sorted(pids) == sorted(f"{r}-{k}.pid" for r in (0, 1) for k in KINDS), pids
    assert survivors == {}, (survivors, out.stdout + out.stderr)
