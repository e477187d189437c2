"""The mutation score, guarded cheaply: a fixed sample of recorded mutants.

Each record of tests/mutants/sample.toml (found by ``make mutate``, killed since) is
applied on its own to a scratch copy of the package (never to the tree) and the named
fast tests are run on that copy in a fresh ``pytest``: they must fail (exit 1, a test
failure, not a collection or usage error). The same tests must pass on the unmutated
copy, so a kill is the mutant's doing. A record whose ``original`` text is no longer in
its file fails with the fix: re-record it from ``scripts/mutate.py`` or drop it.

The whole sample costs about a minute of CPU (one short pytest per record).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SAMPLE = tomllib.loads((ROOT / "tests" / "mutants" / "sample.toml").read_text())["mutant"]
TIMEOUT = 120  # seconds for one record's pytest


def apply(text: str, record: dict) -> str:
    """``text`` with the record's line replaced: the line holding ``original`` (stripped)
    nearest to ``line``, where ``original`` becomes ``replacement``.

    >>> apply("a = 1\\nb = a + 1\\n", {"line": 2, "original": "a + 1", "replacement": "a - 1"})
    'a = 1\\nb = a - 1\\n'
    """
    lines = text.splitlines(keepends=True)
    hits = [i for i, ln in enumerate(lines) if record["original"] in ln]
    if not hits:
        raise LookupError(f"{record['file']}: {record['original']!r} is gone (line "
                          f"{record['line']} before); re-record this mutant from "
                          f"`scripts/mutate.py survivors`/`show` or drop it from sample.toml")
    i = min(hits, key=lambda h: abs(h + 1 - record["line"]))
    lines[i] = lines[i].replace(record["original"], record["replacement"], 1)
    return "".join(lines)


def scratch(tmp: Path) -> Path:
    """A copy of the package, the tests (and the example scripts they run) and pytest's
    settings, under ``tmp``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "simharness", tmp / "simharness", ignore=ignore)
    shutil.copytree(ROOT / "topologies", tmp / "simharness" / "topologies", ignore=ignore)
    for name in ("tests", "examples"):
        shutil.copytree(ROOT / name, tmp / name, ignore=ignore)
    for name in ("pyproject.toml", "cli.py"):
        shutil.copy2(ROOT / name, tmp / name)
    if (ROOT / ".cache").exists():
        (tmp / ".cache").symlink_to(ROOT / ".cache")
    return tmp


def run_tests(copy: Path, tests: list[str]) -> subprocess.CompletedProcess:
    """The tests on ``copy`` (its ``simharness`` first on sys.path: cwd of ``python -m``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    # hypothesis's pytest plugin costs ~0.7 s of start-up per run (it imports hypothesis);
    # @given tests run without it, and the records' tests need none of its options.
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p",
           "no:cacheprovider", "-p", "no:hypothesispytest", "-n", "0", "-o", "addopts=",
           *tests]
    return subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT)


def test_sample_spans_the_modules():
    files = {r["file"] for r in SAMPLE}
    assert len(SAMPLE) >= 25, len(SAMPLE)
    assert {"simharness/checks.py", "simharness/rules.py"} <= files, files
    for r in SAMPLE:
        assert r["original"] != r["replacement"] and r["tests"], r


def test_sample_tests_pass_unmutated(tmp_path):
    copy = scratch(tmp_path)
    tests = sorted({t for r in SAMPLE for t in r["tests"]})
    out = run_tests(copy, tests)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


@pytest.mark.parametrize("record", SAMPLE, ids=[r["id"] for r in SAMPLE])
def test_recorded_mutant_is_killed(record, tmp_path):
    copy = scratch(tmp_path)
    target = copy / record["file"]
    target.write_text(apply(target.read_text(), record))
    out = run_tests(copy, record["tests"])
    assert out.returncode == 1, (
        f"mutant {record['id']} ({record['file']}:{record['line']}: {record['original']!r} -> "
        f"{record['replacement']!r}) was not killed by {record['tests']} (pytest exit "
        f"{out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-1000:]}")
