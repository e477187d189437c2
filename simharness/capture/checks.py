"""Checks on a capture: ``check_capture(capture, layout=None) -> list[Finding]`` (pure).

By code:

``capture-failed``        ranks that crashed, hung or never initialised torch
``capture-divergence``    two ranks make their collective ``new_group`` calls in a different
                          order (torch pairs calls by position: cross-talk or a hang); names the
                          first rank and call where they diverge, with both call sites
``capture-missing-call``  a rank makes fewer (or more) collective ``new_group`` calls than the
                          others; or a member of a ``use_local_synchronization`` group never
                          creates it
``capture-members-only``  a group (``use_local_synchronization`` off) created by its members
                          only: torch's rule for ``new_group`` and the two fixes
``capture-partition``     groups of one kind (one ``group_desc``) overlap (error) or leave
                          ranks out (error for Megatron's kinds, else a warning)
``capture-duplicate``     the same group created twice (two communicators for one set of ranks)
``capture-twin``          twins (an all-gather group and its DP-with-CP group; an FSDP
                          reduce-scatter group and its shard group) hold the same ranks in the
                          same order on every rank
``capture-vs-config``     with a layout: the calls against ``build_layout(config)`` call for
                          call; the captured groups are then checked by :func:`simharness.check`
                          (partition, composition, ``ag-mismatch``... against the config)
``ag-dropped``            the configuration asks for ``create_all_gather_group`` under
                          megatron-core 0.18+ but the code created no all-gather group
``capture-fast-differs``  a ``--fast`` capture's calls differ from the same rank run alone in
                          its own interpreter (hash order, environment read at import time)
``capture-summary``       ranks, calls and communicators per rank (info)
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from ..checks import check
from ..findings import Finding
from ..layout import PARTIAL_KINDS, Layout
from ..ranktext import format_rank_set
from .record import STOPPED, TIMEOUT, Capture, GroupCall, reference_sequence
from .stall import BLOCKED

MAX_RANKS = 256
MAX_REPORTED = 8   # divergent sequences reported one by one

# (group_desc A, group_desc B): A's group on a rank must equal B's group, same order.
DEFAULT_TWINS: tuple[tuple[str, str], ...] = (
    ("DATA_PARALLEL_GROUP_WITH_CP_AG", "DATA_PARALLEL_GROUP_WITH_CP"),
    ("EXPERT_DATA_PARALLEL_GROUP_AG", "EXPERT_DATA_PARALLEL_GROUP"),
    ("fsdp_reduce_scatter", "mesh_shard"),
)
AG_DESC = "DATA_PARALLEL_GROUP_WITH_CP_AG"


def _ranks(values: Iterable[int]) -> tuple[int, ...]:
    out = sorted({int(v) for v in values})
    return tuple(out[:MAX_RANKS])


def _set_text(ranks: Sequence[int]) -> str:
    return format_rank_set(list(ranks), limit=6)


def _at(call: GroupCall) -> str:
    via = f" via {call.stack[1]}" if len(call.stack) > 1 else ""
    return f"{call.site}{via}"


def kind_of(call: GroupCall) -> str:
    """A call's kind for messages: its ``group_desc``, else the call site."""
    return call.desc if call.desc else f"(no group_desc) at {call.site}"


def kinds_of(calls: Sequence[GroupCall], world_size: int) -> list[str]:
    """The kind of each call of a sequence: its ``group_desc``; without one, its call site
    (the recorded frames) and, when calls from that site form several runs, which run
    (``call N``: the run's first call). A run of desc-less calls from one site ends at a call
    from another site or at a call that shares a rank with the run so far (one helper
    building the TP groups, then the DP groups: two kinds).

    >>> tp = [GroupCall((a, a + 1), None, None, False, None, None, ("x.py:3 make",))
    ...       for a in (0, 2)]
    >>> dp = [GroupCall((a, a + 2), None, None, False, None, None, ("x.py:3 make",))
    ...       for a in (0, 1)]
    >>> [k.split(" make")[1] for k in kinds_of(tp + dp, 4)]
    [', call 0', ', call 0', ', call 2', ', call 2']
    """
    runs: list[tuple[tuple[str, ...], int]] = []   # per call: (stack, first call of its run)
    prev: tuple[str, ...] | None = None
    start, seen = 0, set[int]()
    for i, c in enumerate(calls):
        if c.desc:
            runs.append(((), i))
            continue
        members = set(c.members(world_size))
        if c.stack != prev or seen & members:
            prev, start, seen = c.stack, i, set()
        seen |= members
        runs.append((c.stack, start))
    starts: dict[tuple[str, ...], set[int]] = {}
    for c, (stack, first) in zip(calls, runs, strict=True):
        if not c.desc:
            starts.setdefault(stack, set()).add(first)
    out = []
    for c, (stack, first) in zip(calls, runs, strict=True):
        if c.desc:
            out.append(c.desc)
            continue
        label = f"(no group_desc) at {_at(c)}"
        out.append(label if len(starts[stack]) == 1 else f"{label}, call {first}")
    return out


#: The ``group_desc`` strings megatron-core's ``parallel_state.py`` passes to ``new_group``
#: (``create_group(..., group_desc="...")`` in 0.16.1, 0.17.1, 0.18.2 and 0.19.2), and the
#: patterns of the ones it builds with an f-string (``HIERARCHICAL_{desc}_L{level}``,
#: ``HIERARCHICAL_{desc}_GLOO_L{level}``, ``HYBRID_DP_CP_GROUP_{size}``). A captured call with
#: one of these is Megatron's and is compared with the configuration; any other call is a
#: group of the script's own (a logging group, a DeviceMesh beside Megatron's) and is named,
#: not compared.
MEGATRON_DESCS = frozenset({
    "CONTEXT_PARALLEL_GROUP", "DATA_PARALLEL_GROUP", "DATA_PARALLEL_GROUP_GLOO",
    "DATA_PARALLEL_GROUP_WITH_CP", "DATA_PARALLEL_GROUP_WITH_CP_AG",
    "DATA_PARALLEL_GROUP_WITH_CP_GLOO", "DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT",
    "DATA_PARALLEL_GROUP_WITH_GTP_REMAT", "EMBEDDING_GROUP", "EXPERT_DATA_PARALLEL_GROUP",
    "EXPERT_DATA_PARALLEL_GROUP_AG", "EXPERT_DATA_PARALLEL_GROUP_GLOO",
    "EXPERT_DATA_PARALLEL_GROUP_WITH_GTP_REMAT", "EXPERT_GTP_WEIGHT_REMAT_GROUP",
    "EXPERT_MODEL_PARALLEL_GROUP", "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP",
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP",
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP", "EXPERT_TENSOR_PARALLEL_GROUP",
    "GTP_WEIGHT_REMAT_GROUP", "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP",
    "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP", "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_GLOO",
    "MODEL_PARALLEL_GROUP", "PIPELINE_MODEL_PARALLEL_GROUP", "POSITION_EMBEDDING_GROUP",
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP", "TENSOR_AND_DATA_PARALLEL_GROUP",
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP", "TENSOR_MODEL_PARALLEL_GROUP",
})
_MEGATRON_DESC_RE = re.compile(r"^(HIERARCHICAL_[A-Z_]+_(GLOO_)?L\d+|HYBRID_DP_CP_GROUP_\d+)$")


def megatron_desc(desc: str | None) -> bool:
    """Whether ``desc`` is one megatron-core's ``parallel_state`` gives its groups.

    >>> megatron_desc("DATA_PARALLEL_GROUP"), megatron_desc("HIERARCHICAL_X_GROUP_L1")
    (True, True)
    >>> megatron_desc("LOGGING"), megatron_desc("mesh_dp"), megatron_desc(None)
    (False, False, False)
    """
    return bool(desc) and (desc in MEGATRON_DESCS
                           or _MEGATRON_DESC_RE.match(desc or "") is not None)


def _partial_descs() -> frozenset[str]:
    from ..config import ParallelismConfig
    from ..layout import build_layout

    lay = build_layout(ParallelismConfig(world_size=2, pipeline_model_parallel_size=2))
    return frozenset(lay.desc(k) for k in PARTIAL_KINDS)


def _megatron_style(desc: str) -> bool:
    return desc.isupper() and "GROUP" in desc


# ------------------------------------------------------------------ checks
def blocked_ranks(cap: Capture) -> list[int]:
    """Ranks a faithful capture stopped because they were blocked in torch.distributed
    while the ranks' new_group calls differed (:mod:`.stall`)."""
    return [r.rank for r in cap.failed if (r.error or {}).get("kind") == BLOCKED]


def stopped_on_divergence(cap: Capture) -> bool:
    """Whether ranks were stopped blocked on diverging calls: the findings name why (a rank
    that failed besides, often a peer of a stopped rank losing its connection, is among
    them)."""
    return bool(blocked_ranks(cap))


def _by_sequence(cap: Capture) -> dict[int, list[int]]:
    """Sequence -> ranks: the ranks that finished and, when ranks were stopped blocked,
    their partial sequences and those of the ranks stopped with them (what each had made
    when every rank waited for the others)."""
    by_seq = cap.ranks_by_sequence()
    if not blocked_ranks(cap):
        return by_seq
    for r, rec in sorted(cap.records.items()):
        blocked = rec.status == TIMEOUT and (rec.error or {}).get("kind") == BLOCKED
        if (blocked or rec.status == STOPPED) and rec.sequence is not None:
            by_seq.setdefault(rec.sequence, []).append(r)
    return {s: sorted(rs) for s, rs in by_seq.items()}


def check_failed(cap: Capture) -> list[Finding]:
    out = []
    blocked = blocked_ranks(cap)
    if blocked:
        first = cap.records[blocked[0]].error or {}
        where = list(first.get("where") or [])
        at = f" (rank {blocked[0]} at {', '.join(where[:2])})" if where else ""
        out.append(Finding(
            "capture-failed", "error",
            f"ranks {_set_text(blocked)} waited for each other in torch.distributed{at} and "
            f"were stopped once every rank still running had been blocked for a few seconds: "
            f"their new_group calls differ (named by the findings on the call "
            f"sequences), so the groups they use are not the same on every rank and a real "
            f"job hangs here", _ranks(blocked)))
    for rec in cap.failed:
        if rec.rank in blocked:
            continue
        err = dict(rec.error or {})
        where = err.get("where") or []
        at = f" at {where[0]}" if where else ""
        knock = (f" (ranks {_set_text(blocked)} were stopped as blocked meanwhile: a lost "
                 f"connection to one of them follows from that)" if blocked else "")
        out.append(Finding("capture-failed", "error",
                           f"rank {rec.rank} {'timed out' if rec.status == TIMEOUT else 'failed'}"
                           f"{at}: {err.get('message', '?')} ({err.get('kind', rec.status)}); "
                           f"its calls are partial{knock}", (rec.rank,)))
    return out


def members_only(cap: Capture, by_seq: dict[int, list[int]] | None = None) -> dict[tuple, tuple]:
    """Collective groups (``use_local_synchronization`` off) created by exactly their
    members and by no rank outside them: key -> (call, the ranks that created it)."""
    by_seq = _by_sequence(cap) if by_seq is None else by_seq
    creators: dict[tuple, set[int]] = defaultdict(set)
    first: dict[tuple, GroupCall] = {}
    for s, ranks in by_seq.items():
        for c in cap.sequences[s]:
            if c.collective:
                creators[c.key].update(ranks)
                first.setdefault(c.key, c)
    every = {r for rs in by_seq.values() for r in rs}
    out = {}
    for key, who in creators.items():
        members = set(first[key].members(cap.world_size))
        if who != every and who == members:
            out[key] = (first[key], tuple(sorted(who)))
    return out


def check_members_only(cap: Capture) -> list[Finding]:
    """Groups created only by their members without ``use_local_synchronization=True``:
    the rule torch states for ``new_group``, and the two ways to follow it."""
    found = members_only(cap)
    if not found:
        return []
    by_kind: dict[str, list[tuple[GroupCall, tuple[int, ...]]]] = {}
    for call, who in found.values():
        by_kind.setdefault(kind_of(call), []).append((call, who))
    out = []
    for kind, items in by_kind.items():
        call, who = items[0]
        others = sorted(set(range(cap.world_size)) - set(who))
        more = f" and {len(items) - 1} more such group(s) of this kind" if len(items) > 1 else ""
        out.append(Finding(
            "capture-members-only", "error",
            f"{call.label()} (at {_at(call)}) is created only by its member(s) "
            f"{_set_text(who)}{more}, without use_local_synchronization=True; torch requires "
            f"every rank of the job to call new_group for such a group, members or not, in the "
            f"same order (new_group's docstring, torch/distributed/distributed_c10d.py), so "
            f"the ranks outside it ({_set_text(others)}) pair their next new_group call with "
            f"this one (cross-talk between groups, or a hang): pass "
            f"use_local_synchronization=True "
            f"(then only the members call it), or call new_group for every group on every rank",
            _ranks(r for _, w in items for r in w), (kind,)))
    return out


def check_sequences(cap: Capture) -> list[Finding]:
    """Every rank's collective calls equal the reference's (the sequence most ranks made)."""
    by_seq = _by_sequence(cap)
    if len(by_seq) < 2:
        return []
    ref = reference_sequence(by_seq)
    r0 = by_seq[ref][0]
    ref_calls = [c for c in cap.sequences[ref] if c.collective]
    ref_keys = [c.key for c in ref_calls]
    out = []
    others = sorted((s for s in by_seq if s != ref), key=lambda s: by_seq[s][0])
    for s in others[:MAX_REPORTED]:
        ranks = by_seq[s]
        r = ranks[0]
        calls = [c for c in cap.sequences[s] if c.collective]
        keys = [c.key for c in calls]
        if keys == ref_keys:
            continue  # same groups; only call sites or options differ
        i = next((k for k, (a, b) in enumerate(zip(ref_keys, keys, strict=False)) if a != b), None)
        share = (f" ({len(ranks)} ranks make rank {r}'s sequence: {_set_text(ranks)})"
                 if len(ranks) > 1 else "")
        if i is None:
            n, m = len(keys), len(ref_keys)
            longer, shorter = (calls, ref_calls) if n > m else (ref_calls, calls)
            extra = longer[min(n, m)]
            who = f"rank {r}" if n > m else f"rank {r0}"
            out.append(Finding(
                "capture-missing-call", "error",
                f"rank {r} makes {n} collective new_group calls but rank {r0} makes {m}: "
                f"call {min(n, m)} ({extra.label()} at {_at(extra)}, made by {who}) is missing "
                f"on the other; every rank must make every new_group call (unless "
                f"use_local_synchronization=True), or the ranks that do wait forever{share}",
                _ranks(ranks), (kind_of(extra),)))
            continue
        if _one_call_apart(ref_keys, keys, i):
            lacks, has = (r, r0) if len(keys) < len(ref_keys) else (r0, r)
            c = ref_calls[i] if lacks == r else calls[i]
            out.append(Finding(
                "capture-missing-call", "error",
                f"rank {lacks} never makes collective new_group call {i} ({c.label()} at "
                f"{_at(c)}) that rank {has} makes, and from there on rank {r}'s calls are "
                f"rank {r0}'s shifted by one: torch pairs new_group calls by position, so every "
                f"later group is paired with the wrong call (cross-talk between groups, or a "
                f"hang); every rank must make every new_group call (or pass "
                f"use_local_synchronization=True and make it on the members only){share}",
                _ranks(ranks), (kind_of(c),)))
            continue
        a, b = ref_calls[i], calls[i]
        out.append(Finding(
            "capture-divergence", "error",
            f"rank {r} creates its groups in a different order from rank {r0}: collective "
            f"new_group call {i} is {a.label()} at {_at(a)} on rank {r0} but {b.label()} at "
            f"{_at(b)} on rank {r}; torch pairs new_group calls by position, so from this call "
            f"on the two ranks disagree about which communicator is which (cross-talk between "
            f"groups, or a hang){share}", _ranks(ranks), tuple(dict.fromkeys(
                (kind_of(a), kind_of(b))))))
    if len(others) > MAX_REPORTED:
        rest = [r for s in others[MAX_REPORTED:] for r in by_seq[s]]
        out.append(Finding("capture-divergence", "error",
                           f"{len(others) - MAX_REPORTED} more distinct call sequences "
                           f"(ranks {_set_text(rest)}) differ from rank {r0}'s", _ranks(rest)))
    return out


def _one_call_apart(ref: list, keys: list, i: int) -> bool:
    """Whether one sequence is the other with call ``i`` left out.

    >>> _one_call_apart(["a", "b", "c"], ["b", "c"], 0), _one_call_apart(["a"], ["x"], 0)
    (True, False)
    """
    if abs(len(ref) - len(keys)) != 1:
        return False
    longer, shorter = (ref, keys) if len(ref) > len(keys) else (keys, ref)
    return longer[:i] + longer[i + 1:] == shorter


def check_local_members(cap: Capture) -> list[Finding]:
    """Every captured member of a ``use_local_synchronization`` group creates it."""
    creators: dict[tuple, set[int]] = defaultdict(set)
    first: dict[tuple, GroupCall] = {}
    for s, ranks in cap.ranks_by_sequence().items():
        for c in cap.sequences[s]:
            if c.local_sync:
                creators[c.key].update(ranks)
                first.setdefault(c.key, c)
    ok = set(cap.ok_ranks)
    out = []
    for key, who in creators.items():
        call = first[key]
        members = set(call.members(cap.world_size)) & ok
        missing = sorted(members - who)
        if missing:
            out.append(Finding(
                "capture-missing-call", "error",
                f"{call.label()} (use_local_synchronization, at {_at(call)}) is created by "
                f"ranks {_set_text(sorted(who & members))} but not by its member(s) "
                f"{_set_text(missing)}: with local synchronisation every member must call "
                f"new_group, or the others wait forever", _ranks(missing), (kind_of(call),)))
    return out


def _by_kind(calls: Sequence[GroupCall], world_size: int) -> dict[str, list[GroupCall]]:
    out: dict[str, list[GroupCall]] = {}
    for c, kind in zip(calls, kinds_of(calls, world_size), strict=True):
        out.setdefault(kind, []).append(c)
    return out


def check_partition(cap: Capture) -> list[Finding]:
    W = cap.world_size
    local = members_only(cap)  # named by check_members_only; they need not cover the world
    partial = _partial_descs()
    out = []
    for kind, calls in _by_kind(cap.groups(), cap.world_size).items():
        uniq: dict[tuple[int, ...], GroupCall] = {}
        dups = []
        for c in calls:
            m = c.members(W)
            if m in uniq:
                dups.append(c)
            uniq.setdefault(m, c)
        if dups:
            out.append(Finding("capture-duplicate", "warning",
                               f"{kind}: {len(dups)} group(s) created twice (e.g. "
                               f"{dups[0].label()} at {_at(dups[0])}); each call makes its own "
                               f"communicator", _ranks(dups[0].members(W)), (kind,)))
        groups = list(uniq)
        flat = np.fromiter((r for g in groups for r in g), dtype=np.int64)
        counts = np.bincount(flat, minlength=W)[:W]
        over = np.flatnonzero(counts > 1)
        if over.size:
            r = int(over[0])
            two = [g for g in groups if r in g][:2]
            out.append(Finding("capture-partition", "error",
                               f"{kind}: {over.size} rank(s) are in several groups, e.g. rank {r} "
                               f"in {list(two[0])} and {list(two[1])}; code that keeps 'the' "
                               f"group of this kind per rank keeps only one of them",
                               _ranks(over), (kind,)))
        if kind in partial or all(c.local_sync or c.key in local for c in calls):
            continue  # members-only creation (local synchronisation) may cover part of the world
        gaps = np.flatnonzero(counts == 0)
        if gaps.size:
            strict = _megatron_style(kind)
            out.append(Finding("capture-partition", "error" if strict else "warning",
                               f"{kind}: {gaps.size} of {W} ranks are in no group "
                               f"({_set_text(gaps.tolist())}); the groups of one kind should "
                               f"cover the world", _ranks(gaps), (kind,)))
    return out


def _rank_groups(calls: Sequence[GroupCall], W: int) -> dict[int, GroupCall]:
    out: dict[int, GroupCall] = {}
    for c in calls:
        for r in c.members(W):
            out.setdefault(r, c)
    return out


def check_twins(cap: Capture, twins: Sequence[tuple[str, str]] = DEFAULT_TWINS) -> list[Finding]:
    """Twin kinds: on every rank, A's group holds the same ranks in the same order as B's."""
    kinds = _by_kind(cap.groups(), cap.world_size)
    W = cap.world_size
    out = []
    for a, b in twins:
        if a not in kinds:
            continue
        if b not in kinds:
            out.append(Finding("capture-twin", "warning",
                               f"{a} groups exist but no {b} groups to compare them with; name "
                               f"the twin with --twin {a}=DESC", (), (a,)))
            continue
        ga, gb = _rank_groups(kinds[a], W), _rank_groups(kinds[b], W)
        bad = [r for r in sorted(ga) if gb.get(r) is None or
               ga[r].members(W) != gb[r].members(W)]
        if not bad:
            out.append(Finding("capture-twin", "info",
                               f"{a} matches {b} on all {len(ga)} ranks that have one (same "
                               f"ranks, same order): a separate communicator over the same "
                               f"members", _ranks(ga), (a, b)))
            continue
        r = bad[0]
        ca, cb = ga[r], gb.get(r)
        if cb is None:
            detail = f"rank {r} is in {a} group {list(ca.members(W))} but in no {b} group"
        else:
            ma, mb = ca.members(W), cb.members(W)
            what = ("same ranks in a different order" if sorted(ma) == sorted(mb)
                    else "different ranks")
            detail = (f"rank {r} is in {a} group {list(ma)} (at {_at(ca)}) but its {b} group "
                      f"is {list(mb)} (at {_at(cb)}): {what}")
        out.append(Finding("capture-twin", "error",
                           f"{a} does not line up with its twin {b} on {len(bad)} of {len(ga)} "
                           f"ranks: {detail}; the two collectives then run over different "
                           f"shards", _ranks(bad), (a, b)))
    return out


def check_summary(cap: Capture) -> list[Finding]:
    by_seq = cap.ranks_by_sequence()
    if not by_seq:
        return []
    ref = cap.sequences[reference_sequence(by_seq)]
    coll = sum(1 for c in ref if c.collective)
    groups = cap.groups()
    W = cap.world_size
    flat = np.fromiter((r for c in groups for r in c.members(W)), dtype=np.int64)
    per_rank = np.bincount(flat, minlength=W)[:W][cap.ok_ranks]
    local = len(ref) - coll
    return [Finding("capture-summary", "info",
                    f"{len(cap.ok_ranks)} of {len(cap.ranks)} ranks captured; "
                    f"{coll} collective new_group calls per rank"
                    + (f" (+{local} with use_local_synchronization)" if local else "")
                    + f"; {len(by_seq)} distinct call sequence(s); each rank is a member of "
                    f"{int(per_rank.min())}-{int(per_rank.max())} groups (communicators)")]


# ------------------------------------------------------------ against a config
def captured_layout(cap: Capture, layout: Layout) -> tuple[Layout | None, list[Finding]]:
    """The captured groups as a :class:`Layout` under ``layout``'s config and profile, kinds
    named by ``group_desc`` (groups whose desc the config does not build are reported)."""
    from ..plan import Entry, Loop
    from ..sources import Fixed

    kind_for = {layout.desc(k): k for k in layout.kinds}
    out: list[Finding] = []
    loops = []
    W = cap.world_size
    for desc, calls in _by_kind(cap.groups(), cap.world_size).items():
        kind = kind_for.get(desc)
        if kind is None:
            # A Megatron kind the config does not build: the config and the code disagree.
            # Any other group is the script's own, beside the configured layout (a fact).
            meg = megatron_desc(calls[0].desc)
            why = ("; the configuration and the code disagree: check the flags" if meg else
                   ": a group of the script's own beside the configured layout, not compared")
            out.append(Finding("capture-vs-config", "warning" if meg else "info",
                               f"the code creates {len(calls)} {desc} group(s) (at "
                               f"{_at(calls[0])}) that build_layout(config) (mcore "
                               f"{layout.mcore}) does not build{why}", (), (desc,)))
            continue
        # torch sorts a group's ranks, so the order the code passed is not observable: a
        # captured group over the same ranks as one the config builds takes that group's order
        planned = {frozenset(g): g for g in layout.groups(kind).tolist()}
        rows = [planned.get(frozenset(m), list(m)) for m in (c.members(W) for c in calls)]
        if len({len(r) for r in rows}) > 1:
            out.append(Finding("capture-vs-config", "error",
                               f"{desc}: the captured groups have different sizes "
                               f"({sorted({len(r) for r in rows})}); the config builds groups "
                               f"of {layout.source(kind).group_size}", (), (kind,)))
            continue
        backend = (calls[0].backend or "nccl").lower()
        entry = Entry(kind, desc, backend, Fixed(np.asarray(rows, dtype=np.int64),
                                                 layout.config.ranks))
        loops.append(Loop.simple(entry))
    if not loops:
        return None, out
    return Layout(layout.config, layout.mcore, loops), out


def check_against_layout(cap: Capture, layout: Layout) -> list[Finding]:
    """The capture against ``build_layout(config)``: call by call, then the layout checks."""
    from ..creation_log import LoggedGroup, compare_log

    if layout.world_size != cap.world_size:
        return [Finding("capture-vs-config", "error",
                        f"the capture ran {cap.world_size} ranks but the configuration's world "
                        f"is {layout.world_size}; capture with -n {layout.world_size}")]
    by_seq = cap.ranks_by_sequence()
    if not by_seq:
        return []
    ref_id = reference_sequence(by_seq)
    r0 = by_seq[ref_id][0]
    planned = {layout.desc(k) for k in layout.kinds}
    seq: list[GroupCall] = []
    own: list[GroupCall] = []
    for c in cap.sequences[ref_id]:
        if c.collective:
            (seq if c.desc in planned or megatron_desc(c.desc) else own).append(c)
    log = [LoggedGroup(i, list(range(cap.world_size) if c.ranks is None else c.ranks),
                       c.backend, c.backend or "nccl", c.desc, None) for i, c in enumerate(seq)]
    mismatches, aligned = compare_log(layout, log, r0)
    out: list[Finding] = []
    beside = (f" (besides {len(own)} new_group call(s) of its own, named below, not compared)"
              if own else "")
    if aligned:
        out.append(Finding("capture-vs-config", "info",
                           f"the captured code makes the {len(seq)} new_group calls "
                           f"build_layout(config) predicts (mcore {layout.mcore}), call for "
                           f"call, on every captured rank{beside}"))
    else:
        m = mismatches[0]
        idx = m.get("index")
        at = f" (captured at {_at(seq[idx])})" if idx is not None and idx < len(seq) else ""
        more = f"; {len(mismatches) - 1} more difference(s)" if len(mismatches) > 1 else ""
        out.append(Finding("capture-vs-config", "error",
                           f"the captured calls differ from build_layout(config) (mcore "
                           f"{layout.mcore}) on rank {r0}: {m['message'].rstrip('.')}{at}{more}"
                           f"{beside}",
                           (r0,), tuple(k for k in (m.get("kind"),) if k)))
    cfg = layout.config
    descs = {c.desc for c in cap.groups()}
    dropped = (cfg.create_all_gather_group and layout.profile.ag_after_init
               and AG_DESC not in descs)
    if dropped:
        out.append(Finding(
            "ag-dropped", "error",
            f"create_all_gather_group is on in the configuration, but the captured code created "
            f"no {AG_DESC} group: megatron-core 0.18+ (profile {layout.mcore}) has no "
            f"create_all_gather_group "
            f"keyword in initialize_model_parallel, so code that passes it only when accepted "
            f"(NeMo's compatibility path) silently gets no all-gather group and the all-gather "
            f"stays on DATA_PARALLEL_GROUP_WITH_CP; call parallel_state.create_all_gather_groups"
            f"(for_expert_parallelism=ep > 1) after initialize_model_parallel",
            (), ("dp_cp_ag",)))
    lay, notes = captured_layout(cap, layout)
    out.extend(notes)
    if lay is not None:
        skip = {"matches-config", "creation-order"} if aligned else {"creation-order"}
        from ..checks import CHECKS

        names = [n for n, _ in CHECKS if n not in skip]
        found = [f for f in check(lay, only=names)  # the captured layout is one loop per
                 if not (f.code == "matches-config"    # kind: its "creation order" is not the
                         and f.message.startswith("the plan's creation order"))]  # code's
        if dropped:
            found = [f for f in found if f.code != "ag-missing"]
        out.extend(found)
    return out


def check_crosscheck(cap: Capture) -> list[Finding]:
    """A ``--fast`` capture against the same ranks run alone in fresh interpreters."""
    out = []
    for item in cap.meta.get("crosscheck") or ():
        r = item.get("rank")
        if item.get("same") is False:
            out.append(Finding(
                "capture-fast-differs", "error",
                f"rank {r} makes different new_group calls in --fast mode than alone in its "
                f"own interpreter: call {item.get('index')} is {item.get('fast')} in --fast "
                f"but {item.get('separate')} alone; the code depends on something per process "
                f"(string hash order, the environment read at import time): capture without "
                f"--fast to see every rank as torchrun runs it", (r,)))
        elif item.get("same") is None:
            out.append(Finding(
                "capture-fast-differs", "warning",
                f"rank {r} could not be cross-checked in its own interpreter: "
                f"{item.get('message')}", (r,)))
    return out


def check_capture(cap: Capture, layout: Layout | None = None, *,
                  twins: Sequence[tuple[str, str]] = ()) -> list[Finding]:
    """Every capture check (and, with ``layout``, the comparison with the configuration);
    findings sorted errors first."""
    findings = (check_failed(cap) + check_sequences(cap) + check_members_only(cap)
                + check_local_members(cap)
                + check_partition(cap) + check_twins(cap, tuple(DEFAULT_TWINS) + tuple(twins))
                + check_crosscheck(cap))
    if layout is not None:
        findings += check_against_layout(cap, layout)
    findings += check_summary(cap)
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order[f.severity])
