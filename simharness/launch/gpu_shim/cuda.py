"""The ``torch.cuda`` device calls answered per local rank (one GPU each), the refused ones,
dynamo's RNG save and restore, and the profiler's CUDA activity dropped."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
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


def _refuser(name: str) -> Any:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise NeedsGPU(f"torch.cuda.{name}", user_site())

    class Refused:
        """Stands for a CUDA class; constructing it raises NeedsGPU."""

        def __new__(cls, *_args: Any, **_kwargs: Any) -> Any:
            raise NeedsGPU(f"torch.cuda.{name}", user_site())

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

    answers: dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": lambda: shim.local_world_size,
        "set_device": set_device,
        "current_device": lambda: shim.current_device,
        "device": device,
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "get_device_name": lambda device=None: "cpu (simharness shim)",
    }
    answers.update({name: _refuser(name) for name in REFUSED_CUDA})
    answers.update(_dynamo_rng(answers["get_rng_state"], answers["set_rng_state"]))
    for name, value in answers.items():
        original = getattr(cuda, name, None)
        _set(shim, cuda, name, value)
        if original is not None and name in ("empty_cache", "synchronize", "device_count",
                                              "current_device", "set_device", "is_available"):
            _replace_everywhere(shim, "torch.cuda", original, value)
    _replace_everywhere(shim, "torch.cuda", cuda._lazy_init, lazy_init)


def _dynamo_rng(refuse_get: Callable[..., Any], refuse_set: Callable[..., Any]) -> dict:
    """``torch.cuda.get_rng_state`` / ``set_rng_state`` refused, except to torch._dynamo.

    Dynamo saves and restores the CUDA RNG state around every compile when
    ``torch.cuda.is_available()`` (``torch/_dynamo/convert_frame.py:355``, ``utils.py:2665``),
    so that tracing leaves it as it was. On CPU ranks there is no CUDA generator for tracing to
    touch: to dynamo the shim answers an empty state and takes it back as a no-op (what
    dynamo does when CUDA is absent). Any other caller is refused, as before."""
    import torch

    def from_dynamo() -> bool:
        return str(sys._getframe(2).f_globals.get("__name__", "")).startswith("torch._dynamo.")

    def get_rng_state(*args: Any, **kwargs: Any) -> Any:
        if from_dynamo():
            return torch.empty(0, dtype=torch.uint8)
        return refuse_get(*args, **kwargs)

    def set_rng_state(*args: Any, **kwargs: Any) -> Any:
        if from_dynamo():
            return None
        return refuse_set(*args, **kwargs)

    return {"get_rng_state": get_rng_state, "set_rng_state": set_rng_state}


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
