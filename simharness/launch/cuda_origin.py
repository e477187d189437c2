"""Which CPU tensors stand for CUDA tensors, and which ops on them are data movement.

Under the GPU shim (:mod:`.gpu_shim`) a tensor put on ``cuda`` lands on CPU. With
``install(..., compute_stops=True)`` (what ``simharness capture`` uses) the shim also marks
the *storage* of every such tensor as CUDA-origin (:class:`Origins`; views share the storage,
so they are marked too, and ``param.data = cuda_tensor`` carries the mark over) and lets only
data movement touch it. Anything else - arithmetic, comparisons, matmul, an ``nn`` layer's
forward, ``backward`` - stops the rank with :class:`~simharness.errors.NeedsGPU`
(``needs a real GPU: <op> on a CUDA tensor at file:line (<why>)``).

Data movement (:func:`is_movement`):

* creation: any call with ``device="cuda..."``; ``*_like``, ``Tensor.new_*``, the in-place
  fills ``fill_``, ``zero_``, ``uniform_``, ``normal_``, ``random_``, ``copy_``;
  every op made by ``torch.nn.init`` (initialising a parameter is writing it);
* moving: ``Tensor.cuda``, ``Tensor.to`` (device and/or dtype), ``cpu``, the dtype casts
  (``float``, ``half``, ``bfloat16``, ...), ``clone``, ``contiguous``, ``detach``, ``cat``,
  ``stack``, indexing (``t[i]``, ``t[i] = v``), views (``view``, ``reshape``, ``flatten``,
  ``split``, ``chunk``, ``narrow``, ``transpose``, ``permute``, ``expand``, ...);
* reading back: ``item``, ``tolist``, ``__bool__``, ``repr``/``print``, and metadata (``size``,
  ``dim``, ``numel``, ``stride``, ``data_ptr``, ``is_contiguous``, attributes such as
  ``.shape``, ``.data``, ``.grad``, ``requires_grad_``);
* communication: ``torch.distributed`` collectives (they reach C++ directly) and every op
  that code under ``torch/distributed/`` makes on the tensors it was given (FSDP's copy-in and
  copy-out, DeviceMesh, functional collectives).

Not seen: ops made in other threads (the mode is per thread), compute inside DTensor's own
dispatch (it runs under ``torch/distributed/``), and a marked tensor still says
``device.type == "cpu"``. Cost: nothing while no tensor is marked; then about 10-20 us per
torch call (finding and looking up the arguments' storages).

>>> is_movement("torch.Tensor.view"), is_movement("torch.Tensor.shape.__get__")
(True, True)
>>> is_movement("torch.Tensor.add"), is_movement("torch.nn.functional.linear")
(False, False)
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: Ops that only create, move, copy, reshape or read back a tensor (names as
#: :func:`torch.overrides.resolve_name` gives them, ``torch.Tensor.`` left off for methods).
MOVEMENT_METHODS = frozenset("""
    cuda cpu to type float double half bfloat16 int long short bool byte char
    clone contiguous detach detach_ requires_grad_ copy_ fill_ zero_ uniform_ normal_ random_
    view view_as reshape reshape_as flatten unflatten squeeze unsqueeze permute transpose t
    narrow select split split_with_sizes chunk unbind expand expand_as as_strided movedim
    __getitem__ __setitem__ item tolist __bool__ __len__ __repr__ __format__ __hash__
    __reduce_ex__ __deepcopy__ __iter__
    size dim ndimension numel nelement stride storage_offset data_ptr element_size
    is_contiguous is_complex is_floating_point is_signed get_device untyped_storage
    _typed_storage storage is_pinned pin_memory share_memory_ is_shared
    new_empty new_zeros new_ones new_full new_tensor new_empty_strided
    """.split())
MOVEMENT_FUNCTIONS = frozenset("""
    torch.cat torch.concat torch.concatenate torch.stack torch.split torch.chunk
    torch.unbind torch.flatten torch.reshape torch.squeeze torch.unsqueeze torch.narrow
    torch.transpose torch.permute torch.clone torch.empty_like torch.zeros_like
    torch.ones_like torch.full_like torch.rand_like torch.randn_like torch.is_tensor
    torch.numel torch.is_complex torch.is_floating_point
    torch._VariableFunctionsClass._has_compatible_shallow_copy_type
    """.split())
#: Callers whose ops on a CUDA tensor are movement: collectives' and FSDP's own handling,
#: ``torch.nn.init`` (filling parameters), ``nn.Module``'s own housekeeping (``_apply``,
#: ``state_dict``; a layer's ``forward`` is in its own file) and tensor printing.
MOVEMENT_CALLERS = (os.path.join("torch", "distributed", ""),
                    os.path.join("torch", "nn", "init.py"),
                    os.path.join("torch", "nn", "modules", "module.py"),
                    os.path.join("torch", "_tensor_str.py"))
#: Frames between an op and its caller: torch's dispatch to ``__torch_function__`` and
#: the Python wrappers of ``Tensor`` methods.
_MACHINERY = (os.path.join("torch", "overrides.py"), os.path.join("torch", "_tensor.py"),
              os.path.join("torch", "utils", "_device.py"))

WHY = ("capture runs CUDA tensors on CPU for creation, copies and collectives only; "
       "computing on one would run a GPU kernel: run this part on a GPU machine")


def is_movement(name: str) -> bool:
    """Whether the op named ``name`` (see :data:`MOVEMENT_METHODS`) is data movement.

    >>> is_movement("torch.Tensor.data.__set__"), is_movement("torch.Tensor.__add__")
    (True, False)
    """
    if name.endswith(".__get__") or name.endswith(".__set__"):
        return True  # attributes: .shape, .data, .grad, .device, p.data = ...
    if name.startswith("torch.nn.init."):
        return True
    if name.startswith("torch.Tensor."):
        return name[len("torch.Tensor."):] in MOVEMENT_METHODS
    return name in MOVEMENT_FUNCTIONS


def op_name(func: Any) -> str:
    """A readable name for ``func`` (``torch.Tensor.add``, ``torch.nn.functional.linear``)."""
    from torch.overrides import resolve_name

    name = resolve_name(func)
    if name:
        return name
    module = getattr(func, "__module__", None) or ""
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)
    return f"{module}.{qual}" if module else str(qual)


class Origins:
    """The storages of tensors the script put on CUDA (held weakly: a freed storage is no
    longer one, even if its address is reused)."""

    def __init__(self) -> None:
        self._refs: dict[int, Any] = {}

    def __bool__(self) -> bool:
        return bool(self._refs)

    def mark(self, value: Any) -> None:
        """Mark every tensor in ``value`` (a tensor, or a tuple/list/dict of them)."""
        from torch.multiprocessing.reductions import StorageWeakRef

        for t in _tensors(value):
            storage = _storage(t)
            if storage is not None:
                self._refs[storage._cdata] = StorageWeakRef(storage)

    def marked(self, t: Any) -> bool:
        """Whether tensor ``t`` is (a view of) a CUDA-origin tensor."""
        import torch

        if not self._refs or not isinstance(t, torch.Tensor):
            return False
        storage = _storage(t)
        if storage is None:
            return False
        ref = self._refs.get(storage._cdata)
        if ref is None:
            return False
        if ref.expired():
            del self._refs[storage._cdata]
            return False
        return True

    def any_marked(self, value: Any) -> bool:
        """Whether any tensor in ``value`` is CUDA-origin."""
        return bool(self._refs) and any(self.marked(t) for t in _tensors(value))


def _tensors(value: Any) -> list[Any]:
    """The tensors in ``value``: itself, or inside (nested) tuples, lists and dict values.

    >>> import torch
    >>> len(_tensors(((torch.ones(1), 2), {"out": [torch.ones(1)]})))
    2
    """
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _storage(t: Any) -> Any:
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):  # wrapper subclasses, meta
        return None


def caller_is_movement(func: Any, shim_dir: str) -> bool:
    """Whether the op ``func`` was called by code under :data:`MOVEMENT_CALLERS` (the first
    frame outside torch's dispatch machinery, the shim and ``func`` itself)."""
    own = getattr(func, "__code__", None)
    frame: Any = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not (path.startswith(shim_dir) or path.endswith(_MACHINERY) or frame.f_code is own):
            return any(part in path for part in MOVEMENT_CALLERS)
        frame = frame.f_back
    return False
