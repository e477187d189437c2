"""A GPU-style distributed script, unedited as a Megatron/NeMo user would write it.

Run by tests/test_launch.py on CPU ranks through `simharness.launch` with the shim.
Each rank prints one `RESULT ...` line that the test checks.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group(backend="cuda:nccl,cpu:gloo",
                        device_id=torch.device("cuda", torch.cuda.current_device()))
rank, world = dist.get_rank(), dist.get_world_size()

x = torch.ones(2, device="cuda") * (rank + 1)
dist.all_reduce(x)
opts = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)
opts.config.cga_cluster_size = 2
half = [r for r in range(world) if r % 2 == rank % 2]
pairs = [[r for r in range(world) if r % 2 == 0], [r for r in range(world) if r % 2 == 1]]
groups = [dist.new_group(ranks=p, backend="nccl", pg_options=opts) for p in pairs]
mine = groups[rank % 2]
y = torch.tensor([rank], device=torch.cuda.current_device())
dist.all_reduce(y, group=mine)
split = dist.split_group(split_ranks=[[0, 1], [2, 3]])
z = torch.tensor([rank]).cuda()
dist.all_reduce(z, group=split)
sub, _ = dist.new_subgroups(group_size=2)
mesh = init_device_mesh("cuda", (2, world // 2), mesh_dim_names=("dp", "tp"))
tp_ranks = dist.get_process_group_ranks(mesh.get_group("tp"))
objs = [None] * world
dist.all_gather_object(objs, os.environ["RANK"])
torch.cuda.synchronize()
torch.cuda.empty_cache()
print(f"RESULT rank={rank} sum={x.tolist()} half={y.item()} split={z.item()} "
      f"sub={dist.get_process_group_ranks(sub)} tp={tp_ranks} objs={objs} "
      f"hashseed={hash('simharness') % 1000}", flush=True)
from simharness.launch.env import TORCHRUN_VARS  # noqa: E402

print("ENV " + " ".join(f"{k}={os.environ.get(k, '-')}" for k in TORCHRUN_VARS), flush=True)
if len(sys.argv) > 1 and sys.argv[1] == "--stream":
    torch.cuda.Stream()
dist.destroy_process_group()
