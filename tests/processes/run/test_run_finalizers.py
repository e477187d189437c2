"""A finalizer that makes a collective runs on every rank at the same point: each test's
garbage is collected when the test ends, on every rank (tests/fixtures/run/
finalizer_collective.py). Left to each rank's own collector, it runs where one rank
happens to collect, in the middle of a later test, and that test hangs."""

from __future__ import annotations

import os
import subprocess
import sys

from support.paths import ROOT

FIXTURE = "tests/fixtures/run/finalizer_collective.py"


def test_a_finalizer_s_collective_does_not_hang_a_later_test():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "cli.py", "run", "-n", "2", "--timeout", "20",
                          "--", "pytest", "-q", "-p", "no:randomly", FIXTURE],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    text = out.stdout + out.stderr
    assert "1 passed, 1 failed, 0 skipped, 0 hung" in text, text
    assert "PASSED" in text and "test_one_rank_collects_before_an_all_reduce" in text, text
