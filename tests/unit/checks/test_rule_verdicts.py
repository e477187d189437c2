"""Every validation rule's verdict, in full, on the parity configurations.

Every rule of
``simharness.rules`` is evaluated (``evaluate_all``) on the configurations the parity
tests run through the real megatron-core (``tests/support/parity_cases.py``: CASES, which
Megatron accepts, and INVALID, which it rejects), on the seeded edge draws of
``tests/support/parity_edges.py`` and on a few 0.18/0.19 inputs, under each profile the
keywords fit (the edge draws in a compact form, up to the first failing rule: which rules
hold, the failing message).
tests/unit/checks/golden/rule_verdicts.json holds, per configuration and profile,
each rule that applies: whether it holds, its worked check, the message, values and
exception. Whether each configuration is accepted at all is Megatron's verdict
(checked against Megatron by the parity tests); the golden file pins the words and
numbers. ``SIMHARNESS_UPDATE_GOLDEN=1 pytest tests/unit/checks/test_rule_verdicts.py`` rewrites
it; the diff is the review.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

import pytest
from support.parity_cases import CASES, INVALID, split_ag

from simharness import LayoutError, ParallelismConfig
from simharness.profiles import get_profile
from simharness.rules import RULES, evaluate_all, first_failure

GOLDEN = Path(__file__).resolve().parent / "golden" / "rule_verdicts.json"
UPDATE = os.environ.get("SIMHARNESS_UPDATE_GOLDEN") == "1"
PROFILES = ("0.16", "0.18", "0.19")

# 0.18/0.19-only inputs and windows (Megatron keyword arguments, torch world).
EXTRA = [
    (16, dict(tensor_model_parallel_size=2, gtp_remat_size=2)),
    (16, dict(tensor_model_parallel_size=2, gtp_remat_size=2, expert_gtp_remat_size=2,
              expert_model_parallel_size=2, create_all_gather_group=True)),
    (8, dict(gtp_remat_size=2, num_distributed_optimizer_instances=2)),
    (32, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
              context_parallel_size=2, rank_offset=8, local_world_size=16,
              create_all_gather_group=True)),
    (32, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
              context_parallel_size=2, expert_model_parallel_size=2,
              expert_tensor_parallel_size=2, order="tp-cp-ep-pp-dp", rank_offset=8,
              local_world_size=16, create_all_gather_group=True)),
    (24, dict(tensor_model_parallel_size=2, rank_offset=16, local_world_size=8,
              create_all_gather_group=True)),
    (16, dict(tensor_model_parallel_size=2, rank_offset=12, local_world_size=8)),
    (8, dict(rank_offset=1)),
    (8, dict(tensor_model_parallel_size=2, order="tp-cp-ep-dp-pp-tp")),
    (16, dict(tensor_model_parallel_size=2, local_world_size=8, order="tp-dp-cp-ep-dp-pp")),
    (8, dict(use_sharp=True, sharp_enabled_group="dp_replica",
             num_distributed_optimizer_instances=2)),
    # repeated tokens with the 0.18+ all-gather option: the groups it reads on job ranks
    (12, dict(context_parallel_size=2, order="tp-cp-ep-cp-pp-dp", local_world_size=4,
              create_all_gather_group=True)),
    (16, dict(context_parallel_size=2, expert_model_parallel_size=2,
              order="tp-cp-ep-cp-pp-dp", local_world_size=4, create_all_gather_group=True)),
    (16, dict(tensor_model_parallel_size=2, expert_model_parallel_size=2,
              order="tp-cp-ep-dp-pp-ep", local_world_size=8, create_all_gather_group=True)),
    (7, dict(pipeline_model_parallel_size=2, order="pp-cp-ep-pp-tp-dp", local_world_size=4,
             create_all_gather_group=True)),
    (24, dict(tensor_model_parallel_size=2, gtp_remat_size=2, expert_gtp_remat_size=2,
              order="tp-cp-ep-dp-pp-cp", local_world_size=8, create_all_gather_group=True)),
]


def _configs() -> list[tuple[str, int, dict]]:
    out = [(p.id, *p.values) for p in CASES + INVALID]
    out += [(f"extra-{i}", w, kw) for i, (w, kw) in enumerate(EXTRA)]
    return out


def _config(mcore: str, world: int, kwargs: dict) -> ParallelismConfig:
    """The configuration as Megatron's keywords give it, not validated."""
    ag, rest = split_ag(kwargs)
    after = get_profile(mcore).ag_after_init
    with mock.patch("simharness.config.validate"):
        cfg = ParallelismConfig.from_megatron(world_size=world, mcore=mcore,
                                              **(rest if after else kwargs))
    return ParallelismConfig.unchecked(**{**cfg.to_dict(), "create_all_gather_group": ag})


def _verdicts(mcore: str, world: int, kwargs: dict, *, to_first_failure: bool = False) -> dict:
    try:
        cfg = _config(mcore, world, kwargs)
    except LayoutError as exc:  # a keyword this profile does not have
        return {"keywords": str(exc), "megatron_error": exc.megatron_error}
    rules: dict = {}
    for rule, v in evaluate_all(cfg, mcore, world):
        if to_first_failure and any(not r[0] for r in rules.values()):
            break  # (past a failure some rules compute with undefined sizes)
        if v is None:
            continue
        rules[rule.name] = [v.holds, v.check, v.message, {k: repr(x) for k, x in
                                                          sorted(v.values.items())},
                            v.error, v.megatron_accepts]
    err = first_failure(cfg, mcore, world)
    first = None if err is None else [err.megatron_error, str(err),
                                      {k: repr(x) for k, x in sorted(err.values.items())}]
    return {"rules": rules, "first_failure": first}


def _edges() -> list[tuple[str, str, int, dict]]:
    """The seeded draws of tests/support/parity_edges.py: ``(key, profile, world, kwargs)``."""
    from support.parity_edges import RELEASES, generated

    return [(f"edge-{release}-{i}@{mcore}", mcore, world,
             dict(kw, create_all_gather_group=True) if ag else kw)
            for mcore, release in RELEASES
            for i, (_, world, ag, kw) in enumerate(generated(mcore, release))]


def _compact(v: dict) -> dict:
    """Whether each rule holds, and the message of those that fail (the edges are many)."""
    if "rules" not in v:
        return v
    return {"holds": {k: r[0] for k, r in v["rules"].items()},
            "failing": {k: r[2] for k, r in v["rules"].items() if not r[0]},
            "first_failure": v["first_failure"]}


def _observed() -> dict:
    out = {f"{name}@{mcore}": _verdicts(mcore, world, kw)
           for name, world, kw in _configs() for mcore in PROFILES}
    out.update({key: _compact(_verdicts(mcore, world, kw, to_first_failure=True))
                for key, mcore, world, kw in _edges()})
    return out


@pytest.fixture(scope="module")
def golden() -> dict:
    if UPDATE:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(_observed(), indent=0, sort_keys=True) + "\n")
    return json.loads(GOLDEN.read_text())


def test_rule_table_is_the_golden_one(golden):
    table = [[r.name, r.statement, r.source, r.megatron_error] for r in RULES]
    if UPDATE:
        data = {**golden, "_rules": table}
        GOLDEN.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")
        golden.update(data)
    assert table == golden["_rules"]


@pytest.mark.parametrize("mcore", PROFILES)
def test_verdicts_are_the_golden_ones(mcore, golden):
    for name, world, kw in _configs():
        key = f"{name}@{mcore}"
        got = json.loads(json.dumps(_verdicts(mcore, world, kw)))
        assert got == golden[key], key


def test_edge_verdicts_are_the_golden_ones(golden):
    for key, mcore, world, kw in _edges():
        got = json.loads(json.dumps(_compact(_verdicts(mcore, world, kw, to_first_failure=True))))
        assert got == golden[key], key


def test_golden_accepts_exactly_the_parity_cases(golden):
    """CASES are accepted and INVALID rejected under 0.16 (Megatron's verdicts)."""
    for p in CASES:
        assert golden[f"{p.id}@0.16"]["first_failure"] is None, p.id
    for p in INVALID:
        assert golden[f"{p.id}@0.16"]["first_failure"] is not None, p.id
