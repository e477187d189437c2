"""What every surface of the GPU shim shares: the names it maps, where a call came from
(the user's ``file:line``, the torch call under it), and how a patch is made and undone."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import SimharnessError

if TYPE_CHECKING:
    from .lifecycle import Shim


#: Backends that need a GPU and become gloo.
GPU_BACKENDS = frozenset({"nccl", "ucc", "xccl", "hccl"})

#: torch.cuda names answered on CPU (the answers: docs/gpu-shim.md).
MAPPED_CUDA = ("is_available", "device_count", "set_device", "current_device", "device",
               "synchronize", "empty_cache", "get_device_name", "get_device_properties",
               "get_device_capability", "mem_get_info")
#: torch.cuda names refused with NeedsGPU (CUDA graphs capture GPU kernels).
REFUSED_CUDA = ("CUDAGraph", "graph")
#: torch._C functions behind torch.accelerator's device calls, refused with NeedsGPU.
ACCELERATOR_DEVICE_CALLS = tuple(f"_accelerator_{n}" for n in (
    "getDeviceIndex", "setDeviceIndex", "exchangeDevice", "maybeExchangeDevice", "getStream",
    "setStream", "synchronizeDevice", "getDeviceCapability", "getMemoryInfo", "getDeviceStats",
    "emptyCache"))
#: torch.distributed calls whose backend / options are mapped.
MAPPED_DIST = ("init_process_group", "new_group", "split_group")

#: simharness/launch: frames in it are the shim's own, never the user's line.
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ShimError(SimharnessError, RuntimeError):
    """The shim cannot be installed here (already installed, or bad local rank values)."""


def map_backend(backend: Any) -> Any:
    """The backend the shim uses for ``backend``: GPU backends (alone or in a mix) -> gloo.

    >>> map_backend("NCCL"), map_backend("cpu:gloo,cuda:ucc"), map_backend("gloo")
    ('gloo', 'gloo', 'gloo')
    """
    if backend is None:
        return None
    text = str(backend).lower()
    parts = [p.split(":", 1)[-1].strip() for p in text.split(",")]
    if any(p in GPU_BACKENDS for p in parts) or (
            "," in text and all(p in GPU_BACKENDS | {"gloo"} for p in parts)):
        return "gloo"
    if text == "gloo":
        return "gloo"
    return backend


@dataclass(frozen=True)
class Ignored:
    """A GPU-only option the shim accepted and dropped: the call, what, and the user's line."""

    call: str
    detail: str
    where: str

    def __str__(self) -> str:
        return f"{self.call}: {self.detail} ignored at {self.where}"


def user_site(skip_dirs: tuple[str, ...] = ()) -> str:
    """``file:line`` of the innermost caller outside torch and simharness.launch.

    torch's own test code (``torch/testing``: ``distributed_test.py`` and its helpers) counts
    as the caller's, so a stop inside one of torch's tests names the test's line.

    >>> user_site().endswith(":1") or ":" in user_site()
    True
    """
    skip: tuple[str, ...] = (_HERE, os.path.dirname(contextlib.__file__), *skip_dirs)
    torch_dir, testing = _torch_dirs()
    frame: Any = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        inside = path.startswith(skip) or (path.startswith(torch_dir)
                                           and not path.startswith(testing))
        if not inside and not path.startswith("<frozen"):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>:0"


def _torch_dirs() -> tuple[str, str]:
    """torch's package directory, and its ``testing`` directory (test code, the caller's)."""
    import torch  # torch only when asked

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    return torch_dir + os.sep, os.path.join(torch_dir, "testing") + os.sep


def _torch_call(within: str = "torch", default: str = "torch.cuda._lazy_init") -> str:
    """The outermost torch function on the stack under the user's frame (``torch.cuda.x``),
    counting only functions of modules under ``within`` (``default`` when there is none)."""
    torch_dir, testing = _torch_dirs()
    name = default
    frame: Any = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if path.startswith(_HERE):
            pass
        elif path.startswith(torch_dir) and not path.startswith(testing):
            module = frame.f_globals.get("__name__", "torch")
            if module == within or module.startswith(within + "."):
                name = f"{module}.{frame.f_code.co_name}"
        else:
            break
        frame = frame.f_back
    return name


def _device_index(device: Any, default: int) -> int | None:
    """The CUDA index ``device`` names; None when it does not name a CUDA device.

    >>> _device_index("cuda:3", 0), _device_index("cuda", 2), _device_index(1, 0)
    (3, 2, 1)
    >>> _device_index("cpu", 0) is None
    True
    """
    if isinstance(device, bool):
        return None
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind != "cuda":
            return None
        return int(index) if index else default
    if getattr(device, "type", None) == "cuda":
        number = getattr(device, "index", None)
        return default if number is None else int(number)
    return None


def _unset_env(name: str) -> None:
    os.environ.pop(name, None)


def _set(shim: Shim, owner: Any, name: str, value: Any) -> None:
    """Set ``owner.name = value`` and remember how to undo it."""
    missing = object()
    old = owner.__dict__.get(name, missing) if hasattr(owner, "__dict__") else missing
    setattr(owner, name, value)

    def undo() -> None:
        if old is missing:
            with contextlib.suppress(AttributeError):
                delattr(owner, name)
        else:
            setattr(owner, name, old)
    shim._undo.append(undo)


def _replace_everywhere(shim: Shim, prefix: str, original: Any, value: Any) -> None:
    """Replace ``original`` by ``value`` in every loaded module under ``prefix`` that binds it."""
    for modname, module in list(sys.modules.items()):
        if module is None or not (modname == prefix or modname.startswith(prefix + ".")):
            continue
        for attr, obj in list(vars(module).items()):
            if obj is original:
                _set(shim, module, attr, value)
