"""A CPU stand-in for the GPU calls of distributed tests: ``install(local_rank, local_world_size)``.

Real multi-GPU scripts and tests (Megatron-Core, NeMo, torchtitan) call the CUDA device API
and ask for NCCL. On a CPU rank started by :mod:`simharness.launch` the shim answers those
calls as one GPU per local rank would, runs every collective on gloo over loopback (so
results are real), and stops what truly needs a GPU with
:class:`simharness.errors.NeedsGPU` (``needs a real GPU: <call> at <file:line>``).

Importing this module does nothing; :func:`install` patches torch in this process and
returns a :class:`Shim` that records what was mapped and what was ignored;
:meth:`Shim.uninstall` undoes it.

What each call is answered with (``torch.cuda`` device calls, ``init_process_group`` /
``new_group`` / ``split_group`` backends and options, tensors on ``cuda``, DDP, FSDP2, the
profiler, NCCL's settings, ``TORCH_GLOO_LAZY_INIT``): the one table, in ``docs/gpu-shim.md``.

One module per torch surface:

- :mod:`.identity`: the GPU each device reports (``--gpu`` / ``SIMHARNESS_GPU``, H100 by
  default), a table with sources;
- :mod:`.cuda`: the ``torch.cuda`` device calls (answered from :mod:`.identity`), the refused
  ones, the profiler's CUDA activity;
- :mod:`.rng`: the CUDA generators, one CPU generator per local device;
- :mod:`.streams`: streams, events and NVTX ranges (synchronous on CPU: faithful);
- :mod:`.tensors`: tensors on ``cuda`` land on CPU (with ``compute_stops``: marked, compute
  on them stops, :mod:`simharness.launch.cuda_origin`);
- :mod:`.parallel`: DistributedDataParallel and FSDP2;
- :mod:`.accelerator`: ``torch.accelerator``'s device calls;
- :mod:`.dist`: process-group backends and options (NCCL -> gloo), subgroups asked of NCCL
  connected on first use (a rank-dependent ``new_group`` named there), gloo's all-gather
  into a flat output;
- :mod:`.nccl`: NCCL's own settings, listed as ignored;
- :mod:`.spawned`: processes the rank starts with ``multiprocessing``'s ``spawn`` get the
  shim too;
- :mod:`.lifecycle`: :func:`install`, :class:`Shim` (its undo), :func:`active`;
- :mod:`.common`: what they share (:func:`user_site`, :func:`map_backend`, the
  patch-and-undo helpers).

Refused with :class:`~simharness.errors.NeedsGPU`: ``torch.cuda.CUDAGraph``, ``graph``,
``Event.ipc_handle``, and every other call that reaches CUDA initialisation
(``torch.cuda._lazy_init``); ``torch.accelerator``'s
device calls (``current_device_index``, ``set_device_index``, ``device_index``,
``current_stream``, ``set_stream``, ``synchronize``, ``get_device_capability``,
``get_memory_info``: :data:`ACCELERATOR_DEVICE_CALLS`), where torch would raise "Cannot access
accelerator device when none is available" (the allocator answers as before its first
allocation: ``torch.accelerator.empty_cache()`` a no-op, ``memory_stats()`` empty); and
what DDP does only for a GPU module, on a module whose ``device_ids`` the shim dropped or
that the user moved to CUDA (``Module.cuda()``, ``.to("cuda")``, ``.to(rank)``): a
module holding ``torch.nn.SyncBatchNorm`` (at the DDP call; torch's CPU answer is
"SyncBatchNorm layers only work with GPU modules") and ``mixed_precision=`` (at the first
forward: DDP casts on a side stream and waits on device events, which a CPU rank does not
have). A module that the user left on CPU gets torch's own CPU errors for both, as
without the shim.

The ``file:line`` of a stop is the innermost frame outside torch and the shim; torch's own test
code (``torch/testing``, e.g. ``distributed_test.py``) counts as the caller's.

Known differences: a mapped tensor reports ``device.type == "cpu"`` (``device.index`` None)
and ``is_cuda`` False; random numbers are the CPU generator's, not CUDA's Philox; other
threads than the installing one do not map tensors;
``torch.accelerator.is_available()`` is still False and ``current_accelerator()`` None (code
that asks first keeps its CPU path); ``torch.cuda.memory_allocated()`` is 0 (torch's own
answer before CUDA starts); ``split_group`` of a non-world parent twice over the same ranks
hits torch's "group name already created" error.

>>> map_backend("nccl"), map_backend("cuda:nccl,cpu:gloo"), map_backend("fake"), map_backend(None)
('gloo', 'gloo', 'fake', None)
"""


from __future__ import annotations

from .accelerator import (  # noqa: F401
    _accelerator_refuser,
    _patch_accelerator,
)
from .common import (  # noqa: F401
    _HERE,
    ACCELERATOR_DEVICE_CALLS,
    GPU_BACKENDS,
    MAPPED_CUDA,
    MAPPED_DIST,
    REFUSED_CUDA,
    Ignored,
    ShimError,
    _device_index,
    _replace_everywhere,
    _set,
    _torch_call,
    _torch_dirs,
    _unset_env,
    map_backend,
    user_site,
)
from .cuda import (  # noqa: F401
    _patch_cuda,
    _patch_profiler,
    _refuser,
)
from .dist import (  # noqa: F401
    GroupMismatch,
    _bind,
    _nccl_stand_in,
    _patch_dist,
)
from .identity import (  # noqa: F401
    DEFAULT_GPU,
    ENV_GPU,
    GPUS,
    DeviceProperties,
    GpuSpec,
    UnknownGPU,
    gpu_spec,
)
from .lifecycle import (  # noqa: F401
    _LOCK,
    Shim,
    active,
    install,
)
from .nccl import (  # noqa: F401
    TORCHRUN_NCCL_VARS,
    _home_dir,
    nccl_settings,
)
from .parallel import (  # noqa: F401
    _MOVED_TO_CUDA,
    FSDP_INIT,
    _holds_sync_batch_norm,
    _logged_devices,
    _patch_ddp,
    _patch_fsdp,
    _RefusedStream,
    _when_imported,
)
from .rng import DEFAULT_SEED, RNG_CALLS  # noqa: F401
from .streams import NVTX_CALLS, STREAM_CALLS  # noqa: F401
from .tensors import (  # noqa: F401
    _CudaTensors,
    _enter_tensor_mode,
    _names_cpu,
    _same_storage,
)
