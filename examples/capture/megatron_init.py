"""Megatron-Core's own initialisation, as a training script runs it (one process per rank).

    simharness capture -n 16 -- python examples/capture/megatron_init.py --tp 2 --pp 2 --cp 2

With megatron-core 0.16/0.17, --create-all-gather-group goes to initialize_model_parallel;
with 0.18+ (no such keyword) the script calls create_all_gather_groups() afterwards, as
Megatron-LM's training loop does.
"""

import argparse
import inspect

import torch
import torch.distributed as dist


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--cp", type=int, default=1)
    p.add_argument("--ep", type=int, default=1)
    p.add_argument("--etp", type=int, default=None)
    p.add_argument("--use-tp-pp-dp-mapping", action="store_true")
    p.add_argument("--create-all-gather-group", action="store_true")
    return p.parse_args(argv)


def init(parallel_state, args):
    """``initialize_model_parallel`` (+ the 0.18+ all-gather groups) of ``parallel_state``."""
    kwargs = dict(tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
                  context_parallel_size=args.cp, expert_model_parallel_size=args.ep,
                  expert_tensor_parallel_size=args.etp,
                  order="tp-cp-ep-pp-dp" if args.use_tp_pp_dp_mapping else "tp-cp-ep-dp-pp")
    accepts = inspect.signature(parallel_state.initialize_model_parallel).parameters
    if "create_all_gather_group" in accepts:  # megatron-core 0.16/0.17
        kwargs["create_all_gather_group"] = args.create_all_gather_group
    parallel_state.initialize_model_parallel(**kwargs)
    if args.create_all_gather_group and hasattr(parallel_state, "create_all_gather_groups"):
        parallel_state.create_all_gather_groups(for_expert_parallelism=args.ep > 1)


if __name__ == "__main__":
    args = parse()
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    from megatron.core import parallel_state

    init(parallel_state, args)
