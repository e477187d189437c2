"""Moved to :mod:`simharness.pytest_ranks.verdicts`; this path re-exports it for one release.
"""

from __future__ import annotations

from ..pytest_ranks.verdicts import (  # noqa: F401
    NEEDS_GPU_PREFIX,
    OUTCOMES,
    Verdict,
    _skip_diverged,
    _span,
    counts,
    exit_code,
    junit_xml,
    not_started,
    read_records,
    verdict,
)
