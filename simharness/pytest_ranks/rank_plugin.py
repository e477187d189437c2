"""The per-rank pytest plugin of ``simharness run`` (``-p simharness.pytest_ranks.rank_plugin``).

Active only when ``SIMHARNESS_RUN_DIR`` is set (by :mod:`simharness.pytest_ranks.controller`).
Each rank runs pytest in its own interpreter (torch and the test modules imported once) and:

- leaves out the tests an earlier round already judged (``SIMHARNESS_RUN_DONE``, a file of
  node ids) and checks through the rendezvous store that every rank collected the same
  tests;
- starts each test together with the other ranks (a barrier on the store), so one test's
  collectives meet;
- turns :class:`simharness.errors.NeedsGPU` into a skip ``needs GPU: ...``; a skip (of the
  setup or the call) is recorded and counted on the store as soon as pytest reports it, as
  a ``skip`` record, before the test's teardown runs: a teardown that then waits for the
  other ranks (``teardown_class`` with a barrier) cannot hide it;
- after each test, destroys the process groups the test created (gloo groups left alive
  pile up threads and sockets; Megatron's teardown drops them without destroying);
- appends one JSON record per test to ``<dir>/rank<R>.jsonl``; a test that Ctrl-C (the
  agent forwards SIGINT) or ``pytest.exit`` stops part-way gets an ``interrupted`` record
  instead, never a ``test`` one (pytest makes no call report for it);
- arms a watchdog per test: past ``SIMHARNESS_RUN_TIMEOUT`` seconds it writes the main
  thread's stack as a ``hang`` record and ends the rank with :data:`HANG_EXIT`; the runner
  then starts a new round after that test. The watchdog is armed during collection too
  (``state: collecting``, ``SIMHARNESS_RUN_COLLECT_TIMEOUT`` seconds: importing torch
  and the test modules on a loaded machine takes far longer than a test), so an import
  that hangs names its ranks and stacks;
- notices when the ranks stop running the same tests, without waiting for the timeout:
  a rank whose session ended early (``-x``, ``--maxfail``, ``pytest.exit``) leaves an
  ``ended`` count on the store, and a rank waiting to start a test it will never share
  records it as ``diverged`` and stops; a rank that skipped a test (a rank-dependent skip,
  ``NeedsGPU``) leaves a ``skip`` count for it, and a rank still inside that test
  ``SIMHARNESS_RUN_GRACE`` seconds later (it waits in a collective for the skipped rank)
  writes its stack with ``state: diverged`` and ends, as a hang does. A rank that found a
  rank-dependent ``new_group`` (:class:`simharness.errors.GroupMismatch`) leaves the same
  count: the peers it left waiting are stopped after the grace, and the test's record
  carries the finding (``group_mismatch``).
- ends the processes its tests started (a ``multiprocessing`` worker, a ``subprocess``, a
  daemon that double-forked) when the rank ends, at the end of its session or when its
  watchdog ends it: the rank is their *child subreaper*, so none outlives the run
  (:mod:`simharness.launch.children`).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import json
import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any

import pytest

from .. import envvars
from ..errors import group_mismatch_in, missing_gpu_package_in_report, needs_gpu_message
from ..launch.children import become_subreaper, end_descendants
from ..launch.toolbox import thread_stack
from ..resources import proc_kib
from .verdicts import NEEDS_GPU_PREFIX

ENV_DIR = "SIMHARNESS_RUN_DIR"
ENV_DONE = "SIMHARNESS_RUN_DONE"
ENV_TIMEOUT = "SIMHARNESS_RUN_TIMEOUT"
ENV_ROUND = "SIMHARNESS_RUN_ROUND"
ENV_GRACE = "SIMHARNESS_RUN_GRACE"
ENV_COLLECT_TIMEOUT = "SIMHARNESS_RUN_COLLECT_TIMEOUT"
#: Default seconds a rank may take to collect the tests (imports included).
COLLECT_TIMEOUT_S = 300.0
#: Default seconds a rank may stay in a test that another rank skipped.
GRACE_S = 5.0
#: How often a waiting rank or the watchdog looks at the store for divergence (s).
POLL_S = 0.5
#: A rank whose watchdog fired exits with this status (as coreutils' timeout).
HANG_EXIT = 124
#: Extra seconds before faulthandler's C-level backstop ends a rank that holds the GIL.
BACKSTOP_S = 30.0
#: Frames of a stuck rank's stack kept in its hang record (innermost).
STACK_FRAMES = 12
#: Seconds the processes a rank's tests started get between SIGTERM and SIGKILL.
END_CHILDREN_S = 0.5


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(ENV_DIR):
        become_subreaper()  # orphans of the tests' processes stay in this rank's tree
        config.pluginmanager.register(RankSession(), "simharness-rank-session")


class Watchdog(threading.Thread):
    """Ends the rank when the armed test runs past its deadline, after recording its stack."""

    def __init__(self, session: RankSession):
        super().__init__(name="simharness-watchdog", daemon=True)
        self.session = session
        self.cond = threading.Condition()
        self.deadline: float | None = None
        self.info: dict[str, Any] = {}
        self.main_ident = threading.main_thread().ident

    def arm(self, seconds: float, **info: Any) -> None:
        with self.cond:
            self.deadline = time.monotonic() + seconds
            self.info = dict(info, armed=time.monotonic())
            self.cond.notify()
        stack = self.session.stack_file
        if stack is not None:
            faulthandler.dump_traceback_later(seconds + BACKSTOP_S, exit=True, file=stack)

    def update(self, **info: Any) -> None:
        with self.cond:
            self.info.update(info)

    def disarm(self) -> None:
        with self.cond:
            self.deadline = None
            self.cond.notify()
        faulthandler.cancel_dump_traceback_later()

    def run(self) -> None:
        # (test index, "skip" or "fail") -> when a peer's skip or failure was first seen
        seen: dict[tuple[int, str], float] = {}
        while True:
            with self.cond:
                if self.deadline is None:
                    self.cond.wait()
                    continue
                left = self.deadline - time.monotonic()
                if left > 0:
                    self.cond.wait(timeout=min(POLL_S, left))
                info = dict(self.info)
                fire = self.deadline is not None and time.monotonic() >= self.deadline
                check = self.deadline is not None and not fire
            behind = self._left_behind(info, seen) if check else None  # the store, unlocked
            if behind is not None:
                with self.cond:  # still the same test, still running in it?
                    fire = (self.deadline is not None and self.info.get("i") == info.get("i")
                            and self.info.get("state") == "running")
                    if fire and behind == "skip":  # after a peer failed it stays "running"
                        self.info["state"] = "diverged"
                    info = dict(self.info)
            if not fire:
                continue
            # the innermost frames: the test and what it waits in (pytest's own frames cut)
            stack = _user_stack(thread_stack(self.main_ident))
            raising = _raising(self.main_ident, str(info.pop("test_file", "")))
            self.session.write(kind="hang", stack=stack,
                               elapsed=round(time.monotonic() - info.pop("armed", 0.0), 3),
                               peak_rss_kib=_peak_rss_kib(), **info,
                               **({"raising": raising} if raising else {}))
            try:
                end_descendants(wait_s=END_CHILDREN_S)
            finally:
                os._exit(HANG_EXIT)

    def _left_behind(self, info: dict[str, Any],
                     seen: dict[tuple[int, str], float]) -> str | None:
        """``"skip"`` when this rank has been running, for the grace period, a test that a
        peer skipped (the peer has gone on; a collective here waits for it in vain);
        ``"fail"`` when a peer failed in it that long ago (the peer raised past the
        collectives this rank waits in); None otherwise."""
        i = info.get("i", -1)
        if info.get("state") != "running" or i < 0 or self.session.world == 1:
            return None
        now = time.monotonic()
        for kind in ("skip", "fail"):
            if (i, kind) not in seen:
                if not self.session.peer_told(kind, i):
                    continue
                seen[(i, kind)] = now
            if now - seen[(i, kind)] >= self.session.grace:
                return kind
        return None


class RankSession:
    """The plugin object of one rank (see the module docstring)."""

    def __init__(self) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.dir = os.environ[ENV_DIR]
        self.timeout = envvars.read(ENV_TIMEOUT)
        self.round = envvars.read(ENV_ROUND)
        self.grace = min(envvars.read(ENV_GRACE, default=GRACE_S), self.timeout)
        self.out = open(os.path.join(self.dir, f"rank{self.rank}.jsonl"), "a",  # noqa: SIM115
                        encoding="utf-8")
        self.stack_file = open(os.path.join(self.dir, f"stack-rank{self.rank}.txt"),  # noqa: SIM115
                               "a", encoding="utf-8")
        self.store: Any = None
        self.watch_store: Any = None  # the watchdog thread's own client
        self.diverged = False
        self.last: str | None = None  # the node id of the last test this rank finished
        self.index: dict[str, int] = {}
        self.reports: dict[str, list[pytest.TestReport]] = {}
        self.skip_told: set[int] = set()  # the tests whose skip is already on the store
        self.found: dict[int, str] = {}  # test index -> the rank-dependent new_group found
        # test id -> when (wall clock, shared by the ranks of a node) its first phase failed
        # here: the verdict names the rank that failed first, not the lowest
        self.failed_at: dict[str, float] = {}
        self.collect_errors = 0
        self.lock = threading.Lock()  # the watchdog thread writes too
        self.watchdog = Watchdog(self)
        self.watchdog.start()
        self.collect_s = envvars.read(ENV_COLLECT_TIMEOUT, default=COLLECT_TIMEOUT_S)
        self.watchdog.arm(self.collect_s, i=-1, nodeid="(collection)", state="collecting")

    # -- records and the store ------------------------------------------------------------
    def write(self, **record: Any) -> None:
        record.setdefault("round", self.round)
        with self.lock:
            self.out.write(json.dumps(record, default=str) + "\n")
            self.out.flush()

    def _connect(self) -> Any:
        import torch.distributed as dist  # the ranks import torch for the tests anyway

        wait = timedelta(seconds=self.timeout * 2 + 60)
        tcp = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"),
                            int(os.environ["MASTER_PORT"]), None, False, timeout=wait)
        return dist.PrefixStore(f"simharness-run/{self.round}/", tcp)

    def _store(self) -> Any:
        if self.store is None:
            self.store = self._connect()
        return self.store

    def peer_told(self, kind: str, i: int) -> bool:
        """Whether a rank recorded a ``kind`` (``skip`` or ``fail``) of test ``i`` (the
        watchdog thread's question)."""
        try:
            if self.watch_store is None:
                self.watch_store = self._connect()
            return int(self.watch_store.add(f"{kind}/{i}", 0)) > 0
        except Exception:  # noqa: BLE001  (a store gone at shutdown: no divergence seen)
            return False

    def barrier(self, name: str, *, until_ended: bool = False) -> bool:
        """Wait until every rank reached ``name`` (a counter and a go key on the store).

        ``until_ended``: give up, returning False, when a rank's pytest session ended
        meanwhile (it will never reach ``name``)."""
        if self.world == 1:
            return True
        store = self._store()
        if store.add(f"b/{name}", 1) == self.world:
            store.set(f"go/{name}", "1")
            return True
        while True:
            try:
                store.wait([f"go/{name}"], timedelta(seconds=POLL_S))
                return True
            except Exception:  # noqa: BLE001  (torch's store timeout: DistStoreError)
                if until_ended and int(store.add("ended", 0)) > 0:
                    return False

    def ended_ranks(self) -> dict[int, str]:
        """Ranks whose session ended, with the last test each finished."""
        store = self._store()
        out = {}
        for r in range(self.world):
            if store.check([f"ended/{r}"]):
                out[r] = store.get(f"ended/{r}").decode()
        return out

    # -- collection -----------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        done_file = envvars.read(ENV_DONE)
        done: set[str] = set()
        if done_file and os.path.exists(done_file):
            with open(done_file, encoding="utf-8") as fh:
                done = {line.rstrip("\n") for line in fh if line.strip()}
        if done:
            kept = [it for it in items if it.nodeid not in done]
            config.hook.pytest_deselected(items=[it for it in items if it.nodeid in done])
            items[:] = kept
        ids = [it.nodeid for it in items]
        self.index = {nodeid: i for i, nodeid in enumerate(ids)}
        digest = _digest(ids)
        self.write(kind="collected", n=len(ids), digest=digest,
                   nodeids=ids if self.rank == 0 else None)
        # its own is done: wait longer than a slow peer's own collection watchdog, so that
        # the stuck rank is the one that reports (with its stack)
        self.watchdog.arm(2 * self.collect_s + 10, i=-1, nodeid="(collection)",
                          state="waiting-for-collection")
        if self.world > 1:  # also with no test: the others wait for this rank's digest
            store = self._store()
            errors = "E" if self.collect_errors else ""  # a rank that could not import a file
            store.set(f"collect/{self.rank}", errors + digest)
            others = {r: store.get(f"collect/{r}").decode() for r in range(self.world)}
            failed = sorted(r for r, d in others.items() if d.startswith("E"))
            differ = sorted(r for r, d in others.items() if d != others[0])
            if failed or differ:
                self.write(kind="mismatch", ranks=differ, failed=failed)
                raise pytest.UsageError(
                    f"collecting the tests failed on ranks {failed} (see their errors)"
                    if failed else
                    f"ranks {differ} collected other tests than rank 0 (parametrisation or "
                    f"skip conditions that depend on the rank or on hash order)")
        self.watchdog.disarm()
        gc.freeze()  # what import and collection made: each test's collection skips it

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        """A test module that cannot be imported without a GPU-only package (its own
        ``import transformer_engine``, or one of the modules it imports) is skipped as
        needing a GPU, as ``pytest.importorskip`` would skip it, not a collection error
        that stops the whole run."""
        outcome = yield
        rep = outcome.get_result()
        if not rep.failed or not isinstance(collector, pytest.Module):
            return
        stop = missing_gpu_package_in_report(str(rep.longrepr))
        if stop is not None:
            rep.outcome = "skipped"
            rep.longrepr = (str(collector.path), 0, f"{NEEDS_GPU_PREFIX}{stop}")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors += 1
            self.write(kind="collect_error", nodeid=report.nodeid,
                       longrepr=str(report.longrepr))
        elif report.skipped:  # a module skipped as it is imported (pytest.importorskip)
            self.write(kind="collect_skip", nodeid=report.nodeid, reason=_reason(report))

    # -- one test -------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        i = self.index.get(item.nodeid, -1)
        self.watchdog.arm(self.timeout, i=i, nodeid=item.nodeid, state="waiting-to-start")
        if self.diverged or not self.barrier(f"t{i}", until_ended=True):
            yield from self._diverge(item, i)
            return
        self.watchdog.arm(self.timeout, i=i, nodeid=item.nodeid, state="running",
                          test_file=str(item.path))
        before = _live_groups()
        start = time.monotonic()
        outcome = yield
        if outcome.exception is not None:  # Ctrl-C or pytest.exit inside the test: no result
            self.reports.pop(item.nodeid, None)
            exc = outcome.exception
            what = ("KeyboardInterrupt" if isinstance(exc, KeyboardInterrupt)
                    else f"pytest.exit: {exc.msg}" if isinstance(exc, pytest.exit.Exception)
                    else f"{type(exc).__name__}: {exc}")
            self.write(kind="interrupted", i=i, nodeid=item.nodeid, what=what,
                       elapsed=round(time.monotonic() - start, 4))
            return
        # The test's garbage is collected here, at the same point on every rank, while its
        # groups still exist: a finalizer that makes a collective (Megatron-LM's test
        # containers call torch.distributed.barrier in __del__) then runs on every rank
        # together, as it does when a test passes and frees it, not wherever one rank's
        # collector happens to run later. pytest keeps a failed test's traceback, and with
        # it the test's objects, in sys.last_traceback (for a post-mortem debugger, which a
        # rank has not): dropped first.
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            with contextlib.suppress(AttributeError):
                delattr(sys, name)
        gc.collect()
        _destroy_new_groups(before)
        self.watchdog.update(state="finished")  # still armed: a stuck peer is still this test
        self._record(item, time.monotonic() - start)

    def _diverge(self, item: pytest.Item, i: int):
        """A test that a rank whose session ended will never start: record it (the first
        time), skip it here and stop this rank's session too."""
        if not self.diverged:
            self.diverged = True
            self.write(kind="diverged", i=i, nodeid=item.nodeid, ended=self.ended_ranks(),
                       last=self.last)
            item.session.shouldstop = "simharness: a rank's pytest session ended early"
        item.add_marker(pytest.mark.skip(reason="simharness: the ranks diverged"))
        yield
        self.reports.pop(item.nodeid, None)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        rep = outcome.get_result()
        stop = needs_gpu_message(call.excinfo.value) if call.excinfo is not None else None
        if stop is not None:
            rep.outcome = "skipped"
            path, line = item.location[0], (item.location[1] or 0) + 1
            rep.longrepr = (str(path), line, f"{NEEDS_GPU_PREFIX}{stop}")
            return
        if rep.failed and item.nodeid not in self.failed_at:
            self._tell_failed(item.nodeid, rep)
        found = group_mismatch_in(call.excinfo.value) if call.excinfo is not None else None
        if found is not None and not self.diverged:
            self._tell_left(item.nodeid, str(found))

    def _tell_failed(self, nodeid: str, rep: pytest.TestReport) -> None:
        """A phase of the test failed here: recorded now (the teardown may wait for ranks
        still inside the test, and they for this one) and counted on the store, so that a
        peer still inside the test after the grace is stopped as the failure's knock-on, not
        left to the timeout."""
        self.failed_at[nodeid] = time.time()
        i = self.index.get(nodeid, -1)
        self.write(kind="fail", i=i, nodeid=nodeid, when=rep.when,
                   outcome="failed" if rep.when == "call" else "error",
                   longrepr=str(rep.longrepr), failed_at=round(self.failed_at[nodeid], 4))
        self.watchdog.update(state="failed")
        if self.world > 1 and not self.diverged:
            self._store().add(f"fail/{i}", 1)

    def _tell_left(self, nodeid: str, found: str) -> None:
        """A rank-dependent ``new_group`` found here: this rank leaves the test now; like a
        skip, it is counted on the store before the teardown, so that a peer still inside
        the test (waiting for this rank in a collective) is stopped after the grace."""
        i = self.index.get(nodeid, -1)
        self.found.setdefault(i, found)
        if i in self.skip_told:
            return
        self.skip_told.add(i)
        self.watchdog.update(state="left")
        if self.world > 1:
            self._store().add(f"skip/{i}", 1)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.setdefault(report.nodeid, []).append(report)
        if report.skipped and report.when in ("setup", "call") and not self.diverged:
            self._tell_skip(report)

    def _tell_skip(self, report: pytest.TestReport) -> None:
        """Record a skip of the setup or the call now, before the teardown: the teardown
        may wait for ranks that are still inside the test (``teardown_class`` with a
        barrier), and they for this one."""
        i = self.index.get(report.nodeid, -1)
        if i in self.skip_told:
            return
        self.skip_told.add(i)
        reason = _reason(report)
        gpu = reason.startswith(NEEDS_GPU_PREFIX)
        self.write(kind="skip", i=i, nodeid=report.nodeid, when=report.when, reason=reason,
                   needs_gpu=gpu)
        # not "running" any more: this rank waits for nothing it started; a peer that is
        # still inside the test past the grace is what diverged
        self.watchdog.update(state="skipped", **({"needs_gpu": reason} if gpu else {}))
        if self.world > 1:
            self._store().add(f"skip/{i}", 1)  # a peer still inside it waits for nothing

    def _record(self, item: pytest.Item, duration: float) -> None:
        reports = self.reports.pop(item.nodeid, [])
        outcome, longrepr, reason = "passed", "", ""
        for rep in reports:
            if rep.failed:
                outcome = "failed" if rep.when == "call" else "error"
                longrepr = str(rep.longrepr)
                break
            if rep.skipped and outcome == "passed":
                outcome = "skipped"
                reason = _reason(rep)
        if outcome == "skipped" and any(getattr(r, "wasxfail", None) for r in reports):
            reason = "xfail: " + reason
        stops = [n for n, r in enumerate(reports)
                 if r.skipped and _reason(r).startswith(NEEDS_GPU_PREFIX)]
        fails = [n for n, r in enumerate(reports) if r.failed]
        stop = _reason(reports[stops[0]]) if stops and (not fails or stops[0] < fails[0]) \
            else None
        if stop is not None:  # it needs a GPU; what failed after the stop is its knock-on
            last = (longrepr.strip().splitlines() or [""])[-1].strip()
            then = f" (then its {outcome}: {last})" if outcome in ("failed", "error") else ""
            outcome, reason, longrepr = "skipped", stop + then, ""
        i = self.index.get(item.nodeid, -1)
        found = self.found.pop(i, None) if outcome in ("failed", "error") else None
        failed_at = self.failed_at.pop(item.nodeid, None)
        self.write(kind="test", i=i, nodeid=item.nodeid,
                   outcome=outcome, longrepr=longrepr, reason=reason,
                   needs_gpu=stop is not None, duration=round(duration, 4),
                   **({"group_mismatch": found} if found else {}),
                   **({"failed_at": round(failed_at, 4)}
                      if failed_at is not None and outcome in ("failed", "error") else {}))
        self.last = item.nodeid
        if outcome == "skipped" and self.world > 1 and i not in self.skip_told:
            self.skip_told.add(i)
            self._store().add(f"skip/{i}", 1)  # a peer still inside it waits for nothing

    # -- the end --------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.world > 1 and self.index:
            store = self._store()
            store.set(f"ended/{self.rank}", self.last or "")  # before "ended": see barrier
            store.add("ended", 1)
        if self.index and (int(exitstatus) in (0, 1) or self.diverged):
            self.barrier("end")  # the watchdog stays armed: a peer stuck in the last test
        self.watchdog.disarm()
        from ..launch import gpu_shim

        shim = gpu_shim.active()
        self.write(kind="end", exitstatus=int(exitstatus), peak_rss_kib=_peak_rss_kib(),
                   shim_ignored=shim.ignored_summary() if shim is not None else [])
        if int(exitstatus) in (0, 1) or self.diverged:
            # the verdicts are in the records; a rank ends 0 whatever its tests did, so
            # that torch's agents all succeed and none waits in the exit barrier for one
            # whose ranks "failed" (several nodes)
            session.exitstatus = 0

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """After every fixture's teardown: end what the tests started and left running."""
        end_descendants(wait_s=END_CHILDREN_S)


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """A skip report's reason (pytest keeps ``(path, line, reason)``)."""
    lr = report.longrepr
    return str(lr[2] if isinstance(lr, tuple) and len(lr) == 3 else lr)


def _user_stack(stack: traceback.StackSummary) -> str:
    """The innermost :data:`STACK_FRAMES` frames, pytest's and pluggy's own left out."""
    skip = ("/_pytest/", "/pluggy/", "/pytest/__main__.py", os.sep + "runpy.py", "<frozen runpy>",
            os.path.join("simharness", "launch", "bootstrap.py"),
            os.path.join("simharness", "launch", "rank.py"))
    frames = [f for f in stack if not any(s in f.filename for s in skip)]
    return "".join(traceback.format_list(frames[-STACK_FRAMES:]))


def _digest(ids: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def _raising(ident: int | None, test_file: str) -> str | None:
    """The error thread ``ident`` is propagating or handling, when it came through a frame
    of ``test_file`` (the test raised it, and is in a ``finally`` block, a context
    manager's exit or an ``except`` of its own): its traceback as Python prints it, the
    innermost frames; None otherwise. A rank stuck there is stuck in a failure's clean-up
    (``finally: destroy_model_parallel()`` waiting for the others), which pytest has not
    reported yet."""
    # 3.11: an exc_info tuple per thread; 3.12 and later: the error itself
    current = sys._current_exceptions().get(ident or 0)  # type: ignore[attr-defined]
    exc = current[1] if isinstance(current, tuple) else current
    if not isinstance(exc, BaseException) or not test_file:
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    if not any(os.path.abspath(f.filename) == os.path.abspath(test_file) for f in frames):
        return None
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-STACK_FRAMES)
    return "".join(lines).rstrip()


def _live_groups() -> set | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    from torch.distributed import distributed_c10d as c10d

    return set(c10d._world.pg_map)


def _destroy_new_groups(before: set | None) -> None:
    """Destroy the groups created since ``before`` (not the default group)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    from torch.distributed import distributed_c10d as c10d

    default = c10d._get_default_group()
    for pg in list(c10d._world.pg_map):
        if pg is not default and (before is None or pg not in before):
            with contextlib.suppress(Exception):  # a group the test already tore down
                dist.destroy_process_group(pg)


def _peak_rss_kib() -> int | None:
    return proc_kib("VmHWM", "/proc/self/status")
