"""Tests stopped part-way, for tests/test_run.py (outside the testpaths).

``test_slow`` writes ``rank<R>.pid`` into ``$SIMHARNESS_EXAMPLE_MARKS`` once it is running on
that rank, then sleeps: the test sends Ctrl-C then. ``test_exit_on_rank_1`` calls
``pytest.exit`` inside the test on rank 1 only.
"""

import os
import time

import pytest
import torch.distributed as dist


@pytest.fixture(scope="module", autouse=True)
def process_group():
    if not dist.is_initialized():
        dist.init_process_group("gloo")


def test_quick():
    assert dist.get_world_size() == 2


def test_slow():
    marks = os.environ["SIMHARNESS_EXAMPLE_MARKS"]
    with open(os.path.join(marks, f"rank{dist.get_rank()}.pid"), "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(120)


def test_exit_on_rank_1():
    if dist.get_rank() == 1:
        pytest.exit("rank 1 stops here")


def test_after_the_exit():
    pass
