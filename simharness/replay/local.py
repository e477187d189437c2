"""The forked replay ranks' helper process: ``python -m simharness.replay.local SPEC.json``.

Started by :func:`simharness.replay.controller.replay` in a session of its own,
it imports torch (and megatron-core in Megatron mode) once, forks one process
per rank (fast: no re-import; safe: nothing has run OpenMP yet), hosts the
rendezvous ``TCPStore`` on ``127.0.0.1`` with a port the kernel picks (so
parallel replays never collide), and watches the ranks:

* a rank that exits with an error, or dies, stops the replay: the others get
  a second to report, then are killed;
* no progress for ``timeout + 30`` seconds (every rank stuck outside a
  collective) stops it too;
* SIGTERM (the controller's Ctrl-C) kills every rank.

Every rank dies with the helper (``PR_SET_PDEATHSIG``), and the helper with
the controller. Results: ``results.json`` (rank 0's gathered results),
``rank{N}.error.json`` per failed rank, ``outcome.json`` (exits, diagnosis).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..errors import SimharnessError
from ..layout import Layout
from ..resources import fmt_bytes, proc_kib
from .options import Fault, ReplayOptions

GRACE_S = 1.0          # how long the other ranks may take to report after the first failure
STALL_EXTRA_S = 30.0   # no progress for timeout + this -> stall
PEER_MARKERS = ("connection closed by peer", "connection reset", "broken pipe", "econnreset",
                "connection refused", "socket closed", "read error", "write error",
                "recv: ", "eof")
TIMEOUT_MARKERS = ("timed out", "timeout", "deadline")


def set_pdeathsig(sig: int = signal.SIGKILL) -> None:
    """Die with the parent (Linux ``prctl(PR_SET_PDEATHSIG)``); a no-op elsewhere."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # pragma: no cover - non-Linux
        pass


def _vm_data() -> int | None:
    """This process's data segment in bytes (``VmData``: what ``RLIMIT_DATA`` counts)."""
    kib = proc_kib("VmData", "/proc/self/status")
    return None if kib is None else kib * 1024


def limit_memory(head_room: int) -> int | None:
    """Cap this rank's data segment at its current size + ``head_room`` (``RLIMIT_DATA``;
    ``RLIMIT_AS`` would count the address space torch reserves and never touches). Past it
    an allocation fails with ``MemoryError`` in this rank instead of the kernel's OOM
    killer picking a process. Returns the limit set, or None where it cannot be set."""
    import resource

    now = _vm_data()
    if now is None:
        return None
    soft, hard = now + int(head_room), resource.getrlimit(resource.RLIMIT_DATA)[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    except (ValueError, OSError):  # pragma: no cover - a hard limit below the current use
        return None
    return soft


def oom_kills() -> int | None:
    """The kernel's count of OOM kills since boot (``/proc/vmstat`` ``oom_kill``)."""
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, default=str)
    os.replace(tmp, path)


def classify(exc: BaseException) -> str:
    """``timeout``, ``peer`` (a peer went away) or ``own`` (this rank's own error)."""
    text = f"{type(exc).__name__}: {exc}".lower()
    ctx = getattr(exc, "context", None) or {}
    cause = exc.__cause__
    if cause is not None:
        text += " " + str(cause).lower()
    if any(m in text for m in TIMEOUT_MARKERS):
        return "timeout"
    if any(m in text for m in PEER_MARKERS):
        return "peer"
    if ctx.get("op") and "injected" not in text:
        return "peer"  # a collective failed without a clearer reason: blame the peers first
    return "own"


def _gpus_in_child() -> tuple[int, bool]:
    """``(GPUs visible, NCCL built in)``, asked in a throwaway forked child.

    ``torch.cuda.is_available()`` initialises the CUDA driver, after which a
    forked rank could not use CUDA; the helper itself never touches CUDA.
    """
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        msg = "0 0"
        try:
            os.close(rd)
            import torch
            import torch.distributed as dist

            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
            msg = f"{n} {int(dist.is_nccl_available())}"
        finally:
            os.write(wr, msg.encode())
            os._exit(0)
    os.close(wr)
    with os.fdopen(rd, "rb") as fh:
        data = fh.read().decode().split()
    os.waitpid(pid, 0)
    try:
        return int(data[0]), data[1] == "1"
    except (IndexError, ValueError):
        return 0, False


def runtime_preflight(layout: Layout, opts: ReplayOptions) -> None:
    """Checks that need torch (and megatron-core): done before any rank starts."""
    if opts.backend == "nccl":
        n, nccl = _gpus_in_child()
        if n < layout.world_size:
            raise SimharnessError(
                f"--backend nccl needs one GPU per rank: world {layout.world_size}, "
                f"{n} GPU(s) visible; use --backend gloo, a smaller world, or torchrun on "
                f"several nodes (--print-torchrun).")
        if not nccl:
            raise SimharnessError("this torch build has no NCCL; use --backend gloo.")
    if opts.engine == "megatron":
        if opts.backend == "nccl":
            # Imported by each rank after the fork: megatron-core's import may touch CUDA.
            import importlib.util

            if importlib.util.find_spec("megatron.core") is None:
                raise SimharnessError("--engine megatron: megatron-core is not importable.")
            return
        from ..mcore import import_parallel_state

        try:
            import_parallel_state()
        except Exception as exc:  # noqa: BLE001
            raise SimharnessError(f"--engine megatron: importing megatron.core.parallel_state "
                                  f"failed: {type(exc).__name__}: {exc}") from None


DEFAULT_ENTRY = "simharness.replay.worker:run_rank"


def resolve_entry(name: str | None):
    """The rank function ``"module:function"`` (default: the replay's ``run_rank``)."""
    import importlib

    module, _, func = (name or DEFAULT_ENTRY).partition(":")
    return getattr(importlib.import_module(module), func)


def _child(rank: int, rd: int, layout: Layout, opts: ReplayOptions, workdir: Path,
           entry: str | None = None, extra: Any = None,
           memory: dict[str, Any] | None = None) -> None:
    """One rank (runs in the forked process; never returns)."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        set_pdeathsig()
        if memory and memory.get("rlimit_data"):
            limit_memory(memory["rlimit_data"])
        import torch
        import torch.distributed as dist

        run_rank = resolve_entry(entry)
        torch.set_num_threads(1)
        with os.fdopen(rd, "r") as fh:
            line = fh.readline().strip()
        if not line:
            os._exit(1)  # the helper went away before the store started
        port = int(line)
        timeout = timedelta(seconds=opts.timeout)
        store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timeout)
        if opts.backend == "nccl":
            torch.cuda.set_device(rank)

        def init():
            dist.init_process_group(opts.backend, store=store, rank=rank,
                                    world_size=layout.world_size, timeout=timeout)

        gathered = run_rank(layout, opts, rank=rank, world_size=layout.world_size, init=init,
                            store=store, **({} if extra is None else {"extra": extra}))
        if rank == 0:
            write_json(workdir / "results.json", gathered)
        # Leave together: nobody closes its sockets while a peer still reads from them.
        if store.add("simharness/finished", 1) >= layout.world_size:
            store.set("simharness/all_finished", "1")
        store.wait(["simharness/all_finished"])
        code = 0
    except BaseException as exc:  # noqa: BLE001 - report everything, then exit
        with contextlib.suppress(BaseException):  # best effort: the exit code still tells
            write_json(workdir / f"rank{rank}.error.json", {
                "rank": rank, "type": type(exc).__name__, "message": str(exc),
                "class": classify(exc), "context": getattr(exc, "context", None),
                "traceback": traceback.format_exc()[-6000:], "time": time.time()})
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class _Stop(Exception):
    pass


def _on_term(signum, frame):  # noqa: ARG001
    raise _Stop()


def _progress(store, W: int) -> dict[int, str | None]:
    from .worker import PROGRESS_KEY

    out: dict[int, str | None] = {}
    for r in range(W):
        key = PROGRESS_KEY.format(r)
        try:
            out[r] = store.get(key).decode() if store.check([key]) else None
        except Exception:  # noqa: BLE001
            out[r] = None
    return out


def _describe(pos: str | None) -> str:
    from .worker import PHASES

    if pos is None:
        return "not started"
    p, i = pos.split(":")
    return f"{PHASES[int(p)]} {i}"


class _Ranks:
    """The rank processes as :func:`monitor` sees them: who exited (how, when), who it
    killed, and when the first rank failed on its own."""

    def __init__(self, pids: dict[int, int]):
        self.pids = pids                                  # pid -> rank
        self.exits: dict[int, dict[str, Any]] = {}        # rank -> code, time, killed
        self.killed: set[int] = set()
        self.first_fail: float | None = None

    @property
    def all_exited(self) -> bool:
        return len(self.exits) == len(self.pids)

    def reap(self) -> bool:
        """Record every rank that exited since the last call (without blocking); True when
        one did."""
        reaped = False
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return reaped
            if pid == 0:
                return reaped
            r = self.pids.get(pid)
            if r is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            self.exits[r] = {"code": code, "time": time.time(), "killed": r in self.killed,
                             "max_rss": usage.ru_maxrss * 1024}  # Linux: KiB
            reaped = True
            if code != 0 and r not in self.killed and self.first_fail is None:
                self.first_fail = time.time()

    def kill_rest(self) -> None:
        """SIGKILL every rank still running (once)."""
        for pid, r in self.pids.items():
            if r not in self.exits and r not in self.killed:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self.killed.add(r)

    def wait_rest(self) -> None:
        """Wait for every rank not yet reaped (after :meth:`kill_rest`), recorded as killed."""
        for pid, r in self.pids.items():
            if r not in self.exits:
                try:
                    _, status, usage = os.wait4(pid, 0)
                    self.exits[r] = {"code": os.waitstatus_to_exitcode(status),
                                     "time": time.time(), "killed": True,
                                     "max_rss": usage.ru_maxrss * 1024}
                except ChildProcessError:
                    self.exits[r] = {"code": None, "time": time.time(), "killed": True}


def monitor(pids: dict[int, int], store, opts: ReplayOptions, workdir: Path) -> dict[str, Any]:
    """Wait for the ranks; stop them all on the first failure, a stall or SIGTERM."""
    W = len(pids)
    ranks = _Ranks(pids)
    stall_limit = opts.timeout + STALL_EXTRA_S
    last_change = time.time()
    last_snapshot = None
    next_poll = 0.0
    stopped = None
    try:
        while not ranks.all_exited:
            if ranks.reap():
                last_change = time.time()
            if ranks.all_exited:
                break
            now = time.time()
            if ranks.first_fail is not None:
                if now - ranks.first_fail >= GRACE_S:
                    ranks.kill_rest()
            elif now >= next_poll:
                next_poll = now + 0.5
                snap = _progress(store, W)
                if snap != last_snapshot:
                    last_snapshot, last_change = snap, now
                elif now - last_change > stall_limit:
                    stopped = "stall"
                    ranks.first_fail = now - GRACE_S
                    ranks.kill_rest()
            time.sleep(0.01)
    except (_Stop, KeyboardInterrupt):
        stopped = "interrupted"
        ranks.kill_rest()
        ranks.wait_rest()
    progress = _progress(store, W) if stopped != "interrupted" else (last_snapshot or {})
    return {"exits": {str(r): e for r, e in sorted(ranks.exits.items())}, "stopped": stopped,
            "progress": {str(r): p for r, p in progress.items()}}


def diagnose(outcome: dict[str, Any], workdir: Path, W: int,
             timeout: float) -> dict[str, Any] | None:
    """Which rank failed first and why; None when every rank finished."""
    exits = {int(r): e for r, e in outcome["exits"].items()}
    progress = {int(r): p for r, p in outcome["progress"].items()}
    errors: dict[int, dict[str, Any]] = {}
    for r in range(W):
        path = workdir / f"rank{r}.error.json"
        if path.exists():
            with contextlib.suppress(OSError, ValueError):  # half-written: no error text
                errors[r] = json.loads(path.read_text())
    if outcome["stopped"] == "interrupted":
        return {"kind": "interrupted", "rank": None,
                "message": "interrupted (Ctrl-C): every rank was stopped."}
    ok = all(e["code"] == 0 for e in exits.values()) and len(exits) == W
    if ok and outcome["stopped"] is None:
        return None
    others = {r: f"{e['type']}: {' '.join(e['message'].split())[:200]}"
              for r, e in sorted(errors.items())}
    where = {r: _describe(p) for r, p in progress.items()}
    base = {"errors": others, "last_progress": where}
    if outcome["stopped"] == "stall":
        return {**base, "kind": "stall", "rank": None,
                "message": "no rank made progress for the stall limit outside a collective; "
                           "last positions: " + ", ".join(f"rank {r}: {w}"
                                                          for r, w in sorted(where.items()))}
    dead = sorted((e["time"], r) for r, e in exits.items()
                  if e["code"] not in (0, None) and not e["killed"] and r not in errors)
    blocked = next((errors[r] for r in sorted(errors, key=lambda r: errors[r]["time"])
                    if errors[r].get("context")), None)
    if dead:
        _, r = dead[0]
        code = exits[r]["code"]
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if code == Fault.EXIT_CODE:
            how += " (injected fault)"
        msg = (f"rank {r} died: it {how} without reporting an error, during "
               f"{where.get(r, 'not started')}.")
        if code == -signal.SIGKILL:
            msg = (f"rank {r} was killed (signal 9) during {where.get(r, 'its start')}, "
                   f"{_oom_words(outcome, exits[r])}.")
        if blocked:
            msg += f" Then rank {blocked['rank']}: {' '.join(blocked['message'].split())[:240]}"
        return {**base, "kind": "rank_died", "rank": r, "exit_code": code,
                "phase": where.get(r), "message": msg}
    for cls, kind in (("own", "rank_error"), ("timeout", "timeout"), ("peer", "peer_lost")):
        cands = sorted((e["time"], r) for r, e in errors.items() if e.get("class") == cls)
        if not cands:
            continue
        _, r = cands[0]
        e = errors[r]
        ctx = e.get("context") or {}
        missing = ctx.get("missing_ranks") or []
        msg = f"rank {r}: {e['type']}: {' '.join(e['message'].split())[:400]}"
        if e["type"] == "MemoryError":
            msg += f" ({_memory_error_words(outcome)})"
        if kind == "timeout":
            msg = (f"{ctx.get('op', 'a collective')} on {_ctx_group(ctx)} did not complete "
                   f"within {timeout:g} s on rank {r}")
            if missing:
                msg += (f"; rank(s) {missing} did not arrive (last seen: "
                        + ", ".join(f"rank {m}: {where.get(m, '?')}" for m in missing) + ")")
        return {**base, "kind": kind, "rank": r, "phase": ctx.get("phase"),
                "group": {k: ctx.get(k) for k in ("kind", "group", "desc", "ranks", "index")
                          if ctx.get(k) is not None} or None,
                "missing_ranks": missing, "error": e["message"][:2000],
                "traceback": e.get("traceback"), "message": msg}
    bad = sorted(r for r, e in exits.items() if e["code"] != 0)
    return {**base, "kind": "unknown", "rank": bad[0] if bad else None,
            "message": f"rank(s) {bad} did not finish; no error was reported."}


def _fmt(n: float | None) -> str:
    return "?" if n is None else fmt_bytes(n)


def _oom_words(outcome: dict[str, Any], exit_: dict[str, Any]) -> str:
    """Why a rank got SIGKILL from outside: the OOM killer's count, its peak, the budget."""
    kills = outcome.get("oom_kills")
    if kills:
        words = (f"out of memory: the kernel's OOM killer ran {kills} time(s) during the "
                 f"replay")
    elif kills == 0:
        words = ("not by the kernel's OOM killer (its count did not change): by something "
                 "outside simharness")
    else:
        words = "most likely out of memory"
    if exit_.get("max_rss"):
        words += f"; its peak RSS was {_fmt(exit_['max_rss'])}"
    mem = outcome.get("memory") or {}
    if mem:
        words += (f"; estimate {_fmt(mem.get('rank_estimate'))} per rank, "
                  f"{_fmt(mem.get('available'))} available ({mem.get('source')}) at the start")
    if kills != 0:
        words += "; lower the world or the sizes (--shard-numel, --steps, --overlap-bytes)"
    return words


def _memory_error_words(outcome: dict[str, Any]) -> str:
    mem = outcome.get("memory") or {}
    if not mem:
        return "out of memory"
    return (f"out of memory: it reached its limit (RLIMIT_DATA: its share "
            f"{_fmt(mem.get('rank_limit'))} of {_fmt(mem.get('available'))} available, plus "
            f"{_fmt((mem.get('rlimit_data') or 0) - (mem.get('rank_limit') or 0))} for thread "
            f"stacks); estimate {_fmt(mem.get('rank_estimate'))} per rank; lower the world or "
            f"the sizes")


def _ctx_group(ctx: dict[str, Any]) -> str:
    if ctx.get("kind") is not None:
        text = f"{ctx['kind']}"
        if ctx.get("group") is not None:
            text += f" group {ctx['group']}"
        if ctx.get("desc"):
            text += f" ({ctx['desc']})"
        if ctx.get("ranks") is not None:
            text += f" {ctx['ranks']}"
        return text
    return "the world"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec_path = Path(argv[0])
    spec = json.loads(spec_path.read_text())
    workdir = Path(spec["workdir"])
    set_pdeathsig()
    signal.signal(signal.SIGTERM, _on_term)
    try:
        layout = Layout.from_dict(spec["layout"])
        opts = ReplayOptions.from_dict(spec["options"]).validate()
        runtime_preflight(layout, opts)
    except SimharnessError as exc:
        write_json(workdir / "preflight.json", {"error": str(exc)})
        return 2
    import torch.distributed as dist

    from . import worker  # noqa: F401 - imported once here, inherited by every rank

    resolve_entry(spec.get("entry"))  # the same for a custom entry
    W = layout.world_size
    oom0 = oom_kills()
    t_fork = time.time()
    pids: dict[int, int] = {}
    writers: list[int] = []
    try:
        for r in range(W):
            rd, wr = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(wr)
                for w in writers:
                    os.close(w)
                _child(r, rd, layout, opts, workdir, spec.get("entry"), spec.get("extra"),
                       spec.get("memory"))
            os.close(rd)
            writers.append(wr)
            pids[pid] = r
        store = dist.TCPStore("127.0.0.1", 0, None, True,
                              timeout=timedelta(seconds=opts.timeout), wait_for_workers=False)
        for wr in writers:
            os.write(wr, f"{store.port}\n".encode())
            os.close(wr)
        writers = []
        outcome = monitor(pids, store, opts, workdir)
    except (_Stop, KeyboardInterrupt):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        outcome = {"exits": {}, "stopped": "interrupted", "progress": {}}
    oom1 = oom_kills()
    outcome["oom_kills"] = None if oom0 is None or oom1 is None else oom1 - oom0
    outcome["memory"] = spec.get("memory")
    outcome["pids"] = {str(r): pid for pid, r in pids.items()}
    outcome["t_fork"] = t_fork
    outcome["t_end"] = time.time()
    outcome["failure"] = diagnose(outcome, workdir, W, opts.timeout)
    write_json(workdir / "outcome.json", outcome)
    return 0


if __name__ == "__main__":
    _code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_code)  # skip interpreter teardown (torch, the store's server thread): ~1 s
