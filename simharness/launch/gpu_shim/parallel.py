"""DistributedDataParallel and FSDP2 on the shim's CPU tensors: ``device_ids`` dropped, what
only a GPU module does refused, FSDP2's ``"cuda"`` mesh device as ``cpu``."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import NeedsGPU

if TYPE_CHECKING:
    from .lifecycle import Shim

from .common import (
    Ignored,
    _device_index,
    _replace_everywhere,
    _set,
    user_site,
)


def _patch_ddp(shim: Shim) -> None:
    """``DistributedDataParallel``: ``device_ids`` / ``output_device`` name the rank's GPU, but
    the shim put the module on CPU, where torch refuses them; drop them there. Such a module
    is the user's GPU module, so what DDP does only for GPU modules is a GPU's to do:

    - a module holding ``SyncBatchNorm`` stops with NeedsGPU at the DDP call (torch's CPU
      answer is "SyncBatchNorm layers only work with GPU modules", and its kernels are CUDA's);
    - ``mixed_precision=`` stops with NeedsGPU at the first forward (DDP casts the parameters
      on a side stream and waits on device events: "cpu backend doesn't support events");
    - ``_get_ddp_logging_data()`` reports the dropped ``device_ids`` / ``output_device`` as
      torch logs them for a GPU module (``"0"`` and 0), not the CPU module's ``""``.

    A module the user moved to a CUDA device (``Module.cuda()``, ``.to("cuda")``, ``.to(r)``)
    is a GPU module too, with or without ``device_ids`` (DDP takes a single-device GPU module
    without them). A module that the user left on CPU is DDP's CPU case, untouched."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    module_cuda, module_to = torch.nn.Module.cuda, torch.nn.Module.to

    def cuda(self: Any, device: Any = None) -> Any:
        out = module_cuda(self, device)
        self.__dict__[_MOVED_TO_CUDA] = True
        return out

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = module_to(self, *args, **kwargs)
        if any(not isinstance(a, bool) and _device_index(a, 0) is not None
               for a in (*args, kwargs.get("device"))):
            self.__dict__[_MOVED_TO_CUDA] = True
        return out

    _set(shim, torch.nn.Module, "cuda", cuda)
    _set(shim, torch.nn.Module, "to", to)

    original = DDP.__init__
    signature = inspect.signature(original)
    original_logging = DDP._get_ddp_logging_data

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N807  (DDP's own)
        bound = signature.bind(*args, **kwargs)
        module = bound.arguments.get("module")
        named = {k: bound.arguments.get(k) for k in ("device_ids", "output_device")}
        named = {k: v for k, v in named.items() if v is not None}
        params = list(module.parameters()) if module is not None else []
        dropped = named if named and params and all(p.device.type == "cpu" for p in params) \
            else {}
        gpu_module = bool(dropped) or (module is not None and any(
            m.__dict__.get(_MOVED_TO_CUDA) for m in module.modules()))
        if gpu_module and _holds_sync_batch_norm(module):
            raise NeedsGPU("torch.nn.SyncBatchNorm in DistributedDataParallel", user_site())
        for key, value in dropped.items():
            bound.arguments[key] = None
            shim.ignored.append(Ignored("DistributedDataParallel", f"{key}={value!r}",
                                        user_site()))
        original(*bound.args, **bound.kwargs)
        self = bound.arguments["self"]
        if dropped:
            self.__dict__["_simharness_logged"] = _logged_devices(dropped, shim.current_device)
        if gpu_module and bound.arguments.get("mixed_precision") is not None:
            self._mp_stream = _RefusedStream("DistributedDataParallel(mixed_precision=...) forward")

    def _get_ddp_logging_data(self: Any) -> Any:
        data = original_logging(self)
        data.update(self.__dict__.get("_simharness_logged", {}))
        return data

    _set(shim, DDP, "__init__", __init__)
    _set(shim, DDP, "_get_ddp_logging_data", _get_ddp_logging_data)


#: Set in a module's ``__dict__`` when the user moved it to a CUDA device (it is on CPU).
_MOVED_TO_CUDA = "_simharness_moved_to_cuda"


def _holds_sync_batch_norm(module: Any) -> bool:
    import torch

    return any(isinstance(m, torch.nn.SyncBatchNorm) for m in module.modules())


def _logged_devices(dropped: dict[str, Any], current: int) -> dict[str, Any]:
    """What DDP logs for the dropped ``device_ids`` / ``output_device`` on a GPU module:
    ``device_ids`` joined by ``", "``, ``output_device`` an index (``device_ids[0]`` when not
    given), as ``torch/nn/parallel/distributed.py`` normalises them.

    >>> _logged_devices({"device_ids": ["cuda:1"]}, 0)
    {'device_ids': '1', 'output_device': 1}
    >>> _logged_devices({"device_ids": [0], "output_device": "cuda"}, 2)
    {'device_ids': '0', 'output_device': 2}
    """
    ids = [_device_index(d, current) for d in dropped.get("device_ids") or []]
    out: dict[str, Any] = {}
    if ids:
        out["device_ids"] = ", ".join(str(i) for i in ids)
    given = dropped.get("output_device")
    index = _device_index(given, current) if given is not None else (ids[0] if ids else None)
    if index is not None:
        out["output_device"] = index
    return out


class _RefusedStream:
    """Stands for a CUDA side stream that a call made on the user's behalf: entering it
    (``with stream:``) stops with NeedsGPU at the user's line."""

    def __init__(self, call: str):
        self.call = call

    def __enter__(self) -> Any:
        raise NeedsGPU(self.call, user_site())

    def __exit__(self, *_exc: Any) -> None:
        return None

    def __deepcopy__(self, _memo: Any) -> _RefusedStream:
        return self


FSDP_INIT = "torch.distributed.fsdp._fully_shard._fsdp_init"


def _patch_fsdp(shim: Shim) -> None:
    """FSDP2's ``fully_shard`` on a ``"cuda"`` DeviceMesh takes ``cuda:<current>`` as its
    device (``_get_device_from_mesh``, torch/distributed/fsdp/_fully_shard/_fsdp_init.py:219)
    and asserts each parameter is there (``_fsdp_param.py:246``); the shim's tensors are on
    CPU, so the device it gets is ``cpu`` (FSDP's CPU path: gloo collectives, no streams).

    FSDP is not imported for this (0.5 CPU-s per rank): the patch is made when the script
    imports it (:func:`_when_imported`), or now if it already has."""

    def patch(module: Any) -> None:
        import torch

        original = module._get_device_from_mesh

        def device_from_mesh(mesh: Any) -> Any:
            if _device_index(getattr(mesh, "device_type", None), 0) is not None:
                shim.ignored.append(Ignored("fully_shard", "device cuda (runs on cpu)",
                                            user_site()))
                return torch.device("cpu")
            return original(mesh)

        _replace_everywhere(shim, "torch.distributed", original, device_from_mesh)

    _when_imported(shim, FSDP_INIT, patch)


def _when_imported(shim: Shim, name: str, patch: Callable[[Any], None]) -> None:
    """Call ``patch(module)`` once module ``name`` is imported: now if it is loaded, else
    right after its code runs (a finder on ``sys.meta_path``, removed by the shim's undo).
    Modules importing names from it bind them after that, so they see the patch."""
    if name in sys.modules:
        patch(sys.modules[name])
        return
    import importlib.abc

    class Patching(importlib.abc.Loader):
        def __init__(self, loader: Any):
            self.loader = loader

        def create_module(self, spec: Any) -> Any:
            return self.loader.create_module(spec)

        def exec_module(self, module: Any) -> None:
            self.loader.exec_module(module)
            patch(module)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
            if fullname != name:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None:
                        spec.loader = Patching(spec.loader)
                    return spec
            return None

    finder = Finder()
    sys.meta_path.insert(0, finder)

    def undo() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)

    shim._undo.append(undo)
