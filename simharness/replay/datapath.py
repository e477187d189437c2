"""Data-path replay: the optimizer's collectives with real tensors, checked against a reference.

Pure part (no torch): the options, the synthetic buckets, the single-process
reference and the analysis that turns what the ranks saw into
:class:`~simharness.findings.Finding` objects; their exact values, the payload
tags and the FSDP2 reference are :mod:`.datapath_values` (re-exported here).
The ranks run :mod:`.datapath_worker` (Megatron's bucketed reduce-scatter and
parameter all-gather: the distributed optimizer's pattern on one communicator,
Megatron-FSDP's on the all-gather group, its one reader; :mod:`simharness.ag_readers`) or
:mod:`.datapath_fsdp` (PyTorch FSDP2); :func:`replay_data` launches them.

Megatron mode, per step and per bucket: every rank computes a gradient (a
small integer that depends on the rank, plus the full parameters it holds),
reduce-scatters it on the reduce-scatter group (``dp_cp``; ``ep_dp`` for
expert buckets), updates its own shard with SGD (``lr`` a power of two), and
all-gathers the updated shards on the all-gather group while the other
buckets' reduce-scatters are still in flight. Every value is a dyadic
rational with few bits, so float64 sums are exact in any order and the
result is bit-identical to the reference.

The all-gather payload is ``(parameter bits, tag)`` int64 pairs; the tag
packs the sender's global rank, its shard number, the bucket and the step, so
a receiver can say whose shard landed in each slot:

>>> unpack_tag(pack_tag(src=8, shard=0, bucket=2, step=1))
(8, 0, 2, 1)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from ..errors import whole_number_problem
from ..findings import Finding
from ..layout import Layout, Membership, build_layout
from .datapath_values import (  # noqa: F401  (re-exported: the ranks and callers import them here)
    FSDP_BATCH,
    FSDP_DIMS,
    FSDP_LR_EXP,
    FULL_VALUES,
    MANTISSA_BITS,
    TAG_BITS,
    VALUE_BITS,
    _bits,
    encode_values,
    fsdp_batch,
    fsdp_reference,
    fsdp_weights,
    grad_term,
    initial_params,
    max_steps,
    pack_tag,
    step_lr_exponent,
    unpack_tag,
    value_difference,
)
from .options import EXIT_FAILED, EXIT_MISMATCH, EXIT_OK, ReplayError, ReplayOptions
from .plan_checks import partition_mismatches

SCHEMA = "simharness.datapath/1"
KINDS = ("megatron", "fsdp2")
MAX_AG_FINDINGS = 12        # attribution findings listed; the rest are counted

# Variants of the Megatron data path run in one launch (see :func:`variants`).
SHARED = "shared"           # the all-gather on the reduce-scatter group: one communicator
SEPARATE = "separate"       # the all-gather on its own group: two communicators


# ------------------------------------------------------------------ options
@dataclass(frozen=True)
class DataPathOptions:
    """How to replay the data path.

    ``kind``: ``megatron`` (Megatron's gradient buckets) or ``fsdp2``
    (``fully_shard`` with and without ``set_separate_reduce_scatter_group``).
    ``steps``: optimizer steps; ``dense_buckets``/``expert_buckets``: buckets
    per rank; ``shard_numel``: elements of one rank's shard of a bucket.
    ``swap``: ``(a, b, kind)`` swaps ranks ``a`` and ``b`` in the plan's groups
    of ``kind`` before the replay (fault injection).
    """

    kind: str = "megatron"
    steps: int = 4
    dense_buckets: int = 3
    expert_buckets: int = 1
    shard_numel: int = 8
    backend: str = "gloo"
    timeout: float = 60.0
    force: bool = False
    fault: str | None = None

    def validate(self) -> DataPathOptions:
        if self.kind not in KINDS:
            raise ReplayError(f"data-path kind {self.kind!r} is unknown; use "
                              f"{' or '.join(KINDS)}.")
        for name, low in (("steps", 1), ("dense_buckets", 0), ("expert_buckets", 0),
                          ("shard_numel", 1)):
            if problem := whole_number_problem(name, getattr(self, name), low):
                raise ReplayError(problem + ".")
        if self.kind == "megatron" and self.dense_buckets + self.expert_buckets == 0:
            raise ReplayError("dense_buckets and expert_buckets are both 0: nothing to replay; "
                              "use at least one bucket.")
        limits = {"steps": (1 << TAG_BITS[3]) - 1,
                  "dense_buckets": (1 << TAG_BITS[2]) // 2 - 1,
                  "expert_buckets": (1 << TAG_BITS[2]) // 2 - 1, "shard_numel": 1 << 20}
        for name, hi in limits.items():
            if getattr(self, name) > hi:
                raise ReplayError(f"{name} {getattr(self, name)} is too large (at most {hi}).")
        self.replay_options().validate()
        return self

    def replay_options(self) -> ReplayOptions:
        """The launcher's options (no overlap probe: the data path times itself);
        ``ReplayOptions.validate`` checks the backend, timeout and fault."""
        return ReplayOptions(backend=self.backend, timeout=self.timeout, overlap_bytes=0,
                             iters=0, force=self.force, fault=self.fault)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DataPathOptions:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})



# ------------------------------------------------------------------ buckets
@dataclass(frozen=True)
class Bucket:
    """One bucket on one rank.

    ``number`` identifies the bucket across ranks (dense ``0..``, expert after
    them); ``partition`` the model partition whose parameters it holds (the
    reference layout's group number of ``rs_kind``: every member of that group
    holds a replica); ``rs_ranks`` the plan's reduce-scatter group,
    ``replicas`` the reference layout's (they differ only in a corrupted plan).
    """

    side: str
    index: int
    number: int
    partition: int
    rs_kind: str
    rs_ranks: tuple[int, ...]
    ag_kind: str
    replicas: tuple[int, ...]

    def shard_of(self, rank: int) -> int:
        """The shard a rank owns: its group rank in the reduce-scatter group (torch sorts)."""
        return sorted(self.rs_ranks).index(rank)


def replicas_of(ref: Layout, kind: str, rank: int) -> Membership:
    """``rank``'s group of ``kind`` in the reference layout: the replicas of its partition."""
    m = ref.membership(kind, rank)
    if m is None:
        raise ReplayError(f"rank {rank} has no {kind} group in what the configuration builds; "
                          f"the data path needs one on every rank.")
    return m


def reference_layout(layout: Layout) -> Layout:
    """What the plan's configuration builds: the source of model partitions and replicas."""
    return build_layout(layout.config, layout.mcore)


def buckets_of(layout: Layout, rank: int, opts: DataPathOptions,
               ref: Layout | None = None) -> list[Bucket]:
    """The buckets of ``rank``, dense then expert, with the plan's groups."""
    ref = ref or reference_layout(layout)
    col = layout.resolve_collectives(rank)
    out = []
    number = 0
    for side, count in (("dense", opts.dense_buckets), ("expert", opts.expert_buckets)):
        rs = getattr(col, f"{side}_reduce_scatter")
        ag = getattr(col, f"{side}_all_gather")
        m = replicas_of(ref, rs.kind, rank)
        for i in range(count):
            out.append(Bucket(side, i, number + i, int(m.group), rs.kind,
                              tuple(int(r) for r in rs.ranks), ag.kind,
                              tuple(int(r) for r in m.ranks)))
        number += count
    return out



# ---------------------------------------------------------------- reference
def reference(layout: Layout, opts: DataPathOptions) -> dict[tuple[str, int, int], dict]:
    """The single-process reference: per (side, partition, bucket), the full
    parameters after every step and the reduced gradient of every step.

    Each partition is trained by its replicas (the reference layout's group):
    ``grad = sum over replicas of (grad_term(replica) + params)``,
    ``params -= lr * grad``.
    """
    ref = reference_layout(layout)
    out: dict[tuple[str, int, int], dict] = {}
    number = 0
    for side, count, kind in (("dense", opts.dense_buckets, _rs_kind(ref, "dense")),
                              ("expert", opts.expert_buckets, _rs_kind(ref, "expert"))):
        if count and kind is not None:
            groups = ref.groups(kind)
            n = groups.shape[1]
            lr = 2.0 ** -step_lr_exponent(n)
            for g, members in enumerate(groups.tolist()):
                for i in range(count):
                    numel = opts.shard_numel * n
                    p = initial_params(g, number + i, numel)
                    reduced = []
                    for t in range(opts.steps):
                        grad = sum((grad_term(r, t, number + i, numel) + p for r in members),
                                   np.zeros(numel))
                        reduced.append(grad)
                        p = p - lr * grad
                    out[(side, g, number + i)] = {"final": p, "reduced": reduced, "lr": lr}
        number += count
    return out


def _rs_kind(layout: Layout, side: str) -> str:
    return getattr(layout.resolve_collectives(0), f"{side}_reduce_scatter").kind


def _ag_kind(layout: Layout, side: str) -> str:
    return getattr(layout.resolve_collectives(0), f"{side}_all_gather").kind


# ----------------------------------------------------------------- variants
@dataclass(frozen=True)
class Variant:
    """One way to run the all-gathers: ``ag[side]`` is ``"rs"`` (the reduce-scatter
    group itself), ``"plan"`` (the plan's all-gather group) or ``"twin"`` (a new
    group with the reduce-scatter group's ranks, made by the replay)."""

    name: str
    ag: Mapping[str, str]
    is_plan: bool

    def label(self, layout: Layout, opts: DataPathOptions | None = None) -> str:
        col = layout.resolve_collectives(0)
        parts = []
        for side in ("dense", "expert"):
            if opts is not None and not getattr(opts, f"{side}_buckets"):
                continue
            rs = getattr(col, f"{side}_reduce_scatter").kind
            how = self.ag[side]
            where = {"rs": rs, "plan": getattr(col, f"{side}_all_gather").kind,
                     "twin": f"a twin of {rs}"}[how]
            parts.append(f"{side} AG on {where}")
        return ", ".join(parts)


def variants(layout: Layout) -> list[Variant]:
    """``shared`` (one communicator) and ``separate`` (two), the plan's own first.

    Option on: ``separate`` uses the plan's all-gather groups (where the plan
    has one for a side), ``shared`` the reduce-scatter groups. Option off:
    ``shared`` is the plan; ``separate`` uses twins of the reduce-scatter
    groups where the option would create an all-gather group.
    """
    on = layout.config.create_all_gather_group
    plan_side = {"dense": layout.has("dp_cp_ag"), "expert": layout.has("ep_dp_ag")}
    if on:
        sep = Variant(SEPARATE, {s: "plan" if plan_side[s] else "rs" for s in plan_side}, True)
        return [sep, Variant(SHARED, {"dense": "rs", "expert": "rs"}, False)]
    flipped = build_layout(layout.config.replace(create_all_gather_group=True), layout.mcore)
    would = {"dense": flipped.has("dp_cp_ag"), "expert": flipped.has("ep_dp_ag")}
    return [Variant(SHARED, {"dense": "rs", "expert": "rs"}, True),
            Variant(SEPARATE, {s: "twin" if would[s] else "rs" for s in would}, False)]


def check_data_replayable(layout: Layout, opts: DataPathOptions) -> None:
    """Refuse what the data path does not model, naming the values (no torch)."""
    n_inst = layout.config.num_distributed_optimizer_instances
    if n_inst != 1:
        raise ReplayError(
            f"num_distributed_optimizer_instances={n_inst}: the data-path replay models one "
            f"distributed-optimizer instance (no inter-instance all-reduce); replay with 1.")
    used = {k for side in ("dense", "expert") if getattr(opts, f"{side}_buckets")
            for k in (_rs_kind(layout, side), _ag_kind(layout, side))}
    for m in partition_mismatches(layout):
        if m["kind"] in used:
            raise ReplayError(
                f"plan kind {m['kind']} does not put every rank in exactly one group (ranks "
                f"{m['ranks'][:8]}): {m['message']} The data path needs one group of it on "
                f"every rank; fix the plan or re-export it.")
    created: dict[str, set[int]] = {k: set() for k in used}
    for gc in layout.creation_order:
        if gc.kind in created:
            created[gc.kind].update(gc.ranks)
    for kind, ranks in sorted(created.items()):
        missing = sorted(set(layout.ranks) - ranks)
        if missing:
            raise ReplayError(
                f"the plan's creation order creates no {kind} group for rank(s) {missing[:8]} "
                f"(its kinds list {layout.source(kind).n_groups} {kind} groups); fix the plan "
                f"or re-export it.")
    ref = reference_layout(layout)
    for side, count in (("dense", opts.dense_buckets), ("expert", opts.expert_buckets)):
        kind = _rs_kind(ref, side)
        if not count or kind is None:
            continue
        n = ref.source(kind).group_size
        if opts.steps > max_steps(n):
            raise ReplayError(
                f"--steps {opts.steps}: with {side} groups of {n} ranks at most {max_steps(n)} "
                f"steps keep every value exact in float64 (lr 2**-{step_lr_exponent(n)}); use "
                f"fewer steps.")
        if n >= 1 << TAG_BITS[1]:
            raise ReplayError(f"{side} groups of {n} ranks are too large for the shard tags "
                              f"(at most {(1 << TAG_BITS[1]) - 1}).")
    if layout.world_size >= 1 << TAG_BITS[0]:
        raise ReplayError(f"world {layout.world_size} is too large for the shard tags.")


# ------------------------------------------------------------- fault: swap
_SWAP = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*(?:@\s*([a-z_0-9]+)\s*)?$")


def parse_swap(text: str) -> tuple[int, int, str]:
    """``"4,8"`` or ``"4,8@dp_cp"`` -> ``(4, 8, kind)`` (default kind ``dp_cp_ag``).

    >>> parse_swap("2,3")
    (2, 3, 'dp_cp_ag')
    """
    m = _SWAP.match(str(text))
    if not m:
        raise ReplayError(f"--swap {text!r} must look like A,B or A,B@KIND, e.g. 2,3 or "
                          f"2,3@dp_cp_ag.")
    return int(m.group(1)), int(m.group(2)), m.group(3) or "dp_cp_ag"


def swap_ranks(layout: Layout, a: int, b: int, kind: str = "dp_cp_ag") -> Layout:
    """The plan with ranks ``a`` and ``b`` exchanged in the groups of ``kind``.

    Between two groups this changes both groups' members (a misaligned
    all-gather group); inside one group it only reorders the list, which
    torch ignores (it sorts a group's ranks).
    """
    if not layout.has(kind):
        hint = (" (create_all_gather_group is off: turn it on, or swap in dp_cp)"
                if kind.endswith("_ag") else "")
        raise ReplayError(f"--swap: the plan has no {kind} groups{hint}; kinds: "
                          f"{', '.join(layout.kinds)}.")
    W = layout.world_size
    for r in (a, b):
        if not 0 <= r < W:
            raise ReplayError(f"--swap: rank {r} is outside the world 0..{W - 1}.")
    if a == b:
        raise ReplayError(f"--swap {a},{b}: the two ranks must differ.")
    d = layout.to_dict()
    arr = np.asarray(d["kinds"][kind]["groups"])
    ia, ib = np.argwhere(arr == a)[0], np.argwhere(arr == b)[0]
    arr[tuple(ia)], arr[tuple(ib)] = b, a
    d["kinds"][kind]["groups"] = arr.tolist()
    return Layout.from_dict(d)


# ----------------------------------------------------------------- analysis
def _side_name(b: Bucket) -> str:
    return f"{b.side} bucket {b.index}"


def analyse_megatron(layout: Layout, opts: DataPathOptions,
                     gathered: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Compare every rank's observations with the reference; returns the variants' summaries
    and the findings (attribution first: which rank's shard landed where)."""
    refl = reference_layout(layout)
    ref = reference(layout, opts)
    findings: list[Finding] = []
    summaries: dict[str, Any] = {}
    for var in variants(layout):
        sources: dict[tuple, dict[str, Any]] = {}
        bad_rs: dict[int, str] = {}
        bad_params: dict[int, str] = {}
        step_s = []
        for res in sorted(gathered, key=lambda r: r["rank"]):
            rank = res["rank"]
            vr = res["variants"][var.name]
            step_s.append(vr["step_s"])
            for bi, b in enumerate(buckets_of(layout, rank, opts, refl)):
                obs = vr["buckets"][bi]
                expect = sorted(b.replicas)
                S = opts.shard_numel
                r = ref[(b.side, b.partition, b.number)]
                for t, slots in enumerate(obs["tags"]):
                    for slot, (src, shard, number, step, mixed) in enumerate(slots):
                        want_src = expect[slot] if slot < len(expect) else None
                        if (src, shard, number, step, mixed) == (want_src, slot, b.number, t, 0):
                            continue
                        key = (rank, b.side, slot, src, shard, number - b.number, step - t,
                               mixed)
                        e = sources.setdefault(key, {"rank": rank, "bucket": b, "slot": slot,
                                                     "step": t, "src": src, "shard": shard,
                                                     "number": number, "src_step": step,
                                                     "want": want_src, "mixed": mixed,
                                                     "ag_ranks": obs["ag_ranks"], "count": 0})
                        e["count"] += 1
                j = b.shard_of(rank)
                for t, got in enumerate(obs["reduced"]):
                    diff = value_difference(got, r["reduced"][t][j * S:(j + 1) * S])
                    if diff and rank not in bad_rs:
                        bad_rs[rank] = f"step {t}, {_side_name(b)} (shard {j}): {diff}"
                diff = value_difference(obs["final"], r["final"])
                if diff and rank not in bad_params:
                    bad_params[rank] = f"{_side_name(b)}: {diff}"
        findings.extend(_source_findings(var, layout, list(sources.values())))
        name = f"{var.name} ({var.label(layout, opts)})"
        for code, bad, what in (("datapath-reduce-scatter", bad_rs, "reduced gradient shards"),
                                ("datapath-params", bad_params, "parameters after "
                                                                f"{opts.steps} steps")):
            if bad:
                first = min(bad)
                note = " (follows from the all-gather errors above)" if sources else ""
                findings.append(Finding(code, "error", (
                    f"{name}: the {what} differ from the single-process reference on "
                    f"{len(bad)} rank(s) {sorted(bad)[:16]}{note}; rank {first}: {bad[first]}"),
                    tuple(sorted(bad)), (var.name,)))
        ok = not (sources or bad_rs or bad_params)
        per_step = [max(s[t] for s in step_s) for t in range(opts.steps)] if step_s else []
        summaries[var.name] = {
            "label": var.label(layout, opts), "plan": var.is_plan, "ok": ok,
            "ranks_matched": len(gathered) - len(set(bad_params) | {k[0] for k in sources}),
            "attribution_errors": sum(e["count"] for e in sources.values()),
            "step_s": per_step,
            "median_step_s": float(np.median(per_step)) if per_step else None,
            "min_step_s": min(per_step) if per_step else None,
        }
        if ok:
            findings.append(Finding("datapath-match", "info", (
                f"{name}: the parameters after {opts.steps} steps are bit-identical to the "
                f"single-process reference on all {len(gathered)} ranks "
                f"({opts.dense_buckets} dense + {opts.expert_buckets} expert buckets, every "
                f"reduced gradient shard too)"), (), (var.name,)))
    return {"variants": summaries, "findings": findings}


def _source_findings(var: Variant, layout: Layout, entries: list[dict]) -> list[Finding]:
    """One error per (rank, slot, sender): "rank 0 holds shard 1 ... but it came from rank 2"."""
    out = []
    entries.sort(key=lambda e: (e["step"], e["rank"], e["slot"]))
    for e in entries[:MAX_AG_FINDINGS]:
        b: Bucket = e["bucket"]
        where = (f"{var.name}: rank {e['rank']} holds shard {e['slot']} of {_side_name(b)} at "
                 f"step {e['step']}")
        if e["mixed"]:
            msg = (f"{where}, but its elements came from several senders (first rank "
                   f"{e['src']}); expected rank {e['want']}")
        elif e["src"] != e["want"]:
            msg = (f"{where} but it came from rank {e['src']} (its shard {e['shard']}), "
                   f"expected rank {e['want']}")
        else:
            msg = f"{where} from rank {e['src']}"
        if not e["mixed"] and (e["number"] != b.number or e["src_step"] != e["step"]):
            msg += (f", sent as bucket {e['number']} at step {e['src_step']} (expected bucket "
                    f"{b.number} at step {e['step']})")
        elif not e["mixed"] and e["shard"] != e["slot"] and e["src"] == e["want"]:
            msg += f", but as its shard {e['shard']}"
        msg += (f"; the all-gather ran on {list(e['ag_ranks'])}, the {b.rs_kind} replicas are "
                f"{sorted(b.replicas)}")
        if e["count"] > 1:
            msg += f" ({e['count']} times over the {b.side} buckets and steps)"
        ranks = tuple(sorted({e["rank"], *(x for x in (e["src"], e["want"]) if x is not None)}))
        # the kind the all-gather ran on in this variant: the reduce-scatter group's own in
        # ``shared``, the plan's all-gather kind (or a twin of the reduce-scatter group) else
        ran_on = b.rs_kind if var.ag[b.side] == "rs" else b.ag_kind
        out.append(Finding("datapath-ag-source", "error", msg, ranks, (var.name, ran_on)))
    if len(entries) > MAX_AG_FINDINGS:
        rest = entries[MAX_AG_FINDINGS:]
        out.append(Finding("datapath-ag-source", "error", (
            f"{var.name}: {len(rest)} more misrouted shard(s) on rank(s) "
            f"{sorted({e['rank'] for e in rest})[:16]}"), tuple(sorted({e['rank'] for e in rest})),
            (var.name,)))
    return out



def analyse_fsdp(layout: Layout, opts: DataPathOptions,
                 gathered: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """FSDP2: weights vs the reference, and the reduce-scatter group on/off."""
    refl = reference_layout(layout)
    groups = refl.groups("dp_cp").tolist()
    refs = {g: fsdp_reference(m, g, opts.steps) for g, m in enumerate(groups)}
    findings: list[Finding] = []
    summaries = {}
    for name in (SHARED, SEPARATE):
        bad: dict[int, str] = {}
        group_bad: dict[int, str] = {}
        step_s = []
        for res in sorted(gathered, key=lambda r: r["rank"]):
            rank = res["rank"]
            vr = res["variants"][name]
            step_s.append(vr["step_s"])
            g = replicas_of(refl, "dp_cp", rank).group
            for li, (got, want) in enumerate(zip(vr["weights"], refs[g], strict=True)):
                diff = value_difference(got, want)
                if diff and rank not in bad:
                    bad[rank] = f"layer {li}: {diff}"
            rs = vr["rs_group"]
            want_sep = name == SEPARATE
            if rs["separate"] != want_sep or sorted(rs["ranks"]) != sorted(rs["shard_ranks"]):
                group_bad[rank] = (f"reduce-scatter group {rs['ranks']} "
                                   f"({'its own' if rs['separate'] else 'the shard group'}), "
                                   f"shard group {rs['shard_ranks']}, expected "
                                   f"{'a separate group' if want_sep else 'the shard group'} "
                                   f"with the same ranks")
        label = ("set_separate_reduce_scatter_group(): reduce-scatter on its own group"
                 if name == SEPARATE else "reduce-scatter and all-gather on the shard group")
        if group_bad:
            first = min(group_bad)
            findings.append(Finding("datapath-fsdp-group", "error", (
                f"fsdp2 {name}: rank {first}: {group_bad[first]} ({len(group_bad)} rank(s))"),
                tuple(sorted(group_bad)), (name,)))
        if bad:
            first = min(bad)
            findings.append(Finding("datapath-params", "error", (
                f"fsdp2 {name}: the weights after {opts.steps} steps differ from the "
                f"single-process reference on rank(s) {sorted(bad)[:16]}; rank {first}: "
                f"{bad[first]}"), tuple(sorted(bad)), (name,)))
        per_step = [max(s[t] for s in step_s) for t in range(opts.steps)] if step_s else []
        ok = not bad and not group_bad
        if ok:
            findings.append(Finding("datapath-match", "info", (
                f"fsdp2 {name} ({label}): the weights after {opts.steps} steps are "
                f"bit-identical to the single-process reference on all {len(gathered)} ranks"),
                (), (name,)))
        summaries[name] = {"label": label, "plan": None, "ok": ok,
                           "ranks_matched": len(gathered) - len(bad), "step_s": per_step,
                           "median_step_s": float(np.median(per_step)) if per_step else None,
                           "min_step_s": min(per_step) if per_step else None}
    return {"variants": summaries, "findings": findings}


# ------------------------------------------------------------------ launch
ENTRIES = {"megatron": "simharness.replay.datapath_worker:run_datapath_rank",
           "fsdp2": "simharness.replay.datapath_fsdp:run_fsdp_datapath_rank"}


def preflight_data(layout: Layout, opts: DataPathOptions) -> None:
    """Everything refused before a process starts (no torch)."""
    from .controller import preflight
    from .options import cpu_count, max_local_gloo_ranks

    opts.validate()
    W, limit = layout.world_size, max_local_gloo_ranks()
    if opts.backend == "gloo" and limit < W and not opts.force:
        raise ReplayError(f"world_size {W} would start {W} gloo processes on this machine's "
                          f"{cpu_count()} CPU core(s) (at most {limit} without --force); pass "
                          f"--force to run it anyway, or replay a smaller world.")
    preflight(layout, opts.replay_options())
    check_data_replayable(layout, opts)
    data_memory_budget(layout, opts)


def data_memory_budget(layout: Layout, opts: DataPathOptions):
    """The data path's memory plan (:func:`simharness.resources.datapath_budget`); raises
    :class:`~simharness.resources.ResourceError` when the ranks or the reference cannot fit."""
    from ..resources import datapath_budget, replay_budget

    c, W = layout.config, layout.world_size
    if opts.kind != "megatron":
        return replay_budget(W, 0, what="replay-data")
    n_dense, n_expert = c.dp * c.cp, c.edp
    return datapath_budget(W, shard_numel=opts.shard_numel, group_size=max(n_dense, n_expert),
                           buckets=opts.dense_buckets + opts.expert_buckets, steps=opts.steps,
                           group_buckets=W // n_dense * opts.dense_buckets
                           + W // n_expert * opts.expert_buckets)


def replay_data(layout: Layout, options: DataPathOptions | None = None, *,
                deadline: float | None = None, **kwargs) -> dict[str, Any]:
    """Run the data path on ``world_size`` local ranks; returns the report.

    ``report["exit_code"]``: 0 every variant matched the reference bit for
    bit, 1 a mismatch (``report["findings"]`` says which rank got whose
    shard), 3 the replay failed (``report["failure"]`` names the rank).
    """
    import time

    from .controller import run_local

    opts = options or DataPathOptions(**kwargs)
    if options is not None and kwargs:
        opts = replace(opts, **kwargs)
    preflight_data(layout, opts)
    run = run_local(layout, opts.replay_options(), deadline=deadline, entry=ENTRIES[opts.kind],
                    extra={"datapath": opts.to_dict()}, memory=data_memory_budget(layout, opts))
    report: dict[str, Any] = {
        "schema": SCHEMA, "kind": opts.kind, "backend": opts.backend,
        "world_size": layout.world_size, "mcore": layout.mcore, "config": layout.summary(),
        "options": opts.to_dict(), "processes": run.processes, "failure": run.failure,
    }
    if run.gathered:
        analyse = analyse_fsdp if opts.kind == "fsdp2" else analyse_megatron
        result = analyse(layout, opts, run.gathered)
        report["variants"] = result["variants"]
        report["findings"] = [f.to_dict() for f in result["findings"]]
        ok = all(v["ok"] for v in result["variants"].values())
        report["status"], report["exit_code"] = ("matched", EXIT_OK) if ok else (
            "mismatch", EXIT_MISMATCH)
        report["groups_created"] = run.gathered[0].get("groups_created")
        report["phase_s"] = {k: max(r["phase_s"][k] for r in run.gathered)
                             for k in run.gathered[0]["phase_s"]}
    else:
        report["variants"], report["findings"] = {}, []
        report["status"], report["exit_code"] = "failed", EXIT_FAILED
    report["total_s"] = round(time.time() - run.t0, 3)
    return report


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """The text summary of a data-path report."""
    cfg = report["config"]
    lines = [f"data-path replay ({report['kind']}, {report['backend']}): world "
             f"{report['world_size']}, tp {cfg['tp']} pp {cfg['pp']} cp {cfg['cp']} dp "
             f"{cfg['dp']} ep {cfg['ep']}, order {cfg['order']}, mcore {report['mcore']}, "
             f"create_all_gather_group {'on' if cfg['create_all_gather_group'] else 'off'}"]
    opts = report["options"]
    if report["kind"] == "megatron":
        lines.append(f"  {opts['steps']} steps, {opts['dense_buckets']} dense + "
                     f"{opts['expert_buckets']} expert buckets of {opts['shard_numel']} "
                     f"float64 elements per rank shard")
    else:
        lines.append(f"  {opts['steps']} steps of a two-layer model under fully_shard, "
                     f"float64")
    for name, v in report.get("variants", {}).items():
        plan = " [the plan's path]" if v.get("plan") else ""
        med = v.get("median_step_s")
        timing = (f"step median {med * 1e3:.1f} ms, min {v['min_step_s'] * 1e3:.1f} ms"
                  if med is not None else "no timing")
        lines.append(f"  {name:<9} {'OK ' if v['ok'] else 'BAD'} {timing}: {v['label']}{plan}")
    for f in report.get("findings", []):
        if f["severity"] != "info":
            lines.append(f"  {f['severity']} [{f['code']}] {f['message']}")
    if report.get("failure"):
        lines.append(f"  failed: {report['failure']['message']}")
    lines.append("  timings: gloo processes share this machine's CPU cores; the per-step "
                 "times are noise-dominated there" if report["backend"] == "gloo" else
                 "  timings: slowest rank per step")
    lines.append(f"result: {report['status'].upper()} (exit {report['exit_code']})")
    return lines


__all__ = ["DataPathOptions", "Bucket", "KINDS", "SCHEMA", "analyse_fsdp", "analyse_megatron",
           "buckets_of", "check_data_replayable", "fsdp_reference", "max_steps", "pack_tag",
           "data_memory_budget", "parse_swap", "preflight_data", "reference", "replay_data",
           "summary_lines", "swap_ranks", "unpack_tag", "variants"]
