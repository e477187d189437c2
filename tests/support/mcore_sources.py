"""Whole ``megatron/core`` source trees of the pinned megatron-core wheels, for source scans.

:func:`tests.megatron_harness.fetch_parallel_state` keeps only ``parallel_state.py`` of each
pinned wheel (``.cache/mcore0XX/``); a scan of *who calls what* needs every module. This
helper keeps the whole ``megatron/core`` tree of the same wheel in its own folder,
``.cache/mcore0XX-src/megatron/core/`` (``$SIMHARNESS_MCORE_CACHE/mcore0XX-src`` when set),
and checks that its ``parallel_state.py`` has the sha256 pinned in
:data:`megatron_harness.MCORE_WHEELS`, so the tree is that release's.

    .venv/bin/python tests/support/mcore_sources.py            # every pinned version
    .venv/bin/python tests/support/mcore_sources.py 0.18.2     # one

The wheels are downloaded with pip (never installed); nothing here imports them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

if __package__:  # imported as support.mcore_sources (tests/ is on sys.path under pytest)
    from . import megatron_harness as H
else:  # run as a script: its own folder is on sys.path
    import megatron_harness as H

ROOT = Path(__file__).resolve().parents[2]


def sources_dir(root: str | os.PathLike, version: str) -> Path:
    """Where megatron-core ``version``'s ``megatron/core`` tree is kept (it may be absent)."""
    cache = Path(os.environ.get(H.CACHE_ENV) or Path(root) / ".cache")
    return cache / f"mcore{H.version_tag(version)}-src" / "megatron" / "core"


def cached_sources(root: str | os.PathLike, version: str) -> Path | None:
    """The kept tree of ``version`` when it is there and its ``parallel_state.py`` is the
    pinned one; None otherwise (no download)."""
    core = sources_dir(root, version)
    ps = core / "parallel_state.py"
    if ps.is_file() and hashlib.sha256(ps.read_bytes()).hexdigest() == H.MCORE_WHEELS[version]:
        return core
    return None


def fetch_command(version: str) -> str:
    """The command that caches ``version``'s tree (for skip messages)."""
    return f".venv/bin/python tests/support/mcore_sources.py {version}"


def fetch_sources(root: str | os.PathLike, version: str, *, timeout: float = 300.0) -> Path:
    """Path of megatron-core ``version``'s ``megatron/core`` folder, downloading the pinned
    wheel with pip and unpacking every ``megatron/core/`` file of it when the tree is not
    kept yet. ``version`` must be a key of :data:`megatron_harness.MCORE_WHEELS`.

    Raises ``RuntimeError`` with the reason when it cannot be had (no network, no pip, a
    wheel whose ``parallel_state.py`` is not the pinned one)."""
    if version not in H.MCORE_WHEELS:
        raise RuntimeError(f"megatron-core {version} is not pinned; use one of "
                           f"{', '.join(H.MCORE_WHEELS)}")
    found = cached_sources(root, version)
    if found is not None:
        return found
    if os.environ.get("SIMHARNESS_NO_DOWNLOAD"):
        raise RuntimeError(f"{sources_dir(root, version)} is missing and SIMHARNESS_NO_DOWNLOAD "
                           f"is set (run {fetch_command(version)})")
    core = sources_dir(root, version)
    top = core.parent.parent  # .cache/mcore0XX-src
    top.parent.mkdir(parents=True, exist_ok=True)
    (top.parent / ".gitignore").write_text("*\n")
    with tempfile.TemporaryDirectory(dir=top.parent) as tmp:
        staged = Path(tmp) / "tree"
        with zipfile.ZipFile(H.download_wheel(version, tmp, timeout=timeout)) as z:
            members = [n for n in z.namelist()
                       if n.startswith("megatron/core/") and not n.endswith("/")]
            for name in members:
                out = staged / name
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
        ps = staged / "megatron" / "core" / "parallel_state.py"
        if not ps.is_file() or hashlib.sha256(ps.read_bytes()).hexdigest() \
                != H.MCORE_WHEELS[version]:
            raise RuntimeError(f"the downloaded wheel is not megatron-core {version} "
                               f"(parallel_state.py sha256 mismatch)")
        if top.exists():
            shutil.rmtree(top)
        os.replace(staged, top)
    found = cached_sources(root, version)
    if found is None:  # pragma: no cover - written just above
        raise RuntimeError(f"{core} could not be verified after unpacking")
    return found


def main(argv: list[str]) -> int:
    """Cache the named versions (default: every pinned one); 1 when one fails."""
    return H.fetch_all(ROOT, fetch_sources, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
