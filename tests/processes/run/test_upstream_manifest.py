"""A suite pinned by a manifest (every file under its trees, by sha256) is copied out of a git
mirror with ``git archive`` and checked file by file; a file that differs from its pin, or is
missing at the commit, is a ValueError naming it."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess

import pytest
from support import upstream_suites as us


def _repo(tmp_path):
    git = tmp_path / "mirror"
    (git / "pkg" / "core").mkdir(parents=True)
    (git / "pkg" / "core" / "a.py").write_text("A = 1\n")
    (git / "tests").mkdir()
    (git / "tests" / "t.py").write_text("def test(): pass\n")
    (git / "other.py").write_text("not pinned\n")
    run = dict(cwd=git, check=True, capture_output=True)
    subprocess.run(["git", "init", "-q"], **run)
    subprocess.run(["git", "add", "."], **run)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   **run)
    head = subprocess.run(["git", "rev-parse", "HEAD"], **run, text=True).stdout.strip()
    return str(git / ".git"), head


def test_manifest_pins_every_file_of_the_trees_and_materialise_checks_them(tmp_path):
    git, head = _repo(tmp_path)
    suite = us.Suite(name="demo", repo="x/y", commit=head, files={}, run="tests/t.py", ranks=1,
                     trees=("pkg/core", "tests"))
    files = us._archive(suite, git, suite.trees)
    assert sorted(files) == ["pkg/core/a.py", "tests/t.py"]
    pins = {p: hashlib.sha256(d).hexdigest() for p, d in files.items()}
    pinned = dataclasses.replace(suite, files=pins)
    root = us.materialise(pinned, git, cache=tmp_path / "cache")
    assert (root / "pkg/core/a.py").read_text() == "A = 1\n"
    assert us.cached(pinned, cache=tmp_path / "cache") == root
    wrong = dataclasses.replace(suite, files={**pins, "tests/t.py": "0" * 64})
    with pytest.raises(ValueError, match=r"x/y@\w{12}:tests/t.py has sha256 \w{64}, pinned 0{64}"):
        us.materialise(wrong, git, cache=tmp_path / "other")
    gone = dataclasses.replace(suite, files={**pins, "tests/u.py": "1" * 64})
    with pytest.raises(ValueError, match="tests/u.py has sha256 missing"):
        us.materialise(gone, git, cache=tmp_path / "third")


def test_the_megatron_main_suite_pins_its_files_and_the_test_files_it_runs():
    suite = us.SUITES["megatron-lm-main"]
    assert suite.commit == "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
    assert len(suite.files) > 1000 and all(len(h) == 64 for h in suite.files.values())
    assert set(suite.runs) <= set(suite.files)
    assert "tests/unit_tests/conftest.py" in suite.files
    assert "megatron/core/parallel_state.py" in suite.files
