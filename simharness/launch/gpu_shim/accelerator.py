"""``torch.accelerator``'s device calls: refused with NeedsGPU where torch would say there is
no accelerator; the allocator answers as before its first allocation."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import NeedsGPU

if TYPE_CHECKING:
    from .lifecycle import Shim

from .common import (
    ACCELERATOR_DEVICE_CALLS,
    _set,
    _torch_call,
    user_site,
)


def _patch_accelerator(shim: Shim) -> None:
    """``torch.accelerator``'s device calls (current device index, streams, synchronize,
    memory): torch still says there is no accelerator (``is_available()`` False,
    ``current_accelerator()`` None), so code that asks first keeps its CPU path; a call
    that needs the device (on a GPU: the rank's CUDA device) stops with NeedsGPU instead of
    torch's "Cannot access accelerator device when none is available". The allocator says
    it has not started (``_accelerator_isAllocatorInitialized`` False), so
    ``torch.accelerator.empty_cache()`` is a no-op and ``memory_stats()`` empty, torch's own
    answers before the first allocation (as ``torch.cuda.empty_cache`` is a no-op here).
    The C functions are replaced, not the Python ones, which dynamo knows by identity."""
    import torch

    for name in ACCELERATOR_DEVICE_CALLS:
        if hasattr(torch._C, name):
            _set(shim, torch._C, name, _accelerator_refuser(name))
    if hasattr(torch._C, "_accelerator_isAllocatorInitialized"):
        _set(shim, torch._C, "_accelerator_isAllocatorInitialized", lambda: False)


def _accelerator_refuser(name: str) -> Callable[..., Any]:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise NeedsGPU(_torch_call("torch.accelerator", f"torch._C.{name}"), user_site())

    return refuse
