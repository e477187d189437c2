"""The capture worker: one rank of a faithful capture.

``python -m simharness.capture.faithful_rank [OPTIONS] -- TARGET``, published as ``python -m
simharness.capture.rank`` (the same entry, kept as that name).

TARGET is ``script.py ARGS`` or ``-m module ARGS``. The rank is its own interpreter started
the way torchrun starts one (``simharness capture`` starts them through torch's elastic
agent, :mod:`simharness.launch.launcher`; it also runs under a plain ``torchrun`` or
``srun``). Before the target runs, the rank

* installs the GPU shim (:mod:`simharness.launch.gpu_shim`, unless ``--no-shim``): the
  CUDA device calls are answered per local rank, NCCL becomes gloo, ``TORCH_GLOO_LAZY_INIT=1``
  (a pair of ranks connects only when the script first uses it: a world of 64 ranks would
  otherwise connect 2016 pairs before the script's first line); CUDA tensors live on
  CPU for data movement only, and compute on one stops the rank
  (:mod:`simharness.launch.cuda_origin`);
* wraps ``init_process_group``, ``new_group`` and ``split_group`` (every name bound to them,
  so ``new_subgroups*`` and ``init_device_mesh`` are seen too) to record each call
  (:class:`~simharness.capture.record.GroupCall`) and then make it for real: the default
  group is real gloo over the loopback store, so collectives return real data; a gloo
  subgroup gets its real communicator when the script first runs a collective on it
  (:mod:`.lazy_group`; ``SIMHARNESS_EAGER_SUBGROUPS=1`` connects each at creation);
* starts a watchdog: once every other rank has written its record, a rank still running
  after ``--grace`` seconds (or any rank after ``--timeout``) writes its main thread's
  stack into its record and exits.

At the end (also on failure, SIGTERM or SIGINT) the rank writes ``rank-NNNNN.json`` into
``--out-dir`` (:mod:`.merge`); ``simharness capture --merge DIR`` checks a directory of
them. With ``--via-store`` the record goes to rank 0 through torchrun's c10d store instead
(:mod:`.store_route`): rank 0 writes every record and the merged ``capture.json`` into its
own ``--out-dir``, so the nodes need no shared folder. Exit status: 0 when the target
finished, 1 when it failed, 3 when stuck, 143/130 when stopped.

Started by ``simharness capture``, the rank also prefixes its own output ``[rankN]:``
(:mod:`simharness.launch.output`) and waits for a start slot before importing torch
(:mod:`simharness.launch.stagger`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from .. import envvars
from ..launch.toolbox import thread_stack
from .merge import rank_record, record_name, write_record
from .record import FAILED, OK, STOPPED, TIMEOUT, GetterSpec
from .stall import BLOCKED, HOLD_S, STALL_S, Stall


def _dist_dir() -> str:
    """torch.distributed's own folder: a main thread with a frame in it is in a collective,
    a barrier or a group being connected (called once torch is imported)."""
    import torch.distributed as dist

    return os.path.join(os.path.dirname(os.path.abspath(dist.__file__)), "")

EXIT_FAILED, EXIT_STUCK = 1, 3
#: ``SIMHARNESS_EAGER_SUBGROUPS=1``: connect every gloo subgroup at creation, as before
#: :mod:`.lazy_group` (for comparing the two).
EAGER_ENV = "SIMHARNESS_EAGER_SUBGROUPS"
DEFAULT_GRACE_S = 5.0
DEFAULT_STORE_WAIT_S = 300.0
#: Seconds rank 0 waits for the others' records when it ends early under ``--via-store``
#: (stopped, or blocked on diverged calls: the others are too, and hand theirs off at once).
EARLY_WAIT_S = 15.0
_POLL_S = 0.2
_DRAIN: list[Any] = [None]   # prefix_output's drain, when this rank prefixes its output


def drain_output() -> None:
    """Write out what the output thread still holds (see :mod:`simharness.launch.output`)."""
    if _DRAIN[0] is not None:
        _DRAIN[0]()


_REAL_EXIT = os._exit   # the script's os._exit is wrapped (install_exit_hook)


def exit_now(status: int) -> None:
    """``os._exit`` after draining the prefixed output and ending the processes the script
    started (:mod:`.children`)."""
    try:
        from ..launch.children import end_descendants

        end_descendants(wait_s=0.5)
    finally:
        drain_output()
        _REAL_EXIT(status)


def install_exit_hook(run: RankRun) -> None:
    """The script's ``os._exit(N)`` writes this rank's record first (status ok for 0 once
    ``init_process_group`` was called, else failed), so a rank that leaves that way is
    neither lost nor silently missing. A process the script forked keeps the plain one."""
    pid = os.getpid()

    def script_exit(status: int) -> None:
        if os.getpid() == pid:
            from .runtime import where_text

            where = where_text([(f.filename, f.lineno, f.name) for f in
                                reversed(traceback.extract_stack(sys._getframe(1)))])
            if status == 0 and run.rec.init.get("calls"):
                run.write(OK)
            else:
                run.write(FAILED, {"kind": "exit", "message": f"the code ended the process "
                                   f"with os._exit({status})", "where": where,
                                   "calls_before": len(run.rec.calls)})
            run.end_early(status, run.store_wait)
        _REAL_EXIT(status)

    os._exit = script_exit  # type: ignore[assignment]  # writes the record, then exits


def parse(argv: list[str]) -> argparse.Namespace:
    """Options, then ``--`` and the target.

    >>> a = parse(["--out-dir", "d", "--", "init.py", "--tp", "2"])
    >>> a.out_dir, a.target
    ('d', ['init.py', '--tp', '2'])
    """
    if "--" not in argv:
        raise SystemExit("error: missing `--` before the target: python -m "
                         "simharness.capture.rank --out-dir DIR -- script.py ARGS")
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="python -m simharness.capture.rank")
    p.add_argument("--out-dir", default=envvars.read("SIMHARNESS_CAPTURE_DIR") or ".",
                   help="where rank-NNNNN.json is written (shared across nodes)")
    p.add_argument("--timeout", type=float, default=None, help="seconds this rank may run")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE_S,
                   help="seconds a rank may run on once every other rank has finished")
    p.add_argument("--getter", action="append", default=[], metavar="MODULE:NAME(ARGS)")
    p.add_argument("--no-shim", action="store_true", help="leave torch.cuda and NCCL alone")
    p.add_argument("--via-store", action="store_true",
                   help="hand the record to rank 0 through torchrun's c10d store "
                        "(MASTER_ADDR:MASTER_PORT); rank 0 writes every record and the merged "
                        "capture (capture.json) into its --out-dir: no shared folder needed")
    p.add_argument("--store-wait", type=float, default=DEFAULT_STORE_WAIT_S,
                   help="seconds rank 0 waits for the other ranks' records (--via-store)")
    p.add_argument("--fake", action="store_true",
                   help="record under torch's fake backend, as --fast does, without the other "
                        "ranks (the cross-check of --fast: this rank alone, in its own "
                        "interpreter)")
    ns = p.parse_args(argv[:cut])
    ns.target = argv[cut + 1:]
    if not ns.target or ns.target == ["-m"]:
        raise SystemExit("error: no target after `--`: give script.py ARGS or -m module ARGS")
    return ns


class RankRun:
    """The recording of this rank and the writing of its record (once)."""

    def __init__(self, out_dir: str, rank: int, world: int, getters: tuple[GetterSpec, ...],
                 route: Any = None, store_wait: float = DEFAULT_STORE_WAIT_S):
        from .runtime import Recorder

        self.out_dir, self.rank, self.world, self.getters = out_dir, rank, world, getters
        self.route = route  # a StoreRoute (--via-store), else records go into out_dir
        self.rec = Recorder(rank, world, skip_non_members=False)
        self.lock = threading.Lock()
        self.written = False
        self.t0 = time.monotonic()
        self.main_ident = threading.get_ident()
        # blocked ranks' partial records (.stall): in the shared out_dir, else on the store
        self.stall = Stall(out_dir, rank, world, board=route)
        self.store_wait = store_wait

    # --------------------------------------------------------------- record
    def write(self, status: str, error: dict[str, Any] | None = None,
              getters: dict[str, Any] | None = None) -> bool:
        """Write the record unless already written; returns whether this call wrote it."""
        from .runtime import finish_calls

        with self.lock:
            if self.written:
                return False
            self.written = True
            import resource

            record = rank_record(
                self.rank, self.world, status, finish_calls(list(self.rec.calls)),
                getters=getters, init=self.rec.init, error=error, host=socket.gethostname(),
                pid=os.getpid(), elapsed_s=round(time.monotonic() - self.t0, 3),
                peak_rss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                hash_seed=os.environ.get("PYTHONHASHSEED"))
            if self.route is not None:
                try:
                    self.route.hand_off(record)
                    if self.stall is not None:
                        self.stall.clear()
                    return True
                except Exception as exc:  # noqa: BLE001 - the record is kept locally instead
                    print(f"simharness capture: rank {self.rank} could not hand its record to "
                          f"the store ({type(exc).__name__}: {exc}); writing it into "
                          f"{self.out_dir}", file=sys.stderr)
            os.makedirs(self.out_dir, exist_ok=True)
            write_record(self.out_dir, record)
            if self.stall is not None:
                self.stall.clear()
            return True

    def collect(self, wait_s: float) -> None:
        """Rank 0 under ``--via-store``: every record the other ranks hand off within
        ``wait_s`` and the merged capture, into ``out_dir`` (:meth:`StoreRoute.collect`)."""
        if self.route is None or self.rank != 0:
            return
        path = self.route.collect(self.out_dir, wait_s)
        print(f"simharness capture: the ranks' records and the merged capture are in {path}",
              file=sys.stderr)

    def end_early(self, status: int, wait_s: float = EARLY_WAIT_S) -> None:
        """End the rank now, its record written; rank 0 under ``--via-store`` first collects
        the records (the others, blocked or stopped too, hand theirs off at once; torchrun's
        agent ends the ranks it stops a while later)."""
        with contextlib.suppress(Exception):  # a store gone: the record went to out_dir
            self.collect(min(wait_s, self.store_wait))
        exit_now(status)

    def main_stack(self) -> list[str]:
        from .runtime import where_text

        stack = thread_stack(self.main_ident)
        return where_text([(f.filename, f.lineno, f.name) for f in reversed(stack)])

    # -------------------------------------------------------------- watchdog
    def watch(self, timeout: float | None, grace: float) -> None:
        """A daemon thread: names this rank stuck (its stack) and ends the process."""
        others = {record_name(r) for r in range(self.world) if r != self.rank}

        def all_others_written() -> bool:  # one directory read, not one stat per rank
            try:
                if self.route is not None:
                    return bool(self.route.handed_off() >= self.world - 1)
                return others <= set(os.listdir(self.out_dir))
            except Exception:  # noqa: BLE001 - an unreadable folder or store: not yet
                return False

        stall = self.stall
        seen = [0, time.monotonic()]   # calls, when that count was first seen

        def loop() -> None:
            all_done_at = None
            while not self.written:
                time.sleep(_POLL_S)
                now = time.monotonic()
                blocked = stall is not None and self._blocked(stall, seen, now)
                if timeout is not None and now - self.t0 > timeout:
                    msg = f"rank {self.rank} did not finish within {timeout:g} s"
                elif blocked and stall is not None and stall.diverged_for(now) > min(grace, HOLD_S):
                    if self.write(TIMEOUT, {
                            "kind": BLOCKED, "message": f"rank {self.rank} was blocked in "
                            f"torch.distributed for {now - seen[1]:.0f} s, and so was every "
                            f"rank still running, while the ranks' new_group calls differ "
                            f"(the capture's findings name the first difference)",
                            "where": self.main_stack(), "calls_before": len(self.rec.calls)}):
                        self.end_early(EXIT_STUCK)
                    return
                elif all_done_at is None:
                    if others and all_others_written():
                        all_done_at = now
                    continue
                elif now - all_done_at > grace:
                    msg = (f"rank {self.rank} was still running {grace:g} s after every other "
                           f"rank had finished")
                else:
                    continue
                if self.write(TIMEOUT, {"kind": "timeout", "message": msg,
                                        "where": self.main_stack(),
                                        "calls_before": len(self.rec.calls)}):
                    self.end_early(EXIT_STUCK)
                return

        threading.Thread(target=loop, name="simharness-capture-watchdog", daemon=True).start()

    def _blocked(self, stall: Stall, seen: list, now: float) -> bool:
        """Whether the main thread has been inside torch.distributed, with no new
        new_group call, for STALL_S seconds; writes (or removes) the partial record."""
        n = len(self.rec.calls)
        if n != seen[0]:
            seen[0], seen[1] = n, now
            stall.clear()
            return False
        if now - seen[1] < STALL_S:
            return False
        if "torch.distributed" not in sys.modules:
            return False
        where = _dist_dir()
        inside = any(os.path.abspath(f.filename).startswith(where)
                     for f in thread_stack(self.main_ident))
        if not inside:
            stall.clear()
            seen[1] = now
            return False
        if not stall.written:
            from .runtime import finish_calls

            with self.lock:
                if self.written:
                    return False
                stall.write(rank_record(
                    self.rank, self.world, "running", finish_calls(list(self.rec.calls)),
                    error={"kind": BLOCKED, "where": self.main_stack()}, pid=os.getpid()))
        return True

    def on_signal(self, signum: int, frame: Any) -> None:
        from .runtime import where_text

        stack = where_text([(f.filename, f.lineno, f.name)
                            for f in reversed(traceback.extract_stack(frame))])
        name = signal.Signals(signum).name
        self.write(STOPPED, {"kind": "stopped", "message": f"stopped by {name} before it "
                             f"finished", "where": stack, "calls_before": len(self.rec.calls)})
        self.end_early(128 + signum)


# ------------------------------------------------------------------ recording
def install_recorder(run: RankRun) -> None:
    """Wrap the current ``init_process_group``/``new_group``/``split_group`` (the shim's,
    when installed) in every loaded module that binds them."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from .runtime import _intern, _interned_ranks, call_stack, stack_text

    rec = run.rec
    lazy = (contextlib.nullcontext if envvars.read(EAGER_ENV)
            else _lazy_subgroups())
    orig_init, orig_new = c10d.init_process_group, c10d.new_group
    orig_split = getattr(c10d, "split_group", None)

    def record(ranks, desc, backend, local, pg_options, kwargs, pg, depth: int = 2):
        ranks_t = None if ranks is None else _interned_ranks(tuple(map(int, ranks)),
                                                             run.world)[0]
        member = ranks_t is None or run.rank in ranks_t
        name = getattr(pg, "group_name", None) if member and pg is not None else None
        if member and pg is not None:
            rec.pg_index[id(pg)] = len(rec.calls)
        opts = None if pg_options is None else type(pg_options).__name__
        rec.calls.append((ranks_t, desc, None if backend is None else str(backend), bool(local),
                          opts, name, _intern(call_stack(sys._getframe(depth))),
                          kwargs.get("sort_ranks", True) is False))

    def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
                  use_local_synchronization=False, group_desc=None, device_id=None, **kwargs):
        extra = dict(kwargs)
        if device_id is not None:
            extra["device_id"] = device_id
        count = c10d._world.group_count
        with lazy():
            pg = orig_new(ranks=ranks, timeout=timeout, backend=backend, pg_options=pg_options,
                          use_local_synchronization=use_local_synchronization,
                          group_desc=group_desc, **extra)
        record(ranks, group_desc, backend, use_local_synchronization, pg_options, kwargs, pg)
        if rec.calls[-1][5] is None and not use_local_synchronization:
            last = rec.calls[-1]
            rec.calls[-1] = (*last[:5], str(count), *last[6:])  # torch's name for the group
        return pg

    def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None,
                    group_desc=None, **kwargs):
        assert orig_split is not None  # only installed where torch has split_group
        with lazy():
            pg = orig_split(parent_pg=parent_pg, split_ranks=split_ranks, timeout=timeout,
                            pg_options=pg_options, group_desc=group_desc, **kwargs)
        parent = parent_pg or c10d._get_default_group()
        world = parent is c10d._get_default_group()
        for split in split_ranks or ():
            ranks = [dist.get_global_rank(parent, r) for r in split] if not world else split
            mine = pg if pg is not None and run.rank in ranks else None
            record(ranks, group_desc, None, not world, pg_options, {}, mine)
        return pg

    def init_process_group(backend=None, init_method=None, *args, **kwargs):
        site = stack_text(call_stack(sys._getframe(1), 1))
        rec.init.setdefault("calls", []).append({
            "backend": None if backend is None else str(backend), "init_method": init_method,
            "device_id": None if kwargs.get("device_id") is None else str(kwargs["device_id"]),
            "site": site[0] if site else "?"})
        return orig_init(backend, init_method, *args, **kwargs)

    swaps: dict[int, Any] = {id(orig_init): init_process_group, id(orig_new): new_group}
    if orig_split is not None:
        swaps[id(orig_split)] = split_group
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict):
            continue
        for key in ("init_process_group", "new_group", "split_group"):
            v = d.get(key)
            if v is not None and id(v) in swaps:
                d[key] = swaps[id(v)]


def _lazy_subgroups() -> Any:
    from ..launch.lazy_group import lazy_gloo_subgroups

    return lazy_gloo_subgroups


# ----------------------------------------------------------------------- main
def _classify(exc: BaseException, run: RankRun) -> dict[str, Any]:
    from ..errors import needs_gpu_message
    from .runtime import _classify as classify

    out = classify(exc, run.rec)
    stop = needs_gpu_message(exc)
    if stop is not None:  # its own line names the call, the script line and why
        out["kind"], out["message"] = "gpu-only", stop
    elif isinstance(exc, ImportError):
        out["kind"] = "import"
    elif out["kind"] == "gpu-only":  # the shim answers the GPU calls: a plain failure
        out["kind"] = "exception"
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry of ``python -m simharness.capture.rank``; returns the exit status."""
    from ..launch.bootstrap import RankArgs, run_target
    from ..launch.env import RankEnv, slurm_environ
    from ..launch.output import PREFIX_ENV, prefix_output
    from ..launch.stagger import SLOTS_ENV, start_slot

    ns = parse(sys.argv[1:] if argv is None else argv)
    from ..launch.children import become_subreaper

    become_subreaper()  # orphans of the script's processes stay in this rank's tree
    os.environ.update(slurm_environ(os.environ))
    if envvars.read(PREFIX_ENV) and _DRAIN[0] is None:
        _DRAIN[0] = prefix_output(f"[rank{os.environ.get('RANK', '?')}]:")
    env = RankEnv.from_environ(os.environ)
    if not ns.via_store:
        os.makedirs(ns.out_dir, exist_ok=True)
    target = ns.target
    rank_args = (RankArgs(not ns.no_shim, target[1], None, tuple(target[2:]))
                 if target[0] == "-m" else RankArgs(not ns.no_shim, None, target[0],
                                                    tuple(target[1:])))
    specs = tuple(GetterSpec.parse(g) for g in ns.getter)
    if ns.fake:
        return _main_fake(ns, rank_args, env, specs)
    early = _stopped_early(ns.out_dir, env.rank, env.world_size)
    for sig in (signal.SIGTERM, signal.SIGINT):  # until RankRun's own handler replaces it
        signal.signal(sig, early)
    release = start_slot(envvars.read(SLOTS_ENV), env.rank)  # before torch is imported
    route = None
    if ns.via_store:
        from .record import CaptureError
        from .store_route import StoreRoute

        try:
            route = StoreRoute(os.environ, env.rank, env.world_size)
        except CaptureError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    run = RankRun(ns.out_dir, env.rank, env.world_size, specs, route, ns.store_wait)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, run.on_signal)
    run.watch(ns.timeout, ns.grace)
    install_exit_hook(run)
    status, error, namespace = OK, None, None
    try:
        _prepare(rank_args, env)
        install_recorder(run)
        release()
        namespace = run_target_namespace(rank_args, run_target)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            status = FAILED
            error = {"kind": "exit", "message": f"the code exited with status {exc.code}",
                     "where": _tb_where(exc), "calls_before": len(run.rec.calls)}
    except BaseException as exc:  # noqa: BLE001 - reported in the record
        status, error = FAILED, _classify(exc, run)
    if status == OK and not run.rec.init.get("calls"):
        # Whether init_process_group was ever called (the recorder saw it), not whether the
        # default group is still up: a script that ends with destroy_process_group is clean.
        status = FAILED
        error = {"kind": "no-init", "message": "the code finished without calling "
                 "torch.distributed.init_process_group", "where": [],
                 "calls_before": len(run.rec.calls)}
    getters = {}
    if status == OK and specs:
        from .runtime import read_getter

        getters = {g.text: read_getter(g, namespace, run.rec) for g in specs}
    run.write(status, error, getters)
    run.collect(ns.store_wait)
    return 0 if status == OK else EXIT_FAILED


def _stopped_early(out_dir: str, rank: int, world: int) -> Any:
    """A signal handler for the start (before torch is imported and the recorder exists):
    the record says the rank was stopped before the script ran."""

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        try:
            os.makedirs(out_dir, exist_ok=True)
            write_record(out_dir, rank_record(
                rank, world, STOPPED, [], error={
                    "kind": "stopped", "message": f"stopped by {name} while starting, before "
                    f"the script ran", "where": [], "calls_before": 0},
                host=socket.gethostname(), pid=os.getpid()))
        finally:
            exit_now(128 + signum)

    return handler


def _main_fake(ns: argparse.Namespace, rank_args: Any, env: Any,
               specs: tuple[GetterSpec, ...]) -> int:
    """This rank alone under the fake backend, recorded as ``--fast`` records it."""
    import runpy

    from .inprocess import _imports_of, preimport
    from .runtime import Job, accelerate_megatron, finish_calls, install_patches, run_rank

    if rank_args.script is not None:
        path = os.path.abspath(rank_args.script)
        sys.path[0] = os.path.dirname(path)
        argv: tuple[str, ...] = (rank_args.script, *rank_args.args)
        # As --fast does: third-party imports first (this rank's environment is already
        # set), so Megatron's pure helpers can be memoised; the script's own modules not.
        with open(path, encoding="utf-8") as fh:
            preimport(_imports_of(fh.read(), path), local=(os.path.dirname(path),))

        def target() -> Any:
            return runpy.run_path(path, run_name="__main__")
    else:
        module = rank_args.module
        argv = (module, *rank_args.args)

        def target() -> Any:
            return runpy.run_module(module, run_name="__main__", alter_sys=True)
    install_patches()
    accelerate_megatron()
    t0 = time.monotonic()
    job = Job(env.world_size, target, False, specs, True, argv, env.local_world_size)
    out = run_rank(job, env.rank, None)
    write_record(ns.out_dir, rank_record(
        env.rank, env.world_size, out["status"], finish_calls(out["calls"]),
        getters=out.get("getters"), init=out.get("init"), error=out.get("error"),
        host=socket.gethostname(), pid=os.getpid(),
        elapsed_s=round(time.monotonic() - t0, 3)))
    return 0 if out["status"] == OK else EXIT_FAILED


def _prepare(rank_args: Any, env: Any) -> None:
    """The bootstrap's checks and the shim (:func:`simharness.launch.bootstrap.prepare`): tensors
    put on a CUDA device land on CPU and may be moved, copied and communicated; computing on
    one (:mod:`simharness.launch.cuda_origin`) and what truly needs a GPU (streams, events,
    device properties) is a :class:`~simharness.errors.NeedsGPU` naming the script line."""
    import dataclasses

    from ..launch.bootstrap import prepare

    prepare(dataclasses.replace(rank_args, compute_stops=True, lazy_gloo=True))


def _tb_where(exc: BaseException) -> list[str]:
    from .runtime import traceback_where

    return traceback_where(exc.__traceback__)


def run_target_namespace(rank_args: Any, run_target: Any) -> dict[str, Any] | None:
    """Run the target as ``__main__``; its globals, for ``__main__:NAME`` getters."""
    import runpy

    if rank_args.script is None:
        return run_target(rank_args)
    sys.argv = [rank_args.script, *rank_args.args]
    sys.path[0] = os.path.dirname(os.path.abspath(rank_args.script))
    return runpy.run_path(rank_args.script, run_name="__main__")


def finish(status: int) -> None:
    """End the rank once its record is written: the ``atexit`` handlers run and the output
    is flushed, but not the interpreter's teardown of torch's modules and objects (about
    0.3 CPU-seconds per rank, 20 at world 64, for nothing the capture needs)."""
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        exit_now(status)


if __name__ == "__main__":
    finish(main())
