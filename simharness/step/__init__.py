"""The step model: what ``create_all_gather_group`` buys a training step, stage by stage.

The flow is one way, on top of :mod:`simharness.topology` (placement, the link
model and NCCL's cost model; topology never imports this package, except its
re-exports of the old paths):

- :mod:`.workload`: a model (bytes, or a description) -> per-stage parameters and
  FLOPs (:func:`job_stages`), with :mod:`.pp_layout` for Megatron's layout strings;
- :mod:`.compute`: each unit's compute time (per layer, or FLOPs at an MFU);
- :mod:`.pricing`: which group every collective runs on and what NCCL charges;
- :mod:`.schedules`: Megatron-FSDP and the distributed optimizer as units of
  compute with the collectives they wait for and issue;
- :mod:`.engine`: the discrete-event run of those units on one rank;
- :mod:`.report`: the per-stage steps, collectives, memory and the verdict;
- :mod:`.simulate`: :func:`simulate` (``layout, placement, SimulateInputs``).

>>> from simharness import ParallelismConfig, build_layout
>>> from simharness.topology import load_cluster, place_layout
>>> layout = build_layout(ParallelismConfig(world_size=64, tensor_model_parallel_size=8,
...                                         create_all_gather_group=True))
>>> placement = place_layout(layout, load_cluster("dgx-h100-superpod", nodes=8))
>>> stages, _ = job_stages(layout.config, model_bytes=14e9, layers=32)
>>> report = simulate(layout, placement, SimulateInputs(stages=stages, compute_ms=2.0))
>>> report.groups["dense_ag"], report.extra_communicators
('dp_cp_ag', 1)
"""

from .engine import OpCost, OpsResult, Timeline, Unit, run_units, simulate_ops
from .report import CollRow, OverlapReport, Scenario, StageRow
from .schedules import SCHEDULES
from .simulate import SimulateInputs, place_and_simulate, simulate
from .workload import ModelSpec, StageWork, job_stages

__all__ = ["SCHEDULES", "CollRow", "ModelSpec", "OpCost", "OpsResult", "OverlapReport",
           "Scenario", "SimulateInputs", "StageRow", "StageWork", "Timeline", "Unit",
           "job_stages", "place_and_simulate", "run_units", "simulate", "simulate_ops"]
