"""Cluster topologies, rank placement, locality and a collective cost model.

The flow is one way: a topology file (``topologies/*.toml``) becomes a
:class:`Cluster` (arithmetic) and a networkx graph; a layout's ranks are
placed on its devices; locality counts and findings come from the placement;
:mod:`.cost` gives each group's ring rate on the links (max-min fair sharing,
PXN) and prices its collectives with NCCL's tuning model (:mod:`.nccl_model`),
:mod:`.workload` turns a model (bytes, or a description) into per-stage
parameters and FLOPs, and :mod:`.overlap` runs the step model with and without
a separate all-gather communicator.

>>> from simharness import ParallelismConfig, build_layout
>>> layout = build_layout(ParallelismConfig(world_size=64, tensor_model_parallel_size=8,
...                                         create_all_gather_group=True))
>>> placement = place_layout(layout, load_cluster("dgx-h100-superpod", nodes=8))
>>> rows, findings = analyse(layout, placement)
>>> [(r.kind, r.in_node, r.bottleneck) for r in rows if r.kind in ("tp", "dp_cp")]
[('dp_cp', 0, 'nic'), ('tp', 8, 'nvlink')]
>>> stages, _ = job_stages(layout.config, model_bytes=14e9, layers=32)
>>> report = simulate(layout, placement, stages=stages, compute_ms=2.0)
>>> report.groups["dense_ag"], report.extra_communicators
('dp_cp_ag', 1)
"""

from .cluster import Cluster
from .cost import build_rings, bus_bandwidth, maxmin_rates, predict
from .errors import TopologyError
from .loader import list_topologies, load_cluster, load_graph, load_spec, topology_dir
from .locality import analyse, locality, topology_findings
from .overlap import simulate
from .placement import Placement, place, place_layout
from .schema import TopologySpec
from .workload import ModelSpec, job_stages

__all__ = ["Cluster", "ModelSpec", "Placement", "TopologyError", "TopologySpec", "analyse",
           "build_rings", "bus_bandwidth", "job_stages", "list_topologies", "load_cluster",
           "load_graph", "load_spec", "locality", "maxmin_rates", "place", "place_layout",
           "predict", "simulate", "topology_dir", "topology_findings"]
