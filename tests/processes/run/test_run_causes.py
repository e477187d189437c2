"""``simharness run`` names the true cause (issue 25, "wrong verdicts"): a needs-GPU stop
followed by a waiting teardown, a knock-on failure after a stop, a collection error on one
rank, the first rank to fail, a JUnit file when nothing was judged, no round for nothing.

Fixtures: tests/fixtures/run/stop_cases.py, import_error_on_rank_1.py,
fails_first_on_rank_1.py, rank_dependent_groups.py, knock_on_failure.py, spawned_child.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

from support.paths import ROOT

STOPS = "tests/fixtures/run/stop_cases.py"
IMPORT_ERROR = "tests/fixtures/run/import_error_on_rank_1.py"
RANK_DEPENDENT = "tests/fixtures/run/rank_dependent_groups.py"
KNOCK_ON = "tests/fixtures/run/knock_on_failure.py"
TIMEOUT = 240


def simharness(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "cli.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


def test_needs_gpu_stops_their_knock_on_and_a_last_hang(tmp_path):
    """One launch of stop_cases.py on 2 ranks (--timeout 12, --diverge-grace 2)."""
    junit = tmp_path / "out.xml"
    out = simharness("run", "-n", "2", "--timeout", "12", "--diverge-grace", "2",
                     "--junit-xml", str(junit), "--", "pytest", "-q", "-p", "no:randomly",
                     STOPS)
    text = out.stdout
    assert out.returncode == 1, text + out.stderr
    got = re.findall(r"^(PASSED|FAILED|SKIPPED|HUNG|DIVERGED)\s+([\d.]+)s\s+\S+::(\w+)",
                     text, re.M)
    assert [(label, name) for label, _, name in got] == [
        ("SKIPPED", "test_stop_leaves_state_behind"),
        ("FAILED", "test_fails_on_the_state_left_behind"),
        ("SKIPPED", "test_stops_on_rank_1_only"),
        ("HUNG", "test_last_test_hangs")], text
    # a: rank 1 stopped, then waited in teardown_class's barrier for rank 0, which waited in
    # the test for rank 1: needs GPU after the 2 s grace, not at the 12 s timeout
    assert float(got[2][1]) < 9, text
    assert re.search(r"::test_stops_on_rank_1_only  needs GPU: needs a real GPU: a fused kernel"
                     r" at stop_cases.py .*\(on ranks 1; ranks 0 were still inside the test "
                     r"[\d.]+s after it started, waiting for them, and were stopped\)$",
                     text, re.M), text
    # b: the failure that follows a stop says so, then gives its own traceback
    detail = text.split("::test_fails_on_the_state_left_behind", 1)[1].splitlines()
    assert detail[1].strip().startswith(
        f"after a needs-GPU stop in {STOPS}::test_stop_leaves_state_behind on ranks 0-1: "
        f"global state that test set up"), text
    assert "AssertionError: global state already set: {'num_microbatches': 4}" in text
    # f: the last test hung; no round is started for nothing (round 2 was for that test)
    assert "(2 round(s))" in text and "round 3" not in out.stderr, text + out.stderr
    assert "2 skipped (2 need a GPU), 1 hung" in text
    assert re.search(r"peak RSS per rank \d+ MiB", text), text
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "2", "2")


def test_an_import_error_on_one_rank_is_named_with_its_text(tmp_path):
    """c and e: the error line names the file, the rank and the ImportError (it once said
    "ranks [1] collected other tests than rank 0"), and the JUnit file holds it."""
    junit = tmp_path / "out.xml"
    out = simharness("run", "-n", "2", "--junit-xml", str(junit), "--", "pytest", "-q", "-p",
                     "no:randomly", IMPORT_ERROR)
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(errors) == 1, out.stderr
    assert errors[0].startswith(f"error: collecting {IMPORT_ERROR} failed on ranks 1 (ranks 0 "
                                f"collected it): rank 1: "), errors
    assert re.search(r"import_error_on_rank_1.py:\d+: in <module> \| E\s+ModuleNotFoundError: "
                     r"No module named 'simharness_no_such_module_on_rank_1'$", errors[0]), errors
    assert "collected other tests" not in errors[0]
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("errors")) == ("0", "1")
    assert "ModuleNotFoundError" in next(suite.iter("error")).text


def test_no_test_selected_still_writes_junit(tmp_path):
    """e: exit 5, and a JUnit file with an empty suite that says why."""
    junit = tmp_path / "out.xml"
    out = simharness("run", "-n", "1", "--junit-xml", str(junit), "--", "pytest", "-p",
                     "no:randomly", "-k", "no_such_test_name", STOPS)
    assert out.returncode == 5, out.stdout + out.stderr
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("0", "0", "0")
    reason = {p.get("name"): p.get("value") for p in suite.iter("property")}["reason"]
    assert reason.startswith("the pytest arguments select no tests"), reason
    assert suite.find("system-out").text == reason


def test_a_script_names_the_rank_that_failed_first_not_the_lowest():
    """d: rank 1 exits 3; the launcher then stops rank 0, whose SIGTERM handler exits 1. It
    was once "rank 0 exited with status 1", exit status 1."""
    out = simharness("run", "-n", "2", "--no-shim", "--", "python",
                     "tests/fixtures/run/fails_first_on_rank_1.py")
    assert out.returncode == 3, out.stdout + out.stderr
    assert out.stderr.splitlines()[-1] == ("rank 1 exited with status 3 (the first to fail); "
                                           "ranks 0 were stopped or failed after it"), out.stderr


def test_a_rank_dependent_new_group_is_named_within_the_grace_not_hung():
    """rank_dependent_groups.py on 4 ranks (--timeout 60, --diverge-grace 2): each rank
    creates only its own pair's group, then uses it and the world. The pair that uses it
    second names the mismatch (the call, both lists, the line, the fix); the pair left
    waiting in the world's collective is stopped after the grace; the next test runs."""
    out = simharness("run", "-n", "4", "--timeout", "60", "--diverge-grace", "2", "--",
                     "pytest", "-q", "-p", "no:randomly", RANK_DEPENDENT)
    text = out.stdout
    assert out.returncode == 1, text + out.stderr
    got = re.findall(r"^(PASSED|FAILED|SKIPPED|HUNG|DIVERGED)\s+([\d.]+)s\s+\S+::(\w+)"
                     r"(?:  \(first failing rank \d+; failing ranks ([\d,-]+)\))?", text, re.M)
    assert [(label, name) for label, _, name, _ in got] == [
        ("FAILED", "test_each_rank_creates_only_its_own_group"),
        ("PASSED", "test_the_next_test_runs")], text
    # named after the odd pair's 2 s and the 2 s grace, far inside the 60 s timeout
    assert float(got[0][1]) < 20, text
    found = re.search(r"^    rank-dependent new_group: the new_group call at "
                      r"\S*rank_dependent_groups.py:(\d+) \(group '\d+'\) was given different "
                      r"ranks on different ranks: rank (\d) passed (\[\d, \d\]), rank (\d) "
                      r"passed (\[\d, \d\])\. Every rank must pass the same ranks", text, re.M)
    assert found, text
    source = (ROOT / RANK_DEPENDENT).read_text().splitlines()
    line = next(n for n, src in enumerate(source, 1) if "new_group(" in src)
    assert int(found[1]) == line
    # each rank named with the list it passed: its own pair
    for rank, ranks in ((found[2], found[3]), (found[4], found[5])):
        assert ranks == ("[0, 2]" if int(rank) % 2 == 0 else "[1, 3]"), text
    assert found[3] != found[5]
    assert "Fix: compute the ranks the same way on every rank" in text
    assert "use_local_synchronization=True when only the members create the group" in text
    failing = got[0][3]
    if failing in ("0,2", "1,3"):  # one pair connected and waited for the other: stopped
        held = "1,3" if failing == "0,2" else "0,2"
        assert re.search(rf"^    ranks {held} were still inside the test [\d.]+s after it "
                         rf"started, waiting for ranks {failing}, and were stopped$", text,
                         re.M), text
    else:
        assert failing == "0-3", text
    assert "1 passed, 1 failed, 0 skipped, 0 hung" in text, text


def test_the_first_rank_to_fail_in_a_test_is_named_and_the_others_errors_after_it():
    """knock_on_failure.py on 4 ranks: rank 2 fails its assertion and removes the folder the
    others then read (FileNotFoundError, 2 s later). The verdict was once "first failing
    rank 0" with rank 0's FileNotFoundError, the cause nowhere. Then a failure that leaves
    the others in a barrier: once reported at the timeout."""
    # a grace of 5 s: every rank must be inside the second test when it ends, and a rank
    # slowed by a loaded machine once took more than 2 s to get there from the first test
    out = simharness("run", "-n", "4", "--timeout", "90", "--diverge-grace", "5", "--",
                     "pytest", "-q", "-p", "no:randomly", "-k", "not finally_waits", KNOCK_ON)
    text = out.stdout
    assert out.returncode == 1, text + out.stderr
    assert re.search(r"^FAILED\s+[\d.]+s\s+\S+::test_one_rank_removes_what_the_others_read  "
                     r"\(first failing rank 2; failing ranks 0-3\)$", text, re.M), text
    line = text.split("(first failing rank 2; failing ranks 0-3)", 1)[1].splitlines()[1]
    assert re.fullmatch(r"rank 2 failed first \(\S+knock_on_failure\.py:\d+: AssertionError\), "
                        r"its report below; then ranks 0-1,3 \(\S+knock_on_failure\.py:\d+: "
                        r"FileNotFoundError\) up to [\d.]+s after it", line.strip()), line
    assert "AssertionError: too few files" in text, text
    # the second test: rank 1 raised before a barrier; the others were stopped after the
    # grace (5 s), far inside the 90 s timeout, and the verdict is rank 1's failure
    got = re.search(r"^FAILED\s+([\d.]+)s\s+\S+::test_one_rank_fails_before_a_barrier_the_"
                    r"others_wait_in  \(first failing rank 1; failing ranks 1\)$", text, re.M)
    assert got and float(got.group(1)) < 30, text
    assert re.search(r"failed on ranks 1; ranks 0,2-3 were still inside the test [\d.]+s after "
                     r"it started, waiting for them", text), text
    assert "RuntimeError: rank 1 gives up before the barrier" in text, text


def test_a_process_the_rank_spawns_sees_the_ranks_gpu():
    """spawned_child.py: each rank starts a child with multiprocessing's spawn, which calls
    torch.cuda.set_device(local_rank % device_count()) and sums a CUDA tensor. The child
    once had a CPU torch with no GPU (ZeroDivisionError), and a rank that waited on it, as
    Megatron-Core's persistent checkpoint worker makes its rank wait, hung."""
    out = simharness("run", "-n", "2", "--", "python", "tests/fixtures/run/spawned_child.py")
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in (0, 1):
        assert (f"[rank{rank}]:rank {rank}: child exit 0, saw (2, {rank}, 'NVIDIA H100 80GB "
                f"HBM3', 3.0)") in out.stdout + out.stderr, out.stdout + out.stderr


def test_a_rank_stuck_in_the_finally_of_its_own_failure_is_that_failure_not_a_hang():
    """knock_on_failure.py's last test on 4 ranks with --timeout 8: rank 1 raises, and its
    finally waits for a message; the others wait in a barrier. pytest never reports the
    failure (the finally never ends); once HUNG with stuck ranks 0-3 and no cause."""
    out = simharness("run", "-n", "4", "--timeout", "8", "--", "pytest", "-q", "-p",
                     "no:randomly", "-k", "finally_waits", KNOCK_ON)
    text = out.stdout
    assert out.returncode == 1, text + out.stderr
    assert re.search(r"^FAILED\s+[\d.]+s\s+\S+::test_one_rank_fails_and_its_finally_waits  "
                     r"\(first failing rank 1; failing ranks 1\)$", text, re.M), text
    assert re.search(r"failed on ranks 1; ranks 0,2-3 were still inside the test [\d.]+s after "
                     r"it started, waiting for them .*; ranks 1, after failing, were stuck in its "
                     r"clean-up", text), text
    assert "raised in the test, then stopped in the clean-up that followed:" in text, text
    assert "AssertionError: rank 1's own check fails" in text, text
    assert "0 hung" in text, text
