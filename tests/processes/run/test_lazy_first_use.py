"""A lazily connected NCCL-style subgroup (``run``'s default) computes right when its
first use is a collective that torch dispatches on the group object by the tensors'
device (tests/fixtures/run/first_use_collectives.py), with the connection at creation
(``SIMHARNESS_LAZY_GROUPS=0``) as the reference; plain and inside the coalescing manager."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.paths import ROOT

FIXTURE = "tests/fixtures/run/first_use_collectives.py"


@pytest.mark.parametrize("lazy", ["1", "0"], ids=["lazy", "at-creation"])
def test_collectives_dispatched_on_the_group_work_as_its_first_use(lazy):
    env = dict(os.environ, SIMHARNESS_LAZY_GROUPS=lazy)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "cli.py", "run", "-n", "2", "--timeout", "60",
                          "--", "pytest", "-q", "-p", "no:randomly", FIXTURE],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "6 passed, 0 failed" in out.stdout + out.stderr, out.stdout + out.stderr
