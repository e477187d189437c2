"""Resource limits and exit statuses.

A request that cannot fit in memory is refused before any work, with one line giving the
estimate, the limit and the largest input that fits (exit 2); a crash is one line and exit
3, never 1 (findings) and never a traceback. The machine's memory is pinned with
``SIMHARNESS_MEMORY_LIMIT`` so the refusals do not depend on the machine running the tests.
"""

from __future__ import annotations

import re
import time

import pytest
from click.testing import CliRunner

from cli import main
from simharness import resources
from simharness.fields import ParallelismFields
from simharness.resources import (
    MEMORY_ENV,
    MemoryLimit,
    ResourceError,
    available_memory,
    largest_fitting,
    layout_memory_check,
    layout_peak_bytes,
    parse_size,
)

GIB = 1 << 30


@pytest.fixture
def memory(monkeypatch):
    """Pin the machine's memory: ``memory("4G")`` (the machine itself reads as larger, so
    the variable is not capped at this machine's figure)."""
    def pin(text: str) -> None:
        monkeypatch.setattr(resources, "machine_memory",
                            lambda: MemoryLimit(1 << 50, "MemAvailable"))
        monkeypatch.setenv(MEMORY_ENV, text)
    return pin


def run(args, code):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    return result


def refused(args, *fragments):
    """One ``error:`` line, exit 2, naming the estimate, the limit and what fits."""
    t0 = time.monotonic()
    result = run(args, 2)
    assert time.monotonic() - t0 < 10  # before any world-sized work
    err = result.stderr
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    for f in ("needs about", "(estimate)", "usable", "the largest that fits is", *fragments):
        assert f in err, (f, err)
    return err


# ------------------------------------------------------------------ the pure part
def test_parse_size_and_its_error():
    assert parse_size("24G") == 24 * GIB and parse_size("1.5g") == 3 * GIB // 2
    assert parse_size("4096") == 4096 and parse_size("64MiB") == 64 << 20
    with pytest.raises(ResourceError, match=MEMORY_ENV):
        parse_size("lots")


def test_available_memory_reads_the_override_then_the_machine(memory, monkeypatch):
    memory("3G")
    lim = available_memory()
    assert lim.available == 3 * GIB and MEMORY_ENV in lim.source
    assert lim.usable == int(3 * GIB * resources.USABLE_FRACTION)
    monkeypatch.delenv(MEMORY_ENV)
    assert available_memory().available > 0


def test_meminfo_and_cgroup_v1_and_v2_are_read(tmp_path, monkeypatch):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:  100 kB\nMemAvailable:   2048 kB\n")
    assert resources._meminfo_available(info) == 2048 * 1024
    proc = tmp_path / "cgroup"
    real_path = resources.Path

    def fake_path(p, *rest):
        return real_path(proc) if str(p) == "/proc/self/cgroup" else real_path(p, *rest)
    monkeypatch.setattr(resources, "Path", fake_path)
    root = tmp_path / "fs"
    (root / "memory" / "job").mkdir(parents=True)
    (root / "memory" / "job" / "memory.limit_in_bytes").write_text(str(8 * GIB))
    (root / "memory" / "job" / "memory.usage_in_bytes").write_text(str(3 * GIB))
    proc.write_text("4:memory:/job\n0::/\n")
    assert resources._cgroup_room(root) == 5 * GIB
    (root / "svc").mkdir()
    (root / "svc" / "memory.max").write_text(str(2 * GIB))
    (root / "svc" / "memory.current").write_text(str(GIB))
    proc.write_text("0::/svc\n")
    assert resources._cgroup_room(root) == GIB
    (root / "svc" / "memory.max").write_text("max")  # no limit
    assert resources._cgroup_room(root) is None


def test_largest_fitting_is_the_largest_multiple_under_the_budget():
    est = lambda n: 1000 + 7 * n  # noqa: E731
    n = largest_fitting(est, 10**6, unit=64)
    assert n % 64 == 0 and est(n) <= 10**6 < est(n + 64)
    assert largest_fitting(est, 500, unit=64) == 0


def test_layout_estimate_grows_with_the_world_and_the_lean_check_is_cheaper():
    assert layout_peak_bytes("check", 1 << 24) < layout_peak_bytes("inspect", 1 << 24)
    assert layout_peak_bytes("check", (1 << 20) - 1) > layout_peak_bytes("check", 1 << 20)
    assert layout_peak_bytes("export", 1 << 20, kinds=46) > layout_peak_bytes("export", 1 << 20)


def test_layout_check_names_the_largest_world_that_fits():
    cfg = ParallelismFields.from_dict({"world_size": 2**31, "tp": 8, "pp": 8})
    limit = MemoryLimit(4 * GIB, "test")
    with pytest.raises(ResourceError) as info:
        layout_memory_check(cfg, "0.19", "check", limit, what="check")
    fits = int(re.search(r"-n ([\d,]+)", str(info.value)).group(1).replace(",", ""))
    assert fits % 64 == 0
    assert layout_peak_bytes("check", fits) <= limit.usable
    assert layout_peak_bytes("check", fits + 64) > limit.usable
    ok = ParallelismFields.from_dict({"world_size": fits, "tp": 8, "pp": 8})
    layout_memory_check(ok, "0.19", "check", limit)  # the world it names is accepted


# ----------------------------------------------------------- the CLI refusals
def test_check_of_a_trillion_ranks_is_refused_not_a_numpy_traceback(memory):
    memory("16G")
    refused(["check", "-n", 10**12, "--tp", 8], "check of 1,000,000,000,000 ranks")


def test_check_that_would_be_oom_killed_is_refused(memory):
    memory("24G")
    err = refused(["check", "-n", 2**31, "--tp", 8, "--pp", 8], "2,147,483,648 ranks")
    assert "a multiple of 64" in err


@pytest.mark.parametrize("args", [
    ["inspect", "-n", 2**31, "--tp", 8, "--pp", 8, "--rank", 3],
    ["inspect", "-n", 2**28, "--tp", 8, "--format", "json"],
    ["export", "-n", 2**28, "--tp", 8, "--format", "csv"],
    ["explain", "-n", 2**31, "--tp", 8, "--pp", 8],
])
def test_other_layout_commands_are_refused_too(memory, args):
    memory("8G")
    refused(args)


def test_small_worlds_never_read_the_limit(memory):
    memory("1")  # one byte: only consulted for worlds that need it
    run(["check", "-n", 64, "--tp", 8], 0)


def test_place_on_a_superpod_refuses_the_file_s_stated_size():
    result = run(["place", "--topology", "dgx-h100-superpod", "--nodes", 100000, "--tp", 8], 2)
    assert "at most 2048 node(s)" in result.stderr and "--nodes 100000" in result.stderr


def test_replay_with_a_huge_probe_is_refused_before_any_rank_starts(memory, monkeypatch):
    import simharness.replay.controller as launcher

    def no_launch(*a, **k):
        raise AssertionError("a rank was started")
    monkeypatch.setattr(launcher, "run_local", no_launch)
    memory("16G")
    err = refused(["replay", "-n", 8, "--tp", 2, "--overlap-bytes", "100G"],
                  "--overlap-bytes 100.0 GiB", "the largest that fits is --overlap-bytes")
    assert "at 8 ranks" in err


def test_replay_data_at_the_issue_s_sizes_is_refused(memory, monkeypatch):
    import simharness.replay.controller as launcher

    monkeypatch.setattr(launcher, "run_local", lambda *a, **k: pytest.fail("ranks started"))
    memory("24G")
    err = refused(["replay-data", "-n", 16, "--tp", 2, "--cp", 2, "--steps", 10,
                   "--shard-numel", 1048576], "--shard-numel 1,048,576")
    fits = int(re.search(r"fits is --shard-numel ([\d,]+)", err).group(1).replace(",", ""))
    assert 0 < fits < 1048576


# ---------------------------------------------------------------- exit statuses
def test_a_crash_is_one_line_and_exit_3_with_the_debug_hint(monkeypatch):
    import simharness._cli.check as layout_cli

    def boom(layout, **kw):
        raise KeyError("no such thing")
    monkeypatch.setattr(layout_cli, "_run_check", boom)
    monkeypatch.delenv("SIMHARNESS_DEBUG", raising=False)
    err = run(["check", "-n", 16, "--tp", 2], 3).stderr
    assert err.startswith("error: internal error: KeyError") and len(err.splitlines()) == 1
    assert "SIMHARNESS_DEBUG=1" in err and "(at test_resources.py:" not in err
    assert "bug" in err
    monkeypatch.setenv("SIMHARNESS_DEBUG", "1")
    result = CliRunner().invoke(main, ["check", "-n", "16", "--tp", "2"])
    assert isinstance(result.exception, KeyError)  # the traceback comes through


def test_memory_error_is_exit_3_and_says_so(monkeypatch):
    import simharness._cli.check as layout_cli

    def boom(layout, **kw):
        raise MemoryError()
    monkeypatch.setattr(layout_cli, "_run_check", boom)
    monkeypatch.delenv("SIMHARNESS_DEBUG", raising=False)
    err = run(["check", "-n", 16, "--tp", 2], 3).stderr
    assert "ran out of memory" in err and "peak RSS" in err


def test_exit_statuses_are_distinct_and_in_the_help():
    from simharness._cli.common import EXIT_FINDINGS, EXIT_RUNTIME, EXIT_USAGE

    assert (EXIT_FINDINGS, EXIT_USAGE, EXIT_RUNTIME) == (1, 2, 3)
    text = run(["--help"], 0).output
    for words in ("1 findings", "2 bad input", "3 runtime failure"):
        assert words in " ".join(text.split()), words


def test_the_estimate_switches_to_the_lean_check_where_check_does():
    from simharness import checks, layout

    assert resources.LEAN_WORLD == layout.LEAN_WORLD == checks.LEAN_WORLD
