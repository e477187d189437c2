"""``python -m simharness.capture.rank``: the public command for the capture worker
under torchrun or srun (the name users' launch scripts and the docs use). The code lives
in :mod:`simharness.capture.faithful_rank`; this module runs it and re-exports its names.
"""

from __future__ import annotations

from .faithful_rank import (  # noqa: F401
    _DRAIN,
    _POLL_S,
    DEFAULT_GRACE_S,
    DEFAULT_STORE_WAIT_S,
    EAGER_ENV,
    RankRun,
    _classify,
    _lazy_subgroups,
    _main_fake,
    _prepare,
    _stopped_early,
    _tb_where,
    drain_output,
    exit_now,
    finish,
    install_recorder,
    main,
    parse,
    run_target_namespace,
)

if __name__ == "__main__":
    finish(main())
