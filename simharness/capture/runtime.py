"""Run the user's code as one rank under torch's ``fake`` backend and record its groups.

Runs inside a capture worker (a process forked by :mod:`simharness.capture.inprocess`);
imports torch. What it changes, and only while a rank runs (:data:`_ACTIVE` set):

* ``init_process_group`` starts the ``fake`` backend on a ``FakeStore`` with the
  capture's rank and world (the backend, ``init_method`` and the rest the code
  passed are recorded, not used);
* ``new_group`` records the call (:class:`GroupCall`) and creates the group with
  the ``fake`` backend. A rank outside a group gets what torch gives a non-member
  (``GroupMember.NON_GROUP_MEMBER``, or ``None`` with ``use_local_synchronization``)
  without creating anything: torch's group counter is advanced exactly as
  ``new_group`` would, so group names stay the ones a real job gets.

Both are replaced in every loaded module that imported them by name
(``torch.distributed.device_mesh`` does). Between ranks run in one process,
the default group is destroyed, ``os.environ`` and ``sys.argv`` are restored,
the module globals of every non-stdlib, non-torch module are put back to their
values before the first rank (rebinding names, refilling module-level lists,
dicts and sets) and modules first imported by a rank are dropped, so each rank
starts as a fresh process would. ``isolate=True`` forks a process per rank
instead (slower, for code whose state lives elsewhere).

Megatron accelerators (``accelerate=True``): in every loaded Megatron
``parallel_state`` module, the pure helpers ``generate_masked_orthogonal_rank_groups``
(rank lists from sizes; identical on every rank) and ``is_torch_min_version`` are
memoised per worker, returning fresh copies. They do not change a single call
(tests/test_capture.py compares with and without them).
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from .record import FAILED, OK, CaptureError, GetterSpec, GroupCall

KNOWN_BACKENDS = frozenset({"nccl", "gloo", "ucc", "mpi", "fake", "xccl"})
STACK_DEPTH = 3

_ORIG_NEW_GROUP = c10d.new_group
_ORIG_INIT = c10d.init_process_group
_ACTIVE: Recorder | None = None

_TORCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(dist.__file__)))
_STDLIB_DIR = os.path.abspath(sysconfig.get_paths()["stdlib"])
_HERE = os.path.dirname(os.path.abspath(__file__))
_LAUNCH_DIR = os.path.join(os.path.dirname(_HERE), "launch")
# Frames of the capture's (and the rank bootstrap's) own code: the user's stack ends there.
# rank.py (both): the published ``python -m`` names, which run the worker and the bootstrap.
_OWN_FILES = frozenset([*(os.path.join(_HERE, f) for f in ("runtime.py", "inprocess.py",
                                                             "fork_pool.py", "faithful_rank.py",
                                                             "rank.py")),
                        *(os.path.join(_LAUNCH_DIR, f) for f in ("bootstrap.py", "rank.py"))])


# ------------------------------------------------------------------ frames
_FOREIGN: dict[str, bool] = {}


def _foreign(filename: str) -> bool:
    """Frames a call site never points at: torch, the standard library, this capture."""
    hit = _FOREIGN.get(filename)
    if hit is None:
        f = os.path.abspath(filename) if not filename.startswith("<") else filename
        hit = (f.startswith(_TORCH_DIR) or f in _OWN_FILES or filename.startswith("<frozen")
               or f.startswith(_LAUNCH_DIR + os.sep)  # the GPU shim's wrappers
               or (f.startswith(_STDLIB_DIR) and "-packages" not in f))
        _FOREIGN[filename] = hit
    return hit


def short_path(filename: str) -> str:
    """A path for messages: relative to the working directory, else from site-packages."""
    try:
        rel = os.path.relpath(filename)
        if not rel.startswith(".."):
            return rel
    except ValueError:  # pragma: no cover - another drive
        pass
    _, sep, tail = filename.rpartition("-packages" + os.sep)
    return tail if sep else filename


_SITE_CACHE: dict[tuple[str, str, int], str] = {}


def _frame_text(filename: str, function: str, lineno: int) -> str:
    key = (filename, function, lineno)
    text = _SITE_CACHE.get(key)
    if text is None:
        text = _SITE_CACHE[key] = f"{short_path(filename)}:{lineno} {function}"
    return text


_LINES: dict[tuple[int, int], tuple[Any, tuple[str, str, int]]] = {}  # (id(code), lasti)


def call_stack(frame, depth: int = STACK_DEPTH) -> tuple:
    """Up to ``depth`` frames from ``frame`` outwards as ``(file, function, line)``, torch,
    stdlib and capture frames skipped (:func:`stack_text` makes them text). Names, not
    code objects: a script run again per rank compiles to new code objects."""
    out: list[tuple[str, str, int]] = []
    foreign = _FOREIGN
    while frame is not None and len(out) < depth:
        code = frame.f_code
        name = code.co_filename
        skip = foreign.get(name)
        if skip is None:
            if name in _OWN_FILES:
                break  # the capture's own frames: everything further out is not the user's
            skip = _foreign(name)
        if not skip:
            key = (id(code), frame.f_lasti)
            hit = _LINES.get(key)
            if hit is None or hit[0] is not code:  # f_lineno decodes the line table: cache it
                hit = _LINES[key] = (code, (name, code.co_name, frame.f_lineno))
            out.append(hit[1])
        elif name in _OWN_FILES:
            break
        frame = frame.f_back
    return tuple(out)


def stack_text(stack: tuple) -> tuple[str, ...]:
    """``(file, function, line)`` frames -> ``"file:line function"`` strings."""
    return tuple(_frame_text(*frame) for frame in stack)


def finish_calls(calls) -> tuple[GroupCall, ...]:
    """Recorded call tuples -> :class:`GroupCall` objects with their stacks as text."""
    return tuple(GroupCall(r, d, b, loc, o, n, stack_text(st), kept)
                 for r, d, b, loc, o, n, st, kept in calls)


def where_text(frames: list[tuple[str, Any, str]]) -> list[str]:
    """Frames (innermost first) for messages: the innermost frame when it is torch's or
    the standard library's, then up to four frames of the user's code, stopping at the
    capture's own frames."""
    own = []
    for f, ln, fn in frames:
        if os.path.abspath(f) in _OWN_FILES:
            break
        if not _foreign(f):
            own.append(f"{short_path(f)}:{ln} {fn}")
    first = frames[0] if frames else None
    head = [f"{short_path(first[0])}:{first[1]} {first[2]}"] \
        if (first and _foreign(first[0]) and os.path.abspath(first[0]) not in _OWN_FILES
            and not os.path.abspath(first[0]).startswith(_LAUNCH_DIR + os.sep)) else []
    return head + own[:4]


def traceback_where(tb) -> list[str]:
    """:func:`where_text` of an exception's traceback."""
    return where_text([(f.filename, f.lineno, f.name) for f in reversed(traceback.extract_tb(tb))])


# ---------------------------------------------------------------- recorder
@dataclass
class Recorder:
    """One rank's run: its calls, the groups it got, how the code initialised torch."""

    rank: int
    world_size: int
    skip_non_members: bool = True
    calls: list[tuple] = field(default_factory=list)  # GroupCall fields, stack as frames
    pg_index: dict[int, int] = field(default_factory=dict)   # id(group) -> call index
    init: dict[str, Any] = field(default_factory=dict)
    auto_init: bool = False


_INTERNED: dict[tuple, tuple] = {}


def _intern(t: tuple) -> tuple:
    """One object per distinct tuple in this worker, so comparing two ranks' sequences
    mostly compares identities."""
    return _INTERNED.setdefault(t, t)


_RANKS: dict[tuple[tuple[int, ...], int], tuple[tuple[int, ...], bool]] = {}


def _interned_ranks(ranks: tuple[int, ...], world: int) -> tuple[tuple[int, ...], bool]:
    """The worker's one copy of a rank list, and whether torch would accept it (no
    duplicates, inside the world): non-members skip torch, so capture checks for it."""
    hit = _RANKS.get((ranks, world))
    if hit is None:
        ok = len(set(ranks)) == len(ranks) and (not ranks or (min(ranks) >= 0
                                                              and max(ranks) < world))
        hit = _RANKS[(ranks, world)] = (ranks, ok)
    return hit


def recording_new_group(ranks=None, timeout=None, backend=None, pg_options=None,
                        use_local_synchronization=False, group_desc=None, device_id=None,
                        **kwargs):
    """``torch.distributed.new_group`` as seen by the captured code (see the module doc)."""
    rec = _ACTIVE
    if rec is None:
        return _ORIG_NEW_GROUP(ranks=ranks, timeout=timeout, backend=backend,
                               pg_options=pg_options,
                               use_local_synchronization=use_local_synchronization,
                               group_desc=group_desc, device_id=device_id, **kwargs)
    if ranks is None:
        ranks_t, valid = None, True
    else:
        ranks_t, valid = _interned_ranks(tuple(map(int, ranks)), rec.world_size)
    ordered = kwargs.get("sort_ranks", True) is False  # torch keeps the list's order
    local = bool(use_local_synchronization)
    member = ranks_t is None or rec.rank in ranks_t
    name = None if local else str(c10d._world.group_count)  # torch's name for such a group
    bname = None if backend is None else str(backend)
    if not member and rec.skip_non_members and valid:
        if not local:
            c10d._world.group_count += 1
        pg = None if local else dist.GroupMember.NON_GROUP_MEMBER
    else:
        forward = "fake" if bname is None or bname.lower() in KNOWN_BACKENDS else backend
        pg = _ORIG_NEW_GROUP(ranks=None if ranks_t is None else list(ranks_t), timeout=timeout,
                             backend=forward, use_local_synchronization=local,
                             group_desc=group_desc, **kwargs)
        if member:
            if local:
                name = getattr(pg, "group_name", None)
            rec.pg_index[id(pg)] = len(rec.calls)
    opts = None if pg_options is None else type(pg_options).__name__
    # A plain tuple (GroupCall's fields; the stack as code ids): made into a GroupCall by
    # finish_calls, once per distinct sequence.
    rec.calls.append((ranks_t, group_desc, bname, local, opts, name,
                      _intern(call_stack(sys._getframe(1))), ordered))
    return pg


def recording_init_process_group(backend=None, init_method=None, timeout=None, world_size=-1,
                                 rank=-1, store=None, group_name="", pg_options=None,
                                 device_id=None, **kwargs):
    """``init_process_group``: the fake backend with the capture's rank and world."""
    rec = _ACTIVE
    if rec is None:
        return _ORIG_INIT(backend=backend, init_method=init_method, timeout=timeout,
                          world_size=world_size, rank=rank, store=store, group_name=group_name,
                          pg_options=pg_options, device_id=device_id, **kwargs)
    site = stack_text(call_stack(sys._getframe(1), 1))
    if world_size not in (-1, None) and int(world_size) != rec.world_size:
        raise CaptureError(f"the code passes world_size={world_size} to init_process_group "
                           f"({site[0] if site else '?'}) but the capture runs a world of "
                           f"{rec.world_size}; capture with -n {world_size}, or let the code "
                           f"read WORLD_SIZE.")
    if rank not in (-1, None) and int(rank) != rec.rank:
        raise CaptureError(f"the code passes rank={rank} to init_process_group on rank "
                           f"{rec.rank} ({site[0] if site else '?'}); let it read RANK from "
                           f"the environment.")
    rec.init.setdefault("calls", []).append({
        "backend": None if backend is None else str(backend), "init_method": init_method,
        "site": site[0] if site else "simharness"})
    if rec.auto_init and dist.is_initialized():
        return None  # the capture started the world already; the code's call is recorded
    from torch.testing._internal.distributed.fake_pg import FakeStore

    _ORIG_INIT("fake", store=FakeStore(), rank=rec.rank, world_size=rec.world_size,
               **({"timeout": timeout} if timeout is not None else {}))


_ORIG_GET_RANK = c10d.get_rank
_ORIG_GET_WORLD_SIZE = c10d.get_world_size


def fast_get_rank(group=None):
    """``get_rank()`` of the world without torch's lookups (Megatron asks once per group)."""
    rec = _ACTIVE
    if group is None and rec is not None and c10d._world._default_pg is not None:
        return rec.rank
    return _ORIG_GET_RANK(group)


def fast_get_world_size(group=None):
    rec = _ACTIVE
    if group is None and rec is not None and c10d._world._default_pg is not None:
        return rec.world_size
    return _ORIG_GET_WORLD_SIZE(group)


_ORIG_SET_DEVICE: Callable | None = None


def fast_set_device(device) -> None:
    """``torch.cuda.set_device`` while a ``--fast`` rank runs: a no-op, recorded as ignored
    (the fake backend needs no device; a GPU-style script runs unedited). Outside a rank,
    torch's own."""
    rec = _ACTIVE
    if rec is None:
        assert _ORIG_SET_DEVICE is not None
        return _ORIG_SET_DEVICE(device)
    site = stack_text(call_stack(sys._getframe(1), 1))
    rec.init.setdefault("ignored", []).append({
        "call": f"torch.cuda.set_device({device!r})", "site": site[0] if site else "?",
        "why": "--fast runs every rank on CPU under the fake backend"})
    return None


def install_patches() -> int:
    """Point every loaded ``new_group``/``init_process_group`` name at the recording
    versions (and ``get_rank``/``get_world_size`` at shortcuts that answer the same);
    returns how many names were replaced."""
    swaps = {id(_ORIG_NEW_GROUP): recording_new_group, id(_ORIG_INIT): recording_init_process_group,
             id(_ORIG_GET_RANK): fast_get_rank, id(_ORIG_GET_WORLD_SIZE): fast_get_world_size}
    names = ("new_group", "init_process_group", "get_rank", "get_world_size")
    n = 0
    global _ORIG_SET_DEVICE
    import torch

    if _ORIG_SET_DEVICE is None:
        _ORIG_SET_DEVICE = torch.cuda.set_device
        torch.cuda.set_device = fast_set_device  # see its doc
        n += 1
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict):
            continue
        for name in names:
            v = d.get(name)
            if v is not None and id(v) in swaps:
                d[name] = swaps[id(v)]
                n += 1
    return n


# ------------------------------------------------------- megatron accelerators
def _freeze(v):
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


def _memo_rank_groups(fn: Callable) -> Callable:
    cache: dict = {}

    def memo(*args, **kwargs):
        key = (_freeze(args), tuple(sorted(kwargs.items())))
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = tuple(tuple(g) for g in fn(*args, **kwargs))
        return [list(g) for g in hit]

    memo.__simharness_memo__ = fn  # type: ignore[attr-defined]
    return memo


def _memo_value(fn: Callable) -> Callable:
    cache: dict = {}

    def memo(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items()))) if kwargs else args
        try:
            return cache[key]
        except KeyError:
            out = cache[key] = fn(*args, **kwargs)
            return out
        except TypeError:  # an unhashable argument: no memo
            return fn(*args, **kwargs)

    memo.__simharness_memo__ = fn  # type: ignore[attr-defined]
    return memo


def accelerate_megatron() -> list[str]:
    """Memoise the pure helpers of every loaded Megatron ``parallel_state``; returns the
    module names touched."""
    touched = []
    for name, mod in list(sys.modules.items()):
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict) or "initialize_model_parallel" not in d:
            continue
        gen = d.get("generate_masked_orthogonal_rank_groups")
        if callable(gen) and not hasattr(gen, "__simharness_memo__"):
            d["generate_masked_orthogonal_rank_groups"] = _memo_rank_groups(gen)
            touched.append(name)
        ver = d.get("is_torch_min_version")
        if callable(ver) and not hasattr(ver, "__simharness_memo__"):
            d["is_torch_min_version"] = _memo_value(ver)
    return touched


# ------------------------------------------------------------ module state
_UNTRACKED = frozenset({
    "torch", "numpy", "simharness", "_pytest", "pytest", "pluggy", "click", "yaml",
    "networkx", "sympy", "mpmath", "jinja2", "markupsafe", "filelock", "fsspec",
    "typing_extensions", "packaging", "hypothesis", "xdist", "execnet", "einops",
    "sortedcontainers", "attr", "attrs", "iniconfig", "_distutils_hack", "pkg_resources",
    "setuptools", "importlib_metadata", "zipp", "tomli", "cli", "__main__", "__mp_main__",
})
_CONTAINERS = (list, dict, set)


def _tracked(name: str, mod) -> bool:
    top = name.partition(".")[0]
    return (top not in _UNTRACKED and top not in sys.stdlib_module_names
            and isinstance(getattr(mod, "__dict__", None), dict))


class ModuleState:
    """The globals of every tracked module, to put back between ranks."""

    def __init__(self):
        self.names = set(sys.modules)
        self.saved = []
        for name, mod in list(sys.modules.items()):
            if mod is None or not _tracked(name, mod):
                continue
            d = vars(mod)
            conts = {k: v.copy() for k, v in d.items() if type(v) in _CONTAINERS}
            self.saved.append((d, dict(d), conts))

    def restore(self) -> None:
        for name in set(sys.modules) - self.names:
            mod = sys.modules.get(name)
            if mod is None or _tracked(name, mod):
                sys.modules.pop(name, None)
        for d, saved, conts in self.saved:
            if len(d) != len(saved):
                for k in [k for k in d if k not in saved]:
                    del d[k]
            for k, v in saved.items():
                if d.get(k, d) is not v:
                    d[k] = v
            for k, c in conts.items():
                obj = saved[k]
                if obj != c:
                    if type(obj) is list:
                        obj[:] = c
                    else:
                        obj.clear()
                        obj.update(c)


# ------------------------------------------------------------------- getters
MAX_ITEMS = 4096


def describe(value: Any, rec: Recorder, depth: int = 0) -> Any:
    """A getter's value as plain data: a group becomes its call index, desc and ranks."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dist.ProcessGroup):
        try:
            ranks = list(dist.get_process_group_ranks(value))
        except (RuntimeError, ValueError, KeyError):
            ranks = None
        if value is c10d.GroupMember.WORLD:
            return {"group": "WORLD", "ranks": ranks}
        idx = rec.pg_index.get(id(value))
        desc = rec.calls[idx][1] if idx is not None else None
        return {"group": idx, "desc": desc, "name": getattr(value, "group_name", None),
                "ranks": ranks}
    if depth > 4:
        return repr(value)[:200]
    if isinstance(value, (list, tuple)):
        return [describe(v, rec, depth + 1) for v in value[:MAX_ITEMS]]
    if isinstance(value, dict):
        return {str(k): describe(v, rec, depth + 1) for k, v in list(value.items())[:MAX_ITEMS]}
    return repr(value)[:200]


def read_getter(spec: GetterSpec, namespace: Mapping[str, Any] | None, rec: Recorder) -> Any:
    import importlib

    try:
        if spec.module == "__main__":
            if namespace is None:
                raise LookupError("the code left no __main__ namespace")
            obj: Any = namespace[spec.path[0]]
            rest = spec.path[1:]
        else:
            obj = importlib.import_module(spec.module)
            rest = spec.path
        for attr in rest:
            obj = getattr(obj, attr)
        if spec.call or callable(obj) and not isinstance(obj, type):
            obj = obj(*spec.args, **dict(spec.kwargs))
    except Exception as exc:  # noqa: BLE001 - the getter's failure is its value
        return {"raises": f"{type(exc).__name__}: {exc}"[:300]}
    return describe(obj, rec)


# ----------------------------------------------------------------- one rank
@dataclass(frozen=True)
class Job:
    """What every rank runs: ``target()`` runs the code and returns its namespace (or None)."""

    world_size: int
    target: Callable[[], Mapping[str, Any] | None]
    auto_init: bool = False
    getters: tuple[GetterSpec, ...] = ()
    skip_non_members: bool = True
    argv: tuple[str, ...] | None = None
    gpus_per_node: int = 8


_GPU_HINT = re.compile(r"cuda|nccl|gpu|nvml|not compiled with", re.IGNORECASE)
_NO_INIT = "Default process group has not been initialized"


def _classify(exc: BaseException, rec: Recorder) -> dict[str, Any]:
    where = traceback_where(exc.__traceback__)
    text = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, CaptureError):
        kind = "input"
    elif _NO_INIT in str(exc):
        kind = "no-init"
    elif _GPU_HINT.search(text) or any("cuda" in w.split(":")[0] for w in where[:1]):
        kind = "gpu-only"
    else:
        kind = "exception"
    return {"kind": kind, "message": " ".join(text.split())[:500], "where": where,
            "calls_before": len(rec.calls)}


def rank_environment(rank: int, world: int, gpus_per_node: int) -> dict[str, str]:
    """What torchrun sets for a rank (:class:`simharness.launch.env.RankEnv`; a loopback
    rendezvous that is never used), ``gpus_per_node`` ranks per node, plus ``NODE_RANK``."""
    from ..launch.env import RankEnv

    local = min(gpus_per_node, world)
    env = RankEnv(rank=rank, local_rank=rank % local, world_size=world, local_world_size=local,
                  master_port=29500, run_id="simharness-capture", group_rank=rank // local,
                  group_world_size=-(-world // local)).to_environ()
    env["NODE_RANK"] = str(rank // local)
    return env


class RankOutput:
    """A text stream that writes each line to ``sys.__stderr__`` prefixed ``[rankN]:``,
    as torchrun's ``--tee`` does (the rank's prints never reach the capture's stdout)."""

    def __init__(self, rank: int):
        self.prefix = f"[rank{rank}]:"
        self.partial = ""

    def write(self, text: str) -> int:
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        err = sys.__stderr__
        if lines and err is not None:
            err.write("".join(f"{self.prefix}{ln}\n" for ln in lines))
        return len(text)

    def flush(self) -> None:
        err = sys.__stderr__
        if self.partial and err is not None:
            err.write(f"{self.prefix}{self.partial}\n")
            self.partial = ""
        if err is not None:
            err.flush()

    def isatty(self) -> bool:
        return False


class RankExit(BaseException):
    """The code's ``os._exit(status)`` inside a ``--fast`` rank (see :func:`run_rank`)."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def _exit_hook() -> Callable[[int], None]:
    """``os._exit`` while a ``--fast`` rank runs: the worker runs more ranks, so the call ends
    the rank (as ``sys.exit`` would: the code's ``finally`` blocks run, which a real process
    would skip) and not the worker. A process the code forked keeps the plain one."""
    real, pid = os._exit, os.getpid()

    def hook(status: int) -> None:
        if os.getpid() != pid:
            real(status)
        raise RankExit(status)

    return hook


def run_rank(job: Job, rank: int, state: ModuleState | None) -> dict[str, Any]:
    """Run the code as ``rank``; returns ``{"status", "calls", "getters", "init", "error"}``."""
    global _ACTIVE
    rec = Recorder(rank, job.world_size, job.skip_non_members, auto_init=job.auto_init)
    saved_env, saved_argv = dict(os.environ), list(sys.argv)
    os.environ.update(rank_environment(rank, job.world_size, job.gpus_per_node))
    if job.argv is not None:
        sys.argv[:] = list(job.argv)
    out: dict[str, Any] = {"status": OK, "getters": {}, "error": None}
    saved_streams = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = RankOutput(rank)
    from ..launch.children import descendants, end_processes

    before = set(descendants(os.getpid()))
    _ACTIVE = rec
    real_exit = os._exit
    os._exit = _exit_hook()  # type: ignore[assignment]  # raises RankExit instead
    try:
        if job.auto_init:
            recording_init_process_group()
        namespace = None
        try:
            namespace = job.target()
        except (SystemExit, RankExit) as exc:
            code = exc.status if isinstance(exc, RankExit) else exc.code
            how = "ended the process with os._exit(" if isinstance(exc, RankExit) else \
                "exited with status "
            if code not in (None, 0):
                out["status"] = FAILED
                out["error"] = {"kind": "exit", "message": f"the code {how}{code}"
                                + (")" if isinstance(exc, RankExit) else ""),
                                "where": traceback_where(exc.__traceback__),
                                "calls_before": len(rec.calls)}
        except Exception as exc:  # noqa: BLE001 - reported per rank
            out["status"] = FAILED
            out["error"] = _classify(exc, rec)
        if out["status"] == OK and not rec.init.get("calls"):  # ever called (see faithful_rank)
            out["status"] = FAILED
            out["error"] = {"kind": "no-init", "message": "the code finished without calling "
                            "torch.distributed.init_process_group", "where": [],
                            "calls_before": len(rec.calls)}
        if out["status"] == OK:
            out["getters"] = {g.text: read_getter(g, namespace, rec) for g in job.getters}
    finally:
        _ACTIVE = None
        os._exit = real_exit
        end_processes([p for p in descendants(os.getpid()) if p not in before], 0.5)
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        finally:
            sys.stdout.flush()
            sys.stdout, sys.stderr = saved_streams
            os.environ.clear()
            os.environ.update(saved_env)
            sys.argv[:] = saved_argv
            if state is not None:
                state.restore()
    out["calls"] = rec.calls
    out["init"] = rec.init
    return out
