"""A test module whose import hangs on rank 1 (for tests/test_run.py; outside the
testpaths): ``simharness run`` names rank 1 as stuck in collection, with its stack."""

import os
import time

if os.environ.get("RANK") == "1":
    time.sleep(3600)  # stands for an import that waits on something that never comes


def test_never_reached():
    assert True
