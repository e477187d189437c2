"""NCCL's topology search: channels and per-channel bandwidth of each algorithm.

At init every NCCL communicator searches its node for the channels of each
algorithm (``ncclTopoCompute``, ``src/graph/search.cc``): how many channels
(rings, trees, NVLS heads) fit and at which per-channel speed, trying speeds
from a fixed list, highest first. The results -- ``nChannels``, ``bwIntra``,
``bwInter``, ``pattern``, ``typeIntra``/``typeInter`` -- are what NCCL's tuning
model prices (``src/graph/tuning.cc``), and ``connect.cc`` derives the
communicator's channel count (``comm->nChannels``, the CTAs a ring/tree kernel
launches) from them. This module reproduces that search for the machines the
topology files describe (NVSwitch nodes, NICs on the GPUs' PCIe switches),
written from NCCL's source at tags v2.23.4-1 and v2.28.3-1 (file:line below
are v2.28.3-1 unless marked); the recursive path search itself is replaced by
the capacity it checks (:func:`_capacity`): a channel at speed ``s`` takes
``s`` from every link it crosses (``followPath``, search.cc:79-117), so the
channels that fit are the fewest ``floor(capacity / s)`` over the links.

What one node looks like to the search (:class:`NodeView`): the
communicator's GPUs on it (``ppn``; the others are trimmed away,
paths.cc:747-786), their NVLink bandwidth to the NVSwitch in NCCL's units
(links x ``SMxx_NVLINK_BW``, topo.h:16-21), the NICs local to those GPUs
(NCCL keeps every NIC, but a NIC whose GPU is not in the communicator is
only reachable through the CPU, a path the search does not take once it has
channels), a NIC's ``net.bw`` = link speed in Mb/s / 8000 (topo.cc:372) and
the PCIe link as NCCL counts it, ``width * speed / 80`` with 240 per lane
for 32 GT/s (topo.cc:411-478): 48 GB/s for Gen5 x16, 3/4 of the raw rate.

Worked example, one DGX H100 node (8 GPUs, 18 NVLinks x 20.6 = 370.8 GB/s):
the ring search starts at 60 GB/s (sm90SpeedArrayIntra, search.cc:957), fits
``floor(370.8 / 60) = 6`` channels (360 < 370.8, not optimal), tries lower
speeds while they stay above 0.49 of the best (search.cc:1121) without doing
better, then ``ncclTopoDupChannels`` doubles to 12 x 30 (search.cc:937-950);
``connect.cc:452`` doubles again: 24 channels.

>>> g = search(NodeView(arch="hopper", ppn=8, nvlink_gb_per_s=370.8), n_nodes=1)
>>> g.ring.n_channels, g.ring.bw_intra, g.n_channels
(12, 30.0, 24)
>>> g = search(NodeView(arch="hopper", ppn=8, nvlink_gb_per_s=370.8, nics=8), n_nodes=4)
>>> g.ring.n_channels, g.ring.bw_inter, g.tree.pattern_name, g.n_channels
(8, 48.0, 'TREE', 16)
>>> g = search(NodeView(arch="hopper", ppn=1, nvlink_gb_per_s=370.8, nics=1), n_nodes=16)
>>> g.ring.n_channels, g.ring.bw_inter, g.n_channels
(2, 24.0, 4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

from .errors import TopologyError

# NCCL_TOPO_PATTERN_* (src/include/graph.h:86-91)
BALANCED_TREE, SPLIT_TREE, TREE, RING, NVLS, COLLNET_DIRECT = 1, 2, 3, 4, 5, 6
PATTERN_NAMES = {1: "BALANCED_TREE", 2: "SPLIT_TREE", 3: "TREE", 4: "RING", 5: "NVLS",
                 6: "COLLNET_DIRECT"}
# PATH_* (src/graph/topo.h:62-98 in 2.28); the names NCCL prints
PATH_LOC, PATH_NVL, PATH_NVB, PATH_C2C, PATH_PIX, PATH_PXB, PATH_P2C, PATH_PXN, PATH_PHB, \
    PATH_SYS, PATH_NET, PATH_DIS = range(12)
PATH_NAMES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")
COMPCAP = {"volta": 70, "ampere": 80, "hopper": 90, "blackwell": 100}

# search.cc:952-963 (2.28); 2.23 has no SM100 rows (Blackwell uses the SM90 ones,
# v2.23.4-1 search.cc:930-938, 990-996).
SPEED_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEED_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
               3.0, 2.4, 1.2, 0.24, 0.12)
SM90_SPEED_INTRA = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
SM90_SPEED_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                    2.4, 1.2, 0.24, 0.12)
SM100_SPEED_INTRA = (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
SM100_SPEED_INTER = (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                     3.0, 2.4, 1.2, 0.24, 0.12)
# MAXCHANNELS: 32 in 2.23 (v2.23.4-1 src/include/device.h:62), 64 in 2.28 (device.h:86);
# the ring search may use half (init.cc:923).
MAXCHANNELS = {"2.23": 32, "2.28": 64}
NCCL_MAX_NVLS_ARITY = 32      # device.h:206
NCCL_MAX_DIRECT_ARITY = 7     # device.h (CollNet Direct: up to 8 local GPUs)
# NVLS channels (src/transport/nvls.cc:147-198 in 2.28; NCCL_NVLS_NCHANNELS 16 in 2.23,
# v2.23.4-1 nvls.cc:145,172).
NVLS_NCHANNELS_SM90, NVLS_NCHANNELS_SM100, NVLS_NCHANNELS_SM100_NVL = 16, 32, 24
# PCIe as NCCL counts it: width x speed / 80 GB/s with 240 (x100 Mb/s) per lane at
# 32 GT/s (topo.cc:411-478) -> 48 GB/s for Gen5 x16 whose raw rate is 64 GB/s.
PCI_NCCL_PER_RAW = 0.75


@dataclass(frozen=True)
class NodeView:
    """One node (NVLink domain) of a communicator as NCCL's search sees it.

    ``ppn``: the communicator's GPUs there; ``nvlink_gb_per_s``: one GPU's
    NVLink bandwidth to the NVSwitch (NCCL units); ``nics``: NICs local to
    those GPUs (0 on a communicator inside one node: NCCL removes the NICs,
    paths.cc:783-786), each shared by ``gpus_per_nic`` of them;
    ``nic_gb_per_s`` NCCL's ``net.bw``; ``pci_gb_per_s`` the GPU/NIC PCIe
    link in NCCL's units; ``pxn``: a GPU may reach another GPU's NIC over
    NVLink (PXN, paths.cc); ``nvswitch``: the GPUs hang off NVSwitches.
    """

    arch: str
    ppn: int
    nvlink_gb_per_s: float
    nics: int = 0
    gpus_per_nic: int = 1
    nic_gb_per_s: float = 50.0
    pci_gb_per_s: float = 48.0
    pxn: bool = True
    nvswitch: bool = True
    nvls: bool = False

    def __post_init__(self):
        if self.arch not in COMPCAP:
            raise TopologyError(f"unknown GPU architecture {self.arch!r}; expected one of "
                                f"{', '.join(COMPCAP)}")
        if self.ppn < 1:
            raise TopologyError(f"a node of a communicator holds >= 1 GPU, got {self.ppn}")

    @property
    def cc(self) -> int:
        return COMPCAP[self.arch]


@dataclass(frozen=True)
class Graph:
    """One ``ncclTopoGraph``: what ``ncclTopoPrintGraph`` prints (search.cc:1176-1177)."""

    algo: str
    pattern: int
    n_channels: int
    bw_intra: float
    bw_inter: float
    type_intra: int = PATH_NVL
    type_inter: int = PATH_PIX
    cross_nic: int = 0
    same_channels: int = 1

    @property
    def pattern_name(self) -> str:
        return PATTERN_NAMES[self.pattern]

    def line(self) -> str:
        """The graph as NCCL_DEBUG_SUBSYS=GRAPH prints it."""
        return (f"Pattern {self.pattern}, crossNic {self.cross_nic}, nChannels "
                f"{self.n_channels}, bw {self.bw_intra:f}/{self.bw_inter:f}, type "
                f"{PATH_NAMES[self.type_intra]}/{PATH_NAMES[self.type_inter]}, sameChannels "
                f"{self.same_channels}")


@dataclass(frozen=True)
class CommGraphs:
    """Every algorithm's graph of one communicator and the channel counts derived."""

    nccl: str
    n_nodes: int
    n_ranks: int
    ring: Graph
    tree: Graph
    nvls: Graph | None
    collnet_chain: Graph | None
    collnet_direct: Graph | None
    n_channels: int          # comm->nChannels after connect.cc (CTAs of ring/tree kernels)
    nvls_channels: int       # comm->nvlsChannels (CTAs of NVLS kernels)
    max_tree_pattern: int
    notes: tuple[str, ...] = field(default=())

    def graph(self, algo: str) -> Graph | None:
        """The graph NCCL's tuning uses for ``algo`` (init.cc:758: PAT uses the tree graph)."""
        return {"ring": self.ring, "tree": self.tree, "pat": self.tree, "nvls": self.nvls,
                "nvls_tree": self.nvls, "collnet_chain": self.collnet_chain,
                "collnet_direct": self.collnet_direct}[algo]

    def lines(self) -> list[str]:
        """What NCCL_DEBUG=INFO prints of the search: one line per graph in init order
        (ring, tree, CollNet chain/direct, NVLS; ``ncclTopoPrintGraph``, search.cc:1177),
        then the channel counts (init.cc:1313; the p2p counts are not modelled)."""
        out = []
        for g in (self.ring, self.tree, self.collnet_chain, self.collnet_direct, self.nvls):
            if g is not None:
                out.append(g.line())
        out.append(f"{self.n_channels} coll channels, {self.n_channels} collnet channels, "
                   f"{self.nvls_channels} nvls channels")
        out.extend(self.notes)
        return out


def speeds(cc: int, net: bool, nccl: str) -> tuple[float, ...]:
    """The speed list the search walks (search.cc:1039-1045)."""
    if cc >= 100 and nccl != "2.23":
        return SM100_SPEED_INTER if net else SM100_SPEED_INTRA
    if cc >= 90:
        return SM90_SPEED_INTER if net else SM90_SPEED_INTRA
    return SPEED_INTER if net else SPEED_INTRA


def _fit(cap: float, s: float) -> int:
    """Channels of speed ``s`` one link of capacity ``cap`` carries (SUB_ROUND to 1e-3)."""
    return int(math.floor(cap / s + 1e-6)) if s > 0 else 0


@dataclass(frozen=True)
class _Try:
    """One search configuration: pattern, typeInter and crossNic (search.cc:1077-1118)."""

    pattern: int
    type_inter: int
    cross_nic: int


def _capacity(v: NodeView, net: bool, t: _Try, bw_intra: float, bw_inter: float) -> int:
    """Channels of configuration ``t`` that fit at these speeds (0: no channel).

    Ring (search.cc:738): NET -> GPU a -> ... -> GPU x -> NET; each of the ppn-1
    GPU hops takes ``bw_intra`` of one GPU's NVLink (channels rotate the
    GPUs, so the ppn GPUs share ppn-1 hops per channel); the entry NIC and the
    exit NIC take ``bw_inter`` each way, as do the PCIe links of the first and
    last GPU. Exit through the entry NIC (crossNic 0) from a GPU that is not
    on it needs PXN: one more NVLink hop to the NIC's GPU (typeInter PXN).
    Tree (search.cc:739-744): the chain's ppn-1 hops; TREE exits through the
    entry GPU, BALANCED_TREE half through each of the first two GPUs.
    NVLS (search.cc:386-417): head ``h`` pulls through every GPU's NVLink
    (twice through its own).
    """
    p, nvl = v.ppn, v.nvlink_gb_per_s
    if t.pattern == NVLS:
        # k heads: a head GPU carries k+1 shares of bwIntra, the others k.
        k = _fit(nvl, bw_intra) - 1 if p > 1 else 0
        if net:
            k = min(k, v.nics * _fit(min(v.nic_gb_per_s, v.pci_gb_per_s), bw_inter))
        return max(k, 0)
    if not net:  # one node: a ring loop or a tree chain through the NVSwitch
        if p == 1:
            return 64
        m = _fit(nvl, bw_intra)
        hops = p if t.pattern == RING else p - 1
        return (m * p) // hops
    if v.nics == 0:
        return 0
    if p == 1:
        nic_pci = _fit(min(v.nic_gb_per_s, v.pci_gb_per_s), bw_inter)
        return nic_pci * v.nics if t.cross_nic else nic_pci
    shares_nic = v.gpus_per_nic >= 2
    extra_hop = 0.0
    if t.pattern in (RING, BALANCED_TREE) and t.cross_nic == 0 and not shares_nic:
        # the exit GPU must reach the entry NIC: only over PXN
        if t.type_inter < PATH_PXN or not v.pxn:
            return 0
        extra_hop = bw_inter if t.pattern == RING else bw_inter / 2
    nic_dir = _fit(v.nic_gb_per_s, bw_inter)
    per_nic = min(nic_dir, _fit(v.pci_gb_per_s * v.gpus_per_nic, bw_inter)
                  if v.gpus_per_nic > 1 else nic_dir)
    gpu_pci = _fit(v.pci_gb_per_s, bw_inter)
    gpus_with_nic = min(p, v.nics * v.gpus_per_nic)
    by_nic = v.nics * per_nic
    by_pci = gpus_with_nic * gpu_pci
    # NVLink: ppn-1 hops of bw_intra (+ the PXN hop) per channel over ppn GPUs
    per_channel = (p - 1) * bw_intra + extra_hop
    by_nvl = int(math.floor(p * nvl / per_channel + 1e-6)) if per_channel else 64
    # no GPU can send more than nvl either
    by_nvl = min(by_nvl, p * _fit(nvl, bw_intra))
    return max(0, min(by_nic, by_pci, by_nvl))


def _better(n: int, bw_intra: float, bw_inter: float, best: Graph | None, pattern: int) -> bool:
    """ncclTopoCompareGraphs (search.cc:419-438), the hop tie-break left out."""
    if best is None:
        return True
    if pattern == NVLS:
        return n > best.n_channels or n * bw_inter > best.n_channels * best.bw_inter
    return n * bw_intra > best.n_channels * best.bw_intra


def _tries(v: NodeView, net: bool, pattern: int) -> list[_Try]:
    """The configurations pass 1 tries at every speed, in NCCL's order (search.cc:1077-1118):
    as asked, the simpler TREE for SM90+ balanced trees, typeInter up to PXN, crossNic 2."""
    if not net:
        return [_Try(pattern, PATH_PIX, 0)]
    pats = [pattern] + ([TREE] if pattern == BALANCED_TREE and v.cc >= 90 else [])
    tries = [_Try(pat, PATH_PXB, 0) for pat in pats]
    if v.pxn and v.ppn > 1:
        tries.append(_Try(pattern, PATH_PXN, 0))
    if pattern in (RING, BALANCED_TREE):
        tries.append(_Try(pattern, PATH_PXB, 2))
    return tries


def _pass1(v: NodeView, net: bool, algo: str, pattern: int, sp: tuple[float, ...], i: int,
           min_ch: int, max_ch: int, total_bw: float) -> tuple[Graph | None, _Try | None]:
    """Pass 1: at each speed try every configuration; stop when optimal, else slow down
    while the next speed is > 0.49 of the best found (search.cc:1055-1129)."""
    best: Graph | None = None
    best_try: _Try | None = None
    tries = _tries(v, net, pattern)
    while True:
        s = sp[i]
        for t in tries:
            n = min(_capacity(v, net, t, s, s), max_ch)
            if n >= min_ch and n > 0 and _better(n, s, s, best, pattern):
                best = Graph(algo, t.pattern, n, s, s, PATH_NVL, t.type_inter, t.cross_nic,
                             0 if (t.cross_nic or pattern == NVLS) else 1)
                best_try = t
            if best is not None and (best.n_channels == max_ch
                                     or best.n_channels * best.bw_inter >= total_bw):
                return best, best_try
        if i < len(sp) - 1 and (best is None or sp[i + 1] / best.bw_inter > 0.49):
            i += 1
            continue
        return best, best_try


def _pass2(v: NodeView, net: bool, pattern: int, sp: tuple[float, ...], best: Graph,
           t: _Try, max_ch: int) -> Graph:
    """Pass 2: raise the speed -- both for rings, bwInter for NVLS, bwIntra for trees
    (search.cc:1144-1163); keep what fits at least as many channels and moves more."""
    i = 0
    while sp[i] > best.bw_inter and i < len(sp) - 1:
        i += 1
    tmp_intra = tmp_inter = sp[i]
    min2 = best.n_channels
    while i > 0:
        if pattern == RING:
            i -= 1
            tmp_intra = tmp_inter = sp[i]
        elif pattern == NVLS and tmp_inter == best.bw_inter and tmp_inter < tmp_intra * 2:
            i -= 1
            tmp_inter, tmp_intra = sp[i], best.bw_intra
        elif pattern != NVLS and tmp_intra == best.bw_intra and tmp_intra < tmp_inter * 2:
            i -= 1
            tmp_intra, tmp_inter = sp[i], best.bw_inter
        else:
            break
        n = min(_capacity(v, net, t, tmp_intra, tmp_inter), max_ch)
        if n >= min2 and _better(n, tmp_intra, tmp_inter, best, pattern):
            best = replace(best, n_channels=n, bw_intra=tmp_intra, bw_inter=tmp_inter)
    return best


def _compute(v: NodeView, net: bool, algo: str, pattern: int, min_ch: int, max_ch: int,
             nccl: str) -> Graph:
    """ncclTopoCompute (search.cc:967-1174) with :func:`_capacity` as the search."""
    ngpus = v.ppn
    if ngpus == 1 and pattern != RING:
        pattern = TREE  # search.cc:1017
    if pattern == NVLS:
        max_ch = min(NCCL_MAX_NVLS_ARITY, ngpus)
        if not net:
            min_ch = max_ch  # search.cc:1019-1022
    sp = speeds(v.cc, net, nccl)
    # maxBw: the best GPU->NET (or GPU->GPU) path; totalBw: a GPU's NVLink sum (search.cc:19-53)
    max_bw = min(v.pci_gb_per_s, v.nic_gb_per_s) if net else v.nvlink_gb_per_s
    if not net and ngpus == 1:
        max_bw = 5000.0  # LOC_BW
    total_bw = max(v.nvlink_gb_per_s, v.pci_gb_per_s)
    if ngpus > 1 and pattern != RING:
        total_bw *= ngpus / (ngpus - 1)
    i = 0
    while (sp[i] > max_bw or sp[i] * min_ch > total_bw) and i < len(sp) - 1:
        i += 1
    best, best_try = _pass1(v, net, algo, pattern, sp, i, min_ch, max_ch, total_bw)
    if best is None or best_try is None:
        if pattern == NVLS or algo.startswith("collnet"):
            return Graph(algo, pattern, 0, 0.0, 0.0)
        # search.cc:1165-1172: simple order, 1 channel at 0.1 GB/s
        return Graph(algo, pattern, 1, 0.1, 0.1, PATH_SYS, PATH_SYS, 0, 0)
    best = _dup(best, v.cc, max_ch)
    return _pass2(v, net, pattern, sp, best, best_try, max_ch)


def _dup(g: Graph, cc: int, max_ch: int) -> Graph:
    """ncclTopoDupChannels (search.cc:937-950)."""
    if g.n_channels == 0 or g.pattern == NVLS or g.bw_intra < 25.0:
        return g
    if cc > 80 and g.bw_intra < 50.0 and g.n_channels > 4:
        return g
    dup = min(g.n_channels * 2, max_ch)
    div = -(-dup // g.n_channels)
    return replace(g, n_channels=dup, bw_intra=g.bw_intra / div, bw_inter=g.bw_inter / div)


def _min_graph(gs: list[Graph]) -> Graph:
    """Across nodes NCCL keeps the worst (init.cc:1083-1089): min channels/bw, max types."""
    g0 = gs[0]
    return replace(g0, n_channels=min(g.n_channels for g in gs),
                   bw_intra=min(g.bw_intra for g in gs), bw_inter=min(g.bw_inter for g in gs),
                   type_intra=max(g.type_intra for g in gs),
                   type_inter=max(g.type_inter for g in gs),
                   cross_nic=max(g.cross_nic for g in gs),
                   same_channels=min(g.same_channels for g in gs))


def search(view: NodeView | tuple[NodeView, ...], n_nodes: int, *, nccl: str = "2.28",
           collnet: bool = False) -> CommGraphs:
    """Every algorithm's graph and the communicator's channel counts.

    ``view``: one node, or one per node when they differ (NCCL takes the
    worst, init.cc:1083-1096). ``n_nodes``: NVLink domains of the group;
    ``collnet``: CollNet (SHARP) enabled.
    """
    views = tuple(view) if isinstance(view, (list, tuple)) else (view,)
    return _search(views, n_nodes, nccl, collnet)


@lru_cache(maxsize=512)
def _search(views: tuple[NodeView, ...], n_nodes: int, nccl: str, collnet: bool) -> CommGraphs:
    net = n_nodes > 1
    maxc = MAXCHANNELS.get(nccl, 64)
    cc = min(v.cc for v in views)
    n_ranks = sum(v.ppn for v in views) if len(views) == n_nodes else views[0].ppn * n_nodes
    ring = _min_graph([_compute(v, net, "ring", RING, 1, maxc // 2, nccl) for v in views])
    tree = _min_graph([_compute(v, net, "tree", BALANCED_TREE, ring.n_channels,
                                ring.n_channels, nccl) for v in views])
    notes: list[str] = []
    nvls = None
    nvls_channels = 0
    ppn_min = min(v.ppn for v in views)
    nvls_ok = all(v.nvls and v.nvswitch for v in views) and cc >= 90 and ppn_min > 2
    if nvls_ok:
        nvls = _min_graph([_compute(v, net, "nvls", NVLS, 1, maxc, nccl) for v in views])
        if nvls.n_channels == 0:
            nvls = None
        elif nccl == "2.23":
            nvls_channels = 16  # NCCL_NVLS_NCHANNELS (v2.23.4-1 nvls.cc:145)
        elif cc >= 100:
            nvls_channels = NVLS_NCHANNELS_SM100 if net else NVLS_NCHANNELS_SM100_NVL
        else:
            nvls_channels = NVLS_NCHANNELS_SM90
    chain = direct = None
    if collnet and net:
        chain = replace(_min_graph([_compute(v, net, "collnet_chain", TREE, ring.n_channels,
                                             ring.n_channels, nccl) for v in views]),
                        algo="collnet_chain")
        if ppn_min <= NCCL_MAX_DIRECT_ARITY + 1:
            direct = _min_graph([_collnet_direct(v, nccl) for v in views])
    # comm->nChannels: init.cc:994/1096, connect.cc:452-491
    nch = min(ring.n_channels, tree.n_channels)
    nch = min(maxc, nch * 2)
    if chain is not None and chain.bw_intra > chain.bw_inter and n_ranks > n_nodes:
        nch = min(maxc, nch + nch // 2)
    four = cc >= 90 if nccl != "2.23" else cc == 90  # connect.cc:473 (2.23: == 90)
    if four and net and ring.bw_intra > 45.0 and nch < 16:
        nch *= 2
        notes.append("connect.cc: 4 compute channels per search channel (< 8 GPUs/node)")
    nch = min(nch, maxc)
    max_tree = tree.pattern
    return CommGraphs(nccl, n_nodes, n_ranks, ring, tree, nvls, chain, direct, nch,
                      nvls_channels, max_tree, tuple(notes))


def _collnet_direct(v: NodeView, nccl: str) -> Graph:
    """CollNet Direct: one head per local NIC (search.cc:350-384, 645-688), approximated.

    Each head pulls from and pushes to every local GPU over NVLink; its NIC
    carries ``bw_inter``. Ours: the fastest listed speed whose NVLink and NIC
    loads fit, not a full replay of the search.
    """
    heads = max(1, min(v.nics, v.ppn))
    sp = speeds(v.cc, True, nccl)
    for s in sp:
        nvl_load = s * (1 + 1 / max(v.ppn - 1, 1))
        if s <= min(v.nic_gb_per_s, v.pci_gb_per_s) and heads * nvl_load <= v.nvlink_gb_per_s * 2:
            return Graph("collnet_direct", COLLNET_DIRECT, heads, s, s, PATH_NVL, PATH_PXB, 0, 0)
    return Graph("collnet_direct", COLLNET_DIRECT, heads, sp[-1], sp[-1], PATH_NVL, PATH_PXB, 0, 0)


def plan_channels(graphs: CommGraphs, algo: str, proto: str, size_bytes: float,
                  max_threads: int, n_ranks: int) -> int:
    """CTAs one call launches: ``topoGetAlgoInfo`` (enqueue.cc:1848-1895, 2.28).

    Ring/tree/PAT start from ``comm->nChannels`` and drop one channel while
    ``nBytes < nc * nThreads * threadThreshold`` (threshold 8 for LL and LL128,
    64 for Simple, x nRanks for ring LL; comm.h:41-43, tuning.cc:541-549);
    NVLS uses ``comm->nvlsChannels`` (min with nChannels across nodes).
    """
    if algo in ("nvls", "nvls_tree"):
        if algo == "nvls" and graphs.n_nodes > 1:
            return min(graphs.nvls_channels, graphs.n_channels)
        return graphs.nvls_channels
    nc = graphs.n_channels
    if algo == "collnet_direct":
        return nc
    threshold = {"ll": 8, "ll128": 8, "simple": 64}[proto]
    if algo == "ring" and proto == "ll":
        threshold *= n_ranks
    while size_bytes < nc * max_threads * threshold and nc >= 2:
        nc -= 1
    return nc
