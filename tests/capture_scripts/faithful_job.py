"""What a real torchrun job sees and a one-interpreter capture did not (issue 14).

Every rank: a GPU-style init (NCCL, set_device, device_id=), CUDA tensors created, moved
and communicated (no compute on them), the rank read at import
time by a module, real object collectives building node groups, groups created while
iterating a set of strings (hash order differs per process), new_subgroups, split_group
and a "cuda" DeviceMesh.
"""

import os

import rank_at_import
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("cuda:nccl,cpu:gloo", device_id=torch.device("cuda", local))
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == rank_at_import.RANK_AT_IMPORT, (rank_at_import.RANK_AT_IMPORT, rank)
assert torch.cuda.device_count() == int(os.environ["LOCAL_WORLD_SIZE"])
torch.cuda.synchronize()

hosts = [None] * world
dist.all_gather_object(hosts, f"node{rank // 2}")
node_groups = {node: dist.new_group([r for r, h in enumerate(hosts) if h == node],
                                    group_desc="NODE") for node in sorted(set(hosts))}
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
mine = node_groups[f"node{rank // 2}"]   # collectives on a subgroup compute real data
node_sum = torch.tensor([rank + 1.0])
dist.all_reduce(node_sum, group=mine)
node_ranks = [None, None]
dist.all_gather_object(node_ranks, rank, group=mine)
box = [{"from": rank}] if rank == 0 else [None]
dist.broadcast_object_list(box, src=0)
# CUDA tensors only created, moved, copied and communicated: data movement, captured cleanly
on_gpu = torch.full((2,), float(rank), device="cuda")
dist.all_reduce(on_gpu)
dist.broadcast(on_gpu[:1], src=1)
gathered = [torch.empty(2, device=f"cuda:{local}") for _ in range(world)]
dist.all_gather(gathered, torch.tensor([rank, rank]).cuda().float())
weights = torch.nn.Linear(2, 2).to("cuda")
moved = (torch.cat(gathered).view(world, 2)[:, 0].cpu() + 0.5).tolist()  # compute on CPU
SUMMARY = {"cuda_moved": [on_gpu.tolist(), moved, str(weights.weight.dtype)],
           "rank_at_import": rank_at_import.RANK_AT_IMPORT, "sum": total.item(),
           "hosts": hosts, "box": box[0], "node_sum": node_sum.item(), "node_ranks": node_ranks,
           "node_backend": dist.get_backend(mine)}

dist.new_subgroups(2, group_desc="SUBGROUP")
dist.split_group(split_ranks=[[0, 1], [2, 3]], group_desc="SPLIT")
init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))

for name in {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}:
    dist.new_group([0, 1], group_desc=name)
