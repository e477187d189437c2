"""Moved to :mod:`simharness.step` (engine, schedules, pricing, report, simulate); this
path re-exports it for one release.

:func:`simulate` here keeps the keyword signature it had: it builds a
:class:`~simharness.step.SimulateInputs` from the keywords and calls
:func:`simharness.step.simulate`. The old private names stay importable under
their old spelling (``_Pricer``, ``_job_groups``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..step.compute import BACKWARD_OVER_FORWARD, check_number, compute_times
from ..step.engine import Coll, OpCost, OpsResult, Timeline, Unit, run_units, simulate_ops
from ..step.pricing import ROLE_COLLECTIVE, ROLE_NAMES, JobGroups, Pricer, job_groups
from ..step.report import (
    HBM_BYTES_PER_WIRE_BYTE,
    NO_QUEUE_FSDP,
    CollRow,
    OverlapReport,
    Scenario,
    StageRow,
    collective_rows,
    extra_memories,
    model_unknowns,
    queue_note,
)
from ..step.schedules import (
    SCHEDULES,
    ScheduleParams,
    dist_opt_units,
    dp_buckets,
    fsdp_units,
    sharing_scenarios,
)
from ..step.simulate import SimulateInputs
from ..step.simulate import simulate as _simulate
from ..step.workload import StageWork
from .comm_memory import CommMemoryInputs
from .nccl_tuning import DEFAULT_NCCL
from .placement import Placement

# the old private spellings
_Pricer, _Groups, _job_groups, _Sched = Pricer, JobGroups, job_groups, ScheduleParams
_fsdp_units, _dist_opt_units, _scenarios = fsdp_units, dist_opt_units, sharing_scenarios
_ROLE_NAMES, _COLL, _check_number = ROLE_NAMES, ROLE_COLLECTIVE, check_number
_collective_rows, _queue_note, _unknowns = collective_rows, queue_note, model_unknowns
_memories = extra_memories

__all__ = ["BACKWARD_OVER_FORWARD", "HBM_BYTES_PER_WIRE_BYTE", "NO_QUEUE_FSDP", "SCHEDULES",
           "Coll", "CollRow", "OpCost", "OpsResult", "OverlapReport", "Scenario",
           "SimulateInputs", "StageRow", "Timeline", "Unit", "compute_times", "dp_buckets",
           "run_units", "simulate", "simulate_ops"]


def simulate(layout, placement: Placement, *, stages: Sequence[StageWork],
             schedule: str = "fsdp", compute_ms: float | None = None,
             mfu: float | None = None, peak_tflops: float | None = None,
             grad_scale: float = 1.0, bytes_per_param: float = 2.0, rs_kind: str = "dp_cp",
             ag_kind: str | None = None, comm_memory_mb: float | None = None,
             collnet: bool = False, memory_inputs: CommMemoryInputs | None = None,
             nccl: str = DEFAULT_NCCL, param_gather_with_optimizer_step: bool = False,
             bucket_params: float | None = None,
             launch_queue: bool | None = None) -> OverlapReport:
    """:func:`simharness.step.simulate` with the fields of
    :class:`~simharness.step.SimulateInputs` as keywords."""
    return _simulate(layout, placement, SimulateInputs(
        stages=stages, schedule=schedule, compute_ms=compute_ms, mfu=mfu,
        peak_tflops=peak_tflops, grad_scale=grad_scale, bytes_per_param=bytes_per_param,
        rs_kind=rs_kind, ag_kind=ag_kind, comm_memory_mb=comm_memory_mb, collnet=collnet,
        memory_inputs=memory_inputs, nccl=nccl,
        param_gather_with_optimizer_step=param_gather_with_optimizer_step,
        bucket_params=bucket_params, launch_queue=launch_queue))
