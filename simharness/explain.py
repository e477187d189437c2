"""A configuration in words: derived sizes with their formulas, and every
validation rule that applies, evaluated on the numbers (pure: data in, data out).

Works on raw fields, so an *invalid* configuration is explained too: the rule
that fails is marked, and ``error`` carries the library's message.

>>> ex = explain({"world_size": 64, "tensor_model_parallel_size": 4,
...               "pipeline_model_parallel_size": 2})
>>> next(d.formula for d in ex.derived if d.name == "data_parallel_size")
'dp = world / (tp*pp*cp) = 64 / (4*2*1) = 8'
>>> [r.holds for r in ex.rules][:2], ex.error
([True, True], None)
>>> bad = explain({"world_size": 12, "tensor_model_parallel_size": 8})
>>> [r.name for r in bad.rules if r.holds is False]
['world-divisible', 'world-divisible-expert']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields as dc_fields
from typing import Any, Mapping

from .config import ALIASES, DEFAULT_MCORE, DEFAULT_ORDER, TP_PP_DP_ORDER, ParallelismConfig
from .errors import SimharnessError


@dataclass(frozen=True)
class Derived:
    """A size the configuration implies: ``name``, ``value`` and the worked ``formula``."""

    name: str
    value: Any
    formula: str
    meaning: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "value": self.value, "formula": self.formula,
                "meaning": self.meaning}


@dataclass(frozen=True)
class Rule:
    """One validation rule: what it says, the worked check, and whether it holds.

    ``holds`` is ``None`` when it could not be evaluated (an earlier rule failed
    in a way that leaves its inputs undefined). ``source`` is who enforces it.
    """

    name: str
    statement: str
    check: str
    holds: bool | None
    source: str

    def to_dict(self) -> dict:
        return {"name": self.name, "statement": self.statement, "check": self.check,
                "holds": self.holds, "source": self.source}


@dataclass(frozen=True)
class Explanation:
    fields: dict[str, Any]
    mcore: str
    config: ParallelismConfig | None
    derived: list[Derived]
    rules: list[Rule]
    error: str | None

    @property
    def valid(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict:
        return {"mcore": self.mcore, "valid": self.valid, "error": self.error,
                "derived": [d.to_dict() for d in self.derived],
                "rules": [r.to_dict() for r in self.rules]}


def _defaults() -> dict[str, Any]:
    out = {}
    for f in dc_fields(ParallelismConfig):
        out[f.name] = f.default if not callable(f.default_factory) else f.default_factory()
    return out


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def explain(fields: Mapping[str, Any], mcore: str = DEFAULT_MCORE) -> Explanation:
    """Explain the configuration given by ``fields`` (NeMo names or aliases)."""
    from .config import order_problem
    from .profiles import PROFILES, check_profile, validate_profile

    given = {ALIASES.get(k, str(k).replace("-", "_")): v for k, v in dict(fields).items()}
    cfg = None
    error = None
    try:
        mcore = check_profile(mcore)
        cfg = ParallelismConfig.from_dict(given)
        validate_profile(cfg, mcore)
    except SimharnessError as exc:
        error = str(exc)
    v = _defaults()
    v.update({k: val for k, val in given.items() if k in v})
    if cfg is not None:
        v = {f.name: getattr(cfg, f.name) for f in dc_fields(ParallelismConfig)}
    tp, pp, cp, ep = (v["tensor_model_parallel_size"], v["pipeline_model_parallel_size"],
                      v["context_parallel_size"], v["expert_model_parallel_size"])
    n, gtp, egtp = (v["num_distributed_optimizer_instances"], v["gtp_remat_size"],
                    v["expert_gtp_remat_size"])
    sizes_ok = all(_int(x) and x >= 1 for x in (tp, pp, cp, ep, n, gtp, egtp))
    etp_raw = v["expert_tensor_parallel_size"]
    etp = etp_raw or tp
    world = v["world_size"]
    order = v["order"] or (TP_PP_DP_ORDER if v["use_tp_pp_dp_mapping"] else DEFAULT_ORDER)
    derived: list[Derived] = []
    rules: list[Rule] = []
    if not sizes_ok or not (_int(etp) and etp >= 1) or not isinstance(order, str):
        return Explanation(given, str(mcore), cfg, derived, rules,
                           error or "the sizes must be whole numbers >= 1.")

    model = tp * pp * cp * gtp
    emodel = etp * ep * pp * egtp
    mform = f"tp*pp*cp{'*gtp' if gtp > 1 else ''}"
    mnums = f"{tp}*{pp}*{cp}{f'*{gtp}' if gtp > 1 else ''}"
    eform = f"etp*ep*pp{'*egtp' if egtp > 1 else ''}"
    enums = f"{etp}*{ep}*{pp}{f'*{egtp}' if egtp > 1 else ''}"
    world_given = given.get("world_size") is not None
    if _int(world):
        if world_given:
            derived.append(Derived("world_size", world, f"world = {world} (given)",
                                   "ranks in the job"))
        else:
            derived.append(Derived(
                "world_size", world,
                f"world = lcm({mform}, {eform}) = lcm({model}, {emodel}) = {world}"
                + (" (grown until the optimizer instances divide dp)"
                   if world != math.lcm(model, emodel) else ""),
                "not given: the smallest world the sizes fit"))
    derived.append(Derived("model_parallel_size", tp * pp,
                           f"mp = tp*pp = {tp}*{pp} = {tp * pp}", "ranks in one model replica's "
                           "MODEL_PARALLEL_GROUP"))
    dp = edp = None
    if _int(world):
        dp = world // model
        edp = world // emodel
        derived.append(Derived("data_parallel_size", dp,
                               f"dp = world / ({mform}) = {world} / ({mnums}) = {dp}",
                               "model replicas"))
        derived.append(Derived("data_parallel_size_with_cp", dp * cp,
                               f"dp_cp = dp*cp = {dp}*{cp} = {dp * cp}",
                               "ranks in one DATA_PARALLEL_GROUP_WITH_CP (gradient "
                               "reduce-scatter)"))
    derived.append(Derived("expert_tensor_parallel_size", etp,
                           f"etp = {etp} (given)" if etp_raw else f"etp = tp = {tp} (not given)",
                           "tensor parallelism inside the experts"))
    if edp is not None:
        derived.append(Derived("expert_data_parallel_size", edp,
                               f"expert dp = world / ({eform}) = {world} / ({enums}) = {edp}",
                               "ranks in one EXPERT_DATA_PARALLEL_GROUP"))
    src = ("given" if given.get("order") else
           "use_tp_pp_dp_mapping" if v["use_tp_pp_dp_mapping"] else "default")
    derived.append(Derived("order", order, f"order = {order} ({src})",
                           "pp-last" if str(order).endswith("pp") else "pp not last"))
    if n > 1 and dp is not None:
        derived.append(Derived("intra_partial_data_parallel_size", dp * cp // n,
                               f"dp*cp / instances = {dp * cp} / {n} = {dp * cp // n}",
                               "ranks in one distributed-optimizer instance's DP group"))
        derived.append(Derived("intra_partial_expert_data_parallel_size", edp // n,
                               f"expert dp / instances = {edp} / {n} = {edp // n}",
                               "expert DP ranks per optimizer instance"))
    if cfg is not None and error is None:
        from .layout import build_layout

        try:
            summ = build_layout(cfg, mcore).summary()
        except SimharnessError as exc:
            error = str(exc)
        else:
            c = summ["communicators_per_rank"]
            rng = (f"{c['total_min']}" if c["total_min"] == c["total_max"]
                   else f"{c['total_min']}..{c['total_max']}")
            derived.append(Derived("new_group_calls", summ["new_group_calls"],
                                   f"{summ['new_group_calls']} new_group calls in "
                                   f"{summ['kinds']} kinds (mcore {mcore})",
                                   "every rank makes every call"))
            derived.append(Derived("communicators_per_rank", c["total_max"],
                                   f"{rng} per rank (nccl up to {c['nccl_max']}, gloo up to "
                                   f"{c['gloo_max']})", "groups each rank belongs to"))

    # ----------------------------------------------------------------- rules
    M, N = "Megatron-Core", "NeMo"

    def add(name, statement, check, holds, source=M):
        rules.append(Rule(name, statement, check, holds, source))

    if _int(world):
        add("world-covers-pipeline", "the world has at least one rank per pipeline stage",
            f"world >= pp: {world} >= {pp}", world >= pp, N)
    if v["encoder_pipeline_model_parallel_size"]:
        add("no-encoder-pipeline", "the encoder pipeline split is gone from megatron-core",
            f"encoder_pipeline_model_parallel_size = "
            f"{v['encoder_pipeline_model_parallel_size']} = 0",
            v["encoder_pipeline_model_parallel_size"] == 0, N)
    if v["encoder_tensor_model_parallel_size"]:
        e = v["encoder_tensor_model_parallel_size"]
        add("encoder-tp", "the encoder tensor-parallel size is 0 or tp",
            f"encoder_tensor_model_parallel_size in (0, {tp}): {e}", e in (0, tp), N)
    if v["use_sharp"] or v["sharp_enabled_group"] is not None:
        sg = v["sharp_enabled_group"]
        add("sharp-group", "sharp_enabled_group needs use_sharp and is 'dp' or 'dp_replica' "
            "('dp_replica' needs several optimizer instances)",
            f"use_sharp={v['use_sharp']}, sharp_enabled_group={sg!r}, instances={n}",
            bool(v["use_sharp"]) and (sg in (None, "dp") or (sg == "dp_replica" and n > 1)))
    if _int(world):
        add("world-divisible", f"the world splits into whole model replicas of {mform}",
            f"world % ({mform}) = {world} % {model} = {world % model}", world % model == 0)
    if v["virtual_pipeline_model_parallel_size"] is not None:
        add("vpp-needs-pp", "the interleaved schedule (vpp) needs a pipeline",
            f"pp > 1: {pp} > 1", pp > 1)
    if dp is not None:
        problem = order_problem(order, {"tp": tp, "pp": pp, "dp": dp, "ep": 1, "cp": cp})
        named = ", ".join(f"{k}({s})" for k, s in (("tp", tp), ("cp", cp), ("dp", dp),
                                                    ("pp", pp)) if s > 1) or "nothing"
        add("order-dense", "the order names each dimension of size > 1 once, and nothing else",
            f"order {order} must name {named}", problem is None)
        add("world-divisible-expert", f"the world splits into whole expert replicas of {eform}",
            f"world % ({eform}) = {world} % {emodel} = {world % emodel}", world % emodel == 0)
        problem = order_problem(order, {"tp": etp, "pp": pp, "dp": edp, "ep": ep, "cp": 1})
        named = ", ".join(f"{k}({s})" for k, s in (("tp", etp), ("ep", ep), ("dp", edp),
                                                    ("pp", pp)) if s > 1) or "nothing"
        add("order-expert", "the order names each expert dimension (tp=etp, ep, expert dp, pp) "
            "of size > 1 once",
            f"order {order} must name {named}", problem is None)
        if pp > 1:
            add("pp-last-or-equal-dp",
                "with pp > 1 the order ends with pp, or attention and MoE have the same dp",
                f"order ends with 'pp' ({str(order).endswith('pp')}) or expert dp = dp "
                f"({edp} = {dp})", str(order).endswith("pp") or edp == dp)
            holds = True if cfg is not None else (
                False if error and "pipeline groups differ" in error else None)
            add("same-pipeline-groups", "dense and expert generators give the same pipeline "
                "groups", "PIPELINE_MODEL_PARALLEL_GROUP(dense) == (expert)", holds)
        if n > 1:
            add("instances-divide-dp", "the optimizer instances split DP-with-CP evenly",
                f"(dp*cp) % instances = {dp * cp} % {n} = {dp * cp % n}", dp * cp % n == 0)
            add("instances-divide-expert-dp", "the optimizer instances split expert DP evenly",
                f"expert dp % instances = {edp} % {n} = {edp % n}", edp % n == 0)
        if v["hybrid_context_parallel"]:
            s = dp * cp
            add("hybrid-cp-even", "hybrid context parallel needs an even dp*cp that every "
                "smaller power of two divides", f"dp*cp = {s}", s % 2 == 0 and s & (s - 1) == 0)
    hcp = v["hierarchical_context_parallel_sizes"]
    if hcp:
        try:
            parts = [int(x) for x in (hcp.split(",") if isinstance(hcp, str) else hcp)]
            prod = math.prod(parts)
            add("hierarchical-cp", "the hierarchical CP sizes multiply to cp",
                f"{'*'.join(map(str, parts))} = {prod} = cp ({cp})", prod == cp)
        except (TypeError, ValueError):
            add("hierarchical-cp", "the hierarchical CP sizes multiply to cp",
                f"{hcp!r} is not a list of integers", False)
    backend = v["pipeline_model_parallel_comm_backend"]
    if backend is not None:
        add("pp-backend", "the pipeline backend is nccl or ucc", f"backend = {backend!r}",
            backend in ("nccl", "ucc"))
    prof = PROFILES.get(str(mcore))
    if gtp > 1 or egtp > 1:
        gtp_axis = prof is not None and prof.gtp_axis
        add("gtp-needs-0.19", "GTP weight remat exists only from megatron-core 0.19",
            f"mcore = {mcore}", gtp_axis)
        if gtp_axis:
            add("gtp-one-instance", "GTP remat needs one distributed-optimizer instance",
                f"instances = {n} = 1", n == 1)
            if v["create_all_gather_group"]:
                add("gtp-no-all-gather", "0.19's create_all_gather_groups() cannot size GTP "
                    "worlds", "create_all_gather_group with gtp > 1", False)
    return Explanation(given, str(mcore), cfg, derived, rules, error)
