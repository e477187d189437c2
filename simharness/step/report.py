"""What :func:`~simharness.step.simulate` returns, and the lines that explain it.

:class:`OverlapReport` holds per stage the step with one communicator and with a
separate all-gather communicator (:class:`StageRow`), the collectives of the
slowest stage and NCCL's pick for each (:class:`CollRow`), the step under every
sharing assumption (:class:`Scenario`), the memory each extra communicator costs,
what the model cannot know, and one verdict line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..ag_readers import ag_reader_sentence
from ..profiles import DEFAULT_MCORE
from ..topology.comm_memory import CommMemoryInputs, comm_memory
from ..topology.model_error import BandError, lookup, network_class_of
from ..topology.nccl_model import debug_lines, tune
from .engine import Timeline, Unit
from .pricing import ROLE_COLLECTIVE, ROLE_NAMES, JobGroups, Pricer
from .schedules import WAVES

# The words for the distributed optimizer when the caller passes none (the CLI passes the
# sentence of the job's implementation and profile as ``reader_words``): said once, in
# simharness.ag_readers.
DIST_OPT_WORDS = ag_reader_sentence(DEFAULT_MCORE, "dist-opt")

HBM_BYTES_PER_WIRE_BYTE = 3.0  # read source + read/write staging; ours, an estimate


@dataclass(frozen=True)
class Scenario:
    """One sharing assumption and the job's step with one / separate communicators."""

    name: str
    one_step_s: float
    separate_step_s: float
    one_held_s: float = 0.0       # slowest stage: compute held behind a queued collective
    separate_held_s: float = 0.0
    one_shared_s: float = 0.0     # slowest stage: time two collectives moved data at once
    separate_shared_s: float = 0.0

    @property
    def gain_pct(self) -> float:
        return 100.0 * (self.one_step_s - self.separate_step_s) / self.one_step_s \
            if self.one_step_s else 0.0


@dataclass(frozen=True)
class CollRow:
    """One distinct collective of the worst stage: what NCCL picks and what it costs."""

    what: str        # e.g. "dense all-gather"
    group: str       # layout group kind
    group_size: int
    size_bytes: float
    pick: str
    channels: int
    alone_s: float
    count: int       # calls per step on the stage
    latency_s: float = 0.0
    shape: str = ""
    options: tuple = ()
    debug: tuple[str, ...] = ()   # NCCL_DEBUG=INFO GRAPH,TUNING lines of its group
    #: the cost model's measured error for its group's network class and size band
    error: BandError | None = None


@dataclass(frozen=True)
class StageRow:
    stage: int
    layers: tuple[int, ...]       # per virtual chunk
    first_layer: int
    dense_bytes: float            # per rank, all-gather dtype
    expert_bytes: float
    forward_s: float
    backward_s: float
    one: Timeline
    separate: Timeline

    @property
    def gain_pct(self) -> float:
        return 100.0 * (self.one.step_s - self.separate.step_s) / self.one.step_s \
            if self.one.step_s else 0.0


@dataclass(frozen=True)
class OverlapReport:
    """What :func:`simulate` returns (times in seconds, sizes in bytes per rank)."""

    schedule: str
    nccl: str
    compute_how: str
    groups: dict            # role -> layout group kind
    stages: tuple[StageRow, ...]
    worst_stage: int
    collectives: tuple[CollRow, ...]
    scenarios: tuple[Scenario, ...]
    comm_memories: tuple[tuple[str, float], ...]  # (extra communicator, MB per GPU)
    cost_classes: int
    memory_lines: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    unknowns: tuple[str, ...] = ()
    hbm_share: float | None = None
    latency_share: float = 0.0
    shared_slowdown: float = 1.0
    #: which collective runs ``shared_slowdown`` slower, beside which, and why
    shared_slowdown_words: str = ""
    ag_used: bool = True     # whether the schedule uses the all-gather group at all
    has_traffic: bool = True
    # Who reads the AG group and which memory case is priced, in simharness.ag_readers'
    # words (the CLI passes them in); memory_paid False: the launch creates no communicator
    # for a group nothing reads, so the figure above is not spent.
    reader_words: str = ""
    memory_words: str = ""
    memory_paid: bool = True
    #: fsdp whose all-gathers all stay on the reduce-scatter's communicator: why
    unused_words: str = ""
    #: the gain (%) with every collective's time at the p10 and at the p90 of its class
    #: and band's measured error, over every scenario; None: no collective has one
    error_range_pct: tuple[float, float] | None = None

    @property
    def one(self) -> Timeline:
        return self.stages[self.worst_stage].one

    @property
    def separate(self) -> Timeline:
        return max((s.separate for s in self.stages), key=lambda t: t.step_s)

    @property
    def gain_s(self) -> float:
        return self.one.step_s - self.separate.step_s

    @property
    def gain_pct(self) -> float:
        return 100.0 * self.gain_s / self.one.step_s if self.one.step_s else 0.0

    @property
    def gain_range_pct(self) -> tuple[float, float]:
        gains = [sc.gain_pct for sc in self.scenarios] or [self.gain_pct]
        return min(gains), max(gains)

    @property
    def model_errors(self) -> tuple[BandError, ...]:
        """The distinct measured errors of the collectives (network class, size band)."""
        seen = {(c.error.network, c.error.band): c.error for c in self.collectives if c.error}
        return tuple(seen.values())

    @property
    def uncertainty(self) -> str:
        """The gain under the cost model's measured error, and where that error comes from."""
        errs = self.model_errors
        if not errs:
            return ""
        where = "; ".join(e.words() for e in errs)
        if self.error_range_pct is None:
            return f"the cost model's error is not measured here ({where})"
        lo, hi = self.error_range_pct
        return (f"{lo:+.1f}% to {hi:+.1f}% with collective times anywhere in the cost "
                f"model's measured error ({where})")

    @property
    def extra_communicators(self) -> int:
        return len(self.comm_memories)

    @property
    def comm_memory_mb(self) -> float:
        """Memory of the dense all-gather communicator (the first extra one)."""
        return self.comm_memories[0][1] if self.comm_memories else 0.0

    @property
    def extra_memory_mb(self) -> float:
        return sum(mb for _, mb in self.comm_memories)

    @property
    def verdict(self) -> str:
        """One line that agrees with the gain range and names the memory it costs."""
        mem = f"+{self.extra_memory_mb:.0f} MB per GPU"
        if not self.memory_paid:
            mem = (f"no memory under this launch (+{self.extra_memory_mb:.0f} MB per GPU with "
                   f"communicators created eagerly)")
        if not self.has_traffic:
            return ("nothing to overlap: the data-parallel groups have one rank (no collective "
                    f"traffic); the all-gather group would cost {mem}")
        if not self.ag_used:
            if self.unused_words:
                return f"no effect: {self.unused_words}; the flag costs {mem}"
            why = self.reader_words or DIST_OPT_WORDS
            return f"no effect for the distributed optimizer: {why}; the flag costs {mem}"
        lo, hi = self.gain_range_pct
        rng = f"{lo:+.1f}% to {hi:+.1f}% of the step" if abs(hi - lo) >= 0.05 \
            else f"{lo:+.1f}% of the step"
        sharing = (lo, hi)
        if self.error_range_pct is not None:  # the sign must hold within the model's error
            lo, hi = min(lo, self.error_range_pct[0]), max(hi, self.error_range_pct[1])
        words = self._verdict_words(lo, hi, rng, mem, sharing)
        return f"{words}; {self.uncertainty}" if self.uncertainty else words

    def _verdict_words(self, lo: float, hi: float, rng: str, mem: str,
                       sharing: tuple[float, float]) -> str:
        eps = 0.05

        def depending(sign_from_sharing: bool, bound: str) -> str:
            return ("depending on what the communicators share" if sign_from_sharing else
                    f"over the sharing scenarios, {bound} within the cost model's measured "
                    "error")
        if lo > eps:
            reasons = []
            if self.latency_share >= 0.2:
                reasons.append(f"latency-bound ({self.latency_share:.0%} of the collective "
                               "time is latency, which overlaps)")
            if self.shared_slowdown < 1.5:
                reasons.append("the collectives are bottlenecked on different links")
            if not reasons:
                reasons.append("all-gathers no longer wait behind reduce-scatters")
            return f"helps: {rng} for {mem} ({'; '.join(reasons)})"
        if hi < -eps:
            return (f"hurts: {rng} for {mem} (reduce-scatters take link bandwidth or SMs from "
                    "all-gathers the next unit waits for)")
        if lo < -eps:
            return (f"may hurt: {rng} {depending(sharing[0] < -eps, f'down to {lo:+.1f}%')}, "
                    f"for {mem}")
        if hi > eps:
            return (f"may help: {rng} {depending(sharing[1] > eps, f'up to {hi:+.1f}%')}, "
                    f"for {mem}")
        why = ("communication is already hidden behind compute"
               if self.one.exposed_s <= 0.02 * self.one.step_s else
               "bandwidth-bound on links both collectives share"
               if self.shared_slowdown >= 1.8 else "the collectives rarely meet")
        return f"no measurable gain ({rng}): {why}; it costs {mem}"

    def to_dict(self) -> dict:
        lo, hi = self.gain_range_pct
        return {
            "schedule": self.schedule, "nccl": self.nccl, "compute": self.compute_how,
            "groups": dict(self.groups),
            "stages": [dict(asdict(s), gain_pct=s.gain_pct) for s in self.stages],
            "worst_stage": self.worst_stage,
            "collectives": [asdict(c) for c in self.collectives],
            "one_communicator": asdict(self.one),
            "separate_ag_communicator": asdict(self.separate),
            "scenarios": [dict(asdict(sc), gain_pct=sc.gain_pct) for sc in self.scenarios],
            "gain_s": self.gain_s, "gain_pct": self.gain_pct, "gain_range_pct": [lo, hi],
            "extra_communicators": self.extra_communicators,
            "comm_memories_mb": dict(self.comm_memories), "extra_memory_mb": self.extra_memory_mb,
            "memory_lines": list(self.memory_lines), "notes": list(self.notes),
            "unknowns": list(self.unknowns), "hbm_share": self.hbm_share,
            "latency_share": self.latency_share, "shared_slowdown": self.shared_slowdown,
            "shared_slowdown_words": self.shared_slowdown_words,
            "cost_classes": self.cost_classes, "verdict": self.verdict,
            "model_error": [e.to_dict() for e in self.model_errors],
            "gain_range_with_model_error_pct": (list(self.error_range_pct)
                                                if self.error_range_pct else None),
            "all_gather_readers": self.reader_words, "memory_case": self.memory_words,
            "memory_paid": self.memory_paid}


#: what each sharing scenario shares, in one line (the names of ``sharing_scenarios``)
SCENARIO_WORDS = {
    "links shared": "collectives moving data at the same time split every link they both use "
                    "(max-min fair); compute runs at full speed",
    "links + SMs": "links shared, and compute slows by the SMs the running collectives' CTAs "
                   "hold (one CTA per NCCL channel), the SMs shared as a fluid",
    WAVES: "links and SMs shared, and a unit whose largest GEMM's tiles "
                                 "are known runs in waves of them over the SMs the "
                                 "collectives leave (a last partial wave costs a whole one)",
    "links + SMs + one launch queue": "links and SMs shared, and every kernel launches in "
                                      "issue order through one hardware queue "
                                      "(CUDA_DEVICE_MAX_CONNECTIONS=1)",
    "links + one launch queue": "links shared, and every kernel launches in issue order "
                                "through one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1)",
}


def scenario_lines(scenarios: Sequence[Scenario]) -> list[str]:
    """One line per scenario saying what it shares, and, where a scenario that shares more
    comes out faster than the one before it, why."""
    out = [f"{sc.name}: {SCENARIO_WORDS.get(sc.name, sc.name)}" for sc in scenarios]
    for prev, sc in zip(scenarios, scenarios[1:], strict=False):
        if sc.name == WAVES:  # another way to share the SMs, not more sharing
            continue
        for which, a, b, sa, sb in (
                ("one communicator", prev.one_step_s, sc.one_step_s, prev.one_shared_s,
                 sc.one_shared_s),
                ("separate communicators", prev.separate_step_s, sc.separate_step_s,
                 prev.separate_shared_s, sc.separate_shared_s)):
            if b < a * (1 - 1e-6):
                out.append(
                    f"{sc.name} is {(a - b) * 1e3:.3f} ms faster than {prev.name} with "
                    f"{which}: the slower compute issues the next collectives later, so they "
                    f"move data at the same time for {sb * 1e3:.3f} ms instead of "
                    f"{sa * 1e3:.3f} ms: less link bandwidth goes to collectives nothing "
                    f"waits for yet, and the all-gathers the next units wait for end sooner "
                    f"(a property of the schedule, not an error)")
    return out


NO_QUEUE_FSDP = ("one launch queue (CUDA_DEVICE_MAX_CONNECTIONS=1) is not a scenario for fsdp: "
                 "Megatron-LM refuses it with Megatron-FSDP ('FSDP requires "
                 "CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset', megatron/training/arguments.py:1166 "
                 "at d98e8a6); --one-launch-queue models it anyway")


def collective_rows(units: Sequence[Unit], combo, pr: Pricer, jg: JobGroups,
                     nccl: str) -> tuple[CollRow, ...]:
    seen: dict[tuple[str, float], int] = {}
    for unit in units:
        for c in unit.before + unit.after:
            seen[(c.group, c.volume)] = seen.get((c.group, c.volume), 0) + 1
    rows = []
    for (lab, size), count in sorted(seen.items()):
        role = lab.split("_")[1]
        est, shape = pr.price(lab, combo[lab], role, size)
        opts = tuple((e.pick, round(e.latency_us, 2), round(e.algbw_gb_per_s, 2),
                      round(e.time_us, 2))
                     for e in tune(shape, ROLE_COLLECTIVE[role], nccl=nccl).all_estimates(size))
        k = pr.info[lab]
        dev = k.rings.devices[int(k.class_first[combo[lab]])]
        network = network_class_of(pr.cluster.spec, int(np.unique(pr.cluster.domain_of(dev)).size))
        rows.append(CollRow(ROLE_NAMES[lab], jg.kind[lab], int(k.groups.shape[1]),
                            size, est.pick, int(est.n_channels), est.time_us * 1e-6, count,
                            (est.latency_us + est.ramp_us) * 1e-6, shape.describe(), opts,
                            tuple(debug_lines(shape, ROLE_COLLECTIVE[role], nccl=nccl)),
                            lookup(network, size)))
    return tuple(rows)


def queue_note(scenarios: Sequence[Scenario], schedule: str) -> str:
    q = scenarios[-1]
    if "launch queue" not in q.name:
        return NO_QUEUE_FSDP if schedule == "fsdp" else \
            "one launch queue (CUDA_DEVICE_MAX_CONNECTIONS=1) not modelled (turned off)"
    prev = scenarios[-2]
    if q.one_held_s == 0 and q.separate_held_s == 0:
        return ("one launch queue (CUDA_DEVICE_MAX_CONNECTIONS=1) changes nothing here: "
                "whenever a unit's compute was ready, every collective issued before it had "
                "already started, so no kernel was held behind another")
    same = all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in (
        (q.one_step_s, prev.one_step_s), (q.separate_step_s, prev.separate_step_s)))
    return (f"one launch queue (CUDA_DEVICE_MAX_CONNECTIONS=1) holds compute behind queued "
            f"collectives for {q.one_held_s * 1e3:.3f} ms with one communicator and "
            f"{q.separate_held_s * 1e3:.3f} ms with a separate all-gather communicator "
            "(slowest stage)" + ("; the step does not change: the communicators are busy end "
                                 "to end, and holding compute delays no collective"
                                 if same else ""))


def model_unknowns(spec, has_expert: bool, hbm: float | None) -> tuple[str, ...]:
    out = ["the order your code issues collectives and compute in (the model issues a unit's "
           "all-gather when the previous one starts)",
           "pipeline bubbles, other micro-batches and the optimizer step (one micro-batch "
           "forward and backward per stage is modelled)"]
    if has_expert:
        out.append("routing balance and the token all-to-all (expert FLOPs assume balanced "
                   "routing; all-to-all time is not modelled)")
    if not spec.node.sms:
        out.append(f"SM contention: topology {spec.name!r} gives no [node] sms")
    if hbm is None:
        out.append(f"HBM contention: topology {spec.name!r} gives no [node] hbm_gb_per_s")
    else:
        out.append(f"whether compute is HBM-bound (the collectives use ~{hbm:.0%} of HBM "
                   "bandwidth while running)")
    return tuple(out)


def _extra_kinds(layout) -> list[str]:
    """The all-gather communicators the layout has, or turning the flag on would add
    (an expert one only from megatron-core 0.18, with expert parallelism)."""
    have = [k for k in layout.kinds if k.endswith("_ag")]
    if have:
        return have
    profile = getattr(layout, "profile", None)
    expert = (profile is None or bool(profile.expert_all_gather)) and \
        int(getattr(layout.config, "expert_model_parallel_size", 1)) > 1
    return ["dp_cp_ag"] + (["ep_dp_ag"] if expert else [])


def extra_memories(layout, spec, crow: Sequence[CollRow], combo, pr: Pricer, nccl: str,
                   given_mb: float | None, inputs: CommMemoryInputs | None
                   ) -> tuple[tuple[tuple[str, float], ...], tuple[str, ...]]:
    """Per extra communicator: its memory (NCCL's allocations for the algorithms it runs,
    on its group's graph) and how it was computed."""
    out, lines = [], []
    protocols = ("simple", "ll", "ll128") if spec.node.arch else ("simple",)
    for kind in _extra_kinds(layout):
        if given_mb is not None:
            out.append((kind, float(given_mb)))
            lines.append(f"{kind}: {given_mb:g} MB (given)")
            continue
        lab = "exp_ag" if kind.startswith("ep_") else "dense_ag"
        # only the all-gathers this communicator (or the group it twins) runs: with the
        # all-gather on another group (--rs-kind tp) it runs nothing here
        rows = [c for c in crow if c.what == ROLE_NAMES[lab]
                and c.group.removesuffix("_ag") == kind.removesuffix("_ag")] \
            if lab in pr.info else []
        algos = tuple(dict.fromkeys(c.pick.split("/")[0] for c in rows))
        shape = pr.price(lab, combo[lab], "ag", rows[0].size_bytes)[1] if rows else None
        mem = comm_memory(inputs or CommMemoryInputs(algos=algos, protocols=protocols),
                          nvls_capable=spec.scale_up.nvls, nccl=nccl, shape=shape)
        out.append((kind, mem.total_mb))
        use = f"runs {', '.join(algos)}" if algos else "no traffic here: init structures only"
        lines.append(f"{kind} ({use}): " + "; ".join(mem.lines()))
    return tuple(out), tuple(lines)
