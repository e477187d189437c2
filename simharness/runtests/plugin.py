"""The per-rank pytest plugin of ``simharness run`` (``-p simharness.runtests.plugin``).

Active only when ``SIMHARNESS_RUN_DIR`` is set (by :mod:`simharness.runtests.runner`).
Each rank runs pytest in its own interpreter (torch and the test modules imported once) and:

- leaves out the tests an earlier round already judged (``SIMHARNESS_RUN_DONE``, a file of
  node ids) and checks through the rendezvous store that every rank collected the same
  tests;
- starts each test together with the other ranks (a barrier on the store), so one test's
  collectives meet;
- turns :class:`simharness.errors.NeedsGPU` into a skip ``needs GPU: ...``;
- after each test, destroys the process groups the test created (gloo groups left alive
  pile up threads and sockets; Megatron's teardown drops them without destroying);
- appends one JSON record per test to ``<dir>/rank<R>.jsonl``;
- arms a watchdog per test: past ``SIMHARNESS_RUN_TIMEOUT`` seconds it writes the main
  thread's stack as a ``hang`` record and ends the rank with :data:`HANG_EXIT`; the runner
  then starts a new round after that test.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any

import pytest

from ..errors import NeedsGPU
from ..resources import proc_kib
from .verdicts import NEEDS_GPU_PREFIX

ENV_DIR = "SIMHARNESS_RUN_DIR"
ENV_DONE = "SIMHARNESS_RUN_DONE"
ENV_TIMEOUT = "SIMHARNESS_RUN_TIMEOUT"
ENV_ROUND = "SIMHARNESS_RUN_ROUND"
#: A rank whose watchdog fired exits with this status (as coreutils' timeout).
HANG_EXIT = 124
#: Extra seconds before faulthandler's C-level backstop ends a rank that holds the GIL.
BACKSTOP_S = 30.0
#: Frames of a stuck rank's stack kept in its hang record (innermost).
STACK_FRAMES = 12


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(ENV_DIR):
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
        while True:
            with self.cond:
                while self.deadline is None or time.monotonic() < self.deadline:
                    wait = None if self.deadline is None else self.deadline - time.monotonic()
                    self.cond.wait(timeout=wait)
                info = dict(self.info)
            frame = sys._current_frames().get(self.main_ident or 0)
            # the innermost frames: the test and what it waits in (pytest's own frames cut)
            stack = _user_stack(frame) if frame is not None else ""
            self.session.write(kind="hang", stack=stack,
                               elapsed=round(time.monotonic() - info.pop("armed", 0.0), 3),
                               **info)
            os._exit(HANG_EXIT)


class RankSession:
    """The plugin object of one rank (see the module docstring)."""

    def __init__(self) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.dir = os.environ[ENV_DIR]
        self.timeout = float(os.environ.get(ENV_TIMEOUT, "120"))
        self.round = int(os.environ.get(ENV_ROUND, "0"))
        self.out = open(os.path.join(self.dir, f"rank{self.rank}.jsonl"), "a",  # noqa: SIM115
                        encoding="utf-8")
        self.stack_file = open(os.path.join(self.dir, f"stack-rank{self.rank}.txt"),  # noqa: SIM115
                               "a", encoding="utf-8")
        self.store: Any = None
        self.index: dict[str, int] = {}
        self.reports: dict[str, list[pytest.TestReport]] = {}
        self.lock = threading.Lock()  # the watchdog thread writes too
        self.watchdog = Watchdog(self)
        self.watchdog.start()

    # -- records and the store ------------------------------------------------------------
    def write(self, **record: Any) -> None:
        record.setdefault("round", self.round)
        with self.lock:
            self.out.write(json.dumps(record, default=str) + "\n")
            self.out.flush()

    def _store(self) -> Any:
        if self.store is None:
            import torch.distributed as dist  # the ranks import torch for the tests anyway

            wait = timedelta(seconds=self.timeout * 2 + 60)
            tcp = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"),
                                int(os.environ["MASTER_PORT"]), None, False, timeout=wait)
            self.store = dist.PrefixStore(f"simharness-run/{self.round}/", tcp)
        return self.store

    def barrier(self, name: str) -> None:
        """Wait until every rank reached ``name`` (a counter and a go key on the store)."""
        if self.world == 1:
            return
        store = self._store()
        if store.add(f"b/{name}", 1) == self.world:
            store.set(f"go/{name}", "1")
        else:
            store.wait([f"go/{name}"])

    # -- collection -----------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        done_file = os.environ.get(ENV_DONE)
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
        if self.world > 1:  # also with no test: the others wait for this rank's digest
            store = self._store()
            store.set(f"collect/{self.rank}", digest)
            others = {r: store.get(f"collect/{r}").decode() for r in range(self.world)}
            differ = sorted(r for r, d in others.items() if d != others[0])
            if differ:
                self.write(kind="mismatch", ranks=differ)
                raise pytest.UsageError(
                    f"ranks {differ} collected other tests than rank 0 (parametrisation or "
                    f"skip conditions that depend on the rank or on hash order)")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.write(kind="collect_error", nodeid=report.nodeid,
                       longrepr=str(report.longrepr))

    # -- one test -------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        i = self.index.get(item.nodeid, -1)
        self.watchdog.arm(self.timeout, i=i, nodeid=item.nodeid, state="waiting-to-start")
        self.barrier(f"t{i}")
        self.watchdog.arm(self.timeout, i=i, nodeid=item.nodeid, state="running")
        before = _live_groups()
        start = time.monotonic()
        yield
        _destroy_new_groups(before)
        self.watchdog.update(state="finished")  # still armed: a stuck peer is still this test
        self._record(item, time.monotonic() - start)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        rep = outcome.get_result()
        if call.excinfo is not None and call.excinfo.errisinstance(NeedsGPU):
            rep.outcome = "skipped"
            path, line = item.location[0], (item.location[1] or 0) + 1
            rep.longrepr = (str(path), line, f"{NEEDS_GPU_PREFIX}{call.excinfo.value}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.setdefault(report.nodeid, []).append(report)

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
                lr = rep.longrepr
                reason = str(lr[2] if isinstance(lr, tuple) and len(lr) == 3 else lr)
        if outcome == "skipped" and any(getattr(r, "wasxfail", None) for r in reports):
            reason = "xfail: " + reason
        self.write(kind="test", i=self.index.get(item.nodeid, -1), nodeid=item.nodeid,
                   outcome=outcome, longrepr=longrepr, reason=reason,
                   needs_gpu=outcome == "skipped" and reason.startswith(NEEDS_GPU_PREFIX),
                   duration=round(duration, 4))

    # -- the end --------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.index and int(exitstatus) in (0, 1):
            self.barrier("end")  # the watchdog stays armed: a peer stuck in the last test
        self.watchdog.disarm()
        from ..launch import gpu_shim

        shim = gpu_shim.active()
        self.write(kind="end", exitstatus=int(exitstatus), peak_rss_kib=_peak_rss_kib(),
                   shim_ignored=shim.ignored_summary() if shim is not None else [])
        if int(exitstatus) in (0, 1):
            # the verdicts are in the records; a rank ends 0 whatever its tests did, so
            # that torch's agents all succeed and none waits in the exit barrier for one
            # whose ranks "failed" (several nodes)
            session.exitstatus = 0


def _user_stack(frame: Any) -> str:
    """The innermost :data:`STACK_FRAMES` frames, pytest's and pluggy's own left out."""
    skip = ("/_pytest/", "/pluggy/", "/pytest/__main__.py", os.sep + "runpy.py", "<frozen runpy>",
            os.path.join("simharness", "launch", "rank.py"))
    frames = [f for f in traceback.extract_stack(frame) if not any(s in f.filename for s in skip)]
    return "".join(traceback.format_list(frames[-STACK_FRAMES:]))


def _digest(ids: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


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
