"""A deliberately buggy init: ranks create the embedding groups in different orders.

Each rank walks the pipeline groups starting with its own (the pattern behind a
Megatron-Bridge fix, PR #4985). torch pairs new_group calls by position, so rank 0's
"group of [0, 12]" is rank 1's "group of [1, 13]": two logical groups share a
communicator. ``simharness capture`` names the first rank and call where the orders
diverge.

    simharness capture -n 16 -- python examples/capture/divergent_groups.py --pp 4
"""

import argparse

import torch
import torch.distributed as dist


def embedding_groups(pp: int):
    world, rank = dist.get_world_size(), dist.get_rank()
    stride = world // pp
    pipelines = [list(range(start, world, stride)) for start in range(stride)]
    pipelines.sort(key=lambda ranks: rank not in ranks)  # BUG: own pipeline first
    mine = None
    for ranks in pipelines:
        group = dist.new_group([ranks[0], ranks[-1]], group_desc="EMBEDDING_GROUP")
        if rank in (ranks[0], ranks[-1]):
            mine = group
    return mine


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pp", type=int, default=4)
    a = p.parse_args()
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    embedding_groups(a.pp)
