"""Megatron mode: run the installed megatron-core's ``initialize_model_parallel``.

Inside each replay rank, ``torch.distributed.new_group`` is wrapped for the
duration of the call so every group Megatron creates is recorded (ranks in
Megatron's order, backend, ``group_desc``, the object returned). The record is
compared call by call with the plan's creation order, each group the rank is
in is verified like a plan replay, and the getters are compared with the
plan (:func:`simharness.replay.verify.compare_getters`).

Version handling (:func:`profile_for_version`): 0.16.x/0.17.x follow profile
"0.16", 0.18.x profile "0.18", 0.19.x and later profile "0.19". 0.16/0.17 take
``create_all_gather_group=`` (detected with ``inspect.signature``); 0.18+ build
the all-gather groups with ``create_all_gather_groups(for_expert_parallelism=ep > 1)``
after init.
SHARP is never used (it needs CUDA).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..config import DEFAULT_MCORE
from ..errors import SimharnessError
from ..layout import Layout
from ..profiles import megatron_kwargs, profile_for_release

DIST = "megatron-core"


def import_parallel_state():
    """``megatron.core.parallel_state``, imported with its import-time warnings silenced
    ("Transformer Engine and Apex are not installed"); import errors propagate."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import parallel_state

    return parallel_state


def installed_version() -> str | None:
    """The installed megatron-core version (without importing it), or None."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version(DIST)
    except PackageNotFoundError:
        return None


def profile_for_version(ver: str) -> str:
    """simharness profile for an installed version.

    >>> [profile_for_version(v) for v in ("0.16.1", "0.17.1", "0.18.2", "0.19.2", "0.20.0rc1")]
    ['0.16', '0.16', '0.18', '0.19', '0.19']
    """
    try:
        major, minor = (int(x) for x in ver.split(".")[:2])
    except ValueError:
        return DEFAULT_MCORE
    prof = profile_for_release(major, minor)
    if prof is None:
        raise SimharnessError(
            f"megatron-core {ver} is installed; simharness models 0.16 and later (the "
            f"all-gather option first shipped in 0.16). Install megatron-core 0.16.1 or newer.")
    return prof.name


def check_megatron(layout: Layout, backend: str) -> tuple[str, str]:
    """Refuse Megatron mode where it cannot run; return ``(version, profile)``."""
    ver = installed_version()
    if ver is None:
        raise SimharnessError(
            "--engine megatron needs megatron-core installed (pip install megatron-core==0.16.1 "
            "einops); or replay the plan itself with --engine plan.")
    profile = profile_for_version(ver)
    if layout.mcore != profile:
        raise SimharnessError(
            f"the installed megatron-core {ver} follows simharness profile {profile}, but the "
            f"plan was built for profile {layout.mcore}; rebuild it with --mcore {profile}.")
    cfg = layout.config
    if cfg.use_sharp:
        raise SimharnessError("use_sharp: the replay never enables SHARP (it needs CUDA and "
                              "InfiniBand SHARP); turn use_sharp off for the replay.")
    if cfg.rank_offset:
        raise SimharnessError(f"rank_offset={cfg.rank_offset}: a replay runs ranks "
                              f"0..{cfg.world_size_resolved - 1}; use rank_offset 0.")
    if cfg.nccl_communicator_config_path:
        raise SimharnessError("nccl_communicator_config_path is not replayed; drop it (NCCL "
                              "options do not change the groups).")
    if cfg.num_distributed_optimizer_instances > 1 or cfg.hierarchical_context_parallel_sizes:
        import importlib.util

        if importlib.util.find_spec("einops") is None:
            raise SimharnessError("megatron-core needs einops for hierarchical groups "
                                  "(pip install einops).")
    return ver, profile


def init_kwargs(layout: Layout, ps: Any, timeout_s: float) -> dict[str, Any]:
    """Keyword arguments of ``initialize_model_parallel`` for the layout's config."""
    cfg = layout.config
    params = inspect.signature(ps.initialize_model_parallel).parameters
    wanted = set(megatron_kwargs(layout.mcore)) & set(params)
    kw: dict[str, Any] = {}
    for name in sorted(wanted):
        if name in ("get_embedding_ranks", "get_position_embedding_ranks", "local_world_size",
                    "nccl_communicator_config_path"):
            continue
        value: Any
        if name == "create_gloo_process_groups":
            value = cfg.use_gloo_process_groups
        elif name == "distributed_timeout_minutes":
            value = max(1, int(-(-timeout_s // 60)))
        elif not hasattr(cfg, name):
            continue
        else:
            value = getattr(cfg, name)
        if isinstance(value, tuple):
            value = list(value) or None
        kw[name] = value
    if "create_all_gather_group" in params:
        kw["create_all_gather_group"] = bool(cfg.create_all_gather_group)
    return kw


@dataclass
class LoggedGroup:
    index: int
    ranks: list[int]
    backend: str | None      # as Megatron passed it
    used: str                # backend created
    desc: str | None
    pg: Any                  # the object returned (members) or None


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


def compare_log(layout: Layout, log: list[LoggedGroup], rank: int) -> tuple[list[dict], bool]:
    """Megatron's ``new_group`` calls against the plan's creation order, call by call.

    Returns ``(mismatches, aligned)``; ``aligned`` is True when every call
    matched (then the plan's kinds and group numbers name Megatron's groups).
    """
    plan = layout.creation_order
    out: list[dict[str, Any]] = []
    aligned = len(plan) == len(log)
    if len(plan) != len(log):
        out.append({"check": "creation_order", "rank": rank, "kind": None, "group": None,
                    "desc": None, "expected": len(plan), "actual": len(log),
                    "message": f"Megatron made {len(log)} new_group calls, the plan "
                               f"{len(plan)}."})
    counters: dict[str, int] = {}
    for i, gc in enumerate(plan):
        g = counters.get(gc.kind, 0)
        counters[gc.kind] = g + 1
        if i >= len(log):
            break
        e = log[i]
        meg_backend = e.backend or "nccl"
        if e.desc != gc.desc or e.ranks != list(gc.ranks) or meg_backend != gc.backend:
            aligned = False
            if len(out) < 32:
                out.append({"check": "creation_order", "rank": rank, "kind": gc.kind, "group": g,
                            "index": i, "desc": gc.desc,
                            "expected": [gc.desc, list(gc.ranks), gc.backend],
                            "actual": [e.desc, e.ranks, meg_backend],
                            "message": f"new_group call {i}: the plan creates {gc.kind} group "
                                       f"{g} {gc.desc} {list(gc.ranks)} ({gc.backend}); Megatron "
                                       f"created {e.desc} {e.ranks} ({meg_backend})."})
    return out, aligned
