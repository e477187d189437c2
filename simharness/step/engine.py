"""The event engine of the step model: units of compute and the collectives they wait for.

One rank runs a list of :class:`Unit` s in order; each waits for its ``before``
collectives and issues its ``after`` ones when its compute ends. Sharing between
the communicators that run at once:

- *one communicator*: NCCL runs a communicator's collectives one after another
  (NVIDIA/nccl#574): each communicator is one FIFO queue;
- *links*: collectives moving data at the same time share the links they both
  use max-min fairly (:func:`~simharness.topology.cost.maxmin_rates` over every
  group of the kinds moving data);
- *SMs*: an NCCL kernel holds one CTA per channel of its plan
  (:attr:`~simharness.topology.nccl_model.Estimate.n_channels`); compute runs at
  ``1 - (CTAs running) / SMs`` of its speed (only when the topology gives
  ``[node] sms``), or, for a unit that states its kernel's CTAs
  (:attr:`Unit.ctas`), at the ratio of its waves alone to its waves on the SMs
  the collectives leave (:func:`wave_speed`: the tail effect of a one-wave GEMM);
- *one launch queue*: with ``CUDA_DEVICE_MAX_CONNECTIONS=1`` every stream
  feeds one hardware queue in issue order: a collective waiting for its
  communicator's previous collective holds back every later kernel, *compute
  included* (the unit's compute is issued after the prefetch of the next
  unit's all-gather; Megatron's DDP says as much,
  ``param_and_grad_buffer.py:1665-1675``). Modelled for dist-opt, where
  Megatron runs with it; not for fsdp, where Megatron-LM refuses it ("FSDP
  requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset",
  ``megatron/training/arguments.py:1166``), unless ``launch_queue=True``.

A collective runs its latency first, then its bytes at its rate alone, scaled by
``keep`` while others move data. Step time = when the last collective and
compute end; exposed communication = step - compute.
:func:`simulate_ops` is the smallest use: equal layers, one all-gather and one
reduce-scatter each, on one communicator and on two.

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
from dataclasses import dataclass


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
    ctas: int = 0  # CTAs of the unit's kernel, when known (0: SMs shared as a fluid)


def wave_speed(ctas: int, sms: int, held: int) -> float:
    """Speed of a kernel of ``ctas`` CTAs (one per SM at a time) while collectives hold
    ``held`` of the ``sms`` SMs: its waves alone over its waves on the SMs left.

    A 132-CTA GEMM on an H100 (132 SMs) runs in one wave; beside a 24-CTA all-gather
    the last 24 CTAs wait for a second one (the tail effect):

    >>> wave_speed(132, 132, 24), round(1 - 24 / 132, 3)   # waves vs fluid
    (0.5, 0.818)
    """
    free = max(sms - held, 1)
    return math.ceil(ctas / sms) / math.ceil(ctas / free)


@dataclass(frozen=True)
class Timeline:
    step_s: float
    compute_s: float
    exposed_s: float
    overlap_s: float  # time an all-gather and a reduce-scatter were both in flight
    shared_s: float   # time both moved data (sharing the links they both use)
    held_s: float = 0.0  # compute ready but held behind a queued collective (one launch queue)
    compute_end_s: float = 0.0  # when the last unit's compute ended


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
                 single_queue: bool, waves: bool = True):
        self.units, self.queue_of, self.keep = units, queue_of, keep
        self.sm_per_cta, self.single, self.waves = sm_per_cta, single_queue, waves
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
        self.overlap = self.shared = self.held = self.compute_end = 0.0
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
        held = sum(cur.coll.ctas for cur in busy.values())
        unit_ctas = self.units[self.nxt].ctas if self.comp_left is not None and self.waves \
            else 0
        speed = wave_speed(unit_ctas, round(1.0 / self.sm_per_cta), held) \
            if unit_ctas and self.sm_per_cta > 0 else max(1.0 - self.sm_per_cta * held, 1e-3)
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
            self.compute_end = t_next
            self.nxt += 1
            self.comp_left = self.comp_seq = None
        return True


def run_units(units: Sequence[Unit], queue_of: Mapping[str, str],
              keep: Callable[[str, frozenset[str]], float], *, sm_per_cta: float = 0.0,
              single_queue: bool = False, waves: bool = True) -> Timeline:
    """Discrete-event run of ``units`` on one rank.

    ``queue_of`` maps a group kind to its communicator (one FIFO each);
    ``keep(group, moving)`` is the share of its alone rate a collective on
    ``group`` keeps while the groups ``moving`` move data; ``sm_per_cta`` the
    share of the SMs one CTA holds; ``single_queue`` launches kernels in issue
    order, compute included; ``waves`` False ignores the units' CTAs (SMs shared as a
    fluid). The earliest event completes exactly at its time, so the loop always advances.
    """
    e = _Engine(units, queue_of, keep, sm_per_cta, single_queue, waves)
    while e.step():
        pass
    if e.nxt < len(units) or any(e.queues.values()):  # pragma: no cover - guards the loop
        raise RuntimeError("overlap model stopped early")
    total = sum(u.compute_s for u in units)
    return Timeline(step_s=e.t, compute_s=total, exposed_s=max(e.t - total, 0.0),
                    overlap_s=e.overlap, shared_s=e.shared, held_s=e.held,
                    compute_end_s=e.compute_end)


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
