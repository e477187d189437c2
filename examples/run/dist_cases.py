"""Distributed tests written for GPUs (torchrun + NCCL), run by tests/test_run.py through
`simharness run` on CPU ranks. Outside the testpaths, so the normal suite does not collect it.

Outcomes by design: passes, one failure on rank 1 only, a NeedsGPU skip, a plain skip, a
hang on ranks 0 and 1 (the others wait), and a test after the hang that must still run.
"""

import os

import pytest
import torch
import torch.distributed as dist


@pytest.fixture(scope="module", autouse=True)
def process_group():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if not dist.is_initialized():
        dist.init_process_group("nccl")
    yield
    torch.cuda.synchronize()


def test_all_reduce_on_cuda():
    x = torch.ones(4, device="cuda") * (dist.get_rank() + 1)
    dist.all_reduce(x)
    w = dist.get_world_size()
    assert x.tolist() == [w * (w + 1) / 2] * 4


def test_new_group_pairs():
    w = dist.get_world_size()
    groups = [dist.new_group([r, r + 1], backend="nccl") for r in range(0, w, 2)]
    mine = groups[dist.get_rank() // 2]
    t = torch.tensor([dist.get_rank()]).cuda()
    dist.all_reduce(t, group=mine)
    assert t.item() == (dist.get_rank() // 2) * 4 + 1


def test_fails_on_rank_1_only():
    assert dist.get_rank() != 1, "rank 1 disagrees"


def test_needs_a_stream():
    torch.cuda.Stream()


def test_skipped():
    pytest.skip("not for CPU")


def test_hangs_on_rank_0():
    if dist.get_rank() == 0:
        dist.barrier()  # the other ranks never join


def test_after_the_hang():
    x = torch.ones(1)
    dist.all_reduce(x)
    assert x.item() == dist.get_world_size()
