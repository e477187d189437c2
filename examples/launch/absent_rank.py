"""``monitored_barrier`` names a rank that never arrives, at once, on fresh NCCL-style groups.

Run on 2 ranks under the shim: for each of ``--groups`` new groups over both ranks (backend
``nccl``, so gloo), rank 0 calls ``monitored_barrier(group, timeout=1s)`` and rank 1 does
not. Rank 0 must get torch's "Rank 1 failed to pass monitoredBarrier" within the timeout;
it prints ``NAMED i SECONDS`` per group, or ``STUCK i`` and exits 4 when one call has not
returned after 15 s. Under ``TORCH_GLOO_LAZY_INIT=1`` rank 0 is stuck whenever it is the
listening side of the new pair (about half the groups; ``bench/gloo_lazy_barrier.py``).
"""
import datetime
import os
import sys
import threading
import time

import torch.distributed as dist

groups = int(sys.argv[sys.argv.index("--groups") + 1]) if "--groups" in sys.argv else 8
dist.init_process_group("nccl")
rank = dist.get_rank()
for i in range(groups):
    g = dist.new_group([0, 1], backend="nccl")
    if rank == 0:
        done = threading.Event()

        def watchdog(i: int = i, done: threading.Event = done) -> None:
            if not done.wait(15):
                print(f"STUCK {i}", flush=True)
                os._exit(4)

        threading.Thread(target=watchdog, daemon=True).start()
        t0 = time.monotonic()
        try:
            dist.monitored_barrier(g, timeout=datetime.timedelta(seconds=1))
            print(f"PASSED {i} (rank 1 never called it)", flush=True)
        except RuntimeError as exc:
            if "Rank 1 failed to pass monitoredBarrier" in str(exc):
                print(f"NAMED {i} {time.monotonic() - t0:.2f}", flush=True)
            else:
                print(f"OTHER {i} {exc}", flush=True)
        done.set()
    dist.barrier()  # rank 1 waits here until rank 0 is done with this group
dist.destroy_process_group()
