"""The ``torch.cuda`` device calls answered per local rank (one GPU each, the named model of
:mod:`.identity`), the refused ones, and the profiler's CUDA activity dropped. The RNG
calls are :mod:`.rng`'s, streams, events and NVTX :mod:`.streams`'."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from ...errors import NeedsGPU

if TYPE_CHECKING:
    from .lifecycle import Shim

from .common import (
    REFUSED_CUDA,
    Ignored,
    _device_index,
    _replace_everywhere,
    _set,
    _torch_call,
    user_site,
)
from .identity import DeviceProperties

#: The methods of a CUDA build's ``torch.cuda.CUDAGraph`` (its ``torch._C._CUDAGraph`` base,
#: ``torch/_C/__init__.pyi`` of torch 2.13): a CPU build's class lacks the C ones, so code
#: that checks for them (Megatron's ``CudaRNGStatesTracker(use_cudagraphable_rng=True)``:
#: ``hasattr(torch.cuda.CUDAGraph, "register_generator_state")``) would stop on its own
#: assertion instead of at the graph-safe RNG call that needs the GPU.
CUDA_GRAPH_METHODS = ("capture_begin", "capture_end", "instantiate", "register_generator_state",
                      "replay", "reset", "pool", "enable_debug_mode", "debug_dump",
                      "raw_cuda_graph", "raw_cuda_graph_exec", "get_graph_data")


def _refuser(name: str) -> Any:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise NeedsGPU(f"torch.cuda.{name}", user_site())

    class Refused:
        """Stands for a CUDA class; constructing it, or calling its methods through the
        class, raises NeedsGPU."""

        def __new__(cls, *_args: Any, **_kwargs: Any) -> Any:
            raise NeedsGPU(f"torch.cuda.{name}", user_site())

    if name == "CUDAGraph":
        for method in CUDA_GRAPH_METHODS:
            setattr(Refused, method, _refuser(f"CUDAGraph.{method}"))
    return Refused if name[:1].isupper() else refuse


def _patch_cuda(shim: Shim) -> None:
    import torch
    import torch.cuda
    import torch.cuda.memory

    cuda = torch.cuda

    def set_device(device: Any) -> None:
        index = _device_index(device, shim.current_device)
        if index is None or not 0 <= index < shim.local_world_size:
            raise RuntimeError(f"CUDA error: invalid device ordinal (simharness shim: device "
                               f"{device!r}, {shim.local_world_size} devices on this node)")
        shim.current_device = index

    @contextlib.contextmanager
    def device(dev: Any):
        old = shim.current_device
        if _device_index(dev, old) is not None:
            set_device(dev)
        try:
            yield
        finally:
            shim.current_device = old

    def lazy_init() -> None:
        raise NeedsGPU(_torch_call(), user_site())

    props = DeviceProperties(shim.gpu)

    def get_device_properties(device: Any = None) -> DeviceProperties:
        index = _device_index("cuda" if device is None else device, shim.current_device)
        if index is None or not 0 <= index < shim.local_world_size:
            raise AssertionError("Invalid device id")  # torch.cuda.get_device_properties'
        return props

    answers: dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": lambda: shim.local_world_size,
        "set_device": set_device,
        "current_device": lambda: shim.current_device,
        "device": device,
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "get_device_properties": get_device_properties,
        "get_device_name": lambda device=None: get_device_properties(device).name,
        "get_device_capability": lambda device=None: (get_device_properties(device).major,
                                                      get_device_properties(device).minor),
        # nothing is allocated on the device (torch.cuda.memory_allocated() is 0)
        "mem_get_info": lambda device=None: (get_device_properties(device).total_memory,
                                             props.total_memory),
    }
    answers.update({name: _refuser(name) for name in REFUSED_CUDA})
    for name, value in answers.items():
        original = getattr(cuda, name, None)
        _set(shim, cuda, name, value)
        if original is not None and name not in ("device", *REFUSED_CUDA):
            _replace_everywhere(shim, "torch.cuda", original, value)
    _replace_everywhere(shim, "torch.cuda", cuda._lazy_init, lazy_init)


def _patch_profiler(shim: Shim) -> None:
    """``torch.profiler`` / ``torch.autograd.profiler`` with CUDA activity: there is no CUDA
    to time. Without the shim torch drops the activity (``torch.cuda.is_available()`` is
    False, ``torch/autograd/profiler.py:295``); with it, a CPU build falls back to legacy CUDA
    event timing (``KINETO_GPU_FALLBACK``, ``profiler.py:316``), which fails on every op
    ("Failed to record CUDA event", with a C++ backtrace: about a second per DDP step). Drop
    the activity here too, so the profile holds the CPU events, as on a CPU machine."""
    from torch.autograd import profiler as autograd_profiler

    cls = autograd_profiler.profile
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807  (the class's)
        original(self, *args, **kwargs)
        if getattr(self, "use_device", None) == "cuda":
            self.use_device = None
            self.use_cuda = False
            if self.profiler_kind == autograd_profiler.ProfilerState.KINETO_GPU_FALLBACK:
                self.profiler_kind = autograd_profiler.ProfilerState.KINETO
            shim.ignored.append(Ignored("torch.profiler", "CUDA activity (CPU events only)",
                                        user_site()))

    _set(shim, cls, "__init__", __init__)
