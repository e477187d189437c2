"""Moved to :mod:`simharness.pytest_ranks.controller`; this path re-exports it for one release.
"""

from __future__ import annotations

from ..pytest_ranks.controller import (  # noqa: F401
    RANK_ALLOWANCE_MIB,
    MemoryPlan,
    RunError,
    RunReport,
    RunSpec,
    _collection_hang,
    _first_error,
    _lost,
    _no_collection,
    _order,
    _own_rss_mib,
    _poll,
    _Round,
    _Runner,
    _stderr_tail,
    _tests_by_rank,
    cores,
    memory_plan,
    run_pytest,
)
