"""Link model of a group's rings, and the NCCL-model cost of a collective on it.

**Rings (the link model).** A group's ring visits its members sorted by
device (NCCL's ring search keeps the GPUs of an NVLink domain together).
Inside one NVLink domain every member sends once to the next through the
NVSwitch. A ring that spans domains is split into ``m`` channels, ``m`` = the
fewest members the group has in any domain it touches; channel ``c`` enters
and leaves every domain through the NIC of the domain's ``c``-th member, so a
domain boundary costs ``1/m`` of the volume on each of ``m`` NIC pairs. On a
rail-optimised fabric a hop between GPUs on different rails takes NCCL's PXN
route: NVLink to the source node's GPU on the destination's rail, then that
GPU's NIC (:meth:`.Cluster.routes`).

**Rates.** A ring running at rate ``r`` moves ``r`` bytes/s through every hop,
so link ``l`` carries ``w_l * r`` where ``w_l`` sums the ring's hops (and
channel fractions) crossing it. Rings running at once share every link
max-min fairly (progressive filling, :func:`maxmin_rates`); a ring alone runs
at ``min_l capacity_l / w_l``. That rate is what NCCL's topology search would
find as channels x bandwidth per channel.

**Cost.** :func:`predict` hands the group's shape (ranks, NVLink domains,
architecture, NVLink, ring and network rates, NVLS / SHARP) to NCCL's tuning
model (:mod:`.nccl_model`), which picks the algorithm and protocol NCCL would
and prices the call; :func:`bus_bandwidth` is its nccl-tests busbw.

>>> from simharness.topology import load_cluster
>>> node = load_cluster("dgx-h100")
>>> e = predict(node, range(8), "all_gather", 1 << 30)
>>> e.pick, round(e.busbw_gb_per_s)                       # GB/s
('ring/simple', 356)
>>> predict(node, range(8), "all_reduce", 1 << 30).pick
'nvls/simple'
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .cluster import TIERS, Cluster
from .errors import TopologyError
from .nccl_graph import PCI_NCCL_PER_RAW, NodeView
from .nccl_model import Estimate, GroupShape, choose
from .nccl_tuning import DEFAULT_NCCL, bus_factor, check_size, collective_name

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")


@dataclass(frozen=True, eq=False)
class Rings:
    """The rings of a set of groups on a cluster.

    ``flow, link, weight`` is the sparse load matrix (one entry per ring and
    directed link it uses, ``weight`` = hops of the ring on that link);
    per ring: ``size``, ``step_latency_us`` (slowest hop incl. its components),
    ``max_links`` (links on the longest hop), ``crosses_domain``,
    ``uses_spine``, ``rail_mismatch`` (a domain crossing between two rails).
    """

    cluster: Cluster
    devices: np.ndarray
    flow: np.ndarray
    link: np.ndarray
    weight: np.ndarray
    step_latency_us: np.ndarray
    max_links: np.ndarray
    crosses_domain: np.ndarray
    uses_spine: np.ndarray
    rail_mismatch: np.ndarray

    @property
    def n_rings(self) -> int:
        return self.devices.shape[0]

    @property
    def size(self) -> int:
        return self.devices.shape[1]

    @cached_property
    def _alone(self) -> tuple[np.ndarray, np.ndarray]:
        rate = np.full(self.n_rings, np.inf)
        tier = np.full(self.n_rings, -1, dtype=np.int64)
        if self.flow.size:
            val = self.cluster.capacity[self.link] / self.weight
            order = np.lexsort((val, self.flow))
            f = self.flow[order]
            first = np.flatnonzero(np.r_[True, f[1:] != f[:-1]])
            rate[f[first]] = val[order][first]
            tier[f[first]] = self.cluster.link_tier[self.link[order][first]]
        return rate, tier

    @cached_property
    def net_gb_per_s(self) -> np.ndarray:
        """Per ring: its rate alone counting only network links (PCIe, NIC, spine);
        ``inf`` for rings inside one NVLink domain."""
        rate = np.full(self.n_rings, np.inf)
        if self.flow.size:
            net = self.cluster.link_tier[self.link] != TIERS.index("nvlink")
            val = self.cluster.capacity[self.link[net]] / self.weight[net]
            np.minimum.at(rate, self.flow[net], val)
        return rate

    @property
    def alone_gb_per_s(self) -> np.ndarray:
        """Per ring: its rate when it runs alone (bottleneck capacity / load)."""
        return self._alone[0]

    @property
    def bottleneck_tier(self) -> list[str]:
        """Per ring: the tier of its bottleneck link when alone ('' for size 1)."""
        return [TIERS[t] if t >= 0 else "" for t in self._alone[1]]

    def concurrent_gb_per_s(self) -> np.ndarray:
        """Per ring: its max-min fair rate when all rings run at once."""
        return maxmin_rates(self.flow, self.link, self.weight, self.cluster.capacity,
                            self.n_rings)


def build_rings(cluster: Cluster, devices) -> Rings:
    """Rings over the rows of ``devices`` (``(n_groups, size)`` device indices).

    >>> from simharness.topology import load_cluster
    >>> c = load_cluster("dgx-h100-superpod", nodes=2)
    >>> r = build_rings(c, [[0, 8]])             # GPU 0 of two nodes: rail 0
    >>> float(r.alone_gb_per_s[0]), r.bottleneck_tier[0]
    (47.0, 'nic')
    """
    dev = np.asarray(devices, dtype=np.int64)
    if dev.ndim != 2:
        raise TopologyError(f"devices must be a 2-D array (groups x size), got shape {dev.shape}")
    g, k = dev.shape
    empty = np.zeros(0, dtype=np.int64)
    zeros_b = np.zeros(g, dtype=bool)
    if k < 2 or g == 0:
        return Rings(cluster, dev, empty, empty, np.zeros(0), np.zeros(g), np.zeros(g, np.int64),
                     zeros_b, zeros_b.copy(), zeros_b.copy())
    ds = np.sort(dev, axis=1)
    if (ds[:, 1:] == ds[:, :-1]).any():
        raise TopologyError("two ranks of one group sit on the same device; check the placement")
    dom = cluster.domain_of(ds)
    start = np.ones((g, k), dtype=bool)
    start[:, 1:] = dom[:, 1:] != dom[:, :-1]
    flat_start = np.flatnonzero(start.ravel())
    seg_size = np.diff(np.r_[flat_start, g * k])
    seg_of = np.cumsum(start.ravel()) - 1
    size_el = seg_size[seg_of].reshape(g, k)
    m = size_el.min(axis=1)
    multi = start.sum(axis=1) > 1
    off = cluster.link_offsets

    # NVLink: every member of a multi-member segment sends and receives once.
    nv = (size_el > 1).ravel()
    nv_rows = np.repeat(np.arange(g), k)[nv]
    nv_dev = ds.ravel()[nv]
    flows = [nv_rows, nv_rows]
    links = [off["nvl_up"] + nv_dev, off["nvl_down"] + nv_dev]
    weights = [np.ones(nv_rows.size), np.ones(nv_rows.size)]
    su_lat = cluster.spec.scale_up.latency_us
    has_nv = (size_el > 1).any(axis=1)
    step_lat = np.where(has_nv, su_lat, 0.0)
    max_links = np.where(has_nv, 2, 0)
    uses_spine = zeros_b.copy()
    rail_mismatch = zeros_b.copy()

    if multi.any():
        idx = np.arange(k)
        seg_first_el = np.maximum.accumulate(np.where(start, idx, 0), axis=1)
        pos = (idx - seg_first_el).ravel()
        rows_el = np.repeat(np.arange(g), k)
        send = multi[rows_el] & (pos < m[rows_el])
        seg_row = flat_start // k
        is_first = np.r_[True, seg_row[1:] != seg_row[:-1]]
        is_last = np.r_[seg_row[1:] != seg_row[:-1], True]
        first_seg = np.maximum.accumulate(np.where(is_first, np.arange(seg_row.size), 0))
        next_seg = np.where(is_last, first_seg, np.arange(seg_row.size) + 1)
        src_el = np.flatnonzero(send)
        dst_el = flat_start[next_seg[seg_of[src_el]]] + pos[src_el]
        src, dst = ds.ravel()[src_el], ds.ravel()[dst_el]
        rows = rows_el[src_el]
        route = cluster.routes(src, dst)
        nlinks, _, lat = cluster.route_stats(route)
        valid = route >= 0
        flows.append(np.repeat(rows, valid.sum(axis=1)))
        links.append(route[valid])
        weights.append(np.repeat(1.0 / m[rows], valid.sum(axis=1)))
        np.maximum.at(step_lat, rows, lat)
        np.maximum.at(max_links, rows, nlinks)
        spine = route[:, 4] >= 0
        uses_spine[rows[spine]] = True
        if cluster.rail_wired:
            bad = cluster.rail_of(src) != cluster.rail_of(dst)
            rail_mismatch[rows[bad]] = True

    flow = np.concatenate(flows)
    link = np.concatenate(links)
    weight = np.concatenate(weights)
    key = flow * cluster.n_links + link
    ukey, inv = np.unique(key, return_inverse=True)
    weight = np.bincount(inv, weights=weight)
    return Rings(cluster, dev, ukey // cluster.n_links, ukey % cluster.n_links, weight,
                 step_lat, max_links, multi, uses_spine, rail_mismatch)


def maxmin_rates(flow, link, weight, capacity, n_flows: int) -> np.ndarray:
    """Max-min fair rates of flows that load links (progressive filling).

    Flow ``f`` at rate ``r_f`` puts ``weight * r_f`` on each of its links; all
    rates rise together until a link saturates, the flows on it freeze, and
    the rest keep rising. Flows with no link get ``inf``.

    >>> maxmin_rates([0, 1, 1], [0, 0, 1], [1.0, 1.0, 1.0], [10.0, 3.0], 2).tolist()
    [7.0, 3.0]
    """
    flow = np.asarray(flow, dtype=np.int64)
    link = np.asarray(link, dtype=np.int64)
    weight = np.asarray(weight, dtype=float)
    cap = np.asarray(capacity, dtype=float).copy()
    cap0 = cap.copy()
    rate = np.zeros(n_flows)
    active = np.zeros(n_flows, dtype=bool)
    active[flow] = True
    rate[~active] = np.inf
    while active.any():
        on = active[flow]
        load = np.bincount(link[on], weights=weight[on], minlength=cap.size)
        used = load > 0
        share = np.full(cap.size, np.inf)
        share[used] = cap[used] / load[used]
        inc = share.min()
        rate[active] += inc
        cap -= inc * load
        saturated = used & (cap <= 1e-9 * np.maximum(cap0, 1e-30))
        hit = np.zeros(n_flows, dtype=bool)
        hit[flow[on & saturated[link]]] = True
        active &= ~hit
    return rate


def shape_of(cluster: Cluster, rings: Rings, i: int = 0, *, rate_gb_per_s: float | None = None,
             collnet: bool = False) -> GroupShape:
    """What NCCL's tuning sees of ring ``i`` of ``rings`` (see :class:`GroupShape`).

    ``rate_gb_per_s`` overrides the ring's rate (e.g. its share while other
    rings run); ``collnet`` turns on CollNet (SHARP) where the switches have it.
    """
    spec = cluster.spec
    so = spec.scale_out
    if collnet and not (so is not None and so.sharp):
        raise TopologyError(f"topology {spec.name!r} has no SHARP switches ([scale_out] "
                            "sharp = true); CollNet cannot be enabled on it")
    dev = rings.devices[i]
    domains = np.unique(cluster.domain_of(dev))
    alone = float(rings.alone_gb_per_s[i])
    rate = float(alone if rate_gb_per_s is None else rate_gb_per_s)
    share = rate / alone if (np.isfinite(alone) and alone > 0 and np.isfinite(rate)) else 1.0
    nvl = spec.scale_up.bandwidth_gb_per_s * spec.scale_up.efficiency
    nodes = None
    if spec.node.arch is not None:
        nodes = node_views(cluster, dev)
    return GroupShape(
        n_ranks=int(dev.size), n_nodes=int(domains.size), arch=spec.node.arch,
        intra_gb_per_s=nvl, ring_gb_per_s=rate if np.isfinite(rate) else nvl,
        net_gb_per_s=float(rings.net_gb_per_s[i]) if domains.size > 1 else 0.0,
        nvls=spec.scale_up.nvls, collnet=collnet, mnnvl=spec.nodes_per_domain > 1,
        step_latency_us=float(rings.step_latency_us[i]),
        base_latency_us=spec.base_latency_us, nodes=nodes, share=min(share, 1.0),
        transport=so.transport if so is not None else "infiniband",
        net_plugin=so.net_plugin if so is not None else "",
        tuner_plugin=so.tuner_plugin if so is not None else "",
        tuner=so.tuner if so is not None else "")


def node_views(cluster: Cluster, devices) -> tuple[NodeView, ...]:
    """What NCCL's topology search sees on each NVLink domain the group touches.

    The group's GPUs in the domain, their NVLink bandwidth (links x NCCL's
    per-link figure = the file's bandwidth x efficiency), and the NICs local
    to them: a NIC serves ``gpus_per_node / nics_per_node`` GPUs of its node
    (:meth:`.Cluster.nic_of`); NCCL's ``net.bw`` is the port speed / 8 and its
    PCIe figure 3/4 of the raw rate (:data:`.nccl_graph.PCI_NCCL_PER_RAW`).
    Domains that look alike are listed once (NCCL keeps the worst of all).
    """
    spec = cluster.spec
    dev = np.asarray(devices, dtype=np.int64).ravel()
    nvl = spec.scale_up.bandwidth_gb_per_s * spec.scale_up.efficiency
    so = spec.scale_out
    # one pass over all devices (a 16,384-GPU group spans 2,048 domains): per domain the
    # group's GPUs, its distinct NICs and the fewest GPUs sharing one of them
    doms, inv, ppn = np.unique(cluster.domain_of(dev), return_inverse=True, return_counts=True)
    nics = np.zeros(doms.size, dtype=np.int64)
    per_nic = np.ones(doms.size, dtype=np.int64)
    if so is not None and doms.size > 1:
        nic = cluster.nic_of(dev) + 1   # -1 (no NIC) counts as one, as np.unique did
        span = int(nic.max()) + 1
        keys, counts = np.unique(inv.astype(np.int64) * span + nic, return_counts=True)
        key_dom = keys // span
        nics = np.bincount(key_dom, minlength=doms.size)
        per_nic = np.minimum.reduceat(counts, np.searchsorted(key_dom, np.arange(doms.size)))
    rows = np.stack([ppn, nics, per_nic], axis=1)
    _, first = np.unique(rows, axis=0, return_index=True)
    assert spec.node.arch is not None
    views = [NodeView(
        arch=spec.node.arch, ppn=int(rows[i, 0]), nvlink_gb_per_s=nvl, nics=int(rows[i, 1]),
        gpus_per_nic=int(rows[i, 2]),
        nic_gb_per_s=so.speed_gbit_per_s / 8.0 if so is not None else 0.0,
        pci_gb_per_s=so.pcie_gb_per_s * PCI_NCCL_PER_RAW if so is not None else 0.0,
        pxn=bool(so.pxn) if so is not None else False, nvswitch=True,
        nvls=spec.scale_up.nvls) for i in sorted(first)]
    return tuple(dict.fromkeys(views))


def predict(cluster: Cluster, devices, collective: str, size_bytes: float, *,
            algo: str | None = None, proto: str | None = None, concurrent=None,
            collnet: bool = False, nccl: str = DEFAULT_NCCL) -> Estimate:
    """NCCL's pick and cost for one call of ``collective`` on the group at ``devices``.

    ``concurrent``: other groups (rows of device indices) running at the same
    time; the ring rate is then the max-min fair share. ``algo``/``proto``
    force a choice like ``NCCL_ALGO``/``NCCL_PROTO``; ``nccl`` is the NCCL release.
    """
    coll = collective_name(collective)
    size = check_size(size_bytes)
    rows = [list(devices)] + ([list(r) for r in concurrent] if concurrent is not None else [])
    if len({len(r) for r in rows}) != 1:
        raise TopologyError("concurrent groups must have the size of the measured group")
    rings = build_rings(cluster, rows)
    rate = rings.concurrent_gb_per_s()[0] if len(rows) > 1 else None
    shape = shape_of(cluster, rings, 0, rate_gb_per_s=rate, collnet=collnet)
    return choose(shape, coll, size, algo=algo, proto=proto, nccl=nccl)


def bus_bandwidth(cluster: Cluster, devices, collective: str, size_bytes: float,
                  concurrent=None, **kw) -> float:
    """Predicted nccl-tests busbw (GB/s) of one group on ``devices`` (see :func:`predict`)."""
    return float(predict(cluster, devices, collective, size_bytes, concurrent=concurrent,
                         **kw).busbw_gb_per_s)


__all__ = ["COLLECTIVES", "Rings", "build_rings", "bus_bandwidth", "bus_factor", "maxmin_rates",
           "node_views", "predict", "shape_of"]
