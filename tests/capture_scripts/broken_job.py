"""Rank 1 cannot import a module (triton missing on that node); rank 3 hangs; a rank needs
a GPU (a stream, or compute on a CUDA tensor) - as BROKEN says.

With ATEXIT_DIR set, each rank's atexit handler leaves a file there (the capture rank ends
without the interpreter's teardown, but after the atexit handlers).
"""

import atexit
import os
import time

import torch.distributed as dist

rank = int(os.environ["RANK"])
if os.environ.get("ATEXIT_DIR"):
    mark = os.path.join(os.environ["ATEXIT_DIR"], f"atexit-{rank}")
    atexit.register(lambda: open(mark, "w").close())
if rank == 1 and os.environ.get("BROKEN") == "import":
    import simharness_no_such_triton  # noqa: F401


def wait_for_peer():
    while True:
        time.sleep(0.05)


dist.init_process_group("nccl")
dist.new_group([0, 1], group_desc="PAIR")
if rank == dist.get_world_size() - 1 and os.environ.get("BROKEN") == "hang":
    print(f"rank {rank} waits", flush=True)
    wait_for_peer()
if os.environ.get("BROKEN") == "cuda":
    import torch

    x = torch.ones(4, device="cuda")  # data on "cuda": the shim puts it on CPU
    dist.all_reduce(x)  # data movement
    if rank == 0:
        y = x * 2  # compute on a CUDA tensor: needs a real GPU
    stream = torch.cuda.Stream()  # needs a real GPU
