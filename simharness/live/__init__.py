"""Live verification: compare the process groups of a running job with a layout.

:func:`verify_live` runs inside a real job (every rank, right after Megatron initialised):
each rank reads Megatron's group getters and checks them against the layout, and the
results are merged into one report (:mod:`.report`). It imports ``torch.distributed`` when
called. Replay's ranks (:mod:`simharness.replay.worker`) and the pytest plugin
(:mod:`simharness.testing`) call it; so can a user's own training script.

* :mod:`.job` - :func:`verify_live`, the collective entry point;
* :mod:`.verify` - the per-rank comparison of torch's live groups with the layout;
* :mod:`.report` - the merged report and its text summary (pure).
"""

from .job import verify_live

__all__ = ["verify_live"]
