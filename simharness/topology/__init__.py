"""Cluster topologies, rank placement, locality and a collective cost model.

The flow is one way: a topology file (``topologies/*.toml``) becomes a
:class:`Cluster` (arithmetic) and a networkx graph; a layout's ranks are
placed on its devices (:mod:`.placement`; :mod:`.sizing` picks the node count);
locality counts and findings come from the placement; :mod:`.cost` gives each
group's ring rate on the links (max-min fair sharing, PXN) and prices its
collectives with NCCL's model: graph search (:mod:`.nccl_graph`), tuning
constants (:mod:`.nccl_tuning`), the algorithm/protocol pick
(:mod:`.nccl_model`), launch and pipeline fill (:mod:`.nccl_ramp`),
communicator memory (:mod:`.comm_memory`), checked against published
measurements (:mod:`.calibration`).

The step model (a model's per-stage work and the overlap simulation) lives in
:mod:`simharness.step`. ``simulate``, ``job_stages`` and ``ModelSpec`` are
re-exported here for one release; they are loaded on first use, so importing
this package does not import :mod:`simharness.step` (which imports this one).

>>> from simharness import ParallelismConfig, build_layout
>>> layout = build_layout(ParallelismConfig(world_size=64, tensor_model_parallel_size=8,
...                                         create_all_gather_group=True))
>>> placement = place_layout(layout, load_cluster("dgx-h100-superpod", nodes=8))
>>> rows, findings = analyse(layout, placement)
>>> [(r.kind, r.in_node, r.bottleneck) for r in rows if r.kind in ("tp", "dp_cp")]
[('dp_cp', 0, 'nic'), ('tp', 8, 'nvlink')]
>>> from simharness.topology import job_stages, simulate
>>> stages, _ = job_stages(layout.config, model_bytes=14e9, layers=32)
>>> report = simulate(layout, placement, stages=stages, compute_ms=2.0)
>>> report.groups["dense_ag"], report.extra_communicators
('dp_cp_ag', 1)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .cluster import Cluster
from .cost import build_rings, bus_bandwidth, maxmin_rates, predict
from .errors import TopologyError
from .loader import list_topologies, load_cluster, load_graph, load_spec, topology_dir
from .locality import analyse, locality, topology_findings
from .placement import Placement, place, place_layout
from .schema import TopologySpec
from .sizing import cluster_for, node_limit, nodes_for

if TYPE_CHECKING:  # re-exported from simharness.step, loaded on first use (__getattr__)
    from .overlap import simulate
    from .workload import ModelSpec, job_stages

_FROM_STEP = {"simulate": "overlap", "ModelSpec": "workload", "job_stages": "workload"}

__all__ = ["Cluster", "ModelSpec", "Placement", "TopologyError", "TopologySpec", "analyse",
           "build_rings", "bus_bandwidth", "cluster_for", "job_stages", "list_topologies",
           "load_cluster", "load_graph", "load_spec", "locality", "maxmin_rates", "node_limit",
           "nodes_for", "place", "place_layout", "predict", "simulate", "topology_dir",
           "topology_findings"]


def __getattr__(name: str) -> Any:
    if name in _FROM_STEP:
        import importlib

        value = getattr(importlib.import_module(f".{_FROM_STEP[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
