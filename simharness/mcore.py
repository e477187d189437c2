"""The installed megatron-core: its version, the simharness profile it follows, and what
Megatron mode needs from it.

Nothing here imports torch or megatron-core at import time: :func:`installed_version`
reads the package metadata, :func:`import_parallel_state` imports Megatron's
``parallel_state`` only when called. Version handling (:func:`profile_for_version`):
0.16.x/0.17.x follow profile "0.16", 0.18.x profile "0.18", 0.19.x and later profile
"0.19" (the table is :data:`simharness.profiles.PROFILES`). 0.16/0.17 take
``create_all_gather_group=`` (detected with ``inspect.signature``); 0.18+ build the
all-gather groups with ``create_all_gather_groups(for_expert_parallelism=ep > 1)``
after init. SHARP is never used (it needs CUDA).

The ``new_group`` recorder that runs Megatron's ``initialize_model_parallel`` is
:func:`simharness.replay.megatron_engine.run_megatron`; the comparison of what it
recorded with the plan is :mod:`simharness.creation_log`.
"""

from __future__ import annotations

import inspect
from typing import Any

from .errors import SimharnessError
from .layout import Layout
from .profiles import DEFAULT_MCORE, megatron_kwargs, profile_for_release

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


__all__ = ["DIST", "check_megatron", "import_parallel_state", "init_kwargs",
           "installed_version", "profile_for_version"]
