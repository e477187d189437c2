"""Per-process behaviour --fast must not hide: the rank read at import time, hash order."""

import os

import rank_at_import
import torch.distributed as dist

dist.init_process_group("gloo")
print(f"hello from rank {dist.get_rank()}")
dist.new_group([rank_at_import.RANK_AT_IMPORT], use_local_synchronization=True,
               group_desc="SELF")
if os.environ.get("SETS"):
    for name in {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}:
        dist.new_group([0, 1], group_desc=name)
