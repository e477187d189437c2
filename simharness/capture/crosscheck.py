"""The cross-check of ``simharness capture --fast``: rank 0, a middle rank and the last, each
run again alone in a fresh interpreter (the capture worker, :mod:`.faithful_rank`, under
the fake backend), their ``new_group`` calls compared with the fast capture's."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..launch.toolbox import signals_caught
from .record import (
    OK,
    Capture,
    CaptureError,
)

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
            with signals_caught() as got:
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
