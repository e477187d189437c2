"""Megatron-Core's NCCL communicator config file (``nccl_communicator_config_path``) on CPU ranks.

``python -m simharness.launch.rank --shim -- examples/launch/megatron_comm_config.py YAML``
on 2 ranks (or ``simharness.launch``): megatron-core's own ``initialize_model_parallel``
reads the YAML (per-group ``cga_cluster_size``, ``max_ctas``, ``min_ctas``, ``net_name``,
``is_high_priority_stream``) into ``ProcessGroupNCCL.Options`` for each group it names; the
shim builds the groups on gloo, drops the options and lists them as ignored. Each rank
prints ``TP ranks=... sum=...`` after an all-reduce on its tensor-parallel group.
"""
import os
import sys

import torch
import torch.distributed as dist
from megatron.core import parallel_state as ps

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
ps.initialize_model_parallel(tensor_model_parallel_size=2,
                             nccl_communicator_config_path=sys.argv[1])
group = ps.get_tensor_model_parallel_group()
t = torch.ones(1, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(t, group=group)
print(f"TP ranks={dist.get_process_group_ranks(group)} sum={t.item():g}", flush=True)
ps.destroy_model_parallel()
dist.destroy_process_group()
