"""The capture checks (``simharness.capture.checks``) on hand-built captures.

tests/processes/capture/test_capture.py runs real code under torch's fake backend and
asserts what the checks must name there; these tests pin the wording, severities, named
ranks and branches of every finding. They build :class:`Capture` values
directly (no process, no torch.distributed) and assert each finding in full: the ranks,
call numbers, group lists and call sites each message names are the ones the input puts
there, worked out by hand below each scenario.
"""

from __future__ import annotations

from simharness import Finding, ParallelismConfig, build_layout, check
from simharness.capture.checks import (
    AG_DESC,
    _at,
    _by_kind,
    _partial_descs,
    _rank_groups,
    _set_text,
    captured_layout,
    check_against_layout,
    check_capture,
    check_crosscheck,
    check_failed,
    check_local_members,
    check_partition,
    check_sequences,
    check_summary,
    check_twins,
    kind_of,
    kinds_of,
)
from simharness.capture.record import FAILED, OK, STOPPED, TIMEOUT, Capture, GroupCall, RankRecord

SITE = "init.py:10 build"


def gc(ranks, desc=None, *, backend=None, local=False, stack=(SITE,), ordered=False):
    return GroupCall(None if ranks is None else tuple(ranks), desc, backend, local, None, None,
                     tuple(stack), ordered)


def make(world, seqs, who=None, *, status=None, errors=None, meta=None, ranks=None):
    """A capture: ``seqs`` the distinct sequences, ``who[r]`` rank r's sequence (default 0),
    ``status[r]`` its status (default ok), ``errors[r]`` its error record."""
    who, status, errors = who or {}, status or {}, errors or {}
    ranks = tuple(range(world)) if ranks is None else tuple(ranks)
    recs = {r: RankRecord(r, status.get(r, OK), who.get(r, 0), {}, {}, errors.get(r))
            for r in ranks}
    return Capture(world, ranks, tuple(tuple(s) for s in seqs), recs, meta or {})


def F(code, severity, message, ranks=(), groups=()):
    return Finding(code, severity, message, tuple(ranks), tuple(groups))


# ------------------------------------------------------------------ helpers
def test_call_sites_and_kinds_for_messages():
    assert _at(gc([0], stack=("a.py:1 f", "b.py:2 g", "c.py:3 h"))) == "a.py:1 f via b.py:2 g"
    assert _at(gc([0], stack=("a.py:1 f",))) == "a.py:1 f"
    assert _at(gc([0], stack=())) == "?"
    assert kind_of(gc([0], "TP")) == "TP"
    assert kind_of(gc([0], stack=("a.py:1 f", "b.py:2 g"))) == "(no group_desc) at a.py:1 f"
    # six runs at most, then the last one after "..."
    assert _set_text([0, 2, 4, 6, 8, 10]) == "0, 2, 4, 6, 8, 10"
    assert _set_text([0, 2, 4, 6, 8, 10, 12]) == "0, 2, 4, 6, ..., 12"
    assert _set_text([3, 1, 2]) == "1-3"


def test_kinds_of_tells_desc_less_runs_apart():
    a, b = ("a.py:1 f", "m.py:5 main"), ("a.py:1 f", "m.py:9 main")
    calls = [gc([0, 1], stack=a), gc([2, 3], stack=a),       # run 0 at site a
             gc([0, 1, 2, 3], "WORLD"),                      # a desc: its own kind
             gc([0, 2], stack=a), gc([1, 3], stack=a),       # rank 0 again: a new run (call 3)
             gc([0], stack=b), gc([1], stack=b)]             # another site, one run: no number
    la = "(no group_desc) at a.py:1 f via m.py:5 main"
    lb = "(no group_desc) at a.py:1 f via m.py:9 main"
    assert kinds_of(calls, 4) == [f"{la}, call 0", f"{la}, call 0", "WORLD", f"{la}, call 3",
                                  f"{la}, call 3", lb, lb]
    # a call from another site ends a run even without a shared rank
    assert kinds_of([gc([0], stack=a), gc([1], stack=b), gc([2], stack=a)], 4) == [
        f"{la}, call 0", lb, f"{la}, call 2"]
    # None (every rank) overlaps everything: each whole-world call starts a run
    world = [gc(None, stack=a), gc(None, stack=a)]
    assert kinds_of(world, 2) == [f"{la}, call 0", f"{la}, call 1"]
    kinds = _by_kind(calls, 4)
    assert list(kinds) == [f"{la}, call 0", "WORLD", f"{la}, call 3", lb]
    assert kinds[f"{la}, call 3"] == [calls[3], calls[4]]
    assert [c.ranks for c in kinds[lb]] == [(0,), (1,)]


def test_partial_kinds_are_the_embedding_groups():
    assert _partial_descs() == {"EMBEDDING_GROUP", "POSITION_EMBEDDING_GROUP"}
    # the first group each rank is in, for a whole-world call too
    calls = [gc([0, 2]), gc([2, 3]), gc(None)]
    got = _rank_groups(calls, 4)
    assert got == {0: calls[0], 2: calls[0], 3: calls[1], 1: calls[2]}


# ------------------------------------------------------------------ failed ranks
def test_failed_and_timed_out_ranks():
    errors = {1: {"kind": "exception", "message": "ValueError: bad",
                  "where": ["x.py:5 f", "x.py:9 <module>"]},
              2: {"message": "stuck"},
              3: None}
    cap = make(4, [[gc([0, 1, 2, 3], "W")]], status={1: FAILED, 2: TIMEOUT, 3: FAILED},
               errors=errors)
    assert check_failed(cap) == [
        F("capture-failed", "error",
          "rank 1 failed at x.py:5 f: ValueError: bad (exception); its calls are partial", (1,)),
        F("capture-failed", "error", "rank 2 timed out: stuck (timeout); its calls are partial",
          (2,)),
        F("capture-failed", "error", "rank 3 failed: ? (failed); its calls are partial", (3,)),
    ]
    # a stopped rank (another one failed) is not itself a failure
    assert check_failed(make(2, [[]], status={1: STOPPED})) == []


# ------------------------------------------------------------------ sequences
def test_one_sequence_or_only_sites_differing_is_no_finding():
    s = [gc([0, 1], "A"), gc([2, 3], "A")]
    assert check_sequences(make(4, [s])) == []
    other_site = [c._replace(stack=("other.py:1 g",)) for c in s]
    assert check_sequences(make(4, [s, other_site], {3: 1})) == []


def test_divergent_order_names_the_first_differing_call():
    s0 = [gc([0, 1, 2, 3], "W"), gc([0, 1], "A", stack=("a.py:1 f", "m.py:2 main")),
          gc([2, 3], "A", stack=("a.py:1 f",))]
    s1 = [s0[0], s0[2]._replace(stack=("b.py:7 g",)), s0[1]]
    # ranks 0, 1 make s0; ranks 2, 3 (two ranks: the sequence is shared) make s1; s0 is the
    # reference on the tie because rank 0 makes it
    cap = make(4, [s0, s1], {2: 1, 3: 1})
    assert check_sequences(cap) == [F(
        "capture-divergence", "error",
        "rank 2 creates its groups in a different order from rank 0: collective new_group call "
        "1 is A [0, 1] at a.py:1 f via m.py:2 main on rank 0 but A [2, 3] at b.py:7 g on rank "
        "2; torch pairs new_group calls by position, so from this call on the two ranks "
        "disagree about which communicator is which (cross-talk between groups, or a hang) "
        "(2 ranks make rank 2's sequence: 2-3)", (2, 3), ("A",))]
    # the reference is the sequence most ranks make, not rank 0's
    cap = make(4, [s0, s1], {0: 0, 1: 1, 2: 1, 3: 1})
    (f,) = check_sequences(cap)
    assert f.ranks == (0,) and f.message.startswith(
        "rank 0 creates its groups in a different order from rank 1: collective new_group "
        "call 1 is A [2, 3] at b.py:7 g on rank 1 but A [0, 1] at a.py:1 f via m.py:2 main "
        "on rank 0;")
    assert f.message.endswith("(cross-talk between groups, or a hang)")  # one rank: no share
    # two kinds: both named, in order
    s2 = [s0[0], gc([0, 1], "B"), s0[2]]
    (f,) = check_sequences(make(4, [s0, s2], {3: 1}))
    assert f.groups == ("A", "B") and f.ranks == (3,)


def test_a_missing_call_names_the_call_and_who_makes_it():
    s0 = [gc([0, 1], "A"), gc([2, 3], "B", stack=("b.py:3 g", "m.py:1 main"))]
    short = s0[:1]
    hint = ("every rank must make every new_group call (unless use_local_synchronization="
            "True), or the ranks that do wait forever")
    assert check_sequences(make(4, [s0, short], {3: 1})) == [F(
        "capture-missing-call", "error",
        "rank 3 makes 1 collective new_group calls but rank 0 makes 2: call 1 (B [2, 3] at "
        f"b.py:3 g via m.py:1 main, made by rank 0) is missing on the other; {hint}",
        (3,), ("B",))]
    longer = [*s0, gc(None, stack=("c.py:4 h",))]
    assert check_sequences(make(4, [s0, longer], {1: 1, 2: 1})) == [F(
        "capture-missing-call", "error",
        "rank 1 makes 3 collective new_group calls but rank 0 makes 2: call 2 ((no "
        f"group_desc) all ranks at c.py:4 h, made by rank 1) is missing on the other; {hint} "
        "(2 ranks make rank 1's sequence: 1-2)", (1, 2), ("(no group_desc) at c.py:4 h",))]
    # local-synchronisation calls are not counted among the collective ones
    with_local = [*s0, gc([0, 1], "L", local=True)]
    assert check_sequences(make(4, [s0, with_local], {1: 1})) == []


def test_more_divergent_sequences_than_reported():
    base = [gc([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], "W"), gc([0, 1], "A")]
    # rank 0 and 1 make base; ranks 2..11 each their own order (10 other sequences)
    seqs = [base] + [[base[0], gc([r], f"K{r}")] for r in range(2, 12)]
    cap = make(12, seqs, {r: r - 1 for r in range(2, 12)})
    found = check_sequences(cap)
    assert len(found) == 9
    assert [f.ranks for f in found[:8]] == [(r,) for r in range(2, 10)]   # first rank order
    assert [f.groups for f in found[:8]] == [("A", f"K{r}") for r in range(2, 10)]
    assert found[8] == F("capture-divergence", "error",
                         "2 more distinct call sequences (ranks 10-11) differ from rank 0's",
                         (10, 11))


# ------------------------------------------------------- local synchronisation
def test_members_of_a_local_group_that_never_create_it():
    loc = gc([0, 1, 2], "L", local=True, stack=("l.py:2 mk",))
    seqs = [[gc([0, 1, 2, 3], "W"), loc], [gc([0, 1, 2, 3], "W")]]
    # ranks 0 and 1 create L; rank 2 (a member) does not; rank 3 is no member
    cap = make(4, seqs, {2: 1, 3: 1})
    assert check_local_members(cap) == [F(
        "capture-missing-call", "error",
        "L [0, 1, 2] (use_local_synchronization, at l.py:2 mk) is created by ranks 0-1 but not "
        "by its member(s) 2: with local synchronisation every member must call new_group, or "
        "the others wait forever", (2,), ("L",))]
    # a member that failed is not reported: its calls are partial
    cap = make(4, seqs, {2: 1, 3: 1}, status={2: FAILED})
    assert check_local_members(cap) == []
    # every member creates it: nothing
    assert check_local_members(make(4, seqs, {3: 1})) == []


# ------------------------------------------------------------------ partition
def test_duplicates_overlaps_and_gaps():
    calls = [gc([0, 1], "TENSOR_MODEL_PARALLEL_GROUP", stack=("t.py:1 tp",)),
             gc([1, 0], "TENSOR_MODEL_PARALLEL_GROUP", stack=("t.py:2 tp",)),  # same group
             gc([1, 2], "TENSOR_MODEL_PARALLEL_GROUP"),
             gc([0, 1], "my_pairs"),
             gc([4, 5], "my_pairs")]
    got = check_partition(make(6, [calls]))
    assert got == [
        F("capture-duplicate", "warning",
          "TENSOR_MODEL_PARALLEL_GROUP: 1 group(s) created twice (e.g. TENSOR_MODEL_PARALLEL_"
          "GROUP [1, 0] at t.py:2 tp); each call makes its own communicator", (0, 1),
          ("TENSOR_MODEL_PARALLEL_GROUP",)),
        F("capture-partition", "error",
          "TENSOR_MODEL_PARALLEL_GROUP: 1 rank(s) are in several groups, e.g. rank 1 in [0, 1] "
          "and [1, 2]; code that keeps 'the' group of this kind per rank keeps only one of "
          "them", (1,), ("TENSOR_MODEL_PARALLEL_GROUP",)),
        F("capture-partition", "error",
          "TENSOR_MODEL_PARALLEL_GROUP: 3 of 6 ranks are in no group (3-5); the groups of one "
          "kind should cover the world", (3, 4, 5), ("TENSOR_MODEL_PARALLEL_GROUP",)),
        # not Megatron's style (lower case): a gap is only a warning
        F("capture-partition", "warning",
          "my_pairs: 2 of 6 ranks are in no group (2-3); the groups of one kind should cover "
          "the world", (2, 3), ("my_pairs",)),
    ]


def test_partition_exemptions_and_the_megatron_style():
    # the embedding groups need not cover the world; nor do members-only (local) groups
    calls = [gc([0, 3], "EMBEDDING_GROUP"), gc([0], "POSITION_EMBEDDING_GROUP"),
             gc([1, 2], "EXPERT_PAIR", local=True)]
    assert check_partition(make(4, [calls])) == []
    # one local group and one collective of a kind: the gap counts again
    calls = [gc([1, 2], "PAIR_GROUP", local=True), gc([0, 1], "PAIR_GROUP")]
    (f,) = [f for f in check_partition(make(4, [calls])) if "no group" in f.message]
    assert f.severity == "error" and f.ranks == (3,)
    # upper case without GROUP, or GROUP not in upper case: a warning
    for desc in ("TENSOR_PAIRS", "Tensor_GROUP"):
        (f,) = check_partition(make(4, [[gc([0, 1], desc)]]))
        assert (f.severity, f.ranks) == ("warning", (2, 3)), desc
    # two ranks in several groups: the count and the first rank
    calls = [gc([0, 1, 2], "X_GROUP"), gc([1, 2, 3], "X_GROUP")]
    (f,) = check_partition(make(4, [calls]))
    assert f.ranks == (1, 2) and f.message.startswith(
        "X_GROUP: 2 rank(s) are in several groups, e.g. rank 1 in [0, 1, 2] and [1, 2, 3];")


# ------------------------------------------------------------------ twins
AG, DPCP = "DATA_PARALLEL_GROUP_WITH_CP_AG", "DATA_PARALLEL_GROUP_WITH_CP"


def test_twins_that_line_up():
    calls = [gc([0, 2], DPCP), gc([1, 3], DPCP), gc([0, 2], AG), gc([1, 3], AG)]
    assert check_twins(make(4, [calls])) == [F(
        "capture-twin", "info",
        f"{AG} matches {DPCP} on all 4 ranks that have one (same ranks, same order): a "
        f"separate communicator over the same members", (0, 1, 2, 3), (AG, DPCP))]
    # neither kind: nothing; the twin missing: a warning naming the option
    assert check_twins(make(4, [calls[:2]])) == []
    assert check_twins(make(4, [calls[2:]])) == [F(
        "capture-twin", "warning",
        f"{AG} groups exist but no {DPCP} groups to compare them with; name the twin with "
        f"--twin {AG}=DESC", (), (AG,))]


def test_twins_that_do_not_line_up():
    hint = "; the two collectives then run over different shards"
    order = [gc([0, 2], DPCP), gc([1, 3], DPCP), gc([2, 0], AG, ordered=True,
                                                     stack=("ag.py:3 mk",)), gc([1, 3], AG)]
    assert check_twins(make(4, [order])) == [F(
        "capture-twin", "error",
        f"{AG} does not line up with its twin {DPCP} on 2 of 4 ranks: rank 0 is in {AG} group "
        f"[2, 0] (at ag.py:3 mk) but its {DPCP} group is [0, 2] (at {SITE}): same ranks in a "
        f"different order{hint}", (0, 2), (AG, DPCP))]
    other = [gc([0, 1], DPCP), gc([2, 3], DPCP), gc([0, 2], AG), gc([1, 3], AG)]
    assert check_twins(make(4, [other])) == [F(
        "capture-twin", "error",
        f"{AG} does not line up with its twin {DPCP} on 4 of 4 ranks: rank 0 is in {AG} group "
        f"[0, 2] (at {SITE}) but its {DPCP} group is [0, 1] (at {SITE}): different "
        f"ranks{hint}", (0, 1, 2, 3), (AG, DPCP))]
    missing = [gc([0, 2], DPCP), gc([1, 3], AG), gc([0, 2], AG)]
    assert check_twins(make(4, [missing])) == [F(
        "capture-twin", "error",
        f"{AG} does not line up with its twin {DPCP} on 2 of 4 ranks: rank 1 is in {AG} group "
        f"[1, 3] but in no {DPCP} group{hint}", (1, 3), (AG, DPCP))]
    # user-named twins replace the defaults in check_twins, extend them in check_capture
    mine = [gc([0, 1], "a"), gc([1, 0], "b", ordered=True)]
    (f,) = check_twins(make(2, [mine]), [("a", "b")])
    assert f.severity == "error" and "same ranks in a different order" in f.message
    assert check_twins(make(2, [mine])) == []
    assert [f.code for f in check_capture(make(2, [mine]), twins=[("a", "b")])
            if f.severity == "error"] == ["capture-twin"]


# ------------------------------------------------------------------ summary
def test_summary_counts_calls_sequences_and_groups():
    loc = gc([0, 1], "L", local=True)
    seqs = [[gc([0, 1, 2, 3], "W"), gc([0, 1], "A"), gc([2, 3], "A"), loc],
            [gc([0, 1, 2, 3], "W"), gc([0, 1], "A"), gc([2, 3], "A")]]
    cap = make(5, seqs, {2: 1, 3: 1, 4: 1}, status={4: FAILED})
    # sequence 1 (ranks 2, 3) ties sequence 0 (ranks 0, 1): rank 0's wins; groups W, A, A, L:
    # ranks 0, 1 are in 3 groups, ranks 2, 3 in 2 (rank 4 failed: not counted)
    assert check_summary(cap) == [F(
        "capture-summary", "info",
        "4 of 5 ranks captured; 3 collective new_group calls per rank (+1 with "
        "use_local_synchronization); 2 distinct call sequence(s); each rank is a member of "
        "2-3 groups (communicators)")]
    cap = make(3, [[gc(None, "W"), gc([0, 1], "A")]])
    assert check_summary(cap) == [F(
        "capture-summary", "info",
        "3 of 3 ranks captured; 2 collective new_group calls per rank; 1 distinct call "
        "sequence(s); each rank is a member of 1-2 groups (communicators)")]
    assert check_summary(make(2, [[]], status={0: FAILED, 1: FAILED})) == []


def test_crosscheck_of_a_fast_capture():
    meta = {"crosscheck": [
        {"rank": 1, "same": True},
        {"rank": 2, "same": False, "index": 4, "fast": "A [0, 1]", "separate": "A [1, 0]"},
        {"rank": 3, "same": None, "message": "it timed out"}]}
    assert check_crosscheck(make(4, [[]], meta=meta)) == [
        F("capture-fast-differs", "error",
          "rank 2 makes different new_group calls in --fast mode than alone in its own "
          "interpreter: call 4 is A [0, 1] in --fast but A [1, 0] alone; the code depends on "
          "something per process (string hash order, the environment read at import time): "
          "capture without --fast to see every rank as torchrun runs it", (2,)),
        F("capture-fast-differs", "warning",
          "rank 3 could not be cross-checked in its own interpreter: it timed out", (3,))]
    assert check_crosscheck(make(4, [[]])) == []


def test_check_capture_sorts_errors_first():
    seqs = [[gc([0, 1], "A_GROUP")]]
    cap = make(4, seqs, status={3: FAILED}, errors={3: {"message": "x"}})
    assert [(f.code, f.severity) for f in check_capture(cap)] == [
        ("capture-failed", "error"), ("capture-partition", "error"),
        ("capture-summary", "info")]


# ------------------------------------------------------- against a config
def _cfg(**kw):
    base = dict(world_size=8, tensor_model_parallel_size=2, pipeline_model_parallel_size=2)
    return ParallelismConfig(**{**base, **kw})


def _from_layout(layout, *, nccl_none=True):
    """The calls ``layout`` predicts as a capture would record them (the default backend as
    None, the way Megatron passes it)."""
    return [gc(g.ranks, g.desc, backend=None if nccl_none and g.backend == "nccl" else g.backend)
            for g in layout.creation_order]


def test_a_capture_that_matches_the_config():
    lay = build_layout(_cfg(), "0.16")
    calls = _from_layout(lay)
    found = check_against_layout(make(8, [calls]), lay)
    assert found[0] == F(
        "capture-vs-config", "info",
        f"the captured code makes the {len(calls)} new_group calls build_layout(config) "
        "predicts (mcore 0.16), call for call, on every captured rank")
    # then the layout checks on the captured groups: what they say of the plan itself
    assert found[1:] == check(lay) and {f.severity for f in found} == {"info"}
    # the backend spelled out, in any case, is the same call
    upper = [c._replace(backend=(c.backend or "nccl").upper()) for c in calls]
    lay2, notes = captured_layout(make(8, [upper]), lay)
    assert notes == [] and lay2 is not None
    assert {k: lay2.backend(k) for k in lay2.kinds} == {k: lay.backend(k) for k in lay2.kinds}
    assert lay2.mcore == "0.16" and lay2.config == lay.config
    for k in lay2.kinds:
        assert lay2.desc(k) == lay.desc(k)
        # torch sorts a group's ranks (sort_ranks=True), so the order is not observable: a
        # captured group over a planned group's ranks takes the plan's order (intra_dist_opt
        # is [0, 1, 4, 5, 2, 3, 6, 7] here, captured sorted)
        assert lay2.groups(k).tolist() == lay.groups(k).tolist(), k
    assert lay.groups("intra_dist_opt").tolist() == [[0, 1, 4, 5, 2, 3, 6, 7]]
    sorted_calls = [c._replace(ranks=None if c.ranks is None else tuple(sorted(c.ranks)))
                    for c in calls]
    lay3, _ = captured_layout(make(8, [sorted_calls]), lay)
    assert lay3 is not None and lay3.groups("intra_dist_opt").tolist() == [[0, 1, 4, 5, 2, 3,
                                                                              6, 7]]


def test_a_capture_of_another_world_size():
    lay = build_layout(_cfg(), "0.16")
    assert check_against_layout(make(4, [[]]), lay) == [F(
        "capture-vs-config", "error",
        "the capture ran 4 ranks but the configuration's world is 8; capture with -n 8")]
    assert check_against_layout(make(8, [[]], status={r: FAILED for r in range(8)}), lay) == []


def test_calls_that_differ_from_the_config():
    lay = build_layout(_cfg(), "0.16")
    calls = _from_layout(lay)
    i = next(j for j, g in enumerate(lay.creation_order) if g.kind == "tp")
    tp = calls[i]
    swapped = list(calls)
    # tp group 0 is [0, 1]; [0, 4] leaves rank 1 out and puts rank 4 in two tp groups
    swapped[i] = tp._replace(ranks=(0, 4), stack=("t.py:4 tp", "m.py:1 main"))
    # ranks 0-4 make the swapped sequence (the reference: most ranks), ranks 5-7 the plan's
    cap = make(8, [swapped, calls], {r: 1 for r in range(5, 8)})
    found = check_against_layout(cap, lay)
    first = found[0]
    g = lay.creation_order[i]
    assert first == F(
        "capture-vs-config", "error",
        f"the captured calls differ from build_layout(config) (mcore 0.16) on rank 0: "
        f"new_group call {i}: the plan creates tp group 0 {g.desc} {list(g.ranks)} (nccl); "
        f"Megatron created {g.desc} [0, 4] (nccl) (captured at t.py:4 tp via m.py:1 main)",
        (0,), ("tp",))
    # not aligned: the captured groups are checked against the config (matches-config on),
    # and the partition check names rank 4 in two tp groups; the creation-order check,
    # which would say so again for the plan's creation order, stays off
    codes = {f.code for f in found}
    assert "matches-config" in codes and "creation-order" not in codes
    # only the swapped tp group differs from the config: intra_dist_opt, planned unsorted
    # ([0, 1, 4, 5, 2, 3, 6, 7]) and captured as torch sorts it, is not blamed
    assert {g for f in found if f.code == "matches-config" for g in f.groups} == {"tp"}
    assert [(f.ranks, f.groups) for f in found if f.code == "partition"] == [((1, 4), ("tp",))]
    # two differences: the count of the others
    two = list(swapped)
    two[i + 1] = calls[i + 1]._replace(ranks=(1, 3))
    (f,) = [f for f in check_against_layout(make(8, [two]), lay)
            if f.code == "capture-vs-config"]
    assert f.message.endswith(" (captured at t.py:4 tp via m.py:1 main); 1 more difference(s)")
    assert f.ranks == (0,)
    # fewer calls: the count mismatch has no index and no kind
    (f,) = [f for f in check_against_layout(make(8, [calls[:-1]]), lay)
            if f.code == "capture-vs-config"]
    assert f == F("capture-vs-config", "error",
                  f"the captured calls differ from build_layout(config) (mcore 0.16) on rank 0: "
                  f"Megatron made {len(calls) - 1} new_group calls, the plan {len(calls)}",
                  (0,), ())


def test_groups_the_config_does_not_build_or_of_mixed_sizes():
    lay = build_layout(_cfg(), "0.16")
    calls = _from_layout(lay) + [gc([0, 1, 2, 3, 4, 5, 6, 7], "MY_GROUP",
                                    stack=("x.py:1 mine", "m.py:2 main"))]
    lay2, notes = captured_layout(make(8, [calls]), lay)
    # a group of the script's own (not a desc megatron-core uses) beside the layout: a fact
    assert notes == [F("capture-vs-config", "info",
                       "the code creates 1 MY_GROUP group(s) (at x.py:1 mine via m.py:2 main) "
                       "that build_layout(config) (mcore 0.16) does not build: a group of the "
                       "script's own beside the configured layout, not compared", (),
                       ("MY_GROUP",))]
    assert lay2 is not None and "tp" in lay2.kinds
    # a Megatron kind the config does not build: the flags and the code disagree
    ag = _from_layout(lay) + [gc([0, 1, 2, 3, 4, 5, 6, 7], "DATA_PARALLEL_GROUP_WITH_CP_AG")]
    _, notes = captured_layout(make(8, [ag]), lay)
    assert [(f.severity, f.groups) for f in notes] == [
        ("warning", ("DATA_PARALLEL_GROUP_WITH_CP_AG",))]
    assert notes[0].message.endswith("the configuration and the code disagree: check the flags")
    tp_desc = lay.desc("tp")
    mixed = [c for c in calls if c.desc != tp_desc and c.desc != "MY_GROUP"]
    mixed += [gc([0, 1], tp_desc), gc([2, 3, 4], tp_desc), gc([5, 6, 7], tp_desc)]
    lay3, notes = captured_layout(make(8, [mixed]), lay)
    assert notes == [F("capture-vs-config", "error",
                       f"{tp_desc}: the captured groups have different sizes ([2, 3]); the "
                       "config builds groups of 2", (), ("tp",))]
    assert lay3 is not None and "tp" not in lay3.kinds and "dp" in lay3.kinds
    # every kind unknown: no layout
    assert captured_layout(make(2, [[gc([0, 1], "X")]]), build_layout(
        ParallelismConfig(world_size=2), "0.16"))[0] is None


def test_the_dropped_all_gather_group():
    cfg = _cfg(create_all_gather_group=True)
    lay = build_layout(cfg, "0.18")
    calls = _from_layout(lay)
    assert AG_DESC in {c.desc for c in calls}
    assert [f.code for f in check_against_layout(make(8, [calls]), lay)
            if f.severity == "error"] == []
    dropped = [c for c in calls if c.desc != AG_DESC]
    found = check_against_layout(make(8, [dropped]), lay)
    (ag,) = [f for f in found if f.code == "ag-dropped"]
    assert ag == F(
        "ag-dropped", "error",
        f"create_all_gather_group is on in the configuration, but the captured code created no "
        f"{AG_DESC} group: megatron-core 0.18+ (profile 0.18) has no create_all_gather_group "
        f"keyword in initialize_model_parallel, so code that passes it only when accepted "
        f"(NeMo's compatibility path) silently gets no all-gather group and the all-gather "
        f"stays on DATA_PARALLEL_GROUP_WITH_CP; call parallel_state.create_all_gather_groups"
        f"(for_expert_parallelism=ep > 1) after initialize_model_parallel", (), ("dp_cp_ag",))
    # ag-dropped says it; the layout check's own ag-missing is left out
    assert "ag-missing" not in {f.code for f in found}
    # without the option, or under 0.16 (made at init): not dropped
    assert "ag-dropped" not in {f.code for f in check_against_layout(
        make(8, [_from_layout(build_layout(_cfg(), "0.18"))]), build_layout(_cfg(), "0.18"))}
    lay16 = build_layout(cfg, "0.16")
    no_ag = [c for c in _from_layout(lay16) if c.desc != AG_DESC]
    assert "ag-dropped" not in {f.code for f in check_against_layout(make(8, [no_ag]), lay16)}


def test_captured_layout_keeps_every_other_kind_after_a_bad_one():
    lay = build_layout(_cfg(), "0.16")
    tp_desc = lay.desc("tp")
    good = [c for c in _from_layout(lay) if c.desc != tp_desc]
    # an unknown kind, then a mixed-size tp, before every good kind
    calls = [gc([0, 1], "MY_GROUP"), gc([0, 1], tp_desc), gc([2, 3, 4], tp_desc),
             gc([5, 6, 7], tp_desc), *good]
    lay2, notes = captured_layout(make(8, [calls]), lay)
    assert [(f.severity, f.groups) for f in notes] == [("info", ("MY_GROUP",)),
                                                      ("error", ("tp",))]
    assert lay2 is not None
    assert set(lay2.kinds) == set(lay.kinds) - {"tp"}


def test_whole_world_calls_and_the_default_backend():
    # world 4, tp 2: tp_dp_cp and intra_dist_opt span the world; a capture may record
    # such a call with ranks=None (every rank), and the default backend as None
    lay = build_layout(ParallelismConfig(world_size=4, tensor_model_parallel_size=2), "0.16")
    whole = [k for k in lay.kinds if lay.groups(k).tolist() == [[0, 1, 2, 3]]]
    assert "tp_dp_cp" in whole
    calls = [gc(None if len(g.ranks) == 4 else g.ranks, g.desc,
                backend=None if g.backend == "nccl" else g.backend)
             for g in lay.creation_order]
    cap = make(4, [calls])
    found = check_against_layout(cap, lay)
    assert found[0].code == "capture-vs-config" and found[0].severity == "info"
    lay2, notes = captured_layout(cap, lay)
    assert notes == [] and lay2 is not None
    for k in lay.kinds:
        assert lay2.groups(k).tolist() == [sorted(g) for g in lay.groups(k).tolist()], k
        assert lay2.backend(k) == lay.backend(k), k     # None is the default: nccl
        for r in range(4):                              # each rank finds its group
            m2, m = lay2.membership(k, r), lay.membership(k, r)
            assert (m2.group, sorted(m2.ranks.tolist())) == (m.group, sorted(m.ranks.tolist()))
    # a desc-less whole-world call: a kind the config does not build, named by its site
    extra = [*calls, gc(None, stack=("w.py:1 world",))]
    _, notes = captured_layout(make(4, [extra]), lay)
    assert notes == [F("capture-vs-config", "info",
                       "the code creates 1 (no group_desc) at w.py:1 world group(s) (at "
                       "w.py:1 world) that build_layout(config) (mcore 0.16) does not build: a "
                       "group of the script's own beside the configured layout, not compared",
                       (), ("(no group_desc) at w.py:1 world",))]
    # ... and the call for call comparison leaves it out: the config's calls still match
    found = check_against_layout(make(4, [extra]), lay)
    assert found[0].severity == "info" and found[0].message.endswith(
        "on every captured rank (besides 1 new_group call(s) of its own, named below, not "
        "compared)")
    assert [f for f in found if f.severity == "error"] == []


# ------------------------------------------------- whole-world calls, ordering, loops
W_SITE = ("w.py:1 world",)


def test_whole_world_calls_in_every_check():
    # ranks=None is every rank: duplicates, twins and local groups read it as range(W)
    calls = [gc(None, "W_GROUP"), gc(None, "W_GROUP"), gc(None, stack=W_SITE),
             gc(None, DPCP), gc(None, AG)]
    found = check_partition(make(4, [calls]))
    assert [(f.code, f.ranks, f.groups) for f in found] == [
        ("capture-duplicate", (0, 1, 2, 3), ("W_GROUP",))]
    assert check_twins(make(4, [calls]))[0].severity == "info"
    assert check_twins(make(4, [calls]))[0].ranks == (0, 1, 2, 3)
    # twins of which one spans the world and the other does not
    half = [gc(None, AG), gc([0, 1], DPCP)]
    assert check_twins(make(4, [half]))[0].message.startswith(
        f"{AG} does not line up with its twin {DPCP} on 4 of 4 ranks: rank 0 is in {AG} group "
        f"[0, 1, 2, 3] (at {SITE}) but its {DPCP} group is [0, 1] (at {SITE}): different ranks")
    other = [gc([0, 1], AG), gc(None, DPCP)]
    assert check_twins(make(4, [other]))[0].message.startswith(
        f"{AG} does not line up with its twin {DPCP} on 2 of 2 ranks: rank 0 is in {AG} group "
        f"[0, 1] (at {SITE}) but its {DPCP} group is [0, 1, 2, 3] (at {SITE}): different ranks")
    lone = [gc(None, AG), gc([5], DPCP)]
    assert f"rank 0 is in {AG} group [0, 1, 2, 3, 4, 5] but in no {DPCP} group" in \
        check_twins(make(6, [lone]))[0].message
    # a local group of every rank that rank 3 never creates
    seqs = [[gc(None, "LW", local=True)], []]
    (f,) = check_local_members(make(4, seqs, {3: 1}))
    assert f.ranks == (3,) and "created by ranks 0-2 but not by its member(s) 3" in f.message


def test_errors_then_warnings_then_infos():
    # unsorted: capture-duplicate (warning) before the overlap (error) of one kind; the
    # twins' info before the cross-check's warning
    calls = [gc([0, 1], "T_GROUP"), gc([0, 1], "T_GROUP"), gc([1, 2], "T_GROUP"),
             gc([3], "T_GROUP"), gc([0, 1, 2, 3], DPCP), gc([0, 1, 2, 3], AG)]
    meta = {"crosscheck": [{"rank": 1, "same": None, "message": "no"}]}
    got = [(f.code, f.severity) for f in check_capture(make(4, [calls], meta=meta))]
    assert got == [("capture-partition", "error"), ("capture-duplicate", "warning"),
                   ("capture-fast-differs", "warning"), ("capture-twin", "info"),
                   ("capture-summary", "info")]


def test_loops_go_on_past_skipped_kinds_twins_and_sequences():
    # a partial kind (no gap check) before a kind with a gap
    calls = [gc([0], "EMBEDDING_GROUP"), gc([0, 1], "X_GROUP")]
    assert [f.groups for f in check_partition(make(4, [calls]))] == [("X_GROUP",)]
    # the DP pair absent, then the FSDP pair; both pairs matching: one info each
    fsdp = [gc([0, 1], "fsdp_reduce_scatter"), gc([0, 1], "mesh_shard")]
    assert [f.groups for f in check_twins(make(2, [fsdp]))] == [
        ("fsdp_reduce_scatter", "mesh_shard")]
    both = [gc([0, 1], DPCP), gc([0, 1], AG), *fsdp]
    assert [f.groups for f in check_twins(make(2, [both]))] == [
        (AG, DPCP), ("fsdp_reduce_scatter", "mesh_shard")]
    # sequences: rank 1's differs only in sites (no finding), rank 2's in a group
    s0 = [gc([0, 1, 2, 3], "W"), gc([0, 1], "A")]
    s1 = [s0[0], s0[1]._replace(stack=("elsewhere.py:1 g",))]
    s2 = [s0[0], gc([2, 3], "A")]
    found = check_sequences(make(4, [s0, s1, s2], {1: 1, 2: 2}))
    assert [f.ranks for f in found] == [(2,)]


def test_other_sequences_are_reported_by_their_first_rank():
    s0 = [gc([0, 1, 2, 3, 4], "W"), gc([0, 1], "A"), gc([2, 3], "A")]
    # sequence 1 is rank 4's, sequence 2 rank 3's: rank 3 is reported first
    s1, s2 = [s0[0], gc([4], "B")], [s0[0], gc([3], "C")]
    found = check_sequences(make(5, [s0, s1, s2], {4: 1, 3: 2}))
    assert [f.ranks for f in found] == [(3,), (4,)]
    # exactly MAX_REPORTED other sequences: each reported, nothing counted
    base = [gc(list(range(10)), "W"), gc([0, 1], "A")]
    seqs = [base] + [[base[0], gc([r], f"K{r}")] for r in range(2, 10)]
    found = check_sequences(make(10, seqs, {r: r - 1 for r in range(2, 10)}))
    assert [f.ranks for f in found] == [(r,) for r in range(2, 10)]


def test_a_run_remembers_every_rank_it_holds():
    a = ("a.py:1 f",)
    la = "(no group_desc) at a.py:1 f"
    # rank 0 again after [0], [1]: the third call starts a new run
    assert kinds_of([gc([0], stack=a), gc([1], stack=a), gc([0], stack=a)], 2) == [
        f"{la}, call 0", f"{la}, call 0", f"{la}, call 2"]


def test_checks_go_on_after_a_missing_call_or_a_missing_twin():
    s0 = [gc([0, 1, 2], "W"), gc([0, 1], "A")]
    # rank 1 lacks a call; rank 2 makes another group: both named
    found = check_sequences(make(3, [s0, s0[:1], [s0[0], gc([2], "B")]], {1: 1, 2: 2}))
    assert [(f.code, f.ranks) for f in found] == [("capture-missing-call", (1,)),
                                                  ("capture-divergence", (2,))]
    # the DP all-gather group without its twin, then a matching FSDP pair
    calls = [gc([0, 1], AG), gc([0, 1], "fsdp_reduce_scatter"), gc([0, 1], "mesh_shard")]
    assert [(f.severity, f.groups) for f in check_twins(make(2, [calls]))] == [
        ("warning", (AG,)), ("info", ("fsdp_reduce_scatter", "mesh_shard"))]
