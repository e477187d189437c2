"""Processes a shimmed rank starts with ``multiprocessing``'s ``spawn`` get the shim too.

A forked child inherits the rank's patched torch; a spawned one is a fresh interpreter
(``python -c "from multiprocessing.spawn import spawn_main; spawn_main(...)"``,
``multiprocessing/spawn.py``'s ``get_command_line``), with a CPU torch that has no GPU:
``torch.cuda.device_count()`` is 0 there. Megatron-Core's persistent checkpoint worker
(``PersistentAsyncCaller.async_loop``, ``dist_checkpointing/strategies/async_utils.py``)
starts that way and calls ``torch.cuda.set_device(rank % torch.cuda.device_count())``
first: the worker died, and its rank waited on the worker's queue until the timeout.
``torch.multiprocessing.spawn`` and ``mp.get_context("spawn")`` take the same path.

While the shim is installed, :func:`_patch_spawn` puts a prologue before that command's
program: the child installs the shim as its rank has it (the same local rank, local world
size, GPU model and ``compute_stops``), then ``spawn_main`` runs as before. The child makes
no process group of its own unless its code does. ``forkserver`` children are forked from a
server process started without the shim, and are not covered.
"""

from __future__ import annotations

import multiprocessing.spawn
import os
from typing import TYPE_CHECKING

from .common import _set

if TYPE_CHECKING:
    from .lifecycle import Shim

#: Where ``simharness`` is imported from, so that the child finds it before ``spawn_main``
#: prepares ``sys.path`` from the parent's.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def prologue(local_rank: int, local_world_size: int, gpu: str, compute_stops: bool) -> str:
    """The Python a spawned child runs before ``spawn_main``: the shim, installed as its
    rank's (:func:`simharness.launch.gpu_shim.install`; the child's own subgroups, if it
    makes any, connect at creation).

    >>> prologue(1, 8, "h100", False).split("; ")[-2]
    "install(1, 8, gpu='h100', compute_stops=False, lazy_groups=False)"
    """
    return (f"import sys; sys.path.insert(0, {_ROOT!r}); "
            f"from simharness.launch.gpu_shim import install; "
            f"install({local_rank}, {local_world_size}, gpu={gpu!r}, "
            f"compute_stops={compute_stops}, lazy_groups=False); ")


def _patch_spawn(shim: Shim, compute_stops: bool) -> None:
    """Spawned children of this process run :func:`prologue` first (see the module doc)."""
    original = multiprocessing.spawn.get_command_line
    first = prologue(shim.local_rank, shim.local_world_size, shim.gpu.key, compute_stops)

    def get_command_line(**kwds: object) -> list[str]:
        cmd = list(original(**kwds))
        if "-c" in cmd[:-1]:   # a frozen executable takes no program: left as it is
            at = cmd.index("-c") + 1
            cmd[at] = first + cmd[at]
        return cmd

    _set(shim, multiprocessing.spawn, "get_command_line", get_command_line)
