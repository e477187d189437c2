"""The core never imports torch.distributed (design: only simharness.replay does)."""

import subprocess
import sys

import pytest

CORE_WORK = """
import sys
import simharness
from simharness import ParallelismConfig, build_layout, check
from simharness.topology import load_cluster
lay = build_layout(ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
                                     pipeline_model_parallel_size=2, context_parallel_size=2,
                                     create_all_gather_group=True))
check(lay)
lay.rank(5)
simharness.Layout.from_json(lay.to_json())
import simharness.replay  # the package itself imports torch lazily
import simharness.capture  # so does capture: records and checks are pure
simharness.capture.Capture.from_dict(simharness.capture.Capture(2, (0, 1), (), {}).to_dict())
assert callable(simharness.capture)
import simharness.getters, simharness.planfile  # pure tables/files the replay uses
import simharness.mcore, simharness.creation_log  # installed version, log comparison
simharness.mcore.profile_for_version(simharness.mcore.installed_version() or '0.19')
simharness.getters.megatron_getters('0.19')
leaked = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print(",".join(leaked))
"""


def test_core_and_topology_do_not_import_torch():
    pytest.importorskip("simharness.topology")
    out = subprocess.run([sys.executable, "-c", CORE_WORK], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"torch modules imported by the core: {out.stdout}"


def test_cli_inspect_does_not_import_torch_distributed():
    code = ("import sys\nfrom click.testing import CliRunner\nimport cli\n"
            "r = CliRunner().invoke(cli.main, ['check', '-n', '16', '--tp', '2'])\n"
            "assert r.exit_code == 0, r.output\n"
            "print('torch.distributed' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
