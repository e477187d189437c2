"""simharness.testing: ``@pytest.mark.world_size`` tests, with the real megatron-core 0.16.1.

The example: the test the NeMo ``create_all_gather_group`` change needed. With the option on,
the all-gather group exists, has the data-parallel-with-context-parallel ranks and is a
communicator of its own; with it off, there is no such group and the all-gather runs on the
DP-with-CP group itself. The body runs on 4 CPU ranks (tp 1, cp 2, dp 2); both settings in
one test, so Megatron is imported once per rank.
"""


import pytest
from support.paths import ROOT


@pytest.mark.world_size(4, context_parallel_size=2, create_all_gather_group=True, timeout=240)
def test_create_all_gather_group(rank, world, parallel_config, layout):
    ps = pytest.importorskip("megatron.core.parallel_state")
    import torch.distributed as dist

    assert world == 4 and parallel_config.create_all_gather_group
    planned = sorted(int(r) for r in layout.expected.rank(rank).groups["dp_cp"].ranks)
    assert planned == [0, 1, 2, 3]

    ps.initialize_model_parallel(context_parallel_size=2, create_all_gather_group=True)
    dp_cp = ps.get_data_parallel_group(with_context_parallel=True)
    ag = ps.get_data_parallel_group(with_context_parallel=True, independent_all_gather=True)
    assert ps.has_separate_all_gather_group()
    assert dist.get_process_group_ranks(ag) == dist.get_process_group_ranks(dp_cp) == planned
    assert ag is not dp_cp and ag.group_name != dp_cp.group_name
    layout.verify()  # every group and the all-gather resolution, as simharness plans them
    ps.destroy_model_parallel()

    ps.initialize_model_parallel(context_parallel_size=2, create_all_gather_group=False)
    assert not ps.has_separate_all_gather_group()
    with pytest.raises(AssertionError):
        ps.get_data_parallel_group(with_context_parallel=True, independent_all_gather=True)
    layout.replace(create_all_gather_group=False).verify()  # all-gather on the dp_cp group
    ps.destroy_model_parallel()


@pytest.mark.parametrize("outcome, detail, expect", [
    ("passed", "", None),
    ("failed", "E  no", "failed on rank 1 of 2 (failing ranks [1]):\nE  no"),
    ("hung", "stuck on ranks 1", "hung past 5 s on 2 ranks:\nstuck on ranks 1"),
    ("skipped", "needs GPU: x", "needs GPU: x"),
])
def test_world_size_verdict_becomes_the_test_outcome(monkeypatch, fake_item, outcome, detail,
                                                     expect):
    """The verdict of the ranks is the test's outcome (the runner replaced by its report)."""
    import simharness.pytest_ranks.controller as runner
    from simharness.runtests.verdicts import Verdict
    from simharness.testing import _run_on_ranks

    seen = {}

    def fake_run(spec, *a, **k):
        seen["spec"] = spec
        v = Verdict("t.py::test_x", outcome, (1,), 1 if outcome != "passed" else None,
                    detail, 0.1)
        return runner.RunReport((v,), 2, 1, 0.1)

    monkeypatch.setattr(runner, "run_pytest", fake_run)
    mark = pytest.mark.world_size(2, timeout=5).mark
    if expect is None:
        _run_on_ranks(fake_item, mark)
    else:
        kind = pytest.skip.Exception if outcome == "skipped" else pytest.fail.Exception
        with pytest.raises(kind) as info:
            _run_on_ranks(fake_item, mark)
        assert str(info.value.msg) == expect
    assert (seen["spec"].nproc_per_node, seen["spec"].timeout_s) == (2, 5.0)
    assert seen["spec"].pytest_args[0] == f"{fake_item.path}::test_x"


@pytest.fixture
def fake_item(request):
    """A stand-in for a collected test item: what _run_on_ranks reads from one."""
    class Item:
        nodeid = "t.py::test_x"
        path = ROOT / "t.py"
        config = request.config
    return Item()
