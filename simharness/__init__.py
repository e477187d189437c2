"""simharness: Megatron-Core process-group layouts, simulated, checked and replayed.

The core (fields, config, grid, plan, layout, checks, and mcore and creation_log, which
read the installed megatron-core's version and compare a recorded ``new_group`` log with
the plan) is pure: it never imports ``torch.distributed``. Which package may import which,
and which may import ``torch.distributed``, is stated once in docs/architecture.md and
enforced by the import-rules test.
"""

from .checks import check
from .config import ParallelismConfig
from .errors import GroupNotInitialized, LayoutError, SimharnessError
from .findings import Finding
from .layout import Collectives, Layout, RankView, build_layout
from .plan import GroupCreation
from .profiles import DEFAULT_MCORE, MCORE_PROFILES

__version__ = "0.1.0"

__all__ = [
    "Collectives", "DEFAULT_MCORE", "Finding", "GroupCreation", "GroupNotInitialized", "Layout",
    "LayoutError", "MCORE_PROFILES", "ParallelismConfig", "RankView", "SimharnessError",
    "__version__", "build_layout", "capture", "check", "verify_live",
]


def __getattr__(name):
    if name == "verify_live":  # lazy: live verification imports torch.distributed
        from .live import verify_live

        return verify_live
    if name == "capture":  # the package is callable: simharness.capture(fn, world_size)
        import importlib

        return importlib.import_module(".capture", __name__)
    raise AttributeError(f"module 'simharness' has no attribute {name!r}")
