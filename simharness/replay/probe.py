"""The overlap probe: a reduce-scatter and an all-gather issued together.

On this rank's DP-with-CP group, time a reduce-scatter of ``nbytes`` and an
all-gather of the same volume, both issued with ``async_op=True`` and then
waited for:

* ``same``: both on the DP-with-CP group (what runs when the option is off);
* ``separate``: the all-gather on the all-gather group (the option's point);
* ``rs_only`` / ``ag_only``: each alone, for reference (perfect overlap would
  make ``separate`` close to ``max(rs_only, ag_only)``, full serialisation
  close to ``rs_only + ag_only``).

The modes alternate within each iteration so that drift in machine load hits
them alike; each rank reports medians, rank 0 takes the slowest rank.

Reading the figures: on gloo, every process group runs its async work on two
threads of its own (``ProcessGroupGloo`` ``threads=2``), so a reduce-scatter
and an all-gather can overlap even on one group, and ranks sharing a few CPU
cores are compute-bound: expect ``same`` close to ``separate``. On NCCL one
communicator runs its collectives in order on one stream; the all-gather
group's own communicator is what lets the two overlap.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

MODES = ("rs_only", "ag_only", "same", "separate")
WARMUP = 2


def _rs(out, inp, pg):
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return fn(out, inp, group=pg, async_op=True)


def _ag(out, inp, pg):
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(out, inp, group=pg, async_op=True)


def overlap_probe(rs_pg: Any, ag_pg: Any, *, nbytes: int, iters: int,
                  device: torch.device, ag_source: str) -> dict[str, Any]:
    """Time the four modes on this rank; returns per-mode medians in seconds."""
    n = dist.get_world_size(rs_pg)
    if n < 2:
        return {"skipped": f"the DP-with-CP group has {n} rank: nothing to reduce-scatter or "
                           f"all-gather"}
    numel = max(n, (nbytes // 4) // n * n)
    shard = numel // n
    rs_in = torch.ones(numel, dtype=torch.float32, device=device)
    rs_out = torch.empty(shard, dtype=torch.float32, device=device)
    ag_in = torch.ones(shard, dtype=torch.float32, device=device)
    ag_out = torch.empty(numel, dtype=torch.float32, device=device)
    sync_t = torch.zeros(1, device=device)
    cuda = device.type == "cuda"

    def align():
        dist.all_reduce(sync_t, group=rs_pg)
        if cuda:
            torch.cuda.synchronize(device)

    def run(mode: str) -> float:
        align()
        t0 = time.perf_counter()
        works = []
        if mode in ("rs_only", "same", "separate"):
            works.append(_rs(rs_out, rs_in, rs_pg))
        if mode == "ag_only" or mode == "same":
            works.append(_ag(ag_out, ag_in, rs_pg))
        elif mode == "separate":
            works.append(_ag(ag_out, ag_in, ag_pg))
        for w in works:
            w.wait()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    samples: dict[str, list[float]] = {m: [] for m in MODES}
    for i in range(WARMUP + iters):
        for mode in MODES:
            t = run(mode)
            if i >= WARMUP:
                samples[mode].append(t)
    # Sanity: the reduce-scatter summed n ones, the all-gather moved ones.
    ok = bool(torch.all(rs_out == float(n)).item()) and bool(torch.all(ag_out == 1.0).item())
    return {"group_size": n, "bytes": numel * 4, "iters": iters, "ag_group": ag_source,
            "median_s": {m: statistics.median(v) for m, v in samples.items()},
            "min_s": {m: min(v) for m, v in samples.items()},
            "values_ok": ok}
