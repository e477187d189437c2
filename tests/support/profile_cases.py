"""Shared by the profile tests (tests/unit/profiles/ and their parity halves in
tests/parity/): the reference world, the group descs that only some profiles create, and
helpers that build a layout and list its creation order."""

from __future__ import annotations

from simharness import ParallelismConfig, build_layout

GTP_DESCS = {"GTP_WEIGHT_REMAT_GROUP", "EXPERT_GTP_WEIGHT_REMAT_GROUP",
             "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP"}
AG_DESCS = {"DATA_PARALLEL_GROUP_WITH_CP_AG", "EXPERT_DATA_PARALLEL_GROUP_AG"}
# the W=16 reference world (tp 2, pp 2, cp 2)
REF16 = dict(world_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
             context_parallel_size=2)


def lay(mcore: str, **kw):
    """``build_layout(ParallelismConfig(**kw), mcore)``."""
    return build_layout(ParallelismConfig(**kw), mcore=mcore)


def calls(layout):
    """The creation order as ``(desc, ranks, backend)`` triples."""
    return [(c.desc, c.ranks, c.backend) for c in layout.creation_order]


def descs(layout):
    """The descs of the creation order, in order."""
    return [c.desc for c in layout.creation_order]
