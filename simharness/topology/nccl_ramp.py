"""What NCCL's own ``lat + size / bw`` leaves out: the CPU launch and the pipeline fill.

- the launch: back-to-back calls take at least the CPU's launch period
  (:func:`launch_period_us`, :func:`launch_overhead_us`);
- the fill: where a channel's data passes through several stages one after the
  other (NVLS, NVLSTree, PAT), the first piece fills the pipeline before the
  channel streams (:func:`pipeline_fill_us`, with NCCL's chunking,
  :func:`nvls_loops`).

:class:`.nccl_model.Table` adds the fill to every estimate
(:attr:`.nccl_model.Estimate.ramp_us`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .errors import TopologyError
from .nccl_tuning import _log2i

if TYPE_CHECKING:
    from .nccl_graph import CommGraphs
    from .nccl_model import GroupShape

NCCL_STEPS = 8                       # device.h:24
SIMPLE_STEP_BYTES = 4 * 2**20 // NCCL_STEPS   # DEFAULT_BUFFSIZE / NCCL_STEPS = 512 KiB
NVLS_CHUNK_BYTES = 128 * 1024        # NCCL_NVLS_CHUNKSIZE default (nvls.cc:152)
# One kernel launch from the CPU thread, us: NVIDIA/nccl#1984 measures a 1 KB ring
# all-reduce at 3.5 us per call launched back to back and 0.5 us inside a CUDA graph
# (no launch): the kernel took 0.5 us, so the 3.5 us period is the launch itself
# (that point is marked `fit` in the calibration data).
LAUNCH_US = 3.5
# One process driving N GPUs (nccl-tests -g N) launches N communicators' kernels from one
# thread (ncclGroupEnd -> doLaunches switches device, then prepares and launches each
# comm's plan: src/group.cc, src/enqueue.cc), so its period is N x this per-GPU cost. NCCL's
# source gives no figure for it (it is host CPU time) and the hosts differ, so it is FITTED,
# on the calibration sweeps marked `fit` only (Azure ND A100 v4 and ND H100 v5, both -g 8):
# the least-squares fit of log(time) below 1 MB, calibration.fit_single_launch_us(); the
# held-out sweeps set nothing (tests/test_nccl_ramp.py re-runs the fit).
LAUNCH_US_SINGLE_PER_GPU = 4.76
LAUNCH_MODES = ("per-gpu", "single")



def launch_period_us(mode: str, gpus_per_process: int,
                     single_per_gpu_us: float = LAUNCH_US_SINGLE_PER_GPU) -> float:
    """Shortest period of back-to-back calls the CPU side allows, us.

    nccl-tests (and a training loop) enqueue calls without waiting for them, so
    the CPU launches call i+1 while the GPUs run call i: a call's measured time
    is ``max(gpu time, launch period)`` (:func:`launch_overhead_us`). One process
    per GPU (``-g 1``, torchrun) launches one kernel per call: ``LAUNCH_US``
    (NVIDIA/nccl#1984); one process driving N GPUs (``-g N``) launches their N
    kernels one after the other from one thread: ``N x single_per_gpu_us``
    (``LAUNCH_US_SINGLE_PER_GPU``, fitted on the `fit` sweeps only).

    >>> launch_period_us("single", 8), launch_period_us("per-gpu", 8)
    (38.08, 3.5)
    """
    if mode not in LAUNCH_MODES:
        raise TopologyError(f"unknown launch mode {mode!r}; expected per-gpu (one process per "
                            "GPU) or single (one process drives all local GPUs, -g N)")
    if gpus_per_process < 1:
        raise TopologyError(f"gpus_per_process must be >= 1, got {gpus_per_process!r}")
    return gpus_per_process * single_per_gpu_us if mode == "single" else LAUNCH_US


def launch_overhead_us(mode: str, gpus_per_process: int, gpu_time_us: float = 0.0,
                       single_per_gpu_us: float = LAUNCH_US_SINGLE_PER_GPU) -> float:
    """Time the CPU launch adds to a call whose GPU time is ``gpu_time_us``, us.

    Launches overlap the previous call's GPU work, so only a launch period
    longer than the GPU time shows: ``max(0, period - gpu_time)``.

    >>> round(launch_overhead_us("single", 8, gpu_time_us=20.0), 2)
    18.08
    >>> launch_overhead_us("single", 8, gpu_time_us=100.0), launch_overhead_us("per-gpu", 8, 10.0)
    (0.0, 0.0)
    """
    return max(0.0, launch_period_us(mode, gpus_per_process, single_per_gpu_us) - gpu_time_us)


def _nvls_chunk(size_bytes: float, ctas: int, heads: int, tree: bool, nodes: int) -> float:
    """NVLS / NVLSTree chunk size (enqueue.cc:2036-2057, 2.28)."""
    ops = max(1, ctas * heads)
    c = NVLS_CHUNK_BYTES
    if tree:
        if nodes >= 4:
            c = min(c, 65536)
        for factor, cap in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
            if size_bytes < factor * ops * c and c > cap:
                c = cap
        return c
    for factor, cap in ((64, 65536), (8, 32768), (2, 16384)):
        if size_bytes < factor * ops * c and c > cap:
            c = cap
    return c


# NVLS all-reduce on one node runs three warp groups per channel, one after the other
# on every loop of ``nHeads x chunk`` bytes: scatter (the rank's data to each head's
# buffer), reduce + multicast store (multimem ld_reduce / st), gather (into recvbuff);
# src/device/all_reduce.h RunWorkColl<AllReduce, NVLS, Simple>, oneNode branch
# (oneNode branch at v2.23.4-1 all_reduce.h:393-440, v2.28.3-1 all_reduce.h:408-454).
NVLS_ONE_NODE_STAGES = 3
# NVLS all-gather / reduce-scatter on one node run two warp groups per channel on the same
# loop of ``nHeads x chunk`` bytes: all-gather multicasts the rank's chunk (Bcast through
# NVLS) and copies every head's chunk out (Gather, ``nvls->nHeads * count`` apart);
# reduce-scatter writes one chunk to each head's buffer (Scatter) and reads back its own
# chunk reduced (Reduce through NVLS, multimem ld_reduce). RunWorkColl<AllGather / Reduce
# Scatter, NVLS, Simple>: v2.28.3-1 all_gather.h:258-287 and reduce_scatter.h:227-256
# (oneNode branch), v2.23.4-1 all_gather.h:113-152 and reduce_scatter.h:107-166.
NVLS_AG_RS_ONE_NODE_STAGES = 2


def nvls_loops(size_bytes: float, ctas: int, heads: int, nodes: int = 1,
               tree: bool = False) -> tuple[float, int, float]:
    """NVLS chunking of one call: ``(chunk, loops per channel, bytes per loop)``.

    A channel's share ``size / ctas`` is processed in loops of ``heads x chunk``
    bytes (``loopCount = nvls->nHeads * chunkSize``, all_reduce.h:411 at v2.28.3-1,
    :396 at v2.23.4-1); the chunk is
    calcCollChunking's (:func:`_nvls_chunk`). A share smaller than one loop is
    one (partial) loop.

    >>> nvls_loops(16 * 2**20, 16, 8)        # 1 MiB per channel in 32 KiB chunks
    (32768, 4, 262144)
    >>> nvls_loops(2**20, 16, 8)             # 64 KiB per channel: one partial loop
    (16384, 1, 65536.0)
    """
    chunk = _nvls_chunk(size_bytes, ctas, heads, tree, nodes)
    per_channel = size_bytes / max(1, ctas)
    loop = heads * chunk
    loops = max(1, math.ceil(per_channel / loop))
    return chunk, loops, min(loop, per_channel)


def pipeline_fill_us(collective: str, algo: str, proto: str, size_bytes: float,
                     s: GroupShape, g: CommGraphs, algbw: float, ctas: int) -> float:
    """Time the protocol pipeline adds to NCCL's ``lat + size / bw`` (us), no fitted term.

    A channel moves its share in chunks (``calcCollChunking``, enqueue.cc:2004-2066);
    where the data passes through several stages one after the other, the first
    piece fills the pipeline before the channel streams: ``(stages - 1)`` stage
    times, a stage time being the piece divided by the channel's rate
    ``algbw / channels``.

    - NVLS all-reduce on one node: 3 stages (:data:`NVLS_ONE_NODE_STAGES`), the
      piece is one loop of ``nHeads x chunk`` bytes (:func:`nvls_loops`). With
      8 heads and 32-128 KiB chunks a loop is 256 KiB-1 MiB per channel, so the
      fill is 30-60 us on 8 x H100: the mid-size ramp (half the plateau near
      16 MB instead of NCCL's ``lat x bw`` = 7 MB).
    - NVLS all-gather / reduce-scatter on one node: 2 stages
      (:data:`NVLS_AG_RS_ONE_NODE_STAGES`) on the same loop of ``nHeads x chunk``
      bytes (one chunk from or to every head): a one-loop fill.
    - other NVLS / NVLSTree calls (across nodes): the piece is one chunk; NVLS 2
      stages, NVLSTree 2 + 2 log2(nodes) (the tree up and down); PAT log2(n).
    - A ring has no fill: every rank sends from the first step on and NCCL's
      per-step latency already counts the steps; Tree's mid-size shortfall is
      NCCL's own ``treeCorrectionFactor``.
    """
    if size_bytes <= 0 or algbw <= 0 or ctas <= 0:
        return 0.0
    per_channel = algbw * 1e3 / ctas          # bytes per us
    if algo == "nvls" or algo == "nvls_tree":
        heads = g.nvls.n_channels if g.nvls is not None else 1
        if algo == "nvls" and s.n_nodes == 1:
            _, _, loop = nvls_loops(size_bytes, ctas, heads)
            stages = NVLS_ONE_NODE_STAGES if collective == "all_reduce" else \
                NVLS_AG_RS_ONE_NODE_STAGES
            return (stages - 1) * loop / per_channel
        chunk = _nvls_chunk(size_bytes, ctas, heads, algo == "nvls_tree", s.n_nodes)
        stages = 2 if algo == "nvls" else 2 + 2 * _log2i(s.n_nodes)
    elif algo == "pat":
        chunk = SIMPLE_STEP_BYTES
        times = 32 if collective == "all_gather" else 16
        while chunk * ctas * times > size_bytes and chunk > 65536:
            chunk //= 2
        stages = max(1, _log2i(s.n_ranks))
    else:
        return 0.0
    chunk = min(chunk, size_bytes / ctas)
    return (stages - 1) * chunk / per_channel
