"""How many nodes of a topology a layout needs: the cluster a placement runs on.

A layout placed in torchrun order puts global rank ``r`` on device ``r`` (or
its first rank on ``first_device``), so its last rank needs
``ceil((offset + world) / gpus_per_node)`` nodes; a host list needs at least
one node per distinct host. A topology may cap the node count: its
``max_nodes``, the nodes of one NVLink domain when it has no scale-out network,
or the nodes under one leaf when its network has one tier.

>>> from simharness import ParallelismConfig, build_layout
>>> from simharness.topology import load_spec
>>> layout = build_layout(ParallelismConfig(world_size=24))
>>> nodes_for(load_spec("dgx-h100-superpod"), layout)
3
>>> node_limit(load_spec("dgx-h100")), cluster_for("dgx-h100-superpod", layout).nodes
(1, 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .cluster import Cluster
from .errors import TopologyError
from .loader import load_cluster, load_spec
from .schema import TopologySpec


def node_limit(spec: TopologySpec) -> int | None:
    """The most nodes ``spec`` can hold (the limits :class:`.Cluster` enforces), or None."""
    limits = [spec.max_nodes] if spec.max_nodes is not None else []
    if spec.scale_out is None:
        limits.append(spec.nodes_per_domain)
    elif len(spec.scale_out.tiers) == 1:
        limits.append(spec.scale_out.nodes_per_leaf)
    return min(limits) if limits else None


def nodes_for(spec: TopologySpec, layout, *, first_device: int | None = None,
              hosts: Sequence[str] | None = None) -> int:
    """The fewest nodes of ``spec`` that hold ``layout``'s ranks (from ``first_device``,
    default its rank offset) and one node per distinct host of ``hosts``; a
    :class:`.TopologyError` when that is more than the topology holds."""
    gpn = spec.node.gpus
    last = (layout.rank_offset if first_device is None else first_device) + layout.world_size
    n_hosts = len(set(hosts)) if hosts else 0
    nodes = max(-(-last // gpn), n_hosts, 1)
    limit = node_limit(spec)
    if limit is not None and nodes > limit:
        why = (f"--hosts names {n_hosts} hosts" if n_hosts > -(-last // gpn) else
               f"{last} ranks need {nodes} nodes of {gpn} GPUs")
        raise TopologyError(
            f"{why}, but topology {spec.name!r} holds at most {limit} node(s) "
            f"({limit * gpn} GPUs); pick a bigger topology (simharness topology list) or "
            f"a world of at most {limit * gpn - (last - layout.world_size)} ranks")
    return nodes


def cluster_for(topology: str | Path | TopologySpec, layout, *, nodes: int | None = None,
                first_device: int | None = None,
                hosts: Sequence[str] | None = None) -> Cluster:
    """The cluster ``layout`` runs on: ``nodes`` nodes of ``topology`` when given, else
    just enough for its ranks and hosts (:func:`nodes_for`)."""
    spec = topology if isinstance(topology, TopologySpec) else load_spec(topology)
    if nodes is None:
        nodes = nodes_for(spec, layout, first_device=first_device, hosts=hosts)
    return load_cluster(spec, nodes)
