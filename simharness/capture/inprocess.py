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
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import mmap
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .record import (
    FAILED,
    NOT_RUN,
    OK,
    STOPPED,
    TIMEOUT,
    Capture,
    CaptureError,
    GetterSpec,
    GroupCall,
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
        import faulthandler

        signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent stops the workers
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.dup2(2, 1)  # the script's output never reaches the capture's stdout (-f json)

        dump = open(dump_path, "w")  # noqa: SIM115 - lives as long as the process
        faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
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


_FH_FRAME = re.compile(r'^\s*File "(.*)", line (\d+) in (.*)$')


def parse_stack_dump(text: str) -> list[str]:
    """The main thread's frames from a ``faulthandler`` dump, for messages: the innermost
    frame, then the frames outside torch/stdlib/capture (innermost first, at most 4).

    >>> parse_stack_dump('Current thread 0x1 (most recent call first):\\n'
    ...     '  File "/x/hang.py", line 5 in wait_for_peer\\n  File "/x/hang.py", line 9 in main\\n')
    ['/x/hang.py:5 wait_for_peer', '/x/hang.py:9 main']
    """
    from .runtime import where_text

    sections = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text.strip())
    main = next((s for s in sections if s.startswith("Current thread")),
                sections[0] if sections else "")
    frames = []
    for line in main.splitlines():
        m = _FH_FRAME.match(line)
        if m:
            frames.append((m.group(1), int(m.group(2)), m.group(3)))
    return where_text(frames)


def _dump_stack(w: _Worker, wait_s: float = 2.0) -> list[str]:
    pid = w.running_pid or _child_of(w)
    if pid is None:
        return []
    try:
        size0 = os.path.getsize(w.dump)
        os.kill(pid, signal.SIGUSR1)
    except (OSError, TypeError):
        return []
    deadline = time.monotonic() + wait_s
    text = ""
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            with open(w.dump, encoding="utf-8", errors="replace") as fh:
                fh.seek(size0)
                text = fh.read()
        except OSError:
            break
        if text.rstrip().endswith(("in <module>", "<module>")) or text.count("\n") > 40:
            break
    return parse_stack_dump(text)


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


@contextlib.contextmanager
def _signals_caught():
    """SIGINT/SIGTERM append their number to the yielded list instead of ending the
    process (main thread only; elsewhere nothing changes)."""
    got: list[int] = []
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: no handler
            previous[sig] = signal.signal(sig, lambda signum, _frame: got.append(signum))
    try:
        yield got
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
    with _signals_caught() as got:
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
            "skip_non_members": skip_non_members, "timeout_s": timeout, "versions": _versions()}
    if pool.crashes and not got:
        meta["worker_errors"] = pool.crashes
    if got:
        meta["signal"] = signal.Signals(got[0]).name
    return Capture(world_size, rank_list, tuple(pool.sequences), records, meta)


def _versions() -> dict[str, str | None]:
    import torch

    from ..replay.megatron_engine import installed_version

    return {"torch": torch.__version__, "megatron-core": installed_version()}


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


# ------------------------------------------------------------- the cross-check
CROSSCHECK_TIMEOUT_S = 120.0


def crosscheck_ranks(world_size: int) -> tuple[int, ...]:
    """Rank 0, a middle one and the last.

    >>> crosscheck_ranks(1024), crosscheck_ranks(2)
    ((0, 512, 1023), (0, 1))
    """
    return tuple(sorted({0, world_size // 2, world_size - 1}))


def crosscheck(cap: Capture, target_argv: Sequence[str], *,
               ranks: Sequence[int] | None = None, gpus_per_node: int = 8,
               timeout: float = CROSSCHECK_TIMEOUT_S) -> Capture:
    """Run ``ranks`` again, each alone in a fresh interpreter (its own hash seed, its
    environment set before the script's imports) under the fake backend, and compare their
    ``new_group`` calls with ``cap``'s (a ``--fast`` capture). The result goes into
    ``meta["crosscheck"]``: per rank, ``same`` or the first call that differs (see
    :func:`simharness.capture.checks.check_crosscheck`)."""
    ranks = tuple(crosscheck_ranks(cap.world_size) if ranks is None else ranks)
    return start_crosscheck(cap.world_size, target_argv, ranks=ranks,
                            gpus_per_node=gpus_per_node, timeout=timeout).finish(cap)


@dataclass
class CrossCheckRun:
    """Cross-check ranks started (:func:`start_crosscheck`), to be :meth:`finish` ed with the
    fast capture, or :meth:`cancel` led; either way no process and no file is left."""

    ranks: tuple[int, ...]
    tmp: str
    procs: list[Any]
    deadline: float

    def cancel(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def finish(self, cap: Capture) -> Capture:
        """Wait for the ranks (a SIGINT/SIGTERM stops the wait: ``meta["signal"]``), then
        compare their calls with ``cap``'s."""
        from .merge import merge_records

        sep: Capture | None = None
        logs: dict[int, str] = {}
        try:
            with _signals_caught() as got:
                while (not got and time.monotonic() < self.deadline
                       and any(p.poll() is None for p in self.procs)):
                    time.sleep(0.1)
            if got:
                return Capture(cap.world_size, cap.ranks, cap.sequences, cap.records,
                               {**cap.meta, "signal": signal.Signals(got[0]).name})
            for p in self.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            try:
                sep = merge_records(self.tmp)
            except CaptureError:
                sep = None
            logs = {r: _last_line(os.path.join(self.tmp, f"rank{r}.log")) for r in self.ranks}
        finally:
            self.cancel()
        return _compare_alone(cap, self.ranks, sep, logs)


def start_crosscheck(world_size: int, target_argv: Sequence[str], *, ranks: Sequence[int],
                     gpus_per_node: int = 8,
                     timeout: float = CROSSCHECK_TIMEOUT_S) -> CrossCheckRun:
    """Start the cross-check ranks now (they need only the command and the world): the CLI
    starts them before the fast capture, so their interpreters' imports use the CPU the
    capture leaves idle (its own imports run on one core)."""
    import subprocess

    from .runtime import rank_environment

    run = CrossCheckRun(tuple(ranks), tempfile.mkdtemp(prefix="simharness-capture-check-"),
                        [], time.monotonic() + timeout)
    try:
        base = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
        for r in run.ranks:
            env = {**base, **rank_environment(r, world_size, gpus_per_node)}
            with open(os.path.join(run.tmp, f"rank{r}.log"), "wb") as log:
                run.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "simharness.capture.faithful_rank", "--fake",
                     "--out-dir", run.tmp, "--", *target_argv], env=env, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT))
    except BaseException:
        run.cancel()
        raise
    return run


def _compare_alone(cap: Capture, ranks: tuple[int, ...], sep: Capture | None,
                   logs: dict[int, str]) -> Capture:
    """``meta["crosscheck"]``: each rank's fast calls against its calls alone."""
    results = []
    for r in ranks:
        rec = None if sep is None else sep.records.get(r)
        if sep is None or rec is None or rec.status != OK:
            err = dict((rec.error if rec is not None else None) or {})
            results.append({"rank": r, "same": None, "message": err.get("message")
                            or f"the separate interpreter wrote no record ({logs[r]})"})
            continue
        fast = [c.key for c in cap.calls(r)]
        alone = [c.key for c in sep.calls(r)]
        if fast == alone:
            results.append({"rank": r, "same": True})
            continue
        i = next((k for k, (a, b) in enumerate(zip(fast, alone, strict=False)) if a != b),
                 min(len(fast), len(alone)))
        def label(calls, k):
            return calls[k].label() + f" at {calls[k].site}" if k < len(calls) else "no call"
        results.append({"rank": r, "same": False, "index": i,
                        "fast": label(cap.calls(r), i), "separate": label(sep.calls(r), i)})
    meta = {**cap.meta, "crosscheck": results}
    return Capture(cap.world_size, cap.ranks, cap.sequences, cap.records, meta)


def _last_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [ln.strip() for ln in fh if ln.strip()]
    except OSError:
        return "no output"
    return lines[-1][:300] if lines else "no output"
