"""nccl-tests-style sweep through ``torch.distributed``, written as calibration points.

``run_sweep`` starts ``world`` local ranks (NCCL with one GPU per rank, or gloo
on CPU for tests), times out-of-place all-reduce / all-gather / reduce-scatter
over a size sweep the way nccl-tests does (warm-up, then the mean of ``iters``
back-to-back calls, the slowest rank's time), and times a reduce-scatter and an
all-gather issued together on one communicator and on two (the
``create_all_gather_group`` question). ``to_toml`` writes the results in the
format of ``topologies/calibration/nccl_calibration.toml`` (``split = "measured"``), so
``bench/bench_cost.py FILE`` compares them with the model.

It has never run on NCCL GPUs in this repository's development (no GPU was
available); the gloo path is what the tests exercise.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..launch.toolbox import free_port
from ..topology.nccl_tuning import bus_factor

DEFAULT_SIZES = tuple(1 << k for k in range(10, 34, 2))   # 1 KB .. 8 GB
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


@dataclass(frozen=True)
class SweepOptions:
    world: int
    backend: str = "nccl"
    sizes: tuple[int, ...] = DEFAULT_SIZES
    collectives: tuple[str, ...] = COLLECTIVES
    warmup: int = 5
    iters: int = 20
    overlap_bytes: int = 64 << 20
    timeout_s: float = 600.0


def _timed(fn, sync, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t) / iters


def _collective(coll: str, elems: int, n: int, dev: Any) -> Callable[[], Any]:
    """One out-of-place ``coll`` of ``elems`` float32 values over the default group (``n``
    ranks), as a call that returns once it completed; its buffers are made here, once."""
    import torch
    import torch.distributed as dist

    from .probe import _ag, _rs  # the replay's async reduce-scatter / all-gather calls

    if coll == "all_reduce":
        buf = torch.ones(elems, device=dev)
        return lambda: dist.all_reduce(buf)
    if coll == "all_gather":
        ag_src, ag_dst = torch.ones(elems // n, device=dev), torch.empty(elems, device=dev)
        return lambda: _ag(ag_dst, ag_src, None).wait()
    rs_src, rs_dst = torch.ones(elems, device=dev), torch.empty(elems // n, device=dev)
    return lambda: _rs(rs_dst, rs_src, None).wait()


def _rs_and_ag(rs_dst: Any, rs_src: Any, ag_dst: Any, ag_src: Any, ag_group: Any) -> None:
    """A reduce-scatter on the default group and an all-gather on ``ag_group`` (None: the
    default group too), issued together, then both waited for."""
    from .probe import _ag, _rs

    w1 = _rs(rs_dst, rs_src, None)
    w2 = _ag(ag_dst, ag_src, ag_group)
    w1.wait()
    w2.wait()


def _worker(rank: int, opts: SweepOptions, port: int, out: str) -> None:  # pragma: no cover
    import torch
    import torch.distributed as dist

    gpu = opts.backend == "nccl"
    if gpu:
        torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank) if gpu else torch.device("cpu")
    dist.init_process_group(opts.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=opts.world)
    sync = (lambda: torch.cuda.synchronize(dev)) if gpu else (lambda: None)
    n = opts.world
    rows = []
    for coll in opts.collectives:
        for size in opts.sizes:
            elems = max(n, size // 4 // n * n)  # float32, divisible by n like nccl-tests
            fn = _collective(coll, elems, n, dev)
            t = torch.tensor([_timed(fn, sync, opts.warmup, opts.iters)], device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            rows.append({"collective": coll, "size": elems * 4, "time_us": float(t) * 1e6})
    # one communicator vs two: a reduce-scatter and an all-gather issued together
    second = dist.new_group(list(range(n)))
    elems = max(n, opts.overlap_bytes // 4 // n * n)
    rs_src, rs_dst = torch.ones(elems, device=dev), torch.empty(elems // n, device=dev)
    ag_src, ag_dst = torch.ones(elems // n, device=dev), torch.empty(elems, device=dev)
    overlap = {}
    for name, ag_group in (("one_communicator", None), ("two_communicators", second)):
        both = functools.partial(_rs_and_ag, rs_dst, rs_src, ag_dst, ag_src, ag_group)
        t = torch.tensor([_timed(both, sync, opts.warmup, opts.iters)], device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        overlap[name] = float(t) * 1e6
    if rank == 0:
        info = {"backend": opts.backend, "world": n, "rows": rows,
                "overlap": dict(overlap, size=elems * 4)}
        if gpu:
            info["gpu"] = torch.cuda.get_device_name(0)
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        Path(out).write_text(json.dumps(info))
    dist.barrier()
    dist.destroy_process_group()


def run_sweep(opts: SweepOptions) -> dict:
    """Run the sweep on ``opts.world`` local ranks; rank 0's results as a dict."""
    import torch.multiprocessing as mp

    if opts.world < 2:
        raise ValueError(f"a sweep needs at least 2 ranks, got world {opts.world}")
    if opts.backend == "nccl":
        import torch

        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < opts.world:
            raise RuntimeError(f"the NCCL sweep needs {opts.world} GPUs, found {have}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sweep.json")
        ctx = mp.start_processes(_worker, args=(opts, free_port(), out), nprocs=opts.world,
                                 join=False, start_method="spawn")
        deadline = time.monotonic() + opts.timeout_s
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                raise TimeoutError(f"sweep did not finish in {opts.timeout_s:g} s")
        return json.loads(Path(out).read_text())


def to_toml(result: dict, *, topology: str, nodes: int = 1, gpu: str | None = None) -> str:
    """The sweep as calibration points (``split = "measured"``) plus the overlap timing."""
    n = int(result["world"])
    gpu = gpu or result.get("gpu", result["backend"])
    lines = [f"# measured by simharness.replay.nccl_sweep ({result['backend']}, {n} ranks)"]
    for r in result["rows"]:
        busbw = r["size"] / (r["time_us"] * 1e3) * bus_factor(r["collective"], n)
        lines += ["", "[[point]]",
                  f'id = "measured-{r["collective"]}-{r["size"]}"',
                  'source = "measured: simharness.replay.nccl_sweep"',
                  f'nccl = "{result.get("nccl", "")}"', f'gpu = "{gpu}"',
                  f'collective = "{r["collective"]}"', 'algo = "default"',
                  f'size = {int(r["size"])}', f'topology = "{topology}"', f"nodes = {nodes}",
                  f"ranks_per_node = {n // nodes}", f"busbw = {busbw:.6g}",
                  'split = "measured"', f'measured_by = "time_us = {r["time_us"]:.3f}"']
    ov = result.get("overlap")
    if ov:
        lines += ["", "[overlap]", f"size = {int(ov['size'])}",
                  f"one_communicator_us = {ov['one_communicator']:.3f}",
                  f"two_communicators_us = {ov['two_communicators']:.3f}"]
    return "\n".join(lines) + "\n"
