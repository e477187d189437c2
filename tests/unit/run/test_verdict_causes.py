"""The rules of ``simharness run``'s verdicts that name the true cause (pure: records in,
verdicts out; the command itself is in tests/processes/run/test_run_causes.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from types import SimpleNamespace

from simharness.launch.launcher import LaunchResult, RankExit
from simharness.pytest_ranks.controller import (
    RunSpec,
    _after_stop,
    _first_error,
    _lost,
    _no_collection,
    _Runner,
)
from simharness.pytest_ranks.verdicts import junit_xml, verdict

GPU = {"outcome": "skipped", "needs_gpu": True, "reason": "needs GPU: needs a real GPU: k at t.py"}


def test_ranks_left_waiting_for_a_needs_gpu_stop_do_not_make_it_a_hang():
    """Rank 1 stopped and was then stopped itself in its teardown (only its ``skip`` record,
    taken as its test record); rank 0 waited for it until the grace."""
    hangs = {0: {"state": "diverged", "elapsed": 2.4, "stack": "all_reduce"}}
    v = verdict("t::c", {1: GPU}, 2, hangs=hangs)
    assert (v.outcome, v.needs_gpu, v.ranks) == ("skipped", True, (1,))
    assert v.detail == (GPU["reason"] + " (on ranks 1; ranks 0 were still inside the test "
                        "2.4s after it started, waiting for them, and were stopped)")


def test_a_failure_after_a_stop_says_so_and_keeps_its_traceback():
    recs = {0: {"outcome": "failed", "longrepr": "E   AssertionError: x"},
            1: {"outcome": "passed"}}
    v = verdict("t::b", recs, 2, after_stop=("t::a", [0, 1]))
    first, rest = v.detail.split("\n", 1)
    assert first.startswith("after a needs-GPU stop in t::a on ranks 0-1: global state")
    assert rest == "E   AssertionError: x" and v.first_rank == 0
    assert "needs-GPU" not in verdict("t::b", recs, 2).detail


def test_the_last_stop_before_the_test_in_the_same_round_is_named():
    def stop(i, name):
        return {"kind": "skip", "i": i, "nodeid": name, "needs_gpu": True}
    plain = {"kind": "skip", "i": 2, "nodeid": "t::p", "needs_gpu": False}
    recs = {0: [stop(0, "t::a"), stop(1, "t::b"), plain, {"kind": "test", "i": 3, "nodeid": "t::d"},
                stop(4, "t::e")],
            1: [stop(1, "t::b"), {"kind": "hang", "i": 3, "nodeid": "t::d"}]}
    assert _after_stop(recs, "t::d") == ("t::b", [0, 1])
    assert _after_stop(recs, "t::a") is None  # nothing before the first test


def test_a_rank_that_died_in_the_test_comes_before_the_knock_on_failures():
    recs = {0: {"outcome": "failed", "longrepr": "gloo: connection closed by peer"}}
    lost = {2: "exited with status 3 during the test", 1: "stopped by the launcher (signal 15)"}
    v = verdict("t::x", recs, 3, lost=lost)
    assert (v.first_rank, v.ranks) == (2, (0, 1, 2))
    assert v.detail.splitlines()[:2] == ["rank 2: exited with status 3 during the test",
                                         "rank 1: stopped by the launcher (signal 15)"]
    # only stopped ranks lost: the failing rank's traceback decides
    v = verdict("t::x", recs, 3, lost={1: lost[1]})
    assert v.first_rank == 0


def test_a_collection_error_on_one_rank_beats_the_digest_mismatch_it_causes():
    err = {"kind": "collect_error", "nodeid": "t.py",
           "longrepr": "t.py:8: in <module>\n    import x\n    ^^^^^^^^\n"
                       "E   ModuleNotFoundError: No module named 'x'"}
    mismatch = {"kind": "mismatch", "ranks": [1]}
    recs = {0: [mismatch], 1: [err, mismatch], 2: [mismatch]}
    assert _first_error(recs) == ("collecting t.py failed on ranks 1 (ranks 0,2 collected it): "
                                  "rank 1: t.py:8: in <module> | E   ModuleNotFoundError: No "
                                  "module named 'x'")
    assert _first_error({0: [mismatch], 1: [mismatch]}).startswith(
        "ranks 1 collected other tests than rank 0")
    assert _first_error({0: [], 1: []}) is None


def test_the_first_rank_to_fail_is_named_not_the_lowest(tmp_path):
    """torch's agent recorded rank 3 first (seen 0); rank 0 exited 1 after it, rank 1 was
    stopped; rank 2 ended 0."""
    res = LaunchResult((RankExit(0, 1, 1), RankExit(1, -15, 2), RankExit(2, 0),
                        RankExit(3, 4, 0)))
    assert res.first_failure.rank == 3 and res.exit_code == 4
    (tmp_path / "x" / "3").mkdir(parents=True)
    (tmp_path / "x" / "3" / "stderr.log").write_text("Traceback\nImportError: no fla\n")
    assert _no_collection(res, str(tmp_path), 4) == (
        "rank 3 exited with status 4 (the first to fail) before collecting any test; ranks 0 "
        "failed too; the launcher then stopped ranks 1; its stderr ends: Traceback | "
        "ImportError: no fla")
    lost = _lost(res, {2}, 4, str(tmp_path), 4)
    assert list(lost) == [3, 0, 1]
    assert lost[3].startswith("exited with status 4 during the test (the first rank to fail)")
    assert lost[1] == "stopped by the launcher (signal 15) when another rank ended"
    # a crash (SIGSEGV) is a failure of its own; the launcher's SIGTERM is not
    crash = LaunchResult((RankExit(0, -15, 1), RankExit(1, -11, 0)))
    assert crash.first_failure.rank == 1 and crash.exit_code == 139


def test_junit_for_a_run_that_judged_nothing():
    empty = ET.fromstring(junit_xml([], reason="the pytest arguments select no tests"))
    assert (empty.get("tests"), empty.get("errors")) == ("0", "0")
    assert empty.find("system-out").text == "the pytest arguments select no tests"
    broken = ET.fromstring(junit_xml([], error="collecting t.py failed on ranks 1"))
    assert (broken.get("tests"), broken.get("errors")) == ("0", "1")
    assert next(broken.iter("error")).text == "collecting t.py failed on ranks 1"


def test_no_new_round_after_the_last_test_hung():
    runner = _Runner(RunSpec(("t.py",), 2), None)
    hang = {"kind": "hang", "i": 1, "nodeid": "t::b", "state": "running", "stack": "s"}
    recs = {0: [{"kind": "collected", "nodeids": ["t::a", "t::b"]},
                {"kind": "test", "i": 0, "nodeid": "t::a", "outcome": "passed"}, hang],
            1: [{"kind": "test", "i": 0, "nodeid": "t::a", "outcome": "passed"},
                {**hang, "state": "finished"}]}
    result = LaunchResult((RankExit(0, 124, 0), RankExit(1, -15, 1)))
    rnd = SimpleNamespace(number=0)
    runner.judge_complete(recs)
    assert runner.judge_the_rest(rnd, recs, result, "/nonexistent") is True
    assert [v.outcome for v in runner.judged.values()] == ["passed", "hung"]
    # with a test after it, a new round goes on
    recs[0][0] = {"kind": "collected", "nodeids": ["t::a", "t::b", "t::c"]}
    runner = _Runner(RunSpec(("t.py",), 2), None)
    runner.judge_complete(recs)
    assert runner.judge_the_rest(rnd, recs, result, "/nonexistent") is False


def _recorded(*reports, found=()):
    """The ``test`` record the rank plugin writes for ``reports`` (setup, call, teardown)."""
    from simharness.pytest_ranks.rank_plugin import RankSession

    rank = object.__new__(RankSession)
    written: list[dict] = []
    rank.reports = {"t::x": list(reports)}
    rank.index, rank.world, rank.skip_told, rank.found = {"t::x": 0}, 1, set(), dict(found)
    rank.failed_at = {}
    rank.write = lambda **rec: written.append(rec)
    rank._record(SimpleNamespace(nodeid="t::x"), 0.5)
    return written[0]


def _rep(when, outcome, longrepr=""):
    return SimpleNamespace(when=when, failed=outcome == "failed", skipped=outcome == "skipped",
                           longrepr=longrepr)


def test_a_teardown_that_fails_after_a_needs_gpu_stop_is_the_stop_s_knock_on():
    stop = ("t.py", 3, "needs GPU: needs a real GPU: k at t.py")
    rec = _recorded(_rep("setup", "passed"), _rep("call", "skipped", stop),
                    _rep("teardown", "failed", "def teardown_class\nE   RuntimeError: gone"))
    assert (rec["outcome"], rec["needs_gpu"]) == ("skipped", True)
    assert rec["reason"] == stop[2] + " (then its error: E   RuntimeError: gone)"
    # a failure before a stop stays the failure
    rec = _recorded(_rep("setup", "passed"), _rep("call", "failed", "E   assert 1 == 2"),
                    _rep("teardown", "skipped", stop))
    assert (rec["outcome"], rec["needs_gpu"]) == ("failed", False)


# ------------------------------------------------ a rank-dependent new_group
MISMATCH = ("rank-dependent new_group: the new_group call at t.py:7 (group '1') was given "
            "different ranks on different ranks: rank 1 passed [1, 3], rank 0 passed [0, 2]. "
            "Every rank must pass the same ranks ... Fix: ...")


def test_a_rank_dependent_new_group_is_the_cause_not_the_ranks_it_left_waiting():
    records = {1: {"outcome": "failed", "longrepr": "E GroupMismatch: ...", "duration": 0.4,
                   "group_mismatch": MISMATCH},
               3: {"outcome": "failed", "longrepr": "E GroupMismatch: ...", "duration": 0.4,
                   "group_mismatch": MISMATCH}}
    hangs = {0: {"state": "diverged", "elapsed": 5.6, "stack": "in all_reduce"},
             2: {"state": "diverged", "elapsed": 5.7, "stack": "in all_reduce"}}
    v = verdict("t.py::test_x", records, world=4, hangs=hangs)
    assert (v.outcome, v.ranks, v.first_rank) == ("failed", (1, 3), 1)
    lines = v.detail.splitlines()
    assert lines[0] == MISMATCH
    assert lines[1] == ("ranks 0,2 were still inside the test 5.7s after it started, waiting "
                        "for ranks 1,3, and were stopped")
    assert lines[2:] == ["--- rank 1 ---", "E GroupMismatch: ..."]
    # without it, the same stopped ranks read as a divergence (a rank-dependent skip)
    plain = {r: {k: x for k, x in rec.items() if k != "group_mismatch"}
             for r, rec in records.items()}
    assert verdict("t.py::test_x", plain, world=4, hangs=hangs).outcome == "diverged"


def test_the_rank_plugin_records_the_finding_of_a_failed_test():
    fail = SimpleNamespace(when="call", failed=True, skipped=False, longrepr="E GroupMismatch")
    rec = _recorded(fail, found={0: MISMATCH})
    assert rec["outcome"] == "failed" and rec["group_mismatch"] == MISMATCH
    assert "group_mismatch" not in _recorded(fail)


def test_an_assertion_on_a_tensors_device_names_the_shims_known_difference():
    """A test asserting ``x.device.type == "cuda"`` fails on CPU ranks (the tensor the shim
    kept on the CPU says "cpu"): still failed, with the cause named first; an assertion on
    something else gets no such line."""
    from simharness.pytest_ranks.verdicts import DEVICE_HINT

    rec = {"outcome": "failed", "longrepr": "    assert x.device.type == 'cuda'\n"
                                            "E   AssertionError: assert 'cpu' == 'cuda'"}
    v = verdict("t::d", {0: rec, 1: rec}, 2)
    assert v.outcome == "failed" and v.detail.splitlines()[0] == DEVICE_HINT
    other = {"outcome": "failed", "longrepr": "E   AssertionError: assert 3 == 4"}
    assert DEVICE_HINT not in verdict("t::e", {0: other}, 1).detail


def test_split_sizes_kept_a_tensor_by_a_device_branch_name_the_known_difference():
    from simharness.pytest_ranks.verdicts import SPLITS_HINT

    rec = {"outcome": "failed", "longrepr": (
        "E   TypeError: all_to_all_single(): incompatible function arguments. The following "
        "argument types are supported:\nE   Invoked with: ..., tensor([52, 52]), ...")}
    v = verdict("t::a2a", {0: rec}, 1)
    assert v.outcome == "failed" and v.detail.splitlines()[0] == SPLITS_HINT
    after = verdict("t::a2a", {0: rec}, 1, after_stop=("u::x", [0])).detail.splitlines()
    assert after[0] == SPLITS_HINT and after[1].startswith("after a needs-GPU stop in u::x")
    lazy = {"outcome": "failed", "longrepr": (  # a lazy group hands them to the backend
        "E   TypeError: alltoall_base(): incompatible function arguments. The following "
        "argument types are supported:\nE   Invoked with: ..., tensor([52, 52]), ...")}
    assert verdict("t::a2a", {0: lazy}, 1).detail.splitlines()[0] == SPLITS_HINT
    other = {"outcome": "failed", "longrepr": "E   TypeError: my_alltoall_base(): no"}
    assert SPLITS_HINT not in verdict("t::a2a", {0: other}, 1).detail


def test_a_rank_that_failed_and_left_the_others_waiting_is_the_failure_named():
    """A rank raises inside a ``with`` whose exit makes a barrier only when nothing was
    raised (Megatron-LM's TempNamedDir): it skips that barrier, the others wait in a later
    one. The verdict is the failure, with its traceback, and the waiting ranks' stacks."""
    rec_ok = {"outcome": "passed"}
    rec_bad = {"outcome": "failed", "longrepr": "E   AssertionError: assert 1 == 0"}
    hang = {"state": "running", "elapsed": 30.0, "stack": "  File t.py, line 53, in barrier"}
    v = verdict("t::a", {5: rec_bad, 7: rec_ok}, 8, hangs={r: hang for r in (0, 1, 2)})
    assert (v.outcome, v.ranks, v.first_rank) == ("failed", (5,), 5)
    lines = v.detail.splitlines()
    assert lines[0].startswith("failed on ranks 5; ranks 0-2 were still inside the test 30.0s")
    assert "E   AssertionError: assert 1 == 0" in lines and "--- rank 0 stack ---" in lines
    hung = verdict("t::b", {7: rec_ok}, 8, hangs={0: hang})  # nobody failed: a hang
    assert hung.outcome == "hung" and hung.detail.startswith("stuck on ranks 0")


def test_the_rank_that_failed_first_leads_and_the_others_errors_follow_in_one_line():
    """Rank 5 asserts first; rank 0, 0.3 s later, cannot find the file rank 5's clean-up
    removed (test_remove_sharded_tensors on busy CPUs). The lowest rank was named before."""
    recs = {0: {"outcome": "failed", "failed_at": 100.3, "longrepr": "t.py:83: FileNotFoundError"},
            5: {"outcome": "failed", "failed_at": 100.0,
                "longrepr": "E   assert 6 == 8\nt.py:69: AssertionError"},
            6: {"outcome": "passed"}}
    v = verdict("t::a", recs, 8)
    assert (v.outcome, v.first_rank, v.ranks) == ("failed", 5, (0, 5))
    assert v.detail.splitlines() == [
        "rank 5 failed first (t.py:69: AssertionError), its report below; then ranks 0 "
        "(t.py:83: FileNotFoundError) up to 0.30s after it", "E   assert 6 == 8",
        "t.py:69: AssertionError"]
    # records without times (an older rank plugin): the lowest rank, as before
    plain = {r: {k: x for k, x in rec.items() if k != "failed_at"} for r, rec in recs.items()}
    assert verdict("t::a", plain, 8).first_rank == 0


def test_a_failed_rank_stuck_in_its_clean_up_is_still_the_failure():
    """Rank 1 failed and then waited in teardown for the others, which waited in the test:
    its ``fail`` record (written when the failure was reported) stands for its test record,
    and it is named as stuck in its clean-up, not as one of the waiting ranks."""
    fail = {"kind": "fail", "outcome": "failed", "failed_at": 1.0, "longrepr": "E boom"}
    hangs = {0: {"state": "running", "elapsed": 6.0, "stack": "barrier"},
             1: {"state": "failed", "elapsed": 60.0, "stack": "teardown barrier"}}
    v = verdict("t::a", {1: fail}, 2, hangs=hangs)
    assert (v.outcome, v.first_rank, v.ranks) == ("failed", 1, (1,))
    assert v.detail.splitlines()[0] == (
        "failed on ranks 1; ranks 0 were still inside the test 6.0s after it started, waiting "
        "for them (a collective or barrier the failing ranks did not reach once they raised), "
        "and were stopped; ranks 1, after failing, were stuck in its clean-up (a finally "
        "block, a context manager's exit, a fixture or teardown waiting for the others) and "
        "were stopped")
    assert "--- rank 1 stack ---" in v.detail.splitlines()


def test_a_rank_stopped_while_its_test_was_raising_is_that_failure():
    """Rank 1's hang record carries the error its test was propagating (a finally block
    waited for the others): the verdict is that error, not a hang; without it, a hang."""
    hangs = {0: {"state": "running", "elapsed": 15.0, "stack": "barrier"},
             1: {"state": "running", "elapsed": 15.0, "stack": "recv",
                 "raising": "Traceback (most recent call last):\n  File t.py, line 9\n"
                            "AssertionError: own check"}}
    v = verdict("t::a", {}, 2, hangs=hangs)
    assert (v.outcome, v.first_rank, v.ranks) == ("failed", 1, (1,))
    assert "AssertionError: own check" in v.detail
    assert "ranks 1, after failing, were stuck in its clean-up" in v.detail.splitlines()[0]
    plain = {r: {k: x for k, x in h.items() if k != "raising"} for r, h in hangs.items()}
    assert verdict("t::a", {}, 2, hangs=plain).outcome == "hung"
