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
- *one launch queue*: with ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (Megatron's
  setting) every stream feeds one hardware queue in issue order: a collective
  waiting for its communicator's previous collective holds back every later
  kernel, *compute included* (the unit's compute is issued after the prefetch
  of the next unit's all-gather).

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
from .nccl_model import DEFAULT_NCCL, Estimate, choose, nccl_version, tune
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


def run_units(units: Sequence[Unit], queue_of: Mapping[str, str],  # noqa: C901
              keep: Callable[[str, frozenset[str]], float], *, sm_per_cta: float = 0.0,
              single_queue: bool = False) -> Timeline:
    """Discrete-event run of ``units`` on one rank.

    ``queue_of`` maps a group kind to its communicator (one FIFO each);
    ``keep(group, moving)`` is the share of its alone rate a collective on
    ``group`` keeps while the groups ``moving`` move data. The earliest event
    completes exactly at its time, so the loop always advances.
    """
    queues: dict[str, deque[tuple[Coll, int, int, bool]]] = {
        q: deque() for q in dict.fromkeys(queue_of.values())}
    running: dict[str, _InFlight | None] = {q: None for q in queues}
    n = len(units)
    waiting = [len(u.before) for u in units]
    issue_at: dict[int, list[tuple[Coll, int]]] = {}
    for i, u in enumerate(units):
        iw = u.issue_with if isinstance(u.issue_with, tuple) else (u.issue_with,) * len(u.before)
        for c, j in zip(u.before, iw, strict=False):
            issue_at.setdefault(j if j < i else i - 1, []).append((c, i))
    seq = itertools.count()
    t = 0.0
    nxt = 0
    comp_left: float | None = None
    comp_seq: int | None = None
    overlap = shared_time = held = 0.0

    def issue(colls, unit, before):
        for c in colls:
            queues[queue_of[c.group]].append((c, unit, next(seq), before))

    for c, j in issue_at.get(-1, []):
        issue((c,), j, True)
    while True:
        progressed = True
        blocked = False
        while progressed:
            progressed = False
            blocked = False
            if comp_left is None and nxt < n and waiting[nxt] == 0:
                if comp_seq is None:
                    for c, j in issue_at.get(nxt, []):
                        issue((c,), j, True)
                    comp_seq = next(seq)
                    progressed = True
                blocked = single_queue and any(qq and qq[0][2] < comp_seq
                                               for qq in queues.values())
                if not blocked:
                    comp_left = units[nxt].compute_s
                    progressed = True
            first = min((qq[0][2] for qq in queues.values() if qq), default=None)
            for q, queue in queues.items():
                if running[q] is None and queue and (not single_queue or queue[0][2] == first):
                    c, unit, _, before = queue.popleft()
                    running[q] = _InFlight(c, unit, before, "lat", t + c.alpha_s)
                    progressed = True
        busy = {q: cur for q, cur in running.items() if cur is not None}
        moving = frozenset(cur.coll.group for cur in busy.values() if cur.phase == "bw")
        rate = {q: cur.coll.rate * keep(cur.coll.group, moving)
                for q, cur in busy.items() if cur.phase == "bw"}
        finish = {q: cur.value if cur.phase == "lat" else t + cur.value / rate[q]
                  for q, cur in busy.items()}
        speed = max(1.0 - sm_per_cta * sum(cur.coll.ctas for cur in busy.values()), 1e-3)
        comp_end = None if comp_left is None else t + comp_left / speed
        events = list(finish.values()) + ([comp_end] if comp_end is not None else [])
        if not events:
            break
        t_next = min(events)
        if blocked:
            held += t_next - t
        roles = {cur.coll.role for cur in busy.values()}
        if len(roles) == 2:
            overlap += t_next - t
        if len({cur.coll.role for cur in busy.values() if cur.phase == "bw"}) == 2:
            shared_time += t_next - t
        for q, cur in busy.items():
            if finish[q] > t_next:
                if cur.phase == "bw":
                    cur.value = max(cur.value - rate[q] * (t_next - t), 0.0)
            elif cur.phase == "lat" and cur.coll.volume > 0:
                cur.phase, cur.value = "bw", cur.coll.volume
            else:
                running[q] = None
                if cur.before:
                    waiting[cur.unit] -= 1
        if comp_left is not None and comp_end is not None:
            comp_left = 0.0 if comp_end <= t_next else comp_left - speed * (t_next - t)
        t = t_next
        if comp_left is not None and comp_left <= 0.0:
            issue(units[nxt].after, nxt, False)
            nxt += 1
            comp_left = comp_seq = None
    if nxt < n or any(queues.values()):  # pragma: no cover - guards the event loop
        raise RuntimeError("overlap model stopped early")
    total = sum(u.compute_s for u in units)
    return Timeline(step_s=t, compute_s=total, exposed_s=max(t - total, 0.0),
                    overlap_s=overlap, shared_s=shared_time, held_s=held)


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
    extra_communicators: int
    comm_memory_mb: float
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
    def extra_memory_mb(self) -> float:
        return self.extra_communicators * self.comm_memory_mb

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
            "comm_memory_mb": self.comm_memory_mb, "extra_memory_mb": self.extra_memory_mb,
            "memory_lines": list(self.memory_lines), "notes": list(self.notes),
            "unknowns": list(self.unknowns), "hbm_share": self.hbm_share,
            "latency_share": self.latency_share, "shared_slowdown": self.shared_slowdown,
            "cost_classes": self.cost_classes, "verdict": self.verdict}


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


@dataclass
class _Kind:
    """One group kind's rings on the cluster, ring classes and NCCL prices (mutable cache)."""

    name: str
    groups: np.ndarray
    rings: Rings
    conc: np.ndarray
    inv: np.ndarray
    keep: dict = field(default_factory=dict)      # frozenset(kinds) -> per-ring share
    ring_class: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    class_first: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    prices: dict = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(self.groups.shape[1])


def _same_ranks(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    return bool((np.sort(np.sort(a, axis=1), axis=0) == np.sort(np.sort(b, axis=1),
                                                                 axis=0)).all()) and \
        {tuple(r) for r in np.sort(a, axis=1)} == {tuple(r) for r in np.sort(b, axis=1)}


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


_ROLE_NAMES = {"dense_ag": "dense all-gather", "dense_rs": "dense reduce-scatter",
               "exp_ag": "expert all-gather", "exp_rs": "expert reduce-scatter"}
_COLL = {"ag": "all_gather", "rs": "reduce_scatter"}


def _check_number(name: str, value, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        raise TopologyError(f"--{name.replace('_', '-')} must be a number "
                            f"{'> 0' if positive else '>= 0'}, got {value!r}")


def simulate(layout, placement: Placement, *, stages: Sequence[StageWork],  # noqa: C901
             schedule: str = "fsdp", compute_ms: float | None = None,
             mfu: float | None = None, peak_tflops: float | None = None,
             grad_scale: float = 1.0, bytes_per_param: float = 2.0, rs_kind: str = "dp_cp",
             ag_kind: str | None = None, comm_memory_mb: float | None = None,
             collnet: bool = False, memory_inputs: CommMemoryInputs | None = None,
             nccl: str = DEFAULT_NCCL, param_gather_with_optimizer_step: bool = False,
             bucket_params: float | None = None) -> OverlapReport:
    """Run the step model for ``stages`` (:func:`.workload.stage_work`) of a placed layout.

    Compute: ``compute_ms`` is one transformer layer's backward (forward half of it;
    other units by their FLOPs where known), or it comes from the units' FLOPs at
    ``mfu`` of ``peak_tflops`` (default: the topology's ``[node] peak_bf16_tflops``);
    exactly one of the two. ``grad_scale``: gradient bytes per parameter byte
    (2 for fp32 gradients of bf16 parameters). ``ag_kind``: the dense all-gather's
    group kind (fsdp; default the ``<rs_kind>_ag`` twin when the layout has it);
    it must have the reduce-scatter group's ranks.
    """
    if schedule not in SCHEDULES:
        raise TopologyError(f"unknown --schedule {schedule!r}; expected one of "
                            f"{', '.join(SCHEDULES)}")
    nccl = nccl_version(nccl)
    cfg = layout.config
    spec = placement.cluster.spec
    for name, value in (("grad_scale", grad_scale),) + (
            (("comm_memory_mb", comm_memory_mb),) if comm_memory_mb is not None else ()):
        _check_number(name, value)
    _check_number("bytes_per_param", bytes_per_param, positive=True)
    vpp = int(cfg.virtual_pipeline_model_parallel_size or 1)
    if param_gather_with_optimizer_step:
        if schedule != "dist-opt":
            raise TopologyError("--overlap-param-gather-with-optimizer-step belongs to "
                                "--schedule dist-opt")
        if vpp < 2 or int(cfg.pipeline_model_parallel_size) < 2:
            raise TopologyError("--overlap-param-gather-with-optimizer-step needs interleaved "
                                "pipelining (Megatron: 'only supported with interleaved "
                                "pipeline parallelism'); give --pp >= 2 and --vpp >= 2, or "
                                "drop it")
    # ---- compute per unit
    if (compute_ms is None) == (mfu is None):
        raise TopologyError("give the compute time: --compute-ms (one layer's backward) or "
                            "--mfu with a model description and tokens (--micro-batch-size, "
                            "--seq-length); not both" if compute_ms is not None else
                            "no compute time: give --compute-ms (one layer's backward, ms) or "
                            "--mfu with a model description and tokens (--micro-batch-size, "
                            "--seq-length)")
    layer_flops = [s.forward_flops for st in stages for s in st.slots
                   if s.name.startswith("layer")]
    if compute_ms is not None:
        _check_number("compute_ms", compute_ms)
        mean = sum(layer_flops) / len(layer_flops) if layer_flops else 0.0
        scale = (lambda f: compute_ms * 1e-3 / BACKWARD_OVER_FORWARD * f / mean) if mean > 0 \
            and all(f > 0 for f in layer_flops) else None
        fwd = {(st.stage, k): (scale(s.forward_flops) if scale else
                               compute_ms * 1e-3 / BACKWARD_OVER_FORWARD
                               if s.name.startswith("layer") else 0.0)
               for st in stages for k, s in enumerate(st.slots)}
        how = (f"given: {compute_ms:g} ms backward per transformer layer, forward half of it"
               + ("; embedding/output layer and uneven layers scaled by their FLOPs"
                  if scale else ""))
    else:
        assert mfu is not None
        if isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not 0 < mfu <= 1:
            raise TopologyError(f"--mfu must be in (0, 1] (a fraction of the GPU's peak), got "
                                f"{mfu!r}")
        peak = peak_tflops if peak_tflops is not None else spec.node.peak_bf16_tflops
        if peak is None:
            raise TopologyError(f"topology {spec.name!r} gives no [node] peak_bf16_tflops; "
                                "give --peak-tflops or --compute-ms")
        _check_number("peak_tflops", peak, positive=True)
        if not layer_flops or not all(f > 0 for f in layer_flops):
            raise TopologyError("--mfu needs FLOPs: give a model description (--model-config "
                                "or --hidden-size ...) and --micro-batch-size with "
                                "--seq-length; with --model-bytes give --compute-ms")
        rate = peak * 1e12 * mfu
        fwd = {(st.stage, k): s.forward_flops / rate for st in stages
               for k, s in enumerate(st.slots)}
        src = "given" if peak_tflops is not None else f"topology {spec.name!r}"
        how = (f"from FLOPs at MFU {mfu:g} of {peak:g} TFLOP/s dense BF16 ({src}); backward "
               f"{BACKWARD_OVER_FORWARD:g}x forward")
    # ---- groups
    kinds = tuple(layout.kinds)
    present = ", ".join(k for k in kinds if not k.endswith("_gloo"))
    if rs_kind not in kinds:
        raise TopologyError(f"the layout has no {rs_kind!r} groups; kinds present: {present}")
    if schedule == "dist-opt":
        if ag_kind not in (None, rs_kind):
            raise TopologyError(f"--ag-kind {ag_kind}: the distributed optimizer gathers "
                                f"parameters on its reduce-scatter group ({rs_kind}); drop "
                                "--ag-kind or use --schedule fsdp")
        dense_ag = rs_kind
    else:
        dense_ag = ag_kind or (f"{rs_kind}_ag" if f"{rs_kind}_ag" in kinds else rs_kind)
        if dense_ag not in kinds:
            raise TopologyError(f"the layout has no {dense_ag!r} groups; kinds present: "
                                f"{present}")
    world, first = int(layout.world_size), int(layout.rank_offset)
    g = {"dense_rs": np.asarray(layout.groups(rs_kind), dtype=np.int64),
         "dense_ag": np.asarray(layout.groups(dense_ag), dtype=np.int64)}
    if not _same_ranks(g["dense_rs"], g["dense_ag"]):
        raise TopologyError(f"--ag-kind {dense_ag}: the all-gather must run over the "
                            f"reduce-scatter group's ranks ({rs_kind} groups of "
                            f"{g['dense_rs'].shape[1]}), but {dense_ag} groups have other "
                            f"ranks; use {rs_kind}_ag (create_all_gather_group) or {rs_kind}")
    has_expert = any(st.expert_bytes > 0 for st in stages)
    profile = getattr(layout, "profile", None)
    expert_ag_group = profile is None or bool(profile.expert_all_gather)
    if has_expert:
        if "ep_dp" not in kinds:
            raise TopologyError(f"expert parameters need the layout's ep_dp groups; kinds "
                                f"present: {present}")
        g["exp_rs"] = np.asarray(layout.groups("ep_dp"), dtype=np.int64)
        exp_ag = "ep_dp_ag" if schedule == "fsdp" and "ep_dp_ag" in kinds else "ep_dp"
        g["exp_ag"] = np.asarray(layout.groups(exp_ag), dtype=np.int64)
    layout_kind = {"dense_rs": rs_kind, "dense_ag": dense_ag}
    if has_expert:
        layout_kind.update(exp_rs="ep_dp", exp_ag=exp_ag)
    # one communicator per layout group; "separate": the all-gather on its own (fsdp)
    one_q = {lab: layout_kind[lab].removesuffix("_ag") for lab in g}
    sep_q = dict(one_q)
    if schedule == "fsdp":
        sep_q["dense_ag"] = "dense_ag"
        if has_expert and expert_ag_group:
            sep_q["exp_ag"] = "exp_ag"
    # ---- rings, shares and classes
    cluster = placement.cluster
    labels = [lab for lab in g if g[lab].shape[1] > 1]
    info: dict[str, _Kind] = {}
    for lab in labels:
        r = build_rings(cluster, placement.device_of(g[lab]))
        info[lab] = _Kind(lab, g[lab], r, r.concurrent_gb_per_s(),
                          _inverse(g[lab], first, world, layout_kind[lab]))
    for n_sub in range(2, len(labels) + 1):
        for sub in itertools.combinations(labels, n_sub):
            rs_ = [info[lab].rings for lab in sub]
            offs = [0]
            for r_ in rs_:
                offs.append(offs[-1] + r_.n_rings)
            flows = [r.flow + o for r, o in zip(rs_, offs, strict=False)]
            rates = maxmin_rates(np.concatenate(flows),
                                 np.concatenate([r.link for r in rs_]),
                                 np.concatenate([r.weight for r in rs_]), cluster.capacity,
                                 int(offs[-1]))
            for lab, r, o in zip(sub, rs_, offs, strict=False):
                conc = info[lab].conc
                with np.errstate(divide="ignore", invalid="ignore"):
                    info[lab].keep[frozenset(sub)] = np.where(
                        np.isfinite(conc), rates[o:o + r.n_rings] / conc, 1.0)
    for lab in labels:
        k = info[lab]
        r = k.rings
        domains = np.array([np.unique(cluster.domain_of(d)).size for d in r.devices])
        cols = [domains, _significant(np.where(np.isfinite(k.conc), k.conc, 0.0), 9),
                _significant(np.where(np.isfinite(r.net_gb_per_s), r.net_gb_per_s, 0.0), 9),
                r.step_latency_us] + [_significant(v, 9) for v in k.keep.values()]
        _, k.class_first, inv = np.unique(np.stack(cols, axis=1), axis=0, return_index=True,
                                          return_inverse=True)
        k.ring_class = np.asarray(inv).ravel()

    def price(lab: str, cls: int, role: str, size: float) -> Estimate:
        k = info[lab]
        key = (cls, role, round(size))
        if key not in k.prices:
            i = int(k.class_first[cls])
            shape = shape_of(cluster, k.rings, i, rate_gb_per_s=float(k.conc[i]),
                             collnet=collnet)
            est = choose(shape, _COLL[role], size, nccl=nccl)
            k.prices[key] = (est, shape)
        return k.prices[key][0]

    def keep_fn(combo: dict[str, int]) -> Callable[[str, frozenset[str]], float]:
        cache: dict = {}

        def keep(lab: str, moving: frozenset[str]) -> float:
            sub = frozenset(m for m in moving if m in info)
            if len(sub) < 2 or lab not in info:
                return 1.0
            if (lab, sub) not in cache:
                k = info[lab]
                ring = int(k.class_first[combo[lab]])
                cache[(lab, sub)] = float(k.keep[sub][ring])
            return cache[(lab, sub)]
        return keep

    # ---- units per stage and rank class
    pp_groups = np.asarray(layout.groups("pp"), dtype=np.int64)
    sms = spec.node.sms
    scen = [("links shared", 0.0, False)]
    if sms:
        scen += [("links + SMs", 1.0 / sms, False), ("links + SMs + one launch queue",
                                                     1.0 / sms, True)]
    else:
        scen += [("links + one launch queue", 0.0, True)]
    bucket = {}
    for lab, dp in (("dense", g["dense_rs"].shape[1]),
                    ("exp", g["exp_rs"].shape[1] if has_expert else 1)):
        bucket[lab] = bucket_params if bucket_params is not None else max(4e7, 1e6 * dp)

    def colls(combo, lab, role, size):
        if lab not in info or size <= 0:
            return None
        est = price(lab, combo[lab], role, size)
        return Coll(role, lab, est.latency_us * 1e-6, size, est.algbw_gb_per_s * 1e9,
                    int(getattr(est, "n_channels", 0)))

    def stage_units(st: StageWork, combo: dict[str, int]) -> list[Unit]:
        n = len(st.slots)
        f = [fwd[(st.stage, k)] for k in range(n)]
        units: list[Unit] = []
        if schedule == "fsdp":
            ag = [tuple(c for c in (colls(combo, "dense_ag", "ag", s.dense_bytes),
                                    colls(combo, "exp_ag", "ag", s.expert_bytes)) if c)
                  for s in st.slots]
            rs = [tuple(c for c in (colls(combo, "dense_rs", "rs", s.dense_bytes * grad_scale),
                                    colls(combo, "exp_rs", "rs", s.expert_bytes * grad_scale))
                        if c) for s in st.slots]
            for k in range(n):
                units.append(Unit(f[k], ag[k], (), len(units) - 1))
            for k in reversed(range(n)):
                units.append(Unit(f[k] * BACKWARD_OVER_FORWARD, ag[k], rs[k], len(units) - 1))
            return units
        # dist-opt: buckets per chunk, dense and expert buffers apart
        before: list[list[tuple[Coll, int]]] = [[] for _ in range(n)]
        after: list[list[Coll]] = [[] for _ in range(n)]
        chunks = sorted({s.chunk for s in st.slots})
        chunk_first = {c: min(k for k, s in enumerate(st.slots) if s.chunk == c)
                       for c in chunks}
        for kind, attr in (("dense", "dense_bytes"), ("exp", "expert_bytes")):
            prev_first = -1
            for c in chunks:
                idx = [k for k, s in enumerate(st.slots) if s.chunk == c]
                sizes = [getattr(st.slots[k], attr) for k in idx]
                for b in reversed(dp_buckets([x / bytes_per_param for x in sizes],
                                             bucket[kind])):
                    members = [idx[j] for j in b]
                    size = sum(getattr(st.slots[k], attr) for k in members)
                    a = colls(combo, f"{kind}_ag", "ag", size)
                    r = colls(combo, f"{kind}_rs", "rs", size * grad_scale)
                    head = min(members)
                    if param_gather_with_optimizer_step:
                        when = -1
                    elif len(chunks) > 1:
                        when = -1 if c < 2 else chunk_first[c - 1]
                    else:
                        when = prev_first
                    prev_first = head
                    if a:
                        before[head].append((a, when))
                    if r:
                        after[head].append(r)
        for k in range(n):
            units.append(Unit(f[k], tuple(c for c, _ in before[k]),
                              (), tuple(w for _, w in before[k])))
        for k in reversed(range(n)):
            units.append(Unit(f[k] * BACKWARD_OVER_FORWARD, (), tuple(after[k])))
        return units

    def combos_of(st: StageWork) -> list[dict[str, int]]:
        ranks = pp_groups[:, st.stage] - first
        if not info:
            return [{}]
        cols = np.stack([info[lab].ring_class[info[lab].inv[ranks]] for lab in info], axis=1)
        return [dict(zip(info, map(int, row), strict=False)) for row in np.unique(cols, axis=0)]

    all_combos = {st.stage: combos_of(st) for st in stages}
    units_of = {(st.stage, j): stage_units(st, c) for st in stages
                for j, c in enumerate(all_combos[st.stage])}
    results: dict[str, dict[int, tuple[Timeline, Timeline, int]]] = {}
    for name, sm, single in scen:
        per_stage = {}
        for st in stages:
            worst_one = worst_sep = None
            worst_j = 0
            for j, combo in enumerate(all_combos[st.stage]):
                u = units_of[(st.stage, j)]
                keep = keep_fn(combo)
                one = run_units(u, one_q, keep, sm_per_cta=sm, single_queue=single)
                sep = one if sep_q == one_q else run_units(u, sep_q, keep, sm_per_cta=sm,
                                                           single_queue=single)
                if worst_one is None or one.step_s > worst_one.step_s:
                    worst_one, worst_j = one, j
                if worst_sep is None or sep.step_s > worst_sep.step_s:
                    worst_sep = sep
            assert worst_one is not None and worst_sep is not None
            per_stage[st.stage] = (worst_one, worst_sep, worst_j)
        results[name] = per_stage
    base = results[scen[0][0]]
    rows = []
    for st in stages:
        one, sep, _ = base[st.stage]
        f = sum(fwd[(st.stage, k)] for k in range(len(st.slots)))
        rows.append(StageRow(st.stage, tuple(len(r) for r in st.layers),
                             min((r.start for r in st.layers if len(r)), default=0),
                             st.dense_bytes, st.expert_bytes, f, f * BACKWARD_OVER_FORWARD,
                             one, sep))
    scenarios = tuple(Scenario(name, max(v[0].step_s for v in results[name].values()),
                               max(v[1].step_s for v in results[name].values()),
                               max(v[0].held_s for v in results[name].values()),
                               max(v[1].held_s for v in results[name].values()))
                      for name, _, _ in scen)
    worst = max(range(len(rows)), key=lambda i: rows[i].one.step_s)
    w_stage = stages[worst]
    w_combo = all_combos[w_stage.stage][base[w_stage.stage][2]]
    # ---- the collectives of the worst stage
    seen: dict[tuple[str, float], int] = {}
    for unit in units_of[(w_stage.stage, base[w_stage.stage][2])]:
        for c in unit.before + unit.after:
            seen[(c.group, c.volume)] = seen.get((c.group, c.volume), 0) + 1
    crow = []
    for (lab, size), count in sorted(seen.items()):
        role = lab.split("_")[1]
        est, shape = info[lab].prices[(w_combo[lab], role, round(size))]
        opts = tuple((e.pick, round(e.latency_us, 2), round(e.algbw_gb_per_s, 2),
                      round(e.time_us, 2))
                     for e in tune(shape, _COLL[role], nccl=nccl).all_estimates(size))
        crow.append(CollRow(_ROLE_NAMES[lab], layout_kind[lab], info[lab].size, size,
                            est.pick, int(getattr(est, "n_channels", 0)),
                            est.latency_us * 1e-6 + size / (est.algbw_gb_per_s * 1e9), count,
                            est.latency_us * 1e-6, shape.describe(), opts))
    tot = sum(c.alone_s * c.count for c in crow)
    lat = sum(c.latency_s * c.count for c in crow)
    latency_share = lat / tot if tot else 0.0
    keep = keep_fn(w_combo)
    moving = frozenset(info)
    slowdown = max((1.0 / max(keep(lab, moving), 1e-12) for lab in info), default=1.0)
    # ---- memory of the extra communicators
    extra = sum(1 for k in kinds if k.endswith("_ag"))
    if extra == 0:  # flag off: count what turning it on would add
        extra = 1 + (expert_ag_group and int(getattr(cfg, "expert_model_parallel_size", 1)) > 1)
    ag_algo = next((c.pick.split("/")[0] for c in crow if c.what == "dense all-gather"), "ring")
    mem_inputs = memory_inputs or CommMemoryInputs(
        algos=(ag_algo,), protocols=("simple", "ll", "ll128") if spec.node.arch else ("simple",))
    memory = comm_memory(mem_inputs, nvls_capable=spec.scale_up.nvls, nccl=nccl)
    per_comm = memory.total_mb if comm_memory_mb is None else float(comm_memory_mb)
    mem_lines = tuple(memory.lines()) if comm_memory_mb is None else \
        (f"{per_comm:g} MB per communicator (given)",)
    hbm = None
    if spec.node.hbm_gb_per_s and crow:
        wire = max(c.size_bytes / max(c.alone_s, 1e-12) for c in crow)
        hbm = 2 * wire * HBM_BYTES_PER_WIRE_BYTE / (spec.node.hbm_gb_per_s * 1e9)
    unknowns = ["the order your code issues collectives and compute in (the model issues a "
                "unit's all-gather when the previous one starts)",
                "pipeline bubbles, other micro-batches and the optimizer step (one micro-batch "
                "forward and backward per stage is modelled)"]
    if has_expert:
        unknowns.append("routing balance and the token all-to-all (expert FLOPs assume "
                        "balanced routing; all-to-all time is not modelled)")
    if not sms:
        unknowns.append(f"SM contention: topology {spec.name!r} gives no [node] sms")
    if hbm is None:
        unknowns.append(f"HBM contention: topology {spec.name!r} gives no [node] hbm_gb_per_s")
    else:
        unknowns.append(f"whether compute is HBM-bound (the collectives use ~{hbm:.0%} of HBM "
                        "bandwidth while running)")
    notes = []
    q, prev = scenarios[-1], scenarios[-2]
    same = all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in (
        (q.one_step_s, prev.one_step_s), (q.separate_step_s, prev.separate_step_s)))
    if q.one_held_s == 0 and q.separate_held_s == 0:
        notes.append("one launch queue (CUDA_DEVICE_MAX_CONNECTIONS=1) changes nothing here: "
                     "whenever a unit's compute was ready, every collective issued before it "
                     "had already started, so no kernel was held behind another")
    else:
        held = (f"holds compute behind queued collectives for {q.one_held_s * 1e3:.3f} ms with "
                f"one communicator and {q.separate_held_s * 1e3:.3f} ms with a separate "
                "all-gather communicator (slowest stage)")
        notes.append(f"one launch queue (CUDA_DEVICE_MAX_CONNECTIONS=1) {held}" + (
            "; the step does not change: the communicators are busy end to end, and holding "
            "compute delays no collective" if same else ""))
    if schedule == "dist-opt":
        notes.append(f"buckets of >= {bucket['dense']:.3g} parameters (dense) / "
                     f"{bucket['exp']:.3g} (expert), filled in backward order per model chunk")
    return OverlapReport(
        schedule=schedule, nccl=nccl, compute_how=how, groups=dict(layout_kind),
        stages=tuple(rows), worst_stage=worst, collectives=tuple(crow), scenarios=scenarios,
        extra_communicators=extra, comm_memory_mb=per_comm,
        cost_classes=sum(len(v) for v in all_combos.values()), memory_lines=mem_lines,
        notes=tuple(notes), unknowns=tuple(unknowns), hbm_share=hbm,
        latency_share=latency_share, shared_slowdown=slowdown,
        ag_used=schedule == "fsdp", has_traffic=bool(crow))
