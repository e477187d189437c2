"""The GPU shim's stand-ins on 2 CPU ranks: a named GPU (``--gpu b200``) answering a
module-level capability probe, Megatron's RNG tracker, streams and events, NVTX, a missing
GPU-only package as a named skip, rank-dependent ``new_group`` (unused: passes at once, as
NCCL never notices; used: named on first use, not a hang), and gloo's all-gather into a flat
output (tests/fixtures/launch/gpu_calls_cases.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from support.paths import ROOT

CASES = "tests/fixtures/launch/gpu_calls_cases.py"


def simharness(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("SIMHARNESS_GPU", None)
    env.pop("SIMHARNESS_LAZY_GROUPS", None)  # the default: NCCL-style subgroups, lazy
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "cli.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_gpu_style_cases_on_two_cpu_ranks():
    out = simharness("run", "-n", "2", "--gpu", "b200", "--timeout", "60", "--",
                     "pytest", "-q", "-p", "no:randomly", CASES)
    text = out.stdout
    verdicts = {name: (label, float(secs)) for label, secs, name in re.findall(
        r"^(PASSED|FAILED|SKIPPED|HUNG|DIVERGED)\s+([\d.]+)s\s+\S+::(\w+)", text, re.M)}
    assert {k: v[0] for k, v in verdicts.items()} == {
        "test_device_identity": "PASSED",
        "test_rng_tracker_fork_and_restore_match_cpu_generators": "PASSED",
        "test_streams_and_events": "PASSED",
        "test_nvtx_ranges": "PASSED",
        "test_needs_transformer_engine": "SKIPPED",
        "test_rank_dependent_new_group_left_unused": "PASSED",
        "test_rank_dependent_new_group_used": "FAILED",
        "test_all_gather_into_a_flat_output": "PASSED"}, text + out.stderr
    assert re.search(r"test_needs_transformer_engine  needs GPU: needs transformer_engine, a "
                     r"GPU-only package \(ModuleNotFoundError: No module named "
                     r"'transformer_engine' at \S*gpu_calls_cases.py:\d+\)", text), text
    # the rank-dependent group is named on first use (rank 0), in seconds, not a hang
    assert "test_rank_dependent_new_group_used  (first failing rank 0;" in text, text
    assert re.search(r"GroupMismatch: rank-dependent new_group: the new_group call at "
                     r"\S*gpu_calls_cases.py:\d+ \(group '\d+'\) was given different ranks on "
                     r"different ranks: rank 0 passed \[0, 1\], rank 1 passed \[1\]\.", text), text
    assert verdicts["test_rank_dependent_new_group_left_unused"][1] < 10, text
    assert verdicts["test_rank_dependent_new_group_used"][1] < 10, text
    assert "6 passed, 1 failed, 1 skipped (1 need a GPU), 0 hung" in text, text
    assert out.returncode == 1, text + out.stderr


def test_an_unknown_gpu_is_one_error_line_before_any_rank_starts():
    out = simharness("run", "-n", "2", "--gpu", "h1000", "--", "pytest", CASES, timeout=60)
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert out.stderr.splitlines() == [
        "error: --gpu: GPU 'h1000' is not one the shim knows; give one of a100, a100-40gb, "
        "b200, h100, h100-pcie, h200, l40s, v100 (--gpu NAME or SIMHARNESS_GPU=NAME)"]
