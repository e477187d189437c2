"""A lazily connected NCCL-style subgroup (``run``'s default) used again and again, as a
training step uses its data-parallel group (tests/fixtures/run/coalesced_repeat.py): the
coalesced reduce-scatter and all-gather of Megatron's distributed optimizer, and the plain
ones, 400 times each on 2 ranks, and two buckets in one coalescing manager, every result
checked. A call on the group that reaches gloo holding the GIL deadlocks with a gloo worker
releasing a finished work at a random step (simharness/launch/lazy_group.py, module doc);
with the coalesced calls sent through ``ProcessGroup``'s own methods, each run of this file
leaves one or both coalesced tests hung."""

from __future__ import annotations

import os
import subprocess
import sys

from support.paths import ROOT

FIXTURE = "tests/fixtures/run/coalesced_repeat.py"


def test_collectives_repeated_on_a_lazy_group_all_finish():
    env = dict(os.environ, SIMHARNESS_LAZY_GROUPS="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "cli.py", "run", "-n", "2", "--timeout", "30",
                          "--", "pytest", "-q", "-p", "no:randomly", FIXTURE],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "4 passed, 0 failed, 0 skipped, 0 hung" in text, text
