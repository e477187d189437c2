"""simharness.testing: ``@pytest.mark.world_size`` tests, with the real megatron-core 0.16.1.

The example: the test the NeMo ``create_all_gather_group`` change needed. With the option on,
the all-gather group exists, has the data-parallel-with-context-parallel ranks and is a
communicator of its own; with it off, there is no such group and the all-gather runs on the
DP-with-CP group itself. The body runs on 4 CPU ranks (tp 1, cp 2, dp 2); both settings in
one test, so Megatron is imported once per rank.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.launch
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.world_size(4, context_parallel_size=2, create_all_gather_group=True, timeout=240)
def test_create_all_gather_group(rank, world, parallel_config, layout):
    ps = pytest.importorskip("megatron.core.parallel_state")
    import torch.distributed as dist

    assert world == 4 and parallel_config.create_all_gather_group
    planned = sorted(int(r) for r in layout.expected.rank(rank).groups["dp_cp"].ranks)
    assert planned == [0, 1, 2, 3]

    ps.initialize_model_parallel(context_parallel_size=2, create_all_gather_group=True)
    dp_cp = ps.get_data_parallel_group(with_context_parallel=True)
    ag = ps.get_data_parallel_group(with_context_parallel=True, independent_all_gather=True)
    assert ps.has_separate_all_gather_group()
    assert dist.get_process_group_ranks(ag) == dist.get_process_group_ranks(dp_cp) == planned
    assert ag is not dp_cp and ag.group_name != dp_cp.group_name
    layout.verify()  # every group and the all-gather resolution, as simharness plans them
    ps.destroy_model_parallel()

    ps.initialize_model_parallel(context_parallel_size=2, create_all_gather_group=False)
    assert not ps.has_separate_all_gather_group()
    with pytest.raises(AssertionError):
        ps.get_data_parallel_group(with_context_parallel=True, independent_all_gather=True)
    layout.replace(create_all_gather_group=False).verify()  # all-gather on the dp_cp group
    ps.destroy_model_parallel()


def test_world_size_verdicts_reach_the_test_process():
    """A world_size test that fails on rank 1 only fails with rank 1's message; one that
    passes on both ranks passes (examples/run/world_size_cases.py, run by pytest)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                          "-p", "no:cacheprovider", "examples/run/world_size_cases.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 failed, 1 passed" in out.stdout, out.stdout
    assert "failed on rank 1 of 2 (failing ranks [1])" in out.stdout
    assert "rank 1 says no" in out.stdout
