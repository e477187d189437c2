"""The step model on a placed layout: :func:`simulate` with one :class:`SimulateInputs`.

It prices every collective of every stage (:mod:`.pricing`), builds the units of
the schedule (:mod:`.schedules`), runs them with one communicator and with a
separate all-gather communicator under every sharing assumption
(:mod:`.engine`), and reports the slowest stage (:mod:`.report`). Each
collective costs what NCCL's model says for its group and size
(:mod:`simharness.topology.nccl_model`). Ranks with equal costs are simulated
once; the slowest rank sets a stage's step, the slowest stage the job's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..topology.cluster import Cluster
from ..topology.comm_memory import CommMemoryInputs
from ..topology.errors import TopologyError
from ..topology.model_error import lookup, network_class_of
from ..topology.nccl_tuning import DEFAULT_NCCL, nccl_version
from ..topology.placement import Placement, place_layout
from .compute import BACKWARD_OVER_FORWARD, check_number, compute_times, gemm_ctas
from .engine import Coll, Timeline, Unit, run_units
from .pricing import ROLE_NAMES, Pricer, job_groups
from .report import (
    HBM_BYTES_PER_WIRE_BYTE,
    OverlapReport,
    Scenario,
    StageRow,
    collective_rows,
    extra_memories,
    model_unknowns,
    queue_note,
)
from .schedules import (
    SCHEDULES,
    ScheduleParams,
    dist_opt_units,
    fsdp_units,
    sharing_scenarios,
)
from .workload import StageWork


@dataclass(frozen=True)
class SimulateInputs:
    """Everything :func:`simulate` needs besides the layout and its placement.

    ``stages``: the job's stages (:func:`.workload.job_stages`). Compute:
    ``compute_ms`` is one transformer layer's backward (forward half of it; other
    units by their FLOPs where known), or it comes from the units' FLOPs at ``mfu``
    of ``peak_tflops`` (default: the topology's ``[node] peak_bf16_tflops``);
    exactly one of the two. ``schedule``: ``"fsdp"`` or ``"dist-opt"``
    (:mod:`.schedules`). ``grad_scale``: gradient bytes per parameter byte (2 for
    fp32 gradients of bf16 parameters). ``rs_kind``: the dense reduce-scatter's
    group kind; ``ag_kind``: the dense all-gather's (fsdp; default the
    ``<rs_kind>_ag`` twin when the layout has it); it must have the
    reduce-scatter group's ranks. ``comm_memory_mb``: one extra communicator's
    memory (default: computed, with ``memory_inputs`` when given). ``collnet``:
    let NCCL use CollNet where the switches have it. ``nccl``: the NCCL release
    modelled. ``param_gather_with_optimizer_step``: dist-opt dispatches every
    chunk's all-gather in the optimizer step (interleaved pipelines only).
    ``bucket_params``: dist-opt's bucket size (default ``max(40M, 1M x dp)``,
    ``distributed_data_parallel.py:131-134``, dp without CP,
    ``process_groups_config.py:581``). ``launch_queue``: add the one-launch-queue
    scenario (default: for dist-opt only, :mod:`.engine`). ``reader_words``,
    ``memory_words``, ``memory_paid``: who reads the all-gather group and which memory
    case is priced (:mod:`simharness.ag_readers`' words, passed through to the report).
    """

    stages: Sequence[StageWork]
    schedule: str = "fsdp"
    compute_ms: float | None = None
    mfu: float | None = None
    peak_tflops: float | None = None
    grad_scale: float = 1.0
    bytes_per_param: float = 2.0
    rs_kind: str = "dp_cp"
    ag_kind: str | None = None
    comm_memory_mb: float | None = None
    collnet: bool = False
    memory_inputs: CommMemoryInputs | None = None
    nccl: str = DEFAULT_NCCL
    param_gather_with_optimizer_step: bool = False
    bucket_params: float | None = None
    launch_queue: bool | None = None
    reader_words: str = ""
    memory_words: str = ""
    memory_paid: bool = True


def _check_inputs(cfg, schedule: str, grad_scale: float, bytes_per_param: float,
                  comm_memory_mb: float | None, opt_step: bool, vpp: int = 1) -> None:
    if schedule not in SCHEDULES:
        raise TopologyError(f"unknown --schedule {schedule!r}; expected one of "
                            f"{', '.join(SCHEDULES)}")
    check_number("grad_scale", grad_scale)
    if comm_memory_mb is not None:
        check_number("comm_memory_mb", comm_memory_mb)
    check_number("bytes_per_param", bytes_per_param, positive=True)
    if opt_step:
        if schedule != "dist-opt":
            raise TopologyError("--overlap-param-gather-with-optimizer-step belongs to "
                                "--schedule dist-opt")
        if vpp < 2 or int(cfg.pipeline_model_parallel_size) < 2:
            raise TopologyError("--overlap-param-gather-with-optimizer-step needs interleaved "
                                "pipelining (Megatron: 'only supported with interleaved "
                                "pipeline parallelism'); give --pp >= 2 and --vpp >= 2, or "
                                "drop it")



def simulate(layout, placement: Placement, inputs: SimulateInputs) -> OverlapReport:
    """Run the step model for ``inputs.stages`` of a placed layout (:class:`SimulateInputs`)."""
    stages, schedule, nccl = inputs.stages, inputs.schedule, inputs.nccl
    grad_scale, bytes_per_param = inputs.grad_scale, inputs.bytes_per_param
    comm_memory_mb = inputs.comm_memory_mb
    param_gather_with_optimizer_step = inputs.param_gather_with_optimizer_step
    bucket_params, launch_queue = inputs.bucket_params, inputs.launch_queue
    cfg = layout.config
    spec = placement.cluster.spec
    # virtual chunks: --vpp, or what a pipeline_model_parallel_layout string gave the stages
    vpp = max(int(cfg.virtual_pipeline_model_parallel_size or 1),
              max((len(st.layers) for st in stages), default=1))
    _check_inputs(cfg, schedule, grad_scale, bytes_per_param, comm_memory_mb,
                  param_gather_with_optimizer_step, vpp)
    nccl = nccl_version(nccl)
    fwd, how = compute_times(stages, spec, compute_ms=inputs.compute_ms,
                             mfu=inputs.mfu, peak_tflops=inputs.peak_tflops)
    jg = job_groups(layout, stages, schedule, inputs.rs_kind, inputs.ag_kind)
    pr = Pricer(layout, placement, jg, collnet=inputs.collnet, nccl=nccl)
    dp = jg.groups["dense_rs"].shape[1] // max(int(cfg.context_parallel_size), 1)
    sched = ScheduleParams(schedule, grad_scale, bytes_per_param,
                           bucket_params if bucket_params is not None else max(4e7, 1e6 * dp),
                           param_gather_with_optimizer_step)
    build = fsdp_units if schedule == "fsdp" else dist_opt_units
    pp_groups = np.asarray(layout.groups("pp"), dtype=np.int64)
    combos = {st.stage: pr.combos(pp_groups[:, st.stage] - int(layout.rank_offset))
              for st in stages}
    units = {(st.stage, j): build(st, [fwd[(st.stage, k)] for k in range(len(st.slots))],
                                  c, pr, sched)
             for st in stages for j, c in enumerate(combos[st.stage])}
    scen = sharing_scenarios(spec.node.sms, schedule == "dist-opt" if launch_queue is None
                             else bool(launch_queue),
                             any(gemm_ctas(*s.gemm) for st in stages for s in st.slots))
    results = _run_scenarios(scen, stages, combos, units, pr, jg)
    error_range = _error_range(scen, stages, combos, units, pr, jg)
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
                               max(v[1].held_s for v in results[name].values()),
                               max(results[name].values(), key=lambda v: v[0].step_s)[0]
                               .shared_s,
                               max(results[name].values(), key=lambda v: v[1].step_s)[1]
                               .shared_s)
                      for name, *_ in scen)
    worst = max(range(len(rows)), key=lambda i: rows[i].one.step_s)
    w_st, w_j = stages[worst].stage, base[stages[worst].stage][2]
    w_combo = combos[w_st][w_j]
    crow = collective_rows(units[(w_st, w_j)], w_combo, pr, jg, nccl)
    tot = sum(c.alone_s * c.count for c in crow)
    latency_share = sum(c.latency_s * c.count for c in crow) / tot if tot else 0.0
    keep = pr.keep_fn(w_combo)
    slowdown = max((1.0 / max(keep(lab, frozenset(pr.info)), 1e-12) for lab in pr.info),
                   default=1.0)
    slowdown_words = _slowdown_words(keep, list(pr.info), jg.kind, slowdown)
    memories, mem_lines = extra_memories(layout, spec, crow, w_combo, pr, nccl, comm_memory_mb,
                                        inputs.memory_inputs)
    hbm = None
    if spec.node.hbm_gb_per_s and crow:
        wire = max(c.size_bytes / max(c.alone_s, 1e-12) for c in crow)
        hbm = 2 * wire * HBM_BYTES_PER_WIRE_BYTE / (spec.node.hbm_gb_per_s * 1e9)
    notes = [queue_note(scenarios, schedule)]
    if schedule == "dist-opt":
        notes.append(f"buckets of >= {sched.bucket_params:.3g} parameters, filled in backward "
                     "order per model chunk (dense and expert buffers apart)")
    return OverlapReport(
        schedule=schedule, nccl=nccl, compute_how=how, groups=dict(jg.kind), stages=rows,
        worst_stage=worst, collectives=crow, scenarios=scenarios,
        comm_memories=memories, cost_classes=sum(len(v) for v in combos.values()),
        memory_lines=mem_lines,
        notes=tuple(notes), unknowns=model_unknowns(spec, "exp_rs" in jg.kind, hbm), hbm_share=hbm,
        latency_share=latency_share, shared_slowdown=slowdown,
        shared_slowdown_words=slowdown_words,
        ag_used=schedule == "fsdp" and not jg.unused, unused_words=jg.unused,
        has_traffic=bool(crow), reader_words=inputs.reader_words,
        memory_words=inputs.memory_words, memory_paid=inputs.memory_paid,
        error_range_pct=error_range)


_Results = dict[str, dict[int, tuple[Timeline, Timeline, int]]]


def _run_scenarios(scen, stages, combos, units, pr: Pricer, jg) -> _Results:
    """Per scenario and stage: (one communicator, separate, index of the slowest combo)."""
    results: _Results = {}
    for name, sm, single, waves in scen:
        results[name] = {}
        for st in stages:
            runs = []
            for j, combo in enumerate(combos[st.stage]):
                keep = pr.keep_fn(combo)
                one = run_units(units[(st.stage, j)], jg.one_q, keep, sm_per_cta=sm,
                                single_queue=single, waves=waves)
                sep = one if jg.sep_q == jg.one_q else run_units(
                    units[(st.stage, j)], jg.sep_q, keep, sm_per_cta=sm, single_queue=single,
                    waves=waves)
                runs.append((one, sep, j))
            slow = max(runs, key=lambda r: r[0].step_s)
            results[name][st.stage] = (slow[0], max((r[1] for r in runs),
                                                    key=lambda t: t.step_s), slow[2])
    return results


def _gain_pct(per_stage: dict[int, tuple[Timeline, Timeline, int]]) -> float:
    one = max(v[0].step_s for v in per_stage.values())
    sep = max(v[1].step_s for v in per_stage.values())
    return 100.0 * (one - sep) / one if one else 0.0


def _error_range(scen, stages, combos, units, pr: Pricer, jg) -> tuple[float, float] | None:
    """The gain (%) with every collective's time divided by the p10 and by the p90 of its
    network class and size band's time ratio (model / measured,
    :mod:`simharness.topology.model_error`): the collectives as slow and as fast as the
    model's held-out error allows, all in the same direction; min and max over those two
    runs of every scenario. Collectives whose class and band have no measured error keep
    their time. None when no collective has one."""
    cache: dict[tuple[str, int, float], tuple[float, float] | None] = {}
    spec = pr.cluster.spec

    def ratios(combo, c: Coll) -> tuple[float, float] | None:
        key = (c.group, combo[c.group], c.volume)
        if key not in cache:
            k = pr.info[c.group]
            dev = k.rings.devices[int(k.class_first[combo[c.group]])]
            err = lookup(network_class_of(spec, int(np.unique(pr.cluster.domain_of(dev)).size)),
                         c.volume)
            cache[key] = (err.p10, err.p90) if err.p10 is not None and err.p90 is not None \
                else None
        return cache[key]

    def scaled(combo, us: list[Unit], which: int) -> list[Unit]:
        def one(c: Coll) -> Coll:
            r = ratios(combo, c)
            return c if r is None else replace(c, alpha_s=c.alpha_s / r[which],
                                               rate=c.rate * r[which])
        return [replace(u, before=tuple(map(one, u.before)), after=tuple(map(one, u.after)))
                for u in us]

    gains = []
    for which in (0, 1):
        sc_units = {(st.stage, j): scaled(combo, units[(st.stage, j)], which)
                    for st in stages for j, combo in enumerate(combos[st.stage])}
        if not cache or all(v is None for v in cache.values()):
            return None
        res = _run_scenarios(scen, stages, combos, sc_units, pr, jg)
        gains += [_gain_pct(res[name]) for name, *_ in scen]
    return min(gains), max(gains)


def _slowdown_words(keep, labels: list[str], kind: dict[str, str], slowdown: float) -> str:
    """Which collective the worst slowdown is, which others it shares links with, and why:
    ``a collective runs up to 2.00x slower ...`` with the names filled in."""
    if len(labels) < 2 or slowdown <= 1.0 + 1e-9:
        why = ("only one collective moves data" if len(labels) < 2
               else "they cross no link in common")
        return f"no collective slows another: {why}"
    everyone = frozenset(labels)
    worst = max(labels, key=lambda lab: 1.0 / max(keep(lab, everyone), 1e-12))
    others = [o for o in labels if o != worst and keep(worst, frozenset((worst, o))) < 1 - 1e-9]
    others = others or [o for o in labels if o != worst]

    def name(lab: str) -> str:
        return f"the {ROLE_NAMES[lab]} ({kind[lab]})"

    same = all(kind[o] == kind[worst] for o in others)
    why = ("they run on the same ranks' links" if same else "their rings cross the same links")
    return (f"{name(worst)} runs up to {slowdown:.2f}x slower while "
            f"{' and '.join(name(o) for o in others)} "
            f"{'moves' if len(others) == 1 else 'move'} data at the same time: {why}, and "
            f"each link's bandwidth is split between them (max-min fair share)")


def place_and_simulate(layout, cluster: Cluster, inputs: SimulateInputs, *, hosts=None,
                       first_device: int | None = None) -> OverlapReport:
    """:func:`simulate` after placing ``layout`` on ``cluster``
    (:func:`~simharness.topology.placement.place_layout`)."""
    placement = place_layout(layout, cluster, first_device=first_device, hosts=hosts)
    return simulate(layout, placement, inputs)
