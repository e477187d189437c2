"""One verdict per test across ranks, from the per-rank records (pure: no torch).

Each rank of ``simharness run -- pytest`` appends JSON records to ``rank<R>.jsonl``
(:mod:`simharness.pytest_ranks.rank_plugin`): ``test`` (one per test it finished), ``hang``
(the test its watchdog stopped, with its stack), ``interrupted`` (the test Ctrl-C or ``pytest.exit``
stopped part-way), ``skip`` (a skip of a test's setup or call, written as pytest reports it,
before the teardown), ``collected``, ``collect_error``, ``end``.
:func:`verdict` combines one test's records:

- **skipped: needs GPU** when any rank stopped on ``NeedsGPU`` (the other ranks then fail
  or wait for it, which is not the test's fault), also a rank that was stopped in the
  test's teardown after its stop (its ``skip`` record, written when the stop was reported);
- **diverged** when the ranks did not all run it: some skipped it and the others were still
  inside it a grace period later (their watchdogs stopped them, ``state: diverged``), or
  (:func:`not_started`) a rank's session had ended before it;
- **hung** when any rank's watchdog fired in it (stuck ranks named, with their stacks);
- **failed** with the finding first when a rank found a rank-dependent ``new_group``
  (``group_mismatch``: :class:`simharness.errors.GroupMismatch`), naming the ranks it left
  waiting inside the test, which the grace stopped;
- **failed** when any rank failed or errored (the first rank to fail, by the wall-clock
  time its record gives, and its traceback, then the other ranks' errors in one line each:
  a failure on one rank often makes the others fail differently; a rank that died in the
  test on its own comes first, see ``lost``), with a hint when the
  same ranks stopped on ``NeedsGPU`` in an earlier test (``after_stop``): that test's own
  clean-up did not run;
- **skipped** when every rank skipped, or some skipped and the rest passed (ranks named);
- **passed** only when it passed on every rank.

>>> recs = {0: {"outcome": "passed", "duration": 0.5}, 1: {"outcome": "failed",
...         "longrepr": "assert 1 == 2", "duration": 0.7}}
>>> v = verdict("t.py::test_a", recs, world=2)
>>> v.outcome, v.first_rank, v.ranks, v.duration
('failed', 1, (1,), 0.7)
>>> verdict("t.py::test_b", {0: {"outcome": "passed"}, 1: {"outcome": "passed"}}, 2).outcome
'passed'
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

OUTCOMES = ("passed", "failed", "skipped", "hung", "diverged")
NEEDS_GPU_PREFIX = "needs GPU: "
#: How a ``lost`` reason starts for a rank the launcher stopped (it did not fail itself).
STOPPED = "stopped by the launcher"


@dataclass(frozen=True)
class Verdict:
    """A test's verdict across ranks.

    ``ranks``: the ranks that decided it (failing, stuck or skipping ranks; all for passed);
    ``first_rank``: the first of them; ``detail``: the traceback, skip reason or stacks;
    ``duration``: the slowest rank's seconds.
    """

    nodeid: str
    outcome: str
    ranks: tuple[int, ...]
    first_rank: int | None
    detail: str
    duration: float
    needs_gpu: bool = False

    @property
    def label(self) -> str:
        return "SKIPPED" if self.outcome == "skipped" else self.outcome.upper()


def verdict(nodeid: str, records: Mapping[int, Mapping], world: int,
            hangs: Mapping[int, Mapping] | None = None,
            lost: Mapping[int, str] | None = None,
            after_stop: tuple[str, Iterable[int]] | None = None) -> Verdict:
    """Combine one test's per-rank ``records`` (rank -> test record) and ``hangs``
    (rank -> hang record); ``lost`` (rank -> why) names ranks that ended without a record,
    those that failed on their own first, in the order they failed; ``after_stop``: (the
    test, its ranks) of the last ``NeedsGPU`` stop before this test in the same processes.

    >>> v = verdict("t::b", {0: {"outcome": "failed", "longrepr": "E x"}}, 1,
    ...             after_stop=("t::a", [0]))
    >>> v.detail.splitlines()[0][:58]
    'after a needs-GPU stop in t::a on ranks 0: global state th'
    """
    hangs = hangs or {}
    lost = lost or {}
    duration = max([float(r.get("duration") or 0.0) for r in records.values()]
                   + [float(h.get("elapsed") or 0.0) for h in hangs.values()] + [0.0])
    gpu = sorted(r for r, rec in records.items() if rec.get("needs_gpu"))
    if gpu:
        reason = str(records[gpu[0]].get("reason") or "needs GPU")
        held = sorted(r for r, h in hangs.items() if h.get("state") in ("running", "diverged"))
        if held:  # ranks left waiting for the stopped ones (a collective, a barrier)
            reason += (f" (on ranks {_span(gpu)}; ranks {_span(held)} were still inside the "
                       f"test {max(float(hangs[r].get('elapsed') or 0.0) for r in held):.1f}s"
                       f" after it started, waiting for them, and were stopped)")
        return Verdict(nodeid, "skipped", tuple(gpu), gpu[0], reason, duration, True)
    found = sorted(r for r, rec in records.items() if rec.get("group_mismatch"))
    if found:
        return _group_mismatch(nodeid, records, hangs, found, duration)
    # a rank stopped while its test was raising (its finally block, or a context manager's
    # exit, waited for the others): that error is its failure, not yet reported by pytest
    records = {**{r: {"outcome": "failed", "raising": True,
                      "longrepr": f"raised in the test, then stopped in the clean-up that "
                                  f"followed:\n{h['raising']}"}
                  for r, h in hangs.items() if h.get("raising") and r not in records},
               **records}
    diverged = sorted(r for r, h in hangs.items() if h.get("state") == "diverged")
    if diverged:
        return _skip_diverged(nodeid, records, hangs, diverged, world, duration)
    stuck = sorted(r for r, h in hangs.items() if h.get("state") == "running")
    failing = in_failure_order(records)
    if hangs:
        stuck = sorted(set(stuck) | {r for r in hangs if r in failing}) or sorted(hangs)
        if failing:
            return _failed_leaving_others(nodeid, records, hangs, failing, stuck, duration,
                                          after_stop)
        waiting = sorted(set(range(world)) - set(stuck))
        parts = [f"stuck on ranks {_span(stuck)}"
                 + (f"; ranks {_span(waiting)} had finished it" if waiting else "")]
        for r in stuck:
            parts.append(f"--- rank {r} stack ---\n{hangs[r].get('stack', '').rstrip()}")
        return Verdict(nodeid, "hung", tuple(stuck), stuck[0], "\n".join(parts), duration)
    if failing or lost:
        detail = ""
        if failing:
            r0 = failing[0]
            detail = "\n".join([*_others_failed(records, failing), _failure_text(records[r0])])
        died = [r for r, why in lost.items() if not why.startswith(STOPPED)]
        if died or not failing:  # a rank that died in the test: the failures may follow it
            r0 = (died or list(lost))[0]
        extra = [*_hints(detail, after_stop), *(f"rank {r}: {why}" for r, why in lost.items())]
        return Verdict(nodeid, "failed", tuple(sorted(set(failing) | set(lost))), r0,
                       "\n".join([*extra, detail]).strip(), duration)
    skipped = sorted(r for r, rec in records.items() if rec.get("outcome") == "skipped")
    if skipped:
        reason = str(records[skipped[0]].get("reason") or "")
        if len(skipped) < world:
            reason = f"skipped on ranks {_span(skipped)} only: {reason}"
        return Verdict(nodeid, "skipped", tuple(skipped), skipped[0], reason, duration)
    return Verdict(nodeid, "passed", tuple(sorted(records)), None, "", duration)


def _hints(detail: str, after_stop: tuple[str, Iterable[int]] | None) -> list[str]:
    """The lines that go before a failure's own text: a known cause first, then the
    needs-GPU stop it may follow."""
    hints = []
    if device_identity(detail):
        hints.append(DEVICE_HINT)
    elif _SPLITS_AS_TENSOR.search(detail):
        hints.append(SPLITS_HINT)
    if after_stop is not None:
        hints.append(knock_on_hint(*after_stop))
    return hints


def in_failure_order(records: Mapping[int, Mapping]) -> list[int]:
    """The ranks whose record failed or errored, the first to fail first: by the wall-clock
    time the record gives (``failed_at``; ranks of one node share the clock), then by rank.

    >>> in_failure_order({0: {"outcome": "failed", "failed_at": 5.0}, 1: {"outcome": "passed"},
    ...                   3: {"outcome": "failed", "failed_at": 4.9}, 2: {"outcome": "error"}})
    [3, 0, 2]
    """
    failing = [r for r, rec in records.items() if rec.get("outcome") in ("failed", "error")]
    return sorted(failing, key=lambda r: (float(records[r].get("failed_at") or "inf"), r))


def _others_failed(records: Mapping[int, Mapping], failing: list[int]) -> list[str]:
    """One line for the failing ranks after the first, grouped by the last line of their
    report (pytest's ``path:line: Error``), and how long after the first they failed: a
    rank's failure (a file it removed, a barrier it skipped) often makes the others fail
    differently, and the first one's traceback follows. None when they all failed alike.

    >>> _others_failed({
    ...     3: {"failed_at": 1.0, "longrepr": "E  assert 6 == 8\\nt.py:9: AssertionError"},
    ...     0: {"failed_at": 1.2, "longrepr": "t.py:20: FileNotFoundError"},
    ...     1: {"failed_at": 1.1, "longrepr": "t.py:20: FileNotFoundError"}}, [3, 1, 0])
    ['rank 3 failed first (t.py:9: AssertionError), its report below; then ranks 0-1 \
(t.py:20: FileNotFoundError) up to 0.20s after it']
    >>> _others_failed({1: {"longrepr": "t.py:9: E"}, 0: {"longrepr": "t.py:9: E"}}, [1, 0])
    []
    """
    first = records[failing[0]]
    by_end: dict[str, list[int]] = {}
    for r in failing[1:]:
        by_end.setdefault(_last_line(records[r]), []).append(r)
    if set(by_end) <= {_last_line(first)}:  # one failing rank, or every rank failed alike
        return []
    then = "; ".join(f"ranks {_span(sorted(rs))} ({end})" for end, rs in by_end.items())
    times = [float(records[r].get("failed_at") or "nan") for r in failing]
    after = max(times[1:]) - times[0]
    lag = f" up to {after:.2f}s after it" if after == after else ""  # nan: no times
    return [f"rank {failing[0]} failed first ({_last_line(first)}), its report below; "
            f"then {then}{lag}"]


def _last_line(record: Mapping) -> str:
    """A report's last non-empty line (pytest ends it with ``path:line: ErrorType``)."""
    lines = [ln.strip() for ln in str(record.get("longrepr") or "").splitlines() if ln.strip()]
    return lines[-1][:160] if lines else "no report"


def _failure_text(record: Mapping) -> str:
    """A failing rank's report, marked when it failed in setup or teardown."""
    detail = str(record.get("longrepr") or "")
    return ("error in setup or teardown\n" + detail if record.get("outcome") == "error"
            else detail)


def _failed_leaving_others(nodeid: str, records: Mapping[int, Mapping],
                           hangs: Mapping[int, Mapping], failing: list[int], stuck: list[int],
                           duration: float,
                           after_stop: tuple[str, Iterable[int]] | None) -> Verdict:
    """Failed: ranks ``failing`` failed the test and the others, ``stuck``, were left inside
    it (in a collective or barrier the failing ranks skipped when they raised); the failure
    is the cause, the stuck ranks' stacks follow it.

    >>> v = _failed_leaving_others("t::a", {5: {"outcome": "failed", "longrepr": "E boom"}},
    ...     {0: {"state": "running", "elapsed": 30.0, "stack": "barrier"}}, [5], [0], 30.0,
    ...     None)
    >>> v.outcome, v.ranks, v.detail.splitlines()[0][:40]
    ('failed', (5,), 'failed on ranks 5; ranks 0 were still in')
    """
    detail = "\n".join([*_others_failed(records, failing), _failure_text(records[failing[0]])])
    waiting = [r for r in stuck if r not in failing]
    torn = [r for r in stuck if r in failing]
    head = f"failed on ranks {_span(sorted(failing))}"
    if waiting:
        elapsed = max(float(hangs[r].get("elapsed") or 0.0) for r in waiting)
        head += (f"; ranks {_span(waiting)} were still inside the test {elapsed:.1f}s after it "
                 f"started, waiting for them (a collective or barrier the failing ranks did "
                 f"not reach once they raised), and were stopped")
    if torn:
        head += (f"; ranks {_span(torn)}, after failing, were stuck in its clean-up (a finally "
                 f"block, a context manager's exit, a fixture or teardown waiting for the "
                 f"others) and were stopped")
    stacks = [f"--- rank {r} stack ---\n{hangs[r].get('stack', '').rstrip()}" for r in stuck]
    return Verdict(nodeid, "failed", tuple(sorted(failing)), failing[0],
                   "\n".join([head, *_hints(detail, after_stop), detail, *stacks]).strip(),
                   duration)


def _group_mismatch(nodeid: str, records: Mapping[int, Mapping], hangs: Mapping[int, Mapping],
                    found: list[int], duration: float) -> Verdict:
    """Failed: ranks ``found`` a rank-dependent ``new_group`` (their records'
    ``group_mismatch``); the ranks it left waiting inside the test are named, not hung.

    >>> v = _group_mismatch("t::a", {1: {"group_mismatch": "rank-dependent new_group: x",
    ...     "longrepr": "E ..."}}, {0: {"state": "diverged", "elapsed": 6.2}}, [1], 6.2)
    >>> v.outcome, v.ranks, v.detail.splitlines()[1][:48]
    ('failed', (1,), 'ranks 0 were still inside the test 6.2s after it')
    """
    detail = [str(records[found[0]]["group_mismatch"])]
    held = sorted(r for r, h in hangs.items() if h.get("state") in ("running", "diverged"))
    if held:
        detail.append(f"ranks {_span(held)} were still inside the test "
                      f"{max(float(hangs[r].get('elapsed') or 0.0) for r in held):.1f}s after "
                      f"it started, waiting for ranks {_span(found)}, and were stopped")
    detail.append(f"--- rank {found[0]} ---\n{records[found[0]].get('longrepr') or ''}".rstrip())
    return Verdict(nodeid, "failed", tuple(found), found[0], "\n".join(detail), duration)


def _skip_diverged(nodeid: str, records: Mapping[int, Mapping], hangs: Mapping[int, Mapping],
                   diverged: list[int], world: int, duration: float) -> Verdict:
    skipped = sorted(r for r, rec in records.items() if rec.get("outcome") == "skipped")
    reason = str(records[skipped[0]].get("reason") or "") if skipped else ""
    others = sorted(set(range(world)) - set(skipped) - set(diverged))
    parts = [f"skipped on ranks {_span(skipped) or '?'}" + (f" ({reason})" if reason else "")
             + f" but run on ranks {_span(diverged)}, still inside it "
             f"{max(float(hangs[r].get('elapsed') or 0.0) for r in diverged):.1f}s after it "
             f"started (waiting for the ranks that skipped, e.g. in a collective): a skip "
             f"that depends on the rank"
             + (f"; ranks {_span(others)} were stopped with them" if others else "")]
    for r in diverged:
        parts.append(f"--- rank {r} stack ---\n{hangs[r].get('stack', '').rstrip()}")
    return Verdict(nodeid, "diverged", tuple(diverged), diverged[0], "\n".join(parts), duration)


#: The line a failure gets when its assertion compared a tensor's device with CUDA.
DEVICE_HINT = ("the assertion reads a tensor's device: the shim keeps tensors put on CUDA on "
               "the CPU, where they report device 'cpu' and is_cuda False; this cannot be "
               "faithful on CPU ranks (docs/gpu-shim.md, \"Known differences\")")


#: torch's refusal of a tensor where a list of split sizes goes, and the line it gets: code
#: that moves split sizes to the host as NumPy only when they are on CUDA (``if t.is_cuda``)
#: keeps them a tensor on CPU ranks. A lazily connected group passes them to the real
#: backend's ``alltoall_base`` (simharness/launch/lazy_group.py), which refuses them alike.
_SPLITS_AS_TENSOR = re.compile(r"\b(all_to_all_single|alltoall_base)\(\): incompatible "
                               r"function arguments")
SPLITS_HINT = ("split sizes reached all_to_all_single as a tensor: code that turns them into "
               "a list or NumPy array only when they are on CUDA (if t.is_cuda: ...) keeps "
               "them a tensor on CPU ranks, where the shim's tensors report device 'cpu'; "
               "this cannot be faithful on CPU ranks (docs/gpu-shim.md, \"Known differences\")")


def device_identity(detail: str) -> bool:
    r"""Whether a failure's assertion (an ``E`` line of pytest's report) compares a device
    with CUDA: ``'cpu' == 'cuda'``, ``device(type='cpu')``, ``is_cuda``.

    >>> device_identity("E       AssertionError: assert 'cpu' == 'cuda'")
    True
    >>> device_identity("E   assert False\nE    +  where False = tensor([1.]).is_cuda")
    True
    >>> device_identity("E       assert 'cpu' == 'meta'"), device_identity("is_cuda")
    (False, False)
    >>> device_identity("E   AssertionError: Expects the parameter to already be moved to "
    ...                 "device cuda:0 but got cpu")
    True
    """
    lines = [ln for ln in detail.splitlines() if ln.lstrip().startswith("E ")]
    text = "\n".join(lines)
    if "AssertionError" not in text and "assert " not in text:
        return False
    return ".is_cuda" in text or ("cuda" in text and ("'cpu'" in text or "type='cpu'" in text
                                                       or re.search(r"\bcuda:\d+ but got cpu\b",
                                                                    text) is not None))


def knock_on_hint(stopped_in: str, ranks: Iterable[int]) -> str:
    """The line a failure gets when an earlier test in the same rank processes stopped on
    ``NeedsGPU``: the stop skipped the rest of that test, its clean-up included.

    >>> knock_on_hint("t.py::test_a", [0, 1, 2, 3])[:54]
    'after a needs-GPU stop in t.py::test_a on ranks 0-3: g'
    """
    return (f"after a needs-GPU stop in {stopped_in} on ranks {_span(ranks)}: global state "
            f"that test set up (Megatron's parallel state, its microbatch calculator, RNG "
            f"trackers) may be left behind, since the rest of it, its clean-up included, did "
            f"not run; run this test alone (-k) to see whether it fails by itself")


def not_started(nodeid: str, waiting: Mapping[int, Mapping], world: int) -> Verdict:
    """The verdict of a test that ranks ``waiting`` (rank -> ``diverged`` record, with
    ``ended``: rank -> the last test it finished) were to start when the other ranks'
    pytest sessions had already ended (``-x``, ``--maxfail``, ``pytest.exit``).

    >>> v = not_started("t.py::test_b", {0: {"ended": {"1": "t.py::test_a"}}}, world=2)
    >>> v.outcome, v.ranks
    ('diverged', (1,))
    >>> v.detail.split(" (")[0]
    'not started on ranks 1: their pytest session ended after t.py::test_a'
    """
    ended: dict[int, str] = {}
    for rec in waiting.values():
        ended.update({int(r): str(last) for r, last in (rec.get("ended") or {}).items()})
    gone = sorted(set(ended) - set(waiting)) or sorted(set(range(world)) - set(waiting))
    lasts = sorted({ended.get(r) or "(no test)" for r in gone})
    detail = (f"not started on ranks {_span(gone)}: their pytest session ended after "
              f"{', '.join(lasts)} (-x, --maxfail or pytest.exit stop one rank, not the "
              f"others); ranks {_span(waiting)} waited to start it")
    return Verdict(nodeid, "diverged", tuple(gone), gone[0] if gone else None, detail, 0.0)


def _span(ranks: Iterable[int]) -> str:
    """``0-3,6`` for 0,1,2,3,6.

    >>> _span([0, 1, 2, 3, 6, 8, 9])
    '0-3,6,8-9'
    """
    out: list[str] = []
    run: list[int] = []
    for r in sorted(ranks):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [r]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def exit_code(verdicts: Iterable[Verdict], *, interrupted: bool = False) -> int:
    """pytest's exit status for these verdicts: 0 ok, 1 failures or hangs, 2 interrupted,
    5 no tests.

    >>> exit_code([]), exit_code([Verdict("t", "hung", (1,), 1, "", 1.0)])
    (5, 1)
    """
    vs = list(verdicts)
    if interrupted:
        return 2
    if not vs:
        return 5
    return 1 if any(v.outcome in ("failed", "hung", "diverged") for v in vs) else 0


def counts(verdicts: Iterable[Verdict]) -> dict[str, int]:
    """Number of verdicts per outcome, plus ``needs_gpu`` (a part of ``skipped``)."""
    vs = list(verdicts)
    out = {o: sum(v.outcome == o for v in vs) for o in OUTCOMES}
    out["needs_gpu"] = sum(v.needs_gpu for v in vs)
    return out


def junit_xml(verdicts: Iterable[Verdict], *, name: str = "simharness-run",
              wall_s: float = 0.0, world: int = 1, reason: str | None = None,
              error: str | None = None) -> str:
    """JUnit XML (one ``testcase`` per test, classname/name from the node id). A run that
    judged no test still gets a file: ``reason`` says why (no test selected), ``error``
    what stopped it (a collection error), as pytest's own file has an ``error`` for it.

    >>> x = junit_xml([Verdict("a/t.py::C::test_x", "failed", (1,), 1, "boom", 0.5)])
    >>> 'classname="a.t.C" name="test_x"' in x and 'failures="1"' in x
    True
    >>> 'tests="0" failures="0" errors="1"' in junit_xml([], error="collecting t.py failed")
    True
    """
    vs = list(verdicts)
    c = counts(vs)
    suite = ET.Element("testsuite", name=name, tests=str(len(vs)),
                       failures=str(c["failed"] + c["hung"] + c["diverged"]),
                       errors="1" if error else "0",
                       skipped=str(c["skipped"]), time=f"{wall_s:.3f}")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="world_size", value=str(world))
    if reason or error:
        ET.SubElement(props, "property", name="reason", value=str(error or reason))
    if error:
        case = ET.SubElement(suite, "testcase", classname="", name="(collection)", time="0")
        ET.SubElement(case, "error", message="collection failure").text = error
    elif reason:
        ET.SubElement(suite, "system-out").text = reason
    for v in vs:
        path, _, rest = v.nodeid.partition("::")
        parts = rest.split("::") if rest else [os.path.basename(path)]
        module = path[:-3] if path.endswith(".py") else path
        classname = ".".join([module.replace("/", ".").replace("\\", "."), *parts[:-1]])
        case = ET.SubElement(suite, "testcase", classname=classname, name=parts[-1],
                             time=f"{v.duration:.3f}")
        if v.outcome == "failed":
            el = ET.SubElement(case, "failure", message=f"failed on rank {v.first_rank}")
            el.text = v.detail
        elif v.outcome in ("hung", "diverged"):
            kind = "hang" if v.outcome == "hung" else "diverged"
            el = ET.SubElement(case, "failure", type=kind,
                               message=f"{v.outcome} on ranks {_span(v.ranks)}")
            el.text = v.detail
        elif v.outcome == "skipped":
            ET.SubElement(case, "skipped", message=v.detail[:500])
    return ET.tostring(suite, encoding="unicode")


def read_records(path: str) -> list[dict]:
    """The JSON records of one rank's file (a torn last line, from a killed rank, is left out).

    >>> read_records("/nonexistent/rank0.jsonl")
    []
    """
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
