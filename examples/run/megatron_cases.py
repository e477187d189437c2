"""A Megatron-Core distributed test file written the way GPU suites are (torchrun + NCCL,
``torch.cuda.set_device``, CUDA tensors), for ``simharness run -n 8``: 40 tests.

Used by bench/bench_run.py (wall time of a 40-test file on 8 ranks). Outside the testpaths,
so the normal suite does not collect it. Each test builds Megatron's groups with
megatron-core's own ``initialize_model_parallel`` on gloo (the shim turns NCCL into gloo),
checks them against ``simharness.build_layout`` and runs one real all-reduce on the
data-parallel group.
"""

import os

import pytest
import torch
import torch.distributed as dist

ps = pytest.importorskip("megatron.core.parallel_state")

from simharness import ParallelismConfig, build_layout  # noqa: E402

WORLD = int(os.environ.get("WORLD_SIZE", "8"))


@pytest.fixture(scope="module", autouse=True)
def distributed():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    yield
    torch.cuda.synchronize()


@pytest.fixture
def model_parallel():
    def init(**kw):
        ps.initialize_model_parallel(**kw)
        return kw
    yield init
    ps.destroy_model_parallel()
    torch.cuda.empty_cache()


def _sizes():
    out = []
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8):
            for cp in (1, 2):
                if tp * pp * cp <= WORLD and WORLD % (tp * pp * cp) == 0:
                    out.append((tp, pp, cp))
    return out


SIZES = _sizes()


@pytest.mark.parametrize("tp,pp,cp", SIZES)
def test_groups_match_the_layout(model_parallel, tp, pp, cp):
    model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                   context_parallel_size=cp)
    lay = build_layout(ParallelismConfig(world_size=WORLD, tensor_model_parallel_size=tp,
                                         pipeline_model_parallel_size=pp,
                                         context_parallel_size=cp), mcore="0.16")
    view = lay.rank(dist.get_rank())
    assert dist.get_process_group_ranks(ps.get_tensor_model_parallel_group()) == \
        sorted(int(r) for r in view.groups["tp"].ranks)
    assert dist.get_process_group_ranks(ps.get_pipeline_model_parallel_group()) == \
        sorted(int(r) for r in view.groups["pp"].ranks)
    assert dist.get_process_group_ranks(ps.get_data_parallel_group(with_context_parallel=True)) \
        == sorted(int(r) for r in view.groups["dp_cp"].ranks)


@pytest.mark.parametrize("tp,pp,cp", SIZES)
def test_all_reduce_on_data_parallel_group(model_parallel, tp, pp, cp):
    model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                   context_parallel_size=cp)
    group = ps.get_data_parallel_group()
    x = torch.ones(8, device="cuda") * dist.get_rank()
    dist.all_reduce(x, group=group)
    assert x[0].item() == sum(dist.get_process_group_ranks(group))


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_tensor_parallel_rank_and_src(model_parallel, tp):
    model_parallel(tensor_model_parallel_size=tp)
    rank = dist.get_rank()
    assert ps.get_tensor_model_parallel_rank() == rank % tp
    assert ps.get_tensor_model_parallel_src_rank() == rank - rank % tp


@pytest.mark.parametrize("pp", [1, 2, 4, 8])
def test_pipeline_neighbours(model_parallel, pp):
    model_parallel(pipeline_model_parallel_size=pp)
    rank, step = dist.get_rank(), WORLD // pp
    assert ps.get_pipeline_model_parallel_next_rank() == (rank + step) % WORLD
    assert ps.get_pipeline_model_parallel_prev_rank() == (rank - step) % WORLD
    assert ps.is_pipeline_first_stage(ignore_virtual=True) == (rank < step)
