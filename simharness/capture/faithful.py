"""Faithful capture (the default): every rank its own interpreter, started as torchrun starts it.

:func:`run_faithful` starts ``world_size`` ranks of ``python -m simharness.capture.faithful_rank
-- TARGET`` through torch's elastic agent (:func:`simharness.launch.launcher.launch`, c10d
rendezvous on 127.0.0.1): torchrun's variables are set before each interpreter starts, each
has its own string-hash seed (``PYTHONHASHSEED`` is removed from the ranks' environment),
the default group is real gloo over the loopback store (collectives return real data) and
the GPU calls go through the CPU shim (see :mod:`.faithful_rank`). Each rank writes its record
into a temporary directory; they are merged into one :class:`~simharness.capture.record.Capture`.

Output: the ranks' stdout and stderr lines go to this process's stderr prefixed ``[rankN]:``
by the rank itself (:mod:`simharness.launch.output`; never to stdout), or to files under
``log_dir``. SIGINT/SIGTERM: the agent stops every rank
(each writes what it recorded so far, status ``stopped``), the partial capture is returned
with ``meta["signal"]`` set, and the temporary files are removed.

Memory: each rank is a Python process with torch imported. :func:`memory_check` refuses a
world whose estimate (``world_size`` x :data:`RANK_MEMORY_MB`, or the caller's figure) is
larger than the memory available now, naming the estimate, the limit and the largest world
that fits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .. import envvars
from ..launch.toolbox import refuse_world, versions
from .command import Target
from .merge import merge_records
from .record import FAILED, NOT_RUN, Capture, CaptureError, GetterSpec, RankRecord

#: Peak resident memory of one rank: a Python process with torch, gloo and the shim running
#: tests/fixtures/capture/faithful_job.py peaked at 250-260 MB (VmHWM; 146 MB of it anonymous
#: after ``import torch.distributed``). A script importing more (megatron.core: about 390 MB)
#: needs more; the estimate is a floor.
RANK_MEMORY_MB = 260
PARENT_SLACK_S = 30.0   # the parent stops the launch this long after the ranks' own timeout


def available_memory_mb() -> int:
    """The memory this process may use, in MiB: :func:`simharness.resources.available_memory`
    (``MemAvailable``, or less under a cgroup limit, or ``SIMHARNESS_MEMORY_LIMIT``)."""
    from ..resources import MIB, available_memory

    return available_memory().available // MIB


def memory_check(world_size: int, per_rank_mb: int = RANK_MEMORY_MB,
                 available_mb: int | None = None) -> None:
    """Refuse, up front, a world whose processes would not fit in the memory available.

    >>> memory_check(4, 260, 2000)
    >>> try:
    ...     memory_check(64, 260, 2000)
    ... except CaptureError as exc:
    ...     print(str(exc)[:92])
    a faithful capture of 64 ranks needs about 16640 MB (64 processes x 260 MB each) but 2000 MB
    """
    refuse_world(world_size, per_rank_mb, what="a faithful capture", error=CaptureError,
                 instead="use --fast (forked workers share one interpreter's memory), or free "
                         "memory.",
                 available_mb=available_memory_mb() if available_mb is None else available_mb)


@contextlib.contextmanager
def _rank_environ(extra: dict[str, str]) -> Iterator[None]:
    """The ranks inherit this process's environment: no fixed hash seed, plus ``extra``."""
    saved = dict(os.environ)
    os.environ.pop("PYTHONHASHSEED", None)
    os.environ.update(extra)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _fd_stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 is fd 2 while the ranks run: the ranks inherit it, so nothing a
    rank writes (before its output is prefixed, or from a child) reaches our stdout."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all
        yield
        return
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def rank_command(target: Target, out_dir: str, *, timeout: float | None, grace: float,
                 getters: Sequence[GetterSpec] = ()) -> tuple[str, ...]:
    """What each rank runs (after ``python``).

    >>> from simharness.capture.command import Target
    >>> rank_command(Target("init.py", None, ("--tp", "2")), "/d", timeout=60, grace=5)
    ('-m', 'simharness.capture.faithful_rank', '--out-dir', '/d', '--grace', '5', '--timeout', \
'60', '--', 'init.py', '--tp', '2')
    """
    opts: list[str] = ["--out-dir", out_dir, "--grace", f"{grace:g}"]
    if timeout is not None:
        opts += ["--timeout", f"{timeout:g}"]
    for g in getters:
        opts += ["--getter", g.text]
    return ("-m", "simharness.capture.faithful_rank", *opts, "--", *target.argv)


#: How many ranks may import at once (:mod:`simharness.launch.stagger`):
#: ``SIMHARNESS_CAPTURE_START_SLOTS``; unset or 0, all at once, as torchrun starts them.
#: Measured at world 64 on 2 shared cores (README): 2 slots took 7% less CPU but 40% more
#: wall time, since two runnable ranks get a smaller share of busy cores than 64 do.
SLOTS_ENV = "SIMHARNESS_CAPTURE_START_SLOTS"


def start_slots_for(asked: int | None, environ: Any = None) -> int:
    """The start slots of a capture: ``asked``, else :data:`SLOTS_ENV`, else 0.

    >>> start_slots_for(3), start_slots_for(None, {SLOTS_ENV: "2"}), start_slots_for(None, {})
    (3, 2, 0)
    """
    if asked is not None:
        return asked
    return envvars.read(SLOTS_ENV, environ) or 0


def run_faithful(target: Target, world_size: int, *, timeout: float | None = 120.0,
                 grace: float = 5.0, getters: Sequence[str | GetterSpec] = (),
                 log_dir: str | None = None, record_dir: str | None = None,
                 per_rank_mb: int = RANK_MEMORY_MB, check_memory: bool = True,
                 start_slots: int | None = None,
                 progress: Callable[[str], None] | None = None) -> Capture:
    """Run ``target`` on ``world_size`` ranks (see the module doc); returns the capture,
    partial when a rank failed or the run was interrupted (``meta["signal"]``)."""
    from ..launch.launcher import LaunchSpec, launch

    if world_size < 1:
        raise CaptureError(f"world size {world_size}: capture needs at least one rank.")
    if check_memory:
        memory_check(world_size, per_rank_mb)
    specs = tuple(g if isinstance(g, GetterSpec) else GetterSpec.parse(g) for g in getters)
    tmp = None
    if record_dir is None:
        tmp = record_dir = tempfile.mkdtemp(prefix="simharness-capture-")
    else:
        os.makedirs(record_dir, exist_ok=True)
    t0 = time.monotonic()
    stopper = None
    fired: list[bool] = []

    def stop_launch() -> None:
        fired.append(True)
        os.kill(os.getpid(), signal.SIGTERM)

    if timeout is not None:  # the ranks' watchdogs stop a hang; this is for one they cannot
        stopper = threading.Timer(timeout + grace + PARENT_SLACK_S, stop_launch)
        stopper.daemon = True
    try:
        spec = LaunchSpec(rank_command(target, record_dir, timeout=timeout, grace=grace,
                                       getters=specs),
                          nproc_per_node=world_size, shim=False, log_dir=log_dir,
                          grace_s=max(1, int(grace)), prefix_in_rank=True,
                          start_slots=start_slots_for(start_slots))
        if progress is not None:
            progress(f"capture: starting {world_size} rank processes")
        with _rank_environ({}), contextlib.redirect_stdout(sys.stderr), _fd_stdout_to_stderr():
            if stopper is not None:
                stopper.start()
            result = launch(spec)
        elapsed = time.monotonic() - t0
        cap = _merge(record_dir, world_size, result)
    finally:
        if stopper is not None:
            stopper.cancel()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    meta = dict(cap.meta)
    meta.update({"command": target.label, "mode": "faithful", "world_size": world_size,
                 "workers": world_size, "elapsed_s": round(elapsed, 3), "timeout_s": timeout,
                 "grace_s": grace, "versions": versions()})
    if result.signal is not None:
        meta["signal"] = signal.Signals(result.signal).name
        if fired:
            meta["stopped_after_s"] = round(elapsed, 1)
    return Capture(cap.world_size, cap.ranks, cap.sequences, cap.records, meta)


def _merge(record_dir: str, world_size: int, result: Any) -> Capture:
    """The records, and a ``died`` failure for a rank that ended without writing one."""
    try:
        cap = merge_records(record_dir)
    except CaptureError:
        cap = Capture(world_size, tuple(range(world_size)), (), {
            r: RankRecord(r, NOT_RUN) for r in range(world_size)}, {})
    exits = {e.rank: e.exitcode for e in getattr(result, "ranks", ())}
    records = dict(cap.records)
    for r, rec in records.items():
        code = exits.get(r)
        if rec.status == NOT_RUN and code is not None:
            # exit status 0 too: a rank that left without its record (os._exit past the
            # capture's hook, a C library's exit) is lost, never a silent "n-1 of n captured"
            how = (f"killed by {signal.Signals(-code).name}" if code < 0
                   else f"exit status {code}")
            why = ("out of memory, or killed?" if code != 0 else "the process exited past the "
                   "capture's hooks: os._exit or exit() from C code?")
            records[r] = RankRecord(r, FAILED, None, {}, {}, {
                "kind": "died", "message": f"the process of rank {r} ended ({how}) without "
                f"writing its record ({why})", "where": []})
    return Capture(cap.world_size, cap.ranks, cap.sequences, records, cap.meta)
