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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config import ALIASES, DEFAULT_MCORE, ParallelismConfig
from .errors import SimharnessError
from .fields import ParallelismFields
from .profiles import build_loops, check_profile
from .rules import evaluate_all, expert_formula, model_formula


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


def explain(fields: Mapping[str, Any], mcore: str = DEFAULT_MCORE) -> Explanation:
    """Explain the configuration given by ``fields`` (NeMo names or aliases).

    The rules are :data:`simharness.rules.RULES` evaluated for profile ``mcore``, in
    Megatron's order; ``error`` is the library's message for the first failure.
    """
    given = {ALIASES.get(k, str(k).replace("-", "_")): v for k, v in dict(fields).items()}
    try:
        mcore = check_profile(mcore)
        raw = ParallelismFields.from_dict(given)
    except SimharnessError as exc:  # not even well-typed (or an unknown profile)
        return Explanation(given, str(mcore), None, [], [], str(exc))
    verdicts = [(rule, v) for rule, v in evaluate_all(raw, mcore) if v is not None]
    rules = [Rule(rule.name, rule.statement, v.check, v.holds, rule.source)
             for rule, v in verdicts]
    error = next((v.message for _, v in verdicts if not v.holds), None)
    # Every rule of the profile holds: the fields are valid for it (validated once, here).
    cfg = ParallelismConfig._adopt(raw) if error is None else None
    derived = _derived(raw, given)
    if cfg is not None:
        from .layout import Layout

        try:
            derived += _layout_sizes(Layout(cfg, mcore, build_loops(cfg, mcore)).summary(),
                                     mcore)
        except SimharnessError as exc:
            error = str(exc)
    return Explanation(given, mcore, cfg, derived, rules, error)


def _derived(c: ParallelismFields, given: Mapping[str, Any]) -> list[Derived]:
    """The sizes ``c`` implies, with worked formulas."""
    form, nums = model_formula(c)
    eform, enums = expert_formula(c)
    W, dp, edp, n = c.world_size_resolved, c.dp, c.edp, c.num_distributed_optimizer_instances
    if given.get("world_size") is not None:
        world = Derived("world_size", W, f"world = {W} (given)", "ranks in the job")
    else:
        lcm = math.lcm(c.model_size, c.expert_model_size)
        world = Derived("world_size", W, f"world = lcm({form}, {eform}) = lcm({c.model_size}, "
                        f"{c.expert_model_size}) = {W}"
                        + (" (grown until the optimizer instances divide dp)" if lcm != W else ""),
                        "not given: the smallest world the sizes fit")
    src = ("given" if given.get("order") else
           "use_tp_pp_dp_mapping" if c.use_tp_pp_dp_mapping else "default")
    out = [
        world,
        Derived("model_parallel_size", c.tp * c.pp, f"mp = tp*pp = {c.tp}*{c.pp} = "
                f"{c.tp * c.pp}", "ranks in one model replica's MODEL_PARALLEL_GROUP"),
        Derived("data_parallel_size", dp, f"dp = world / ({form}) = {W} / ({nums}) = {dp}",
                "model replicas"),
        Derived("data_parallel_size_with_cp", dp * c.cp, f"dp_cp = dp*cp = {dp}*{c.cp} = "
                f"{dp * c.cp}", "ranks in one DATA_PARALLEL_GROUP_WITH_CP (gradient "
                "reduce-scatter)"),
        Derived("expert_tensor_parallel_size", c.etp,
                f"etp = {c.etp} (given)" if c.expert_tensor_parallel_size
                else f"etp = tp = {c.tp} (not given)", "tensor parallelism inside the experts"),
        Derived("expert_data_parallel_size", edp, f"expert dp = world / ({eform}) = {W} / "
                f"({enums}) = {edp}", "ranks in one EXPERT_DATA_PARALLEL_GROUP"),
        Derived("order", c.order, f"order = {c.order} ({src})",
                "pp-last" if c.pp_last else "pp not last"),
    ]
    if n > 1:
        out += [Derived("intra_partial_data_parallel_size", dp * c.cp // n,
                        f"dp*cp / instances = {dp * c.cp} / {n} = {dp * c.cp // n}",
                        "ranks in one distributed-optimizer instance's DP group"),
                Derived("intra_partial_expert_data_parallel_size", edp // n,
                        f"expert dp / instances = {edp} / {n} = {edp // n}",
                        "expert DP ranks per optimizer instance")]
    return out


def _layout_sizes(summ: Mapping[str, Any], mcore: str) -> list[Derived]:
    c = summ["communicators_per_rank"]
    rng = (f"{c['total_min']}" if c["total_min"] == c["total_max"]
           else f"{c['total_min']}..{c['total_max']}")
    return [Derived("new_group_calls", summ["new_group_calls"],
                    f"{summ['new_group_calls']} new_group calls in {summ['kinds']} kinds "
                    f"(mcore {mcore})", "every rank makes every call"),
            Derived("communicators_per_rank", c["total_max"],
                    f"{rng} per rank (nccl up to {c['nccl_max']}, gloo up to {c['gloo_max']})",
                    "groups each rank belongs to")]
