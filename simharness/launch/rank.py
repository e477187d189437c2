"""Moved to :mod:`simharness.launch.bootstrap`; this path re-exports it for one release.

``python -m simharness.launch.rank`` still runs it.
"""

from __future__ import annotations

from .bootstrap import (  # noqa: F401
    NEEDS_GPU_EXIT,
    USAGE,
    RankArgs,
    RankUsageError,
    _report_ignored,
    main,
    parse,
    prepare,
    run_as_main,
    run_target,
)

if __name__ == "__main__":
    run_as_main()
