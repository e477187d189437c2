"""``simharness run``: bad input, one verdict per test across ranks, hangs, JUnit, exit codes.

The pure verdict rules are doctested in simharness/runtests/verdicts.py; here the rules that
decide a verdict, then the command itself on real ranks (tests/fixtures/run/dist_cases.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support.paths import ROOT

from simharness.runtests.verdicts import exit_code, junit_xml, not_started, verdict

CASES = "tests/fixtures/run/dist_cases.py"
DIVERGE = "tests/fixtures/run/diverge_cases.py"
INTERRUPT = "tests/fixtures/run/interrupt_cases.py"
TIMEOUT = 240


def simharness(*args: str, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "cli.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


# -- verdict rules --------------------------------------------------------------------------

def test_needs_gpu_on_one_rank_beats_the_others_failing():
    recs = {0: {"outcome": "skipped", "needs_gpu": True, "reason": "needs GPU: x at f.py:3"},
            1: {"outcome": "failed", "longrepr": "peer gone"}}
    v = verdict("t::a", recs, 2)
    assert (v.outcome, v.needs_gpu, v.ranks, v.detail) == \
        ("skipped", True, (0,), "needs GPU: x at f.py:3")


def test_hang_names_stuck_ranks_and_their_stacks_only():
    hangs = {0: {"state": "running", "stack": "File a.py, in test\n  barrier()", "elapsed": 3},
             1: {"state": "finished", "stack": "File plugin.py, in barrier", "elapsed": 3}}
    v = verdict("t::h", {1: {"outcome": "passed"}}, 3, hangs=hangs)
    assert v.outcome == "hung" and v.ranks == (0,) and v.duration == 3
    assert v.detail.startswith("stuck on ranks 0; ranks 1-2 had finished it")
    assert "barrier()" in v.detail and "plugin.py" not in v.detail


def test_partial_skip_and_lost_rank():
    part = verdict("t::s", {0: {"outcome": "skipped", "reason": "no"},
                            1: {"outcome": "passed"}}, 2)
    assert (part.outcome, part.detail) == ("skipped", "skipped on ranks 0 only: no")
    lost = verdict("t::l", {0: {"outcome": "passed"}}, 2, lost={1: "exited with status 9"})
    assert (lost.outcome, lost.first_rank, lost.detail) == \
        ("failed", 1, "rank 1: exited with status 9")


def test_junit_counts_hangs_as_failures():
    vs = [verdict("a.py::t1", {0: {"outcome": "passed"}}, 1),
          verdict("a.py::t2", {}, 1, hangs={0: {"state": "running", "stack": "s"}}),
          verdict("a.py::t3", {0: {"outcome": "skipped", "reason": "r"}}, 1)]
    suite = ET.fromstring(junit_xml(vs, world=1))
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    assert [c.get("name") for c in suite.iter("testcase")] == ["t1", "t2", "t3"]
    assert exit_code(vs) == 1 and exit_code(vs[:1]) == 0 and exit_code([]) == 5
    assert exit_code(vs[:1], interrupted=True) == 2


def test_a_skip_on_some_ranks_with_the_others_stopped_in_it_is_diverged():
    recs = {1: {"outcome": "skipped", "reason": "Skipped: not mine"}}
    hangs = {0: {"state": "diverged", "stack": "File t.py, in test\n  barrier()",
                 "elapsed": 2.5},
             2: {"state": "finished", "stack": "File plugin.py, in barrier", "elapsed": 2.5}}
    v = verdict("t::d", recs, 3, hangs=hangs)
    assert (v.outcome, v.ranks, v.first_rank) == ("diverged", (0,), 0)
    assert v.detail.startswith("skipped on ranks 1 (Skipped: not mine) but run on ranks 0, "
                               "still inside it 2.5s after it started")
    assert "ranks 2 were stopped with them" in v.detail and "barrier()" in v.detail
    # a rank that stopped on NeedsGPU still makes it "skipped: needs GPU"
    gpu = {1: {"outcome": "skipped", "needs_gpu": True, "reason": "needs GPU: x"}}
    assert verdict("t::g", gpu, 2, hangs={0: hangs[0]}).outcome == "skipped"
    # diverged counts as a failure, in the exit status and in JUnit
    suite = ET.fromstring(junit_xml([v]))
    assert suite.get("failures") == "1" and exit_code([v]) == 1
    assert next(suite.iter("failure")).get("type") == "diverged"


def test_not_started_names_the_ranks_whose_session_ended():
    v = not_started("t::b", {0: {"ended": {"1": "t::a", "3": "t::a"}},
                             2: {"ended": {"1": "t::a"}}}, world=4)
    assert (v.outcome, v.ranks, v.first_rank) == ("diverged", (1, 3), 1)
    assert v.detail.startswith("not started on ranks 1,3: their pytest session ended after "
                               "t::a")
    assert v.detail.endswith("ranks 0,2 waited to start it")


def test_collection_hang_names_the_rank_that_never_collected():
    from simharness.runtests.runner import RunError, _collection_hang

    waiting = {"kind": "hang", "nodeid": "(collection)", "state": "waiting-for-collection"}
    recs = {0: [{"kind": "collected", "n": 1}, waiting], 1: []}
    with pytest.raises(RunError, match=r"hung on ranks 1 \(past 7s, --collect-timeout\); "
                                       r"ranks 0 had collected and waited for them; they were "
                                       r"stopped before their own watchdog wrote a stack"):
        _collection_hang(recs, 7)
    stuck = {"kind": "hang", "nodeid": "(collection)", "state": "collecting", "stack": "S"}
    with pytest.raises(RunError) as info:
        _collection_hang({0: [{"kind": "collected"}], 1: [stuck]}, 7)
    assert info.value.stacks == "--- rank 1 stack (collecting) ---\nS"  # type: ignore[attr-defined]
    _collection_hang({0: [{"kind": "collected"}], 1: [{"kind": "collected"}]}, 7)  # no hang


# -- bad input: one error line, no ranks started ---------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["-n", "0", "--", "pytest", CASES], "-n/--world-size must be >= 1, got 0"),
    (["-n", "2", "--", "pytest", "tests/fixtures/run/nope.py::t"],
     "test path 'tests/fixtures/run/nope.py' does not exist"),
    (["-n", "2", "--", "pytest", "-n", "4", CASES], "pytest-xdist inside the ranks"),
    (["-n", "2", "--", "pytest", "--junit-xml=x.xml", CASES], "give --junit-xml FILE before"),
    (["-n", "2"], "nothing to run"),
    (["-n", "2", "--", "bash", "x.sh"], "neither pytest, python nor a .py script"),
    (["-n", "2", "--", "python", "nope.py"], "script 'nope.py' does not exist"),
    (["-n", "3", "--nproc-per-node", "2", "--", "pytest", CASES], "must equal --nproc-per-node 2"),
    (["-n", "4", "--nnodes", "2", "--", "pytest", CASES], "needs --rdzv-endpoint"),
    (["-n", "8", "--mem-per-rank", "100000000", "--", "pytest", CASES], "that does not fit"),
    (["-n", "2", "--junit", "x.xml", "--", "pytest", CASES],
     "no such option '--junit'; did you mean '--junit-xml'?"),
])
def test_bad_input_is_one_error_line(args, message):
    out = simharness("run", *args, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], out.stderr
    assert "Traceback" not in out.stderr


def _report_through_the_rank_hook(exc: BaseException):
    """The per-rank plugin's makereport hook on a test call that raised ``exc``."""
    from types import SimpleNamespace

    from simharness.runtests.plugin import RankSession

    call = SimpleNamespace(excinfo=pytest.ExceptionInfo.from_exception(exc), when="call")
    item = SimpleNamespace(location=("t.py", 4, "test_x"), nodeid="t.py::test_x")
    rep = SimpleNamespace(outcome="failed", failed=True, when="call", longrepr="traceback")
    rank = object.__new__(RankSession)
    rank.failed_at, rank.index, rank.world, rank.diverged = {}, {"t.py::test_x": 0}, 1, False
    rank.written = []
    rank.write = lambda **record: rank.written.append(record)
    rank.watchdog = SimpleNamespace(update=lambda **info: None)
    gen = RankSession.pytest_runtest_makereport(rank, item, call)
    next(gen)
    with pytest.raises(StopIteration):
        gen.send(SimpleNamespace(get_result=lambda: rep))
    rep.written = rank.written
    return rep


def _raised(make):
    try:
        make()
    except BaseException as exc:  # noqa: BLE001  (the test's own exception)
        return exc
    raise AssertionError("nothing raised")


def test_a_gpu_stop_that_torch_compile_wrapped_is_still_needs_gpu():
    """torch.compile re-raises an error from tracing as its own (``TorchRuntimeError``,
    ``from None``); the shim's stop inside it is still a needs-GPU skip, not a failure. A
    plain error stays a failure."""
    from simharness.errors import NeedsGPU

    def wrapped():
        try:
            raise NeedsGPU("torch.cuda.Stream", "model.py:7")
        except NeedsGPU:
            raise RuntimeError("RuntimeError when making fake tensor call") from None

    rep = _report_through_the_rank_hook(_raised(wrapped))
    assert rep.outcome == "skipped"
    assert rep.longrepr[2].startswith("needs GPU: needs a real GPU: torch.cuda.Stream at "
                                      "model.py:7 ")
    assert rep.longrepr[2].endswith("(raised under RuntimeError)")
    assert rep.written == []  # a stop is no failure: nothing told
    plain = _report_through_the_rank_hook(_raised(lambda: 1 / 0))
    assert (plain.outcome, plain.longrepr) == ("failed", "traceback")
    # the failure is recorded when reported, before the teardown, with its time
    [told] = plain.written
    assert (told["kind"], told["outcome"], told["longrepr"]) == ("fail", "failed", "traceback")
    assert told["failed_at"] > 0
    def direct_stop():
        raise NeedsGPU("torch.cuda.Event", "m.py:1")

    direct = _report_through_the_rank_hook(_raised(direct_stop))
    assert direct.outcome == "skipped" and "raised under" not in direct.longrepr[2]


# -- real ranks -----------------------------------------------------------------------------

def test_verdicts_across_two_ranks_with_a_hang_then_the_rest_of_the_file(tmp_path):
    junit = tmp_path / "out.xml"
    out = simharness("run", "-n", "2", "--timeout", "4", "--junit-xml", str(junit), "--",
                     "pytest", "-q", "-p", "no:randomly", CASES)
    text = out.stdout
    assert out.returncode == 1, text + out.stderr
    got = {name: label for label, name in re.findall(
        r"^(PASSED|FAILED|SKIPPED|HUNG)\s+[\d.]+s\s+\S+::(\w+)", text, re.M)}
    assert got == {"test_all_reduce_on_cuda": "PASSED", "test_new_group_pairs": "PASSED",
                   "test_fails_on_rank_1_only": "FAILED", "test_needs_a_cuda_graph": "SKIPPED",
                   "test_skipped": "SKIPPED", "test_hangs_on_rank_0": "HUNG",
                   "test_after_the_hang": "PASSED"}, text
    assert "test_fails_on_rank_1_only  (first failing rank 1; failing ranks 1)" in text
    assert "AssertionError: rank 1 disagrees" in text
    assert re.search(r"test_needs_a_cuda_graph  needs GPU: needs a real GPU: "
                     r"torch.cuda.CUDAGraph at \S*dist_cases.py:\d+", text)
    assert "stuck on ranks 0; ranks 1 had finished it" in text
    assert re.search(r"dist_cases.py\", line \d+, in test_hangs_on_rank_0", text)
    assert "3 passed, 1 failed, 2 skipped (1 need a GPU), 1 hung" in text
    assert "(2 round(s))" in text
    assert ("simharness shim (rank 0): ignored GPU-only options, not run on CPU: "
            "init_process_group: backend 'nccl' (runs on gloo)") in out.stderr, out.stderr
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("7", "2", "2")


def test_arguments_that_select_nothing_exit_5():
    out = simharness("run", "-n", "1", "--", "pytest", "-p", "no:randomly", "-k",
                     "no_such_test_name", CASES)
    assert out.returncode == 5, out.stdout + out.stderr
    assert [ln for ln in out.stderr.splitlines() if ln.startswith("error:")] == [
        "error: the pytest arguments select no tests (pytest's exit status 5): -p no:randomly "
        f"-k no_such_test_name {CASES}"]


def test_a_module_skipped_at_import_is_a_skip_as_in_pytest():
    """pytest reports a module that calls pytest.importorskip as 1 skipped, exit 0; so does
    run (not "the pytest arguments select no tests"), with the skip's reason."""
    out = simharness("run", "-n", "2", "--", "pytest", "-p", "no:randomly",
                     "tests/fixtures/run/skipped_module.py")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "SKIPPED" in text and "needs no_such_optional_package" in text, text
    assert "0 passed, 0 failed, 1 skipped, 0 hung" in text, text


def test_ctrl_c_keeps_the_verdicts_so_far_and_gives_none_to_the_test_it_stopped(tmp_path):
    """Ctrl-C inside a test: the tests before it keep their verdicts (JUnit too), the test
    it stopped gets none (it was once reported PASSED: the ranks' hook took the
    KeyboardInterrupt for the end of the test), exit 2 as pytest's, no rank left."""
    import signal
    import time

    junit = tmp_path / "out.xml"
    env = dict(os.environ, SIMHARNESS_EXAMPLE_MARKS=str(tmp_path))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen([sys.executable, "cli.py", "run", "-n", "2", "--junit-xml", str(junit),
                          "--", "pytest", "-p", "no:randomly", "-k", "quick or slow", INTERRUPT],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    marks = [tmp_path / f"rank{r}.pid" for r in range(2)]
    try:
        deadline = time.monotonic() + TIMEOUT
        while not all(m.exists() and m.read_text() for m in marks):
            assert p.poll() is None and time.monotonic() < deadline, "test_slow never started"
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 2, out + err
    assert re.findall(r"^(\w+)\s+[\d.]+s\s+\S+::(\w+)", out, re.M) == [
        ("PASSED", "test_quick")], out
    assert ("interrupted by signal 2 inside tests/fixtures/run/interrupt_cases.py::test_slow "
            "(ranks 0-1; no verdict for it); the results so far are above and in "
            f"{junit}") in err, err
    assert ET.parse(junit).getroot().get("tests") == "1"
    for m in marks:
        with pytest.raises(ProcessLookupError):
            os.kill(int(m.read_text()), 0)


def test_pytest_exit_inside_a_test_on_one_rank_fails_it_and_ends_the_run():
    out = simharness("run", "-n", "2", "--", "pytest", "-p", "no:randomly", "-k",
                     "exit", INTERRUPT)
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.findall(r"^(\w+)\s+[\d.]+s\s+\S+::(\w+)", out.stdout, re.M) == [
        ("FAILED", "test_exit_on_rank_1")], out.stdout
    assert ("rank 1: its pytest session was stopped inside this test (pytest.exit: rank 1 "
            "stops here)") in out.stdout
    assert "(1 tests after it not run, as with -x)" in out.stdout


def test_two_agents_on_loopback_share_one_run(tmp_path):
    """--nnodes 2: two `simharness run` agents (one rank each) meet at one c10d rendezvous
    and give the same verdicts, read from a shared --results-dir."""
    from simharness.launch.launcher import free_port

    endpoint = f"127.0.0.1:{free_port()}"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "cli.py", "run", "-n", "2", "--nnodes", "2", "--rdzv-endpoint",
           endpoint, "--run-id", "loopback", "--results-dir", str(tmp_path), "--", "pytest",
           "-q", "-k", "all_reduce or rank_1", CASES]
    agents = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = []
    try:
        for a in agents:
            outs.append(a.communicate(timeout=TIMEOUT))
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
    for a, (stdout, stderr) in zip(agents, outs, strict=True):
        assert a.returncode == 1, stdout + stderr
        assert re.search(r"^PASSED .*::test_all_reduce_on_cuda$", stdout, re.M), stdout
        assert "test_fails_on_rank_1_only  (first failing rank 1; failing ranks 1)" in stdout
        assert "1 passed, 1 failed, 0 skipped, 0 hung" in stdout


def test_ranks_that_diverge_are_reported_without_waiting_for_the_timeout():
    """One launch under -x: a rank-dependent skip before a barrier is diverged after
    --diverge-grace (2 s), far inside --timeout (100 s), and the file goes on (a skip does not
    stop -x); then rank 1's session ends at its failure: the next test is "not started on
    ranks 1" and the run stops."""
    out = simharness("run", "-n", "2", "--timeout", "100", "--diverge-grace", "2", "--",
                     "pytest", "-q", "-x", "-p", "no:randomly", DIVERGE)
    text = out.stdout
    assert out.returncode == 1, text + out.stderr
    got = re.findall(r"^(PASSED|FAILED|SKIPPED|HUNG|DIVERGED)\s+([\d.]+)s\s+\S+::(\w+)",
                     text, re.M)
    assert [(label, name) for label, _, name in got] == [
        ("DIVERGED", "test_skipped_on_rank_1"), ("PASSED", "test_after_the_divergence"),
        ("FAILED", "test_fails_on_rank_1"), ("DIVERGED", "test_not_started_on_rank_1")], text
    assert float(got[0][1]) < 50, text  # the grace, not the 100 s timeout
    assert "skipped on ranks 1 (Skipped: rank 1 has nothing to check) but run on ranks 0" in text
    assert re.search(r"diverge_cases.py\", line \d+, in test_skipped_on_rank_1", text)
    assert re.search(r"^DIVERGED .*::test_not_started_on_rank_1  \(the ranks did not all run "
                     r"it: ranks 1\)$", text, re.M), text
    assert ("not started on ranks 1: their pytest session ended after "
            f"{DIVERGE}::test_fails_on_rank_1") in text
    assert "test_never_run" not in text
    assert ("1 passed, 1 failed, 0 skipped, 0 hung, 2 diverged (1 tests after it not run"
            in text), text


def test_a_hang_while_collecting_names_the_stuck_rank_with_its_stack():
    out = simharness("run", "-n", "2", "--collect-timeout", "3", "--", "pytest", "-q", "-p",
                     "no:randomly", "tests/fixtures/run/collect_hang.py")
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert out.returncode == 2, out.stdout + out.stderr
    assert errors == ["error: collecting the tests hung on ranks 1 (past 3s, "
                      "--collect-timeout); the stuck ranks' stacks are printed above"], out.stderr
    assert "--- rank 1 stack (collecting) ---" in out.stderr
    assert re.search(r"collect_hang.py\", line \d+, in <module>\n\s+time.sleep\(3600\)",
                     out.stderr), out.stderr
    assert "Traceback" not in out.stderr


TORCH_SUITE = "torch-2.13.0-distributed_test"


def _upstream_suites():
    from support import upstream_suites

    return upstream_suites


def test_torch_suite_pins_match_the_installed_wheel():
    """The torch distributed tests come from the registry wheel the test venv installs;
    their sha256 pins hold for it (another torch is "needs the files", never run)."""
    import torch

    us = _upstream_suites()
    suite = us.SUITES[TORCH_SUITE]
    if torch.__version__.split("+")[0] != "2.13.0":
        assert us.cached(suite) is None and us.mismatches(suite)
        pytest.skip(f"torch {torch.__version__} is not the pinned 2.13.0")
    assert us.mismatches(suite) == []
    assert us.cached(suite) == Path(torch.__file__).resolve().parent.parent
    assert torch.version.git_version == suite.commit


def test_torch_own_distributed_tests_unedited_on_three_ranks():
    """Six of torch's own DistributedTest tests, unedited, through the driver, on 3 CPU ranks
    in one launch: default and new groups, subgroups, destroying a group; then two DDP tests
    (with the GPU shim) for the driver's per-test debug level. The first loops over torch's
    debug levels and leaves the process at DETAIL (``with_dist_debug_levels``); the second
    builds DDP over a zero-element parameter, which torch 2.13.0 itself crashes on (SIGSEGV)
    when the default group was made at DETAIL. It passes because the driver makes each test's
    group at the level a fresh process has, as torch's harness (a process per test) does."""
    us = _upstream_suites()
    if us.cached(us.SUITES[TORCH_SUITE]) is None:
        pytest.skip("the installed torch is not the pinned 2.13.0 wheel")
    out = simharness("run", "-n", "3", "--timeout", "100", "--", "pytest", "-q", "-o",
                     "addopts=", "-p", "no:randomly",
                     "tests/fixtures/run/torch_distributed_driver.py",
                     "-k", "test_get_rank_size_full_group or test_all_gather_object_subgroup "
                           "or test_destroy_group or test_all_reduce_full_group_sum "
                           "or test_ddp_multiple_nested_unused_params_err_ignore_params "
                           "or test_ddp_zero_output_features")
    text = out.stdout
    assert out.returncode == 0, text + out.stderr
    got = sorted(re.findall(r"^PASSED\s+[\d.]+s\s+\S+::TestDistBackendOnRanks::(\w+)$", text,
                            re.M))
    assert got == ["test_all_gather_object_subgroup", "test_all_reduce_full_group_sum",
                   "test_ddp_multiple_nested_unused_params_err_ignore_params",
                   "test_ddp_zero_output_features",
                   "test_destroy_group", "test_get_rank_size_full_group"], text
    assert "6 passed, 0 failed, 0 skipped, 0 hung in" in text
    assert "(1 round(s))" in text


MEGATRON_SUITE = "megatron-lm-core_v0.16.1"


def test_megatron_lm_parallel_state_unedited_on_eight_ranks():
    """Megatron-LM's own ``test_parallel_state.py`` at ``core_v0.16.1``, unedited, on 8 CPU
    ranks: 8 of its tests, among them the 3 that megatron-core 0.16.1 itself fails (its
    assertion on the attention and MoE data-parallel sizes, on every rank). Runs only where
    the sha-pinned files were put in ``.cache/upstream`` from a local mirror
    (``python tests/support/upstream_suites.py --git MIRROR``): no package registry carries them,
    so CI skips it and runs torch's own suite instead."""
    us = _upstream_suites()
    suite = us.SUITES[MEGATRON_SUITE]
    root = us.cached(suite)
    if root is None:
        pytest.skip(f"{MEGATRON_SUITE} files not cached (no registry has them): "
                    f"python tests/support/upstream_suites.py --git MIRROR-OF-{suite.repo}")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "run", "-n", "8", "--timeout", "120", "--",
         "pytest", "-q", "-p", "no:randomly", suite.run, "-k",
         "test_initialize_and_destroy_model_parallel or "
         "test_different_initialize_order_unconsistency"],
        cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    text = out.stdout
    assert out.returncode == 1, text + out.stderr
    verdicts = dict((name, outcome) for outcome, name in re.findall(
        r"^(PASSED|FAILED)\s+[\d.]+s\s+\S+::(\S+)", text, re.M))
    failed = sorted(n for n, o in verdicts.items() if o == "FAILED")
    assert failed == [f"test_different_initialize_order_unconsistency[src_tp_pp{i}-2]"
                      for i in (3, 4, 5)], text
    assert len(verdicts) == 8 and "5 passed, 3 failed, 0 skipped, 0 hung" in text, text
    assert text.count("the data parallel size of the attention and moe layers must be the "
                      "same") >= 3, text
    assert text.count("failing ranks 0-7") == 3, text


def test_a_module_or_a_test_that_needs_a_missing_gpu_package_is_a_needs_gpu_skip():
    """needs_te_module.py imports transformer_engine at its top (once a collection error
    that stopped the whole run, exit 2); asks_for_package.py raises Megatron-Core's
    "Please install TE >= 1.4." (once a plain failure). Both are needs-GPU skips naming the
    package and the line; the passing test beside them still runs."""
    out = simharness("run", "-n", "2", "--", "pytest", "-p", "no:randomly",
                     "tests/fixtures/run/needs_te_module.py",
                     "tests/fixtures/run/asks_for_package.py")
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert re.search(r"^SKIPPED .*needs_te_module\.py  needs GPU: needs transformer_engine, a "
                     r"GPU-only package \(ModuleNotFoundError: No module named "
                     r"'transformer_engine' at \S*needs_te_module\.py:6\)$", text, re.M), text
    assert re.search(r"^SKIPPED .*::test_asks_for_transformer_engine  needs GPU: needs "
                     r"transformer_engine, a GPU-only package \(ValueError: apply_rope_fusion is "
                     r"not available\. Please install TE >= 1\.4\. at \S*asks_for_package\.py:"
                     r"\d+\)$", text, re.M), text
    assert re.search(r"^PASSED .*::test_plain$", text, re.M), text
    assert "1 passed, 0 failed, 2 skipped (2 need a GPU), 0 hung" in text, text
