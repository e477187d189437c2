"""A parity tier that cannot run skips with its reason, and fails under
SIMHARNESS_REQUIRE_PARITY=1 (what CI sets, after fetching the pinned wheels).

Simulated in a child pytest: an empty wheel cache with downloads off (0.17-0.19)
and a ``megatron`` package without ``core`` ahead on the path (the installed 0.16.1).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.paths import ROOT

# Tests of every tier: 0.16.1 installed (module level), 0.17.1 to 0.19.2 (fixtures).
FILES = ["tests/parity/test_parity_megatron.py", "tests/parity/test_profile_018_parity.py",
         "tests/parity/test_profile_019_parity.py"]
SELECTED = ("test_all_gather_getter_raises_exactly_when_simharness_does or "
            "test_megatron_018_ag_differs_from_dp_cp_with_tp_pp_dp_order or "
            "test_profile_api_matches_megatron or test_019_rejects_016_keyword")


def _child_pytest(tmp_path, require: bool):
    fake = tmp_path / "fake"
    (fake / "megatron").mkdir(parents=True, exist_ok=True)
    (fake / "megatron" / "__init__.py").write_text("")  # no megatron.core
    env = {**os.environ, "SIMHARNESS_NO_DOWNLOAD": "1",
           "SIMHARNESS_MCORE_CACHE": str(tmp_path / "empty-cache"),
           "PYTHONPATH": os.pathsep.join([str(fake), str(ROOT)])}
    env.pop("SIMHARNESS_REQUIRE_PARITY", None)
    if require:
        env["SIMHARNESS_REQUIRE_PARITY"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsEf", "-p",
                           "no:cacheprovider", "-p", "no:randomly", "-o", "addopts=",
                           "--continue-on-collection-errors", "-k", SELECTED, *FILES],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("require", [False, True], ids=["default-skips", "required-fails"])
def test_unavailable_parity_skips_or_fails(tmp_path, require):
    p = _child_pytest(tmp_path, require)
    out = p.stdout + p.stderr
    if require:
        assert p.returncode != 0, out
        assert "skipped" not in out.splitlines()[-1], out
        assert out.count("SIMHARNESS_REQUIRE_PARITY=1: the parity tests must run") >= 3, out
        for version in ("0.17.1", "0.18.2", "0.19.2"):
            assert f"megatron-core {version} not available" in out, out
        assert "megatron-core 0.16.1 is a test dependency" in out, out
    else:
        assert p.returncode == 0, out
        last = out.strip().splitlines()[-1]
        assert "skipped" in last and "passed" not in last and "failed" not in last, out
        assert "SKIPPED" in out and "megatron-core 0.19.2 not available" in out, out
