"""The package as a user installs it: build the wheel, install it into a fresh venv, run it.

The venv is made without pip and without dependencies; a ``.pth`` file puts this
test environment's ``site-packages`` behind it (torch, numpy, click... are not
downloaded; a ``.pth`` listed there is not processed, so this environment's own
editable simharness stays out). The sources are copied first, so the build
leaves nothing in the checkout. Deselect with ``-m "not wheel"``; CI runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from support.paths import ROOT

SOURCES = ("pyproject.toml", "README.md", "cli.py", "simharness", "topologies")
TIMEOUT = 120

pytestmark = pytest.mark.wheel


def _run(cmd, *, cwd, check=True):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT)
    if check:
        assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def _copy_sources(dest: Path) -> Path:
    dest.mkdir()
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def _fresh_venv(path: Path) -> Path:
    """A venv without pip whose ``site-packages`` falls back to this environment's."""
    _run([sys.executable, "-m", "venv", "--without-pip", path], cwd=path.parent)
    python = path / "bin" / "python"
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                cwd=path).stdout.strip()
    ours = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    Path(site, "_simharness_test_deps.pth").write_text("\n".join(sorted(ours)) + "\n")
    return python


def _packages_on_disk(src: Path) -> set[str]:
    return {str(p.parent.relative_to(src)).replace(os.sep, ".")
            for p in (src / "simharness").rglob("__init__.py")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    src = _copy_sources(base / "src")
    build = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                  "-v", "-w", base / "dist", src], cwd=base)
    # A quiet install: setuptools prints no warning (e.g. a data folder that
    # Python can import but that is missing from pyproject.toml's packages).
    log = build.stdout + build.stderr
    assert "Warning" not in log and "!!" not in log, log[-3000:]
    (whl,) = (base / "dist").glob("simharness-*.whl")
    return whl


def test_wheel_ships_the_topologies_and_no_top_level_cli(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(Path(n).stem for n in names
                     if Path(n).parent == Path("simharness/topologies") and n.endswith(".toml"))
    assert shipped == sorted(p.stem for p in (ROOT / "topologies").glob("*.toml"))
    assert "simharness/topologies/README.md" in names
    assert "simharness/topologies/calibration/nccl_calibration.toml" in names
    assert "simharness/topologies/calibration/model_error.toml" in names  # simulate reads it
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"simharness"}, top  # no cli.py (nor anything else) at the top level
    # Every package of the source tree is listed in pyproject.toml's packages.
    in_wheel = {n.rsplit("/", 1)[0].replace("/", ".") for n in names
                if n.endswith("/__init__.py")}
    assert _packages_on_disk(ROOT) <= in_wheel, _packages_on_disk(ROOT) - in_wheel
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "simharness = simharness._cli.main:main" in zipfile.ZipFile(wheel).read(
        entry).decode()


def test_installed_wheel_lists_topologies_and_checks(wheel, tmp_path):
    python = _fresh_venv(tmp_path / "venv")
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel],
         cwd=tmp_path)
    exe = tmp_path / "venv" / "bin" / "simharness"
    where = _run([python, "-c", "import simharness; print(simharness.__file__)"],
                 cwd=tmp_path).stdout
    assert where.startswith(str(tmp_path / "venv")), where
    listed = _run([exe, "topology", "list"], cwd=tmp_path).stdout.splitlines()
    assert len(listed) > 1 and any(line.startswith("dgx-h100 ") for line in listed), listed
    check = _run([exe, "check", "-n", "16", "--tp", "2", "--pp", "2", "--cp", "2"],
                 cwd=tmp_path)
    assert "0 errors" in check.stdout, check.stdout
    placed = _run([exe, "place", "--topology", "dgx-h100-superpod", "--nodes", "2",
                   "--tp", "8"], cwd=tmp_path, check=False)
    assert placed.returncode == 0, placed.stderr
    assert _run([python, "-c", "import cli"], cwd=tmp_path, check=False).returncode != 0
    # The calibration data set is package data, read without the source tree's tests/.
    cal = _run([python, "-c", "from simharness.topology.calibration import DEFAULT_PATH, "
                "load_points; print(DEFAULT_PATH); print(len(load_points()))"],
               cwd=tmp_path).stdout.split()
    assert cal[0].startswith(str(tmp_path / "venv")) and int(cal[1]) > 0, cal


def test_editable_install_reads_the_checkout_topologies(tmp_path):
    src = _copy_sources(tmp_path / "src")
    python = _fresh_venv(tmp_path / "venv")
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
          "-q", "-e", src], cwd=tmp_path)
    out = _run([python, "-c", "from simharness.topology import topology_dir, list_topologies; "
                "print(topology_dir()); print(len(list_topologies()))"], cwd=tmp_path).stdout
    where, count = out.split()
    assert Path(where) == src / "topologies" and int(count) > 0
