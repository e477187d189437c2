"""The replay controller: start the forked replay ranks and collect their report (this module
never imports torch).

:func:`replay` checks the request (invalid plans and worlds the machine cannot
host are refused before any process starts), runs the helper
``python -m simharness.replay.local`` in a session of its own, and waits. The
helper imports torch once and forks the ranks (see :mod:`.local`). Ctrl-C
stops the helper, which stops every rank; whatever happens, the helper's
whole process group is killed before :func:`replay` returns, so no rank is
left behind (what every rank starter guarantees: :mod:`simharness.launch.toolbox`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SimharnessError
from ..layout import Layout
from ..resources import RankBudget, replay_budget, rlimit_data_bytes
from .options import EXIT_FAILED, ReplayError, ReplayOptions, cpu_count, max_local_gloo_ranks
from .plan_checks import check_replayable
from .report import build_report, plan_section

LOG_TAIL = 4000


def preflight(layout: Layout, opts: ReplayOptions) -> None:
    """Everything that can be refused without torch: raises :class:`SimharnessError`."""
    opts.validate()
    check_replayable(layout)
    world = layout.world_size
    if opts.backend == "gloo":
        limit = max_local_gloo_ranks()
        if world > limit and not opts.force:
            raise ReplayError(
                f"world_size {world} would start {world} gloo processes on this machine's "
                f"{cpu_count()} CPU core(s) (at most {limit}, {limit // cpu_count()} per core, "
                f"without --force); pass --force to run it anyway, replay a smaller world, or "
                f"use torchrun on several machines (--print-torchrun).")
    memory_budget(layout, opts)  # refuses a replay whose ranks cannot fit in memory
    fault = opts.fault_spec
    if fault is not None and not 0 <= fault.rank < world:
        raise ReplayError(f"fault rank {fault.rank} is outside the world 0..{world - 1}.")
    if opts.engine == "megatron":
        from ..mcore import check_megatron

        check_megatron(layout, opts.backend)


def memory_budget(layout: Layout, opts: ReplayOptions) -> RankBudget:
    """The replay's memory plan (:func:`simharness.resources.replay_budget`); raises
    :class:`~simharness.resources.ResourceError` when the ranks cannot fit."""
    return replay_budget(layout.world_size, opts.overlap_bytes if opts.iters else 0)


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-LOG_TAIL:].decode(errors="replace")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # gone already
        os.killpg(pgid, signal.SIGKILL)


def _exited(pid: int) -> bool:
    """True once ``pid`` has exited, without reaping it (its pgid stays reserved)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


@dataclass(frozen=True)
class LocalRun:
    """What one local launch left behind.

    ``gathered``: rank 0's list of every rank's result (None on failure);
    ``failure``: the helper's diagnosis (which rank, which call) or None;
    ``outcome``: the helper's ``outcome.json`` (None when it wrote none).
    """

    t0: float
    helper_pid: int
    outcome: dict[str, Any] | None
    gathered: list[Any] | None
    failure: dict[str, Any] | None

    @property
    def processes(self) -> dict[str, Any]:
        pids = (self.outcome or {}).get("pids") or {}
        return {"helper": self.helper_pid, "ranks": {int(r): p for r, p in pids.items()}}


def run_local(layout: Layout, opts: ReplayOptions, *, deadline: float | None = None,
              entry: str | None = None, extra: dict[str, Any] | None = None,
              memory: RankBudget | None = None) -> LocalRun:
    """Fork ``world_size`` local ranks through the helper and wait for them.

    ``entry`` (``"module:function"``, default the replay's ``run_rank``) is what
    each rank runs, with ``extra`` (JSON) passed through the spec. ``memory``: each
    rank's memory limit (``RLIMIT_DATA``) and the figures a rank killed for memory is
    reported with (see :mod:`.local`). Raises
    :class:`ReplayError` when the helper's pre-check refused the request and
    ``KeyboardInterrupt`` after stopping every rank on Ctrl-C.
    """
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="simharness-replay-") as tmp:
        workdir = Path(tmp)
        spec = {"layout": layout.to_dict(), "options": opts.to_dict(), "workdir": str(workdir),
                "launch_t0": t0, "entry": entry, "extra": extra,
                "memory": None if memory is None else {
                    **memory.to_dict(),
                    "rlimit_data": rlimit_data_bytes(memory, len(layout.kinds))}}
        (workdir / "spec.json").write_text(json.dumps(spec))
        log_path = workdir / "helper.log"
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONUNBUFFERED"] = "1"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "simharness.replay.local", str(workdir / "spec.json")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env=env)
        interrupted = timed_out = False
        try:
            while not _exited(proc.pid):
                if deadline is not None and time.time() - t0 > deadline:
                    timed_out = True
                    break
                time.sleep(0.05)
        except KeyboardInterrupt:
            interrupted = True
            try:
                proc.send_signal(signal.SIGTERM)  # the helper kills its ranks and reports
                t_stop = time.time()
                while not _exited(proc.pid) and time.time() - t_stop < 5:
                    time.sleep(0.05)
            except ProcessLookupError:
                pass
        finally:
            _kill_group(proc.pid)  # anything left in the helper's session
            proc.wait()
        if interrupted:
            raise KeyboardInterrupt
        pre = workdir / "preflight.json"
        if pre.exists():
            raise ReplayError(json.loads(pre.read_text())["error"])
        outcome_path = workdir / "outcome.json"
        if timed_out or not outcome_path.exists():
            why = (f"the replay did not finish within {deadline:g} s and was killed" if timed_out
                   else f"the launcher helper exited with code {proc.returncode} without a "
                        f"result")
            failure = {"kind": "launcher", "rank": None, "message": why + ".",
                       "log_tail": _tail(log_path)}
            return LocalRun(t0, proc.pid, None, None, failure)
        outcome = json.loads(outcome_path.read_text())
        failure = outcome.get("failure")
        gathered = None
        results = workdir / "results.json"
        if failure is None and results.exists():
            gathered = json.loads(results.read_text())
        elif failure is None:
            failure = {"kind": "unknown", "rank": 0,
                       "message": "every rank exited 0 but rank 0 wrote no results."}
        if failure is not None:
            failure["log_tail"] = _tail(log_path)
        return LocalRun(t0, proc.pid, outcome, gathered, failure)


def replay(layout: Layout, options: ReplayOptions | None = None, *,
           report_path: str | os.PathLike | None = None, deadline: float | None = None,
           **kwargs) -> dict[str, Any]:
    """Replay ``layout`` on ``world_size`` local processes; returns the report dict.

    ``options`` or keyword arguments of :class:`ReplayOptions` (``backend``,
    ``engine``, ``timeout``, ``overlap_bytes``, ``iters``, ``force``).
    ``report["exit_code"]``: 0 everything matched, 1 mismatches, 3 the replay
    failed (a rank died, a collective timed out; ``report["failure"]`` says
    which). ``deadline``: seconds after which the whole replay is killed (a
    backstop; the ranks' own ``timeout`` normally fires first). Ctrl-C stops
    every rank and re-raises ``KeyboardInterrupt``.
    """
    if options is not None and kwargs:
        raise TypeError(f"replay() takes either options= or keyword options, not both "
                        f"({', '.join(sorted(kwargs))})")
    opts = (options or ReplayOptions(**kwargs)).validate()
    preflight(layout, opts)
    plan = plan_section(layout)
    run = run_local(layout, opts, deadline=deadline, memory=memory_budget(layout, opts))
    report = build_report(layout, opts, run.gathered, failure=run.failure, launch_t0=run.t0,
                          t_end=time.time(), plan=plan,
                          interrupted=bool(run.failure and run.failure["kind"] == "interrupted"))
    if run.outcome is not None:
        report["timings"] = dict(report.get("timings") or {})
        report["timings"]["helper_start_s"] = round(run.outcome["t_fork"] - run.t0, 4)
        report["timings"]["total_s"] = round(time.time() - run.t0, 4)
    report["processes"] = run.processes
    if report_path:
        write_report(report, report_path)
    return report


def write_report(report: dict[str, Any], path: str | os.PathLike) -> None:
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
            fh.write("\n")
    except OSError as exc:
        raise SimharnessError(f"{path}: cannot write the report: "
                              f"{exc.strerror or exc}.") from None


# ----------------------------------------------------------------- torchrun
def torchrun_command(plan_path: str, *, world_size: int, nnodes: int = 1,
                     backend: str = "nccl", engine: str = "plan", timeout: float = 60.0,
                     overlap_bytes: int | None = None, iters: int | None = None,
                     report_path: str | None = "replay-report.json",
                     rdzv_endpoint: str = "$MASTER_ADDR:29500") -> str:
    """The torchrun command that replays ``plan_path`` on ``nnodes`` machines."""
    if nnodes < 1 or world_size % nnodes:
        raise ReplayError(f"--nnodes {nnodes} does not divide the world size {world_size}; "
                          f"use a divisor such as {_divisors(world_size)}.")
    per_node = world_size // nnodes
    cmd = ["torchrun"]
    if nnodes == 1:
        cmd += ["--standalone", f"--nproc-per-node={per_node}"]
    else:
        cmd += [f"--nnodes={nnodes}", f"--nproc-per-node={per_node}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={rdzv_endpoint}", "--rdzv-id=simharness-replay"]
    cmd += ["-m", "simharness.replay.worker", "--plan", plan_path, "--backend", backend,
            "--engine", engine, "--timeout", f"{timeout:g}"]
    if overlap_bytes is not None:
        cmd += ["--overlap-bytes", str(overlap_bytes)]
    if iters is not None:
        cmd += ["--iters", str(iters)]
    if report_path:
        cmd += ["--report", report_path]
    return " ".join(c if c.startswith("--rdzv-endpoint=$") else shlex.quote(c) for c in cmd)


def _divisors(n: int) -> str:
    ds = [d for d in range(1, n + 1) if n % d == 0]
    return ", ".join(map(str, ds[:8]))


__all__ = ["EXIT_FAILED", "LocalRun", "memory_budget", "preflight", "replay", "run_local",
           "torchrun_command",
           "write_report"]
