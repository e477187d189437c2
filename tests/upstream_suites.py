"""Upstream distributed test files that ``simharness run`` is proven on: pinned, never vendored.

Each suite names a repository, a commit and the sha256 of every file it needs.
:func:`materialise` copies them into ``.cache/upstream/<suite>/`` from a local git mirror of
that repository (``git show COMMIT:PATH``) and checks every sha256; nothing is downloaded
(this project never reaches outside the machine, and CI has no internet), so a suite whose
files cannot be had is reported "needs the files" by ``bench/bench_run.py``.

Megatron-LM ``core_v0.16.1`` (the tag of the megatron-core 0.16.1 the test venv installs):
``tests/unit_tests/test_parallel_state.py`` and what it imports
(``tests/unit_tests/test_utilities.py`` and the two package ``__init__`` files). The
suite's ``conftest.py`` is left out on purpose: it imports Megatron-LM's test-data
downloader and Transformer Engine helpers, which are environment matters, not the harness's.

    python tests/upstream_suites.py --git /path/to/Megatron-LM   # materialise and verify
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "upstream"


@dataclass(frozen=True)
class Suite:
    name: str
    repo: str
    commit: str
    files: dict[str, str]  # path -> sha256
    run: str               # the test file, relative to the suite's root
    ranks: int


SUITES = {
    "megatron-lm-core_v0.16.1": Suite(
        name="megatron-lm-core_v0.16.1", repo="NVIDIA/Megatron-LM",
        commit="55ac7082517c3878ae653c07c09c534b8aed49f6",
        files={
            "tests/__init__.py":
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "tests/unit_tests/__init__.py":
                "5f5a1d1a62265b80b051ce3a9c7fa457bbe174a0395a18a0d75de6fe91791eee",
            "tests/unit_tests/test_utilities.py":
                "fd537ba178450caf659dc688169e99aa016369fd310aa0f005daed01eff538b5",
            "tests/unit_tests/test_parallel_state.py":
                "f3ac46a5f64f745d050734f24afa4814ba5b29b940a8862a151ac7cac98cf8d9",
        },
        run="tests/unit_tests/test_parallel_state.py", ranks=8),
}


def _ok(path: Path, sha256: str) -> bool:
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256


def cached(suite: Suite, cache: Path = CACHE) -> Path | None:
    """The suite's root in the cache when every file is there with its sha256, else None."""
    root = cache / suite.name
    return root if all(_ok(root / p, h) for p, h in suite.files.items()) else None


def materialise(suite: Suite, git_dir: str, cache: Path = CACHE) -> Path:
    """Copy the suite's files at its commit out of the local git mirror ``git_dir``; raises
    ``ValueError`` naming the file whose content does not match its pin."""
    root = cache / suite.name
    for path, sha256 in suite.files.items():
        target = root / path
        if _ok(target, sha256):
            continue
        data = subprocess.run(["git", "--git-dir", git_dir, "show", f"{suite.commit}:{path}"],
                              capture_output=True, check=True, timeout=60).stdout
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            raise ValueError(f"{suite.repo}@{suite.commit[:12]}:{path} has sha256 {got}, "
                             f"pinned {sha256}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git", required=True, help="a local git mirror of the suite's repository")
    ap.add_argument("--suite", default="megatron-lm-core_v0.16.1", choices=sorted(SUITES))
    args = ap.parse_args(argv)
    git_dir = args.git if args.git.endswith(".git") or Path(args.git, "HEAD").exists() \
        else str(Path(args.git, ".git"))
    print(materialise(SUITES[args.suite], git_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
