"""``torch.distributed``: ``init_process_group``, ``new_group`` and ``split_group`` with GPU
backends on gloo, GPU-only options dropped (and listed), a ``ProcessGroupNCCL.Options``
stand-in on CPU builds, and subgroups asked of NCCL connected on first use, as NCCL does.

NCCL creates a communicator when a collective first runs on the group
(``ProcessGroupNCCL::getNCCLComm``), so a ``new_group`` whose ``ranks`` differ between the
ranks (each rank passing a list that depends on its rank) goes unnoticed until the group is
used. gloo connects every pair of a group when it is created, so the same call makes the
ranks wait on each other until gloo's timeout. With ``lazy_groups`` (the default;
``SIMHARNESS_LAZY_GROUPS=0`` turns it off), a subgroup whose backend was a GPU one
(``nccl``, or the default group's when that was) is a
:class:`~simharness.launch.lazy_group.LazyGlooGroup` (the real gloo group is made, eagerly
connected, on first use), whose first use also checks, through the group's store, that
every rank that made the same call and used its group passed the same ranks, and raises
:class:`~simharness.errors.GroupMismatch` naming the call's line, the lists and the fix
when they did not: where NCCL would hang or mix up data (:func:`_check_members`).
Groups asked of gloo (Megatron's gloo twins, ``monitored_barrier``'s) connect at creation,
as gloo does (``TORCH_GLOO_LAZY_INIT`` stays unset: see docs/design-notes.md, "gloo connects
eagerly in run and launch"); every eagerly connected gloo group returns once all its
members are connected (:func:`~simharness.launch.lazy_group.agree_connected`)."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .lifecycle import Shim

from ...errors import GROUP_MISMATCH_PREFIX, GroupMismatch
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


def _nccl_like_group() -> type:
    """:class:`LazyGlooGroup` whose first use checks that its members agree on its ranks."""
    from ..lazy_group import LazyGlooGroup  # the one lazy gloo group (capture uses it too)

    class NcclLikeGroup(LazyGlooGroup):
        site = "<unknown>:0"

        def real_backend(self) -> Any:
            if self._lazy_real is None:
                _check_members(self)
            return super().real_backend()

        def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> Any:
            """As gloo's, also on first use: the group's rank 0 names the members that do not
            reach the group within ``timeout`` (torch's "Rank 1 failed to pass
            monitoredBarrier in 1000 ms") instead of waiting for them to connect."""
            if self._lazy_real is None and isinstance(timeout, timedelta):
                _check_members(self, within=timeout, all_absent=wait_all_ranks)
            return self.real_backend().monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)

    return NcclLikeGroup


#: Keys under a group's store prefix (shared by every rank that made the same call, since
#: torch names a group by its call's number): each user's record, the list of all users'
#: records, and each user's verdict ("ok" or the mismatch it found).
_MEMBER, _USERS, _VERDICT = "simharness-members/", "simharness-users", "simharness-verdict/"


def _check_members(group: Any, within: timedelta | None = None,
                   all_absent: bool = False) -> None:
    """Run by each member on its first use of ``group``, before gloo connects it.

    Each member writes its ranks and creating line under the group's store prefix, appends
    them to the call's list of users, and reads the other members' records; then it reads
    the whole list, in which the ranks that made the same call with another list and used
    their group appear too (torch names both groups after the call: on GPUs their NCCL
    communicators share the store's keys, here their gloo connections would). A difference
    raises :class:`GroupMismatch` at once; the member leaves it as its verdict, so that
    its members waiting for theirs raise it as well instead of connecting. Of two users with
    different lists, whichever reads the list last sees the other's record, so at most one
    of the groups of a call connects. A member that never writes (it never uses the group)
    is waited for as long as the group's timeout, then the real group is made, as gloo
    would. ``within`` (a ``monitored_barrier`` on the group's rank 0): the members absent
    after that long are named in a ``RuntimeError``."""
    import torch.distributed as dist

    store, group_rank, _size, timeout = group._lazy_args
    ranks = [int(r) for r in getattr(group.options, "global_ranks_in_group", []) or []]
    me = dist.get_rank()
    if me not in ranks:
        return
    mine = json.dumps({"rank": me, "ranks": ranks, "site": group.site})
    store.set(_MEMBER + str(me), mine)
    store.append(_USERS, mine + "\n")
    if len(ranks) == 1:  # connects to nobody (NCCL's one-rank communicator neither): no check
        store.set(_VERDICT + str(me), "ok")
        return
    monitor = within is not None and group_rank == 0
    wait = within if monitor and within is not None else (
        timeout if isinstance(timeout, timedelta) else timedelta(minutes=30))
    deadline = time.monotonic() + wait.total_seconds()
    absent = []
    for other in ranks:
        if other == me:
            continue
        key = _MEMBER + str(other)
        try:
            store.wait([key], timedelta(seconds=max(deadline - time.monotonic(), 0.001)))
        except Exception:  # noqa: BLE001  (torch's store timeout)
            if not monitor:
                return  # the real group decides, as gloo would
            absent.append(ranks.index(other))
            if not all_absent:
                break
            continue
        _raise_if_other(group, store, me, ranks, json.loads(store.get(key)))
    for line in store.get(_USERS).decode().splitlines():
        _raise_if_other(group, store, me, ranks, json.loads(line))
    store.set(_VERDICT + str(me), "ok")
    if absent:
        ms = int(wait.total_seconds() * 1000)
        who = (f"Rank {absent[0]}" if len(absent) == 1
               else "Ranks " + ", ".join(str(a) for a in absent))
        raise RuntimeError(f"{who} failed to pass monitoredBarrier in {ms} ms (simharness "
                           f"shim: {'it has' if len(absent) == 1 else 'they have'} not used "
                           f"this NCCL-style group, which connects on first use)")
    keys = [_VERDICT + str(r) for r in ranks if r != me]
    try:
        store.wait(keys, timedelta(seconds=max(deadline - time.monotonic(), 0.001)))
    except Exception:  # noqa: BLE001  (torch's store timeout)
        return  # a member that never checked: the real group decides, as above
    for key in keys:
        found = store.get(key).decode()
        if found != "ok":
            raise GroupMismatch(found)


def _raise_if_other(group: Any, store: Any, me: int, ranks: list[int],
                    theirs: dict[str, Any]) -> None:
    """Raise :class:`GroupMismatch` (and leave it as this member's verdict) when the record
    ``theirs`` has other ranks than ``ranks``."""
    if theirs["ranks"] == ranks:
        return
    other = theirs["rank"]
    if theirs["site"] == group.site:
        call, lists = (f"at {group.site}", f"rank {me} passed {ranks}, rank {other} passed "
                       f"{theirs['ranks']}")
    else:
        call, lists = ("", f"rank {me} passed {ranks} at {group.site}, rank {other} passed "
                           f"{theirs['ranks']} at {theirs['site']}")
    msg = (f"{GROUP_MISMATCH_PREFIX}the new_group call {call}{' ' if call else ''}(group "
           f"{group._lazy_name!r}) was given different ranks on different ranks: {lists}. "
           f"Every rank must pass the same ranks to the same new_group call, members or "
           f"not: NCCL connects a group on first use, and the groups of one call share its "
           f"store keys, so on GPUs this hangs or mixes up data at the first collective. "
           f"Fix: compute the ranks the same way on every rank (create every group on every "
           f"rank, as Megatron's initialize_model_parallel does, and keep the one this rank "
           f"is in), or pass use_local_synchronization=True when only the members create "
           f"the group")
    store.set(_VERDICT + str(me), msg)
    raise GroupMismatch(msg)


def _patch_dist(shim: Shim, lazy_groups: bool = False) -> None:
    import torch.distributed as dist
    import torch.distributed.device_mesh  # noqa: F401  (binds the names we replace)
    from torch.distributed import distributed_c10d as c10d

    orig_init, orig_new, orig_split = (c10d.init_process_group, c10d.new_group,
                                       c10d.split_group)
    nccl_like = _nccl_like_group() if lazy_groups else None
    from ..lazy_group import lazy_gloo_subgroups
    default_gpu = [True]  # the default group's backend was a GPU one (or torch's choice)

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
        asked = bound.get("backend")
        default_gpu[0] = asked is None or map_backend(asked) != asked
        drop("init_process_group", bound)
        return orig_init(**bound)

    def new_group(*args: Any, **kwargs: Any) -> Any:
        bound = _bind(orig_new, args, kwargs)
        asked = bound.get("backend")
        gpu = default_gpu[0] if asked is None else map_backend(asked) != asked
        drop("new_group", bound)
        if nccl_like is None or not gpu:
            return _all_connected(orig_new(**bound), bound.get("timeout"))
        with lazy_gloo_subgroups(nccl_like):
            pg = orig_new(**bound)
        if isinstance(pg, nccl_like):
            pg.site = user_site()  # type: ignore[attr-defined]  # NcclLikeGroup's
        return pg

    split_group = _split_group(orig_split, orig_new, drop)

    for original, value in ((orig_init, init_process_group), (orig_new, new_group),
                            (orig_split, split_group)):
        _replace_everywhere(shim, "torch.distributed", original, value)
    orig_gather = getattr(c10d, "all_gather_single", None)
    if orig_gather is not None:
        _replace_everywhere(shim, "torch.distributed", orig_gather, _flat_gather(orig_gather))
    if not hasattr(dist, "ProcessGroupNCCL"):
        _set(shim, dist, "ProcessGroupNCCL", _nccl_stand_in())


def _all_connected(pg: Any, timeout: Any) -> Any:
    """``pg``, once all its members are connected when it is an eagerly connected gloo group
    (:func:`~simharness.launch.lazy_group.agree_connected`: a member that destroys the group
    at once would otherwise fail one still connecting)."""
    from torch.distributed import distributed_c10d as c10d

    from ..lazy_group import LazyGlooGroup, agree_connected

    if (pg is None or pg is c10d.GroupMember.NON_GROUP_MEMBER or isinstance(pg, LazyGlooGroup)
            or pg.size() < 2 or c10d._world.pg_map.get(pg, ("",))[0] != "gloo"):
        return pg
    agree_connected(c10d._get_process_group_store(pg), pg.size(), timeout)
    return pg


def _split_group(orig_split: Callable[..., Any], orig_new: Callable[..., Any],
                 drop: Callable[[str, dict[str, Any]], None]) -> Callable[..., Any]:
    """``split_group`` emulated with ``new_group``, one per split (all ranks take part when
    the parent is the world; ``use_local_synchronization`` otherwise)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

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
        return _all_connected(mine, bound.get("timeout"))

    return split_group


def _flat_gather(original: Callable[..., Any]) -> Callable[..., Any]:
    """``all_gather_single`` (and so ``all_gather_into_tensor``, ``_all_gather_base``) into
    an output of any shape with ``world_size`` times the input's elements, as NCCL takes it
    (``ProcessGroupNCCL::_allgather_base`` checks only the element count); gloo wants the
    inputs' concatenation shape (``(world_size * n0, *rest)``), so a contiguous output of
    another shape is gathered through a view of that shape: the same bytes land."""
    import torch.distributed as dist

    def all_gather_single(output_tensor: Any, input_tensor: Any, group: Any = None,
                          async_op: bool = False) -> Any:
        out = output_tensor
        try:
            size = dist.get_world_size(group)
        except (RuntimeError, ValueError):
            size = -1
        if size > 0 and out.is_contiguous() and out.numel() == size * input_tensor.numel():
            shape = ((size * input_tensor.shape[0], *input_tensor.shape[1:])
                     if input_tensor.dim() else (size,))
            if tuple(out.shape) != shape and dist.get_backend(group) == "gloo":
                out = out.view(shape)
        return original(out, input_tensor, group, async_op)

    return all_gather_single


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
