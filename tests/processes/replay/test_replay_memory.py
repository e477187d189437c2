"""A replay rank that runs out of memory is reported as such.

``kill`` is what the kernel's OOM killer does to a rank (SIGKILL from outside);
``oom`` allocates until the rank's ``RLIMIT_DATA`` stops it. The machine's memory is
pinned to 1 GiB (``SIMHARNESS_MEMORY_LIMIT``) so the limit, and the test, stay small.
"""

from __future__ import annotations

import pytest
from support.replay import DEADLINE, assert_no_leftovers

from simharness import ParallelismConfig, build_layout
from simharness.replay import ReplayOptions, replay, summary_lines


@pytest.fixture
def layout4(monkeypatch):
    monkeypatch.setenv("SIMHARNESS_MEMORY_LIMIT", "1G")
    return build_layout(ParallelismConfig(world_size=4, tensor_model_parallel_size=2), "0.16")


def test_a_rank_killed_by_sigkill_is_reported_with_its_memory(layout4):
    rep = replay(layout4, ReplayOptions(timeout=30, overlap_bytes=0, fault="2:kill@verify"),
                 deadline=DEADLINE)
    f = rep["failure"]
    assert rep["exit_code"] == 3 and f["kind"] == "rank_died" and f["rank"] == 2, \
        "\n".join(summary_lines(rep))
    msg = f["message"]
    assert msg.startswith("rank 2 was killed (signal 9) during verify")
    assert "peak RSS was" in msg and "estimate 96.0 MiB per rank" in msg
    assert "1.0 GiB available (set by SIMHARNESS_MEMORY_LIMIT)" in msg
    # The kernel's OOM count did not move (the test killed it), and the report says so
    # rather than blaming memory; where the count cannot be read it says "most likely".
    assert ("not by the kernel's OOM killer" in msg) or ("most likely out of memory" in msg)
    assert_no_leftovers(rep)


def test_a_rank_past_its_memory_limit_fails_with_memory_error_naming_the_limit(layout4):
    rep = replay(layout4, ReplayOptions(timeout=30, overlap_bytes=0, fault="1:oom@verify"),
                 deadline=DEADLINE)
    f = rep["failure"]
    assert rep["exit_code"] == 3 and f["kind"] == "rank_error" and f["rank"] == 1, \
        "\n".join(summary_lines(rep))
    assert f["message"].startswith("rank 1: MemoryError")
    assert "RLIMIT_DATA" in f["message"] and "of 1.0 GiB available" in f["message"]
    assert "no memory limit stopped it" not in f["message"]
    assert_no_leftovers(rep)
