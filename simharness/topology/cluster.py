"""A topology at a node count: device arithmetic, directed links and the graph.

A :class:`Cluster` numbers everything arithmetically so that 16,384 GPUs cost
arrays, not Python objects:

- device ``d`` (0-based, torchrun order) sits on node ``d // gpus``, local GPU
  ``d % gpus``, board ``d // gpus_per_board``, NVLink domain ``d // domain_gpus``;
- its NIC is ``node * nics + local // (gpus // nics)``; with ``wiring = "rail"``
  that NIC's rail is its local index and it hangs off leaf
  ``(node // nodes_per_switch) * nics + rail``; with ``"tor"`` every NIC of a
  node hangs off leaf ``node // nodes_per_switch``;
- one aggregated spine (when the file has a second tier) joins all leaves.

Links are directed (full duplex); ids are laid out in blocks
``nvl_up | nvl_down | pcie_up | pcie_down | nic_up | nic_down | leaf_up | leaf_down``
with one entry per device, NIC or leaf. ``capacity`` is the effective
bandwidth (nominal x efficiency, GB/s) and ``latency`` the link latency (us):
half the latency of each component the link joins, so the latency of a path
is the sum of the latencies of the components it passes through.

>>> from simharness.topology import load_cluster
>>> c = load_cluster("dgx-h100-superpod", nodes=32)
>>> c.n_devices, c.n_rails, c.n_leaves
(256, 8, 8)
>>> c.route_hops(0, 8), c.route_hops(0, 1)    # node 0 -> node 1 on rail 0; NVLink
(4, 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .errors import TopologyError
from .schema import TopologySpec

LINK_BLOCKS = ("nvl_up", "nvl_down", "pcie_up", "pcie_down", "nic_up", "nic_down",
               "leaf_up", "leaf_down")
# The tier a directed link belongs to, for reports.
LINK_TIER = {"nvl_up": "nvlink", "nvl_down": "nvlink", "pcie_up": "pcie", "pcie_down": "pcie",
             "nic_up": "nic", "nic_down": "nic", "leaf_up": "spine", "leaf_down": "spine"}


@dataclass(frozen=True)
class Cluster:
    """``spec`` instantiated with ``nodes`` nodes."""

    spec: TopologySpec
    nodes: int

    def __post_init__(self):
        spec, n = self.spec, self.nodes
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise TopologyError(f"--nodes must be a whole number >= 1, got {n!r}")
        if spec.max_nodes is not None and n > spec.max_nodes:
            raise TopologyError(
                f"topology {spec.name!r} holds at most {spec.max_nodes} node(s), got --nodes {n}; "
                f"pick a cluster topology (simharness topology list) or lower --nodes")
        if spec.scale_out is None and n > spec.nodes_per_domain:
            raise TopologyError(
                f"topology {spec.name!r} has no [scale_out] network, so it holds at most "
                f"{spec.nodes_per_domain} node(s), got --nodes {n}")
        so = spec.scale_out
        if so is not None and len(so.tiers) == 1 and n > so.nodes_per_leaf:
            raise TopologyError(
                f"topology {spec.name!r} has one switch tier of {so.nodes_per_leaf} "
                f"nodes per leaf and no spine, got --nodes {n}; lower --nodes or add a spine tier")

    # ------------------------------------------------------------ sizes
    @property
    def gpus_per_node(self) -> int:
        return self.spec.node.gpus

    @property
    def n_devices(self) -> int:
        return self.nodes * self.spec.node.gpus

    @property
    def domain_gpus(self) -> int:
        return self.spec.scale_up.domain_gpus

    @property
    def n_domains(self) -> int:
        return -(-self.n_devices // self.domain_gpus)

    @property
    def nics_per_node(self) -> int:
        return self.spec.scale_out.nics_per_node if self.spec.scale_out else 0

    @property
    def n_nics(self) -> int:
        return self.nodes * self.nics_per_node

    @property
    def rail_wired(self) -> bool:
        return self.spec.scale_out is not None and self.spec.scale_out.wiring == "rail"

    @property
    def n_rails(self) -> int:
        """Rails of a rail-optimised fabric (NICs per node); 0 without one."""
        return self.nics_per_node if self.rail_wired else 0

    @property
    def nodes_per_leaf(self) -> int:
        return self.spec.scale_out.nodes_per_leaf if self.spec.scale_out else 0

    @property
    def n_leaf_groups(self) -> int:
        return -(-self.nodes // self.nodes_per_leaf) if self.spec.scale_out else 0

    @property
    def n_leaves(self) -> int:
        per_group = self.nics_per_node if self.rail_wired else 1
        return self.n_leaf_groups * per_group

    @property
    def has_spine(self) -> bool:
        return self.spec.scale_out is not None and len(self.spec.scale_out.tiers) == 2

    # ------------------------------------------------ device arithmetic
    def node_of(self, d):
        return np.asarray(d) // self.gpus_per_node

    def local_of(self, d):
        return np.asarray(d) % self.gpus_per_node

    def board_of(self, d):
        return np.asarray(d) // self.spec.node.gpus_per_board

    def domain_of(self, d):
        return np.asarray(d) // self.domain_gpus

    def nic_of(self, d):
        """Global NIC index of device ``d`` (``-1`` without a network)."""
        d = np.asarray(d)
        if not self.nics_per_node:
            return np.full(d.shape, -1, dtype=np.int64)
        per_nic = self.gpus_per_node // self.nics_per_node
        return self.node_of(d) * self.nics_per_node + self.local_of(d) // per_nic

    def rail_of(self, d):
        """Rail (local NIC index) of device ``d``; 0 for ToR wiring, -1 without a network."""
        d = np.asarray(d)
        if not self.nics_per_node:
            return np.full(d.shape, -1, dtype=np.int64)
        if not self.rail_wired:
            return np.zeros(d.shape, dtype=np.int64)
        return self.local_of(d) // (self.gpus_per_node // self.nics_per_node)

    def leaf_of(self, d):
        """Leaf switch of device ``d``'s NIC (``-1`` without a network)."""
        d = np.asarray(d)
        if not self.nics_per_node:
            return np.full(d.shape, -1, dtype=np.int64)
        group = self.node_of(d) // self.nodes_per_leaf
        if self.rail_wired:
            return group * self.nics_per_node + self.rail_of(d)
        return group

    # ------------------------------------------------------------ links
    @cached_property
    def link_offsets(self) -> dict[str, int]:
        counts = {"nvl_up": self.n_devices, "nvl_down": self.n_devices,
                  "pcie_up": self.n_devices if self.n_nics else 0,
                  "pcie_down": self.n_devices if self.n_nics else 0,
                  "nic_up": self.n_nics, "nic_down": self.n_nics,
                  "leaf_up": self.n_leaves if self.has_spine else 0,
                  "leaf_down": self.n_leaves if self.has_spine else 0}
        out, pos = {}, 0
        for block in LINK_BLOCKS:
            out[block] = pos
            pos += counts[block]
        out["end"] = pos
        return out

    @property
    def n_links(self) -> int:
        return self.link_offsets["end"]

    def _block_values(self) -> dict[str, tuple[float, float]]:
        """(effective GB/s, latency us) of every link block."""
        su, so = self.spec.scale_up, self.spec.scale_out
        nvl = (su.bandwidth_gb_per_s * su.efficiency, su.latency_us / 2)
        out = {"nvl_up": nvl, "nvl_down": nvl}
        if so is not None:
            leaf = so.tiers[0]
            pcie = (so.pcie_gb_per_s, so.nic_latency_us / 2)
            nic = (so.nic_gb_per_s * so.efficiency, (so.nic_latency_us + leaf.latency_us) / 2)
            out.update(pcie_up=pcie, pcie_down=pcie, nic_up=nic, nic_down=nic)
            if self.has_spine:
                spine = so.tiers[1]
                up = leaf.uplink_ports * min(leaf.port_speed_gbit_per_s,
                                             spine.port_speed_gbit_per_s) / 8.0
                val = (up * so.efficiency, (leaf.latency_us + spine.latency_us) / 2)
                out.update(leaf_up=val, leaf_down=val)
        return out

    @cached_property
    def capacity(self) -> np.ndarray:
        """Effective bandwidth of every directed link, GB/s."""
        return self._fill(0)

    @cached_property
    def latency(self) -> np.ndarray:
        """Latency of every directed link, us."""
        return self._fill(1)

    def _fill(self, which: int) -> np.ndarray:
        off, vals = self.link_offsets, self._block_values()
        out = np.zeros(self.n_links)
        for i, block in enumerate(LINK_BLOCKS):
            end = off[LINK_BLOCKS[i + 1]] if i + 1 < len(LINK_BLOCKS) else off["end"]
            if end > off[block]:
                out[off[block]:end] = vals[block][which]
        return out

    @cached_property
    def link_tier(self) -> np.ndarray:
        """Tier name index of every link (index into :data:`TIERS`)."""
        off = self.link_offsets
        out = np.zeros(self.n_links, dtype=np.int8)
        for i, block in enumerate(LINK_BLOCKS):
            end = off[LINK_BLOCKS[i + 1]] if i + 1 < len(LINK_BLOCKS) else off["end"]
            out[off[block]:end] = TIERS.index(LINK_TIER[block])
        return out

    def routes(self, a, b) -> np.ndarray:
        """Directed links from device ``a`` to device ``b`` (vectorised).

        Returns an int64 array ``(len(a), 8)`` padded with -1: two NVLink links
        inside a domain; otherwise [NVLink to the PXN proxy,] PCIe, NIC,
        [leaf->spine, spine->leaf,] NIC, PCIe. On a rail-optimised fabric with
        ``pxn`` (NCCL's default since 2.12), traffic between GPUs on different
        rails first crosses NVLink to the GPU of the source node that sits on
        the destination's rail and leaves through that GPU's NIC, so it stays
        on one rail (and off the spine when both nodes share the rail's leaf).
        """
        a = np.atleast_1d(np.asarray(a, dtype=np.int64))
        b = np.atleast_1d(np.asarray(b, dtype=np.int64))
        off = self.link_offsets
        out = np.full((a.size, ROUTE_WIDTH), -1, dtype=np.int64)
        same = self.domain_of(a) == self.domain_of(b)
        out[same, 0] = off["nvl_up"] + a[same]
        out[same, 1] = off["nvl_down"] + b[same]
        far = ~same
        if far.any():
            if not self.n_nics:
                raise TopologyError(f"topology {self.spec.name!r} has no network between "
                                    "NVLink domains")
            fa, fb = a[far], b[far]
            src = self.pxn_proxy(fa, fb)
            hop = src != fa
            la, lb = self.leaf_of(src), self.leaf_of(fb)
            via = la != lb
            if via.any() and not self.has_spine:
                raise TopologyError(f"topology {self.spec.name!r} has no spine tier to join "
                                    f"leaf {int(la[via][0])} and leaf {int(lb[via][0])}")
            rows = np.empty((fa.size, ROUTE_WIDTH), dtype=np.int64)
            rows[:, 0] = np.where(hop, off["nvl_up"] + fa, -1)
            rows[:, 1] = np.where(hop, off["nvl_down"] + src, -1)
            rows[:, 2] = off["pcie_up"] + src
            rows[:, 3] = off["nic_up"] + self.nic_of(src)
            rows[:, 4] = np.where(via, off["leaf_up"] + la, -1)
            rows[:, 5] = np.where(via, off["leaf_down"] + lb, -1)
            rows[:, 6] = off["nic_down"] + self.nic_of(fb)
            rows[:, 7] = off["pcie_down"] + fb
            out[far] = rows
        return out

    @property
    def pxn(self) -> bool:
        """Whether cross-rail traffic takes NCCL's PXN detour (rail fabric, ``pxn`` on)."""
        so = self.spec.scale_out
        return self.rail_wired and so is not None and so.pxn

    def pxn_proxy(self, a, b) -> np.ndarray:
        """The device that sends ``a``'s traffic to ``b`` onto the network.

        ``a`` itself, unless PXN applies and ``b`` is on another rail: then the
        first GPU of ``a``'s node behind the NIC of ``b``'s rail.

        >>> from simharness.topology import load_cluster
        >>> c = load_cluster("dgx-h100-superpod", nodes=2)
        >>> c.pxn_proxy([0, 0], [8, 11]).tolist()     # rail 0 -> rail 0; rail 0 -> rail 3
        [0, 3]
        """
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        if not self.pxn:
            return a.copy()
        per_nic = self.gpus_per_node // self.nics_per_node
        cross = self.rail_of(a) != self.rail_of(b)
        proxy = self.node_of(a) * self.gpus_per_node + self.rail_of(b) * per_nic
        return np.where(cross, proxy, a)

    def route_hops(self, a: int, b: int) -> int:
        """Number of links on the route from device ``a`` to device ``b``."""
        return int((self.routes(a, b) >= 0).sum())

    def route_stats(self, routes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per route: (links, bottleneck GB/s, latency us) from :meth:`routes` rows."""
        valid = routes >= 0
        idx = np.where(valid, routes, 0)
        cap = np.where(valid, self.capacity[idx], np.inf)
        lat = np.where(valid, self.latency[idx], 0.0)
        return valid.sum(axis=1), cap.min(axis=1), lat.sum(axis=1)

    # ------------------------------------------------------------ names
    def device_name(self, d: int) -> str:
        """``node3/gpu5`` for device ``8*3+5`` on 8-GPU nodes."""
        return f"node{int(self.node_of(d))}/gpu{int(self.local_of(d))}"

    # ------------------------------------------------------------ graph
    def graph(self):
        """The networkx graph: GPUs, NVSwitch domains, NICs, leaves, spine.

        Nodes are tuples ``("gpu", d)``, ``("nvswitch", k)``, ``("nic", n)``,
        ``("leaf", l)``, ``("spine", 0)`` with a ``kind`` attribute; edges carry
        ``bandwidth_gb_per_s`` (nominal, per direction), ``efficiency``,
        ``capacity_gb_per_s`` (effective), ``latency_us``, ``tier`` and
        ``links`` (the two directed link ids, u->v then v->u).
        """
        import networkx as nx

        spec, su, so = self.spec, self.spec.scale_up, self.spec.scale_out
        off, vals = self.link_offsets, self._block_values()
        g = nx.Graph(name=spec.name, nodes=self.nodes)
        dev = np.arange(self.n_devices)
        node, local, dom = self.node_of(dev), self.local_of(dev), self.domain_of(dev)
        board = self.board_of(dev)
        g.add_nodes_from((("nvswitch", k), {"kind": "nvswitch", "domain": k})
                         for k in range(self.n_domains))
        for d in range(self.n_devices):
            g.add_node(("gpu", d), kind="gpu", node=int(node[d]), local=int(local[d]),
                       board=int(board[d]), domain=int(dom[d]))
            g.add_edge(("gpu", d), ("nvswitch", int(dom[d])), tier="nvlink",
                       bandwidth_gb_per_s=su.bandwidth_gb_per_s, efficiency=su.efficiency,
                       capacity_gb_per_s=vals["nvl_up"][0], latency_us=vals["nvl_up"][1],
                       links=(off["nvl_up"] + d, off["nvl_down"] + d))
        if so is None:
            return g
        nic_bw = so.nic_gb_per_s
        per_nic = self.gpus_per_node // self.nics_per_node
        for n in range(self.n_nics):
            nd, i = divmod(n, self.nics_per_node)
            first = nd * self.gpus_per_node + i * per_nic
            leaf = int(self.leaf_of(first))
            g.add_node(("nic", n), kind="nic", node=nd, local=i,
                       rail=i if self.rail_wired else 0, leaf=leaf)
            g.add_node(("leaf", leaf), kind="leaf")
            g.add_edge(("nic", n), ("leaf", leaf), tier="nic", bandwidth_gb_per_s=nic_bw,
                       efficiency=so.efficiency, capacity_gb_per_s=vals["nic_up"][0],
                       latency_us=vals["nic_up"][1], links=(off["nic_up"] + n, off["nic_down"] + n))
            for d in range(first, first + per_nic):
                g.add_edge(("gpu", d), ("nic", n), tier="pcie", bandwidth_gb_per_s=so.pcie_gb_per_s,
                           efficiency=1.0, capacity_gb_per_s=vals["pcie_up"][0],
                           latency_us=vals["pcie_up"][1],
                           links=(off["pcie_up"] + d, off["pcie_down"] + d))
        for leaf in range(self.n_leaves):
            rail = leaf % self.nics_per_node if self.rail_wired else None
            g.nodes[("leaf", leaf)].update(rail=rail, group=leaf // (self.nics_per_node
                                                                      if self.rail_wired else 1))
        if self.has_spine:
            g.add_node(("spine", 0), kind="spine")
            val = vals["leaf_up"]
            leaf_t, spine_t = so.tiers
            nominal = leaf_t.uplink_ports * min(leaf_t.port_speed_gbit_per_s,
                                                spine_t.port_speed_gbit_per_s) / 8.0
            for leaf in range(self.n_leaves):
                g.add_edge(("leaf", leaf), ("spine", 0), tier="spine", bandwidth_gb_per_s=nominal,
                           efficiency=so.efficiency, capacity_gb_per_s=val[0], latency_us=val[1],
                           links=(off["leaf_up"] + leaf, off["leaf_down"] + leaf))
        return g

    def summary(self) -> dict:
        """Counts and per-tier figures, for ``topology show``."""
        spec, su, so = self.spec, self.spec.scale_up, self.spec.scale_out
        out = {
            "name": spec.name, "file": spec.source, "nodes": self.nodes,
            "gpus": self.n_devices, "gpus_per_node": self.gpus_per_node,
            "gpus_per_board": spec.node.gpus_per_board,
            "nvlink_domains": self.n_domains, "nvlink_domain_gpus": self.domain_gpus,
            "nvlink_gb_per_s": su.bandwidth_gb_per_s, "nvlink_efficiency": su.efficiency,
            "nics": self.n_nics, "rails": self.n_rails, "leaves": self.n_leaves,
            "spine": self.has_spine, "directed_links": self.n_links,
            "arch": spec.node.arch, "nvls": su.nvls,
        }
        if so is not None:
            out.update(nics_per_node=so.nics_per_node, nic_gbit_per_s=so.speed_gbit_per_s,
                       nic_efficiency=so.efficiency, wiring=so.wiring,
                       nodes_per_leaf=self.nodes_per_leaf, sharp=so.sharp, pxn=self.pxn)
        return out


TIERS = ("nvlink", "pcie", "nic", "spine")
ROUTE_WIDTH = 8  # links on the longest route: PXN NVLink hop, PCIe, NIC, 2 spine, NIC, PCIe
