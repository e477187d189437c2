"""One replay rank: create the groups, verify them, probe overlap, gather the results.

:func:`run_rank` is shared by the replay controller (``simharness replay``, which
forks the ranks) and the torchrun entry point::

    torchrun --nnodes 2 --nproc-per-node 8 ... -m simharness.replay.worker --plan plan.json

which reads the standard torchrun environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); rank 0 prints the summary
and writes ``--report``. Every rank exits 0 only when everything matched.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..layout import Layout
from ..live.verify import (
    MAX_RECORDED,
    all_gather_checks,
    all_gather_ranks,
    compare_getters,
    is_group,
    megatron_communicators,
    membership_mismatches,
    mismatch,
)
from .options import (
    BACKENDS,
    ENGINES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    OOM_FAULT_CAP,
    Fault,
    ReplayOptions,
    parse_bytes,
)

PHASES = ("start", "init", "create", "verify", "probe", "gather", "done")
PROGRESS_KEY = "simharness/progress/{}"
PROBE_TWIN_DESC = "SIMHARNESS_OVERLAP_PROBE_AG"


class ReplayFault(RuntimeError):
    """A collective or group creation that failed; ``context`` names the group and ranks."""

    def __init__(self, message: str, context: dict[str, Any]):
        super().__init__(message)
        self.context = context


class Progress:
    """Each rank's position, kept in the store.

    A rank whose collective times out reads its peers' positions to name the
    ranks that never arrived. Positions are ``(phase, index)``; a rank marks
    ``(phase, index)`` right before it enters the collective of that step.
    """

    def __init__(self, store: Any, rank: int):
        self.store = store
        self.rank = rank
        self.current = ("start", 0)

    def set(self, phase: str, index: int = 0) -> None:
        self.current = (phase, index)
        if self.store is None:
            return
        with contextlib.suppress(Exception):  # progress is best effort
            self.store.set(PROGRESS_KEY.format(self.rank), f"{PHASES.index(phase)}:{index}")

    def read(self, ranks) -> dict[int, tuple[int, int] | None]:
        out: dict[int, tuple[int, int] | None] = {}
        for r in ranks:
            key = PROGRESS_KEY.format(r)
            try:
                if not self.store.check([key]):
                    out[r] = None
                    continue
                p, i = self.store.get(key).decode().split(":")
                out[r] = (int(p), int(i))
            except Exception:  # noqa: BLE001
                out[r] = None
        return out

    def not_arrived(self, ranks, phase: str, index: int = 0) -> list[int]:
        if self.store is None:
            return []
        want = (PHASES.index(phase), index)
        return [r for r, pos in self.read(ranks).items() if pos is None or pos < want]

    @staticmethod
    def describe(pos: tuple[int, int] | None) -> str:
        if pos is None:
            return "not started"
        return f"{PHASES[pos[0]]} {pos[1]}"


@dataclass
class Created:
    """One group this rank is in, as created."""

    index: int          # position in the creation order
    kind: str
    group: int          # group number within the kind
    desc: str
    ranks: tuple        # the plan's (Megatron's) order
    backend: str        # the plan's backend
    used: str           # the backend created
    pg: Any


def _fault(fault: Fault | None, rank: int, phase: str) -> None:
    if fault is None or fault.rank != rank or fault.phase != phase:
        return
    if fault.action == "exit":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(Fault.EXIT_CODE)
    if fault.action == "hang":
        while True:
            time.sleep(3600)
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.action == "oom":
        hog: list[bytearray] = []
        while len(hog) < OOM_FAULT_CAP >> 24:
            hog.append(bytearray(1 << 24))  # 16 MiB at a time: MemoryError at the limit
        raise RuntimeError(f"injected fault on rank {rank} at {phase}: allocated "
                           f"{len(hog) << 24} bytes and no memory limit stopped it")
    raise RuntimeError(f"injected fault on rank {rank} at {phase}")


def _where(c: Created) -> str:
    return f"{c.kind} group {c.group} ({c.desc}) {list(c.ranks)}"


def create_from_plan(layout: Layout, rank: int, opts: ReplayOptions,
                     progress: Progress) -> tuple[list[Created], list[dict]]:
    """``new_group`` for every group of the plan, in order, on every rank."""
    bmap = opts.backend_map()
    timeout = timedelta(seconds=opts.timeout)
    created: list[Created] = []
    mism: list[dict] = []
    counters: dict[str, int] = {}
    W = layout.world_size
    for i, gc in enumerate(layout.creation_order):
        g = counters.get(gc.kind, 0)
        counters[gc.kind] = g + 1
        used = bmap.get(gc.backend, opts.backend)
        progress.set("create", i)
        try:
            pg = dist.new_group(ranks=list(gc.ranks), backend=used, timeout=timeout,
                                group_desc=gc.desc)
        except Exception as exc:  # noqa: BLE001
            missing = progress.not_arrived(range(W), "create", i)
            raise ReplayFault(
                f"creating {gc.kind} group {g} ({gc.desc}) {list(gc.ranks)} (new_group call {i}) "
                f"failed on rank {rank}: {_short(exc)}",
                {"phase": "create", "index": i, "kind": gc.kind, "group": g, "desc": gc.desc,
                 "ranks": list(gc.ranks), "missing_ranks": missing,
                 "op": "new_group"}) from exc
        if rank in gc.ranks:
            created.append(Created(i, gc.kind, g, gc.desc, tuple(gc.ranks), gc.backend, used, pg))
        elif is_group(pg):
            mism.append(mismatch("membership", rank, f"{gc.kind} group {g} ({gc.desc}) "
                                 f"{list(gc.ranks)}: torch made this non-member rank a member.",
                                 kind=gc.kind, group=g, desc=gc.desc, expected=list(gc.ranks)))
    return created, mism


def created_from_log(layout: Layout, log: list, aligned: bool) -> list[Created]:
    """The groups Megatron created that this rank is in, named by the plan when aligned."""
    out = []
    plan = layout.creation_order
    counters: dict[str, int] = {}
    names = []
    if aligned:
        for gc in plan:
            g = counters.get(gc.kind, 0)
            counters[gc.kind] = g + 1
            names.append((gc.kind, g, gc.backend))
    for e in log:
        if e.pg is None:
            continue
        if aligned:
            kind, g, backend = names[e.index]
        else:
            kind, g, backend = f"megatron:{e.desc}", e.index, e.backend or "nccl"
        out.append(Created(e.index, kind, g, e.desc or "", tuple(e.ranks), backend, e.used, e.pg))
    return out


def verify_created(created: list[Created], rank: int, device: torch.device,
                   progress: Progress) -> dict[str, Any]:
    """Membership of every group this rank is in, then one all-gather per group.

    The all-gathers are issued asynchronously in creation order (each group
    has its own communicator, so they cannot deadlock) and then waited for.
    """
    mism: list[dict] = []
    works = []
    by_kind: dict[str, list[int]] = {}
    for c in created:
        by_kind.setdefault(c.kind, [0, 0])[0] += 1
        bad = membership_mismatches(rank, c.kind, c.group, c.desc, c.ranks, c.pg)
        mism.extend(bad)
        if any(b["check"] == "membership" for b in bad):
            continue
        work, out = all_gather_ranks(c.pg, rank, device if c.used != "gloo" else
                                     torch.device("cpu"))
        works.append((c, work, out, not bad))
    progress.set("verify", 1)
    verified = 0
    for c, work, out, clean in works:
        try:
            work.wait()
        except Exception as exc:  # noqa: BLE001
            missing = progress.not_arrived(c.ranks, "verify", 1)
            raise ReplayFault(
                f"collective all_gather on {_where(c)} did not complete on rank {rank}: "
                f"{_short(exc)}",
                {"phase": "verify", "index": c.index, "kind": c.kind, "group": c.group,
                 "desc": c.desc, "ranks": list(c.ranks), "missing_ranks": missing,
                 "op": "all_gather"}) from exc
        got = [int(x) for x in out.tolist()]
        want = sorted(int(r) for r in c.ranks)
        if got != want:
            mism.append(mismatch("collective", rank, f"{_where(c)}: all_gather of global ranks "
                                 f"returned {got}, expected {want} (group-rank order).",
                                 kind=c.kind, group=c.group, desc=c.desc, expected=want,
                                 actual=got))
        elif clean:
            verified += 1
            by_kind[c.kind][1] += 1
    return {"memberships": len(created), "verified": verified, "collectives": len(works),
            "by_kind": by_kind, "mismatches": mism}


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def _probe_groups(layout: Layout, rank: int, opts: ReplayOptions, group_of, progress: Progress):
    """(reduce-scatter group, all-gather group, label); twins are created when the option is off."""
    rs = group_of("dp_cp")
    if layout.has("dp_cp_ag"):
        return rs, group_of("dp_cp_ag"), "dp_cp_ag"
    progress.set("probe", 1)
    backend = opts.backend_map()["nccl"]
    twin = None
    timeout = timedelta(seconds=opts.timeout)
    for row in layout.groups("dp_cp").tolist():
        try:
            pg = dist.new_group(ranks=row, backend=backend, timeout=timeout,
                                group_desc=PROBE_TWIN_DESC)
        except Exception as exc:  # noqa: BLE001
            raise ReplayFault(f"creating the probe's all-gather twin of dp_cp {row} failed on "
                              f"rank {rank}: {_short(exc)}",
                              {"phase": "probe", "kind": "probe_twin", "ranks": row,
                               "missing_ranks": progress.not_arrived(range(layout.world_size),
                                                                     "probe", 1),
                               "op": "new_group"}) from exc
        if rank in row:
            twin = pg
    return rs, twin, "probe twin"


def run_rank(layout: Layout, opts: ReplayOptions, *, rank: int, world_size: int,
             init: Callable[[], None], store: Any = None,
             device: torch.device | None = None) -> list[dict[str, Any]]:
    """Replay on this rank; returns every rank's result (after ``all_gather_object``)."""
    fault = opts.fault_spec
    T: dict[str, float] = {"start": time.time()}
    progress = init_rank(opts, rank, world_size, init, store)
    T["init"] = time.time()
    if device is None:
        device = (torch.device("cuda", torch.cuda.current_device()) if opts.backend == "nccl"
                  else torch.device("cpu"))
    result: dict[str, Any] = {"rank": rank, "pid": os.getpid(), "host": socket.gethostname(),
                              "engine": opts.engine}
    mism: list[dict] = []

    # 1. Create the groups.
    progress.set("create", 0)
    _fault(fault, rank, "create")
    ps = None
    megatron_info: dict[str, Any] = {}
    if opts.engine == "plan":
        created, bad = create_from_plan(layout, rank, opts, progress)
        calls = len(layout.creation_order)
    else:
        ps, created, bad, calls, megatron_info = _create_with_megatron(layout, rank, opts,
                                                                       world_size, progress)
    mism.extend(bad)
    T["create"] = time.time()
    own = {(c.kind): c.pg for c in created}

    # 2. Verify membership and one collective per group.
    progress.set("verify", 0)
    _fault(fault, rank, "verify")
    v = verify_created(created, rank, device, progress)
    mism.extend(v.pop("mismatches"))

    # 3. All-gather group checks (and the getters in Megatron mode).
    group_of: Callable[[str], Any]
    if ps is None:
        group_of = own.get
        ag = all_gather_checks(layout, rank, group_of)
    else:
        group_of, ag, bad = _check_megatron(ps, layout, rank, own, megatron_info)
        mism.extend(bad)
    T["verify"] = time.time()

    # 4. Overlap probe.
    progress.set("probe", 0)
    _fault(fault, rank, "probe")
    probe = _overlap(layout, rank, opts, group_of, progress, device)
    if probe is not None and not probe.get("values_ok", True):
        mism.append(mismatch("probe_values", rank, "overlap probe: the reduce-scatter or "
                             "all-gather produced wrong values.", kind="dp_cp"))
    T["probe"] = time.time()

    # 5. Results to every rank.
    view = layout.rank(rank)
    used: dict[str, int] = {}
    for c in created:
        used[c.used] = used.get(c.used, 0) + 1
    result.update({
        "new_group_calls": calls,
        "memberships": v["memberships"], "verified": v["verified"],
        "collectives": v["collectives"], "by_kind": v["by_kind"],
        "n_mismatches": len(mism), "mismatches": mism[:MAX_RECORDED],
        "communicators": {"plan_nccl": view.nccl_communicators,
                          "plan_gloo": view.gloo_communicators,
                          "created": used, "total": len(created)},
        "all_gather": ag, "overlap": probe, "megatron": megatron_info or None,
        "timings": T,
    })
    return gather_results(result, opts, rank, world_size, progress)


def _create_with_megatron(layout: Layout, rank: int, opts: ReplayOptions, world_size: int,
                          progress: Progress
                          ) -> tuple[Any, list[Created], list[dict], int, dict[str, Any]]:
    """Megatron's ``initialize_model_parallel`` on this rank, its ``new_group`` log checked
    against the plan: ``(parallel_state, created, mismatches, new_group calls, info)``."""
    from ..creation_log import compare_log
    from .megatron_engine import run_megatron

    try:
        ps, log, info = run_megatron(layout, rank, opts.backend, opts.timeout,
                                     lambda i: progress.set("create", i))
    except ReplayFault:
        raise
    except Exception as exc:  # noqa: BLE001
        i = progress.current[1]
        raise ReplayFault(
            f"megatron-core initialize_model_parallel failed on rank {rank} at new_group "
            f"call {i}: {type(exc).__name__}: {_short(exc)}",
            {"phase": "create", "index": i, "op": "initialize_model_parallel",
             "missing_ranks": progress.not_arrived(range(world_size), "create", i)}
        ) from exc
    bad, aligned = compare_log(layout, log, rank)
    info = {"version": info.get("version"), "kwargs": info.get("kwargs"),
            "ag_call": info.get("ag_call"), "aligned": aligned,
            "ag_groups": info.get("ag_groups")}
    return ps, created_from_log(layout, log, aligned), bad, len(log), info


def _check_megatron(ps: Any, layout: Layout, rank: int, own: dict[str, Any],
                    megatron_info: dict[str, Any]
                    ) -> tuple[Callable[[str], Any], dict[str, Any], list[dict]]:
    """Megatron's getters and the all-gather group checks, then ``verify_live`` on the same
    job (it must agree with them): ``(group_of, all-gather checks, mismatches)``.

    ``group_of(kind)`` is the group this rank's code would use (the getter's, else the
    created one). Moves ``ag_groups`` out of ``megatron_info`` and adds what was checked.
    """
    from ..live import verify_live
    from ..live.verify import getter_for

    ag_groups = megatron_info.pop("ag_groups", None)
    extra = {}
    if ag_groups is not None:
        extra["dp_cp_ag"] = ag_groups[0]
        if layout.has("ep_dp_ag"):
            extra["ep_dp_ag"] = ag_groups[1]
    getters = compare_getters(ps, layout, rank, expected_objects=own if megatron_info.get(
        "aligned") else None, extra_groups=extra)
    mism = list(getters["mismatches"])

    def group_of(kind: str) -> Any:
        if kind in extra:
            return extra[kind]
        get = getter_for(kind, ps, layout.mcore)
        if get is not None:
            pg, _ = get()
            return pg if is_group(pg) else None
        return own.get(kind)

    megatron_info["getters_checked"] = len(getters["checked"])
    megatron_info["no_getter"] = getters["no_getter"]
    megatron_info["communicators"] = megatron_communicators(ps)
    ag = all_gather_checks(layout, rank, group_of, megatron=ps)
    live = verify_live(layout, all_gather_groups=ag_groups, print_report=False)
    megatron_info["verify_live_ok"] = live["ok"]
    same = not [m for m in getters["mismatches"] if m["check"] != "getter_object"]
    if live["ok"] != (same and ag["ok"]):
        mism.append(mismatch("verify_live", rank, f"verify_live() says ok={live['ok']} but "
                             f"the replay's getter checks disagree.", expected=not live["ok"],
                             actual=live["ok"]))
    return group_of, ag, mism


def _overlap(layout: Layout, rank: int, opts: ReplayOptions, group_of: Callable[[str], Any],
             progress: Progress, device: torch.device) -> dict[str, Any] | None:
    """The overlap probe on this rank's DP-with-CP group; None when it is off or the plan
    has no ``dp_cp`` kind, ``{"skipped": ...}`` when this rank lacks one of the groups."""
    if not (opts.probe_enabled and layout.has("dp_cp")):
        return None
    from .probe import overlap_probe

    rs, agpg, label = _probe_groups(layout, rank, opts, group_of, progress)
    progress.set("probe", 2)
    if not (is_group(rs) and is_group(agpg)):
        return {"skipped": "this rank has no DP-with-CP or all-gather group"}
    try:
        return overlap_probe(rs, agpg, nbytes=opts.overlap_bytes, iters=opts.iters,
                             device=device, ag_source=label)
    except Exception as exc:  # noqa: BLE001
        group = layout.group_of("dp_cp", rank)
        members = [] if group is None else group.tolist()
        raise ReplayFault(
            f"overlap probe on dp_cp {members} did not complete on rank {rank}: "
            f"{_short(exc)}",
            {"phase": "probe", "kind": "dp_cp", "ranks": members, "op": "overlap probe",
             "missing_ranks": progress.not_arrived(members, "probe", 2)}) from exc


def init_rank(opts: ReplayOptions, rank: int, world_size: int, init: Callable[[], None],
              store: Any = None) -> Progress:
    """Join the job (``init()``, faults at ``init``); returns this rank's :class:`Progress`."""
    progress = Progress(store, rank)
    progress.set("init", 0)
    _fault(opts.fault_spec, rank, "init")
    progress.set("init", 1)
    if opts.backend == "nccl":
        # wait() then blocks and raises on timeout (instead of the watchdog aborting the
        # process), so a rank that never arrives is named like under gloo.
        os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
    try:
        init()
    except Exception as exc:  # noqa: BLE001
        raise ReplayFault(f"init_process_group failed on rank {rank}: {_short(exc)}",
                          {"phase": "init", "op": "init_process_group",
                           "missing_ranks": progress.not_arrived(range(world_size), "init", 1)}
                          ) from exc
    if progress.store is None:
        try:
            progress.store = dist.distributed_c10d._get_default_store()
        except Exception:  # noqa: BLE001 - private API; progress is optional
            progress.store = None
    return progress


def gather_results(result: dict[str, Any], opts: ReplayOptions, rank: int, world_size: int,
                   progress: Progress) -> list[Any]:
    """Every rank's ``result`` on every rank (``all_gather_object``; faults at ``gather``)."""
    progress.set("gather", 0)
    _fault(opts.fault_spec, rank, "gather")
    progress.set("gather", 1)
    gathered: list[Any] = [None] * world_size
    try:
        dist.all_gather_object(gathered, result)
    except Exception as exc:  # noqa: BLE001
        raise ReplayFault(f"gathering the results on rank {rank} failed: {_short(exc)}",
                          {"phase": "gather", "op": "all_gather_object",
                           "missing_ranks": progress.not_arrived(range(world_size), "gather",
                                                                 1)}) from exc
    progress.set("done", 0)
    return gathered


# --------------------------------------------------------------------- torchrun
def torchrun_env() -> tuple[int, int, int]:
    """``(RANK, WORLD_SIZE, LOCAL_RANK)`` from the torchrun environment."""
    from ..errors import SimharnessError

    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except KeyError as exc:
        raise SimharnessError(
            f"{exc.args[0]} is not set: run the worker under torchrun, e.g. `torchrun "
            f"--nproc-per-node 8 -m simharness.replay.worker --plan plan.json`, or use "
            f"`simharness replay` to start the ranks on this machine.") from None
    except ValueError:
        raise SimharnessError("RANK and WORLD_SIZE must be integers.") from None
    return rank, world, int(os.environ.get("LOCAL_RANK", "0"))


def torchrun_main(layout: Layout, opts: ReplayOptions, *, report_path: str | None = None,
                  quiet: bool = False, echo: Callable[[str], None] = print) -> int:
    """Replay under torchrun; rank 0 prints the summary and writes the report. Exit code."""
    from ..errors import SimharnessError
    from .controller import write_report
    from .plan_checks import check_replayable
    from .report import build_report, summary_lines

    rank, world, local_rank = torchrun_env()
    if world != layout.world_size:
        raise SimharnessError(
            f"torchrun started {world} ranks but the plan is for {layout.world_size}; pass "
            f"--nnodes/--nproc-per-node that multiply to {layout.world_size}.")
    opts.validate()
    check_replayable(layout)
    if opts.engine == "megatron":
        from ..mcore import check_megatron

        check_megatron(layout, opts.backend)
    device = None
    if opts.backend == "nccl":
        if not torch.cuda.is_available() or torch.cuda.device_count() <= local_rank:
            raise SimharnessError(f"--backend nccl: rank {rank} (LOCAL_RANK {local_rank}) has no "
                                  f"GPU ({torch.cuda.device_count()} visible); use --backend "
                                  f"gloo.")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    timeout = timedelta(seconds=opts.timeout)

    def init():
        dist.init_process_group(opts.backend, init_method="env://", rank=rank,
                                world_size=world, timeout=timeout)

    try:
        gathered = run_rank(layout, opts, rank=rank, world_size=world, init=init,
                            device=device)
    except ReplayFault as exc:
        echo(f"error: rank {rank}: {exc}" + (
            f" (ranks that did not arrive: {exc.context['missing_ranks']})"
            if exc.context.get("missing_ranks") else ""))
        return EXIT_FAILED
    report = build_report(layout, opts, gathered, t_end=time.time())
    if rank == 0:
        if not quiet:
            for line in summary_lines(report):
                echo(line)
        if report_path:
            write_report(report, report_path)
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the results are in; teardown is best effort
        pass
    return report["exit_code"]


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one ``error:`` line instead of argparse's usage + exit
        raise _ArgumentError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m simharness.replay.worker",
                description="One replay rank under torchrun (reads RANK, WORLD_SIZE, "
                            "LOCAL_RANK, MASTER_ADDR/PORT); rank 0 prints the summary.",
                epilog="Example: torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d "
                       "--rdzv-endpoint $MASTER_ADDR:29500 -m simharness.replay.worker "
                       "--plan plan.json")
    d = ReplayOptions()
    p.add_argument("--plan", required=True, metavar="FILE",
                   help="The plan to replay (simharness export --out FILE, or simharness "
                        "replay ... --print-torchrun).")
    p.add_argument("--engine", choices=ENGINES, default=d.engine)
    p.add_argument("--backend", choices=BACKENDS, default=None,
                   help="Default: nccl when this rank has a GPU, else gloo.")
    p.add_argument("--timeout", type=float, default=d.timeout)
    p.add_argument("--overlap-bytes", type=parse_bytes, default=d.overlap_bytes)
    p.add_argument("--iters", type=int, default=d.iters)
    p.add_argument("--report", metavar="FILE", default=None)
    p.add_argument("--quiet", "-q", action="store_true")
    return p


def worker_main(argv: list[str] | None = None) -> int:
    """``python -m simharness.replay.worker --plan FILE``: the exit code; bad input is one
    ``error:`` line on stderr and 2. The replay library alone (no CLI)."""
    from ..errors import SimharnessError
    from ..planfile import read_plan

    try:
        args = _parser().parse_args(argv)
        torchrun_env()  # a clear error outside torchrun, before anything else
        layout = read_plan(args.plan, "write one with `simharness export ... --out FILE`")
        backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
        opts = ReplayOptions(backend=backend, engine=args.engine, timeout=args.timeout,
                             overlap_bytes=args.overlap_bytes, iters=args.iters)
        return torchrun_main(layout, opts, report_path=args.report, quiet=args.quiet)
    except (_ArgumentError, SimharnessError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: aborted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # python -m simharness.replay.worker
    sys.exit(worker_main())
