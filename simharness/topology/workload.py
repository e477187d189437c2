"""Moved to :mod:`simharness.step.workload`; this path re-exports it for one release."""

from ..step.workload import (
    MAX_MODEL_BYTES,
    MODEL_FIELDS,
    ModelSpec,
    Slot,
    StageWork,
    bytes_work,
    job_stages,
    model_fields_from_file,
    model_spec,
    pipeline_split,
    stage_layer_counts,
    stage_work,
)

__all__ = ["MAX_MODEL_BYTES", "MODEL_FIELDS", "ModelSpec", "Slot", "StageWork", "bytes_work",
           "job_stages", "model_fields_from_file", "model_spec", "pipeline_split",
           "stage_layer_counts", "stage_work"]
