"""How NCCL's proxy moves a call's data over the network, beyond NCCL's tuning table.

NCCL's tuning table (:mod:`.nccl_model`) prices a call as ``lat + size / bw`` with
network latencies measured on its own InfiniBand verbs transport (``hwLat[NET]``,
``src/graph/tuning.cc``). The data itself goes through NCCL's net transport
(``src/transport/net.cc``) and its proxy thread: the GPU fills a step of a connection's
FIFO (``NCCL_STEPS`` = 8 slots), the proxy posts it to the NIC (``isend``), the peer's
proxy sees it complete and hands it to its GPU. The same code drives InfiniBand and RoCE
(NCCL's IB verbs plugin, ``net_ib.cc``) and EFA (the aws-ofi-nccl net plugin); what it
adds depends on how NCCL cuts the call into steps, which this module takes from NCCL's
source (``calcCollChunking``, ``src/enqueue.cc:2006-2111`` at v2.28.3-1; the same rules at
v2.27.7-1, lines 1985-2090):

- buffers: ``buffSizes[proto] / NCCL_STEPS`` bytes per step: Simple 4 MiB
  (``DEFAULT_BUFFSIZE``), LL 8 x 512 x 8 x 16 B, LL128 120 x 640 x 8 x 8 B
  (``src/init.cc:677-690``); a ring's Simple chunk is ``NCCL_STEPS / 2`` steps
  (``ALLREDUCE_CHUNKSTEPS``, ``src/include/collectives.h``), LL carries half its bytes,
  LL128 15 of 16 (``NCCL_LL128_DATAELEMS``);
- a ring runs ``loops = ceil(size / (channels x ranks x chunk))`` loops of
  ``2 (ranks - 1)`` steps for all-reduce, ``ranks - 1`` otherwise
  (``ncclPatternRingTwice`` / ``ncclPatternRing``); a step carries
  ``size / (loops x channels x ranks)`` bytes per channel;
- a tree (Tree, NVLSTree) pipelines chunks up and down ``log2(nodes)`` network levels
  each way; Tree/LL128 halves its chunk for small calls (``nstepsLL128`` rule),
  NVLSTree uses ``nvlsChunkSize`` capped at 64 KiB from 4 nodes
  (``NCCL_NVLSTREE_MAX_CHUNKSIZE``) and halved for small calls
  (:func:`.nccl_ramp._nvls_chunk`); the proxy posts one channel's chunk as one message
  (``net.cc:1276-1320``: the step's ``connFifo`` size), LL's and LL128's with their flags
  (LL: 8 data bytes per 16-byte line, LL128: 120 per 128).

What the pipeline adds to NCCL's ``lat + size / bw``, on every transport:

- tree: the first chunk is stored and forwarded at each network level before the
  pipeline streams: ``2 log2(nodes) x (level cost + chunk / the connection's rate)``.
  For LL and LL128 the connection's rate is the network's: the chunk with its flags
  over one channel's share of its NIC (:func:`net_channel_gb_per_s`; each channel's
  proxy connection goes through one NIC, and channels beyond the graph's share them).
  The Tree/LL algorithm bandwidth is not that rate: NCCL divides it by 3.8 for LL's
  GPU-side cost (``busBw * 1.0/3.8``, ``src/graph/tuning.cc:307`` at v2.28.3-1), a cost
  already in ``size / bw``; aws-ofi-nccl's own model prices LL over the network at the
  network's rate halved for the flags (``bw *= 0.5``, ``nccl_ofi_model.cpp:105-111``).
  Simple (Tree, NVLSTree) keeps the algorithm's rate, as the fitted level cost assumes;
- ring: every rank sends every step, and a step over the network cannot complete
  faster than the transport's turn-around of one step (:data:`RING_STEP_FLOOR_US`):
  a step of transfer time ``x`` takes ``sqrt(floor^2 + x^2)`` (:data:`RING_STEP_FORM`).

What differs per transport is the cost of a step or level (:data:`TRANSPORTS`):

- InfiniBand and RoCE (NCCL's verbs transport): the level's latency is NCCL's own
  ``hwLat[NET]``, already in the table, so the level adds only its chunk's transfer.
  InfiniBand has no ring step floor (NCCL's source gives none and no `fit` sweep crosses
  an InfiniBand network at mid sizes with a ring, so none is assumed). RoCE's ring steps
  pay a floor FITTED on the one RoCE sweep marked ``fit`` (GCP A3 Ultra, 2 VMs,
  all-gather 1 KB-8 GB, ring all the way; :func:`.calibration.fit_net_pipeline`); every
  RoCE ring step pays it (the verbs transport has no eager limit). That sweep has no tree
  level, so RoCE's level constant is not fitted and stays 0;
- EFA (aws-ofi-nccl v1.16.3): the plugin's own cost model states a network message's
  latency on p5 as ``net_lat`` = 20 us (``src/tuner/nccl_ofi_model.cpp:15``, "2 nodes,
  8B RDMA w/imm lat", ``include/tuner/nccl_ofi_tuner_model.h:7``) plus, for Simple only,
  ``TUNER_NET_COMP_OVERHEAD`` = 3 us for the proxy's completion handling
  (``nccl_ofi_model.cpp:65-67``, ``include/nccl_ofi_param.h:317``); a level costs that
  latency instead of NCCL's ``hwLat[NET]`` (the table's, subtracted so nothing is counted
  twice). The plugin's RDMA protocol sends a message of at most ``EAGER_MAX_SIZE`` =
  8 KiB eagerly (``include/nccl_ofi_param.h:256``); a larger one is written into the
  receiver's buffer once the receiver's control message with its address arrives
  (``src/nccl_ofi_rdma.cpp:907-918``). That rendezvous level costs
  :data:`NET_LEVEL_US` more and a ring step at least :data:`RING_STEP_FLOOR_US`, the two
  constants no source gives (FITTED on the calibration sweeps marked ``fit`` only,
  :func:`.calibration.fit_net_pipeline`). So a small Tree/LL call (eager messages) pays
  the plugin's latency per level and no fitted constant.

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
from .nccl_tuning import HW_LAT, PROTOS, _log2i

# buffSizes defaults (init.cc:677-690, v2.28.3-1), bytes
BUFF_BYTES = {"ll": 8 * 512 * NCCL_STEPS * 16, "ll128": 120 * 640 * NCCL_STEPS * 8,
              "simple": 4 << 20}
RING_SIMPLE_CHUNK_STEPS = NCCL_STEPS // 2   # ALLREDUCE/ALLGATHER/REDUCESCATTER_CHUNKSTEPS
LL128_DATA = 15 / 16                        # NCCL_LL128_DATAELEMS / NCCL_LL128_LINEELEMS
# Bytes on the wire per data byte (the flags travel with the data): LL 16 B lines of 8 B
# data (src/include/device.h ncclLLFifoLine), LL128 128 B lines of 120 B data.
WIRE_PER_DATA = {"ll": 2.0, "ll128": 128 / 120, "simple": 1.0}


@dataclass(frozen=True)
class Transport:
    """What one network's transport charges beyond NCCL's table (see the module docstring).

    ``net_lat_us``: a network message's latency by the transport's own source (None:
    NCCL's ``hwLat[NET]`` holds, as on its verbs transport); ``simple_overhead_us``: more
    for a Simple message; ``eager_max_bytes``: the largest message sent without a
    rendezvous (None: no rendezvous priced); ``level_us``: what a rendezvous level adds
    (FITTED); ``floor_us``: a ring step's shortest time (FITTED).
    """

    name: str
    net_lat_us: float | None = None
    simple_overhead_us: float = 0.0
    eager_max_bytes: float | None = None
    level_us: float = 0.0
    floor_us: float = 0.0


EFA_NET_LAT_US = 20.0          # aws-ofi-nccl v1.16.3 nccl_ofi_model.cpp:15 (p5 / p5e net_lat)
EFA_COMP_OVERHEAD_US = 3.0     # TUNER_NET_COMP_OVERHEAD default, nccl_ofi_param.h:317
EFA_EAGER_MAX_BYTES = 8192     # EAGER_MAX_SIZE default, nccl_ofi_param.h:256
# Shortest time of one ring step over the network, us (FITTED on the `fit` sweeps, see
# the module docstring; calibration.fit_net_pipeline re-derives them): EFA on the 2- and
# 16-instance p5 sweeps, RoCE on the GCP A3 Ultra sweep gcp-a3-ultra-ag-2n-gib; 0 where no
# source or fit sweep gives one.
RING_STEP_FLOOR_US = {"infiniband": 0.0, "roce": 0.6, "efa": 7.3}
# How a ring step's transfer x and the floor F combine: sqrt(F^2 + x^2) (the step's time
# turns over smoothly from the floor to its transfer). Chosen on the EFA fit sweeps: over
# their 32 points it fits better than max(F, x) (calibration.pipeline_fit;
# tests/unit/cost/test_net_transport.py re-runs both); so it does on the RoCE fit sweep.
RING_STEP_FORM = "hypot"
# What a tree level whose message goes by rendezvous adds beyond the transport's latency
# and the chunk's transfer, us (FITTED on the `fit` sweeps: EFA on the p5 sweeps); 0 where
# none is priced or, as on RoCE, no fit sweep has a tree level to fit it on.
NET_LEVEL_US = {"infiniband": 0.0, "roce": 0.0, "efa": 50.0}
TRANSPORTS = {
    "infiniband": Transport("infiniband"),
    "roce": Transport("roce", level_us=NET_LEVEL_US["roce"],
                      floor_us=RING_STEP_FLOOR_US["roce"]),
    "efa": Transport("efa", EFA_NET_LAT_US, EFA_COMP_OVERHEAD_US, EFA_EAGER_MAX_BYTES,
                     NET_LEVEL_US["efa"], RING_STEP_FLOOR_US["efa"]),
}


@dataclass(frozen=True)
class PipelineTerms:
    """What one call's network pipeline consists of (from NCCL's chunking).

    ``levels``: network levels a tree's first chunk crosses (up and down);
    ``level_chunk_us``: one chunk's transfer at the connection's rate;
    ``level_msg_bytes``: the message the proxy posts per level and channel (with flags);
    ``level_nccl_lat_us``: NCCL's ``hwLat[NET]`` per level, already in the table;
    ``ring_steps``: a ring's steps (all loops); ``ring_step_us``: one step's transfer
    at the channel's rate; ``ring_msg_bytes``: one step's message per channel;
    ``ring_net_steps``: the network steps NCCL's ring latency charges (once per call);
    ``ring_nccl_lat_us``: NCCL's ``hwLat[NET]`` for one of them; ``simple``: Simple protocol.
    """

    levels: int = 0
    level_chunk_us: float = 0.0
    level_msg_bytes: float = 0.0
    level_nccl_lat_us: float = 0.0
    ring_steps: int = 0
    ring_step_us: float = 0.0
    ring_msg_bytes: float = 0.0
    ring_net_steps: int = 0
    ring_nccl_lat_us: float = 0.0
    simple: bool = False

    def _lat_delta_us(self, t: Transport, nccl_lat_us: float) -> float:
        """The transport's own latency of one network message in place of NCCL's, us."""
        if t.net_lat_us is None:
            return 0.0
        return max(0.0, t.net_lat_us + (t.simple_overhead_us if self.simple else 0.0)
                   - nccl_lat_us)

    def _rendezvous(self, t: Transport, msg_bytes: float) -> bool:
        return t.eager_max_bytes is not None and msg_bytes > t.eager_max_bytes

    def level_source_us(self, t: Transport) -> float:
        """What one tree level adds by the sources alone: the transport's latency in place
        of NCCL's and the chunk's transfer, us."""
        return self._lat_delta_us(t, self.level_nccl_lat_us) + self.level_chunk_us

    def level_fitted(self, t: Transport) -> bool:
        """Whether a tree level pays the fitted rendezvous constant."""
        return self.levels > 0 and self._rendezvous(t, self.level_msg_bytes)

    def ring_source_us(self, t: Transport) -> float:
        """What a ring adds by the sources alone: the transport's latency in place of
        NCCL's on the network steps NCCL's table charges, us."""
        return self.ring_net_steps * self._lat_delta_us(t, self.ring_nccl_lat_us)

    def ring_floored(self, t: Transport) -> bool:
        """Whether the ring's steps pay the fitted step floor: they go by rendezvous where
        the transport has one, always where it has none."""
        if t.eager_max_bytes is None:
            return True
        return self._rendezvous(t, self.ring_msg_bytes)

    def cost_us(self, t: Transport, floor_us: float | None = None,
                level_us: float | None = None) -> float:
        """The time the pipeline adds to ``lat + size / bw`` on transport ``t``, us
        (``floor_us`` / ``level_us`` replace its fitted constants, for the fit)."""
        floor = t.floor_us if floor_us is None else floor_us
        level = t.level_us if level_us is None else level_us
        x = self.ring_step_us
        ring = self.ring_source_us(t)
        if self.ring_steps and self.ring_floored(t):
            ring += self.ring_steps * (math.hypot(floor, x) - x)  # RING_STEP_FORM
        tree = self.levels * (self.level_source_us(t)
                              + (level if self.level_fitted(t) else 0.0))
        return ring + tree


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


def net_channel_gb_per_s(net_channels: int, bw_inter_gb_per_s: float, ctas: int) -> float:
    """The network rate of one channel as NCCL's proxy moves it, GB/s: each channel's
    connection goes through one NIC (``bwInter`` per channel in NCCL's graph); a call
    running more channels than the graph has (channels duplicated over the same NICs)
    shares each NIC between them.

    >>> net_channel_gb_per_s(8, 48.0, 4), net_channel_gb_per_s(8, 48.0, 16)
    (48.0, 24.0)
    """
    if net_channels <= 0 or bw_inter_gb_per_s <= 0:
        return 0.0
    return bw_inter_gb_per_s * net_channels / max(ctas, net_channels)


def pipeline_terms(collective: str, algo: str, proto: str, size_bytes: float, n_ranks: int,
                   n_nodes: int, algbw_gb_per_s: float, ctas: int,
                   nvls_heads: int = 1, net_channel_rate_gb_per_s: float = 0.0
                   ) -> PipelineTerms:
    """The network pipeline of one call (see the module docstring); empty inside one
    node or for algorithms whose network part is not a ring or a tree.

    ``net_channel_rate_gb_per_s``: one channel's network rate (:func:`net_channel_gb_per_s`);
    a Tree/LL or Tree/LL128 level moves its chunk (with its flags) at that rate, not at
    the algorithm's bandwidth, which carries LL's GPU-side cost (0: the algorithm's)."""
    if n_nodes < 2 or size_bytes <= 0 or algbw_gb_per_s <= 0 or ctas <= 0:
        return PipelineTerms()
    pi = PROTOS.index(proto)
    simple = proto == "simple"
    call_us = size_bytes / (algbw_gb_per_s * 1e3)
    net_algo = "tree" if n_ranks == n_nodes else algo  # tuning.cc: one GPU a node -> tree row
    if algo == "ring":
        per_loop = 2 * (n_ranks - 1) if collective == "all_reduce" else n_ranks - 1
        loops = max(1, math.ceil(size_bytes / (ctas * n_ranks * ring_chunk_bytes(proto))))
        steps = loops * per_loop
        net_steps = 2 * (n_nodes - 1) if collective == "all_reduce" else n_nodes - 1
        msg = size_bytes / (loops * ctas * n_ranks) * WIRE_PER_DATA[proto]
        return PipelineTerms(ring_steps=steps, ring_step_us=call_us / steps,
                             ring_msg_bytes=msg, ring_net_steps=net_steps,
                             ring_nccl_lat_us=HW_LAT["net"][net_algo][pi], simple=simple)
    levels = 2 * max(1, _log2i(n_nodes))
    if algo == "tree" and collective == "all_reduce":
        if proto == "ll128":
            chunk = tree_ll128_chunk(size_bytes, ctas, n_ranks, n_nodes)
        else:
            chunk = BUFF_BYTES[proto] / NCCL_STEPS / (2 if proto == "ll" else 1)
        chunk = min(chunk, size_bytes / ctas)
        if proto != "simple" and net_channel_rate_gb_per_s > 0:
            chunk_us = chunk * WIRE_PER_DATA[proto] / (net_channel_rate_gb_per_s * 1e3)
        else:
            chunk_us = chunk * ctas / (algbw_gb_per_s * 1e3)
        return PipelineTerms(levels=levels, level_chunk_us=chunk_us,
                             level_msg_bytes=chunk * WIRE_PER_DATA[proto],
                             level_nccl_lat_us=HW_LAT["net"][net_algo][pi], simple=simple)
    if algo == "nvls_tree":
        heads = max(1, nvls_heads)
        chunk = min(_nvls_chunk(size_bytes, ctas, heads, True, n_nodes),
                    size_bytes / (ctas * heads))
        return PipelineTerms(levels=levels,
                             level_chunk_us=chunk * ctas * heads / (algbw_gb_per_s * 1e3),
                             level_msg_bytes=chunk,
                             level_nccl_lat_us=HW_LAT["net"][net_algo][pi], simple=simple)
    return PipelineTerms()


def net_pipeline_us(terms: PipelineTerms, transport: str) -> float:
    """The pipeline's cost on ``transport`` (:data:`TRANSPORTS`) with its constants, us."""
    return terms.cost_us(TRANSPORTS[transport])
