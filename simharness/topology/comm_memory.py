"""GPU memory of one NCCL communicator, as NCCL allocates it.

Every figure is per GPU (the worst-placed rank's share of what its
communicator connects), from NCCL's source at v2.28.3-1:

- **cuMem alignment.** With cuMem (the default since 2.19) every device
  allocation is rounded up to the allocation granularity, 2 MiB
  (``src/include/alloc.h``: ``ALIGN_SIZE(size, granularity)``), and the
  transports align their buffers to ``CUDA_IPC_MIN`` = 2 MiB.
- **Connection buffers.** A connection holds one buffer per protocol:
  ``DEFAULT_BUFFSIZE`` 4 MiB for Simple, 8 lines x 512 threads x 8 steps x 16 B
  = 512 KiB for LL, 120 x 640 x 8 x 8 B = 4.6875 MiB for LL128. Over NVLink
  (P2P transport, ``src/transport/p2p.cc:377-448``) the receiver holds them
  (9.19 MiB -> 10 MiB) and the sender a 2 MiB ``ncclSendMem`` block (with
  P2P read, Ampere, the Simple buffer moves to the sender: 6 + 6 MiB). Over the
  network (``src/transport/net.cc:878-913, 1046-1049``) *both ends* hold
  buffers in GPU memory with GPUDirect RDMA: the sender Simple + LL128
  (10 MiB), the receiver all three (10 MiB).
- **Per channel.** Each channel of the communicator (``comm->nChannels``) gets
  three device allocations at init (``src/channel.cc:42-56``: peer structs,
  peer pointers, ring user ranks), each rounded to 2 MiB: 6 MiB.
- **Per algorithm connected** (NCCL >= 2.22 connects lazily, on an
  algorithm's first use, ``NCCL_RUNTIME_CONNECT=1``): a ring rank has one
  send and one receive connection per channel; a tree rank up to its parent
  and children, both ways; PAT connects every rank to its peers at distances
  1, 2, 4, ... both ways: 2 ceil(log2 n) - 1 distinct peers for n a power of
  two (``src/transport/generic.cc:64-86``); NVLS allocates one unicast
  buffer bound to the multicast object of ``nvlsChannels x 2 x (128 KiB x 8)``
  per head (``src/transport/nvls.cc:333-342``), plus a 2 MiB credit block.
  Averaged over channels, since the roles rotate.

A communicator made by ``ncclCommSplit`` with ``splitShare`` reuses its
parent's buffers and pays only its fixed structures. Without a group shape
the channel counts of :class:`CommMemoryInputs` are used on one node of 8.

>>> m = comm_memory(CommMemoryInputs(algos=("ring",)))
>>> round(m.total_mb), m.lines()[1]
(308, 'ring: 16 channels x 12 MiB per GPU (NVLink hop: recv 10 MiB + send 2 MiB)')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import whole_number_problem
from .errors import TopologyError
from .nccl_model import GroupShape
from .nccl_tuning import DEFAULT_NCCL, nccl_version

MIB = 1 << 20
ALIGN = 2 * MIB  # cuMem granularity / CUDA_IPC_MIN
PROTO_BUFFER_BYTES = {"simple": 4 * MIB, "ll": 8 * 512 * 8 * 16,
                      "ll128": 120 * 640 * 8 * 8}
KNOWN_ALGOS = ("ring", "tree", "nvls", "nvls_tree", "collnet_direct", "collnet_chain", "pat")
PER_CHANNEL_ALLOCS = 3           # channel.cc:42-56
NVLS_CHUNK = 128 * 1024          # NCCL_NVLS_CHUNKSIZE default (nvls.cc:152)
NCCL_STEPS = 8
# Ours: device communicator, channel array and work structures, each one 2 MiB block.
DEFAULT_FIXED_MB = 3 * ALIGN / 1e6


def _align(n: float) -> float:
    return float(math.ceil(n / ALIGN) * ALIGN) if n > 0 else 0.0


@dataclass(frozen=True)
class CommMemoryInputs:
    """What the memory of one communicator depends on (all shown in reports).

    ``channels``/``nvls_channels`` are used only when no group shape is given
    (with one, NCCL's graph search decides them).
    """

    algos: tuple[str, ...] = ("ring",)
    protocols: tuple[str, ...] = ("simple", "ll", "ll128")
    channels: int = 16
    nvls_channels: int = 16
    lazy_connect: bool = True      # NCCL >= 2.22 (NCCL_RUNTIME_CONNECT=1)
    split_share: bool = False      # ncclCommSplit with splitShare = 1
    fixed_mb: float = DEFAULT_FIXED_MB

    def __post_init__(self):
        for a in self.algos:
            if a not in KNOWN_ALGOS:
                raise TopologyError(f"unknown algorithm {a!r} for communicator memory; "
                                    f"expected some of ring, tree, nvls, nvls_tree, "
                                    "collnet_direct, collnet_chain, pat")
        for p in self.protocols:
            if p not in PROTO_BUFFER_BYTES:
                raise TopologyError(f"unknown protocol {p!r}; expected some of "
                                    f"{', '.join(PROTO_BUFFER_BYTES)}")
        for name in ("channels", "nvls_channels"):
            if problem := whole_number_problem(name, getattr(self, name), 0):
                raise TopologyError(problem)
        if not self.fixed_mb >= 0:
            raise TopologyError(f"fixed_mb must be >= 0, got {self.fixed_mb!r}")


@dataclass(frozen=True)
class CommMemory:
    inputs: CommMemoryInputs
    parts: dict[str, float] = field(default_factory=dict)  # name -> bytes
    how: dict[str, str] = field(default_factory=dict)      # name -> how it is computed

    @property
    def total_mb(self) -> float:
        return (sum(self.parts.values()) + self.inputs.fixed_mb * 1e6) / 1e6

    def lines(self) -> list[str]:
        """One line per part: how it is computed."""
        i = self.inputs
        out = [f"{name}: {self.how.get(name, '')}".rstrip(": ") for name in self.parts]
        if i.split_share:
            out.append("buffers shared with the parent communicator (ncclCommSplit, splitShare=1)")
        out.append(f"fixed: {i.fixed_mb:.1f} MB (assumed: 3 device structures of 2 MiB)")
        connect = ("lazily, per algorithm used (NCCL >= 2.22)" if i.lazy_connect
                   else "at init, every algorithm (NCCL < 2.22)")
        out.append(f"connections made {connect}; every allocation rounded to 2 MiB (cuMem)")
        return out

    def to_dict(self) -> dict:
        return {"total_mb": round(self.total_mb, 1), "lines": self.lines(),
                "parts_mb": {k: round(v / 1e6, 1) for k, v in self.parts.items()}}


@dataclass(frozen=True)
class _Hop:
    """Per-GPU bytes of one connection, by transport."""

    p2p_recv: float
    p2p_send: float
    net_recv: float
    net_send: float


def _hops(protocols: tuple[str, ...], p2p_read: bool) -> _Hop:
    size = {p: PROTO_BUFFER_BYTES[p] for p in protocols}
    small = 4096  # ncclSendMem / ncclRecvMem headers
    simple = size.get("simple", 0)
    p2p_recv = _align(small + sum(size.values()) - (simple if p2p_read else 0))
    p2p_send = _align(small + (simple if p2p_read else 0))
    net_send = _align(sum(v for p, v in size.items() if p != "ll"))  # LL stays in host memory
    net_recv = _align(sum(size.values()))
    return _Hop(p2p_recv, p2p_send, net_recv, net_send)


def pat_peers(n: int) -> int:
    """Distinct PAT peers of a rank: r +- 1, 2, 4, ... mod n (generic.cc:64-86).

    >>> pat_peers(16), pat_peers(2), pat_peers(12)
    (7, 1, 6)
    """
    peers = set()
    mask = 1
    while mask < n:
        peers.add(mask % n)
        peers.add((n - mask) % n)
        mask <<= 1
    peers.discard(0)
    return len(peers)


def comm_memory(inputs: CommMemoryInputs, *, all_algos: tuple[str, ...] = ("ring", "tree"),
                nvls_capable: bool = False, nccl: str = DEFAULT_NCCL,
                shape: GroupShape | None = None) -> CommMemory:
    """Bytes of one communicator's buffers per part (per GPU).

    With ``lazy_connect`` only ``inputs.algos`` (the algorithms the
    communicator runs) are connected; otherwise every algorithm NCCL would set
    up on this machine (``all_algos``, plus NVLS when ``nvls_capable``).
    ``shape``: the group (:class:`.nccl_model.GroupShape`); its graph search
    gives the channels, NVLS heads and where each hop runs (NVLink or network).
    """
    version = nccl_version(nccl)
    i = inputs
    algos = list(i.algos) if i.lazy_connect else list(all_algos) + (["nvls"] if nvls_capable
                                                                    else [])
    if shape is not None and shape.arch is not None and shape.n_ranks > 1:
        g = shape.graphs(version)
        channels, nvls_channels = g.n_channels, g.nvls_channels
        heads = g.nvls.n_channels if g.nvls is not None else 0
        ppn = max(1, round(shape.ppn))
        nodes, n = shape.n_nodes, shape.n_ranks
        p2p_read = shape.arch == "ampere"
        if not i.lazy_connect and heads == 0:
            algos = [a for a in algos if a not in ("nvls", "nvls_tree")]
    else:
        channels, nvls_channels = i.channels, i.nvls_channels
        ppn, nodes, n, heads, p2p_read = 8, 1, 8, 8, False
    hop = _hops(i.protocols, p2p_read)
    p2p_edge = hop.p2p_recv + hop.p2p_send   # both ends of an NVLink hop, on two GPUs
    net_edge = hop.net_recv + hop.net_send   # both ends of a network hop
    parts: dict[str, float] = {}
    how: dict[str, str] = {}
    mib = MIB
    if not i.split_share:
        parts["channels"] = float(channels * PER_CHANNEL_ALLOCS * ALIGN)
        how["channels"] = (f"{channels} channels x {PER_CHANNEL_ALLOCS} device structures x "
                           "2 MiB")
        for a in dict.fromkeys(algos):
            if a == "ring":
                # per node and channel: ppn-1 NVLink hops and one network hop in and out
                per_gpu = ((ppn - (1 if nodes > 1 else 0)) * p2p_edge
                           + (net_edge if nodes > 1 else 0)) / ppn
                parts[a] = channels * per_gpu
                how[a] = (f"{channels} channels x {per_gpu / mib:g} MiB per GPU ("
                          + ("NVLink hop: recv "
                             f"{hop.p2p_recv / mib:g} MiB + send {hop.p2p_send / mib:g} MiB"
                             if nodes == 1 else
                             f"a network hop of {net_edge / mib:g} MiB, both ends" if ppn == 1
                             else
                             f"{ppn - 1} NVLink hops of {p2p_edge / mib:g} MiB and a network "
                             f"hop of {net_edge / mib:g} MiB (both ends) per {ppn} GPUs")
                          + ")")
            elif a in ("tree", "collnet_chain"):
                # a chain of ppn GPUs both ways; ~2 tree edges per node across nodes
                per_gpu = ((ppn - 1) * 2 * p2p_edge
                           + (2 * net_edge * (nodes - 1) / nodes if nodes > 1 else 0)) / ppn
                parts[a] = channels * per_gpu
                how[a] = (f"{channels} channels x {per_gpu / mib:.3g} MiB per GPU (chain of "
                          f"{ppn} both ways" + (", tree edges between nodes both ways"
                                                if nodes > 1 else "") + ")")
            elif a == "pat":
                peers = pat_peers(n)
                parts[a] = channels * peers * net_edge
                how[a] = (f"{channels} channels x {peers} peers (2 ceil(log2 {n}) - 1 for a power "
                          f"of two) x {net_edge / mib:g} MiB (network hop, both ends)")
            elif a in ("nvls", "nvls_tree"):
                if heads == 0:
                    continue
                unicast = _align(nvls_channels * 2 * NVLS_CHUNK * NCCL_STEPS * heads)
                parts["nvls"] = unicast + ALIGN
                how["nvls"] = (f"{nvls_channels} NVLS channels x 2 x 1 MiB x {heads} heads "
                               f"= {unicast / mib:g} MiB + 2 MiB credits")
                if a == "nvls_tree" and nodes > 1:
                    parts["nvls_tree"] = channels * 2 * net_edge / ppn
                    how["nvls_tree"] = (f"{channels} channels x tree edges between nodes "
                                        f"({2 * net_edge / mib:g} MiB per node)")
            elif a == "collnet_direct":
                per_gpu = (ppn - 1) * 2 * p2p_edge / ppn + net_edge
                parts[a] = channels * per_gpu
                how[a] = (f"{channels} channels x {per_gpu / mib:.3g} MiB per GPU (all-to-all "
                          "with the heads over NVLink, a network hop at the head)")
    return CommMemory(i, parts, how)
