"""torch's own distributed tests, unedited, on ``simharness run`` ranks.

The torch wheel ships ``torch/testing/_internal/distributed/distributed_test.py``
(``DistributedTest._DistTestBase``: about 290 tests of process groups, collectives,
``new_group``, DDP). torch's CI runs it through ``test/distributed/test_distributed_spawn.py``
(not in the wheel), whose ``TestDistBackend`` forks W processes per test. This driver plays
that file's part for ranks that already exist (started by ``simharness run``), and nothing
more:

- ``BACKEND`` (default ``gloo``), ``TEMP_DIR`` (one directory per run, shared by the ranks
  of this node) and ``INIT_METHOD`` (default ``env://``) set before the module is imported,
  as ``test_distributed_spawn.py`` and ``run_test.py`` do;
- ``self.rank`` / ``self.world_size`` / ``self.file_name`` as ``TestDistBackend`` gives
  them;
- per test, as ``TestDistBackend._run`` does: a new default group (gloo, on the ranks'
  rendezvous store under a key prefix of its own, so no test sees another's keys or a
  group another test broke), the file barrier reset, a barrier before and after the body,
  and the default group destroyed at the end;
- per test, the distributed debug level a fresh process would have: torch's
  ``with_dist_debug_levels`` (``common_distributed.py:465``) sets ``TORCH_DISTRIBUTED_DEBUG``
  and the C++ level for each level it loops over and never puts the C++ level back, so in a
  long-lived rank every later test would run at the decorator's last level (mostly
  ``DETAIL``, under which torch 2.13.0 itself crashes some DDP tests with SIGSEGV; see the
  README);
- a test that ends its process with one of ``TEST_SKIPS``' exit codes (torch's
  ``skip_if_lt_x_gpu`` and friends call ``sys.exit``) is a skip with that message, as
  ``MultiProcessTestCase`` reports it; any other ``sys.exit`` is a failure.

    simharness run -n 3 -- pytest examples/run/torch_distributed_driver.py -k broadcast

The test bodies are torch's, imported from the installed wheel; ``tests/upstream_suites.py``
pins that file's sha256 (suite ``torch-2.13.0-distributed_test``).
"""

from __future__ import annotations

import os
import tempfile
import unittest
from datetime import timedelta

os.environ.setdefault("BACKEND", "gloo")
os.environ.setdefault("INIT_METHOD", "env://")
_RUN = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'local')}-{os.environ.get('MASTER_PORT', '0')}"
TEMP_DIR = os.path.join(tempfile.gettempdir(), f"simharness-torchdist-{_RUN}")
os.environ["TEMP_DIR"] = TEMP_DIR
for _sub in ("barrier", "test_dir", "init_dir"):
    os.makedirs(os.path.join(TEMP_DIR, _sub), exist_ok=True)

import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_distributed import TEST_SKIPS  # noqa: E402
from torch.testing._internal.common_utils import TestCase  # noqa: E402
from torch.testing._internal.distributed import distributed_test as _dt  # noqa: E402

_SKIP_BY_CODE = {skip.exit_code: skip.message for skip in TEST_SKIPS.values()}
_DEBUG_ENV = os.environ.get("TORCH_DISTRIBUTED_DEBUG")  # the level a fresh process starts at


def _reset_debug_level() -> None:
    """``TORCH_DISTRIBUTED_DEBUG`` and torch's C++ debug level as this process started."""
    if _DEBUG_ENV is None:
        os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
    else:
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = _DEBUG_ENV
    dist.set_debug_level_from_env()


_STORE: list = []  # one client of the ranks' rendezvous store, made on first use


def _new_default_group(test_name: str) -> None:
    """The default group for one test, as ``TestDistBackend._run`` makes it (a fresh one)."""
    if dist.is_initialized():
        dist.destroy_process_group()
    seconds = _dt.CUSTOM_PG_TIMEOUT.get(test_name, _dt.default_pg_timeout)
    if not _STORE:
        _STORE.append(dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                    None, False, timeout=timedelta(seconds=300)))
    store = dist.PrefixStore(f"torch-distributed-test/{test_name}/", _STORE[0])
    dist.init_process_group(backend=_dt.BACKEND, store=store, rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=timedelta(seconds=seconds))


class TestDistBackendOnRanks(TestCase, _dt.DistributedTest._DistTestBase):
    """``DistributedTest._DistTestBase`` on the ranks ``simharness run`` started."""

    @property
    def rank(self) -> int:
        return int(os.environ["RANK"])

    @property
    def world_size(self) -> str:  # a string, as TestDistBackend.world_size returns it
        return os.environ["WORLD_SIZE"]

    @property
    def file_name(self) -> str:
        return os.path.join(TEMP_DIR, "init_dir", f"pg-{self._testMethodName}")

    @property
    def init_method(self) -> str:
        return f"file://{self.file_name}"

    @property
    def destroy_pg_upon_exit(self) -> bool:
        return False

    def setUp(self) -> None:
        super().setUp()
        _reset_debug_level()
        _new_default_group(self._testMethodName)
        # TestDistBackend.setUp's Barrier.init(), with the ranks in step: every rank
        # starts from barrier id 0 and an empty barrier directory
        dist.barrier()
        if self.rank == 0:
            _dt.Barrier.init()
        _dt.Barrier.barrier_id = 0
        dist.barrier()
        self._barrier()

    def tearDown(self) -> None:
        try:
            if dist.is_initialized():
                self._barrier()
                dist.destroy_process_group()
        finally:
            super().tearDown()

    def _callTestMethod(self, method):  # noqa: N802  (unittest's name)
        try:
            method()
        except SystemExit as exc:
            message = _SKIP_BY_CODE.get(exc.code)  # type: ignore[call-overload]
            if message is None:
                raise AssertionError(f"the test ended its process with sys.exit({exc.code!r}) "
                                     f"(not one of torch's TEST_SKIPS codes)") from None
            raise unittest.SkipTest(message) from None
