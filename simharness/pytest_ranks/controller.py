"""``simharness run -- pytest``: the ranks' pytest runs, in rounds, and one verdict per test.

A round starts every rank through :func:`simharness.launch.launcher.launch` with the GPU shim
and the per-rank plugin (:mod:`simharness.pytest_ranks.rank_plugin`). When a test hangs (the ranks'
watchdogs end them) or a rank dies, the round ends; the runner judges that test from the
records the ranks left, and starts the next round after it, so the rest of the file goes
on. Verdicts are printed as soon as every rank has finished a test.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import SimharnessError, whole_number_problem
from ..launch.children import orphans_ended
from ..launch.launcher import LaunchResult, LaunchSpec, launch
from ..resources import MIB, available_memory, proc_kib
from .rank_plugin import (
    COLLECT_TIMEOUT_S,
    ENV_COLLECT_TIMEOUT,
    ENV_DIR,
    ENV_DONE,
    ENV_GRACE,
    ENV_ROUND,
    ENV_TIMEOUT,
    GRACE_S,
    HANG_EXIT,
)
from .verdicts import (
    NEEDS_GPU_PREFIX,
    STOPPED,
    Verdict,
    _span,
    exit_code,
    not_started,
    read_records,
    verdict,
)

#: Extra MiB per rank over this process's own RSS (torch imported): pytest, the test
#: modules, gloo's buffers and threads. Measured peaks are printed after each run.
RANK_ALLOWANCE_MIB = 150


class RunError(SimharnessError, ValueError):
    """``simharness run`` cannot start or judge: bad sizes, memory, collection errors."""


@dataclass(frozen=True)
class MemoryPlan:
    """Per-rank memory estimate against what this machine has available (MiB)."""

    per_rank_mib: int
    ranks: int
    available_mib: int | None

    @property
    def total_mib(self) -> int:
        return self.per_rank_mib * self.ranks

    @property
    def fits(self) -> bool:
        return self.available_mib is None or self.total_mib <= 0.9 * self.available_mib

    def describe(self) -> str:
        """One line, e.g. ``memory: ~500 MiB per rank x 8 = 4000 MiB of 22000 MiB available``.

        >>> MemoryPlan(500, 8, 22000).describe()
        'memory: ~500 MiB per rank x 8 = 4000 MiB of 22000 MiB available'
        """
        avail = "unknown" if self.available_mib is None else f"{self.available_mib} MiB"
        return (f"memory: ~{self.per_rank_mib} MiB per rank x {self.ranks} = "
                f"{self.total_mib} MiB of {avail} available")


def _own_rss_mib() -> int:
    kib = proc_kib("VmRSS", "/proc/self/status")
    return 400 if kib is None else kib // 1024


def memory_plan(ranks: int, per_rank_mib: int | None = None) -> MemoryPlan:
    """The estimate for ``ranks`` ranks on this node: ``per_rank_mib`` or this process's
    RSS with torch imported plus :data:`RANK_ALLOWANCE_MIB`."""
    if per_rank_mib is None:
        import torch  # noqa: F401  (the estimate counts torch's own footprint)

        per_rank_mib = _own_rss_mib() + RANK_ALLOWANCE_MIB
    return MemoryPlan(per_rank_mib, ranks, available_memory().available // MIB)


def cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class RunSpec:
    """A ``simharness run -- pytest ARGS`` job (this node's part of it)."""

    pytest_args: tuple[str, ...]
    nproc_per_node: int
    nnodes: int = 1
    rdzv_endpoint: str | None = None
    run_id: str | None = None
    timeout_s: float = 120.0
    shim: bool = True
    results_dir: str | None = None
    log_dir: str | None = None
    max_rounds: int = 1000
    grace_s: float = GRACE_S  # how long ranks may stay in a test another rank skipped
    collect_timeout_s: float = COLLECT_TIMEOUT_S  # how long a rank may take to collect

    def __post_init__(self):
        for name, low in (("nproc_per_node", 1), ("nnodes", 1), ("max_rounds", 1)):
            problem = whole_number_problem(name, getattr(self, name), low)
            if problem:
                raise RunError(problem)
        if not self.timeout_s > 0:
            raise RunError(f"timeout_s must be > 0, got {self.timeout_s!r}")
        for name in ("grace_s", "collect_timeout_s"):
            if not getattr(self, name) > 0:
                raise RunError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.nnodes > 1 and not self.results_dir:
            raise RunError(f"nnodes {self.nnodes} needs a results directory every node can "
                           f"write (--results-dir on a shared filesystem)")

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


@dataclass(frozen=True)
class RunReport:
    """The verdicts of a run, in the order the tests ran."""

    verdicts: tuple[Verdict, ...]
    world_size: int
    rounds: int
    wall_s: float
    interrupted: int | None = None
    peak_rss_kib: dict[int, int] = field(default_factory=dict)
    shim_ignored: tuple[str, ...] = ()
    not_run: int = 0  # tests left when a rank's session ended early (see ``not_started``)
    # the tests a signal stopped part-way (no verdict, as pytest gives none): nodeid -> ranks
    stopped_in: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return exit_code(self.verdicts, interrupted=self.interrupted is not None)


class _Round:
    """One round's directory and what its records say."""

    def __init__(self, root: str, number: int, world: int):
        self.dir = os.path.join(root, f"round{number}")
        os.makedirs(self.dir, exist_ok=True)
        self.number = number
        self.world = world

    def records(self) -> dict[int, list[dict]]:
        return {r: read_records(os.path.join(self.dir, f"rank{r}.jsonl"))
                for r in range(self.world)}


def _tests_by_rank(recs: dict[int, list[dict]], kind: str) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for r, rows in recs.items():
        for row in rows:
            if row.get("kind") == kind:
                out.setdefault(row["nodeid"], {})[r] = row
    return out


def _order(recs: dict[int, list[dict]]) -> list[str] | None:
    for row in recs.get(0, []):
        if row.get("kind") == "collected":
            return list(row.get("nodeids") or [])
    return None


def _first_error(recs: dict[int, list[dict]]) -> str | None:
    """What stopped the collection: a file that failed to collect (on any rank: an
    ``ImportError`` on one rank also makes its tests differ from the others'), else ranks
    that collected other tests.

    >>> err = {"kind": "collect_error", "nodeid": "t.py", "longrepr": "t.py:1: in <module>\\n"
    ...        "    import x\\nE   ModuleNotFoundError: No module named 'x'"}
    >>> _first_error({0: [{"kind": "mismatch", "ranks": [1]}], 1: [err]})[:50]
    'collecting t.py failed on ranks 1 (ranks 0 collect'
    """
    errors: dict[str, dict[int, str]] = {}
    for r in sorted(recs):
        for row in recs[r]:
            if row.get("kind") == "collect_error":
                errors.setdefault(row.get("nodeid") or "the tests", {})[r] = \
                    str(row.get("longrepr", ""))
    if errors:
        nodeid, by_rank = next(iter(errors.items()))
        r0 = min(by_rank)
        tail = _error_tail(by_rank[r0])
        others = sorted(set(recs) - set(by_rank))
        fine = f" (ranks {_span(others)} collected it)" if others else ""
        more = f"; {len(errors) - 1} more file(s) failed to collect" if len(errors) > 1 else ""
        return f"collecting {nodeid} failed on ranks {_span(by_rank)}{fine}: rank {r0}: " \
               f"{tail}{more}"
    for r in sorted(recs):
        for row in recs[r]:
            if row.get("kind") == "mismatch":
                return (f"ranks {_span(row.get('ranks') or [])} collected other tests than "
                        f"rank 0 (parametrisation or skips that depend on the rank or on "
                        f"hash order)")
    return None


def _error_tail(longrepr: str) -> str:
    """The lines of a collection error that say what failed, on one line: pytest's ``E``
    lines and the ``file:line: in ...`` line before them (else the last three lines).

    >>> _error_tail("t.py:3: in <module>\\n    import x\\n    ^^^^\\nE   ImportError: no x")
    't.py:3: in <module> | E   ImportError: no x'
    """
    lines = longrepr.strip().splitlines()
    errors = [ln.rstrip() for ln in lines if ln.startswith("E ")]
    if not errors:
        return " | ".join(ln.strip() for ln in lines[-3:])
    where = [ln.strip() for ln in lines if re.match(r"\S+:\d+: in ", ln)]
    return " | ".join(where[-1:] + errors[-3:])


def _stderr_tail(log_dir: str, local_rank: int, lines: int = 15) -> str:
    for root, _dirs, files in os.walk(log_dir):
        if os.path.basename(root) == str(local_rank) and "stderr.log" in files:
            with open(os.path.join(root, "stderr.log"), encoding="utf-8",
                      errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
    return ""


def _lost(result: LaunchResult, have: set[int], world: int, log_dir: str,
          nproc: int) -> dict[int, str]:
    """Ranks without a record for the test the round ended in, and why: first those that
    failed on their own, in the order they failed, then the ranks the launcher stopped."""
    exits = {x.rank: x for x in result.ranks}
    first = result.first_failure
    own, stopped = {}, {}
    for r in range(world):
        if r in have:
            continue
        x = exits.get(r)
        code = None if x is None else x.exitcode
        if code is None:
            stopped[r] = (f"{STOPPED} when another rank ended (its exit status was not "
                          f"seen)" if first is not None else
                          "ended without a report (its exit status was not seen)")
        elif x is not None and not x.failed_on_its_own:
            stopped[r] = f"{STOPPED} (signal {-code}) when another rank ended"
        else:
            why = (f"killed by signal {-code}" if code < 0 else f"exited with status {code}")
            why += " during the test" + (" (the first rank to fail)" if x is first else "")
            tail = _stderr_tail(log_dir, r % nproc)
            if tail:
                why += f"; its stderr ends:\n{tail}"
            own[r] = why
    order = {x.rank: (len(exits) if x.seen is None else x.seen) for x in result.ranks}
    return {r: own[r] for r in sorted(own, key=lambda r: (order.get(r, world), r))} | stopped


def run_pytest(spec: RunSpec, on_verdict: Callable[[Verdict], None] | None = None,
               on_round: Callable[[int, int], None] | None = None) -> RunReport:
    """Run ``spec`` in rounds until every collected test has a verdict (see module doc).

    Raises :class:`RunError` for collection errors, ranks collecting different tests, no
    test selected (``.code`` 5) or a round that judged nothing.
    """
    root = spec.results_dir or tempfile.mkdtemp(prefix="simharness-run-")
    os.makedirs(root, exist_ok=True)
    runner = _Runner(spec, on_verdict)
    t0 = time.monotonic()
    rounds = 0
    try:
        for number in range(spec.max_rounds):
            rounds = number + 1
            if on_round is not None and number:
                on_round(number, len(runner.judged))
            if runner.round(_Round(root, number, spec.world_size)):
                break
    finally:
        if spec.results_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return RunReport(tuple(runner.judged.values()), spec.world_size, rounds,
                     time.monotonic() - t0, runner.interrupted, runner.peaks,
                     tuple(sorted(runner.ignored)), runner.not_run, runner.stopped_in)


class _Runner:
    """The verdicts so far, and one round at a time."""

    def __init__(self, spec: RunSpec, on_verdict: Callable[[Verdict], None] | None):
        self.spec = spec
        self.on_verdict = on_verdict
        self.judged: dict[str, Verdict] = {}
        self.lock = threading.Lock()
        self.peaks: dict[int, int] = {}
        self.interrupted: int | None = None
        self.ignored: set[str] = set()
        self.not_run = 0
        self.stopped_in: dict[str, tuple[int, ...]] = {}

    def emit(self, v: Verdict) -> None:
        with self.lock:
            if v.nodeid in self.judged:
                return
            self.judged[v.nodeid] = v
        if self.on_verdict is not None:
            self.on_verdict(v)

    def judge_complete(self, recs: dict[int, list[dict]]) -> None:
        world = self.spec.world_size
        for nodeid, by_rank in _tests_by_rank(recs, "test").items():
            if len(by_rank) == world and nodeid not in self.judged:
                failed = any(rec.get("outcome") in ("failed", "error") for rec in by_rank.values())
                self.emit(verdict(nodeid, by_rank, world,
                                  after_stop=_after_stop(recs, nodeid) if failed else None))

    def round(self, rnd: _Round) -> bool:
        """Run one round; True when the run is over."""
        spec = self.spec
        done_file = os.path.join(rnd.dir, "done.txt")
        with open(done_file, "w", encoding="utf-8") as fh:
            fh.writelines(n + "\n" for n in self.judged)
        stop = threading.Event()
        poller = threading.Thread(target=_poll, args=(rnd, self.judge_complete, stop),
                                  daemon=True)
        poller.start()
        log_dir = (os.path.join(spec.log_dir, f"round{rnd.number}") if spec.log_dir
                   else os.path.join(rnd.dir, "logs"))
        env = {ENV_DIR: rnd.dir, ENV_DONE: done_file, ENV_TIMEOUT: str(spec.timeout_s),
               ENV_ROUND: str(rnd.number), ENV_GRACE: str(spec.grace_s),
               ENV_COLLECT_TIMEOUT: str(spec.collect_timeout_s)}
        # no cache writes from W processes at once; no per-process random test order
        target = ("-m", "pytest", "-p", "simharness.pytest_ranks.rank_plugin",
                  "-p", "no:cacheprovider", "-p", "no:randomly", *spec.pytest_args)
        run_id = None if spec.run_id is None else f"{spec.run_id}-{rnd.number}"
        try:
            # what a rank left running that it could not end itself (killed by the launcher,
            # os._exit in a test) is re-parented to this process and ended with the round
            with orphans_ended():
                result = launch(LaunchSpec(target, spec.nproc_per_node, spec.nnodes,
                                           spec.rdzv_endpoint, run_id, spec.shim, log_dir, env,
                                           rdzv_timeout_s=max(120, int(spec.timeout_s))))
        finally:
            stop.set()
            poller.join()
        recs = rnd.records()
        self.judge_complete(recs)
        for r, rows in recs.items():
            for row in rows:
                if row.get("kind") in ("end", "hang") and row.get("peak_rss_kib"):
                    self.peaks[r] = max(self.peaks.get(r, 0), int(row["peak_rss_kib"]))
                if row.get("kind") == "end" and r == 0:
                    self.ignored.update(row.get("shim_ignored") or [])
        if result.signal is not None:
            self.interrupted = result.signal
            self.stopped_in = {n: tuple(sorted(by_rank)) for n, by_rank
                               in _tests_by_rank(recs, "interrupted").items()
                               if n not in self.judged}
            return True
        return self.judge_the_rest(rnd, recs, result, log_dir)

    def judge_the_rest(self, rnd: _Round, recs: dict[int, list[dict]],
                       result: LaunchResult, log_dir: str) -> bool:
        """Judge the test the round ended in; True when no test is left."""
        spec, world = self.spec, self.spec.world_size
        problem = _first_error(recs)
        if problem:
            raise RunError(problem)
        _collection_hang(recs, spec.collect_timeout_s)
        order = _order(recs)
        skipped = [row for row in recs.get(0, []) if row.get("kind") == "collect_skip"]
        for row in skipped:  # a whole module skipped at import: a skip, as pytest counts it
            reason = str(row.get("reason", ""))
            self.emit(Verdict(str(row.get("nodeid")), "skipped", tuple(range(world)), 0,
                              reason, 0.0, reason.startswith(NEEDS_GPU_PREFIX)))
        if rnd.number == 0 and order == [] and skipped:
            return True
        if rnd.number == 0 and order == []:
            err = RunError("the pytest arguments select no tests (pytest's exit status 5): "
                           f"{' '.join(spec.pytest_args) or '(none)'}")
            err.code = 5  # type: ignore[attr-defined]
            raise err
        if order is None:
            raise RunError(_no_collection(result, log_dir, spec.nproc_per_node))
        pending = [n for n in order if n not in self.judged]
        if not pending:
            return True
        stuck_on = pending[0]
        waiting = _tests_by_rank(recs, "diverged").get(stuck_on, {})
        if waiting:  # a rank's session ended before this test: stop, as pytest -x does
            self.emit(not_started(stuck_on, waiting, world))
            self.not_run = len(pending) - 1
            return True
        hangs = _tests_by_rank(recs, "hang").get(stuck_on, {})
        tests = _tests_by_rank(recs, "test").get(stuck_on, {})
        # a rank that skipped (NeedsGPU) and was stopped in the teardown that followed
        for r, row in _tests_by_rank(recs, "skip").get(stuck_on, {}).items():
            tests.setdefault(r, {**row, "outcome": "skipped"})
        # a rank that failed and was stopped before its test record (its teardown waited)
        for r, row in _tests_by_rank(recs, "fail").get(stuck_on, {}).items():
            tests.setdefault(r, dict(row))
        if not hangs and len(tests) < world and all(x.exitcode == 0 for x in result.ranks):
            raise RunError(f"every rank ended but {stuck_on} has no report from ranks "
                           f"{sorted(set(range(world)) - set(tests))}")
        stopped = {r: f"its pytest session was stopped inside this test ({rec.get('what')})"
                   for r, rec in _tests_by_rank(recs, "interrupted").get(stuck_on, {}).items()}
        lost = {} if hangs else {**_lost(result, set(tests) | set(stopped), world, log_dir,
                                         spec.nproc_per_node), **stopped}
        self.emit(verdict(stuck_on, tests, world, hangs=hangs, lost=lost,
                          after_stop=_after_stop(recs, stuck_on)))
        if stopped:  # pytest.exit ends the session, as pytest itself does: no more rounds
            self.not_run = len(pending) - 1
            return True
        return len(pending) == 1  # it was the last test: no new round for nothing


def _after_stop(recs: dict[int, list[dict]], nodeid: str) -> tuple[str, list[int]] | None:
    """The last test before ``nodeid`` in this round's processes that stopped on
    ``NeedsGPU`` on some ranks, with those ranks (None when there is none).

    >>> stop = {"kind": "skip", "i": 0, "nodeid": "t::a", "needs_gpu": True}
    >>> _after_stop({0: [stop, {"kind": "test", "i": 1, "nodeid": "t::b"}], 1: [stop]}, "t::b")
    ('t::a', [0, 1])
    """
    here = max((int(row["i"]) for rows in recs.values() for row in rows
                if row.get("nodeid") == nodeid and isinstance(row.get("i"), int)), default=-1)
    stops: dict[tuple[int, str], list[int]] = {}
    for r, rows in recs.items():
        for row in rows:
            if row.get("kind") == "skip" and row.get("needs_gpu") and -1 < row["i"] < here:
                stops.setdefault((row["i"], row["nodeid"]), []).append(r)
    if not stops:
        return None
    last = max(stops)
    return last[1], sorted(stops[last])


def _collection_hang(recs: dict[int, list[dict]], timeout_s: float) -> None:
    """Raise :class:`RunError` (``.stacks``: the stuck ranks' stacks) when a rank's watchdog
    fired while it was still collecting the tests."""
    hangs = {r: row for r, rows in recs.items() for row in rows
             if row.get("kind") == "hang" and row.get("nodeid") == "(collection)"}
    if not hangs:
        return
    stuck = sorted(r for r, h in hangs.items() if h.get("state") == "collecting")
    collected = {r for r, rows in recs.items() if any(x.get("kind") == "collected" for x in rows)}
    # ranks that gave up waiting: the stuck ones are those that never collected (stopped
    # by the launcher before their own watchdog fired, so without a stack)
    stuck = stuck or sorted(set(recs) - collected)
    if not stuck:
        return
    waiting = sorted(set(hangs) - set(stuck))
    others = f"; ranks {_span(waiting)} had collected and waited for them" if waiting else ""
    have = [r for r in stuck if r in hangs]
    where = ("the stuck ranks' stacks are printed above" if have else
             "they were stopped before their own watchdog wrote a stack")
    err = RunError(f"collecting the tests hung on ranks {_span(stuck)} (past {timeout_s:g}s, "
                   f"--collect-timeout){others}; {where}")
    err.stacks = "\n".join(  # type: ignore[attr-defined]
        f"--- rank {r} stack (collecting) ---\n{hangs[r].get('stack', '').rstrip()}"
        for r in have)
    raise err


def _poll(rnd: _Round, judge: Callable[[dict[int, list[dict]]], None],
          stop: threading.Event) -> None:
    while not stop.wait(0.5):
        judge(rnd.records())


def _no_collection(result: LaunchResult, log_dir: str, nproc: int) -> str:
    """Why no rank reported its tests: the rank that failed first (not the lowest: the
    others are often stopped by the launcher because of it), with the end of its stderr."""
    first = result.first_failure or (result.ranks[0] if result.ranks else None)
    if first is None:
        return "no rank started (see the launcher's messages above)"
    tail = _stderr_tail(log_dir, first.rank % nproc, lines=8)
    code = first.exitcode
    what = ("hung" if code == HANG_EXIT else f"was killed by signal {-code}"
            if code is not None and code < 0 else f"exited with status {code}")
    also = sorted(x.rank for x in result.ranks if x.failed_on_its_own and x is not first)
    stopped = sorted(x.rank for x in result.ranks
                     if x is not first and x.exitcode != 0 and not x.failed_on_its_own)
    after = "".join([f"; ranks {_span(also)} failed too" if also else "",
                     f"; the launcher then stopped ranks {_span(stopped)}" if stopped else ""])
    first_of = " (the first to fail)" if also or stopped else ""
    return (f"rank {first.rank} {what}{first_of} before collecting any test{after}"
            + (f"; its stderr ends: {' | '.join(tail.strip().splitlines())}" if tail else ""))
