"""Megatron mode: run the installed megatron-core's ``initialize_model_parallel``.

Inside each replay rank, ``torch.distributed.new_group`` is wrapped for the
duration of the call so every group Megatron creates is recorded (ranks in
Megatron's order, backend, ``group_desc``, the object returned). The record is
compared call by call with the plan's creation order
(:func:`simharness.creation_log.compare_log`), each group the rank is in is verified
like a plan replay, and the getters are compared with the plan
(:func:`simharness.live.verify.compare_getters`).

The installed version, the profile it follows, the refusals of Megatron mode and
``initialize_model_parallel``'s keywords are :mod:`simharness.mcore`; the log comparison
is :mod:`simharness.creation_log`. Their names moved there; this module re-exports them
for one release.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..creation_log import LoggedGroup, compare_log
from ..layout import Layout
from ..mcore import (
    DIST,
    check_megatron,
    import_parallel_state,
    init_kwargs,
    installed_version,
    profile_for_version,
)

__all__ = ["DIST", "LoggedGroup", "check_megatron", "compare_log", "import_parallel_state",
           "init_kwargs", "installed_version", "profile_for_version", "run_megatron"]


def run_megatron(layout: Layout, rank: int, backend: str, timeout_s: float,
                 on_create: Callable[[int], None]) -> tuple[Any, list[LoggedGroup], dict]:
    """``initialize_model_parallel`` (+ 0.18+ all-gather groups) with ``new_group`` recorded.

    ``new_group`` keeps Megatron's arguments except two: the timeout becomes the
    replay's (so a missing rank fails within ``--timeout``), and in a gloo
    replay an explicit ``nccl``/``ucc`` backend becomes gloo (Megatron's NCCL
    groups pass ``backend=None``, i.e. the default backend, gloo here).
    Returns ``(parallel_state, log, info)``; ``info["ag_groups"]`` holds the
    0.18+ ``(dp_cp_ag, expt_dp_ag)`` objects.
    """
    import torch.distributed as dist

    ps = import_parallel_state()

    log: list[LoggedGroup] = []
    original = dist.new_group
    timeout = timedelta(seconds=timeout_s)

    def recording_new_group(*args, **kwargs):
        names = ("ranks", "timeout", "backend", "pg_options", "use_local_synchronization",
                 "group_desc")
        call = dict(zip(names, args, strict=False))  # args may stop early
        call.update(kwargs)
        ranks = list(call.get("ranks") or [])
        given = call.get("backend")
        used = given
        if backend == "gloo" and given in ("nccl", "ucc"):
            used = "gloo"
        call["backend"] = used
        call["timeout"] = timeout
        on_create(len(log))
        pg = original(**call)
        log.append(LoggedGroup(len(log), ranks, given, used or backend, call.get("group_desc"),
                               pg if rank in ranks else None))
        return pg

    kwargs = init_kwargs(layout, ps, timeout_s)
    info: dict[str, Any] = {"version": installed_version(), "kwargs": kwargs, "ag_groups": None}
    dist.new_group = recording_new_group
    try:
        ps.initialize_model_parallel(**kwargs)
        if layout.config.create_all_gather_group and hasattr(ps, "create_all_gather_groups"):
            ep = layout.config.ep
            info["ag_groups"] = ps.create_all_gather_groups(for_expert_parallelism=ep > 1,
                                                            timeout=timeout)
            info["ag_call"] = f"create_all_gather_groups(for_expert_parallelism={ep > 1})"
    finally:
        dist.new_group = original
    return ps, log, info
