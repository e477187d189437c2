"""PyTorch FSDP2 (fully_shard) on a 2-D HSDP mesh, with a separate reduce-scatter group.

``set_separate_reduce_scatter_group()`` (torch 2.13) gives the gradient reduce-scatter
its own communicator over the shard ranks (``new_group(..., use_local_synchronization=True,
group_desc="fsdp_reduce_scatter")``) so it can overlap the parameter all-gather.

    simharness capture -n 8 -- python examples/capture/fsdp2_init.py --shard 4
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def build(shard: int, separate: bool = True) -> nn.Module:
    world = dist.get_world_size()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    mesh = init_device_mesh(device, (world // shard, shard),
                            mesh_dim_names=("replicate", "shard"))
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if separate:
        model.set_separate_reduce_scatter_group()
    return model


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shard", type=int, default=4, help="ranks per shard group")
    p.add_argument("--no-separate-reduce-scatter", dest="separate", action="store_false")
    a = p.parse_args()
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    model = build(a.shard, a.separate)
