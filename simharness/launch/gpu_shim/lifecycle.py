"""``install(local_rank, local_world_size)`` and :class:`Shim`: patch every surface, undo
them in reverse order, one shim per process."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ... import envvars
from .accelerator import _patch_accelerator
from .common import (
    MAPPED_CUDA,
    MAPPED_DIST,
    Ignored,
    ShimError,
    _unset_env,
)
from .cuda import _patch_cuda, _patch_profiler
from .dist import _patch_dist
from .identity import DEFAULT_GPU, ENV_GPU, GPUS, GpuSpec, gpu_spec
from .nccl import _home_dir, nccl_settings
from .parallel import _patch_ddp, _patch_fsdp
from .rng import RNG_CALLS, _patch_rng
from .spawned import _patch_spawn
from .streams import NVTX_CALLS, STREAM_CALLS, _patch_streams
from .tensors import _enter_tensor_mode

#: Subgroups asked of NCCL connect on first use, as NCCL does, unless
#: ``SIMHARNESS_LAZY_GROUPS=0`` (every group connects at creation).
ENV_LAZY_GROUPS = "SIMHARNESS_LAZY_GROUPS"

_LOCK = threading.Lock()
_ACTIVE: Shim | None = None


@dataclass
class Shim:
    """The installed shim of one process: what it maps, what it ignored so far."""

    local_rank: int
    local_world_size: int
    mapped: tuple[str, ...]
    ignored: list[Ignored] = field(default_factory=list)
    current_device: int = 0
    origins: Any = None  # cuda_origin.Origins when compute stops (capture), else None
    gpu: GpuSpec = GPUS[DEFAULT_GPU]  # what each local device reports (.identity)
    generators: Any = None  # one CPU generator per local device (.rng)
    streams: dict[int, Any] = field(default_factory=dict)  # current stream per device
    _undo: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def ignored_summary(self, limit: int = 12) -> list[str]:
        """The distinct ignored options (``call: detail``), most frequent first, with counts.

        >>> s = Shim(0, 1, ())
        >>> s.ignored += [Ignored("new_group", "pg_options=X", "a.py:1")] * 3
        >>> s.ignored_summary()
        ['new_group: pg_options=X (3x)']
        """
        counts: dict[str, int] = {}
        for item in self.ignored:
            key = f"{item.call}: {item.detail}"
            counts[key] = counts.get(key, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        return [k if n == 1 else f"{k} ({n}x)" for k, n in ranked]

    def uninstall(self) -> None:
        """Restore every patched name and leave the tensor mode (last patched, first undone)."""
        global _ACTIVE
        with _LOCK:
            while self._undo:
                self._undo.pop()()
            if _ACTIVE is self:
                _ACTIVE = None


def active() -> Shim | None:
    """The shim installed in this process, or None."""
    return _ACTIVE


def install(local_rank: int, local_world_size: int, *, lazy_gloo: bool = False,
            compute_stops: bool = False, gpu: str | None = None,
            lazy_groups: bool | None = None) -> Shim:
    """Patch torch in this process as one GPU per local rank; returns the :class:`Shim`.

    ``gpu``: the GPU model each device reports (a name in
    :data:`~.identity.GPUS`); None reads ``SIMHARNESS_GPU``, then the default, the H100.
    An unknown name raises :class:`~.identity.UnknownGPU`.

    ``lazy_groups``: subgroups asked of NCCL are connected on first use, as NCCL does
    (:mod:`.dist`). None: on unless ``SIMHARNESS_LAZY_GROUPS=0``, and never with
    ``compute_stops`` (capture makes its subgroups lazy itself).

    ``lazy_gloo`` (capture): ``TORCH_GLOO_LAZY_INIT=1`` unless already set, so a group's
    pairs connect on first use. Not the default: under lazy init a gloo ``recv`` from a rank
    that never touches the pair can wait for the connection past any timeout, so
    ``monitored_barrier`` stops naming the absent rank (``bench/gloo_lazy_barrier.py``).

    ``compute_stops`` (capture): tensors put on CUDA are tracked and compute on them stops
    with :class:`NeedsGPU` (:mod:`.cuda_origin`); without it they are plain CPU tensors.
    Raises :class:`ShimError` when a shim is already installed or the values are out of
    range.
    """
    global _ACTIVE
    if not (isinstance(local_world_size, int) and local_world_size >= 1
            and isinstance(local_rank, int) and 0 <= local_rank < local_world_size):
        raise ShimError(f"local_rank {local_rank!r} must be in 0..local_world_size-1 and "
                        f"local_world_size {local_world_size!r} >= 1")
    spec = gpu_spec(os.environ.get(ENV_GPU) if gpu is None else gpu)
    with _LOCK:
        if _ACTIVE is not None:
            raise ShimError(f"the GPU shim is already installed in this process (local rank "
                            f"{_ACTIVE.local_rank}); call uninstall() on it first")
        shim = Shim(local_rank, local_world_size,
                    mapped=tuple(f"torch.cuda.{n}" for n in MAPPED_CUDA + RNG_CALLS
                                 + STREAM_CALLS)
                    + tuple(f"torch.cuda.nvtx.{n}" for n in NVTX_CALLS)
                    + tuple(f"torch.distributed.{n}" for n in MAPPED_DIST)
                    + ("tensor devices cuda -> cpu",), gpu=spec)
        try:
            if lazy_gloo and "TORCH_GLOO_LAZY_INIT" not in os.environ:
                os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
                shim._undo.append(lambda: _unset_env("TORCH_GLOO_LAZY_INIT"))
            _patch_cuda(shim)
            _patch_rng(shim)
            _patch_streams(shim)
            _patch_accelerator(shim)
            if lazy_groups is None:
                lazy_groups = not compute_stops and bool(envvars.read(ENV_LAZY_GROUPS))
            _patch_dist(shim, lazy_groups=lazy_groups)
            _patch_profiler(shim)
            _patch_ddp(shim)
            if compute_stops:
                _patch_fsdp(shim)
            _patch_spawn(shim, compute_stops)
            _enter_tensor_mode(shim, compute_stops)
            shim.ignored.extend(nccl_settings(os.environ, _home_dir()))
        except BaseException:
            while shim._undo:
                shim._undo.pop()()
            raise
        _ACTIVE = shim
        return shim
