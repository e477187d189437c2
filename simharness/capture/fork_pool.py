"""The fork pool of ``simharness capture --fast``: workers forked from one interpreter, each
running its ranks in turn, streaming each rank's result to the parent.

The parent (:class:`_Pool`) imports torch and the script's imports once, then forks
``jobs`` workers; worker ``i`` runs ranks ``i, i + jobs, ...`` (:func:`_worker_main`), each
from the state before the first (:mod:`.runtime`), or in a forked child of its own with
``isolate``. A rank past its ``timeout`` gets its stack dumped (``faulthandler`` on
SIGUSR1, :func:`simharness.launch.toolbox.request_stack_dump`) and is killed; after the
first failing rank no new rank starts. What every rank starter guarantees:
:mod:`simharness.launch.toolbox`.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from ..launch.toolbox import faulthandler_frames, register_stack_dump, request_stack_dump
from .record import (
    FAILED,
    OK,
    STOPPED,
    TIMEOUT,
    GroupCall,
    RankRecord,
)


# ----------------------------------------------------------------- workers
@dataclass
class _Worker:
    pid: int
    conn: Any
    dump: str
    ranks: tuple[int, ...]
    current: int | None = None
    running_pid: int | None = None
    started: float = 0.0
    seq_map: dict[int, int] = field(default_factory=dict)   # worker's id -> capture's


def _pack(result: dict[str, Any], seen: list[tuple]) -> dict[str, Any]:
    """A rank's result for the parent: its call sequence by number (the worker's), sent in
    full (as :class:`GroupCall` objects) only the first time this worker sees it.

    Sequences are compared, not hashed: the recorder interns the rank lists and stacks,
    so comparing a rank's calls with the previous rank's mostly compares identities.
    """
    from .runtime import finish_calls

    calls = tuple(result.pop("calls"))
    sid = next((i for i in range(len(seen) - 1, -1, -1) if seen[i] == calls), None)
    if sid is None:
        sid = len(seen)
        seen.append(calls)
        result["new_sequence"] = calls if calls and isinstance(calls[0], GroupCall) \
            else finish_calls(calls)
    result["sequence"] = sid
    return result


def _run_isolated(job, rank: int) -> dict[str, Any]:
    """``run_rank`` in a forked child; returns its result (or a ``died`` failure)."""
    from multiprocessing import Pipe

    from .runtime import run_rank

    recv, send = Pipe(duplex=False)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        from .runtime import finish_calls

        recv.close()
        try:
            child = run_rank(job, rank, None)
            child["calls"] = finish_calls(child["calls"])
            send.send(child)
        finally:
            os._exit(0)
    send.close()
    result: dict[str, Any] | None
    try:
        result = recv.recv()
    except EOFError:
        result = None
    _, status = os.waitpid(pid, 0)
    if result is None:
        return {"status": FAILED, "calls": [], "getters": {}, "init": {},
                "error": {"kind": "died", "message": f"the process running rank {rank} "
                          f"died ({_exit_text(status)})", "where": []}}
    return result


def _worker_main(job, ranks, conn, stop, dump_path, isolate, accelerate) -> None:
    """A worker's life: patch torch, then run its ranks and stream their results."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent stops the workers
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.dup2(2, 1)  # the script's output never reaches the capture's stdout (-f json)

        register_stack_dump(signal.SIGUSR1, dump_path)
        from ..launch.children import become_subreaper

        become_subreaper()  # a rank's double-forked process stays in this worker's tree
        from .runtime import ModuleState, accelerate_megatron, install_patches, run_rank

        install_patches()
        if accelerate:
            accelerate_megatron()
        state = None if isolate else ModuleState()
        import gc

        gc.freeze()  # the imported world stays put: collections only scan what ranks allocate
        seen: list[tuple] = []
        for r in ranks:
            if stop[0]:
                break
            if isolate:
                conn.send(("start", r, None))
                result = _run_isolated(job, r)
            else:
                conn.send(("start", r, os.getpid()))
                result = run_rank(job, r, state)
            conn.send(("done", r, _pack(result, seen)))
            if result["status"] != OK:
                stop[0] = 1
                break
    except BaseException:  # noqa: BLE001 - reported to the parent
        import traceback

        code = 1
        with contextlib.suppress(Exception):
            conn.send(("crash", None, traceback.format_exc()[-2000:]))
    finally:
        os._exit(code)


def _exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:  # pragma: no cover
            return f"killed by signal {sig}"
    return f"exit status {os.WEXITSTATUS(status)}"


def parse_stack_dump(text: str) -> list[str]:
    """The main thread's frames from a ``faulthandler`` dump, for messages: the innermost
    frame, then the frames outside torch/stdlib/capture (innermost first, at most 4).

    >>> parse_stack_dump('Current thread 0x1 (most recent call first):\\n'
    ...     '  File "/x/hang.py", line 5 in wait_for_peer\\n  File "/x/hang.py", line 9 in main\\n')
    ['/x/hang.py:5 wait_for_peer', '/x/hang.py:9 main']
    """
    from .runtime import where_text

    return where_text(faulthandler_frames(text))


def _dump_stack(w: _Worker, wait_s: float = 2.0) -> list[str]:
    pid = w.running_pid or _child_of(w)
    if pid is None:
        return []
    text = request_stack_dump(pid, w.dump, wait_s)
    return parse_stack_dump(text) if text else []


def _child_of(w: _Worker) -> int | None:
    """The process running an isolated rank: the worker's only child."""
    try:
        with open(f"/proc/{w.pid}/task/{w.pid}/children", encoding="ascii") as fh:
            kids = fh.read().split()
        return int(kids[0]) if kids else w.pid
    except OSError:
        return w.pid


def _kill(pid: int | None) -> None:
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


class _Pool:
    """The forked workers of one capture and what they have reported so far."""

    def __init__(self, job, rank_list: tuple[int, ...], n_jobs: int, *, isolate: bool,
                 accelerate: bool, timeout: float):
        self.timeout = timeout
        self.stop = mmap.mmap(-1, 1)   # shared with the workers: 1 = start no new rank
        self.tmp = tempfile.mkdtemp(prefix="simharness-capture-")
        self.sequences: list[tuple[GroupCall, ...]] = []
        self.seq_ids: dict[tuple, int] = {}
        self.records: dict[int, RankRecord] = {}
        self.crashes: list[str] = []
        self.workers: list[_Worker] = []
        from multiprocessing import Pipe

        sys.stdout.flush()
        sys.stderr.flush()
        for i in range(n_jobs):
            mine = rank_list[i::n_jobs]
            recv, send = Pipe(duplex=False)
            dump = os.path.join(self.tmp, f"worker{i}.stack")
            open(dump, "w").close()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the worker never returns
                recv.close()
                _worker_main(job, mine, send, self.stop, dump, isolate, accelerate)
            send.close()
            self.workers.append(_Worker(pid, recv, dump, mine))
        self.live = {w.conn: w for w in self.workers}

    # ------------------------------------------------------------ messages
    def _intern(self, w: _Worker, payload: dict) -> int:
        new = payload.get("new_sequence")
        if new is not None:
            gid = self.seq_ids.get(new)
            if gid is None:
                gid = self.seq_ids[new] = len(self.sequences)
                self.sequences.append(new)
            w.seq_map[payload["sequence"]] = gid
        return w.seq_map[payload["sequence"]]

    def _fail_running(self, w: _Worker, status: str, error: dict) -> None:
        if w.current is not None and w.current not in self.records:
            self.records[w.current] = RankRecord(w.current, status, None, {}, {}, error)
        w.current = None
        self.stop[0] = 1

    def _on_message(self, w: _Worker, kind: str, rank, payload) -> None:
        if kind == "start":
            w.current, w.running_pid, w.started = rank, payload, time.monotonic()
        elif kind == "done":
            self.records[rank] = RankRecord(rank, payload["status"], self._intern(w, payload),
                                            payload.get("getters") or {},
                                            payload.get("init") or {}, payload.get("error"))
            w.current = None
            if payload["status"] != OK:
                self.stop[0] = 1
        elif kind == "crash":
            self.crashes.append(payload)
            self.stop[0] = 1

    def _on_exit(self, w: _Worker) -> None:
        _, status = os.waitpid(w.pid, 0)
        w.pid = 0
        if w.current is not None:
            self._fail_running(w, FAILED, {"kind": "died", "message": f"the process running "
                                           f"rank {w.current} died ({_exit_text(status)})",
                                           "where": []})

    def receive(self, wait_s: float = 0.2) -> None:
        from multiprocessing.connection import wait

        for conn in wait(list(self.live), timeout=wait_s):
            w = self.live[conn]
            try:
                kind, rank, payload = w.conn.recv()
            except (EOFError, OSError):
                self._on_exit(w)
                del self.live[conn]
                continue
            self._on_message(w, kind, rank, payload)

    def check_timeouts(self) -> None:
        now = time.monotonic()
        for w in list(self.live.values()):
            if w.current is None or now - w.started <= self.timeout:
                continue
            where = _dump_stack(w)
            for pid in {w.running_pid, _child_of(w), w.pid}:
                _kill(pid)
            self._fail_running(w, TIMEOUT, {"kind": "timeout", "message": f"rank did not "
                                            f"finish within {self.timeout:g} s",
                                            "where": where})

    def stop_all(self, why: str, isolate: bool) -> None:
        """Kill every worker (and isolated rank); the running ranks become ``stopped``."""
        for w in self.workers:
            _kill(_child_of(w) if isolate else None)
            if w.current is not None and w.current not in self.records:
                self.records[w.current] = RankRecord(w.current, STOPPED, None, {}, {}, {
                    "kind": "stopped", "message": f"stopped by {why} before it finished",
                    "where": []})
        self.close(kill=True)

    def close(self, *, kill: bool = False) -> None:
        self.stop[0] = 1
        for w in self.workers:
            if kill:
                _kill(w.pid)
            if w.pid:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(w.pid, 0)
            w.conn.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
