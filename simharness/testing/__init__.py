"""pytest plugin for distributed tests on CPU ranks (``-p simharness.testing``; also registered
through the ``pytest11`` entry point ``simharness``).

``@pytest.mark.world_size(W, **config)`` runs the test body on W ranks: the test process
starts them through :func:`simharness.pytest_ranks.controller.run_pytest` (torch's elastic
agent, the GPU shim, gloo), each rank runs just this test, and the test passes only if it passed on
every rank; it fails with the first failing rank's traceback, is skipped when a rank needs a
real GPU, and fails as hung (with stacks) past ``timeout=`` seconds (default 120). It works
under pytest-xdist (each test starts its own ranks on free ports). In the ranks a default
process group (gloo; NCCL requests are mapped) is ready before the body runs and destroyed
after it.

Fixtures: ``rank``, ``world`` (from the rank's environment), ``parallel_config`` (a
:class:`simharness.ParallelismConfig` of ``world_size=W`` and the marker's keywords, NeMo
names), ``layout`` (:class:`LiveLayout`: ``build_layout(parallel_config)`` for the installed
megatron-core, and ``layout.verify()`` to compare the live Megatron groups with it, through
:func:`simharness.verify_live`).

Example (the test the ``create_all_gather_group`` change needed; tests/test_testing_plugin.py)::

    @pytest.mark.world_size(4, context_parallel_size=2, create_all_gather_group=True)
    def test_all_gather_group(parallel_config, layout):
        ps.initialize_model_parallel(context_parallel_size=2, create_all_gather_group=True)
        layout.verify()   # AG group exists, DP-with-CP ranks, distinct communicator

This is the user's side of pytest on ranks; the controller that starts the ranks and the
plugin each rank loads are :mod:`simharness.pytest_ranks`. Importing this module imports
neither torch nor the controller.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest

MARKER = "world_size"
#: Marker keywords that steer the run; the others are ParallelismConfig fields.
CONTROL_KEYS = ("timeout",)
_IN_RANK_ENV = "SIMHARNESS_RUN_DIR"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "world_size(W, timeout=120, **config): run the test body on W CPU ranks "
                   "(simharness.testing); keywords other than timeout are ParallelismConfig "
                   "fields for the parallel_config/layout fixtures")


def _in_rank() -> bool:
    return bool(os.environ.get(_IN_RANK_ENV))


def _marker(item: pytest.Item) -> pytest.Mark | None:
    return item.get_closest_marker(MARKER)


def _world_of(mark: pytest.Mark) -> int:
    world = mark.args[0] if mark.args else mark.kwargs.get("world")
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise pytest.UsageError(f"@pytest.mark.world_size needs a whole number of ranks >= 1 "
                                f"as its first argument, got {world!r}")
    return world


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    mark = _marker(pyfuncitem)
    if mark is None or _in_rank():
        return None
    _run_on_ranks(pyfuncitem, mark)
    return True


def _rank_args(item: pytest.Function) -> tuple[str, ...]:
    """pytest arguments that select just this test in the ranks."""
    _, _, rest = item.nodeid.partition("::")
    args = [f"{item.path}::{rest}" if rest else str(item.path), "-q",
            "--rootdir", str(item.config.rootpath)]
    pm = item.config.pluginmanager
    if pm.get_plugin("simharness") is None:  # loaded with -p, not through the entry point
        args += ["-p", "simharness.testing"]
    if pm.hasplugin("xdist"):
        args += ["-n", "0"]  # the ranks run their one test themselves
    return tuple(args)


def _run_on_ranks(item: pytest.Function, mark: pytest.Mark) -> None:
    from ..pytest_ranks.controller import RunError, RunSpec, run_pytest

    world = _world_of(mark)
    timeout = float(mark.kwargs.get("timeout", 120.0))
    try:
        report = run_pytest(RunSpec(_rank_args(item), world, timeout_s=timeout))
    except RunError as exc:
        pytest.fail(f"could not run on {world} ranks: {exc}", pytrace=False)
    if report.interrupted is not None:
        raise KeyboardInterrupt
    verdicts = [v for v in report.verdicts]
    if len(verdicts) != 1:
        pytest.fail(f"expected one test on the ranks, got {[v.nodeid for v in verdicts]}",
                    pytrace=False)
    v = verdicts[0]
    if v.outcome == "skipped":
        pytest.skip(v.detail)
    if v.outcome == "failed":
        pytest.fail(f"failed on rank {v.first_rank} of {world} (failing ranks "
                    f"{list(v.ranks)}):\n{v.detail}", pytrace=False)
    if v.outcome == "hung":
        pytest.fail(f"hung past {timeout:g} s on {world} ranks:\n{v.detail}", pytrace=False)
    if v.outcome == "diverged":
        pytest.fail(f"the {world} ranks did not all run it:\n{v.detail}", pytrace=False)


@pytest.fixture(autouse=True)
def _simharness_process_group(request: pytest.FixtureRequest):
    """In a rank running a world_size test: a default process group for the body."""
    if not (_in_rank() and _marker(request.node) is not None):
        yield
        return
    import torch.distributed as dist

    made = False
    if not dist.is_initialized():
        dist.init_process_group("gloo")
        made = True
    yield
    if made and dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def rank() -> int:
    """This rank (``RANK``; 0 outside a rank)."""
    return int(os.environ.get("RANK", "0"))


@pytest.fixture
def world(request: pytest.FixtureRequest) -> int:
    """The number of ranks (``WORLD_SIZE``, or the marker's W in the test process)."""
    mark = _marker(request.node)
    if _in_rank() or mark is None:
        return int(os.environ.get("WORLD_SIZE", "1"))
    return _world_of(mark)


@pytest.fixture
def parallel_config(request: pytest.FixtureRequest, world: int):
    """:class:`simharness.ParallelismConfig` of ``world_size=world`` and the marker's keywords."""
    from .. import ParallelismConfig

    mark = _marker(request.node)
    fields = {k: v for k, v in (mark.kwargs if mark else {}).items()
              if k not in CONTROL_KEYS and k != "world"}
    return ParallelismConfig(world_size=world, **fields)


@dataclass(frozen=True)
class LiveLayout:
    """The expected layout of ``parallel_config``, and a check of this job's live groups."""

    expected: Any
    mcore: str

    def replace(self, **fields: Any) -> LiveLayout:
        """The same check for the configuration with ``fields`` changed (NeMo names).

        >>> from simharness import ParallelismConfig, build_layout
        >>> live = LiveLayout(build_layout(ParallelismConfig(world_size=4)), "0.16")
        >>> live.replace(create_all_gather_group=True).expected.config.create_all_gather_group
        True
        """
        from .. import build_layout

        return LiveLayout(build_layout(self.expected.config.replace(**fields), self.mcore),
                          self.mcore)

    def verify(self, **kwargs: Any) -> dict:
        """Compare Megatron's live groups with :attr:`expected` on every rank (collective:
        call it on all ranks); fails the test with the mismatches, returns the report.
        Keywords go to :func:`simharness.verify_live`."""
        from ..live import verify_live
        from ..live.report import live_summary_lines

        report = verify_live(self.expected, print_report=False, **kwargs)
        if not report.get("ok"):
            pytest.fail("the live groups differ from build_layout(parallel_config):\n"
                        + "\n".join(live_summary_lines(report)), pytrace=False)
        return report


@pytest.fixture
def layout(parallel_config) -> LiveLayout:
    """``build_layout(parallel_config)`` for the installed megatron-core's profile."""
    from .. import build_layout
    from ..profiles import DEFAULT_MCORE

    mcore = DEFAULT_MCORE
    try:
        from ..mcore import installed_version, profile_for_version

        ver = installed_version()
        if ver is not None:
            mcore = profile_for_version(ver)
    except ImportError:
        pass
    return LiveLayout(build_layout(parallel_config, mcore), mcore)
