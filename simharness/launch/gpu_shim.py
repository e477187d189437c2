"""A CPU stand-in for the GPU calls of distributed tests: ``install(local_rank, local_world_size)``.

Real multi-GPU scripts and tests (Megatron-Core, NeMo, torchtitan) call the CUDA device API
and ask for NCCL. On a CPU rank started by :mod:`simharness.launch` the shim answers those
calls as one GPU per local rank would, runs every collective on gloo over loopback (so
results are real), and stops what truly needs a GPU with
:class:`simharness.errors.NeedsGPU` (``needs a real GPU: <call> at <file:line>``).

Importing this module does nothing; :func:`install` patches torch in this process and
returns a :class:`Shim` that records what was mapped and what was ignored;
:meth:`Shim.uninstall` undoes it.

Mapped (answered on CPU):

===============================================  ==============================================
call                                             answer
===============================================  ==============================================
``torch.cuda.is_available()``                    ``True``
``torch.cuda.device_count()``                    the local world size
``torch.cuda.set_device(d)``                     records ``d`` (int, ``"cuda:N"``, device);
                                                 an index >= local world size raises
                                                 ``RuntimeError`` (invalid device ordinal)
``torch.cuda.current_device()``                  the device last set (0 before, as on a GPU)
``torch.cuda.device(d)`` (context manager)       sets, then restores, the current device
``torch.cuda.synchronize()``                     no-op
``torch.cuda.empty_cache()`` (and ``.memory.``)  no-op
``torch.cuda.get_device_name()``                 ``"cpu (simharness shim)"``
``init_process_group(backend=...)``              ``nccl``, ``ucc``, ``"cuda:nccl,cpu:gloo"``
                                                 (any mix) -> ``gloo``; ``pg_options`` dropped
                                                 and ``device_id=`` accepted, not bound (both
                                                 listed in :attr:`Shim.ignored`)
``new_group(backend=..., pg_options=...)``       the same mapping; also reached through
                                                 ``new_subgroups`` and
                                                 ``new_subgroups_by_enumeration``
``dist.split_group(parent, split_ranks)``        emulated with ``new_group`` (one per split,
                                                 all ranks, when the parent is the world;
                                                 ``use_local_synchronization`` otherwise)
``init_device_mesh("cuda", shape)``              works (through the calls above)
``torch.distributed.ProcessGroupNCCL.Options``   a stand-in (CPU builds lack the class) that
                                                 takes ``is_high_priority_stream`` and any
                                                 ``.config`` field (SHARP, CTAs, net name);
                                                 dropped at group creation, listed as ignored
tensors on ``cuda``/``cuda:N``/int device        land on CPU: ``device=`` of any torch
                                                 function, ``Tensor.to(...)``,
                                                 ``Module.to(...)``, ``Tensor.cuda()``,
                                                 ``pin_memory`` (a ``TorchFunctionMode``, this
                                                 thread only); with ``compute_stops``
                                                 (capture) marked, and compute on them is
                                                 refused (:mod:`.cuda_origin`)
``fully_shard`` on a ``"cuda"`` DeviceMesh       with ``compute_stops``: FSDP2's device is
                                                 ``cpu`` (listed as ignored)
``DistributedDataParallel(device_ids=,``         dropped when the module's parameters are all
``output_device=)``                              on CPU (they are: see above), listed as
                                                 ignored; DDP then runs as on CPU, and its
                                                 ``_get_ddp_logging_data()`` reports them as
                                                 torch logs them for a GPU module (``"0"``, 0)
``torch.cuda.get_rng_state``, ``set_rng_state``  to torch._dynamo only (its save and restore
called by torch._dynamo                          around each compile): an empty state, taken
                                                 back as a no-op, so ``torch.compile`` runs on
                                                 CPU; refused to any other caller
``torch.profiler.profile(activities=[..CUDA])``  the CUDA activity dropped (as torch does
(and ``torch.autograd.profiler.profile``)        without CUDA): CPU events only, listed as
                                                 ignored
NCCL's settings: ``NCCL_*``,                     listed as ignored (:func:`nccl_settings`),
``TORCH_NCCL_*`` variables, the files            each with its value: gloo runs the
``$NCCL_CONF_FILE`` (else ``~/.nccl.conf``),     collectives
``/etc/nccl.conf``
``TORCH_GLOO_LAZY_INIT``                         left as it is (gloo's default: each group
                                                 connects all its pairs at creation); with
                                                 ``lazy_gloo`` (capture) set to 1 unless
                                                 already set: a pair connects on first use
===============================================  ==============================================

Refused with :class:`~simharness.errors.NeedsGPU`: ``torch.cuda.Stream``, ``Event``,
``current_stream``, ``default_stream``, ``stream``, ``CUDAGraph``, ``graph``,
``get_device_properties``, ``mem_get_info``, ``get_rng_state``, ``set_rng_state``, and every
other call that reaches CUDA initialisation (``torch.cuda._lazy_init``); ``torch.accelerator``'s
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
and ``is_cuda`` False; other threads than the installing one do not map tensors;
``torch.accelerator.is_available()`` is still False and ``current_accelerator()`` None (code
that asks first keeps its CPU path); ``torch.cuda.memory_allocated()`` is 0 (torch's own
answer before CUDA starts); ``split_group`` of a non-world parent twice over the same ranks
hits torch's "group name already created" error.

>>> map_backend("nccl"), map_backend("cuda:nccl,cpu:gloo"), map_backend("fake"), map_backend(None)
('gloo', 'gloo', 'fake', None)
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import NeedsGPU, SimharnessError
from . import cuda_origin

#: Backends that need a GPU and become gloo.
GPU_BACKENDS = frozenset({"nccl", "ucc", "xccl", "hccl"})

#: torch.cuda names answered on CPU (see the module docstring for the answers).
MAPPED_CUDA = ("is_available", "device_count", "set_device", "current_device", "device",
               "synchronize", "empty_cache", "get_device_name")
#: torch.cuda names refused with NeedsGPU.
REFUSED_CUDA = ("Stream", "Event", "current_stream", "default_stream", "stream", "CUDAGraph",
                "graph", "get_device_properties", "mem_get_info", "get_rng_state",
                "set_rng_state")
#: torch._C functions behind torch.accelerator's device calls, refused with NeedsGPU.
ACCELERATOR_DEVICE_CALLS = tuple(f"_accelerator_{n}" for n in (
    "getDeviceIndex", "setDeviceIndex", "exchangeDevice", "maybeExchangeDevice", "getStream",
    "setStream", "synchronizeDevice", "getDeviceCapability", "getMemoryInfo", "getDeviceStats",
    "emptyCache"))
#: torch.distributed calls whose backend / options are mapped.
MAPPED_DIST = ("init_process_group", "new_group", "split_group")

_HERE = os.path.dirname(os.path.abspath(__file__))
_LOCK = threading.Lock()
_ACTIVE: Shim | None = None


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


@dataclass
class Shim:
    """The installed shim of one process: what it maps, what it ignored so far."""

    local_rank: int
    local_world_size: int
    mapped: tuple[str, ...]
    ignored: list[Ignored] = field(default_factory=list)
    current_device: int = 0
    origins: Any = None  # cuda_origin.Origins when compute stops (capture), else None
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


def install(local_rank: int, local_world_size: int, *, lazy_gloo: bool = False,
            compute_stops: bool = False) -> Shim:
    """Patch torch in this process as one GPU per local rank; returns the :class:`Shim`.

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
    with _LOCK:
        if _ACTIVE is not None:
            raise ShimError(f"the GPU shim is already installed in this process (local rank "
                            f"{_ACTIVE.local_rank}); call uninstall() on it first")
        shim = Shim(local_rank, local_world_size,
                    mapped=tuple(f"torch.cuda.{n}" for n in MAPPED_CUDA)
                    + tuple(f"torch.distributed.{n}" for n in MAPPED_DIST)
                    + ("tensor devices cuda -> cpu",))
        try:
            if lazy_gloo and "TORCH_GLOO_LAZY_INIT" not in os.environ:
                os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
                shim._undo.append(lambda: _unset_env("TORCH_GLOO_LAZY_INIT"))
            _patch_cuda(shim)
            _patch_accelerator(shim)
            _patch_dist(shim)
            _patch_profiler(shim)
            _patch_ddp(shim)
            if compute_stops:
                _patch_fsdp(shim)
            _enter_tensor_mode(shim, compute_stops)
            shim.ignored.extend(nccl_settings(os.environ, _home_dir()))
        except BaseException:
            while shim._undo:
                shim._undo.pop()()
            raise
        _ACTIVE = shim
        return shim


#: Set by torchrun (and :mod:`simharness.launch.env`) for every job: not the user's setting.
TORCHRUN_NCCL_VARS = frozenset({"TORCH_NCCL_ASYNC_ERROR_HANDLING"})


def nccl_settings(environ: Any, home: str | None, shown: int = 6) -> list[Ignored]:
    """NCCL's own settings that a rank would have had and gloo ignores, as :class:`Ignored`:
    ``NCCL_*`` and ``TORCH_NCCL_*`` (ProcessGroupNCCL's) environment variables, and the
    settings of the NCCL config files NCCL would read, in its order (NCCL v2.28.3-1
    ``src/misc/param.cc:53-67``): ``$NCCL_CONF_FILE`` when set and not empty, else
    ``HOME/.nccl.conf`` (``home``: the user's entry in the password database, as NCCL takes
    it), then ``/etc/nccl.conf``. A file line is ``NAME=VALUE``; ``#`` lines and lines without
    ``=`` are skipped (``param.cc:26-51``). ``shown`` names at most that many per item.

    >>> [str(i) for i in nccl_settings({"NCCL_ALGO": "Ring", "PATH": "/bin"}, None)]
    ['NCCL environment: NCCL_ALGO=Ring (gloo runs the collectives) ignored at environment']
    """
    def listing(pairs: list[tuple[str, str]]) -> str:
        text = ", ".join(f"{k}={v[:40]}" for k, v in pairs[:shown])
        more = f" and {len(pairs) - shown} more" if len(pairs) > shown else ""
        return f"{text}{more} (gloo runs the collectives)"

    out = []
    env = sorted((k, str(v)) for k, v in environ.items()
                 if k.startswith(("NCCL_", "TORCH_NCCL_")) and k not in TORCHRUN_NCCL_VARS)
    if env:
        out.append(Ignored("NCCL environment", listing(env), "environment"))
    user = environ.get("NCCL_CONF_FILE") or (os.path.join(home, ".nccl.conf") if home else None)
    for path in (user, "/etc/nccl.conf"):
        if not path:
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        pairs = [(name, value) for name, _, value in (
            ln.partition("=") for ln in lines if not ln.startswith("#") and "=" in ln)]
        if pairs:
            out.append(Ignored("NCCL config file", f"{path}: {listing(pairs)}", path))
    return out


def _home_dir() -> str | None:
    """The user's home directory as NCCL finds it (``getpwuid(getuid())->pw_dir``)."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
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


def _bind(func: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    """``func``'s arguments by name (defaults left out)."""
    return dict(inspect.signature(func).bind(*args, **kwargs).arguments)


def _patch_dist(shim: Shim) -> None:
    import torch.distributed as dist
    import torch.distributed.device_mesh  # noqa: F401  (binds the names we replace)
    from torch.distributed import distributed_c10d as c10d

    orig_init, orig_new, orig_split = (c10d.init_process_group, c10d.new_group,
                                       c10d.split_group)

    def drop(call: str, bound: dict[str, Any]) -> None:
        mapped = map_backend(bound.get("backend"))
        if mapped != bound.get("backend"):
            shim.ignored.append(Ignored(call, f"backend {bound['backend']!r} (runs on gloo)",
                                        user_site()))
            bound["backend"] = mapped
        for key in ("pg_options", "device_id"):
            if bound.get(key) is not None:
                shim.ignored.append(Ignored(call, f"{key}={bound[key]!r}", user_site()))
                bound[key] = None

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        bound = _bind(orig_init, args, kwargs)
        drop("init_process_group", bound)
        return orig_init(**bound)

    def new_group(*args: Any, **kwargs: Any) -> Any:
        bound = _bind(orig_new, args, kwargs)
        drop("new_group", bound)
        return orig_new(**bound)

    def split_group(*args: Any, **kwargs: Any) -> Any:
        bound = _bind(orig_split, args, kwargs)
        drop("split_group", bound)
        parent = bound.get("parent_pg") or c10d._get_default_group()
        splits = bound.get("split_ranks")
        if not splits:
            raise ValueError("split_group needs split_ranks (a list of lists of ranks of the "
                             "parent group)")
        me = dist.get_rank(parent)
        world = parent is c10d._get_default_group()
        mine = None
        for split in splits:
            ranks = [dist.get_global_rank(parent, r) for r in split]
            if world:  # every rank takes part in every new_group, as torch expects
                pg = orig_new(ranks=ranks, timeout=bound.get("timeout"),
                              group_desc=bound.get("group_desc"))
                if me in split:
                    mine = pg
            elif me in split:
                mine = orig_new(ranks=ranks, timeout=bound.get("timeout"),
                                group_desc=bound.get("group_desc"),
                                use_local_synchronization=True)
        return mine

    for original, value in ((orig_init, init_process_group), (orig_new, new_group),
                            (orig_split, split_group)):
        _replace_everywhere(shim, "torch.distributed", original, value)
    if not hasattr(dist, "ProcessGroupNCCL"):
        _set(shim, dist, "ProcessGroupNCCL", _nccl_stand_in())


def _nccl_stand_in() -> type:
    class _Config:
        """Accepts any NCCL communicator config field (cga_cluster_size, max_ctas, ...)."""

    class ProcessGroupNCCL:
        """Stand-in for a CPU build: only ``Options`` (dropped at group creation)."""

        class Options:
            def __init__(self, is_high_priority_stream: bool = False):
                self.is_high_priority_stream = is_high_priority_stream
                self.config = _Config()

            def __repr__(self) -> str:
                fields = {"is_high_priority_stream": self.is_high_priority_stream,
                          **vars(self.config)}
                return f"ProcessGroupNCCL.Options({fields})"

    return ProcessGroupNCCL


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


def _enter_tensor_mode(shim: Shim, compute_stops: bool = False) -> None:
    from torch.overrides import TorchFunctionMode

    tensors = _CudaTensors(cuda_origin.Origins() if compute_stops else None)
    shim.origins = tensors.origins

    class CudaToCpu(TorchFunctionMode):
        """Puts tensors asked for on a CUDA device on the CPU; with ``compute_stops``, marks
        them (:mod:`.cuda_origin`) and stops compute on them."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            return tensors.call(func, tuple(args), dict(kwargs or {}))

    mode = CudaToCpu()
    mode.__enter__()
    shim._undo.append(lambda: mode.__exit__(None, None, None))


class _CudaTensors:
    """What the tensor mode does with one torch call: CUDA devices become ``cpu``; with
    ``origins`` (capture), the results are marked and compute on marked tensors stops."""

    def __init__(self, origins: cuda_origin.Origins | None):
        import torch

        self.origins = origins
        self.to, self.cuda, self.cpu = torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu
        self.pin = torch.Tensor.pin_memory
        self.parse_to = torch._C._nn._parse_to  # Module.to(device) asks it through the mode

    def call(self, func: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        if func is self.pin or (func is self.cuda and self.origins is None):
            return args[0]
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        args, asked = self.map_devices(func, args, kwargs)
        if self.origins is None:
            return func(*args, **kwargs)
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
