"""NCCL's own settings (environment variables and config files) that gloo ignores, listed
with their values."""

from __future__ import annotations

import os
from typing import Any

from .common import (
    Ignored,
)

#: Set by torchrun (and :mod:`simharness.launch.env`) for every job: not the user's setting.
TORCHRUN_NCCL_VARS = frozenset({"TORCH_NCCL_ASYNC_ERROR_HANDLING"})


def nccl_settings(environ: Any, home: str | None, shown: int = 6) -> list[Ignored]:
    """NCCL's own settings that a rank would have had and gloo ignores, as :class:`Ignored`:
    ``NCCL_*`` and ``TORCH_NCCL_*`` (ProcessGroupNCCL's) environment variables, and the
    settings of the NCCL config files NCCL would read, in its order (NCCL v2.28.3-1
    ``src/misc/param.cc:53-67``): ``$NCCL_CONF_FILE`` when set and not empty, else
    ``HOME/.nccl.conf`` (``home``: the user's entry in the password database, as NCCL takes
    it), then ``/etc/nccl.conf``. A file line is ``NAME=VALUE``; ``#`` lines and lines without
    ``=`` are skipped (``param.cc:26-51``). ``shown`` names at most that many per item.

    >>> [str(i) for i in nccl_settings({"NCCL_ALGO": "Ring", "PATH": "/bin"}, None)]
    ['NCCL environment: NCCL_ALGO=Ring (gloo runs the collectives) ignored at environment']
    """
    def listing(pairs: list[tuple[str, str]]) -> str:
        text = ", ".join(f"{k}={v[:40]}" for k, v in pairs[:shown])
        more = f" and {len(pairs) - shown} more" if len(pairs) > shown else ""
        return f"{text}{more} (gloo runs the collectives)"

    out = []
    env = sorted((k, str(v)) for k, v in environ.items()
                 if k.startswith(("NCCL_", "TORCH_NCCL_")) and k not in TORCHRUN_NCCL_VARS)
    if env:
        out.append(Ignored("NCCL environment", listing(env), "environment"))
    user = environ.get("NCCL_CONF_FILE") or (os.path.join(home, ".nccl.conf") if home else None)
    for path in (user, "/etc/nccl.conf"):
        if not path:
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        pairs = [(name, value) for name, _, value in (
            ln.partition("=") for ln in lines if not ln.startswith("#") and "=" in ln)]
        if pairs:
            out.append(Ignored("NCCL config file", f"{path}: {listing(pairs)}", path))
    return out


def _home_dir() -> str | None:
    """The user's home directory as NCCL finds it (``getpwuid(getuid())->pw_dir``)."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
        return None
