"""The two schedules: which unit waits for and issues which collective.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .compute import BACKWARD_OVER_FORWARD, gemm_ctas
from .engine import Coll, Unit
from .pricing import Pricer
from .workload import StageWork

SCHEDULES = ("fsdp", "dist-opt")
WAVES = "links + SMs in GEMM waves"  # the scenario where units run in waves of their CTAs


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


@dataclass(frozen=True)
class ScheduleParams:
    schedule: str
    grad_scale: float
    bytes_per_param: float
    bucket_params: float
    opt_step: bool


def fsdp_units(st: StageWork, fwd: list[float], combo, pr: Pricer,
               s: ScheduleParams) -> list[Unit]:
    def pair(a: str, b: str, scale: float, slot) -> tuple[Coll, ...]:
        return tuple(c for c in (pr.coll(combo, a, slot.dense_bytes * scale),
                                 pr.coll(combo, b, slot.expert_bytes * scale)) if c)
    ag = [pair("dense_ag", "exp_ag", 1.0, slot) for slot in st.slots]
    rs = [pair("dense_rs", "exp_rs", s.grad_scale, slot) for slot in st.slots]
    n = len(st.slots)
    ctas = [gemm_ctas(*slot.gemm) for slot in st.slots]
    units = [Unit(fwd[k], ag[k], (), k - 1, ctas[k]) for k in range(n)]
    for k in reversed(range(n)):
        units.append(Unit(fwd[k] * BACKWARD_OVER_FORWARD, ag[k], rs[k], len(units) - 1,
                          ctas[k]))
    return units


def dist_opt_units(st: StageWork, fwd: list[float], combo, pr: Pricer,
                    s: ScheduleParams) -> list[Unit]:
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
    ctas = [gemm_ctas(*slot.gemm) for slot in st.slots]
    units = [Unit(fwd[k], tuple(c for c, _ in before[k]), (), tuple(w for _, w in before[k]),
                  ctas[k]) for k in range(n)]
    units += [Unit(fwd[k] * BACKWARD_OVER_FORWARD, (), tuple(after[k]), ctas=ctas[k])
              for k in reversed(range(n))]
    return units


def sharing_scenarios(sms: int | None, queue: bool,
                      waves: bool = False) -> list[tuple[str, float, bool, bool]]:
    """The sharing assumptions to run, as (name, share of the SMs one CTA holds, one
    launch queue, GEMM waves): links always, SMs where the topology counts them (as a
    fluid, and, where units state their CTAs (``waves``), in waves of their GEMM
    tiles), the launch queue when asked (with the SMs as the scenario before it)."""
    out = [("links shared", 0.0, False, False)]
    if sms:
        out.append(("links + SMs", 1.0 / sms, False, False))
        if waves:
            out.append((WAVES, 1.0 / sms, False, True))
    if queue:
        out.append(("links + SMs + one launch queue" if sms else "links + one launch queue",
                    1.0 / sms if sms else 0.0, True, bool(sms) and waves))
    return out
