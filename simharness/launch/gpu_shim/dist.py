"""``torch.distributed``: ``init_process_group``, ``new_group`` and ``split_group`` with GPU
backends on gloo, GPU-only options dropped (and listed), a ``ProcessGroupNCCL.Options``
stand-in on CPU builds."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .lifecycle import Shim

from .common import (
    Ignored,
    _replace_everywhere,
    _set,
    map_backend,
    user_site,
)


def _bind(func: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    """``func``'s arguments by name (defaults left out)."""
    return dict(inspect.signature(func).bind(*args, **kwargs).arguments)


def _patch_dist(shim: Shim) -> None:
    import torch.distributed as dist
    import torch.distributed.device_mesh  # noqa: F401  (binds the names we replace)
    from torch.distributed import distributed_c10d as c10d

    orig_init, orig_new, orig_split = (c10d.init_process_group, c10d.new_group,
                                       c10d.split_group)

    def drop(call: str, bound: dict[str, Any]) -> None:
        mapped = map_backend(bound.get("backend"))
        if mapped != bound.get("backend"):
            shim.ignored.append(Ignored(call, f"backend {bound['backend']!r} (runs on gloo)",
                                        user_site()))
            bound["backend"] = mapped
        for key in ("pg_options", "device_id"):
            if bound.get(key) is not None:
                shim.ignored.append(Ignored(call, f"{key}={bound[key]!r}", user_site()))
                bound[key] = None

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        bound = _bind(orig_init, args, kwargs)
        drop("init_process_group", bound)
        return orig_init(**bound)

    def new_group(*args: Any, **kwargs: Any) -> Any:
        bound = _bind(orig_new, args, kwargs)
        drop("new_group", bound)
        return orig_new(**bound)

    def split_group(*args: Any, **kwargs: Any) -> Any:
        bound = _bind(orig_split, args, kwargs)
        drop("split_group", bound)
        parent = bound.get("parent_pg") or c10d._get_default_group()
        splits = bound.get("split_ranks")
        if not splits:
            raise ValueError("split_group needs split_ranks (a list of lists of ranks of the "
                             "parent group)")
        me = dist.get_rank(parent)
        world = parent is c10d._get_default_group()
        mine = None
        for split in splits:
            ranks = [dist.get_global_rank(parent, r) for r in split]
            if world:  # every rank takes part in every new_group, as torch expects
                pg = orig_new(ranks=ranks, timeout=bound.get("timeout"),
                              group_desc=bound.get("group_desc"))
                if me in split:
                    mine = pg
            elif me in split:
                mine = orig_new(ranks=ranks, timeout=bound.get("timeout"),
                                group_desc=bound.get("group_desc"),
                                use_local_synchronization=True)
        return mine

    for original, value in ((orig_init, init_process_group), (orig_new, new_group),
                            (orig_split, split_group)):
        _replace_everywhere(shim, "torch.distributed", original, value)
    if not hasattr(dist, "ProcessGroupNCCL"):
        _set(shim, dist, "ProcessGroupNCCL", _nccl_stand_in())


def _nccl_stand_in() -> type:
    class _Config:
        """Accepts any NCCL communicator config field (cga_cluster_size, max_ctas, ...)."""

    class ProcessGroupNCCL:
        """Stand-in for a CPU build: only ``Options`` (dropped at group creation)."""

        class Options:
            def __init__(self, is_high_priority_stream: bool = False):
                self.is_high_priority_stream = is_high_priority_stream
                self.config = _Config()

            def __repr__(self) -> str:
                fields = {"is_high_priority_stream": self.is_high_priority_stream,
                          **vars(self.config)}
                return f"ProcessGroupNCCL.Options({fields})"

    return ProcessGroupNCCL
