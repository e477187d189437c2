"""The validation rules, one table in Megatron's order: what ``validate`` raises and
``explain`` lists.

Each :class:`Rule` has a name, a one-line statement, who enforces it (NeMo,
Megatron-Core, or simharness where it cannot model an input), the exception
Megatron raises, and ``evaluate(facts) -> Verdict | None`` (None: the rule does
not apply). :func:`first_failure` walks :data:`RULES` in order, so the first
error is the one megatron-core of that profile raises first.

>>> from simharness.fields import ParallelismFields
>>> cfg = ParallelismFields(world_size=16, tensor_model_parallel_size=2)   # not validated
>>> [r.name for r, v in evaluate_all(cfg, "0.19") if v is not None and v.holds][:3]
['world-covers-pipeline', 'world-divisible', 'order-dense']
>>> cfg = ParallelismFields(world_size=12, tensor_model_parallel_size=8)
>>> first_failure(cfg, "0.19").megatron_error
'RuntimeError'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import LayoutError, SimharnessError
from .grid import Grid, inject_gtp
from .profiles import DEFAULT_ORDER, Profile, ag_grids_after_init, get_profile, hybrid_chunk_sizes

if TYPE_CHECKING:  # pragma: no cover
    from .fields import ParallelismFields

NEMO, MCORE, SIMHARNESS = "NeMo", "Megatron-Core", "simharness"


@dataclass(frozen=True)
class Verdict:
    """A rule evaluated on one configuration: whether it ``holds``, the worked ``check``,
    and (when it fails) the error ``message``, its ``values`` and ``error`` (Megatron's
    exception, when it differs from the rule's default). ``megatron_accepts``: only
    simharness rejects this input (it cannot model what Megatron builds)."""

    holds: bool
    check: str
    message: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    megatron_accepts: bool = False


@dataclass(frozen=True)
class Facts:
    """What the rules read: the configuration, the profile and the torch world."""

    cfg: ParallelismFields
    profile: Profile
    torch_world: int  # ranks of the job's torch world (rank_offset + world_size unless given)

    @property
    def gtp_axis(self) -> bool:
        return self.profile.gtp_axis


@dataclass(frozen=True)
class Rule:
    name: str
    statement: str
    source: str
    megatron_error: str | None
    evaluate: Callable[[Facts], Verdict | None]

    def error(self, verdict: Verdict) -> LayoutError:
        error = None if verdict.megatron_accepts else verdict.error or self.megatron_error
        return LayoutError(verdict.message, megatron_error=error, rule=self.name,
                           **verdict.values)


RULES: list[Rule] = []


def _rule(name: str, statement: str, megatron_error: str | None, source: str = MCORE):
    def register(fn: Callable[[Facts], Verdict | None]):
        RULES.append(Rule(name, statement, source, megatron_error, fn))
        return fn
    return register


# ------------------------------------------------ Megatron's generators, exactly
def _sizes(cfg: ParallelismFields, expert: bool, gtp_axis: bool) -> dict[str, int]:
    """RankGenerator's ``name_to_size`` (its key order is the append order)."""
    if expert:
        sizes = dict(tp=cfg.etp, pp=cfg.pp, dp=cfg.edp, ep=cfg.ep, cp=1)
    else:
        sizes = dict(tp=cfg.tp, pp=cfg.pp, dp=cfg.dp, ep=1, cp=cfg.cp)
    if gtp_axis:
        sizes["gtp_remat"] = cfg.expert_gtp_remat_size if expert else cfg.gtp_remat_size
    return sizes


def _generator_order(f: Facts, expert: bool) -> str:
    """The order string the generator is given (0.19 injects ``gtp_remat``)."""
    order = f.cfg.order_resolved
    return inject_gtp(order, after="ep" if expert else "tp") if f.gtp_axis else order


def _order_verdict(f: Facts, expert: bool) -> Verdict:
    """RankGenerator's order handling: a size > 1 dimension whose name is not a
    substring of the lowercased order (RuntimeError), then a token it has no size for
    (KeyError, from ``name_to_size[token]``)."""
    sizes = _sizes(f.cfg, expert, f.gtp_axis)
    given = _generator_order(f, expert)
    low = given.lower()
    side = "expert" if expert else "dense"
    shown = ", ".join(f"{k}({s})" for k, s in sizes.items() if s > 1) or "nothing of size > 1"
    check = f"{side} order {low} names {shown}"
    for name, size in sizes.items():
        if name not in low and size != 1:
            return Verdict(False, check, (
                f"order {f.cfg.order!r} has no {name!r} but its size is {size} "
                f"(Megatron: 'The size of ({name}) is ({size}), but you haven'tspecified the "
                f"order ({given}).'); add '{name}' to the order, e.g. {DEFAULT_ORDER!r}."),
                {"order": f.cfg.order, name: size}, "RuntimeError")
        if name not in low:
            low = f"{low}-{name}"
    unknown = [t for t in low.split("-") if t not in sizes]
    if unknown:
        return Verdict(False, check, (
            f"order {f.cfg.order!r} has unknown token(s) {', '.join(map(repr, unknown))}; use "
            f"only {', '.join(sizes)} joined by '-' (megatron-core {f.profile.name}), e.g. "
            f"{DEFAULT_ORDER!r}."), {"order": f.cfg.order}, "KeyError")
    return Verdict(True, check)


def _megatron_grid(f: Facts, expert: bool) -> Grid:
    """Megatron's generator as it is built, a repeated token included (call only after
    the order rules hold)."""
    return Grid.from_sizes(_generator_order(f, expert), f.cfg.rank_offset,
                           **_sizes(f.cfg, expert, f.gtp_axis))


def _megatron_lists(grid: Grid, token: str, world: int) -> np.ndarray:
    """``RankGenerator.get_ranks(token)``: with a repeated token the grid spans more than
    ``world`` positions and Megatron keeps its first ``world // group size`` groups."""
    return grid.groups(token)[: world // grid.group_size(token)]


def _phase_tokens(f: Facts, phase: int) -> list[tuple[bool, str, bool]]:
    """``(expert, token, first list only)`` Megatron asks for in one stretch of its
    ``new_group`` calls; the stretches end where the in-creation asserts run."""
    g = "gtp_remat-" if f.gtp_axis else ""
    gtp = f.gtp_axis and f.cfg.gtp_remat_size > 1
    egtp = f.gtp_axis and f.cfg.expert_gtp_remat_size > 1
    d = [(False, t, False) for t in (["gtp_remat"] if f.gtp_axis else []) + ["dp-cp"]]
    if phase == 1:  # before the hybrid-CP assert
        return d
    if phase == 2:  # dp, the GTP dp groups, the first cp group (then the hierarchical assert)
        toks = ["dp"] + (["gtp_remat-dp", "gtp_remat-dp-cp"] if gtp else [])
        return [(False, t, False) for t in toks] + [(False, "cp", True)]
    if phase == 3:  # the rest of cp, mp, tp, the first pp group (then the backend assert)
        return [(False, "cp", False), (False, f"tp-{g}pp", False), (False, "tp", False),
                (False, "pp", True)]
    if phase == 4:  # to the expert DP (then the expert partial-DP assert)
        dense = ["pp", f"tp-{g}dp-cp", f"tp-{g}dp", "tp-cp"]
        expert = (["gtp_remat"] if f.gtp_axis else []) + ["ep", "tp", "tp-ep", "tp-ep-pp"] + (
            ["tp-ep-gtp_remat-pp"] if f.gtp_axis else [])
        return [(False, t, False) for t in dense] + [(True, t, False) for t in expert]
    return [(True, "dp", False)] + ([(True, "gtp_remat-dp", False)] if egtp else [])


def _ranks_verdict(f: Facts, phase: int) -> Verdict | None:
    """Every rank Megatron passes to ``new_group`` in ``phase`` is in the torch world."""
    cfg, world, top = f.cfg, f.cfg.world_size_resolved, f.torch_world
    repeated = repeated_tokens(cfg.order_resolved)
    if not repeated:  # the groups are the window's: only the window can overflow
        if phase == 1 and cfg.rank_offset + world > top:
            phase_tokens = _phase_tokens(f, 1)[:1]
        else:
            return None
    else:
        phase_tokens = _phase_tokens(f, phase)
    grids = {e: _megatron_grid(f, e) for e in (False, True)}
    for expert, token, first in phase_tokens:
        lists = _megatron_lists(grids[expert], token, world)
        lists = lists[:1] if first else lists
        if lists.size == 0:
            continue
        said = _new_group_error(lists, top)
        if said is not None:
            if cfg.rank_offset + world > top:
                msg = (f"rank_offset ({cfg.rank_offset}) + world_size ({world}) = "
                       f"{cfg.rank_offset + world} ranks but the torch world has {top} "
                       f"(Megatron: 'ValueError: {said}' from new_group); "
                       + (f"use rank_offset <= {top - world} or a smaller local_world_size."
                          if world <= top else f"use local_world_size <= {top}."))
                vals: dict[str, Any] = {"rank_offset": cfg.rank_offset, "world_size": world,
                                        "torch_world": top}
            else:
                msg = (f"order {cfg.order!r} repeats {', '.join(map(repr, repeated))}: "
                       f"Megatron's RankGenerator keeps one size per occurrence, so its "
                       f"{'expert' if expert else 'dense'} '{token}' groups reach rank "
                       f"{int(lists.max())} (torch world {top}; Megatron: 'ValueError: {said}' "
                       f"from new_group); name each dimension once, e.g. {DEFAULT_ORDER!r}.")
                vals = {"order": cfg.order, "repeated": repeated}
            return Verdict(False, f"'{token}' ranks < torch world {top}", msg, vals)
    return None


def _new_group_error(lists: np.ndarray, top: int) -> str | None:
    """What torch's ``new_group`` says (ValueError) for the first of ``lists`` it rejects
    in a ``top``-rank world, or None: a group larger than the world, else the smallest
    rank >= ``top`` of the first group (in creation order) holding one."""
    if lists.shape[1] > top:
        return ("the new group's world size should be less or equal to the world size set "
                "by init_process_group")
    bad = (lists >= top).any(axis=1)
    if not bad.any():
        return None
    row = lists[int(np.argmax(bad))]
    return f"Rank {int(row[row >= top].min())} is out of range"


def repeated_tokens(order: str) -> list[str]:
    """The tokens ``order`` names more than once, sorted.

    >>> repeated_tokens("tp-dp-TP-pp-dp"), repeated_tokens("tp-cp-ep-dp-pp")
    (['dp', 'tp'], [])
    """
    tokens = order.lower().split("-")
    return sorted({t for t in tokens if tokens.count(t) > 1})


# ------------------------------------------------------------------- the table
@_rule("gtp-needs-0.19", "GTP weight remat exists only from megatron-core 0.19", "TypeError")
def _gtp_needs_019(f: Facts) -> Verdict | None:
    gtp, egtp = f.cfg.gtp_remat_size, f.cfg.expert_gtp_remat_size
    if gtp == egtp == 1:
        return None
    p = f.profile
    return Verdict(p.gtp_axis, f"mcore = {p.name}", (
        f"gtp_remat_size={gtp}, expert_gtp_remat_size={egtp}: GTP weight remat exists only "
        f"from megatron-core 0.19 (profile {p.name} is megatron-core {p.versions}); use "
        f"mcore='0.19' or set both to 1."))


@_rule("world-covers-pipeline", "the world has at least one rank per pipeline stage",
       "RuntimeError", NEMO)
def _world_covers_pipeline(f: Facts) -> Verdict:
    W, pp = f.cfg.world_size_resolved, f.cfg.pp
    # NeMo's ValueError comes first in a NeMo run; megatron-core alone raises RuntimeError
    # here (W < pp means W is not divisible by tp*pp*cp).
    return Verdict(pp <= W, f"world >= pp: {W} >= {pp}", (
        f"world_size ({W}) is smaller than pipeline_model_parallel_size ({pp}) (NeMo: "
        f"'Expected world_size ({W}) to be greater than/equal to pipeline size ({pp})'); use "
        f"at least {pp} ranks or a smaller pipeline."),
        {"nemo_error": "ValueError", "world_size": W, "pipeline_model_parallel_size": pp})


@_rule("no-encoder-pipeline", "the encoder pipeline split is gone from megatron-core",
       "AssertionError", NEMO)
def _no_encoder_pipeline(f: Facts) -> Verdict | None:
    e = f.cfg.encoder_pipeline_model_parallel_size
    if not e:
        return None
    return Verdict(False, f"encoder_pipeline_model_parallel_size = {e} = 0", (
        f"encoder_pipeline_model_parallel_size={e}: NeMo asserts it is 0 (the encoder/decoder "
        f"split was removed from megatron-core); set it to 0."))


@_rule("encoder-tp", "the encoder tensor-parallel size is 0 or tp", "AssertionError", NEMO)
def _encoder_tp(f: Facts) -> Verdict | None:
    e, tp = f.cfg.encoder_tensor_model_parallel_size, f.cfg.tp
    if not e:
        return None
    return Verdict(e == tp, f"encoder_tensor_model_parallel_size in (0, {tp}): {e}", (
        f"encoder_tensor_model_parallel_size={e} must be 0 or equal to "
        f"tensor_model_parallel_size ({tp}) (NeMo asserts it); set it to 0."))


@_rule("sharp-group", "sharp_enabled_group needs use_sharp and is 'dp' or 'dp_replica' "
       "('dp_replica' needs several optimizer instances)", "AssertionError")
def _sharp_group(f: Facts) -> Verdict | None:
    c = f.cfg
    sg, n = c.sharp_enabled_group, c.num_distributed_optimizer_instances
    if not c.use_sharp and sg is None:
        return None
    check = f"use_sharp={c.use_sharp}, sharp_enabled_group={sg!r}, instances={n}"
    if c.use_sharp and sg not in (None, "dp", "dp_replica"):
        msg = (f"sharp_enabled_group={sg!r} is invalid (Megatron: 'Invalid sharp_enabled_group'); "
               f"use 'dp' or 'dp_replica'.")
    elif c.use_sharp and sg == "dp_replica" and n <= 1:
        msg = ("sharp_enabled_group='dp_replica' needs num_distributed_optimizer_instances > 1 "
               f"(got {n}); raise the instances or use 'dp'.")
    elif not c.use_sharp:
        msg = (f"sharp_enabled_group={sg!r} is only valid with use_sharp=True; set use_sharp or "
               f"drop sharp_enabled_group.")
    else:
        return Verdict(True, check)
    return Verdict(False, check, msg)


@_rule("gtp-one-instance", "GTP remat needs one distributed-optimizer instance",
       "AssertionError")
def _gtp_one_instance(f: Facts) -> Verdict | None:
    c = f.cfg
    gtp, egtp, n = c.gtp_remat_size, c.expert_gtp_remat_size, c.num_distributed_optimizer_instances
    if gtp == egtp == 1:
        return None
    return Verdict(n == 1, f"instances = {n} = 1", (
        f"gtp_remat_size={gtp}, expert_gtp_remat_size={egtp} with "
        f"num_distributed_optimizer_instances={n} (Megatron 0.19: 'GTP_remat with "
        f"num_distributed_optimizer_instances > 1 is not yet supported.'); use one instance "
        f"or GTP sizes of 1."))


def model_formula(c: ParallelismFields) -> tuple[str, str]:
    gtp = c.gtp_remat_size > 1
    return (f"tp*pp*cp{'*gtp' if gtp else ''}",
            f"{c.tp}*{c.pp}*{c.cp}{f'*{c.gtp_remat_size}' if gtp else ''}")


def expert_formula(c: ParallelismFields) -> tuple[str, str]:
    egtp = c.expert_gtp_remat_size > 1
    return (f"etp*ep*pp{'*egtp' if egtp else ''}",
            f"{c.etp}*{c.ep}*{c.pp}{f'*{c.expert_gtp_remat_size}' if egtp else ''}")


@_rule("world-divisible", "the world splits into whole model replicas of tp*pp*cp(*gtp)",
       "RuntimeError")
def _world_divisible(f: Facts) -> Verdict:
    c = f.cfg
    W, m = c.world_size_resolved, c.model_size
    form = model_formula(c)[0]
    gtp = f"*gtp_remat({c.gtp_remat_size})" if c.gtp_remat_size > 1 else ""
    return Verdict(W % m == 0, f"world % ({form}) = {W} % {m} = {W % m}", (
        f"world_size ({W}) is not divisible by {m} = tp({c.tp})*pp({c.pp})*cp({c.cp}){gtp} "
        f"(Megatron: 'world_size ({W}) is not divisible by {m}'); use a world that is a "
        f"multiple of {m}, e.g. {(W // m + 1) * m}, or change tp/pp/cp."),
        {"world_size": W, "model_size": m})


@_rule("vpp-needs-pp", "the interleaved schedule (vpp) needs a pipeline", "RuntimeError")
def _vpp_needs_pp(f: Facts) -> Verdict | None:
    vpp, pp = f.cfg.virtual_pipeline_model_parallel_size, f.cfg.pp
    if vpp is None:
        return None
    return Verdict(pp > 1, f"pp > 1: {pp} > 1", (
        f"virtual_pipeline_model_parallel_size={vpp} needs pipeline_model_parallel_size > 1 "
        f"(got {pp}) (Megatron: 'pipeline-model-parallel size should be greater than 1 with "
        f"interleaved schedule'); unset vpp or raise pp."))


@_rule("order-dense", "the order names each dense dimension of size > 1, and only known "
       "tokens", "RuntimeError")
def _order_dense(f: Facts) -> Verdict:
    return _order_verdict(f, expert=False)


@_rule("world-divisible-expert", "the world splits into whole expert replicas of "
       "etp*ep*pp(*egtp)", "RuntimeError")
def _world_divisible_expert(f: Facts) -> Verdict:
    c = f.cfg
    W, m = c.world_size_resolved, c.expert_model_size
    form = expert_formula(c)[0]
    return Verdict(W % m == 0, f"world % ({form}) = {W} % {m} = {W % m}", (
        f"world_size ({W}) is not divisible by expert_tensor_model_pipeline_parallel size "
        f"({m}) = etp({c.etp})*ep({c.ep})*pp({c.pp}) (Megatron RuntimeError); use a world "
        f"that is a multiple of {m} or change expert_tensor_parallel_size / "
        f"expert_model_parallel_size."),
        {"world_size": W, "expert_model_size": m})


@_rule("order-expert", "the order names each expert dimension (tp=etp, ep, expert dp, pp) of "
       "size > 1", "RuntimeError")
def _order_expert(f: Facts) -> Verdict:
    return _order_verdict(f, expert=True)


@_rule("pp-last-or-equal-dp", "with pp > 1 the order ends with pp, or attention and MoE have "
       "the same dp", "AssertionError")
def _pp_last(f: Facts) -> Verdict | None:
    c = f.cfg
    if c.pp == 1:
        return None
    return Verdict(c.pp_last or c.edp == c.dp, f"order ends with 'pp' ({c.pp_last}) or expert "
                   f"dp = dp ({c.edp} = {c.dp})", (
        f"order {c.order!r} does not end with 'pp', pp={c.pp} > 1 and the expert data-parallel "
        f"size ({c.edp}) differs from the data-parallel size ({c.dp}) (Megatron: 'When not "
        f"using pp-last rank ordering, the data parallel size of the attention and moe layers "
        f"must be the same'); make etp*ep equal tp*cp ({c.tp * c.cp}) or use a pp-last order "
        f"such as {DEFAULT_ORDER!r}."), {"dp": c.dp, "expert_dp": c.edp})


@_rule("same-pipeline-groups", "dense and expert generators give the same pipeline groups",
       "AssertionError")
def _same_pipeline_groups(f: Facts) -> Verdict | None:
    c = f.cfg
    W = c.world_size_resolved
    grids = [_megatron_grid(f, expert) for expert in (False, True)]
    for side, grid in enumerate(grids):
        full = math.prod(_sizes(c, bool(side), f.gtp_axis).values())
        if grid.world_size < full:  # 0.19: 'tp' is a substring of the injected 'gtp_remat'
            return Verdict(False, f"{'expert' if side else 'dense'} order "
                           f"{'-'.join(grid.names)} spans {grid.world_size} of {full} ranks", (
                f"order {c.order!r} has no 'tp' token but tp={c.etp if side else c.tp}: "
                f"megatron-core 0.19 injects 'gtp_remat', whose name contains 'tp', so "
                f"RankGenerator does not append 'tp' and its rank enumeration overruns "
                f"(Megatron: AssertionError 'idx ... with shape ... mismatch the return idx' "
                f"in the first get_ranks call); add 'tp' to the order, e.g. {DEFAULT_ORDER!r}."),
                {"order": c.order})
    if c.pp == 1 and not repeated_tokens(c.order_resolved):
        return None
    dense_pp, expert_pp = (_megatron_lists(g, "pp", W) for g in grids)
    same = dense_pp.shape == expert_pp.shape and bool(np.array_equal(dense_pp, expert_pp))
    return Verdict(same, "PIPELINE_MODEL_PARALLEL_GROUP(dense) == (expert)", (
        f"with order {c.order!r} the dense and expert pipeline groups differ (Megatron: "
        f"'Pipeline parallel groups are expected to be the same for Non-Expert and Expert "
        f"part'); make etp*ep equal tp*cp ({c.tp * c.cp}) or use order {DEFAULT_ORDER!r}."))


@_rule("instances-divide-dp", "the optimizer instances split DP-with-CP evenly",
       "AssertionError")
def _instances_divide_dp(f: Facts) -> Verdict | None:
    c = f.cfg
    n, s = c.num_distributed_optimizer_instances, c.data_parallel_size_with_cp
    if n == 1:
        return None
    return Verdict(s % n == 0, f"(dp*cp) % instances = {s} % {n} = {s % n}", (
        f"num_distributed_optimizer_instances ({n}) does not divide dp*cp = {c.dp}*{c.cp} = "
        f"{s} (Megatron: 'Data parallel size should be divisible by partial DistOpt shard "
        f"factor'); use a divisor of {s}."), {"instances": n, "dp_cp": s})


def _ranks_rule(phase: int, what: str):
    @_rule(f"ranks-in-world-{phase}", f"every rank of the {what} groups is in the torch world "
           f"(rank_offset + world_size <= world; a repeated order token must not reach past "
           f"it)", "ValueError")
    def _ranks(f: Facts) -> Verdict | None:
        bad = _ranks_verdict(f, phase)
        if bad is not None:
            return bad
        if phase == 1:
            end = f.cfg.rank_offset + f.cfg.world_size_resolved
            return Verdict(True, f"rank_offset + world_size = {end} <= world {f.torch_world}")
        return None
    return _ranks


_ranks_rule(1, "GTP and DP-with-CP")


@_rule("hybrid-cp-even", "hybrid context parallel needs an even dp*cp", "AssertionError")
def _hybrid_even(f: Facts) -> Verdict | None:
    if not f.cfg.hybrid_context_parallel:
        return None
    s = f.cfg.data_parallel_size_with_cp
    return Verdict(s % 2 == 0, f"dp*cp = {s} is even", (
        f"hybrid_context_parallel needs an even dp*cp, got {s} (Megatron: 'Hybrid context "
        f"parallel requires an even number of ranks')."))


@_rule("hybrid-cp-chunks", "every HYBRID_DP_CP group size divides dp*cp (simharness models "
       "only that; Megatron makes a short last group)", None, SIMHARNESS)
def _hybrid_chunks(f: Facts) -> Verdict | None:
    if not f.cfg.hybrid_context_parallel:
        return None
    s = f.cfg.data_parallel_size_with_cp
    bad = [k for k in hybrid_chunk_sizes(s) if s % k]
    return Verdict(not bad, f"dp*cp = {s} divisible by {hybrid_chunk_sizes(s)}", (
        f"hybrid_context_parallel with dp*cp={s} makes uneven HYBRID_DP_CP groups of size "
        f"{bad}; simharness models only dp*cp divisible by every power of two below it (use a "
        f"power of two)."), {"dp_cp": s})


_ranks_rule(2, "DP, GTP-DP and first CP")


@_rule("hierarchical-cp", "the hierarchical CP sizes multiply to cp", "AssertionError")
def _hierarchical_cp(f: Facts) -> Verdict | None:
    hcp, cp = f.cfg.hierarchical_context_parallel_sizes, f.cfg.cp
    if not hcp:
        return None
    prod = math.prod(hcp)
    return Verdict(prod == cp, f"{'*'.join(map(str, hcp))} = {prod} = cp ({cp})", (
        f"hierarchical_context_parallel_sizes {list(hcp)} multiply to {prod}, not "
        f"context_parallel_size ({cp}) (Megatron: bare AssertionError); give sizes whose "
        f"product is {cp}."))


@_rule("tp-token", "0.19: the order has a 'tp' token (the injected 'gtp_remat' hides a "
       "missing 'tp' from RankGenerator's check, and get_ranks('tp-...') then fails)",
       "ValueError")
def _tp_token(f: Facts) -> Verdict | None:
    if not f.gtp_axis:
        return None
    tokens = _generator_order(f, False).lower().split("-")
    return Verdict("tp" in tokens, f"'tp' in {'-'.join(tokens)}", (
        f"order {f.cfg.order!r} has no 'tp' token: megatron-core 0.19 injects 'gtp_remat', "
        f"whose name contains 'tp', so RankGenerator neither appends 'tp' nor complains, and "
        f"the MODEL_PARALLEL_GROUP lookup fails (Megatron: \"ValueError: 'tp' is not in "
        f"list\"); add 'tp' to the order, e.g. {DEFAULT_ORDER!r}."), {"order": f.cfg.order})


_ranks_rule(3, "CP, MP, TP and first PP")


@_rule("pp-backend", "the pipeline backend is nccl or ucc", "AssertionError")
def _pp_backend(f: Facts) -> Verdict | None:
    b = f.cfg.pipeline_model_parallel_comm_backend
    if b is None:
        return None
    return Verdict(b in ("nccl", "ucc"), f"backend = {b!r}", (
        f"pipeline_model_parallel_comm_backend={b!r} is not supported (Megatron asserts None, "
        f"'nccl' or 'ucc'); use one of those."))


_ranks_rule(4, "PP, TP-DP(-CP), TP-CP and expert model-parallel")


@_rule("instances-divide-expert-dp", "the optimizer instances split expert DP evenly",
       "AssertionError")
def _instances_divide_expert_dp(f: Facts) -> Verdict | None:
    c = f.cfg
    n, e = c.num_distributed_optimizer_instances, c.edp
    if n == 1:
        return None
    return Verdict(e % n == 0, f"expert dp % instances = {e} % {n} = {e % n}", (
        f"num_distributed_optimizer_instances ({n}) does not divide the expert data-parallel "
        f"size ({e}) (Megatron: 'Expert data parallel size should be divisible by partial "
        f"DistOpt shard factor'); use a divisor of {e}."), {"instances": n, "expert_dp": e})


_ranks_rule(5, "expert DP")


@_rule("all-gather-in-world", "0.18+: create_all_gather_groups()'s generators (offset 0, "
       "dp counted with GTP peers) stay inside the torch world", "ValueError")
def _all_gather_in_world(f: Facts) -> Verdict | None:
    c = f.cfg
    if not (c.create_all_gather_group and f.profile.ag_after_init):
        return None
    gtp = c.gtp_remat_size if f.gtp_axis else 1
    egtp = c.expert_gtp_remat_size if f.gtp_axis else 1
    dense, expert = ag_grids_after_init(c, f.profile.name)
    sides = ((dense, "dp-cp", "dense"),) + (((expert, "dp", "expert"),) if expert else ())
    for grid, token, side in sides:
        said = _new_group_error(grid.groups(token), f.torch_world)
        if said is not None:
            return Verdict(False, f"{side} AG generator spans {grid.world_size} ranks <= torch "
                           f"world {f.torch_world}", (
                f"create_all_gather_group with gtp_remat_size={gtp}, expert_gtp_remat_size="
                f"{egtp}, ep={c.ep}: megatron-core 0.19's create_all_gather_groups() sizes its "
                f"{side} generator with the full dp*gtp and the GTP axis again ({grid.world_size}"
                f" ranks from rank 0), beyond the {f.torch_world}-rank world (Megatron: "
                f"'ValueError: {said}'); turn the option off or use GTP "
                f"sizes of 1 (expert GTP > 1 is fine when ep = 1)."),
                {"gtp_remat_size": gtp, "expert_gtp_remat_size": egtp})
    return Verdict(True, f"AG generators span {max(g.world_size for g, _, _ in sides)} ranks "
                   f"<= torch world {f.torch_world}")


def _ag_reads(f: Facts) -> list[tuple[bool, str, str, str]]:
    """``(expert, token, getter, Megatron's exception)`` of the groups that 0.18+'s
    ``create_all_gather_groups(for_expert_parallelism=ep > 1)`` reads on its rank, in
    its order: ``is_initialized()`` (the DP group, else RuntimeError), then the size
    getters, which assert their group exists."""
    c = f.cfg
    g = "gtp_remat-" if f.gtp_axis and c.gtp_remat_size > 1 else ""
    eg = "gtp_remat-" if f.gtp_axis and c.expert_gtp_remat_size > 1 else ""
    reads = [(False, "dp", "is_initialized", "RuntimeError"),
             (False, "pp", "get_pipeline_model_parallel_world_size", "AssertionError"),
             (False, "cp", "get_context_parallel_world_size", "AssertionError"),
             (False, "tp", "get_tensor_model_parallel_world_size", "AssertionError"),
             (True, "ep", "get_expert_model_parallel_world_size", "AssertionError"),
             (False, f"{g}dp", "get_data_parallel_world_size", "AssertionError")]
    if c.ep > 1:  # a missing expert TP group is not asserted (the size becomes None): stop
        reads += [(True, "tp", "get_expert_tensor_parallel_world_size", ""),
                  (True, f"{eg}dp", "get_expert_data_parallel_world_size", "AssertionError")]
    return reads


@_rule("all-gather-job-ranks", "0.18+: with a repeated order token, every job rank has the "
       "groups create_all_gather_groups() reads (Megatron's kept groups may leave job ranks "
       "out)", "AssertionError")
def _all_gather_job_ranks(f: Facts) -> Verdict | None:
    """E.g. order ``tp-cp-ep-cp-pp-dp``, cp=2, dp=2, 4 job ranks of a 12-rank world:
    Megatron's DP groups are [0, 4], [1, 5], so job rank 2 has none and its
    ``create_all_gather_groups()`` raises RuntimeError ('requires parallel state to be
    initialized')."""
    c = f.cfg
    if not (c.create_all_gather_group and f.profile.ag_after_init
            and repeated_tokens(c.order_resolved)):
        return None
    W = c.world_size_resolved
    window = np.arange(c.rank_offset, c.rank_offset + W)
    grids = {e: _megatron_grid(f, e) for e in (False, True)}
    first: tuple[int, str, str, str] | None = None  # (rank, token, getter, error)
    for expert, token, getter, error in _ag_reads(f):
        lacking = window[~np.isin(window, _megatron_lists(grids[expert], token, W))]
        if lacking.size and (first is None or int(lacking[0]) < first[0]):
            first = (int(lacking[0]), f"{'expert ' if expert else ''}{token}", getter, error)
    if first is None:
        return Verdict(True, "every job rank has the groups create_all_gather_groups() reads")
    rank, token, getter, error = first
    if not error:  # what Megatron does next is not modelled: leave it to the next rule
        return None
    return Verdict(False, f"job rank {rank} has a '{token}' group", (
        f"order {c.order!r} repeats {', '.join(map(repr, repeated_tokens(c.order_resolved)))}: "
        f"Megatron keeps groups that leave job rank {rank} without a {token!r} group, so "
        f"create_all_gather_groups() fails there in {getter}() (Megatron: {error}); name "
        f"each dimension once, e.g. {DEFAULT_ORDER!r}, or turn the all-gather option off."),
        {"order": c.order, "failing_rank": rank}, error)


@_rule("repeated-token-groups", "a repeated order token changes no group (simharness "
       "models only that; Megatron accepts any repeat whose ranks stay in the torch world, "
       "and then some of its groups leave job ranks out and take in ranks past the job)",
       None, SIMHARNESS)
def _repeated_token_groups(f: Facts) -> Verdict | None:
    """Megatron keeps the first ``world // size`` groups of a generator that a repeat has
    made larger than the job; whenever they differ from the job's groups some kind leaves
    job ranks without a group and puts ranks past the window in one (e.g. order
    ``pp-cp-ep-pp-tp-dp``, pp=2, dp=2, 4 ranks in a 7-rank world: DP groups [0, 4], [1, 5],
    ranks 2 and 3 in none). simharness's kinds partition the job's ranks, so it rejects."""
    c = f.cfg
    repeated = repeated_tokens(c.order_resolved)
    if not repeated:
        return None
    window = np.arange(c.rank_offset, c.rank_offset + c.world_size_resolved)
    grids = {e: _megatron_grid(f, e) for e in (False, True)}
    ours = {False: c.dense_grid(gtp_token=f.gtp_axis), True: c.expert_grid(gtp_token=f.gtp_axis)}
    differ = []  # (expert, token, Megatron's lists, job ranks left out, ranks past the job)
    for phase in range(1, 6):
        for expert, token, _ in _phase_tokens(f, phase):
            lists = _megatron_lists(grids[expert], token, c.world_size_resolved)
            if not np.array_equal(lists, ours[expert].groups(token)[: len(lists)]):
                differ.append((expert, token, lists, np.setdiff1d(window, lists).tolist(),
                               np.setdiff1d(lists, window).tolist()))
    if not differ:
        return Verdict(True, "the repeat changes no group")
    expert, token, lists, missing, outside = next((d for d in differ if d[3]), differ[0])
    shown = lists.tolist() if lists.size <= 32 else f"{lists[:2].tolist()}..."
    return Verdict(False, f"'{token}' groups with and without the repeat differ", (
        f"order {c.order!r} repeats {', '.join(map(repr, repeated))}: Megatron accepts it "
        f"here (torch world {f.torch_world}) but its {'expert' if expert else 'dense'} "
        f"'{token}' groups {shown} leave job rank(s) {missing} in no group and take in "
        f"rank(s) {outside} outside the job's ranks {window[0]}..{window[-1]} (Megatron's "
        f"getter on a job rank left out raises AssertionError); simharness does not model "
        f"groups that do not partition the job. Name each dimension once, e.g. "
        f"{DEFAULT_ORDER!r}."),
        {"order": c.order, "repeated": repeated, "missing": missing, "outside": outside},
        megatron_accepts=True)


# ------------------------------------------------------------------- evaluation
def _facts(cfg: ParallelismFields, mcore: str, world: int | None) -> Facts:
    top = cfg.rank_offset + cfg.world_size_resolved if world is None else int(world)
    return Facts(cfg, get_profile(mcore), top)


def evaluate_all(cfg: ParallelismFields, mcore: str,
                 world: int | None = None) -> Iterator[tuple[Rule, Verdict | None]]:
    """Every rule with its verdict (None: does not apply; ``holds=None``-like rules that
    cannot be evaluated after an earlier failure yield a verdict of their own error)."""
    f = _facts(cfg, mcore, world)
    failed = False
    for rule in RULES:
        try:
            verdict = rule.evaluate(f)
        except SimharnessError as exc:  # inputs an earlier failing rule left undefined
            verdict = Verdict(False, f"cannot be evaluated: {exc}", str(exc))
        except ArithmeticError as exc:  # e.g. a size of 0 that an earlier rule refused
            if not failed:
                raise
            verdict = Verdict(False, f"cannot be evaluated after the failure above "
                                     f"({type(exc).__name__}: {exc})", str(exc))
        failed = failed or (verdict is not None and not verdict.holds)
        yield rule, verdict


def first_failure(cfg: ParallelismFields, mcore: str,
                  world: int | None = None) -> LayoutError | None:
    """The error megatron-core ``mcore`` raises first for ``cfg`` (None: it accepts).

    ``world`` is the torch world when it is larger than ``rank_offset + world_size``
    (``initialize_model_parallel(local_world_size=...)``).
    """
    f = _facts(cfg, mcore, world)
    for rule in RULES:
        verdict = rule.evaluate(f)
        if verdict is not None and not verdict.holds:
            return rule.error(verdict)
    return None
