"""``simharness capture``: run the user's own initialisation code for every rank, without GPUs.

:func:`capture` runs a function, :func:`capture_command` a script
(``python my_init.py ARGS`` or ``python -m module ARGS``), once per rank under
torch's ``fake`` backend, and returns a :class:`~simharness.capture.record.Capture`:
every ``new_group`` call of every rank with its call site, and the getters asked for.
:func:`simharness.capture.checks.check_capture` turns it into findings.

How it runs (fast enough for a 1024-rank Megatron world on two cores):

* the parent imports torch and the script's imports once (its ``import``
  statements, found with ``ast``), then forks ``jobs`` workers (default: one per
  CPU core); worker ``i`` runs ranks ``i, i + jobs, ...`` in turn, each rank
  starting from the state before the first (see :mod:`.runtime`), or in
  its own forked process with ``isolate=True``;
* a rank outside a group never creates it (torch gives non-members nothing);
* workers stream each rank's result to the parent, so a crash, a hang or a kill
  leaves the ranks done so far in the capture; after the first failing rank no
  new rank starts (like torchrun, one failure ends the job);
* a rank that runs longer than ``timeout`` seconds gets its Python stack dumped
  (``faulthandler``, SIGUSR1) and is killed; the record names the frames.

Progress: ``progress(done, total, elapsed_s)`` is called about every two seconds.

This module is the public API (the inputs, :func:`run_program`, :func:`failure_message`);
the workers are :mod:`.fork_pool`, the cross-check of a few ranks alone :mod:`.crosscheck`
(their names are re-exported here).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..launch.toolbox import signals_caught, versions
from ..launch.toolbox import signals_caught as _signals_caught  # noqa: F401  (its old name)
from .crosscheck import (  # noqa: F401  (re-exported: callers import them from here)
    CROSSCHECK_TIMEOUT_S,
    CrossCheckRun,
    _compare_alone,
    _last_line,
    crosscheck,
    crosscheck_ranks,
    start_crosscheck,
)
from .fork_pool import (  # noqa: F401  (re-exported)
    _child_of,
    _dump_stack,
    _exit_text,
    _kill,
    _pack,
    _Pool,
    _run_isolated,
    _Worker,
    _worker_main,
    parse_stack_dump,
)
from .record import (
    NOT_RUN,
    OK,
    Capture,
    CaptureError,
    GetterSpec,
    RankRecord,
    parse_rank_spec,
)

DEFAULT_TIMEOUT_S = 120.0
PROGRESS_EVERY_S = 2.0


# ------------------------------------------------------------------ inputs
@dataclass(frozen=True)
class Program:
    """The code to run: ``target()`` runs it once; ``argv`` is its ``sys.argv``."""

    target: Callable[[], Any]
    argv: tuple[str, ...] | None
    label: str
    path: str | None = None


def _imports_of(source: str, filename: str) -> list[str]:
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        raise CaptureError(f"{filename}:{exc.lineno}: the script does not parse "
                           f"({exc.msg}); fix it and capture again.") from None
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names.extend(f"{node.module}.{a.name}" for a in node.names if a.name != "*")
    return names


def _local(name: str, folders: tuple[str, ...]) -> bool:
    """Whether the top-level package of ``name`` lives under one of ``folders`` (the
    script's own code), found without importing it."""
    if not folders:
        return False
    try:
        spec = importlib.util.find_spec(name.partition(".")[0])
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    places = [spec.origin or "", *(spec.submodule_search_locations or ())]
    return any(os.path.abspath(p).startswith(folders) for p in places if p)


def preimport(names: Iterable[str], local: Sequence[str] = ()) -> list[str]:
    """Import ``names`` now (in the parent, once for every worker); failures are left
    for the ranks to report. Modules under the ``local`` folders (the script's own) are not
    imported here: each rank imports them after its environment is set, so a module that
    reads ``RANK`` at import time sees its rank. Returns the names imported."""
    done = []
    folders = tuple(os.path.join(os.path.abspath(f), "") for f in local)
    for name in dict.fromkeys(names):
        if _local(name, folders):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module(name)
            done.append(name)
        except BaseException:  # noqa: BLE001 - e.g. `from pkg import function` (not a module)
            continue
    return done


def program_from_command(command: Sequence[str]) -> Program:
    """``python SCRIPT.py ARGS`` / ``python -m MODULE ARGS`` (``python`` optional).

    The command is checked by :func:`simharness.capture.command.parse_command` (the same
    check the CLI runs before any rank starts); this adds the preimports and the runner.
    """
    import runpy

    import torch.distributed  # noqa: F401 - before the script's folder joins sys.path

    from .command import parse_command

    args = list(command)
    if "-m" in args[:2] and "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # `python -m` finds modules under the current folder
    target = parse_command(args)
    if target.module is not None:
        module = target.module
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None  # parse_command found it
        with open(spec.origin, encoding="utf-8") as fh:
            preimport(_imports_of(fh.read(), spec.origin),
                      local=(os.getcwd(), os.path.dirname(spec.origin)))
        return Program(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True),
                       (spec.origin, *target.args), f"python -m {module}", spec.origin)
    script = target.path or ""
    with open(script, encoding="utf-8") as fh:
        source = fh.read()
    path = os.path.abspath(script)
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    preimport(_imports_of(source, script), local=(folder,))
    return Program(lambda: runpy.run_path(path, run_name="__main__"), (script, *target.args),
                   f"python {' '.join([script, *target.args])}", path)

def run_program(program: Program, world_size: int, *, ranks: Iterable[int] | None = None,
                timeout: float = DEFAULT_TIMEOUT_S, getters: Sequence[str | GetterSpec] = (),
                jobs: int | None = None, isolate: bool = False, accelerate: bool = True,
                skip_non_members: bool = True, auto_init: bool = False,
                gpus_per_node: int = 8,
                progress: Callable[[int, int, float], None] | None = None) -> Capture:
    """Run ``program`` once per rank (see the module doc); returns the (maybe partial) capture."""
    import torch.distributed  # noqa: F401 - imported once here, shared by every worker

    from .runtime import Job

    if world_size < 1:
        raise CaptureError(f"world size {world_size}: capture needs at least one rank.")
    rank_list = tuple(sorted(set(int(r) for r in ranks))) if ranks is not None \
        else tuple(range(world_size))
    bad = [r for r in rank_list if not 0 <= r < world_size]
    if bad:
        raise CaptureError(f"ranks {bad[:5]} are outside the world 0..{world_size - 1}.")
    specs = tuple(g if isinstance(g, GetterSpec) else GetterSpec.parse(g) for g in getters)
    job = Job(world_size, program.target, auto_init, specs, skip_non_members, program.argv,
              gpus_per_node)
    n_jobs = max(1, min(jobs or os.cpu_count() or 1, len(rank_list)))
    t0 = last_report = time.monotonic()
    with signals_caught() as got:
        pool = _Pool(job, rank_list, n_jobs, isolate=isolate, accelerate=accelerate,
                     timeout=timeout)
        try:
            while pool.live:
                if got:  # SIGINT/SIGTERM: stop every worker, keep what the ranks reported
                    pool.stop_all(signal.Signals(got[0]).name, isolate)
                    break
                pool.receive()
                pool.check_timeouts()
                now = time.monotonic()
                if progress is not None and now - last_report >= PROGRESS_EVERY_S:
                    last_report = now
                    progress(len(pool.records), len(rank_list), now - t0)
        except BaseException:
            pool.close(kill=True)
            raise
    if not got:
        pool.close()
    records = pool.records
    for r in rank_list:
        records.setdefault(r, RankRecord(r, NOT_RUN))
    elapsed = time.monotonic() - t0
    if progress is not None and elapsed >= PROGRESS_EVERY_S:
        progress(sum(1 for r in records.values() if r.status != NOT_RUN), len(rank_list),
                 elapsed)
    meta = {"command": program.label, "mode": "fast", "world_size": world_size,
            "workers": n_jobs,
            "elapsed_s": round(elapsed, 3), "isolate": isolate, "accelerate": accelerate,
            "skip_non_members": skip_non_members, "timeout_s": timeout, "versions": versions()}
    if pool.crashes and not got:
        meta["worker_errors"] = pool.crashes
    if got:
        meta["signal"] = signal.Signals(got[0]).name
    return Capture(world_size, rank_list, tuple(pool.sequences), records, meta)


def capture_command(command: Sequence[str], world_size: int, **kwargs) -> Capture:
    """Capture a script: ``capture_command(["python", "init.py", "--tp", "2"], 16)``.

    The script must call ``torch.distributed.init_process_group`` itself (any
    backend; it gets the ``fake`` one). Keyword arguments: see :func:`run_program`.
    """
    return run_program(program_from_command(command), world_size, auto_init=False, **kwargs)


def capture(fn: Callable[[], Any], world_size: int, *, ranks: Iterable[int] | str | None = None,
            timeout: float = DEFAULT_TIMEOUT_S, getters: Sequence[str] = (),
            jobs: int | None = None, isolate: bool = False, accelerate: bool = True,
            init_process_group: bool = True,
            progress: Callable[[int, int, float], None] | None = None) -> Capture:
    """Run ``fn()`` once per rank of a ``world_size`` world under torch's fake backend and
    record every ``new_group`` call (see :mod:`simharness.capture.inprocess`).

    ``init_process_group=True`` starts the fake world before ``fn`` (a call of
    ``init_process_group`` inside ``fn`` is then recorded and ignored). ``ranks``:
    an iterable or a spec such as ``"0-7,12"`` (default all). The capture is
    returned even when ranks failed (``capture.failed``); check it with
    :func:`simharness.capture.checks.check_capture`.

    >>> import torch.distributed as dist
    >>> cap = capture(lambda: dist.new_group([0, 1], group_desc="PAIR"), 2, jobs=1)
    >>> [c.label() for c in cap.calls(1)]
    ['PAIR [0, 1]']
    """
    if isinstance(ranks, str):
        ranks = parse_rank_spec(ranks, world_size)
    program = Program(fn, None, getattr(fn, "__qualname__", repr(fn)))
    return run_program(program, world_size, ranks=ranks, timeout=timeout, getters=getters,
                       jobs=jobs, isolate=isolate, accelerate=accelerate,
                       auto_init=init_process_group, progress=progress)


def failure_message(cap: Capture, out_path: str | None = None) -> str | None:
    """One line for the first failed rank (lowest), or None when every rank ran."""
    failed = cap.failed
    from .checks import stopped_on_divergence

    if stopped_on_divergence(cap):
        return None  # stopped on diverging calls: the findings name them
    saved = f"; the partial capture is in {out_path}" if out_path else ""
    if not failed:
        crash = cap.meta.get("worker_errors")
        if crash:
            last = str(crash[0]).strip().splitlines()[-1]
            return f"a capture worker failed: {last}{saved}"
        return None
    rec = failed[0]
    err = dict(rec.error or {})
    where = list(err.get("where") or [])
    at = f" at {where[0]}" if where else ""
    via = f" (called from {', '.join(where[1:3])})" if len(where) > 1 else ""
    others = f"; {len(failed) - 1} more rank(s) failed" if len(failed) > 1 else ""
    kind = err.get("kind")
    done = sum(1 for r in cap.records.values() if r.status == OK)
    ok = f"; {done} of {len(cap.ranks)} ranks completed"
    n_before = err.get("calls_before")
    calls = f" after {n_before} new_group call(s)" if n_before else ""
    if kind == "timeout" and str(err.get("message", "")).startswith(f"rank {rec.rank} "):
        msg = (f"{err['message']}: it was in {where[0] if where else 'an unknown place'}{via}; "
               f"raise --timeout/--grace if it is only slow")
    elif kind == "timeout":
        msg = (f"rank {rec.rank} did not finish within {cap.meta.get('timeout_s', '?')} s: it "
               f"was in {where[0] if where else 'an unknown place'}{via}; raise --timeout if it "
               f"is only slow")
    elif kind == "no-init":
        msg = (f"rank {rec.rank}: {err.get('message')}{at}{calls}; call "
               f"torch.distributed.init_process_group first (any backend: capture replaces it "
               f"with the fake one)")
    elif kind == "gpu-only" and cap.meta.get("mode") == "fast":
        msg = (f"rank {rec.rank} calls a GPU/NCCL-only API{at}{via}{calls}: {err.get('message')}"
               f"; --fast runs on CPU under the fake backend: drop --fast (the default mode "
               f"answers the CUDA device calls), or guard the call with "
               f"torch.cuda.is_available()")
    elif kind == "gpu-only" and str(err.get("message", "")).startswith("needs a real GPU"):
        msg = f"rank {rec.rank} stopped{calls}: {err['message']}"  # the shim's NeedsGPU
    elif kind == "gpu-only":
        msg = (f"rank {rec.rank} makes a call that needs a real GPU{at}{via}{calls}: "
               f"{err.get('message')}; capture answers the CUDA device calls, NCCL and CUDA "
               f"tensors on CPU, not this: move it after the group creation, or behind a flag")
    elif kind == "import":
        msg = (f"rank {rec.rank} cannot import what the script needs{at}{via}: "
               f"{err.get('message')}; a plain run of the script fails the same way: install "
               f"it, or capture where it is installed")
    else:
        msg = f"rank {rec.rank} failed{at}{via}{calls}: {err.get('message')}"
    return msg + others + ok + saved
