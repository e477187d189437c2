"""Tests that not every rank runs, for tests/test_run.py (outside the testpaths).

Run under ``-x`` (one launch covers both cases). ``test_skipped_on_rank_1`` skips on rank 1
only, then the other ranks wait in a barrier for it: ``simharness run`` reports it diverged
after ``--diverge-grace`` seconds, not at ``--timeout``, and goes on (a skip does not stop
``-x``). ``test_fails_on_rank_1`` then stops rank 1's session only: the next test is
reported diverged ("not started on ranks 1") and the run stops, ``test_never_run`` unrun.
"""

import pytest
import torch
import torch.distributed as dist


@pytest.fixture(scope="module", autouse=True)
def process_group():
    if not dist.is_initialized():
        dist.init_process_group("gloo")


def _all_reduce_ones():
    x = torch.ones(1)
    dist.all_reduce(x)
    assert x.item() == dist.get_world_size()


def test_skipped_on_rank_1():
    if dist.get_rank() == 1:
        pytest.skip("rank 1 has nothing to check")
    dist.barrier()  # waits for rank 1, which has gone on


def test_after_the_divergence():
    _all_reduce_ones()


def test_fails_on_rank_1():
    assert dist.get_rank() != 1, "rank 1 disagrees"


def test_not_started_on_rank_1():
    _all_reduce_ones()


def test_never_run():
    _all_reduce_ones()
