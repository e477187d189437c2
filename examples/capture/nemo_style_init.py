"""A NeMo-style initialisation: the all-gather option passed only when megatron-core takes it.

NeMo threads ``create_all_gather_group`` from its ParallelismConfig into
``initialize_model_parallel``. A backward-compatible version passes the keyword only when
the installed megatron-core accepts it, and that is all it does: with megatron-core 0.18+
the keyword no longer exists, so the option is dropped and no all-gather group is created
(0.18+ needs ``create_all_gather_groups()``, which this path never calls).

    simharness capture -n 16 --tp 2 --cp 2 --create-all-gather-group \\
        -- python examples/capture/nemo_style_init.py --tp 2 --cp 2 --create-all-gather-group
"""

import argparse
import inspect
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class AppState:
    """The slice of NeMo's AppState that reaches initialize_model_parallel."""

    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    context_parallel_size: int = 1
    use_tp_pp_dp_mapping: bool = False
    create_all_gather_group: bool = False


def init_model_parallel(parallel_state, app_state: AppState) -> dict:
    """NeMo's compatibility path; returns the keyword arguments it passed."""
    kwargs = dict(tensor_model_parallel_size=app_state.tensor_model_parallel_size,
                  pipeline_model_parallel_size=app_state.pipeline_model_parallel_size,
                  context_parallel_size=app_state.context_parallel_size,
                  order="tp-cp-ep-pp-dp" if app_state.use_tp_pp_dp_mapping else "tp-cp-ep-dp-pp")
    if "create_all_gather_group" in inspect.signature(
            parallel_state.initialize_model_parallel).parameters:
        kwargs["create_all_gather_group"] = app_state.create_all_gather_group
    parallel_state.initialize_model_parallel(**kwargs)
    return kwargs


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--cp", type=int, default=1)
    p.add_argument("--use-tp-pp-dp-mapping", action="store_true")
    p.add_argument("--create-all-gather-group", action="store_true")
    a = p.parse_args()
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    from megatron.core import parallel_state

    init_model_parallel(parallel_state, AppState(a.tp, a.pp, a.cp, a.use_tp_pp_dp_mapping,
                                                 a.create_all_gather_group))
