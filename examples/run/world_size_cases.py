"""world_size tests whose verdicts tests/test_testing_plugin.py checks from outside (one must
fail). Outside the testpaths, so the normal suite does not collect it."""

import pytest
import torch
import torch.distributed as dist


@pytest.mark.world_size(2, timeout=60)
def test_all_reduce_on_two_ranks(rank, world):
    x = torch.ones(1, device="cuda") * (rank + 1)
    dist.all_reduce(x)
    assert (world, x.item()) == (2, 3.0)


@pytest.mark.world_size(2, timeout=60)
def test_fails_on_rank_1(rank):
    assert rank == 0, f"rank {rank} says no"
