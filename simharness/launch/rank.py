"""``python -m simharness.launch.rank``: the public command for the per-rank bootstrap
under torchrun or srun (the name users' launch scripts and the docs use). The code lives
in :mod:`simharness.launch.bootstrap`; this module runs it and re-exports its names.
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
