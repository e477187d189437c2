"""Step model of the sharded backward pass: what ``create_all_gather_group`` buys.

Per pipeline stage, ``L`` layers run backward one after another, each taking
``compute`` seconds. Layer ``k`` needs its parameters gathered first
(all-gather ``AG_k``); when its backward starts, the next layer's all-gather
``AG_{k+1}`` is issued (prefetch); when it ends, its gradient reduce-scatter
``RS_k`` is issued. ``AG_0`` is issued at time 0.

- **one communicator** (no all-gather group): NCCL runs the collectives of
  one communicator one after another (NVIDIA/nccl#574), so ``AG`` and ``RS``
  queue in issue order;
- **separate all-gather communicator**: the ``AG`` queue and the ``RS`` queue
  run concurrently, sharing

  - *links*: while both move data they share the links they both use max-min
    fairly (rates from :func:`~.cost.maxmin_rates` over every group of both
    kinds at once);
  - *SMs*: an NCCL kernel holds one CTA per channel; while ``k`` collective
    kernels run, compute proceeds at ``1 - k * channels / SMs`` of its speed
    (only when the topology file gives ``[node] sms``);
  - *the launch queue*: Megatron sets ``CUDA_DEVICE_MAX_CONNECTIONS=1``, so all
    streams feed one hardware queue and kernels launch in issue order: an
    all-gather issued behind a reduce-scatter that still waits for the previous
    reduce-scatter cannot start before it;
  - *HBM*: a collective reads and writes about 3 bytes of HBM per byte on the
    wire; the report gives that share of the GPU's HBM bandwidth but does not
    slow compute by it (whether compute is memory-bound is not known here).

Each op costs what NCCL's model says for its group (:mod:`.nccl_model`, the
algorithm and protocol NCCL picks): its latency first (no bandwidth used),
then its bytes at its algorithm bandwidth. Step time = when the last
reduce-scatter ends; exposed communication = step time - ``L * compute``.
All groups run in lock step; ranks whose (RS group, AG group) pair has the
same costs are simulated once, and the slowest rank sets the step time.

The gain is reported as a range over the sharing scenarios above (links only;
links and SMs; links, SMs and one launch queue) with what it depends on;
what the model cannot see (launch order in your code, compute's memory
boundness, NCCL channel counts on your machine) is listed, not guessed.

The extra communicators cost memory: ``dp_cp_ag`` on every rank, plus
``ep_dp_ag`` when expert parallelism is on; one communicator's memory is
:func:`~.comm_memory.comm_memory` of the algorithms it runs (lazy connection,
NCCL >= 2.22), with its inputs shown, unless ``comm_memory_mb`` is given.

>>> r = simulate_ops(layers=4, compute_s=1e-3,
...                  rs=OpCost(alpha_s=1e-4, volume_bytes=0, rate_alone=1, rate_shared=1),
...                  ag=OpCost(alpha_s=1e-4, volume_bytes=0, rate_alone=1, rate_shared=1))
>>> round(r.one.step_s * 1e3, 2), round(r.separate.step_s * 1e3, 2)   # ms
(4.2, 4.2)
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass

import numpy as np

from .comm_memory import CommMemoryInputs, comm_memory
from .cost import build_rings, maxmin_rates, shape_of
from .errors import TopologyError
from .nccl_model import choose
from .placement import Placement

DEFAULT_COMPUTE_MS = 5.0
HBM_BYTES_PER_WIRE_BYTE = 3.0  # read source + read/write staging; ours, an estimate


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
class Timeline:
    step_s: float
    compute_s: float
    exposed_s: float
    overlap_s: float  # time an all-gather and a reduce-scatter were both in flight
    shared_s: float   # time both moved data (sharing the links they both use)


@dataclass(frozen=True)
class OpsResult:
    one: Timeline
    separate: Timeline

    @property
    def gain_s(self) -> float:
        return self.one.step_s - self.separate.step_s


@dataclass
class _InFlight:
    """A running collective: in ``phase`` "lat" until time ``value``, then "bw"
    with ``value`` bytes left to move (mutable event-loop state)."""

    op: str
    layer: int
    phase: str
    value: float


_Queued = tuple[str, int, int]  # (op, layer, issue number)


def _launch(queues: dict[str, deque[_Queued]], running: dict[str, _InFlight | None],
            cost: dict[str, OpCost], t: float, single_queue: bool) -> bool:
    """Start the head of every idle queue (only the earliest issued one when
    ``single_queue``); whether anything started."""
    first = min((qq[0][2] for qq in queues.values() if qq), default=None)
    started = False
    for q, queue in queues.items():
        if running[q] is None and queue and (not single_queue or queue[0][2] == first):
            op, layer, _ = queue.popleft()
            running[q] = _InFlight(op, layer, "lat", t + cost[op].alpha_s)
            started = True
    return started


def _advance(busy: dict[str, _InFlight], finish: dict[str, float], rate: dict[str, float],
             cost: dict[str, OpCost], t: float, t_next: float) -> list[str]:
    """Move every running collective from ``t`` to ``t_next``: bytes drain,
    latencies end (a collective with bytes enters its "bw" phase); the queues
    whose collective completed, in order."""
    done = []
    for q, cur in busy.items():
        if finish[q] > t_next:
            if cur.phase == "bw":
                cur.value = max(cur.value - rate[q] * (t_next - t), 0.0)
        elif cur.phase == "lat" and cost[cur.op].volume_bytes > 0:
            cur.phase, cur.value = "bw", cost[cur.op].volume_bytes
        else:
            done.append(q)
    return done


def _timeline(layers: int, compute_s: float, rs: OpCost, ag: OpCost, separate: bool,
              sm_fraction: float = 0.0, single_queue: bool = False) -> Timeline:
    """Discrete-event run of one rank's backward pass.

    Each in-flight collective is an :class:`_InFlight`. Compute runs at speed
    ``1 - sm_fraction * k`` while ``k`` collective kernels run (each NCCL
    kernel holds one CTA per channel, i.e. that share of the SMs).
    ``single_queue`` (``CUDA_DEVICE_MAX_CONNECTIONS=1``: every stream feeds one
    hardware queue) launches collectives in issue order: one waiting for its
    communicator's previous collective holds back every later one, on any
    communicator. The op (or compute) whose event is the earliest completes
    exactly at that event, so the loop always advances.
    """
    cost = {"rs": rs, "ag": ag}
    queues: dict[str, deque[_Queued]] = (
        {"rs": deque(), "ag": deque()} if separate else {"one": deque()})

    def qname(op: str) -> str:
        return op if separate else "one"

    running: dict[str, _InFlight | None] = {q: None for q in queues}
    ag_done = [math.inf] * layers
    t = 0.0
    next_layer, rs_left = 0, layers
    comp_left: float | None = None
    overlap = shared_time = 0.0
    seq = iter(range(1 << 62))
    queues[qname("ag")].append(("ag", 0, next(seq)))
    while True:
        progressed = True
        while progressed:
            progressed = False
            if comp_left is None and next_layer < layers and ag_done[next_layer] <= t:
                comp_left = compute_s
                if next_layer + 1 < layers:
                    queues[qname("ag")].append(("ag", next_layer + 1, next(seq)))
                progressed = True
            progressed = _launch(queues, running, cost, t, single_queue) or progressed
        busy = {q: cur for q, cur in running.items() if cur is not None}
        shared = sum(cur.phase == "bw" for cur in busy.values()) == 2
        rate = {q: cost[cur.op].rate_shared if shared else cost[cur.op].rate_alone
                for q, cur in busy.items() if cur.phase == "bw"}
        finish = {q: cur.value if cur.phase == "lat" else t + cur.value / rate[q]
                  for q, cur in busy.items()}
        speed = max(1.0 - sm_fraction * len(busy), 1e-3)
        comp_end = None if comp_left is None else t + comp_left / speed
        events = list(finish.values()) + ([comp_end] if comp_end is not None else [])
        if not events:
            break
        t_next = min(events)
        if len(busy) == 2:
            overlap += t_next - t
        if shared:
            shared_time += t_next - t
        for q in _advance(busy, finish, rate, cost, t, t_next):
            cur = busy[q]
            if cur.op == "ag":
                ag_done[cur.layer] = t_next
            else:
                rs_left -= 1
            running[q] = None
        if comp_left is not None and comp_end is not None:
            comp_left = 0.0 if comp_end <= t_next else comp_left - speed * (t_next - t)
        t = t_next
        if comp_left is not None and comp_left <= 0.0:
            queues[qname("rs")].append(("rs", next_layer, next(seq)))
            next_layer += 1
            comp_left = None
    if rs_left or next_layer < layers:  # pragma: no cover - guards the event loop
        raise RuntimeError("overlap model stopped early")
    total = layers * compute_s
    return Timeline(step_s=t, compute_s=total, exposed_s=max(t - total, 0.0),
                    overlap_s=overlap, shared_s=shared_time)


def simulate_ops(layers: int, compute_s: float, rs: OpCost, ag: OpCost, *,
                 sm_fraction: float = 0.0, single_queue: bool = False) -> OpsResult:
    """Both timelines for one rank's costs (keywords: see :func:`_timeline`)."""
    return OpsResult(_timeline(layers, compute_s, rs, ag, False, sm_fraction),
                     _timeline(layers, compute_s, rs, ag, True, sm_fraction, single_queue))


@dataclass(frozen=True)
class Scenario:
    """One sharing assumption and the gain it gives."""

    name: str
    one_step_s: float
    separate_step_s: float

    @property
    def gain_pct(self) -> float:
        return 100.0 * (self.one_step_s - self.separate_step_s) / self.one_step_s \
            if self.one_step_s else 0.0


@dataclass(frozen=True)
class OverlapReport:
    """What :func:`simulate` returns (all times in seconds)."""

    rs_kind: str
    ag_kind: str
    layers_per_stage: int
    compute_s: float
    rs_bytes: float
    ag_bytes: float
    rs_alone_s: float
    ag_alone_s: float
    rs_shared_s: float
    ag_shared_s: float
    latency_share: float
    shared_slowdown: float  # rate alone / rate while the other collective moves data
    one: Timeline
    separate: Timeline
    extra_communicators: int
    comm_memory_mb: float
    cost_classes: int
    rs_bottleneck: str
    rs_pick: str = ""
    ag_pick: str = ""
    rs_shape: str = ""
    ag_shape: str = ""
    rs_options: tuple = ()
    ag_options: tuple = ()
    memory_lines: tuple[str, ...] = ()
    scenarios: tuple[Scenario, ...] = ()
    hbm_share: float | None = None
    unknowns: tuple[str, ...] = ()

    @property
    def gain_s(self) -> float:
        return self.one.step_s - self.separate.step_s

    @property
    def gain_pct(self) -> float:
        return 100.0 * self.gain_s / self.one.step_s if self.one.step_s else 0.0

    @property
    def gain_range_pct(self) -> tuple[float, float]:
        """Lowest and highest gain over the sharing scenarios."""
        gains = [sc.gain_pct for sc in self.scenarios] or [self.gain_pct]
        return min(gains), max(gains)

    @property
    def extra_memory_mb(self) -> float:
        return self.extra_communicators * self.comm_memory_mb

    @property
    def verdict(self) -> str:
        """One line: whether the separate all-gather communicator pays, and why."""
        if self.rs_alone_s == 0 and self.ag_alone_s == 0:
            return "nothing to overlap: the groups have one rank (no collective traffic)"
        lo, hi = self.gain_range_pct
        if hi <= -1.0:
            return ("hurts: reduce-scatters share links with all-gathers the next layer "
                    "waits for")
        if hi < 2.0:
            if self.one.exposed_s <= 0.02 * self.one.step_s:
                return "helps little: communication is already hidden behind compute"
            if self.shared_slowdown >= 1.8 and self.latency_share < 0.2:
                return "helps little: bandwidth-bound on links both collectives share"
            return "helps little"
        reasons = []
        if self.latency_share >= 0.2:
            reasons.append(f"latency-bound ({self.latency_share:.0%} of the collective time is "
                           "latency, which overlaps)")
        if self.shared_slowdown < 1.5:
            reasons.append("the two collectives are bottlenecked on different links")
        if not reasons:
            reasons.append("the all-gather no longer waits behind reduce-scatters")
        head = "helps" if lo >= 2.0 else "may help"
        return f"{head}: " + "; ".join(reasons)

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items()
             if k not in ("one", "separate", "scenarios")}
        d["one_communicator"] = asdict(self.one)
        d["separate_ag_communicator"] = asdict(self.separate)
        d["scenarios"] = [dict(asdict(sc), gain_pct=sc.gain_pct) for sc in self.scenarios]
        lo, hi = self.gain_range_pct
        d.update(gain_s=self.gain_s, gain_pct=self.gain_pct, gain_range_pct=[lo, hi],
                 extra_memory_mb=self.extra_memory_mb, verdict=self.verdict)
        return d


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


def _priced(cluster, rings, collective: str, size: float, rates_alone, collnet: bool):
    """Per ring: (latency s, algorithm bandwidth B/s at ``rates_alone``, the pick, options).

    Rings with equal shapes are priced once (NCCL's table is per communicator).
    """
    n = rings.n_rings
    lat = np.zeros(n)
    bw = np.full(n, np.inf)
    picks: list = [None] * n
    if rings.size < 2:
        return lat, bw, picks
    domains = np.array([np.unique(cluster.domain_of(r)).size for r in rings.devices])
    key = np.stack([domains, _significant(np.asarray(rates_alone, float), 9),
                    _significant(np.where(np.isfinite(rings.net_gb_per_s), rings.net_gb_per_s,
                                          0.0), 9), rings.step_latency_us], axis=1)
    _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    inv = np.asarray(inv).ravel()
    for u, i in enumerate(first):
        shape = shape_of(cluster, rings, int(i), rate_gb_per_s=float(rates_alone[i]),
                         collnet=collnet)
        best = choose(shape, collective, size)
        options = tuple((e.pick, round(e.latency_us, 2), round(e.algbw_gb_per_s, 2),
                         round(e.time_us, 2))
                        for e in _options(shape, collective, size))
        sel = inv == u
        lat[sel] = best.latency_us * 1e-6
        bw[sel] = best.algbw_gb_per_s * 1e9
        for j in np.flatnonzero(sel):
            picks[j] = (best.pick, shape.describe(), options)
    return lat, bw, picks


def _options(shape, collective, size):
    from .nccl_model import tune
    return tune(shape, collective).all_estimates(size)


def simulate(layout, placement: Placement, *, model_bytes: float, layers: int,
             compute_ms: float = DEFAULT_COMPUTE_MS, grad_scale: float = 1.0,
             rs_kind: str = "dp_cp", ag_kind: str | None = None,
             comm_memory_mb: float | None = None, collnet: bool = False,
             memory_inputs: CommMemoryInputs | None = None) -> OverlapReport:
    """Run the step model for a layout placed on a cluster.

    ``model_bytes``: parameter bytes of the whole model in the all-gather
    dtype; a layer's all-gather moves ``model_bytes / (layers * tp)`` (nccl-tests
    size convention: the gathered buffer), its reduce-scatter that times
    ``grad_scale`` (2.0 for fp32 gradients of bf16 parameters).
    ``compute_ms``: backward compute time of one layer. ``ag_kind`` defaults to
    the all-gather twin ``<rs_kind>_ag`` (``dp_cp_ag``, ``ep_dp_ag``) when the
    layout has it (``create_all_gather_group`` on), else ``rs_kind`` itself.
    ``comm_memory_mb`` overrides the computed memory of one communicator;
    ``collnet`` lets NCCL use SHARP where the topology's switches have it.
    """
    cfg = layout.config
    kinds = tuple(layout.kinds)
    for name, value in (("model_bytes", model_bytes), ("compute_ms", compute_ms),
                        ("grad_scale", grad_scale)) + ((("comm_memory_mb", comm_memory_mb),)
                                                        if comm_memory_mb is not None else ()):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                or not math.isfinite(value):
            raise TopologyError(f"--{name.replace('_', '-')} must be a number >= 0, got {value!r}")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise TopologyError(f"--layers must be a whole number >= 1, got {layers!r}")
    pp = int(cfg.pipeline_model_parallel_size)
    tp = int(cfg.tensor_model_parallel_size)
    if layers < pp:
        raise TopologyError(f"--layers {layers} is fewer than the {pp} pipeline stages; "
                            f"use --layers >= {pp}")
    if ag_kind is None:
        ag_kind = f"{rs_kind}_ag" if f"{rs_kind}_ag" in kinds else rs_kind
    for kind in (rs_kind, ag_kind):
        if kind not in kinds:
            raise TopologyError(f"the layout has no {kind!r} groups; kinds present: "
                                f"{', '.join(k for k in kinds if not k.endswith('_gloo'))}")
    cluster = placement.cluster
    spec = cluster.spec
    world, first = int(layout.world_size), int(layout.rank_offset)
    per_stage = -(-layers // pp)
    ag_bytes = float(model_bytes) / (layers * tp)
    rs_bytes = ag_bytes * grad_scale

    g_rs = np.asarray(layout.groups(rs_kind), dtype=np.int64)
    g_ag = np.asarray(layout.groups(ag_kind), dtype=np.int64)
    r_rs = build_rings(cluster, placement.device_of(g_rs))
    r_ag = build_rings(cluster, placement.device_of(g_ag))
    both = maxmin_rates(np.r_[r_rs.flow, r_ag.flow + r_rs.n_rings], np.r_[r_rs.link, r_ag.link],
                        np.r_[r_rs.weight, r_ag.weight], cluster.capacity,
                        r_rs.n_rings + r_ag.n_rings)
    conc_rs, conc_ag = r_rs.concurrent_gb_per_s(), r_ag.concurrent_gb_per_s()
    # the link share each ring keeps while the other kind moves data too
    with np.errstate(divide="ignore", invalid="ignore"):
        keep_rs = np.where(np.isfinite(conc_rs), both[:r_rs.n_rings] / conc_rs, 1.0)
        keep_ag = np.where(np.isfinite(conc_ag), both[r_rs.n_rings:] / conc_ag, 1.0)

    a_rs, bw_rs, p_rs = _priced(cluster, r_rs, "reduce_scatter", rs_bytes, conc_rs, collnet)
    a_ag, bw_ag, p_ag = _priced(cluster, r_ag, "all_gather", ag_bytes, conc_ag, collnet)
    v_rs = rs_bytes if r_rs.size > 1 else 0.0
    v_ag = ag_bytes if r_ag.size > 1 else 0.0
    i_rs = _inverse(g_rs, first, world, rs_kind)
    i_ag = _inverse(g_ag, first, world, ag_kind)
    table = np.stack([a_rs[i_rs], bw_rs[i_rs], bw_rs[i_rs] * keep_rs[i_rs],
                      a_ag[i_ag], bw_ag[i_ag], bw_ag[i_ag] * keep_ag[i_ag]], axis=1)
    table = np.where(np.isfinite(table), table, 1e300)
    classes, cls_first = np.unique(_significant(table, 9), axis=0, return_index=True)
    compute_s = compute_ms * 1e-3
    channels = 16
    sms = spec.node.sms
    sm_fraction = channels / sms if sms else None
    results = []
    for row in classes:
        row = [float(x) for x in row]
        rs = OpCost(row[0], v_rs, row[1], row[2])
        ag = OpCost(row[3], v_ag, row[4], row[5])
        results.append((simulate_ops(per_stage, compute_s, rs, ag), (rs, ag)))
    k = max(range(len(results)), key=lambda j: results[j][0].one.step_s)
    worst, worst_ops = results[k]
    worst_sep = max((r[0].separate for r in results), key=lambda t: t.step_s)
    rs, ag = worst_ops
    scenarios = [Scenario("links shared", worst.one.step_s, worst_sep.step_s)]
    if sm_fraction is not None:
        for name, single in (("links + SMs", False),
                             ("links + SMs + one launch queue", True)):
            r = simulate_ops(per_stage, compute_s, rs, ag, sm_fraction=sm_fraction,
                             single_queue=single)
            scenarios.append(Scenario(name, r.one.step_s, r.separate.step_s))
    else:
        r = simulate_ops(per_stage, compute_s, rs, ag, single_queue=True)
        scenarios.append(Scenario("links + one launch queue", r.one.step_s, r.separate.step_s))
    shared_rs_t = rs.alpha_s + (v_rs / rs.rate_shared if v_rs else 0.0)
    shared_ag_t = ag.alpha_s + (v_ag / ag.rate_shared if v_ag else 0.0)
    comm = rs.alone_s() + ag.alone_s()
    latency_share = (rs.alpha_s + ag.alpha_s) / comm if comm else 0.0
    slowdown = max(rs.rate_alone / rs.rate_shared, ag.rate_alone / ag.rate_shared)
    extra = sum(1 for k in kinds if k.endswith("_ag"))
    if extra == 0:  # flag off: count what turning it on would add (no expert AG in 0.16)
        profile = getattr(layout, "profile", None)
        expert_ag = profile is None or bool(profile.expert_all_gather)
        extra = 1 + (expert_ag and int(getattr(cfg, "expert_model_parallel_size", 1)) > 1)
    # which ring set the worst class: its pick explains the costs
    row_rank = int(np.flatnonzero((_significant(table, 9) == classes[k]).all(axis=1))[0])
    pick_rs = p_rs[i_rs[row_rank]] if r_rs.size > 1 else None
    pick_ag = p_ag[i_ag[row_rank]] if r_ag.size > 1 else None
    ag_algo = pick_ag[0].split("/")[0] if pick_ag else "ring"
    mem_inputs = memory_inputs or CommMemoryInputs(
        algos=(ag_algo,), protocols=("simple", "ll", "ll128") if spec.node.arch else ("simple",))
    memory = comm_memory(mem_inputs, nvls_capable=spec.scale_up.nvls)
    per_comm = memory.total_mb if comm_memory_mb is None else float(comm_memory_mb)
    mem_lines = tuple(memory.lines()) if comm_memory_mb is None else \
        (f"{per_comm:g} MB per communicator (given)",)
    hbm = None
    if spec.node.hbm_gb_per_s and comm:
        wire = max(rs.rate_alone, ag.rate_alone)
        hbm = 2 * wire * HBM_BYTES_PER_WIRE_BYTE / (spec.node.hbm_gb_per_s * 1e9)
    unknowns = ["the order your code issues collectives and compute in (the model issues "
                "each all-gather at the start of the previous layer's backward)",
                f"NCCL channels per kernel on your machine (assumed {channels})"]
    if sm_fraction is None:
        unknowns.append(f"SM contention: topology {spec.name!r} gives no [node] sms")
    if hbm is None:
        unknowns.append(f"HBM contention: topology {spec.name!r} gives no [node] hbm_gb_per_s")
    else:
        unknowns.append(f"whether compute is HBM-bound (both collectives use ~{hbm:.0%} of HBM "
                        "bandwidth while running)")
    worst_ring = int(np.argmin(r_rs.alone_gb_per_s)) if r_rs.n_rings else 0
    return OverlapReport(
        rs_kind=rs_kind, ag_kind=ag_kind, layers_per_stage=per_stage, compute_s=compute_s,
        rs_bytes=rs_bytes, ag_bytes=ag_bytes, rs_alone_s=rs.alone_s(), ag_alone_s=ag.alone_s(),
        rs_shared_s=shared_rs_t, ag_shared_s=shared_ag_t, latency_share=latency_share,
        shared_slowdown=slowdown,
        one=worst.one, separate=worst_sep, extra_communicators=extra,
        comm_memory_mb=per_comm, cost_classes=int(classes.shape[0]),
        rs_bottleneck=r_rs.bottleneck_tier[worst_ring] if r_rs.n_rings else "",
        rs_pick=pick_rs[0] if pick_rs else "-", ag_pick=pick_ag[0] if pick_ag else "-",
        rs_shape=pick_rs[1] if pick_rs else "", ag_shape=pick_ag[1] if pick_ag else "",
        rs_options=pick_rs[2] if pick_rs else (), ag_options=pick_ag[2] if pick_ag else (),
        memory_lines=mem_lines, scenarios=tuple(scenarios), hbm_share=hbm,
        unknowns=tuple(unknowns))
