"""The installed console script, run as a real process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT


def _script() -> str | None:
    local = Path(sys.executable).parent / "simharness"
    return str(local) if local.exists() else shutil.which("simharness")


SCRIPT = _script()
pytestmark = pytest.mark.skipif(SCRIPT is None, reason="console script not installed")


def sh(*args, **kw):
    env = {**os.environ, "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    return subprocess.run([SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=120,
                          env=env, **kw)


def test_console_script_inspect_rank():
    p = sh("inspect", "-n", "16", "--tp", "2", "--pp", "2", "--cp", "2", "--rank", "5")
    assert p.returncode == 0, p.stderr
    assert "rank 5 of 16" in p.stdout and "\x1b[" not in p.stdout  # pipe: no colour


def test_console_script_bad_input_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tensor_model_parallel_size: [2\n")
    for args in (["inspect", "--config", bad], ["inspect", "-n", "12", "--tp", "8"],
                 ["inspect", "-n", "16", "--rank", "99"], ["check", "--tp", "x"]):
        p = sh(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stderr.startswith("error: ") and len(p.stderr.splitlines()) == 1, p.stderr
        assert "Traceback" not in p.stderr


def test_console_script_closed_pipe_is_quiet():
    p1 = subprocess.Popen([SCRIPT, "export", "-n", "4096", "--tp", "8", "-f", "csv"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p1.stdout.readline()
    p1.stdout.close()
    _, err = p1.communicate(timeout=120)
    assert first.startswith(b"rank,kind")
    assert b"Traceback" not in err and p1.returncode in (0, 1, 2, 141, -13)
    assert b"Traceback" not in err


def test_python_dash_m_cli_works():
    p = subprocess.run([sys.executable, "-c", "import cli; cli.main()", "version", "-q"],
                       capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert p.returncode == 0 and p.stdout.strip()
