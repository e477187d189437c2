"""Moved to :mod:`simharness.pytest_ranks.rank_plugin`; this path re-exports it for one release.
"""

from __future__ import annotations

from ..pytest_ranks.rank_plugin import (  # noqa: F401
    BACKSTOP_S,
    COLLECT_TIMEOUT_S,
    ENV_COLLECT_TIMEOUT,
    ENV_DIR,
    ENV_DONE,
    ENV_GRACE,
    ENV_ROUND,
    ENV_TIMEOUT,
    GRACE_S,
    HANG_EXIT,
    POLL_S,
    STACK_FRAMES,
    RankSession,
    Watchdog,
    _destroy_new_groups,
    _digest,
    _live_groups,
    _peak_rss_kib,
    _user_stack,
    pytest_configure,
)
