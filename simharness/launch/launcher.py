"""Start W ranks the way ``torchrun`` does, through torch's own elastic agent, on loopback.

:func:`launch` builds a ``torch.distributed.launcher.api.LaunchConfig`` (c10d rendezvous,
no restarts) and calls ``launch_agent`` with ``python -m simharness.launch.bootstrap [--shim]
-- TARGET``: each rank is a fresh interpreter (own string-hash seed) with the variables of
:mod:`simharness.launch.env`. One node: the rendezvous store listens on ``127.0.0.1`` on a
port the kernel picks. Several nodes (``nnodes > 1``): every agent is given the same
``rdzv_endpoint`` (``host:port``) and ``run_id``, as ``torchrun --nnodes N
--rdzv-endpoint ...`` is.

Output: each rank's stdout/stderr lines go to this process's stderr prefixed ``[rankN]:``
(torch's tee; with ``prefix_in_rank`` the rank bootstrap prefixes its own lines, see
:mod:`.output`), or only to files under ``log_dir`` when given
(``<log_dir>/<run_id>_*/attempt_0/<local rank>/stdout.log``). Without ``log_dir`` the
files live in a temporary directory removed before :func:`launch` returns. ``start_slots``
N > 0: at most N ranks run their bootstrap's imports at once (:mod:`.stagger`; the
bootstrap must take part, as ``simharness.capture.faithful_rank`` does).

SIGINT/SIGTERM/SIGHUP: torch's agent turns them into ``SignalException``, kills every
rank's process group (SIGTERM, then SIGKILL after a grace period); :func:`launch` returns a
:class:`LaunchResult` with ``signal`` set, after removing its temporary files.

>>> spec = LaunchSpec(("train.py", "--lr", "1"), nproc_per_node=2)
>>> spec.rank_command()[1:]
('-m', 'simharness.launch.bootstrap', '--shim', '--', 'train.py', '--lr', '1')
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from ..errors import SimharnessError, whole_number_problem
from .bootstrap import NEEDS_GPU_EXIT
from .output import PREFIX_ENV
from .stagger import SLOTS_ENV
from .toolbox import free_port


class LaunchError(SimharnessError, ValueError):
    """A launch that cannot start: bad sizes, endpoint or target."""


@dataclass(frozen=True)
class LaunchSpec:
    """What to start: ``target`` (``("script.py", *args)`` or ``("-m", "mod", *args)``) on
    ``nproc_per_node`` ranks on each of ``nnodes`` agents."""

    target: tuple[str, ...]
    nproc_per_node: int
    nnodes: int = 1
    rdzv_endpoint: str | None = None
    run_id: str | None = None
    shim: bool = True
    log_dir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    rdzv_timeout_s: int = 120
    python: str = sys.executable
    grace_s: int = 5
    prefix_in_rank: bool = False
    start_slots: int = 0

    def __post_init__(self):
        for name, low in (("nproc_per_node", 1), ("nnodes", 1), ("rdzv_timeout_s", 1),
                          ("grace_s", 0), ("start_slots", 0)):
            problem = whole_number_problem(name, getattr(self, name), low)
            if problem:
                raise LaunchError(problem)
        if not self.target or self.target == ("-m",):
            raise LaunchError("nothing to run: give a script (script.py ARGS) or -m module ARGS")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise LaunchError(f"nnodes {self.nnodes} needs rdzv_endpoint HOST:PORT, the same "
                              f"on every node (and the same run_id)")
        if self.rdzv_endpoint is not None:
            host, _, port = self.rdzv_endpoint.rpartition(":")
            if not host or not port.isdigit():
                raise LaunchError(f"rdzv_endpoint {self.rdzv_endpoint!r} must be HOST:PORT, "
                                  f"e.g. 127.0.0.1:29500")

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def rank_command(self) -> tuple[str, ...]:
        """The command line each rank runs."""
        shim = ("--shim",) if self.shim else ()
        return (self.python, "-m", "simharness.launch.bootstrap", *shim, "--", *self.target)


#: The signals torch's agent stops the other ranks with once one fails (SIGTERM, then
#: SIGKILL after the grace): a rank killed by one of them did not fail on its own.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGKILL)


@dataclass(frozen=True)
class RankExit:
    """One rank's end: ``exitcode`` (negative: killed by that signal; torch's agent sends
    SIGTERM to the other ranks once one fails), or None when its status was never seen;
    ``seen``: where torch's agent recorded this failure in its order (0 first; None for a
    rank that did not fail). The agent polls every 0.1 s: the ranks that failed between two
    polls are in rank order, and the ranks it then stopped come after them."""

    rank: int
    exitcode: int | None
    seen: int | None = None

    @property
    def needs_gpu(self) -> bool:
        return self.exitcode == NEEDS_GPU_EXIT

    @property
    def failed_on_its_own(self) -> bool:
        """Ended non-zero, and not by the signals the launcher stops ranks with."""
        code = self.exitcode
        return code is not None and code != 0 and -code not in STOP_SIGNALS


@dataclass(frozen=True)
class LaunchResult:
    """Per-rank exits of this node's ranks; ``signal`` when the launch was interrupted."""

    ranks: tuple[RankExit, ...]
    signal: int | None = None
    log_dir: str | None = None

    @property
    def ok(self) -> bool:
        return self.signal is None and all(r.exitcode == 0 for r in self.ranks)

    @property
    def first_failure(self) -> RankExit | None:
        """The rank that failed first on its own (torch's agent order, see
        :class:`RankExit`), else the first that ended non-zero; None when none did.

        >>> LaunchResult((RankExit(0, 1, 1), RankExit(1, -15, 2), RankExit(2, 3, 0))
        ...              ).first_failure.rank
        2
        """
        bad = [r for r in self.ranks if r.exitcode not in (0, None)]
        own = [r for r in bad if r.failed_on_its_own] or bad

        def order(r: RankExit) -> tuple[int, int]:
            return (len(self.ranks) if r.seen is None else r.seen, r.rank)
        return min(own, key=order) if own else None

    @property
    def exit_code(self) -> int:
        """0 when every rank exited 0; else 128+signal of the launch, or the status of the
        rank that failed first (the root cause, :attr:`first_failure`), 128+N for one killed
        by signal N.

        >>> LaunchResult((RankExit(0, -15), RankExit(1, 3), RankExit(2, None))).exit_code
        3
        """
        if self.signal is not None:
            return 128 + self.signal
        first = self.first_failure
        if first is not None:
            code = first.exitcode or 1
            return code if code > 0 else 128 - code
        return 0 if all(r.exitcode == 0 for r in self.ranks) else 1


# What torch's agent changes in the calling process and never puts back: it sets
# TORCHELASTIC_SIGNALS_TO_HANDLE in os.environ (torch/distributed/launcher/api.py:307, 2.13.0)
# and installs a handler for each signal that variable names (elastic/multiprocessing/api.py:
# 534-548, default SIGTERM,SIGINT,SIGHUP,SIGQUIT).
AGENT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


@contextlib.contextmanager
def _patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in os.environ (the agent hands it to every rank); afterwards the
    environment is exactly what it was, including what torch's agent set in between."""
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        if dict(os.environ) != saved:
            os.environ.clear()
            os.environ.update(saved)


@contextlib.contextmanager
def _signal_handlers_kept(names: Iterable[str] = AGENT_SIGNALS) -> Iterator[None]:
    """Put back the Python-level handler of each signal in ``names`` on the way out (main
    thread only; elsewhere torch installs none and nothing is done)."""
    sigs = [getattr(signal, n) for n in names if hasattr(signal, n)]
    old = {s: signal.getsignal(s) for s in sigs}
    try:
        yield
    finally:
        for sig, handler in old.items():
            if handler is None:  # set outside Python: cannot be put back from here
                continue
            with contextlib.suppress(ValueError, TypeError):  # not the main thread
                signal.signal(sig, handler)


@contextlib.contextmanager
def _quiet_torch_elastic() -> Iterator[None]:
    """torch's agent logs each start and failure; the caller reports those itself."""
    log = logging.getLogger("torch.distributed.elastic")
    old = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(old)


def launch(spec: LaunchSpec) -> LaunchResult:
    """Start ``spec``'s ranks of this node through torch's elastic agent; wait for them all."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import (
        ChildFailedError,
    )
    from torch.distributed.launcher.api import LaunchConfig, launch_agent

    tmp = None if spec.log_dir else tempfile.mkdtemp(prefix="simharness-launch-")
    log_dir = spec.log_dir or tmp
    run_id = spec.run_id or uuid.uuid4().hex[:12]
    endpoint = spec.rdzv_endpoint or f"127.0.0.1:{free_port()}"
    env = dict(spec.env)
    in_rank = spec.prefix_in_rank and not spec.log_dir
    if in_rank:  # the rank prefixes its own lines (see .output); the agent tails nothing
        env[PREFIX_ENV] = "1"
    slots = tempfile.mkdtemp(prefix="simharness-slots-") if spec.start_slots else None
    if slots:  # at most start_slots ranks import at once (see .stagger)
        env[SLOTS_ENV] = f"{slots}:{spec.start_slots}"
    tee = Std.NONE if spec.log_dir or in_rank else Std.ALL
    config = LaunchConfig(
        min_nodes=spec.nnodes, max_nodes=spec.nnodes, nproc_per_node=spec.nproc_per_node,
        run_id=run_id, rdzv_backend="c10d", rdzv_endpoint=endpoint,
        rdzv_configs={"timeout": spec.rdzv_timeout_s}, max_restarts=0, monitor_interval=0.1,
        local_addr=_local_addr(spec, endpoint),
        log_line_prefix_template=None if spec.log_dir or in_rank else "[rank${rank}]:",
        logs_specs=DefaultLogsSpecs(log_dir=log_dir, redirects=Std.NONE if in_rank else Std.ALL,
                                    tee=tee),
        shutdown_timeout=spec.grace_s)
    if spec.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
        env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does (torch/distributed/run.py:872)
    command = spec.rank_command()
    try:
        with _signal_handlers_kept(), _patched_environ(env), _quiet_torch_elastic():
            try:
                values = launch_agent(config, command[0], list(command[1:]))
                ranks = tuple(RankExit(r, 0) for r in sorted(values))
                return LaunchResult(ranks, None, spec.log_dir)
            except ChildFailedError as exc:
                return LaunchResult(_exits(spec, exc.failures), None, spec.log_dir)
            except SignalException as exc:
                return LaunchResult((), int(exc.sigval), spec.log_dir)
    finally:
        for folder in (tmp, slots):
            if folder:
                shutil.rmtree(folder, ignore_errors=True)


def _local_addr(spec: LaunchSpec, endpoint: str) -> str | None:
    """127.0.0.1 for one node or a loopback rendezvous (agents on one machine); else None,
    so torch names this node by its host name, as torchrun does."""
    host = endpoint.rpartition(":")[0].strip("[]")
    return "127.0.0.1" if spec.nnodes == 1 or host in ("127.0.0.1", "localhost", "::1") else None


def _exits(spec: LaunchSpec, failures: Mapping[int, object]) -> tuple[RankExit, ...]:
    """Exits from torch's failures, in the order the agent recorded them (``seen``); on one
    node, the other ranks are None (stopped)."""
    codes = {rank: int(getattr(f, "exitcode", 1)) for rank, f in failures.items()}
    seen = {rank: n for n, rank in enumerate(failures)}
    ranks = range(spec.world_size) if spec.nnodes == 1 else sorted(codes)
    return tuple(RankExit(r, codes.get(r), seen.get(r)) for r in ranks)
