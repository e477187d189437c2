"""How a capture ends: ranks stopped blocked on diverging calls, groups created by their
members only, groups of the script's own beside a configured layout (hand-built captures and
record folders; no process).

Each scenario is worked out by hand from torch's rule for ``new_group`` (every rank of the
job calls it for a group without ``use_local_synchronization``, in the same order): the
ranks, call numbers and sites a message names are the ones the input puts there.
"""

from __future__ import annotations

import json

from simharness.capture.checks import (
    check_capture,
    check_failed,
    check_members_only,
    check_partition,
    check_sequences,
    megatron_desc,
    stopped_on_divergence,
)
from simharness.capture.merge import rank_record, write_record
from simharness.capture.record import OK, STOPPED, TIMEOUT, Capture, GroupCall, RankRecord
from simharness.capture.stall import Stall, calls_differ, partial_name


def gc(ranks, desc=None, *, local=False, stack=("init.py:10 build",)):
    return GroupCall(None if ranks is None else tuple(ranks), desc, None, local, None, None,
                     tuple(stack))


def make(world, seqs, who, status=None, errors=None, meta=None):
    status, errors = status or {}, errors or {}
    recs = {r: RankRecord(r, status.get(r, OK), who[r], {}, {}, errors.get(r))
            for r in range(world)}
    return Capture(world, tuple(range(world)), tuple(tuple(s) for s in seqs), recs, meta or {})


BLOCKED = {"kind": "blocked", "message": "blocked", "where": [
    "torch/distributed/distributed_c10d.py:5356 barrier", "job.py:33 <module>"]}


# ------------------------------------------------------------- blocked ranks
def test_blocked_ranks_are_compared_on_their_partial_calls():
    # ranks 0-1 create [0, 1] then [2, 3]; ranks 2-3 the other way round; all four were
    # stopped blocked: no rank finished, yet the divergence is named from their calls
    a, b = gc([0, 1], "PAIR", stack=("job.py:21 make",)), gc([2, 3], "PAIR",
                                                               stack=("job.py:21 make",))
    cap = make(4, [[a, b], [b, a]], {0: 0, 1: 0, 2: 1, 3: 1},
               status=dict.fromkeys(range(4), TIMEOUT), errors=dict.fromkeys(range(4), BLOCKED),
               meta={"grace_s": 5.0})
    assert cap.ok_ranks == [] and stopped_on_divergence(cap)
    (div,) = check_sequences(cap)
    assert div.code == "capture-divergence" and div.ranks == (2, 3)
    assert ("collective new_group call 0 is PAIR [0, 1] at job.py:21 make on rank 0 but PAIR "
            "[2, 3] at job.py:21 make on rank 2") in div.message
    (failed,) = check_failed(cap)
    assert failed.message.startswith(
        "ranks 0-3 waited for each other in torch.distributed (rank 0 at "
        "torch/distributed/distributed_c10d.py:5356 barrier, job.py:33 <module>) and were "
        "stopped once every rank still running had been blocked for a few seconds")
    # without the blocked ranks nothing would be compared (no rank finished)
    plain = make(4, [[a, b], [b, a]], {0: 0, 1: 0, 2: 1, 3: 1},
                 status=dict.fromkeys(range(4), TIMEOUT))
    assert check_sequences(plain) == [] and not stopped_on_divergence(plain)


def test_a_rank_that_skips_one_call_is_named_as_missing_it():
    # rank 3 never creates LOGGING (call 0); its PAIR calls then pair with the wrong ones
    log = gc([0, 1, 2, 3], "LOGGING", stack=("job.py:28 <module>",))
    p, q = gc([0, 1], "PAIR"), gc([2, 3], "PAIR")
    cap = make(4, [[log, p, q], [p, q]], {0: 0, 1: 0, 2: 0, 3: 1},
               status={0: TIMEOUT, 1: STOPPED, 2: TIMEOUT, 3: TIMEOUT},
               errors={0: BLOCKED, 2: BLOCKED, 3: BLOCKED})
    (miss,) = check_sequences(cap)
    assert miss.code == "capture-missing-call" and miss.ranks == (3,)
    assert miss.message.startswith(
        "rank 3 never makes collective new_group call 0 (LOGGING [0, 1, 2, 3] at job.py:28 "
        "<module>) that rank 0 makes, and from there on rank 3's calls are rank 0's shifted "
        "by one")
    # the stopped rank 1 (stopped with the others) is compared too: it made rank 0's calls
    assert 1 not in miss.ranks


def test_a_knock_on_failure_says_so():
    p = gc([0, 1], "PAIR")
    cap = make(2, [[p]], {0: 0, 1: 0}, status={0: TIMEOUT, 1: "failed"},
               errors={0: BLOCKED, 1: {"kind": "exception", "message": "Connection reset by "
                                       "peer", "where": ["job.py:32 <module>"]}})
    msgs = [f.message for f in check_failed(cap)]
    assert msgs[1].startswith("rank 1 failed at job.py:32 <module>: Connection reset by peer")
    assert msgs[1].endswith("(ranks 0 were stopped as blocked meanwhile: a lost connection to "
                            "one of them follows from that)")


# --------------------------------------------------------- members-only creation
def test_groups_created_by_their_members_only_state_the_rule_and_the_fix():
    # each pair creates its own group, on its members only, without local synchronisation
    pairs = [[gc([a, a + 1], "MY_PAIRS")] for a in (0, 2, 4, 6)]
    cap = make(8, pairs, {r: r // 2 for r in range(8)})
    (f,) = check_members_only(cap)
    assert f.code == "capture-members-only" and f.severity == "error"
    assert f.message.startswith(
        "MY_PAIRS [0, 1] (at init.py:10 build) is created only by its member(s) 0-1 and 3 more "
        "such group(s) of this kind, without use_local_synchronization=True; torch requires "
        "every rank of the job to call new_group for such a group")
    assert f.message.endswith("pass use_local_synchronization=True (then only the members "
                              "call it), or call new_group for every group on every rank")
    assert f.ranks == tuple(range(8))
    # the groups need not cover the world: no "ranks are in no group" warning
    assert [x for x in check_partition(cap) if "in no group" in x.message] == []
    # only ranks 0-1 create theirs: the ranks outside it are named
    one = make(8, [[gc([0, 1], "MY_PAIRS")], []], {r: 0 if r < 2 else 1 for r in range(8)})
    (f,) = check_members_only(one)
    assert "the ranks outside it (2-7) pair their next new_group call with this one" \
        in f.message and f.ranks == (0, 1)


def test_not_members_only():
    # a member that skips the call (rank 3 of [0..3]) is a missing call, not members-only
    log = gc([0, 1, 2, 3], "LOGGING")
    cap = make(4, [[log], []], {0: 0, 1: 0, 2: 0, 3: 1})
    assert check_members_only(cap) == []
    assert [f.code for f in check_sequences(cap)] == ["capture-missing-call"]
    # with use_local_synchronization the members alone create it: legal
    loc = make(4, [[gc([0, 1], "L", local=True)], [gc([2, 3], "L", local=True)]],
               {0: 0, 1: 0, 2: 1, 3: 1})
    assert [f for f in check_capture(loc) if f.severity != "info"] == []


def test_megatron_descs():
    assert megatron_desc("TENSOR_MODEL_PARALLEL_GROUP")
    assert megatron_desc("HIERARCHICAL_CONTEXT_PARALLEL_GROUP_GLOO_L2")
    assert megatron_desc("HYBRID_DP_CP_GROUP_4")
    assert not megatron_desc("LOGGING") and not megatron_desc("MY_GROUP")
    assert not megatron_desc("mesh_dp") and not megatron_desc(None)


# ------------------------------------------------------------- the record folder
def test_the_stall_view_of_a_record_folder(tmp_path):
    d = str(tmp_path)
    a, b = gc([0, 1], "PAIR"), gc([2, 3], "PAIR")
    stall = Stall(d, 0, 3)
    assert stall.everyone() is None  # nobody has written anything
    write_record(d, rank_record(2, 3, OK, [a, b]))
    for r, calls in ((0, [a, b]), (1, [b, a])):
        (tmp_path / partial_name(r)).write_text(json.dumps(rank_record(r, 3, "running",
                                                                       calls)))
    got = stall.everyone()
    assert got == {0: [a, b], 1: [b, a], 2: [a, b]} and calls_differ(got)
    assert stall.diverged_for(10.0) == 0.0 and stall.diverged_for(13.5) == 3.5
    # a rank that moves on (one more call) restarts the clock
    (tmp_path / partial_name(1)).write_text(json.dumps(rank_record(1, 3, "running",
                                                                   [b, a, a])))
    assert stall.diverged_for(14.0) == 0.0
    # a final record wins over a partial one of the same rank
    write_record(d, rank_record(1, 3, OK, [a, b]))
    assert not calls_differ(stall.everyone())
    assert stall.diverged_for(20.0) == 0.0
    # this rank's own partial record goes when it moves on
    stall.write(rank_record(0, 3, "running", [a]))
    assert (tmp_path / partial_name(0)).exists()
    stall.clear()
    assert not (tmp_path / partial_name(0)).exists()
