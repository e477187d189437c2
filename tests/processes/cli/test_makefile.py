"""The Makefile's torch variables, read from ``make -n``: the default spec from the
configured indexes, and TORCH_INDEX_URL for PyTorch's CPU index."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from support.paths import ROOT


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_makefile_torch_variables(tmp_path):
    def dry(*extra):
        p = subprocess.run(["make", "-n", f"{tmp_path}/v/.base", f"VENV={tmp_path}/v", *extra],
                           cwd=ROOT, capture_output=True, text=True, timeout=30)
        return next(line for line in p.stdout.splitlines() if "torch==" in line)
    default = dry()
    assert "'torch==2.13.0'" in default and "--index-url" not in default
    cpu = dry("TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu")
    assert "--index-url https://download.pytorch.org/whl/cpu 'torch==2.13.0'" in cpu
