"""Subgroups recorded now, connected on first use: :func:`lazy_gloo_subgroups`.

A faithful capture rank (:mod:`.rank`) makes every ``new_group`` call for real, so a
collective on any group computes real data. Megatron's init makes about 500 such calls per
rank, each member group a ``ProcessGroupGloo`` (two worker threads, a device, and a
sequence number read from the group's rank 0 through the store) that the init never uses.
Inside :func:`lazy_gloo_subgroups`, torch's ``_new_process_group_helper``
(torch/distributed/distributed_c10d.py:2169, the ``Backend.GLOO`` branch) builds a
:class:`LazyGlooGroup` instead: a ``ProcessGroup`` with the same rank, size, store prefix,
name, description and ``pg_map`` entry (``get_backend`` says ``gloo``), whose real
``ProcessGroupGloo`` is made, and registered as its cpu and cuda backend, the first time
a collective runs on it or someone asks for its backend. torch takes a ``ProcessGroup``
subclass from a backend constructor as the group itself (distributed_c10d.py, "if
issubclass(type(backend_class), ProcessGroup)"), as it does for its threaded test backend.

What differs from an eager group: a group never used has no gloo threads, and its
sequence number is only agreed when it is first used; every collective, object collective,
point-to-point call and functional collective on it runs on a real gloo backend (the
faithful tests check sums, gathers and broadcasts on subgroups).

Every call torch makes on the group object goes to the real backend's own Python method
(:data:`COLLECTIVES`, :data:`RENAMED`, the coalesced forms), never to ``ProcessGroup``'s
C++ method through this subclass. For a Python subclass, torch's trampoline
(``PyProcessGroup``, torch/csrc/distributed/c10d/PyProcessGroup.hpp in torch 2.13:
``WORK_OVERRIDE`` and ``reduce_scatter_single_coalesced`` take the GIL to look for a Python
override, and call the base class's method still holding it) runs gloo's ``enqueue`` under
the GIL, where it waits for the work queue's lock. A gloo worker holds that lock while it
drops the work it has just finished (``ProcessGroupGloo::runLoop``); when the caller has
already dropped its handle, the worker's is the last reference, and the work's saved
thread-local state holds Python objects (under the GPU shim, its ``TorchFunctionMode``),
whose release takes the GIL. Each thread then waits for the other for good: a loop of
coalesced reduce-scatters (Megatron's distributed optimizer, ``_coalescing_manager`` and
``reduce_scatter_tensor``) stopped after a few iterations, at random. The backend's own
methods release the GIL before they enqueue, as a group connected at creation does; and
each of them connects a lazy group first, inside the coalescing manager too.

:func:`agree_connected` closes a gap in gloo's own connection. Of the two sides of a pair,
the active one is connected once it has written its sequence number, the passive one once
its listener has read it (gloo's ``Pair::connect``, gloo/transport/tcp/pair.cc at pytorch/gloo
5b46c340), so ``connectFullMesh`` can return on one member while another is still
connecting. A member that then destroys the group at once (``Pair::close`` resets the
socket; Megatron's ``destroy_model_parallel`` destroys its gloo twins when a test ends)
fails the other with "Gloo connectFullMesh failed ... Connection closed by peer". With every
NCCL-style group connecting at creation, those later connections kept the members in step;
with lazy ones nothing does, so every real gloo group made here (a lazy one's on first use,
and the shim's eager gloo groups) waits until all its members are connected.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
from torch._C._distributed_c10d import (
    AllgatherOptions,
    ProcessGroup,
    ReduceScatterOptions,
    Work,
)
from torch.distributed import distributed_c10d as c10d

_PG: Any = ProcessGroup  # the base class's own methods, called past this class's overrides

#: The collectives torch's Python API (and the functional collectives, through the
#: ProcessGroup trampoline) call on a group object; each goes to the real backend.
COLLECTIVES = (
    "allreduce", "allreduce_coalesced", "allgather", "_allgather_base", "allgather_coalesced",
    "broadcast", "reduce", "gather", "scatter", "reduce_scatter", "_reduce_scatter_base",
    "alltoall", "alltoall_base", "barrier", "monitored_barrier", "send", "recv", "recv_anysource",
    "_get_sequence_number_for_group",  # agreed with the group's rank 0: connects it too
)


class LazyGlooGroup(ProcessGroup):
    """A gloo group whose backend is created on first use (see the module doc)."""

    def __init__(self, store: Any, rank: int, size: int, timeout: Any = None):
        _PG.__init__(self, rank, size)  # (store, rank, size) cannot build a subclass
        self._lazy_args = (store, rank, size, timeout)
        self._lazy_real: Any = None
        self._lazy_name = ""
        self._lazy_desc = ""
        # torch sets global_ranks_in_group and group_name here; copied onto the real one.
        self.options = types.SimpleNamespace()

    @property
    def connected(self) -> bool:
        """Whether the real gloo backend exists yet."""
        return self._lazy_real is not None

    def real_backend(self) -> Any:
        """The real ``ProcessGroupGloo``, made (and registered on this group) on first call."""
        if self._lazy_real is None:
            store, rank, size, timeout = self._lazy_args
            real = _REAL_GLOO(store, rank, size, timeout=timeout)
            for key, value in vars(self.options).items():
                setattr(real.options, key, value)
            agree_connected(store, size, timeout)
            real._set_sequence_number_for_group()
            for device in ("cpu", "cuda"):   # as torch registers a gloo group's backend
                _PG._register_backend(self, torch.device(device),
                                               _PG.BackendType.GLOO, real)
            _PG._set_group_name(self, self._lazy_name)
            _PG._set_group_desc(self, self._lazy_desc)
            self._lazy_real = real
        return self._lazy_real

    # torch's helper calls these while building the group.
    def _set_sequence_number_for_group(self) -> None:
        """Deferred: the real backend agrees its sequence number when it is made."""

    def _set_group_name(self, name: str) -> None:
        self._lazy_name = name
        if self._lazy_real is not None:
            _PG._set_group_name(self, name)

    def _set_group_desc(self, desc: str) -> None:
        self._lazy_desc = desc
        if self._lazy_real is not None:
            _PG._set_group_desc(self, desc)

    @property
    def group_name(self) -> Any:  # torch's GroupName, a str
        return self._lazy_name

    @property
    def group_desc(self) -> str:
        return self._lazy_desc

    @property
    def _device_types(self) -> list[torch.device]:
        return [torch.device("cuda"), torch.device("cpu")]  # a real gloo group's answer

    def _get_backend(self, device: Any) -> Any:
        return self.real_backend()

    def name(self) -> str:
        return "gloo"

    # The coalescing manager's, given a device: the backend's own (gloo has none, and says
    # so, as it does for a group connected at creation).
    def _start_coalescing(self, device: Any = None) -> None:
        self.real_backend()._start_coalescing()

    def _end_coalescing(self, device: Any = None) -> Any:
        return self.real_backend()._end_coalescing()

    def _get_backend_name(self) -> str:
        return "gloo"


#: The counter under a group's store prefix that its members add 1 to once connected.
CONNECTED_KEY = "simharness-connected"


def agree_connected(store: Any, size: int, timeout: Any = None) -> None:
    """Return once all ``size`` members of the gloo group whose store (its ``PrefixStore``)
    is ``store`` have called this, i.e. have finished connecting it (see the module doc).

    Each member adds 1 to :data:`CONNECTED_KEY`; the member that completes a multiple of
    ``size`` sets the key of that round, which every member waits for, so a group name used
    again (``use_local_synchronization=True`` names groups by their ranks) agrees again.
    Raises ``RuntimeError`` naming the group's count when a member does not come within
    ``timeout`` (a ``timedelta``; None: 30 minutes, gloo's default).
    """
    if size < 2:
        return
    arrived = store.add(CONNECTED_KEY, 1)
    done = f"{CONNECTED_KEY}/{(arrived - 1) // size}"
    if arrived % size == 0:
        store.set(done, "1")
    wait = timeout if isinstance(timeout, timedelta) else timedelta(minutes=30)
    try:
        store.wait([done], wait)
    except Exception as exc:  # noqa: BLE001  (torch's store timeout, a DistStoreError)
        have = store.add(CONNECTED_KEY, 0) - ((arrived - 1) // size) * size
        raise RuntimeError(
            f"gloo group: {have} of its {size} members finished connecting within "
            f"{wait.total_seconds():g} s; the others did not reach the group or failed "
            f"while connecting it (see their output)") from exc


def _delegate(method: str, backend_method: str | None = None) -> Any:
    """``method`` of the group, run as the real backend's ``backend_method`` (default: the
    same name)."""
    def call(self: LazyGlooGroup, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.real_backend(), backend_method or method)(*args, **kwargs)

    call.__name__ = method
    return call


#: The group-level calls torch's Python API makes on the group object itself, each to the
#: real backend's method of the same meaning (torch 2.13: ``all_gather_into_tensor`` calls
#: ``group.all_gather_single``, ``reduce_scatter_tensor`` ``group.reduce_scatter_single``,
#: ``all_to_all_single`` ``group.all_to_all_single``). ``ProcessGroup``'s own method would
#: run gloo under the GIL (see the module doc).
RENAMED = {"all_gather_single": "_allgather_base",
           "reduce_scatter_single": "_reduce_scatter_base",
           "all_to_all_single": "alltoall_base"}


class AllOf(Work):
    """One work standing for several (a coalesced call made of one backend call per
    tensor): ``wait`` waits for each in order."""

    def __init__(self, works: list[Any]):
        super().__init__()
        self._works = works

    def wait(self, timeout: Any = None) -> bool:
        for work in self._works:
            if timeout:
                work.wait(timeout)
            else:
                work.wait()
        return True

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self._works)


def _all_gather_coalesced(self: LazyGlooGroup, outputs: list[Any], inputs: list[Any],
                          opts: Any = None) -> Any:
    """``all_gather_single_coalesced`` (the coalescing manager's fast path): gloo's
    ``allgather_coalesced`` with each output split in one chunk per member, as gloo's own
    ``allgather_into_tensor_coalesced`` does (ProcessGroupGloo.cpp, torch 2.13)."""
    real = self.real_backend()
    size = self.size()
    lists = [[out.chunk(size)[r] for out in outputs] for r in range(size)]
    return real.allgather_coalesced(lists, list(inputs),
                                    opts if opts is not None else AllgatherOptions())


def _reduce_scatter_coalesced(self: LazyGlooGroup, outputs: list[Any], inputs: list[Any],
                              opts: Any = None) -> Any:
    """``reduce_scatter_single_coalesced`` (the coalescing manager's fast path): gloo's
    ``_reduce_scatter_base`` for each tensor, in order, as gloo's own
    ``reduce_scatter_tensor_coalesced`` issues them (one all-reduce each)."""
    real = self.real_backend()
    opts = opts if opts is not None else ReduceScatterOptions()
    works = [real._reduce_scatter_base(out, inp, opts)
             for out, inp in zip(outputs, inputs, strict=True)]
    return works[0] if len(works) == 1 else AllOf(works)


for _name in COLLECTIVES:
    setattr(LazyGlooGroup, _name, _delegate(_name))
for _name, _backend_name in RENAMED.items():
    if hasattr(_PG, _name):
        setattr(LazyGlooGroup, _name, _delegate(_name, _backend_name))
# The coalesced forms under torch 2.13's names and the older ones a caller may use.
for _name in ("all_gather_single_coalesced", "allgather_into_tensor_coalesced"):
    if hasattr(_PG, _name):
        setattr(LazyGlooGroup, _name, _all_gather_coalesced)
for _name in ("reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced"):
    if hasattr(_PG, _name):
        setattr(LazyGlooGroup, _name, _reduce_scatter_coalesced)

_REAL_GLOO = c10d.ProcessGroupGloo


@contextlib.contextmanager
def lazy_gloo_subgroups(cls: type = LazyGlooGroup) -> Iterator[None]:
    """While inside, the gloo groups torch builds are ``cls`` (a :class:`LazyGlooGroup`
    or a subclass of it)."""
    saved = c10d.ProcessGroupGloo
    c10d.ProcessGroupGloo = cls  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        c10d.ProcessGroupGloo = saved  # type: ignore[misc]


def census() -> dict[str, int]:
    """How many of this process's groups are lazy and not yet connected, and how many are
    connected (lazy ones used since, and the eager ones: the default group).

    A capture getter (``--getter simharness.capture.lazy_group:census()``) reads it.
    """
    groups = list(c10d._world.pg_map)
    idle = sum(1 for g in groups if isinstance(g, LazyGlooGroup) and not g.connected)
    return {"idle": idle, "connected": len(groups) - idle}
