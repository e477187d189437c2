"""Moved to :mod:`simharness.replay.controller`; this path re-exports it for one release.
"""

from __future__ import annotations

from .controller import (  # noqa: F401
    LOG_TAIL,
    LocalRun,
    _divisors,
    _exited,
    _kill_group,
    _tail,
    memory_budget,
    preflight,
    replay,
    run_local,
    torchrun_command,
    write_report,
)
