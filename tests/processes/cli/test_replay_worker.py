"""The replay worker's entry point in a fresh interpreter (``python -m
simharness.replay.worker``): refusals outside torchrun and bad flags as one error line,
and what it imports (never the CLI; importing the CLI never imports torch)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _worker(*args, env=None):
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")} if env is None else env
    return subprocess.run([sys.executable, "-m", "simharness.replay.worker", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_worker_outside_torchrun_is_a_clear_error(tmp_path):
    p = _worker("--plan", str(tmp_path / "plan.json"))
    assert p.returncode == 2
    assert p.stderr.startswith("error: RANK is not set") and p.stderr.count("\n") == 1


@pytest.mark.parametrize("args,message", [
    ((), "the following arguments are required: --plan"),
    (("--plan", "p.json", "-n", "4"), "unrecognized arguments: -n 4"),
    (("--plan", "p.json", "--overlap-bytes", "4X"), "is not a byte count"),
])
def test_worker_bad_flags_are_one_error_line(args, message):
    p = _worker(*args)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("error: ") and message in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1


def test_worker_missing_plan_names_the_file(tmp_path):
    env = {**__import__("os").environ, "RANK": "0", "WORLD_SIZE": "1"}
    p = _worker("--plan", str(tmp_path / "nope.json"), env=env)
    assert p.returncode == 2
    assert p.stderr.startswith(f"error: {tmp_path / 'nope.json'}: no such file")


def test_worker_entry_point_does_not_load_the_cli():
    """Replay is a library: `python -m simharness.replay.worker` never imports simharness._cli
    (nor loads the worker module twice through it)."""
    code = ("import runpy, sys\n"
            "sys.argv = ['worker', '--help']\n"
            "try:\n"
            "    runpy.run_module('simharness.replay.worker', run_name='__main__')\n"
            "except SystemExit:\n"
            "    pass\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('simharness._cli', 'cli', "
            "'click')))\n"
            "print('LOADED', bad)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "--plan FILE" in p.stdout
    assert "LOADED []" in p.stdout, p.stdout


def test_importing_the_cli_does_not_import_torch():
    code = ("import sys, cli, simharness.replay; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
