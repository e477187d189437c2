"""Where each group kind lands on the hardware, and what that costs.

For every group kind of a layout (gloo twins skipped: same ranks, CPU
transport): how many groups stay on one GPU board, in one NVLink domain, on
one node, on one rail, under one leaf switch, how many use the network and
the spine; the links of the longest hop of their rings, the slowest step, and
the ring rate alone and with every group of the kind running at once.

>>> from simharness.topology import load_cluster
>>> from simharness.topology.placement import place
>>> class L:  # a stand-in layout: tp8 x dp2 on 16 ranks
...     world_size, rank_offset, kinds = 16, 0, ("tp", "dp")
...     def groups(self, kind):
...         import numpy as np
...         a = np.arange(16).reshape(2, 8)
...         return a if kind == "tp" else a.T
>>> c = load_cluster("dgx-h100-superpod", nodes=2)
>>> rows = {r.kind: r for r in locality(L(), place(c, 16))}
>>> rows["tp"].in_node, rows["dp"].in_node, rows["dp"].one_rail
(2, 0, 8)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..findings import Finding
from .cost import Rings, build_rings
from .placement import Placement

TP_KINDS = ("tp", "ep_tp")
CP_KINDS = ("cp",)
EP_KINDS = ("ep",)
MAX_NAMED = 3  # groups named in a finding's message
MAX_RANKS = 64  # ranks listed in a finding


def is_gloo(kind: str) -> bool:
    return kind.endswith("_gloo")


def is_dp_kind(kind: str) -> bool:
    """Data-parallel kinds (dp, dp_cp, dp_cp_ag, ep_dp, intra_dp_cp, ...), not tp_dp*."""
    tokens = kind.split("_")
    return "dp" in tokens and "tp" not in tokens and not is_gloo(kind)


def comm_kinds(layout) -> list[str]:
    """The layout's kinds that carry NCCL traffic (gloo twins left out)."""
    return [k for k in layout.kinds if not is_gloo(k)]


@dataclass(frozen=True)
class KindLocality:
    """One row of the locality table; counts are numbers of groups."""

    kind: str
    groups: int
    size: int
    in_board: int
    in_nvlink: int
    in_node: int
    one_rail: int | None     # None: the topology has no rails
    one_leaf: int | None     # None: the topology has no network
    network: int
    spine: int
    max_hop_links: int
    step_latency_us: float
    alone_gb_per_s: float    # slowest ring alone (inf for size-1 groups)
    concurrent_gb_per_s: float  # slowest ring with all rings of the kind at once
    bottleneck: str

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("alone_gb_per_s", "concurrent_gb_per_s"):
            d[key] = None if not np.isfinite(d[key]) else round(d[key], 3)
        d["step_latency_us"] = round(d["step_latency_us"], 3)
        return d


def _all_same(x: np.ndarray) -> np.ndarray:
    return (x == x[:, :1]).all(axis=1)


def kind_devices(layout, placement: Placement, kind: str) -> np.ndarray:
    return placement.device_of(np.asarray(layout.groups(kind), dtype=np.int64))


def kind_locality(kind: str, rings: Rings) -> KindLocality:
    """The locality row of one kind from its rings."""
    c, dev = rings.cluster, rings.devices
    g, k = dev.shape
    alone = rings.alone_gb_per_s
    conc = rings.concurrent_gb_per_s() if g > 1 else alone
    worst = int(np.argmin(alone)) if g else 0
    tiers = rings.bottleneck_tier
    return KindLocality(
        kind=kind, groups=g, size=k,
        in_board=int(_all_same(c.board_of(dev)).sum()),
        in_nvlink=int(_all_same(c.domain_of(dev)).sum()),
        in_node=int(_all_same(c.node_of(dev)).sum()),
        one_rail=int(_all_same(c.rail_of(dev)).sum()) if c.rail_wired else None,
        one_leaf=int(_all_same(c.leaf_of(dev)).sum()) if c.n_nics else None,
        network=int(rings.crosses_domain.sum()),
        spine=int(rings.uses_spine.sum()),
        max_hop_links=int(rings.max_links.max()) if g else 0,
        step_latency_us=float(rings.step_latency_us.max()) if g else 0.0,
        alone_gb_per_s=float(alone.min()) if g else float("inf"),
        concurrent_gb_per_s=float(conc.min()) if g else float("inf"),
        bottleneck=tiers[worst] if g else "",
    )


def rings_by_kind(layout, placement: Placement, kinds=None) -> dict[str, Rings]:
    """The rings of ``kinds`` (default: every non-gloo kind of the layout)."""
    kinds = comm_kinds(layout) if kinds is None else list(kinds)
    return {k: build_rings(placement.cluster, kind_devices(layout, placement, k)) for k in kinds}


def locality(layout, placement: Placement, kinds=None,
             rings: dict[str, Rings] | None = None) -> list[KindLocality]:
    """Locality rows for ``kinds`` (default: every non-gloo kind of the layout)."""
    rings = rings_by_kind(layout, placement, kinds) if rings is None else rings
    return [kind_locality(k, r) for k, r in rings.items()]


def analyse(layout, placement: Placement) -> tuple[list[KindLocality], list[Finding]]:
    """Locality rows and findings, building every kind's rings once."""
    rings = rings_by_kind(layout, placement)
    return locality(layout, placement, rings=rings), topology_findings(layout, placement, rings)


def _describe(kind: str, idx: np.ndarray, groups: np.ndarray, dev: np.ndarray, cluster) -> str:
    parts = []
    for i in idx[:MAX_NAMED]:
        names = ", ".join(cluster.device_name(d) for d in dev[i][:8])
        more = ", ..." if dev.shape[1] > 8 else ""
        parts.append(f"{kind}[{int(i)}] ranks {groups[i][:8].tolist()}"
                     f"{'...' if dev.shape[1] > 8 else ''} on {names}{more}")
    if idx.size > MAX_NAMED:
        parts.append(f"and {idx.size - MAX_NAMED} more")
    return "; ".join(parts)


def _finding(code, severity, kind, idx, groups, dev, cluster, what) -> Finding:
    total = groups.shape[0]
    where = _describe(kind, idx, groups, dev, cluster)
    msg = f"{kind}: {idx.size} of {total} groups {what}: {where}"
    ranks = tuple(int(r) for r in groups[idx[:MAX_NAMED]].ravel()[:MAX_RANKS])
    names = tuple(f"{kind}[{int(i)}]" for i in idx[:MAX_NAMED])
    return Finding(code, severity, msg, ranks, names)


def topology_findings(layout, placement: Placement,
                      rings: dict[str, Rings] | None = None) -> list[Finding]:
    """Findings in the layout checks' form.

    - ``topology-tp-nvlink`` (error): a TP group (``tp``, ``ep_tp``) leaves
      its NVLink domain;
    - ``topology-cp-nodes`` / ``topology-ep-nodes`` (warning): a CP or EP group
      crosses nodes over the network (leaves its NVLink domain);
    - ``topology-dp-rails`` (warning): a data-parallel ring on a rail-optimised
      fabric crosses from one rail to another (PXN detours it over NVLink onto
      the other rail's NIC, or it takes the spine without PXN),
      which a placement that keeps DP peers on the same local GPU avoids.
    """
    cluster = placement.cluster
    out: list[Finding] = []
    dom_gpus = cluster.domain_gpus
    for kind in comm_kinds(layout):
        groups = np.asarray(layout.groups(kind), dtype=np.int64)
        if groups.ndim != 2 or groups.shape[1] < 2:
            continue
        kr = (rings or {}).get(kind) or build_rings(cluster, placement.device_of(groups))
        dev = kr.devices
        leave = np.flatnonzero(kr.crosses_domain)
        if kind in TP_KINDS and leave.size:
            out.append(_finding("topology-tp-nvlink", "error", kind, leave, groups, dev, cluster,
                                f"leave their NVLink domain ({dom_gpus} GPUs); keep tensor "
                                f"parallelism inside it (tp <= {dom_gpus}, dividing it)"))
        elif kind in CP_KINDS + EP_KINDS and leave.size:
            code = "topology-cp-nodes" if kind in CP_KINDS else "topology-ep-nodes"
            out.append(_finding(code, "warning", kind, leave, groups, dev, cluster,
                                "cross nodes over the network (they leave their NVLink domain "
                                f"of {dom_gpus} GPUs)"))
        if is_dp_kind(kind) and cluster.rail_wired:
            bad = np.flatnonzero(kr.rail_mismatch)
            if bad.size:
                out.append(_finding(
                    "topology-dp-rails", "warning", kind, bad, groups, dev, cluster,
                    "cross rails: a ring hop joins GPUs on different rails, so NCCL's PXN "
                    "sends it over NVLink to the destination rail's GPU first (or through the "
                    "spine without PXN), an extra hop that shares that GPU's NIC; place "
                    "data-parallel peers on the same local GPU index "
                    "(torchrun order with tp*cp dividing the GPUs per node)"))
    return out
