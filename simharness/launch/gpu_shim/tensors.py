"""Tensors put on ``cuda`` land on CPU (a ``TorchFunctionMode``); with ``compute_stops`` they
are marked and compute on them stops (:mod:`simharness.launch.cuda_origin`).

A mode is off while its own handler runs (torch pops it), and ``Tensor.backward`` /
``torch.autograd.backward`` / ``grad`` reach the handler as one call: the autograd engine they
start keeps the thread's modes as they were then, so the user code it runs (an autograd
``Function``'s ``backward``, hooks, a checkpoint's recompute) would see CUDA devices unmapped
(torch's "Cannot access accelerator device when none is available"). The engine's entry
(``torch.autograd.graph._engine_run_backward``, torch 2.13) is wrapped to put the mode back
on the stack for the pass, in the installing thread, when it is not on it already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import NeedsGPU
from .. import cuda_origin

if TYPE_CHECKING:
    from .lifecycle import Shim

from .common import (
    _HERE,
    _device_index,
    _replace_everywhere,
    user_site,
)
from .rng import draws_on_cuda, on_generator, random_ops


def _enter_tensor_mode(shim: Shim, compute_stops: bool = False) -> None:
    from torch.overrides import TorchFunctionMode

    tensors = _CudaTensors(cuda_origin.Origins() if compute_stops else None,
                           getattr(shim, "generators", None), lambda: shim.current_device)
    shim.origins = tensors.origins

    class CudaToCpu(TorchFunctionMode):
        """Puts tensors asked for on a CUDA device on the CPU; with ``compute_stops``, marks
        them (:mod:`.cuda_origin`) and stops compute on them."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            return tensors.call(func, tuple(args), dict(kwargs or {}))

    mode = CudaToCpu()
    mode.__enter__()
    shim._undo.append(lambda: mode.__exit__(None, None, None))
    if not compute_stops:
        _keep_mode_in_backward(shim, mode)


def _keep_mode_in_backward(shim: Shim, mode: Any) -> None:
    """Run the autograd engine with ``mode`` on the stack (module doc)."""
    import threading

    import torch.autograd.graph as graph
    from torch.overrides import _get_current_function_mode_stack

    original = graph._engine_run_backward
    owner = threading.get_ident()

    def _engine_run_backward(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != owner or any(
                m is mode for m in _get_current_function_mode_stack()):
            return original(*args, **kwargs)
        with mode:
            return original(*args, **kwargs)

    _replace_everywhere(shim, "torch.autograd", original, _engine_run_backward)


class _CudaTensors:
    """What the tensor mode does with one torch call: CUDA devices become ``cpu``; with
    ``origins`` (capture), the results are marked and compute on marked tensors stops.

    With ``generators`` (one per local device, :mod:`.rng`), a random draw meant for a CUDA
    device draws from the current device's generator; to know which in-place draws are,
    the storages of tensors made on CUDA are remembered (``born``; in capture, ``origins``)."""

    def __init__(self, origins: cuda_origin.Origins | None, generators: Any = None,
                 current: Any = None):
        import torch

        self.origins = origins
        self.generators = generators
        self.current = current or (lambda: 0)
        self.born = origins if origins is not None else cuda_origin.Origins()
        self.random = random_ops()
        self.is_compiling = torch.compiler.is_compiling
        self.to, self.cuda, self.cpu = torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu
        self.pin = torch.Tensor.pin_memory
        self.parse_to = torch._C._nn._parse_to  # Module.to(device) asks it through the mode

    def call(self, func: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        if func is self.pin or (func is self.cuda and self.origins is None):
            if func is self.cuda and not self.is_compiling():
                self.born.mark(args[0])
            return args[0]
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        device = _device_index(kwargs.get("device"), self.current())
        args, asked = self.map_devices(func, args, kwargs)
        compiling = self.is_compiling()  # dynamo traces this mode: keep to what it was
        if self.generators is not None and not compiling and draws_on_cuda(
                func, self.random, asked, args, kwargs, self.born):
            index = self.current() if device is None else device
            with on_generator(self.generators[index % len(self.generators)]):
                return self.compute(func, args, kwargs, asked)
        return self.compute(func, args, kwargs, asked)

    def compute(self, func: Any, args: tuple, kwargs: dict[str, Any], asked: bool) -> Any:
        """``asked``: in run, the result is marked as made on CUDA (for :mod:`.rng`)."""
        if self.origins is None:
            out = func(*args, **kwargs)
            if asked and not self.is_compiling():
                self.born.mark(out)
            return out
        return self.tracked(func, args, kwargs, asked)

    def map_devices(self, func: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, bool]:
        """``args`` with CUDA devices as ``cpu`` (``kwargs`` changed in place), and whether
        the call asked for a CUDA device. With ``origins``, ``Module.to``'s parse keeps the
        CUDA device, so that each tensor's own ``Tensor.to`` is seen (and marked) here."""
        if func is self.parse_to and self.origins is not None:
            return args, False
        asked = "device" in kwargs and _device_index(kwargs["device"], 0) is not None
        if asked:
            kwargs["device"] = "cpu"
        if func is self.to or func is self.parse_to:
            first = 1 if func is self.to else 0  # Tensor.to's self is not a device
            new = tuple("cpu" if i >= first and _device_index(a, 0) is not None else a
                        for i, a in enumerate(args))
            return new, asked or new != args
        return args, asked

    def tracked(self, func: Any, args: tuple, kwargs: dict[str, Any], asked: bool) -> Any:
        origins = self.origins
        assert origins is not None
        if func is self.cuda or (func is self.to and (
                asked or any(origins.marked(a) for a in args[1:]))):
            return self.to_cuda(func, args, kwargs)
        if not origins.any_marked((args, kwargs)):
            out = func(*args, **kwargs)
            if asked:
                origins.mark(out)
            return out
        if func is self.cpu or (func is self.to and _names_cpu(args, kwargs)):
            out = func(*args, **kwargs)  # back to the host: a copy, not marked
            return out.clone() if _same_storage(out, args[0]) else out
        name = cuda_origin.op_name(func)
        if not (asked or cuda_origin.is_movement(name)
                or cuda_origin.caller_is_movement(func, _HERE)):
            raise NeedsGPU(f"{name} on a CUDA tensor", user_site(), why=cuda_origin.WHY)
        out = func(*args, **kwargs)
        if not (name.endswith("_") and not name.endswith("__")):  # in place: self keeps its mark
            origins.mark(out)
        return out

    def to_cuda(self, func: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """``Tensor.cuda()`` / ``.to(cuda)``: a marked copy unless the tensor is marked
        already (then itself, or its cast), as on a GPU."""
        assert self.origins is not None
        src = args[0]
        if func is self.cuda:
            out = src if self.origins.marked(src) else src.clone()
        else:
            out = func(*args, **kwargs)
            if not self.origins.marked(src) and (out is src or _same_storage(out, src)):
                out = out.clone()
        self.origins.mark(out)
        return out


def _same_storage(a: Any, b: Any) -> bool:
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    try:
        return bool(a.untyped_storage()._cdata == b.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def _names_cpu(args: tuple, kwargs: dict) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names the CPU explicitly."""
    for value in (*args[1:], kwargs.get("device")):
        if value is not None and (str(value) == "cpu" or getattr(value, "type", None) == "cpu"):
            return True
    return False
