"""Tests that not every rank runs, for tests/test_run.py (outside the testpaths).

``test_skipped_on_rank_1`` skips on rank 1 only, then the other ranks wait in a barrier
for it: ``simharness run`` reports it diverged after ``--diverge-grace`` seconds, not at
``--timeout``, and goes on. Under ``-x``, ``test_fails_on_rank_1`` stops rank 1's session
only: the next test is reported diverged ("not started on ranks 1") and the run stops.
"""

import pytest
import torch
import torch.distributed as dist


@pytest.fixture(scope="module", autouse=True)
def process_group():
    if not dist.is_initialized():
        dist.init_process_group("gloo")


def test_fails_on_rank_1():
    assert dist.get_rank() != 1, "rank 1 disagrees"


def test_skipped_on_rank_1():
    if dist.get_rank() == 1:
        pytest.skip("rank 1 has nothing to check")
    dist.barrier()  # waits for rank 1, which has gone on


def test_after():
    x = torch.ones(1)
    dist.all_reduce(x)
    assert x.item() == dist.get_world_size()
