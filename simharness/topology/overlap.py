"""Step model of the sharded data-parallel collectives: what ``create_all_gather_group`` buys.

One pipeline stage runs one micro-batch: the units of its model (embedding,
transformer layers of each virtual chunk, output layer; see :mod:`.workload`)
forward, then backward in reverse order. Collectives are tied to units:

- ``--schedule fsdp`` (Megatron-FSDP, the only consumer of the all-gather group:
  ``megatron/core/distributed/fsdp/src/megatron_fsdp/utils.py:499`` in 0.16.1,
  ``mcore_fsdp_adapter.py:400`` on main): every unit's parameters are gathered
  before its forward *and* again before its backward (dense over ``dp_cp`` /
  ``dp_cp_ag``, expert over ``ep_dp`` / ``ep_dp_ag``), the next unit's gather is
  issued when a unit starts (prefetch of one), and every unit's gradients are
  reduce-scattered after its backward.
- ``--schedule dist-opt`` (``DistributedDataParallel`` with the distributed
  optimizer, ``overlap_grad_reduce`` and ``overlap_param_gather``): parameters
  live in buckets of at least ``max(40M, 1M x dp)`` parameters
  (``distributed_data_parallel.py:133``), filled in backward order per model
  chunk; a bucket's all-gather is needed before its first unit's forward and
  the next bucket's is dispatched when it is waited for (forward pre-hook,
  ``next_param_gather_bucket_group``, ``distributed_data_parallel.py:369-380,
  517-551``); with virtual pipelining the schedule dispatches chunks 0 and 1 at
  the start and chunk c+1 when chunk c starts (``schedules.py:1219-1221,
  1341-1353``), or every chunk during the optimizer step
  (``overlap_param_gather_with_optimizer_step``, interleaved schedules only,
  ``training/arguments.py:1066-1071``). A bucket's reduce-scatter is dispatched
  when its last gradient is ready (``register_grad_ready``). Both run on the
  bucket's data-parallel group: the distributed optimizer never uses the
  all-gather group, so the flag changes nothing there but memory.

Sharing between the communicators that run at once:

- *one communicator*: NCCL runs a communicator's collectives one after another
  (NVIDIA/nccl#574): each communicator is one FIFO queue;
- *links*: collectives moving data at the same time share the links they both
  use max-min fairly (:func:`~.cost.maxmin_rates` over every group of the kinds
  moving data);
- *SMs*: an NCCL kernel holds one CTA per channel of its plan
  (:attr:`~.nccl_model.Estimate.n_channels`); compute runs at
  ``1 - (CTAs running) / SMs`` of its speed (only when the topology gives
  ``[node] sms``);
- *one launch queue*: with ``CUDA_DEVICE_MAX_CONNECTIONS=1`` every stream
  feeds one hardware queue in issue order: a collective waiting for its
  communicator's previous collective holds back every later kernel, *compute
  included* (the unit's compute is issued after the prefetch of the next
  unit's all-gather; Megatron's DDP says as much,
  ``param_and_grad_buffer.py:1665-1675``). Modelled for dist-opt, where
  Megatron runs with it; not for fsdp, where Megatron-LM refuses it ("FSDP
  requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset",
  ``megatron/training/arguments.py:1166``), unless ``launch_queue=True``.

Each collective costs what NCCL's model says for its group and size
(:mod:`.nccl_model`): latency first, then its bytes at its algorithm bandwidth
(scaled by its link share while others move data). Step time = when the last
collective and compute end; exposed communication = step - compute. Ranks with
equal costs are simulated once; the slowest rank sets a stage's step, the
slowest stage the job's.

>>> r = simulate_ops(layers=4, compute_s=1e-3,
...                  rs=OpCost(alpha_s=1e-4, volume_bytes=0, rate_alone=1, rate_shared=1),
...                  ag=OpCost(alpha_s=1e-4, volume_bytes=0, rate_alone=1, rate_shared=1))
>>> round(r.one.step_s * 1e3, 2), round(r.separate.step_s * 1e3, 2)   # ms
(4.2, 4.2)
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .comm_memory import CommMemoryInputs, comm_memory
from .cost import Rings, build_rings, maxmin_rates, shape_of
from .errors import TopologyError
from .nccl_model import DEFAULT_NCCL, Estimate, choose, debug_lines, nccl_version, tune
from .placement import Placement
from .workload import StageWork

HBM_BYTES_PER_WIRE_BYTE = 3.0  # read source + read/write staging; ours, an estimate
SCHEDULES = ("fsdp", "dist-opt")
BACKWARD_OVER_FORWARD = 2.0  # backward = input grads + weight grads, 2x the forward FLOPs


# ------------------------------------------------------------------ the event engine
@dataclass(frozen=True)
class Coll:
    """One collective: its role (``"ag"``/``"rs"``), the group kind it runs on, NCCL's
    latency (s), bytes (nccl-tests size), rate alone (B/s) and CTAs."""

    role: str
    group: str
    alpha_s: float
    volume: float
    rate: float
    ctas: int = 0

    def alone_s(self) -> float:
        return self.alpha_s + (self.volume / self.rate if self.volume else 0.0)


@dataclass(frozen=True)
class Unit:
    """One unit of compute with the collectives it waits for (``before``) and issues
    when done (``after``); ``before`` is issued when unit ``issue_with`` starts
    (-1: at time 0)."""

    compute_s: float
    before: tuple[Coll, ...] = ()
    after: tuple[Coll, ...] = ()
    issue_with: int | tuple[int, ...] = -1  # one per ``before`` collective, or one for all


@dataclass(frozen=True)
class Timeline:
    step_s: float
    compute_s: float
    exposed_s: float
    overlap_s: float  # time an all-gather and a reduce-scatter were both in flight
    shared_s: float   # time both moved data (sharing the links they both use)
    held_s: float = 0.0  # compute ready but held behind a queued collective (one launch queue)


@dataclass
class _InFlight:
    """A running collective: in ``phase`` "lat" until time ``value``, then "bw"
    with ``value`` bytes left to move (mutable event-loop state)."""

    coll: Coll
    unit: int
    before: bool
    phase: str
    value: float


class _Engine:
    """Mutable state of one :func:`run_units` run (see there)."""

    def __init__(self, units: Sequence[Unit], queue_of: Mapping[str, str],
                 keep: Callable[[str, frozenset[str]], float], sm_per_cta: float,
                 single_queue: bool):
        self.units, self.queue_of, self.keep = units, queue_of, keep
        self.sm_per_cta, self.single = sm_per_cta, single_queue
        self.queues: dict[str, deque[tuple[Coll, int, int, bool]]] = {
            q: deque() for q in dict.fromkeys(queue_of.values())}
        self.running: dict[str, _InFlight | None] = {q: None for q in self.queues}
        self.waiting = [len(u.before) for u in units]
        self.issue_at: dict[int, list[tuple[Coll, int]]] = {}
        for i, u in enumerate(units):
            iw = u.issue_with if isinstance(u.issue_with, tuple) else \
                (u.issue_with,) * len(u.before)
            for c, j in zip(u.before, iw, strict=False):
                self.issue_at.setdefault(j if j < i else i - 1, []).append((c, i))
        self.seq = itertools.count()
        self.t = 0.0
        self.nxt = 0
        self.comp_left: float | None = None
        self.comp_seq: int | None = None
        self.overlap = self.shared = self.held = 0.0
        self.issue_prefetch(-1)

    def issue(self, colls, unit: int, before: bool) -> None:
        for c in colls:
            self.queues[self.queue_of[c.group]].append((c, unit, next(self.seq), before))

    def issue_prefetch(self, unit: int) -> None:
        for c, j in self.issue_at.get(unit, []):
            self.issue((c,), j, True)

    def start_compute(self) -> tuple[bool, bool]:
        """(progressed, blocked): start the next unit's compute when it may."""
        if self.comp_left is not None or self.nxt >= len(self.units) or self.waiting[self.nxt]:
            return False, False
        progressed = False
        if self.comp_seq is None:
            self.issue_prefetch(self.nxt)
            self.comp_seq = next(self.seq)
            progressed = True
        seq = self.comp_seq
        blocked = self.single and any(qq and qq[0][2] < seq for qq in self.queues.values())
        if not blocked:
            self.comp_left = self.units[self.nxt].compute_s
        return progressed or not blocked, blocked

    def launch(self) -> bool:
        """Start the head of every idle queue (only the earliest issued one with one
        launch queue); whether anything started."""
        first = min((qq[0][2] for qq in self.queues.values() if qq), default=None)
        started = False
        for q, queue in self.queues.items():
            if self.running[q] is None and queue and (not self.single or queue[0][2] == first):
                c, unit, _, before = queue.popleft()
                self.running[q] = _InFlight(c, unit, before, "lat", self.t + c.alpha_s)
                started = True
        return started

    def step(self) -> bool:
        """Advance to the next event; False when nothing is left."""
        progressed, blocked = True, False
        while progressed:
            progressed, blocked = self.start_compute()
            progressed = self.launch() or progressed
        busy = {q: cur for q, cur in self.running.items() if cur is not None}
        moving = frozenset(cur.coll.group for cur in busy.values() if cur.phase == "bw")
        rate = {q: cur.coll.rate * self.keep(cur.coll.group, moving)
                for q, cur in busy.items() if cur.phase == "bw"}
        finish = {q: cur.value if cur.phase == "lat" else self.t + cur.value / rate[q]
                  for q, cur in busy.items()}
        speed = max(1.0 - self.sm_per_cta * sum(cur.coll.ctas for cur in busy.values()), 1e-3)
        comp_end = None if self.comp_left is None else self.t + self.comp_left / speed
        events = list(finish.values()) + ([comp_end] if comp_end is not None else [])
        if not events:
            return False
        t, t_next = self.t, min(events)
        self.held += (t_next - t) * blocked
        self.overlap += (t_next - t) * (len({c.coll.role for c in busy.values()}) == 2)
        self.shared += (t_next - t) * (len({c.coll.role for c in busy.values()
                                            if c.phase == "bw"}) == 2)
        for q, cur in busy.items():
            if finish[q] > t_next:
                if cur.phase == "bw":
                    cur.value = max(cur.value - rate[q] * (t_next - t), 0.0)
            elif cur.phase == "lat" and cur.coll.volume > 0:
                cur.phase, cur.value = "bw", cur.coll.volume
            else:
                self.running[q] = None
                self.waiting[cur.unit] -= cur.before
        if self.comp_left is not None and comp_end is not None:
            self.comp_left = 0.0 if comp_end <= t_next else \
                self.comp_left - speed * (t_next - t)
        self.t = t_next
        if self.comp_left is not None and self.comp_left <= 0.0:
            self.issue(self.units[self.nxt].after, self.nxt, False)
            self.nxt += 1
            self.comp_left = self.comp_seq = None
        return True


def run_units(units: Sequence[Unit], queue_of: Mapping[str, str],
              keep: Callable[[str, frozenset[str]], float], *, sm_per_cta: float = 0.0,
              single_queue: bool = False) -> Timeline:
    """Discrete-event run of ``units`` on one rank.

    ``queue_of`` maps a group kind to its communicator (one FIFO each);
    ``keep(group, moving)`` is the share of its alone rate a collective on
    ``group`` keeps while the groups ``moving`` move data; ``sm_per_cta`` the
    share of the SMs one CTA holds; ``single_queue`` launches kernels in issue
    order, compute included. The earliest event completes exactly at its time,
    so the loop always advances.
    """
    e = _Engine(units, queue_of, keep, sm_per_cta, single_queue)
    while e.step():
        pass
    if e.nxt < len(units) or any(e.queues.values()):  # pragma: no cover - guards the loop
        raise RuntimeError("overlap model stopped early")
    total = sum(u.compute_s for u in units)
    return Timeline(step_s=e.t, compute_s=total, exposed_s=max(e.t - total, 0.0),
                    overlap_s=e.overlap, shared_s=e.shared, held_s=e.held)


# ------------------------------------------------------------------ the two-collective model
@dataclass(frozen=True)
class OpCost:
    """One collective for one group: latency part, bytes on the wire per rank,
    and the ring rate (bytes/s) alone and while the other queue moves data."""

    alpha_s: float
    volume_bytes: float
    rate_alone: float
    rate_shared: float

    def alone_s(self) -> float:
        return self.alpha_s + (self.volume_bytes / self.rate_alone if self.volume_bytes else 0.0)


@dataclass(frozen=True)
class OpsResult:
    one: Timeline
    separate: Timeline

    @property
    def gain_s(self) -> float:
        return self.one.step_s - self.separate.step_s


def simulate_ops(layers: int, compute_s: float, rs: OpCost, ag: OpCost, *,
                 sm_fraction: float = 0.0, single_queue: bool = False) -> OpsResult:
    """Backward pass of ``layers`` equal layers (all-gather before each, prefetch of one,
    reduce-scatter after each) on one communicator and on two; ``sm_fraction``: the
    share of the SMs one collective kernel holds."""
    c_ag = Coll("ag", "ag", ag.alpha_s, ag.volume_bytes, ag.rate_alone, 1)
    c_rs = Coll("rs", "rs", rs.alpha_s, rs.volume_bytes, rs.rate_alone, 1)
    units = [Unit(compute_s, (c_ag,), (c_rs,), i - 1) for i in range(layers)]
    shared = {"ag": ag.rate_shared / ag.rate_alone if ag.rate_alone else 1.0,
              "rs": rs.rate_shared / rs.rate_alone if rs.rate_alone else 1.0}

    def keep(group: str, moving: frozenset[str]) -> float:
        return shared[group] if len(moving) > 1 else 1.0

    return OpsResult(run_units(units, {"ag": "one", "rs": "one"}, keep, sm_per_cta=sm_fraction,
                               single_queue=single_queue),
                     run_units(units, {"ag": "ag", "rs": "rs"}, keep, sm_per_cta=sm_fraction,
                               single_queue=single_queue))


# ------------------------------------------------------------------ on a placed layout
@dataclass(frozen=True)
class Scenario:
    """One sharing assumption and the job's step with one / separate communicators."""

    name: str
    one_step_s: float
    separate_step_s: float
    one_held_s: float = 0.0       # slowest stage: compute held behind a queued collective
    separate_held_s: float = 0.0

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
    ag_used: bool = True     # whether the schedule uses the all-gather group at all
    has_traffic: bool = True

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
        if not self.has_traffic:
            return ("nothing to overlap: the data-parallel groups have one rank (no collective "
                    f"traffic); the all-gather group would cost {mem}")
        if not self.ag_used:
            return ("no effect: the distributed optimizer gathers parameters on its "
                    "reduce-scatter group (only Megatron-FSDP uses the all-gather group); "
                    f"the flag only costs {mem}")
        lo, hi = self.gain_range_pct
        rng = f"{lo:+.1f}% to {hi:+.1f}% of the step" if abs(hi - lo) >= 0.05 \
            else f"{lo:+.1f}% of the step"
        eps = 0.05
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
            return (f"may hurt: {rng} depending on what the communicators share, for {mem}")
        if hi > eps:
            return f"may help: {rng} depending on what the communicators share, for {mem}"
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
            "cost_classes": self.cost_classes, "verdict": self.verdict}


_ROLE_NAMES = {"dense_ag": "dense all-gather", "dense_rs": "dense reduce-scatter",
               "exp_ag": "expert all-gather", "exp_rs": "expert reduce-scatter"}
_COLL = {"ag": "all_gather", "rs": "reduce_scatter"}



def _significant(x: np.ndarray, digits: int) -> np.ndarray:
    """``x`` rounded to ``digits`` significant digits (for grouping equal costs)."""
    mag = np.where(x > 0, 10.0 ** np.floor(np.log10(np.where(x > 0, x, 1.0))), 1.0)
    return np.round(x / mag, digits - 1) * mag


def _inverse(groups: np.ndarray, first_rank: int, world: int, kind: str) -> np.ndarray:
    inv = np.full(world, -1, dtype=np.int64)
    inv[groups.ravel() - first_rank] = np.repeat(np.arange(groups.shape[0]), groups.shape[1])
    if (inv < 0).any():
        raise TopologyError(f"{kind} groups do not cover every rank; pick a kind that partitions "
                            "the world (dp_cp, dp, ep_dp, ...)")
    return inv


def _same_ranks(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two group kinds partition the ranks into the same sets."""
    return a.shape == b.shape and {frozenset(map(int, r)) for r in a} == \
        {frozenset(map(int, r)) for r in b}


def dp_buckets(unit_params: Sequence[float], bucket_params: float) -> list[list[int]]:
    """Megatron's buckets over one chunk's units (indices in forward order): filled in
    backward order, closed once they hold ``bucket_params`` (units are not split).

    >>> dp_buckets([5, 5, 5, 5], 8)
    [[2, 3], [0, 1]]
    """
    out: list[list[int]] = []
    cur: list[int] = []
    total = 0.0
    for i in reversed(range(len(unit_params))):
        if unit_params[i] <= 0:
            continue
        cur.insert(0, i)
        total += unit_params[i]
        if total >= bucket_params:
            out.append(cur)
            cur, total = [], 0.0
    if cur:
        out.append(cur)
    return out


def _check_number(name: str, value, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        raise TopologyError(f"--{name.replace('_', '-')} must be a number "
                            f"{'> 0' if positive else '>= 0'}, got {value!r}")


# ------------------------------------------------------------------ compute per unit
def _is_layer(slot) -> bool:
    return slot.name.startswith("layer")


def compute_times(stages: Sequence[StageWork], spec, *, compute_ms: float | None,
                  mfu: float | None, peak_tflops: float | None
                  ) -> tuple[dict[tuple[int, int], float], str]:
    """Forward seconds of every (stage, unit) and a line saying where they come from."""
    if (compute_ms is None) == (mfu is None):
        raise TopologyError(
            "give the compute time once: --compute-ms (one layer's backward) or --mfu, not both"
            if compute_ms is not None else
            "no compute time: give --compute-ms (one layer's backward, ms) or --mfu with a "
            "model description and tokens (--micro-batch-size, --seq-length)")
    flops = [s.forward_flops for st in stages for s in st.slots if _is_layer(s)]
    known = bool(flops) and all(f > 0 for f in flops)
    if compute_ms is not None:
        _check_number("compute_ms", compute_ms)
        layer_fwd = compute_ms * 1e-3 / BACKWARD_OVER_FORWARD
        mean = sum(flops) / len(flops) if known else 0.0
        fwd = {(st.stage, k): (layer_fwd * s.forward_flops / mean if known else
                               layer_fwd if _is_layer(s) else 0.0)
               for st in stages for k, s in enumerate(st.slots)}
        return fwd, (f"given: {compute_ms:g} ms backward per transformer layer, forward half "
                     "of it" + ("; embedding/output layer and other layers scaled by their "
                                "FLOPs" if known else ""))
    if isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not 0 < mfu <= 1:
        raise TopologyError(f"--mfu must be in (0, 1] (a fraction of the GPU's peak), got "
                            f"{mfu!r}")
    peak = peak_tflops if peak_tflops is not None else spec.node.peak_bf16_tflops
    if peak is None:
        raise TopologyError(f"topology {spec.name!r} gives no [node] peak_bf16_tflops; give "
                            "--peak-tflops or --compute-ms")
    _check_number("peak_tflops", peak, positive=True)
    if not known:
        raise TopologyError("--mfu needs FLOPs: give a model description (--model-config or "
                            "--hidden-size ...) and --micro-batch-size with --seq-length; with "
                            "--model-bytes give --compute-ms")
    rate = peak * 1e12 * mfu
    fwd = {(st.stage, k): s.forward_flops / rate for st in stages
           for k, s in enumerate(st.slots)}
    src = "given" if peak_tflops is not None else f"topology {spec.name!r}"
    return fwd, (f"from FLOPs at MFU {mfu:g} of {peak:g} TFLOP/s dense BF16 ({src}); "
                 f"backward {BACKWARD_OVER_FORWARD:g}x forward")


# ------------------------------------------------------------------ groups and prices
@dataclass(frozen=True)
class _Groups:
    """Which layout group each collective role runs on, and the communicators (queues)
    with one and with separate all-gather communicators."""

    kind: dict[str, str]            # role label -> layout group kind
    groups: dict[str, np.ndarray]   # role label -> group rows
    one_q: dict[str, str]
    sep_q: dict[str, str]


def _job_groups(layout, stages: Sequence[StageWork], schedule: str, rs_kind: str,
                ag_kind: str | None) -> _Groups:
    kinds = tuple(layout.kinds)
    present = ", ".join(k for k in kinds if not k.endswith("_gloo"))

    def need(kind: str) -> np.ndarray:
        if kind not in kinds:
            raise TopologyError(f"the layout has no {kind!r} groups; kinds present: {present}")
        return np.asarray(layout.groups(kind), dtype=np.int64)

    rs = need(rs_kind)
    if schedule == "dist-opt" and ag_kind not in (None, rs_kind):
        raise TopologyError(f"--ag-kind {ag_kind}: the distributed optimizer gathers "
                            f"parameters on its reduce-scatter group ({rs_kind}); drop "
                            "--ag-kind or use --schedule fsdp")
    twin = f"{rs_kind}_ag" if f"{rs_kind}_ag" in kinds else rs_kind
    dense_ag = rs_kind if schedule == "dist-opt" else ag_kind or twin
    ag = need(dense_ag)
    if not _same_ranks(rs, ag):
        raise TopologyError(f"--ag-kind {dense_ag}: the all-gather must run over the "
                            f"reduce-scatter group's ranks ({rs_kind} groups of {rs.shape[1]}), "
                            f"but {dense_ag} groups have other ranks; use {rs_kind}_ag "
                            f"(create_all_gather_group) or {rs_kind}")
    kind = {"dense_rs": rs_kind, "dense_ag": dense_ag}
    groups = {"dense_rs": rs, "dense_ag": ag}
    if any(st.expert_bytes > 0 for st in stages):
        kind["exp_rs"] = "ep_dp"
        kind["exp_ag"] = "ep_dp_ag" if schedule == "fsdp" and "ep_dp_ag" in kinds else "ep_dp"
        groups.update(exp_rs=need("ep_dp"), exp_ag=need(kind["exp_ag"]))
    # one communicator per layout group; "separate": each all-gather on its own (fsdp; the
    # expert one only where the profile has an expert all-gather group, 0.18+)
    one_q = {lab: k.removesuffix("_ag") for lab, k in kind.items()}
    sep_q = dict(one_q)
    profile = getattr(layout, "profile", None)
    if schedule == "fsdp":
        sep_q["dense_ag"] = "dense_ag"
        if "exp_ag" in kind and (profile is None or bool(profile.expert_all_gather)):
            sep_q["exp_ag"] = "exp_ag"
    return _Groups(kind, groups, one_q, sep_q)


@dataclass
class _Kind:
    """One role's rings on the cluster, ring classes and NCCL prices (mutable cache)."""

    groups: np.ndarray
    rings: Rings
    conc: np.ndarray
    inv: np.ndarray
    keep: dict = field(default_factory=dict)      # frozenset(labels) -> per-ring share
    ring_class: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    class_first: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    prices: dict = field(default_factory=dict)


class _Pricer:
    """Rings of every role with traffic, their link shares while other roles move data
    (max-min over every subset of roles), rank classes, and NCCL's price per size."""

    def __init__(self, layout, placement: Placement, jg: _Groups, *, collnet: bool,
                 nccl: str):
        self.cluster = placement.cluster
        self.collnet, self.nccl = collnet, nccl
        world, first = int(layout.world_size), int(layout.rank_offset)
        self.info: dict[str, _Kind] = {}
        for lab, g in jg.groups.items():
            if g.shape[1] > 1:
                r = build_rings(self.cluster, placement.device_of(g))
                self.info[lab] = _Kind(g, r, r.concurrent_gb_per_s(),
                                       _inverse(g, first, world, jg.kind[lab]))
        labels = list(self.info)
        for n_sub in range(2, len(labels) + 1):
            for sub in itertools.combinations(labels, n_sub):
                self._share(sub)
        for k in self.info.values():
            self._classes(k)

    def _share(self, sub: tuple[str, ...]) -> None:
        rings = [self.info[lab].rings for lab in sub]
        offs = [0]
        for r in rings:
            offs.append(offs[-1] + r.n_rings)
        flows = [r.flow + o for r, o in zip(rings, offs, strict=False)]
        rates = maxmin_rates(np.concatenate(flows), np.concatenate([r.link for r in rings]),
                             np.concatenate([r.weight for r in rings]), self.cluster.capacity,
                             int(offs[-1]))
        for lab, r, o in zip(sub, rings, offs, strict=False):
            conc = self.info[lab].conc
            with np.errstate(divide="ignore", invalid="ignore"):
                self.info[lab].keep[frozenset(sub)] = np.where(
                    np.isfinite(conc), rates[o:o + r.n_rings] / conc, 1.0)

    def _classes(self, k: _Kind) -> None:
        r = k.rings
        domains = np.array([np.unique(self.cluster.domain_of(d)).size for d in r.devices])
        cols = [domains, _significant(np.where(np.isfinite(k.conc), k.conc, 0.0), 9),
                _significant(np.where(np.isfinite(r.net_gb_per_s), r.net_gb_per_s, 0.0), 9),
                r.step_latency_us] + [_significant(v, 9) for v in k.keep.values()]
        _, k.class_first, inv = np.unique(np.stack(cols, axis=1), axis=0, return_index=True,
                                          return_inverse=True)
        k.ring_class = np.asarray(inv).ravel()

    def combos(self, ranks: np.ndarray) -> list[dict[str, int]]:
        """The distinct (ring class per role) rows of ``ranks`` (0-based)."""
        if not self.info:
            return [{}]
        cols = np.stack([k.ring_class[k.inv[ranks]] for k in self.info.values()], axis=1)
        return [dict(zip(self.info, map(int, row), strict=False))
                for row in np.unique(cols, axis=0)]

    def price(self, lab: str, cls: int, role: str, size: float):
        """(NCCL's estimate, the group shape) for one call of ``role`` of ``size`` bytes."""
        k = self.info[lab]
        key = (cls, role, round(size))
        if key not in k.prices:
            i = int(k.class_first[cls])
            shape = shape_of(self.cluster, k.rings, i, rate_gb_per_s=float(k.conc[i]),
                             collnet=self.collnet)
            k.prices[key] = (choose(shape, _COLL[role], size, nccl=self.nccl), shape)
        return k.prices[key]

    def coll(self, combo: dict[str, int], lab: str, size: float) -> Coll | None:
        if lab not in self.info or size <= 0:
            return None
        role = lab.split("_")[1]
        est: Estimate = self.price(lab, combo[lab], role, size)[0]
        # latency part: NCCL's latency plus the pipeline fill (time_us = both + size / bw)
        return Coll(role, lab, (est.latency_us + est.ramp_us) * 1e-6, size,
                    est.algbw_gb_per_s * 1e9, int(est.n_channels))

    def keep_fn(self, combo: dict[str, int]) -> Callable[[str, frozenset[str]], float]:
        cache: dict = {}

        def keep(lab: str, moving: frozenset[str]) -> float:
            sub = frozenset(m for m in moving if m in self.info)
            if len(sub) < 2 or lab not in self.info:
                return 1.0
            if (lab, sub) not in cache:
                k = self.info[lab]
                cache[(lab, sub)] = float(k.keep[sub][int(k.class_first[combo[lab]])])
            return cache[(lab, sub)]
        return keep


# ------------------------------------------------------------------ the schedules
@dataclass(frozen=True)
class _Sched:
    schedule: str
    grad_scale: float
    bytes_per_param: float
    bucket_params: float
    opt_step: bool


def _fsdp_units(st: StageWork, fwd: list[float], combo, pr: _Pricer, s: _Sched) -> list[Unit]:
    def pair(a: str, b: str, scale: float, slot) -> tuple[Coll, ...]:
        return tuple(c for c in (pr.coll(combo, a, slot.dense_bytes * scale),
                                 pr.coll(combo, b, slot.expert_bytes * scale)) if c)
    ag = [pair("dense_ag", "exp_ag", 1.0, slot) for slot in st.slots]
    rs = [pair("dense_rs", "exp_rs", s.grad_scale, slot) for slot in st.slots]
    n = len(st.slots)
    units = [Unit(fwd[k], ag[k], (), k - 1) for k in range(n)]
    for k in reversed(range(n)):
        units.append(Unit(fwd[k] * BACKWARD_OVER_FORWARD, ag[k], rs[k], len(units) - 1))
    return units


def _dist_opt_units(st: StageWork, fwd: list[float], combo, pr: _Pricer,
                    s: _Sched) -> list[Unit]:
    n = len(st.slots)
    before: list[list[tuple[Coll, int]]] = [[] for _ in range(n)]
    after: list[list[Coll]] = [[] for _ in range(n)]
    chunks = sorted({slot.chunk for slot in st.slots})
    chunk_first = {c: min(k for k, slot in enumerate(st.slots) if slot.chunk == c)
                   for c in chunks}
    for kind, attr in (("dense", "dense_bytes"), ("exp", "expert_bytes")):
        prev_head = -1
        for c in chunks:
            idx = [k for k, slot in enumerate(st.slots) if slot.chunk == c]
            sizes = [getattr(st.slots[k], attr) for k in idx]
            for b in reversed(dp_buckets([x / s.bytes_per_param for x in sizes],
                                         s.bucket_params)):
                members = [idx[j] for j in b]
                size = sum(getattr(st.slots[k], attr) for k in members)
                head = min(members)
                # dispatch: every chunk in the optimizer step; chunks 0, 1 at the start and
                # chunk c when chunk c-1 starts (interleaved); else when the previous bucket
                # is waited for
                when = -1 if s.opt_step else (-1 if c < 2 else chunk_first[c - 1]) \
                    if len(chunks) > 1 else prev_head
                prev_head = head
                if a := pr.coll(combo, f"{kind}_ag", size):
                    before[head].append((a, when))
                if r := pr.coll(combo, f"{kind}_rs", size * s.grad_scale):
                    after[head].append(r)
    units = [Unit(fwd[k], tuple(c for c, _ in before[k]), (), tuple(w for _, w in before[k]))
             for k in range(n)]
    units += [Unit(fwd[k] * BACKWARD_OVER_FORWARD, (), tuple(after[k]))
              for k in reversed(range(n))]
    return units


def _scenarios(sms: int | None, queue: bool) -> list[tuple[str, float, bool]]:
    out = [("links shared", 0.0, False)]
    if sms:
        out.append(("links + SMs", 1.0 / sms, False))
    if queue:
        out.append(("links + SMs + one launch queue" if sms else "links + one launch queue",
                    1.0 / sms if sms else 0.0, True))
    return out


NO_QUEUE_FSDP = ("one launch queue (CUDA_DEVICE_MAX_CONNECTIONS=1) is not a scenario for fsdp: "
                 "Megatron-LM refuses it with Megatron-FSDP ('FSDP requires "
                 "CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset', megatron/training/arguments.py:1166 "
                 "at d98e8a6); --one-launch-queue models it anyway")


def _collective_rows(units: Sequence[Unit], combo, pr: _Pricer, jg: _Groups,
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
                     for e in tune(shape, _COLL[role], nccl=nccl).all_estimates(size))
        rows.append(CollRow(_ROLE_NAMES[lab], jg.kind[lab], int(pr.info[lab].groups.shape[1]),
                            size, est.pick, int(est.n_channels), est.time_us * 1e-6, count,
                            (est.latency_us + est.ramp_us) * 1e-6, shape.describe(), opts,
                            tuple(debug_lines(shape, _COLL[role], nccl=nccl))))
    return tuple(rows)


def _queue_note(scenarios: Sequence[Scenario], schedule: str) -> str:
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


def _unknowns(spec, has_expert: bool, hbm: float | None) -> tuple[str, ...]:
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


def _memories(layout, spec, crow: Sequence[CollRow], combo, pr: _Pricer, nccl: str,
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
        rows = [c for c in crow if c.what == _ROLE_NAMES[lab]] if lab in pr.info else []
        algos = tuple(dict.fromkeys(c.pick.split("/")[0] for c in rows))
        shape = pr.price(lab, combo[lab], "ag", rows[0].size_bytes)[1] if rows else None
        mem = comm_memory(inputs or CommMemoryInputs(algos=algos, protocols=protocols),
                          nvls_capable=spec.scale_up.nvls, nccl=nccl, shape=shape)
        out.append((kind, mem.total_mb))
        use = f"runs {', '.join(algos)}" if algos else "no traffic here: init structures only"
        lines.append(f"{kind} ({use}): " + "; ".join(mem.lines()))
    return tuple(out), tuple(lines)


def _check_inputs(cfg, schedule: str, grad_scale: float, bytes_per_param: float,
                  comm_memory_mb: float | None, opt_step: bool, vpp: int = 1) -> None:
    if schedule not in SCHEDULES:
        raise TopologyError(f"unknown --schedule {schedule!r}; expected one of "
                            f"{', '.join(SCHEDULES)}")
    _check_number("grad_scale", grad_scale)
    if comm_memory_mb is not None:
        _check_number("comm_memory_mb", comm_memory_mb)
    _check_number("bytes_per_param", bytes_per_param, positive=True)
    if opt_step:
        if schedule != "dist-opt":
            raise TopologyError("--overlap-param-gather-with-optimizer-step belongs to "
                                "--schedule dist-opt")
        if vpp < 2 or int(cfg.pipeline_model_parallel_size) < 2:
            raise TopologyError("--overlap-param-gather-with-optimizer-step needs interleaved "
                                "pipelining (Megatron: 'only supported with interleaved "
                                "pipeline parallelism'); give --pp >= 2 and --vpp >= 2, or "
                                "drop it")


def simulate(layout, placement: Placement, *, stages: Sequence[StageWork],
             schedule: str = "fsdp", compute_ms: float | None = None,
             mfu: float | None = None, peak_tflops: float | None = None,
             grad_scale: float = 1.0, bytes_per_param: float = 2.0, rs_kind: str = "dp_cp",
             ag_kind: str | None = None, comm_memory_mb: float | None = None,
             collnet: bool = False, memory_inputs: CommMemoryInputs | None = None,
             nccl: str = DEFAULT_NCCL, param_gather_with_optimizer_step: bool = False,
             bucket_params: float | None = None,
             launch_queue: bool | None = None) -> OverlapReport:
    """Run the step model for ``stages`` (:func:`.workload.job_stages`) of a placed layout.

    Compute: ``compute_ms`` is one transformer layer's backward (forward half of it;
    other units by their FLOPs where known), or it comes from the units' FLOPs at
    ``mfu`` of ``peak_tflops`` (default: the topology's ``[node] peak_bf16_tflops``);
    exactly one of the two. ``grad_scale``: gradient bytes per parameter byte
    (2 for fp32 gradients of bf16 parameters). ``ag_kind``: the dense all-gather's
    group kind (fsdp; default the ``<rs_kind>_ag`` twin when the layout has it);
    it must have the reduce-scatter group's ranks. ``bucket_params``: dist-opt's
    bucket size (default ``max(40M, 1M x dp)``, ``distributed_data_parallel.py:131-134``,
    dp without CP, ``process_groups_config.py:581``). ``launch_queue``: add the
    one-launch-queue scenario (default: for dist-opt only, see above).
    """
    cfg = layout.config
    spec = placement.cluster.spec
    # virtual chunks: --vpp, or what a pipeline_model_parallel_layout string gave the stages
    vpp = max(int(cfg.virtual_pipeline_model_parallel_size or 1),
              max((len(st.layers) for st in stages), default=1))
    _check_inputs(cfg, schedule, grad_scale, bytes_per_param, comm_memory_mb,
                  param_gather_with_optimizer_step, vpp)
    nccl = nccl_version(nccl)
    fwd, how = compute_times(stages, spec, compute_ms=compute_ms, mfu=mfu,
                             peak_tflops=peak_tflops)
    jg = _job_groups(layout, stages, schedule, rs_kind, ag_kind)
    pr = _Pricer(layout, placement, jg, collnet=collnet, nccl=nccl)
    dp = jg.groups["dense_rs"].shape[1] // max(int(cfg.context_parallel_size), 1)
    sched = _Sched(schedule, grad_scale, bytes_per_param,
                   bucket_params if bucket_params is not None else max(4e7, 1e6 * dp),
                   param_gather_with_optimizer_step)
    build = _fsdp_units if schedule == "fsdp" else _dist_opt_units
    pp_groups = np.asarray(layout.groups("pp"), dtype=np.int64)
    combos = {st.stage: pr.combos(pp_groups[:, st.stage] - int(layout.rank_offset))
              for st in stages}
    units = {(st.stage, j): build(st, [fwd[(st.stage, k)] for k in range(len(st.slots))],
                                  c, pr, sched)
             for st in stages for j, c in enumerate(combos[st.stage])}
    scen = _scenarios(spec.node.sms, schedule == "dist-opt" if launch_queue is None
                      else bool(launch_queue))
    results: dict[str, dict[int, tuple[Timeline, Timeline, int]]] = {}
    for name, sm, single in scen:
        results[name] = {}
        for st in stages:
            runs = []
            for j, combo in enumerate(combos[st.stage]):
                keep = pr.keep_fn(combo)
                one = run_units(units[(st.stage, j)], jg.one_q, keep, sm_per_cta=sm,
                                single_queue=single)
                sep = one if jg.sep_q == jg.one_q else run_units(
                    units[(st.stage, j)], jg.sep_q, keep, sm_per_cta=sm, single_queue=single)
                runs.append((one, sep, j))
            slow = max(runs, key=lambda r: r[0].step_s)
            results[name][st.stage] = (slow[0], max((r[1] for r in runs),
                                                    key=lambda t: t.step_s), slow[2])
    base = results[scen[0][0]]
    rows = tuple(StageRow(st.stage, tuple(len(r) for r in st.layers),
                          min((r.start for r in st.layers if len(r)), default=0),
                          st.dense_bytes, st.expert_bytes,
                          sum(fwd[(st.stage, k)] for k in range(len(st.slots))),
                          BACKWARD_OVER_FORWARD * sum(fwd[(st.stage, k)]
                                                      for k in range(len(st.slots))),
                          base[st.stage][0], base[st.stage][1]) for st in stages)
    scenarios = tuple(Scenario(name, max(v[0].step_s for v in results[name].values()),
                               max(v[1].step_s for v in results[name].values()),
                               max(v[0].held_s for v in results[name].values()),
                               max(v[1].held_s for v in results[name].values()))
                      for name, _, _ in scen)
    worst = max(range(len(rows)), key=lambda i: rows[i].one.step_s)
    w_st, w_j = stages[worst].stage, base[stages[worst].stage][2]
    w_combo = combos[w_st][w_j]
    crow = _collective_rows(units[(w_st, w_j)], w_combo, pr, jg, nccl)
    tot = sum(c.alone_s * c.count for c in crow)
    latency_share = sum(c.latency_s * c.count for c in crow) / tot if tot else 0.0
    keep = pr.keep_fn(w_combo)
    slowdown = max((1.0 / max(keep(lab, frozenset(pr.info)), 1e-12) for lab in pr.info),
                   default=1.0)
    memories, mem_lines = _memories(layout, spec, crow, w_combo, pr, nccl, comm_memory_mb,
                                    memory_inputs)
    hbm = None
    if spec.node.hbm_gb_per_s and crow:
        wire = max(c.size_bytes / max(c.alone_s, 1e-12) for c in crow)
        hbm = 2 * wire * HBM_BYTES_PER_WIRE_BYTE / (spec.node.hbm_gb_per_s * 1e9)
    notes = [_queue_note(scenarios, schedule)]
    if schedule == "dist-opt":
        notes.append(f"buckets of >= {sched.bucket_params:.3g} parameters, filled in backward "
                     "order per model chunk (dense and expert buffers apart)")
    return OverlapReport(
        schedule=schedule, nccl=nccl, compute_how=how, groups=dict(jg.kind), stages=rows,
        worst_stage=worst, collectives=crow, scenarios=scenarios,
        comm_memories=memories, cost_classes=sum(len(v) for v in combos.values()),
        memory_lines=mem_lines,
        notes=tuple(notes), unknowns=_unknowns(spec, "exp_rs" in jg.kind, hbm), hbm_share=hbm,
        latency_share=latency_share, shared_slowdown=slowdown,
        ag_used=schedule == "fsdp", has_traffic=bool(crow))
