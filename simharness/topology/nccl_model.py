"""NCCL's own cost model: which algorithm and protocol NCCL picks, and what it costs.

NCCL prices every (collective, algorithm, protocol) once per communicator
(``ncclTopoTuneModel`` in ``src/graph/tuning.cc``) as a latency ``lat`` (us)
and an algorithm bandwidth ``bw`` (GB/s), then runs each call with the
combination of least ``time = lat + bytes / (1000 * bw)``
(``ncclTopoGetAlgoTime``). This module re-implements that table from the
constants and formulas of NCCL's source (written here, not copied) for one
release at a time, ``nccl="2.23"`` (tag v2.23.4-1) or ``"2.28"`` (v2.28.3-1,
the default); where a number is ours and not NCCL's, the comment says so.
Its inputs are NCCL's graph search (:mod:`.nccl_graph`): per algorithm the
channels, ``bwIntra``/``bwInter``, pattern and path types, and
``comm->nChannels``. The ring figure is capped by what the links deliver
(:mod:`.cost`'s link model, shared when other groups run).
The constants it prices with (and the name / size / release checks) are in
:mod:`.nccl_tuning`; the launch and pipeline fill added to NCCL's own time are in
:mod:`.nccl_ramp`.

Sources (NVIDIA/nccl ``src/graph/tuning.cc``, 2.28 line numbers unless noted):

- ``baseLat`` (per algorithm x protocol) and ``hwLat`` (per link type NVLink /
  PCI / network x algorithm x protocol), in us (tuning.cc:142-168);
- ring: ``2(n-1)`` (all-reduce) or ``n-1`` steps, of which ``2(nodes-1)`` resp.
  ``nodes-1`` cross the network and pay the network latency, the rest the
  NVLink latency, raised to the CPU's network post overhead (1 us on x86 Intel,
  x3 for Simple) on multi-node rings (tuning.cc:361-380);
- tree: ``2 ((ppn-1) intraLat + log2(nodes) interLat)`` (log-scaled);
  NVLSTree ``intraLat + 2 log2(nodes) interLat``; PAT ``8 + log2(nodes)
  interLat/3.5 + 2.8 n``; NVLS ``intraLat (+ interLat over nodes)``;
- bandwidth: ``nChannels x bw`` of the algorithm's graph, ``bw = bwIntra`` on
  <= 2 nodes (so Tree on 2 nodes runs at the *tree graph's* speed, not the full
  NVLink rate) and ``bwInter`` beyond (tuning.cc:284-301); refinements: Ring/LL
  ``min(llMaxBw, bw/2)``, Ring/LL128 ``x0.92`` capped per channel, Tree
  ``x0.92`` capped per channel, Tree/LL ``/3.8``, Tree/LL128 ``x7/9`` (one node)
  or ``x120/128``, Tree ``x0.85`` when the tree graph is a plain TREE pattern
  (tuning.cc:309), PAT ``x0.75`` (2.24+; ``x0.85`` in 2.23); conversion to
  algorithm bandwidth: ring ``n/nsteps``, tree and CollNet ``1/2``, NVLS and
  NVLSTree ``n/nsteps`` (2.28) or ``5/6`` (2.23);
- NVLS (2.28): ``bwIntra x nvlsEfficiency (0.85 Hopper, 0.74 Blackwell) x
  (nCh-1)/nCh``, x2 for all-reduce, capped by ``bwInter`` (x2 for NVLSTree on
  2 nodes) and, for NVLSTree, the per-channel cap new in 2.28; 2.23:
  ``min(bwIntra, bwInter)`` with no efficiency factor;
- ``llMaxBws``, ``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``,
  ``perChMaxTreeBws`` per architecture and node bucket (1, 2, >2 nodes); 2.28
  has Blackwell rows of its own, 2.23 prices Blackwell with Hopper's;
- ``treeCorrectionFactor`` per protocol and power of two of the size;
- ring plateau: multi-node Ring/Simple all-reduce latency x1.4 (SM80+) once
  every rank's share of every channel (``comm->nChannels``) is >= 64 B.

Enable rules: Tree only for all-reduce; NVLS/NVLSTree/CollNet/PAT only Simple;
NVLS on one NCCL node (an NVSwitch domain with multicast, Hopper+, > 2 GPUs;
a multi-node NVLink domain is one node, NVLS allowed there since 2.21), across
nodes only with CollNet; NVLSTree only across nodes; PAT for all-gather /
reduce-scatter with one GPU per node; LL128 per :func:`_ll128_enabled` (2.23:
not on Blackwell).

Not modelled (documented limits): aggregation of several operations in one
group, tuner plugins other than aws-ofi-nccl's p5 region tuner (:mod:`.ofi_tuner`),
user ``NCCL_ALGO``/``NCCL_PROTO`` overrides other than the ``algo``/``proto`` arguments.

>>> shape = GroupShape(n_ranks=8, n_nodes=1, arch="hopper", intra_gb_per_s=370.8,
...                    ring_gb_per_s=370.8, nvls=True)
>>> best = choose(shape, "all_reduce", 8 * 2**30)
>>> best.algo, best.proto, round(best.busbw_gb_per_s), best.n_channels
('nvls', 'simple', 474, 16)
>>> small = choose(shape, "all_reduce", 1024)
>>> small.algo, small.proto, round(small.time_us, 1)
('ring', 'll', 15.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import TopologyError
from .nccl_graph import (
    COMPCAP,
    PATH_NVB,
    PATH_PXB,
    PATH_PXN,
    TREE,
    CommGraphs,
    Graph,
    NodeView,
    plan_channels,
    search,
)
from .nccl_ramp import (
    LAUNCH_MODES,
    LAUNCH_US,
    LAUNCH_US_SINGLE_PER_GPU,
    NCCL_STEPS,
    NVLS_AG_RS_ONE_NODE_STAGES,
    NVLS_CHUNK_BYTES,
    NVLS_ONE_NODE_STAGES,
    SIMPLE_STEP_BYTES,
    _nvls_chunk,
    launch_overhead_us,
    launch_period_us,
    nvls_loops,
    pipeline_fill_us,
)
from .nccl_tuning import (
    _ALIASES,
    ALGOS,
    ARCHS,
    BASE_LAT,
    COLLECTIVES,
    DEFAULT_NCCL,
    HW_LAT,
    LL_MAX_BW,
    LL_MAX_BW_INTEL,
    MAX_BYTES,
    MAX_THREADS,
    NCCL_VERSIONS,
    NET_OVERHEAD_US,
    NVLINK_BW_PER_LINK,
    NVLS_EFFICIENCY,
    PAT_FACTOR,
    PER_CH_MAX_NVLS_TREE,
    PER_CH_MAX_RING_LL128,
    PER_CH_MAX_TREE,
    PER_CH_MAX_TREE_LL128,
    PROTOS,
    RING_PLATEAU,
    TREE_CORRECTION,
    _choice,
    _log2i,
    bus_factor,
    check_size,
    collective_name,
    nccl_version,
)
from .net_pipeline import (
    EFA_COMP_OVERHEAD_US,
    EFA_EAGER_MAX_BYTES,
    EFA_NET_LAT_US,
    NET_LEVEL_US,
    RING_STEP_FLOOR_US,
    PipelineTerms,
    net_channel_gb_per_s,
    net_pipeline_us,
    pipeline_terms,
)
from .ofi_tuner import describe as ofi_tuner_describe
from .ofi_tuner import region_pick

# The constants, names and checks moved to .nccl_tuning and the launch / pipeline fill to
# .nccl_ramp; they stay importable from here (this module's public surface) for one release.
__all__ = [
    "ALGOS", "ARCHS", "BASE_LAT", "COLLECTIVES", "DEFAULT_NCCL", "HW_LAT", "LAUNCH_MODES",
    "LAUNCH_US", "LAUNCH_US_SINGLE_PER_GPU", "LL_MAX_BW", "LL_MAX_BW_INTEL", "MAX_BYTES",
    "MAX_THREADS", "NCCL_STEPS", "NCCL_VERSIONS", "NET_OVERHEAD_US",
    "NVLINK_BW_PER_LINK",
    "NVLS_AG_RS_ONE_NODE_STAGES", "NVLS_CHUNK_BYTES", "NVLS_EFFICIENCY", "NVLS_ONE_NODE_STAGES",
    "PAT_FACTOR", "PER_CH_MAX_NVLS_TREE", "PER_CH_MAX_RING_LL128", "PER_CH_MAX_TREE",
    "PER_CH_MAX_TREE_LL128", "PROTOS", "RING_PLATEAU", "SIMPLE_STEP_BYTES", "TREE_CORRECTION",
    "CommGraphs", "Estimate", "Graph", "GroupShape", "NodeView", "Table", "_ALIASES", "_choice",
    "_log2i", "_nvls_chunk", "bus_factor", "check_size", "choose", "collective_name",
    "debug_lines", "fabric_lines", "launch_overhead_us", "launch_period_us", "nccl_version",
    "nvls_loops", "pipeline_fill_us", "tune", "tuning_lines",
]


@dataclass(frozen=True)
class GroupShape:
    """What NCCL's tuning sees of one communicator.

    ``n_nodes`` counts NVLink domains (a multi-node NVLink domain is one node,
    ``mnnvl`` says it spans several OS nodes); ``intra_gb_per_s`` is one GPU's
    NVLink bandwidth as NCCL counts it (links x per-link figure);
    ``ring_gb_per_s`` the per-rank ring rate of the link model (what the links
    deliver, shared with ``share`` of it when other groups run: the NCCL ring
    figure is capped by it); ``net_gb_per_s`` the network rate per rank (its
    node's NICs used by the group; 0 on one domain). ``nodes``: what NCCL's
    topology search sees on each node (:class:`.nccl_graph.NodeView`); when
    not given, a DGX-like node (one 400G NIC per GPU on PCIe Gen5) is
    assumed. ``arch=None`` is a non-NCCL transport (gloo): ring/Simple only,
    with ``step_latency_us`` and ``base_latency_us`` from the topology file.
    """

    n_ranks: int
    n_nodes: int
    arch: str | None
    intra_gb_per_s: float
    ring_gb_per_s: float
    net_gb_per_s: float = 0.0
    nvls: bool = False
    collnet: bool = False
    mnnvl: bool = False
    step_latency_us: float = 0.0
    base_latency_us: float = 0.0
    nodes: tuple[NodeView, ...] | None = None
    share: float = 1.0
    transport: str = "infiniband"  # the network's transport ([scale_out] transport)
    net_plugin: str = ""           # an external NCCL net plugin, as the topology names it
    tuner_plugin: str = ""         # an external NCCL tuner plugin, as the topology names it
    tuner: str = ""                # a modelled tuner plugin ("aws-ofi-nccl": .ofi_tuner)

    @property
    def ppn(self) -> float:
        return self.n_ranks / self.n_nodes

    def views(self) -> tuple[NodeView, ...]:
        """The node(s) NCCL's search sees (given, or the DGX-like default)."""
        if self.nodes:
            return self.nodes
        assert self.arch is not None, "views() needs an NCCL architecture"
        ppn = max(1, round(self.ppn))
        return (NodeView(arch=self.arch, ppn=ppn, nvlink_gb_per_s=self.intra_gb_per_s,
                         nics=ppn if self.n_nodes > 1 else 0, nvls=self.nvls),)

    def graphs(self, nccl: str = DEFAULT_NCCL) -> CommGraphs:
        """NCCL's graph search for this group (:func:`.nccl_graph.search`)."""
        return search(self.views(), self.n_nodes, nccl=nccl_version(nccl),
                      collnet=self.collnet)

    def describe(self) -> str:
        return (f"{self.n_ranks} ranks on {self.n_nodes} node(s) ({self.ppn:g} per node), "
                f"{self.arch or 'generic'}, NVLink {self.intra_gb_per_s:.1f} GB/s, ring "
                f"{self.ring_gb_per_s:.1f} GB/s, net {self.net_gb_per_s:.1f} GB/s/rank"
                + (", NVLS" if self.nvls else "") + (", CollNet/SHARP" if self.collnet else "")
                + (", MNNVL" if self.mnnvl else "")
                + (f", {self.transport}" if self.n_nodes > 1 and self.transport != "infiniband"
                   else ""))


@dataclass(frozen=True)
class Estimate:
    """One (algorithm, protocol) priced for one call; times in us, rates in GB/s.

    ``n_channels``: CTAs the kernel launches for this call (the plan's
    channels, :func:`.nccl_graph.plan_channels`); ``ramp_us``: the pipeline
    fill time added to NCCL's own ``lat + size / bw`` (:func:`pipeline_fill_us`).
    """

    collective: str
    algo: str
    proto: str
    size_bytes: float
    latency_us: float
    algbw_gb_per_s: float
    n_ranks: int
    n_channels: int  # CTAs the kernel launches: the channels of this call's plan
    ramp_us: float = 0.0
    transport_us: float = 0.0  # part of ramp_us: the network pipeline's cost
    net_terms: PipelineTerms = field(default_factory=PipelineTerms)  # what it is made of

    @property
    def nccl_time_us(self) -> float:
        """NCCL's own estimate (``ncclTopoGetAlgoTime``): latency + size / bandwidth."""
        if self.n_ranks < 2:
            return 0.0
        return self.latency_us + self.size_bytes / (1000.0 * self.algbw_gb_per_s)

    @property
    def time_us(self) -> float:
        """Predicted time: NCCL's estimate plus the pipeline fill."""
        if self.n_ranks < 2:
            return 0.0
        return self.nccl_time_us + self.ramp_us

    @property
    def busbw_gb_per_s(self) -> float:
        """nccl-tests busbw: size / time x bus factor."""
        if self.n_ranks < 2 or self.time_us == 0:
            return math.inf
        return self.size_bytes / (self.time_us * 1e3) * bus_factor(self.collective,
                                                                    self.n_ranks)

    @property
    def algbw_measured_gb_per_s(self) -> float:
        """nccl-tests algbw: size / time."""
        if self.n_ranks < 2 or self.time_us == 0:
            return math.inf
        return self.size_bytes / (self.time_us * 1e3)

    @property
    def pick(self) -> str:
        return f"{self.algo}/{self.proto}"


@dataclass(frozen=True)
class Table:
    """NCCL's latency/bandwidth table for one collective on one group."""

    collective: str
    shape: GroupShape
    entries: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    nccl: str = DEFAULT_NCCL
    graphs: CommGraphs | None = None

    def estimate(self, algo: str, proto: str, size_bytes: float) -> Estimate:
        lat, bw = self.entries[(algo, proto)]
        s = self.shape
        g = self.graphs
        if algo == "tree" and self.collective == "all_reduce":
            log_size = _log2i(size_bytes / 64) if size_bytes >= 64 else -1
            if 0 <= log_size < 23:
                bw *= TREE_CORRECTION[proto][log_size]
        nch = g.n_channels if g is not None else 1
        if (algo == "ring" and proto == "simple" and s.n_nodes > 1 and s.arch is not None
                and self.collective == "all_reduce"
                and size_bytes / (nch * s.n_ranks) >= 64):
            lat *= RING_PLATEAU
        ctas = 0
        ramp = transport = 0.0
        terms = PipelineTerms()
        if s.n_ranks > 1:
            if g is None:
                ctas = 1
            else:
                threads = MAX_THREADS[proto]
                if (algo == "ring" and proto == "simple"
                        and g.ring.bw_intra * g.ring.n_channels <= 12.0):
                    threads = 256
                if algo == "pat":
                    threads = 0  # comm->maxThreads[PAT] is never set: no reduction
                ctas = plan_channels(g, algo, proto, size_bytes, threads, s.n_ranks)
                ramp = pipeline_fill_us(self.collective, algo, proto, size_bytes, s, g, bw,
                                        ctas)
                heads = g.nvls.n_channels if g.nvls is not None else 1
                terms = pipeline_terms(self.collective, algo, proto, size_bytes, s.n_ranks,
                                       s.n_nodes, bw, ctas, heads,
                                       net_channel_gb_per_s(g.tree.n_channels,
                                                            g.tree.bw_inter, ctas))
                transport = net_pipeline_us(terms, s.transport)
                ramp += transport
        return Estimate(self.collective, algo, proto, size_bytes, lat, bw, s.n_ranks, ctas,
                        ramp, transport, terms)

    def all_estimates(self, size_bytes: float) -> list[Estimate]:
        """Every enabled (algorithm, protocol), in NCCL's order of preference (its time)."""
        return sorted((self.estimate(a, p, size_bytes) for a, p in self.entries),
                      key=lambda e: e.nccl_time_us)

_NCCL_ALGO_NAMES = {"tree": "Tree", "ring": "Ring", "collnet_direct": "CollNetDirect",
                    "collnet_chain": "CollNetChain", "nvls": "NVLS", "nvls_tree": "NVLSTree",
                    "pat": "PAT"}


def tune(shape: GroupShape, collective: str, *, nccl: str = DEFAULT_NCCL) -> Table:
    """NCCL's latency and bandwidth for every enabled (algorithm, protocol).

    ``nccl`` is the NCCL release modelled (:data:`NCCL_VERSIONS`).
    """
    coll = collective_name(collective)
    version = nccl_version(nccl)
    s = shape
    if s.n_ranks < 1 or s.n_nodes < 1 or s.n_nodes > s.n_ranks:
        raise TopologyError(f"a group of {s.n_ranks} ranks cannot span {s.n_nodes} nodes")
    if s.arch is not None and s.arch not in ARCHS:
        raise TopologyError(f"unknown GPU architecture {s.arch!r}; expected one of "
                            f"{', '.join(ARCHS)}")
    n, nodes = s.n_ranks, s.n_nodes
    nsteps = 2 * (n - 1) if coll == "all_reduce" else n - 1
    inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if coll == "all_reduce" else nodes - 1)
    entries: dict[tuple[str, str], tuple[float, float]] = {}
    if n < 2:
        entries[("ring", "simple")] = (0.0, math.inf)
        return Table(coll, s, entries, version)
    if s.arch is None:  # gloo or another non-NCCL transport: a plain ring
        lat = s.base_latency_us + nsteps * s.step_latency_us
        entries[("ring", "simple")] = (lat, s.ring_gb_per_s * n / nsteps)
        return Table(coll, s, entries, version)

    graphs = s.graphs(version)
    for algo in _enabled_algos(s, coll, graphs, version):
        for pi, proto in enumerate(PROTOS):
            if algo not in ("ring", "tree") and proto != "simple":
                continue
            if proto == "ll128" and not _ll128_enabled(s.arch, graphs.graph(algo), version):
                continue
            bw = _algbw(s, s.arch, coll, algo, proto, nsteps, graphs, version)
            if bw > 0:
                entries[(algo, proto)] = (_latency(s, algo, pi, nsteps, inter_steps), bw)
    return Table(coll, s, entries, version, graphs)


def _latency(s: GroupShape, algo: str, pi: int, nsteps: int, inter_steps: int) -> float:
    """Latency (us) of one (algorithm, protocol ``PROTOS[pi]``), tuning.cc:353-401."""
    n, nodes, ppn = s.n_ranks, s.n_nodes, s.ppn
    intra = HW_LAT["nvlink"][algo][pi]
    inter = HW_LAT["net"]["tree" if ppn == 1 else algo][pi]
    base = BASE_LAT[algo][pi]
    if algo == "ring":
        if nodes > 1:
            intra = max(intra, NET_OVERHEAD_US * (3 if PROTOS[pi] == "simple" else 1))
        return base + (nsteps - inter_steps) * intra + inter_steps * inter
    if algo == "tree":
        return base + 2 * ((ppn - 1) * intra + _log2i(nodes) * inter)
    if algo == "collnet_direct":
        return base + 2 * (min(1.0, ppn - 1) * intra + (ppn - 1) * 0.4) + inter
    if algo == "collnet_chain":
        return base + 2 * (ppn - 1) * intra + inter
    if algo == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if algo == "nvls_tree":
        return base + intra + 2 * _log2i(nodes) * inter
    # pat: 8 us base (2.28 baseLatencies; 2.23 writes the 8 into the formula)
    return 8.0 + _log2i(nodes) * (inter / 3.5) + n * 2.8


def _ll128_enabled(arch: str, graph: Graph | None, nccl: str) -> bool:
    """LL128's default enable (tuning.cc:478-494; v2.23.4-1 tuning.cc:322-336).

    2.28: Hopper+ up to typeInter PXN (NCCL_LL128_C2C=1), older GPUs up to PXB;
    typeIntra up to NVB. 2.23: up to PXB (PXN on Hopper+), and only on SM70,
    SM80 and SM90 -- Blackwell runs without LL128.
    """
    if graph is None:
        return False
    cc = COMPCAP[arch]
    if nccl == "2.23":
        ok = graph.type_inter <= PATH_PXB or (cc >= 90 and graph.type_inter <= PATH_PXN)
        ok = ok and cc in (70, 80, 90)
    else:
        ok = graph.type_inter <= (PATH_PXN if cc >= 90 else PATH_PXB)
    return ok and graph.type_intra <= PATH_NVB


def _enabled_algos(s: GroupShape, coll: str, g: CommGraphs, nccl: str) -> list[str]:
    """The algorithms NCCL would price for ``coll`` (tuning.cc:272-282, 459-476;
    enqueue.cc:1776-1790).

    NVLS needs the NVLS graph (NVSwitch with multicast, Hopper+, > 2 GPUs in
    the domain, nvls.cc:160) and, across nodes, CollNet; a multi-node NVLink
    domain is one NCCL node, so NVLS runs there in both releases (MNNVL NVLS
    since 2.21). NVLSTree only across nodes; NVLS/NVLSTree need >= 2 NVLS
    channels (2.28). PAT: all-gather / reduce-scatter with one GPU per node.
    """
    out = ["ring"]
    nvls_graph = g.nvls is not None and g.nvls.n_channels >= (2 if nccl == "2.28" else 1)
    if coll == "all_reduce":
        out.append("tree")
        if s.collnet and s.n_nodes > 1 and g.collnet_chain is not None:
            out.append("collnet_chain")
            if g.collnet_direct is not None:
                out.append("collnet_direct")
        if nvls_graph and s.n_nodes > 1:
            out.append("nvls_tree")
    if nvls_graph and (s.n_nodes == 1 or (s.collnet and coll == "all_reduce")):
        out.append("nvls")
    if coll != "all_reduce" and s.n_nodes == s.n_ranks and s.n_nodes > 1:
        out.append("pat")
    return out


def _nvls_bw(s: GroupShape, arch: str, coll: str, algo: str, graph: Graph, nccl: str,
             idx2: int) -> float:
    """Per-channel NVLS/NVLSTree bandwidth: 2.28 tuning.cc:285-300, 2.23 tuning.cc:182-183."""
    if nccl == "2.28":
        ch = graph.n_channels
        intra = graph.bw_intra * NVLS_EFFICIENCY[arch] * (ch - 1) / ch
        intra *= 2.0 if coll == "all_reduce" else (s.ppn - 1) / s.ppn
        inter = graph.bw_inter * (2 if (s.n_nodes <= 2 and algo == "nvls_tree") else 1)
        bw = min(intra, inter)
        return min(bw, PER_CH_MAX_NVLS_TREE[arch][idx2]) if algo == "nvls_tree" else bw
    if algo == "nvls":
        return min(graph.bw_intra, graph.bw_inter)
    return min(graph.bw_intra, graph.bw_inter if s.n_nodes <= 2 else graph.bw_inter / 2)


def _refine(s: GroupShape, row: str, coll: str, algo: str, proto: str, bus: float, ch: int,
            idx2: int, g: CommGraphs, nccl: str) -> float:
    """NCCL's per-protocol refinements of the bus bandwidth (tuning.cc:303-310)."""
    ll_max = LL_MAX_BW[row][idx2] if s.n_nodes == 1 else LL_MAX_BW_INTEL[idx2]
    if algo == "ring" and proto == "ll":
        bus = min(ll_max, bus * 0.5)
    elif algo == "ring" and proto == "ll128":
        bus = min(bus * 0.92, ch * PER_CH_MAX_RING_LL128[row][idx2])
    if algo == "tree":
        if coll == "all_reduce":
            bus = min(bus * 0.92, ch * PER_CH_MAX_TREE[row][idx2])
        if proto == "ll":
            bus = min(bus / 3.8, ll_max)
        elif proto == "ll128":
            bus = min(bus * (7.0 / 9.0 if s.n_nodes == 1 else 120.0 / 128.0),
                      ch * PER_CH_MAX_TREE_LL128[row][idx2])
        if g.max_tree_pattern == TREE:
            bus *= 0.85  # tuning.cc:309 (2.23: the rank's own tree pattern)
    if algo == "pat":
        bus *= PAT_FACTOR[nccl]
    return bus


def _algbw(s: GroupShape, arch: str, coll: str, algo: str, proto: str, nsteps: int,
           g: CommGraphs, nccl: str) -> float:
    """Algorithm bandwidth (GB/s) of one (algorithm, protocol), tuning.cc:284-351."""
    row = "hopper" if (nccl == "2.23" and arch == "blackwell") else arch
    idx2 = min(s.n_nodes, 3) - 1
    graph = g.graph(algo)
    assert graph is not None
    ch = graph.n_channels
    collnet = algo in ("collnet_direct", "collnet_chain")
    bw = graph.bw_intra if (s.n_nodes <= 2 or collnet) else graph.bw_inter
    if algo in ("nvls", "nvls_tree"):
        bw = _nvls_bw(s, arch, coll, algo, graph, nccl, idx2)
    bus = ch * bw
    if algo == "ring":
        # what the links deliver caps NCCL's channels x bandwidth (ours: the link model)
        bus = min(bus * s.share, s.ring_gb_per_s)
    else:
        bus *= s.share
    bus = _refine(s, row, coll, algo, proto, bus, ch, idx2, g, nccl)
    if algo == "collnet_direct":
        if coll in ("all_gather", "reduce_scatter"):
            return 0.0  # needs the CollNet plugin's iallgather/ireducescatter: not modelled
        factor = s.ppn / ch
        factor -= (factor - 1) / 2
        bus /= factor
        if COMPCAP[arch] >= 90:
            bus *= 0.85
    if algo != "ring" and coll in ("all_gather", "reduce_scatter"):
        return bus  # no bus -> algorithm conversion (tuning.cc:345-346)
    if algo == "ring" or (algo in ("nvls", "nvls_tree") and nccl == "2.28"):
        return bus * s.n_ranks / nsteps
    if algo in ("nvls", "nvls_tree"):
        return bus * 5.0 / 6.0
    return bus * 0.5


def choose(shape: GroupShape, collective: str, size_bytes: float, *, algo: str | None = None,
           proto: str | None = None, nccl: str = DEFAULT_NCCL) -> Estimate:
    """The (algorithm, protocol) NCCL would run for ``size_bytes``, or the forced one.

    NCCL picks by its own time (``nccl_time_us``); the estimate's ``time_us``
    adds the pipeline fill. ``algo``/``proto`` play ``NCCL_ALGO``/``NCCL_PROTO``:
    the pick is limited to them; a combination NCCL would not enable here is an
    error naming it. With the aws-ofi-nccl tuner (``shape.tuner``) its region
    tuner picks among the remaining combinations where it has a region
    (:func:`.ofi_tuner.region_pick`: NCCL filters by ``NCCL_ALGO`` / ``NCCL_PROTO``
    before the v3 tuner sees the table); elsewhere NCCL's own pick stands.
    """
    size = check_size(size_bytes)
    want_a = _choice("algorithm", algo, ALGOS)
    want_p = _choice("protocol", proto, PROTOS)
    table = tune(shape, collective, nccl=nccl)
    options = [e for e in table.all_estimates(size)
               if (want_a is None or e.algo == want_a) and (want_p is None or e.proto == want_p)]
    if options and shape.tuner == "aws-ofi-nccl":
        pick = region_pick(table.collective, size, shape.n_ranks, shape.n_nodes,
                           enabled=[(e.algo, e.proto) for e in options])
        if pick is not None:
            options = [e for e in options if (e.algo, e.proto) == pick]
    if not options:
        have = ", ".join(f"{a}/{p}" for a, p in table.entries)
        raise TopologyError(f"{collective_name(collective)} with algorithm {want_a or 'any'} "
                            f"and protocol {want_p or 'any'} is not available for "
                            f"{shape.describe()} (NCCL {table.nccl}); NCCL would enable: {have}")
    return options[0]


_NCCL_FUNCS = (("AllGather", "all_gather"), ("ReduceScatter", "reduce_scatter"),
               ("AllReduce", "all_reduce"))
_NCCL_PROTO_NAMES = ("LL", "LL128", "Simple")


def _max_threads(algo: str, proto: str, g: CommGraphs) -> int:
    """comm->maxThreads as tuning.cc:231-243 sets it (PAT's is never set: 0)."""
    if algo == "pat":
        return 0
    if algo in ("nvls", "nvls_tree", "collnet_direct", "collnet_chain"):
        return 640 if proto == "simple" else 0
    if algo == "ring" and proto == "simple" and g.ring.bw_intra * g.ring.n_channels <= 12.0:
        return 256
    return MAX_THREADS[proto]


def tuning_lines(shape: GroupShape, *, nccl: str = DEFAULT_NCCL) -> list[str]:
    """NCCL's TUNING table in its own layout (tuning.cc:499-538): blocks of three
    algorithms, ``latency/bandwidth`` per protocol (0.0/0.0: not enabled) for the
    all-gather, reduce-scatter and all-reduce rows (broadcast and reduce are not modelled).
    """
    tables = {coll: tune(shape, coll, nccl=nccl) for _, coll in _NCCL_FUNCS}
    g = tables["all_reduce"].graphs
    out = []
    for block in range(3):
        algos = ALGOS[3 * block:3 * block + 3]
        out.append("  Algorithm   |" + "".join(f" {'':>14s}   {_NCCL_ALGO_NAMES[a]:>14s}   "
                                              f"{'':>14s} |" for a in algos))
        out.append("  Protocol    |" + "".join(f" {p:>14s} |" for _ in range(3)
                                             for p in _NCCL_PROTO_NAMES))
        if g is not None:
            out.append(" Max NThreads |" + "".join(f" {_max_threads(a, p, g):14d} |"
                                                  for a in algos for p in PROTOS))
        for name, coll in _NCCL_FUNCS:
            cells = []
            for a in algos:
                for p in PROTOS:
                    lat, bw = tables[coll].entries.get((a, p), (0.0, 0.0))
                    cells.append(f"{lat:8.1f}/{bw:6.1f} |")
            out.append(f"{name:>13s} |" + "".join(cells))
    return out


def debug_lines(shape: GroupShape, collective: str, *, nccl: str = DEFAULT_NCCL) -> list[str]:
    """What ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH,TUNING`` would show for this group.

    The graph search (per algorithm: pattern, crossNic, nChannels, bwIntra/bwInter,
    path types, in NCCL's words), the communicator's channel counts, then NCCL's
    latency/bandwidth table in its own layout, so a user with a GPU can compare line
    by line; ``collective`` names the row the pick comes from.
    """
    table = tune(shape, collective, nccl=nccl)
    out = [f"NCCL {table.nccl} model for {shape.describe()}"]
    if table.graphs is None:
        out.append("no NCCL graph search (a single rank or a non-NCCL transport)")
        return out
    out.append("graph search (ring, tree, [CollNet chain, CollNet direct,] NVLS):")
    out += [f"NCCL INFO {line}" for line in table.graphs.lines()]
    out.append(f"tuning table (the {table.collective} row prices the pick):")
    out += [f"NCCL INFO {line}" for line in tuning_lines(shape, nccl=nccl)]
    out += fabric_lines(shape)
    return out


# What each network transport changes in NCCL, and what of it the model prices.
_TRANSPORT_NOTES = {
    "infiniband": "InfiniBand through NCCL's own IB verbs transport (net_ib.cc): modelled with "
                  "NCCL's own network latencies and bandwidths (tuning.cc hwLat[NET]), plus "
                  "NCCL's proxy pipeline (net_pipeline.py): each network level of a tree "
                  "stores and forwards its first chunk (NCCL's chunking) at the connection's "
                  "rate (LL and LL128: one channel's share of its NIC, flags included); no "
                  "ring step floor is priced (no source gives one).",
    "roce": "RoCE, priced as NCCL's IB verbs transport (net_ib.cc drives a RoCE port as an "
            "IB port and reports the same port speed to the tuning), proxy pipeline "
            "included; a provider's own net plugin is assumed to cost the same beyond what "
            "is fitted. FITTED on the one published RoCE sweep marked fit (GCP A3 Ultra, 2 "
            "VMs, all-gather 1 KB-8 GB; moved from held-out to fit after the RoCE misses "
            "were seen, so the RoCE held-out figures are not blind): the per-NIC rate (the "
            "topology file's efficiency, from the sweep's plateau; gcp-a4 assumes A3 "
            "Ultra's) and a ring step floor, every RoCE ring step of transfer time x taking "
            f"sqrt({RING_STEP_FLOOR_US['roce']:g}^2 + x^2) us; a tree level adds only its "
            "first chunk (no fit sweep has a RoCE tree level). Assumed: the lossless "
            "settings (PFC/ECN, congestion control) hold, so no loss or back-off; a "
            "provider's NCCL_IB_* settings (GCP's gIB: adaptive routing, 4 QPs per "
            "connection) are not priced; no SHARP/CollNet on Ethernet.",
    "efa": "EFA through a net plugin (NCCL has no EFA transport): NCCL's tuning table as for "
           "InfiniBand, plus the proxy pipeline over EFA (net_pipeline.py): NCCL's "
           "chunking (buffer / NCCL_STEPS, loops, tree chunk rules); a network message costs "
           f"aws-ofi-nccl's own latency ({EFA_NET_LAT_US:g} us, +{EFA_COMP_OVERHEAD_US:g} us "
           "for Simple: the plugin's v1.16.3 cost model) in place of NCCL's hwLat[NET]; a "
           f"message above the plugin's {EFA_EAGER_MAX_BYTES} B eager limit goes by "
           "rendezvous, where two constants FITTED on the published p5 sweeps marked fit "
           "apply (no source gives them): a ring step of transfer time x takes "
           f"sqrt({RING_STEP_FLOOR_US['efa']:g}^2 + x^2) us, and each network level of a "
           f"tree stores and forwards its first chunk with {NET_LEVEL_US['efa']:g} us more; "
           "checked on published p5 all-reduce (8 B-16 GB) and all-gather (32 MB-2 GB) "
           "sweeps of 2-32 instances (the all-gathers dip up to 1.5x below the model at "
           "8-32 MB per rank; Tree/LL at 16-64 KB is slower than the model as NCCL adds "
           "channels); small rings on EFA are not checked against any measurement; no "
           "SHARP/CollNet on EFA.",
}


def fabric_lines(shape: GroupShape) -> list[str]:
    """What the group's network changes in NCCL and what the model assumes of it (for
    ``--explain``); nothing for a group inside one NVLink domain.

    >>> s = GroupShape(n_ranks=16, n_nodes=2, arch="hopper", intra_gb_per_s=370.8,
    ...                ring_gb_per_s=47.0, transport="roce")
    >>> fabric_lines(s)[1].startswith("network: RoCE")
    True
    """
    if shape.n_nodes < 2 or shape.arch is None:
        return []
    out = ["fabric (what the network changes in NCCL; modelled / assumed):",
           "network: " + _TRANSPORT_NOTES[shape.transport]]
    if shape.net_plugin:
        out.append(f"net plugin: {shape.net_plugin}")
    if shape.tuner == "aws-ofi-nccl":
        out.append(f"tuner plugin: {shape.tuner_plugin or shape.tuner}; "
                   + ofi_tuner_describe())
    elif shape.tuner_plugin:
        out.append(f"tuner plugin: {shape.tuner_plugin}; NOT modelled: the table above is "
                   "NCCL's own tuner, and the pick priced is NCCL's (the plugin can pick "
                   "another algorithm, protocol or channel count)")
    out.append("CollNet/SHARP: " + ("enabled (--collnet): CollNet rows are priced" if
                                    shape.collnet else "not used (no --collnet, or the "
                                    "switches have no SHARP)"))
    return out
