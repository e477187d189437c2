"""Replay a layout on real processes through ``torch.distributed``.

It imports ``torch.distributed`` only when it runs: importing this package is cheap
(the replay commands of the CLI import it at start-up).

* :func:`replay` - start ``world_size`` local ranks (gloo on CPU, or NCCL with
  one GPU per rank), create every group of the plan in creation order (or run
  megatron-core's ``initialize_model_parallel``: ``engine="megatron"``), verify
  each group with torch and one collective, check the all-gather groups, time
  the overlap probe, and return the report.
* :func:`verify_live` - re-exported from :mod:`simharness.live`: the same comparison
  inside a real job, right after Megatron initialised.
* :func:`replay_data` - the optimizer's data path (reduce-scatter and all-gather
  of real buckets, or FSDP2) on the plan's groups, bit-compared with a
  single-process reference (see :mod:`.datapath`).
* :func:`torchrun_command` - the command that replays a plan on a cluster
  (``python -m simharness.replay.worker`` reads the torchrun environment).
"""

from ..live import verify_live
from .controller import preflight, replay, torchrun_command, write_report
from .datapath import DataPathOptions, replay_data
from .options import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_MISMATCH,
    EXIT_OK,
    EXIT_USAGE,
    REPORT_SCHEMA,
    Fault,
    ReplayError,
    ReplayOptions,
)
from .report import summary_lines

__all__ = [
    "DataPathOptions", "replay_data", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_MISMATCH",
    "EXIT_OK", "EXIT_USAGE", "Fault", "REPORT_SCHEMA", "ReplayError", "ReplayOptions",
    "preflight", "replay", "summary_lines", "torchrun_command", "verify_live", "write_report",
]
