"""How NCCL's proxy moves a call's data over a network NCCL's constants do not describe (EFA).

NCCL's tuning table (:mod:`.nccl_model`) prices a call as ``lat + size / bw`` with
network latencies measured on its own InfiniBand verbs transport. Over EFA, NCCL
reaches the NIC through a net plugin (aws-ofi-nccl) and its proxy thread: the GPU
fills a step of a connection's FIFO (``NCCL_STEPS`` = 8 slots), the proxy posts it to
the NIC, the peer's proxy sees the completion and hands it to its GPU. What that adds
depends on how NCCL cuts the call into steps, which this module takes from NCCL's
source (``calcCollChunking``, ``src/enqueue.cc:2006-2111`` at v2.28.3-1; the same rules at
v2.27.7-1, lines 1985-2090):

- buffers: ``buffSizes[proto] / NCCL_STEPS`` bytes per step (``calcCollChunking``,
  ``src/enqueue.cc``): Simple 4 MiB (``DEFAULT_BUFFSIZE``), LL 8 x 512 x 8 x 16 B,
  LL128 120 x 640 x 8 x 8 B (``src/init.cc:677-690``); a ring's Simple chunk is
  ``NCCL_STEPS / 2`` steps (``ALLREDUCE_CHUNKSTEPS``, ``src/include/collectives.h``),
  LL carries half its bytes, LL128 15 of 16 (``NCCL_LL128_DATAELEMS``);
- a ring runs ``loops = ceil(size / (channels x ranks x chunk))`` loops of
  ``2 (ranks - 1)`` steps for all-reduce, ``ranks - 1`` otherwise
  (``ncclPatternRingTwice`` / ``ncclPatternRing``); a step carries
  ``size / (loops x channels x ranks)`` bytes per channel;
- a tree (Tree, NVLSTree) pipelines chunks up and down ``log2(nodes)`` network levels
  each way; Tree/LL128 halves its chunk for small calls (``nstepsLL128`` rule),
  NVLSTree uses ``nvlsChunkSize`` capped at 64 KiB from 4 nodes
  (``NCCL_NVLSTREE_MAX_CHUNKSIZE``) and halved for small calls
  (:func:`.nccl_ramp._nvls_chunk`).

Two costs follow, each with one constant NCCL's source does not give (FITTED, per
transport, on the calibration sweeps marked ``fit`` only: :func:`.calibration.fit_net_pipeline`):

- ring: every rank sends every step, and a step over the network cannot complete
  faster than the transport's turn-around of one step (:data:`RING_STEP_FLOOR_US`):
  a step of transfer time ``x`` (its bytes at the channel's rate) takes
  ``sqrt(floor^2 + x^2)`` (:data:`RING_STEP_FORM`); a ring whose steps carry little data
  (one partly filled loop, a large ring) is slower than ``size / bw``;
- tree: the first chunk is stored and forwarded at each network level before the
  pipeline streams: ``2 log2(nodes) x (NET_LEVEL_US + chunk / the connection's rate)``.

On InfiniBand and RoCE both constants are 0: NCCL's own latencies and
``treeCorrectionFactor`` were measured on its verbs transport and already hold this.

What the pipeline takes as given: GPUDirect RDMA to the NIC (p5's EFA supports it), with no
receive flush (NCCL skips it on Hopper unless the plugin forces it: ``ncclTopoNeedFlush``,
``src/graph/paths.cc:492-502``); PXN changes no route with one NIC per GPU (p5); the
channels per NIC are the graph's (16 channels over 8 NICs). ``NCCL_BUFFSIZE`` is priced at
its default (4 MiB); a larger one only lengthens Simple's chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .nccl_ramp import NCCL_STEPS, _nvls_chunk
from .nccl_tuning import _log2i

# buffSizes defaults (init.cc:677-690, v2.28.3-1), bytes
BUFF_BYTES = {"ll": 8 * 512 * NCCL_STEPS * 16, "ll128": 120 * 640 * NCCL_STEPS * 8,
              "simple": 4 << 20}
RING_SIMPLE_CHUNK_STEPS = NCCL_STEPS // 2   # ALLREDUCE/ALLGATHER/REDUCESCATTER_CHUNKSTEPS
LL128_DATA = 15 / 16                        # NCCL_LL128_DATAELEMS / NCCL_LL128_LINEELEMS
# Transports whose pipeline is priced here: those NCCL's constants do not describe.
PIPELINE_TRANSPORTS = ("efa",)
# Shortest time of one ring step over the network, us (FITTED on the `fit` sweeps, see
# the module docstring); 0 where NCCL's own constants describe the transport.
RING_STEP_FLOOR_US = {"infiniband": 0.0, "roce": 0.0, "efa": 9.3}
# How a ring step's transfer x and the floor F combine: sqrt(F^2 + x^2) (the step's time
# turns over smoothly from the floor to its transfer). Chosen on the fit sweeps: over their
# 32 points it fits with a sum of squared log errors of 0.45 against 0.72 for max(F, x)
# (calibration.pipeline_fit; tests/unit/cost/test_net_transport.py re-runs both).
RING_STEP_FORM = "hypot"
# Store-and-forward cost of one network level of a tree pipeline, us, beyond the chunk's
# own transfer (FITTED on the `fit` sweeps); 0 where NCCL's own constants hold.
NET_LEVEL_US = {"infiniband": 0.0, "roce": 0.0, "efa": 52.0}


@dataclass(frozen=True)
class PipelineTerms:
    """What one call's network pipeline consists of (from NCCL's chunking).

    ``levels``: network levels a tree's first chunk crosses (up and down);
    ``level_chunk_us``: one chunk's transfer at the connection's rate;
    ``ring_steps``: a ring's steps (all loops); ``ring_step_us``: one step's transfer
    at the channel's rate.
    """

    levels: int = 0
    level_chunk_us: float = 0.0
    ring_steps: int = 0
    ring_step_us: float = 0.0

    def cost_us(self, floor_us: float, level_us: float) -> float:
        """The time the pipeline adds to ``lat + size / bw``, us."""
        x = self.ring_step_us
        ring = self.ring_steps * (math.hypot(floor_us, x) - x)  # RING_STEP_FORM
        return ring + self.levels * (level_us + self.level_chunk_us)


def ring_chunk_bytes(proto: str) -> float:
    """A ring's chunk per channel and rank, bytes (calcCollChunking).

    >>> ring_chunk_bytes("simple"), ring_chunk_bytes("ll128")
    (2097152, 576000.0)
    """
    step = BUFF_BYTES[proto] // NCCL_STEPS
    if proto == "simple":
        return step * RING_SIMPLE_CHUNK_STEPS
    return step / 2 if proto == "ll" else step * LL128_DATA


def tree_ll128_chunk(size_bytes: float, channels: int, n_ranks: int, n_nodes: int) -> float:
    """Tree/LL128 chunk, bytes: halved while the call is small for the tree's depth
    (calcCollChunking, ``nstepsLL128 = 1 + log2(nodes) + 0.1 ppn``).

    >>> tree_ll128_chunk(32 << 20, 16, 128, 16), tree_ll128_chunk(256 << 20, 16, 128, 16)
    (72000.0, 288000.0)
    """
    chunk = ring_chunk_bytes("ll128")
    ppn = n_ranks / n_nodes
    nsteps = 1 + _log2i(n_nodes) + 0.1 * ppn
    ch = max(1, channels)
    while size_bytes // (ch * chunk) < nsteps * 64 / ppn and chunk > 131072:
        chunk /= 2
    while size_bytes // (ch * chunk) < nsteps * 16 / ppn and chunk > 32768:
        chunk /= 2
    return chunk


def pipeline_terms(collective: str, algo: str, proto: str, size_bytes: float, n_ranks: int,
                   n_nodes: int, algbw_gb_per_s: float, ctas: int,
                   nvls_heads: int = 1) -> PipelineTerms:
    """The network pipeline of one call (see the module docstring); empty inside one
    node or for algorithms whose network part is not a ring or a tree."""
    if n_nodes < 2 or size_bytes <= 0 or algbw_gb_per_s <= 0 or ctas <= 0:
        return PipelineTerms()
    call_us = size_bytes / (algbw_gb_per_s * 1e3)
    if algo == "ring":
        per_loop = 2 * (n_ranks - 1) if collective == "all_reduce" else n_ranks - 1
        loops = max(1, math.ceil(size_bytes / (ctas * n_ranks * ring_chunk_bytes(proto))))
        steps = loops * per_loop
        return PipelineTerms(ring_steps=steps, ring_step_us=call_us / steps)
    if algo == "tree" and collective == "all_reduce":
        if proto == "ll128":
            chunk = tree_ll128_chunk(size_bytes, ctas, n_ranks, n_nodes)
        else:
            chunk = BUFF_BYTES[proto] / NCCL_STEPS / (2 if proto == "ll" else 1)
        chunk = min(chunk, size_bytes / ctas)
        return PipelineTerms(levels=2 * max(1, _log2i(n_nodes)),
                             level_chunk_us=chunk * ctas / (algbw_gb_per_s * 1e3))
    if algo == "nvls_tree":
        heads = max(1, nvls_heads)
        chunk = min(_nvls_chunk(size_bytes, ctas, heads, True, n_nodes),
                    size_bytes / (ctas * heads))
        return PipelineTerms(levels=2 * max(1, _log2i(n_nodes)),
                             level_chunk_us=chunk * ctas * heads / (algbw_gb_per_s * 1e3))
    return PipelineTerms()


def net_pipeline_us(terms: PipelineTerms, transport: str) -> float:
    """The pipeline's cost on ``transport`` with its constants, us; 0 on a transport
    NCCL's own constants describe (InfiniBand, RoCE: :data:`PIPELINE_TRANSPORTS`)."""
    if transport not in PIPELINE_TRANSPORTS:
        return 0.0
    return terms.cost_us(RING_STEP_FLOOR_US[transport], NET_LEVEL_US[transport])
