"""Start slots (simharness.launch.stagger): a rank waits for its slot, no CPU spent."""

from __future__ import annotations

import threading
import time

from simharness.launch.stagger import start_slot


def test_a_rank_waits_until_the_holder_of_its_slot_releases_it(tmp_path):
    value = f"{tmp_path}:2"
    first = start_slot(value, 0)            # slot 0
    other = start_slot(value, 1)            # slot 1: free, no wait
    got: list[float] = []

    def rank_2() -> None:
        release = start_slot(value, 2)
        got.append(time.time())
        release()

    waiter = threading.Thread(target=rank_2)
    waiter.start()                          # rank 2 -> slot 0, held by rank 0
    time.sleep(0.5)
    assert not got, "rank 2 started while rank 0 held slot 0"
    released_at = time.time()
    first()
    waiter.join(10)
    assert got and got[0] >= released_at
    other()


def test_without_the_variable_or_with_a_bad_one_nothing_waits(tmp_path):
    for value in (None, "", "no-count", f"{tmp_path}:0", "/nonexistent/dir:2"):
        start_slot(value, 0)
        start_slot(value, 0)                # would block if a slot had been taken
