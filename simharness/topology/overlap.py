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
  run concurrently; while both move data they share the links they both use
  max-min fairly (rates from :func:`~.cost.maxmin_rates` over every group of
  both kinds at once).

An op first spends its latency (``base + steps * alpha``, no bandwidth used),
then moves its volume at the current rate. Step time = when the last
reduce-scatter ends; exposed communication = step time - ``L * compute``.
All groups run in lock step; ranks whose (RS group, AG group) pair has the
same costs are simulated once, and the slowest rank sets the step time.

The option helps little when both collectives are bandwidth-bound on the same
links (sharing halves each rate; the sum is unchanged) and a lot when they are
latency-bound (latencies overlap) or bottlenecked on different links. It can
even cost a little: a reduce-scatter sharing links with an all-gather that the
next layer waits for slows that all-gather down.

The extra communicators cost memory: ``dp_cp_ag`` on every rank, plus
``ep_dp_ag`` when expert parallelism is on; ``comm_memory_mb`` per
communicator defaults to 616 MB, the middle of the 544-688 MB per NCCL
communicator reported on A100 (NVIDIA/nccl#964).

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

from .cost import build_rings, bus_factor, maxmin_rates, ring_steps
from .errors import TopologyError
from .placement import Placement

DEFAULT_COMM_MEMORY_MB = 616.0
DEFAULT_COMPUTE_MS = 5.0


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


def _timeline(layers: int, compute_s: float, rs: OpCost, ag: OpCost, separate: bool) -> Timeline:
    """Discrete-event run of one rank's backward pass.

    Each in-flight collective is ``[op, layer, phase, value]``: ``phase`` "lat"
    with ``value`` = the time its latency ends, or "bw" with ``value`` = bytes
    left. The op (or compute) whose event is the earliest completes exactly at
    that event, so the loop always advances.
    """
    cost = {"rs": rs, "ag": ag}
    queues = {"rs": deque(), "ag": deque()} if separate else {"one": deque()}
    qname = (lambda op: op) if separate else (lambda op: "one")
    running: dict[str, list | None] = {q: None for q in queues}
    ag_done = [math.inf] * layers
    t = 0.0
    next_layer, comp_end, rs_left = 0, None, layers
    overlap = shared_time = 0.0
    queues[qname("ag")].append(("ag", 0))
    while True:
        progressed = True
        while progressed:
            progressed = False
            if comp_end is None and next_layer < layers and ag_done[next_layer] <= t:
                comp_end = t + compute_s
                if next_layer + 1 < layers:
                    queues[qname("ag")].append(("ag", next_layer + 1))
                progressed = True
            for q, queue in queues.items():
                if running[q] is None and queue:
                    op, layer = queue.popleft()
                    running[q] = [op, layer, "lat", t + cost[op].alpha_s]
                    progressed = True
        busy = [q for q in running if running[q] is not None]
        moving = [q for q in busy if running[q][2] == "bw"]
        shared = len(moving) == 2
        rate = {q: (cost[running[q][0]].rate_shared if shared else cost[running[q][0]].rate_alone)
                for q in moving}
        finish = {q: (running[q][3] if running[q][2] == "lat" else t + running[q][3] / rate[q])
                  for q in busy}
        events = list(finish.values()) + ([comp_end] if comp_end is not None else [])
        if not events:
            break
        t_next = min(events)
        if len(busy) == 2:
            overlap += t_next - t
        if shared:
            shared_time += t_next - t
        for q in busy:
            cur = running[q]
            if finish[q] > t_next:
                if cur[2] == "bw":
                    cur[3] = max(cur[3] - rate[q] * (t_next - t), 0.0)
                continue
            if cur[2] == "lat" and cost[cur[0]].volume_bytes > 0:
                cur[2], cur[3] = "bw", cost[cur[0]].volume_bytes
                continue
            if cur[0] == "ag":
                ag_done[cur[1]] = t_next
            else:
                rs_left -= 1
            running[q] = None
        t = t_next
        if comp_end is not None and comp_end <= t:
            queues[qname("rs")].append(("rs", next_layer))
            next_layer += 1
            comp_end = None
    if rs_left or next_layer < layers:  # pragma: no cover - guards the event loop
        raise RuntimeError("overlap model stopped early")
    total = layers * compute_s
    return Timeline(step_s=t, compute_s=total, exposed_s=max(t - total, 0.0),
                    overlap_s=overlap, shared_s=shared_time)


def simulate_ops(layers: int, compute_s: float, rs: OpCost, ag: OpCost) -> OpsResult:
    """Both timelines for one rank's costs."""
    return OpsResult(_timeline(layers, compute_s, rs, ag, False),
                     _timeline(layers, compute_s, rs, ag, True))


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

    @property
    def gain_s(self) -> float:
        return self.one.step_s - self.separate.step_s

    @property
    def gain_pct(self) -> float:
        return 100.0 * self.gain_s / self.one.step_s if self.one.step_s else 0.0

    @property
    def extra_memory_mb(self) -> float:
        return self.extra_communicators * self.comm_memory_mb

    @property
    def verdict(self) -> str:
        """One line: whether the separate all-gather communicator pays, and why."""
        if self.rs_alone_s == 0 and self.ag_alone_s == 0:
            return "nothing to overlap: the groups have one rank (no collective traffic)"
        if self.gain_pct <= -1.0:
            return ("hurts: reduce-scatters share links with all-gathers the next layer "
                    "waits for")
        if self.gain_pct < 2.0:
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
        return "helps: " + "; ".join(reasons)

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("one", "separate")}
        d["one_communicator"] = asdict(self.one)
        d["separate_ag_communicator"] = asdict(self.separate)
        d.update(gain_s=self.gain_s, gain_pct=self.gain_pct, extra_memory_mb=self.extra_memory_mb,
                 verdict=self.verdict)
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


def simulate(layout, placement: Placement, *, model_bytes: float, layers: int,
             compute_ms: float = DEFAULT_COMPUTE_MS, grad_scale: float = 1.0,
             rs_kind: str = "dp_cp", ag_kind: str | None = None,
             comm_memory_mb: float = DEFAULT_COMM_MEMORY_MB) -> OverlapReport:
    """Run the step model for a layout placed on a cluster.

    ``model_bytes``: parameter bytes of the whole model in the all-gather
    dtype; a layer's all-gather moves ``model_bytes / (layers * tp)`` (nccl-tests
    size convention: the gathered buffer), its reduce-scatter that times
    ``grad_scale`` (2.0 for fp32 gradients of bf16 parameters).
    ``compute_ms``: backward compute time of one layer. ``ag_kind`` defaults to
    the all-gather twin ``<rs_kind>_ag`` (``dp_cp_ag``, ``ep_dp_ag``) when the
    layout has it (``create_all_gather_group`` on), else ``rs_kind`` itself.
    """
    cfg = layout.config
    kinds = tuple(layout.kinds)
    for name, value in (("model_bytes", model_bytes), ("compute_ms", compute_ms),
                        ("grad_scale", grad_scale), ("comm_memory_mb", comm_memory_mb)):
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
    world, first = int(layout.world_size), int(layout.rank_offset)
    per_stage = -(-layers // pp)
    ag_bytes = float(model_bytes) / (layers * tp)
    rs_bytes = ag_bytes * grad_scale
    base = cluster.spec.base_latency_us * 1e-6

    g_rs = np.asarray(layout.groups(rs_kind), dtype=np.int64)
    g_ag = np.asarray(layout.groups(ag_kind), dtype=np.int64)
    r_rs = build_rings(cluster, placement.device_of(g_rs))
    r_ag = build_rings(cluster, placement.device_of(g_ag))
    both = maxmin_rates(np.r_[r_rs.flow, r_ag.flow + r_rs.n_rings], np.r_[r_rs.link, r_ag.link],
                        np.r_[r_rs.weight, r_ag.weight], cluster.capacity,
                        r_rs.n_rings + r_ag.n_rings)
    alone_rs = r_rs.concurrent_gb_per_s() * 1e9
    alone_ag = r_ag.concurrent_gb_per_s() * 1e9
    shared_rs, shared_ag = both[:r_rs.n_rings] * 1e9, both[r_rs.n_rings:] * 1e9

    def per_group(rings, size, collective):
        n = rings.size
        alpha = base + ring_steps(collective, n) * rings.step_latency_us * 1e-6 if n > 1 else \
            np.zeros(rings.n_rings)
        vol = float(bus_factor(collective, n) * size) if n > 1 else 0.0
        return alpha, vol

    a_rs, v_rs = per_group(r_rs, rs_bytes, "reduce_scatter")
    a_ag, v_ag = per_group(r_ag, ag_bytes, "all_gather")
    i_rs = _inverse(g_rs, first, world, rs_kind)
    i_ag = _inverse(g_ag, first, world, ag_kind)
    table = np.stack([a_rs[i_rs], alone_rs[i_rs], shared_rs[i_rs],
                      a_ag[i_ag], alone_ag[i_ag], shared_ag[i_ag]], axis=1)
    table = np.where(np.isfinite(table), table, 1e300)
    classes = np.unique(_significant(table, 9), axis=0)
    compute_s = compute_ms * 1e-3
    results = []
    for row in classes:
        row = [float(x) for x in row]
        rs = OpCost(row[0], v_rs, row[1], row[2])
        ag = OpCost(row[3], v_ag, row[4], row[5])
        results.append((simulate_ops(per_stage, compute_s, rs, ag), (rs, ag)))
    worst, worst_ops = max(results, key=lambda r: r[0].one.step_s)
    worst_sep = max((r[0].separate for r in results), key=lambda t: t.step_s)
    rs, ag = worst_ops
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
    worst_ring = int(np.argmin(r_rs.alone_gb_per_s)) if r_rs.n_rings else 0
    return OverlapReport(
        rs_kind=rs_kind, ag_kind=ag_kind, layers_per_stage=per_stage, compute_s=compute_s,
        rs_bytes=rs_bytes, ag_bytes=ag_bytes, rs_alone_s=rs.alone_s(), ag_alone_s=ag.alone_s(),
        rs_shared_s=shared_rs_t, ag_shared_s=shared_ag_t, latency_share=latency_share,
        shared_slowdown=slowdown,
        one=worst.one, separate=worst_sep, extra_communicators=extra,
        comm_memory_mb=float(comm_memory_mb), cost_classes=int(classes.shape[0]),
        rs_bottleneck=r_rs.bottleneck_tier[worst_ring] if r_rs.n_rings else "")
