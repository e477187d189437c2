"""Parity at the edges of validation, on GENERATED configurations.

For each profile and the megatron-core release it models (0.16 vs 0.16.1 and
0.17.1, 0.18 vs 0.18.2, 0.19 vs 0.19.2), a seeded ``random.Random`` draws
configurations of the classes where simharness and Megatron used to disagree:

``offset``   rank_offset windows that fit the torch world, end past it (with
             ``local_world_size``) or are the whole world (without it), all-gather on/off;
``order``    random orders: permutations with a token dropped, repeated (size 1 or
             more), upper-cased, unknown, or with an explicit ``gtp_remat`` token;
``gtp-ag``   (0.19) the all-gather option with GTP / expert GTP, ep 1 or 2, windows.

Each draw runs through the real megatron-core under torch's ``fake`` backend
(``tests/support/megatron_harness.py``) and through simharness. Megatron is the judge:
where it raises, simharness must raise a LayoutError whose ``megatron_error`` is
Megatron's exception type; where it accepts, simharness must build the layout and
agree on the ``new_group`` sequence (one rank's full log) and on the getters of up
to three ranks (``create_all_gather_groups()``'s groups included). One outcome is
counted apart: a repeated token whose groups Megatron accepts inside a larger torch
world although they do not partition the job (simharness rejects it with
``megatron_error=None``, "not modelled"; the job ranks left out and the ranks past the
job it names are checked against Megatron's recorded groups). With the 0.18+ all-gather
option on, such a config fails in ``create_all_gather_groups()`` on the first job rank
left out, which is run too. The counts per profile are printed
(``pytest -s``) and checked for coverage of both outcomes.
"""

from __future__ import annotations

import contextlib
import random
import re
import warnings
from collections import Counter
from unittest import mock

import pytest
from support import megatron_harness as H
from support.parity_edges import BASE, DRAWS, RELEASES, SCALE, SEED, _sizes, _window, generated
from support.paths import ROOT

from simharness import LayoutError, ParallelismConfig, build_layout
from simharness.profiles import get_profile


# ---------------------------------------------------------------- comparing
def _simharness(mcore: str, world: int, ag: bool, kwargs: dict):
    """The layout, or the LayoutError (the 0.18+ option is set on the config)."""
    prof = get_profile(mcore)
    after = ag and prof.ag_after_init  # the init, then create_all_gather_groups()
    try:
        # With the 0.18+ option on, validate once, with it: the AG step may fail on a
        # job rank (a repeated token) before the init's groups count as "not modelled".
        with mock.patch("simharness.config.validate") if after else contextlib.nullcontext():
            cfg = ParallelismConfig.from_megatron(world_size=world, mcore=mcore, **kwargs)
        if after:
            cfg = ParallelismConfig.unchecked(**{**cfg.to_dict(), "create_all_gather_group": True})
        return build_layout(cfg, mcore, torch_world=world)
    except LayoutError as exc:
        return exc


def _megatron(ps, mcore: str, world: int, ag: bool, kwargs: dict, layout):
    """Megatron's runs on a few ranks, or the exception it raises."""
    prof = get_profile(mcore)
    after = None
    if ag and prof.ag_after_init:
        ep = kwargs.get("expert_model_parallel_size", 1)
        after = lambda ps: ps.create_all_gather_groups(for_expert_parallelism=ep > 1)  # noqa: E731
    offset = kwargs.get("rank_offset", 0)
    first = offset if offset < world else 0
    ranks = [first]
    if isinstance(layout, LayoutError) and "failing_rank" in layout.values:
        ranks.append(layout.values["failing_rank"])  # the job rank simharness says fails
    if not isinstance(layout, LayoutError):
        inside = list(layout.ranks)
        ranks = sorted({first, inside[-1], inside[len(inside) // 2]})
        if not after and offset > 0:
            ranks.append(0)  # a rank outside the window: Megatron gives it no group
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return H.run_world(ps, world, kwargs, ranks=ranks, record_ranks=[first], mcore=mcore,
                               after_init=after)
    except Exception as exc:  # noqa: BLE001 - the exception is the result
        return exc


# A repeated order token whose bogus groups stay inside a bigger torch world: Megatron
# accepts and builds groups that do not partition the job; simharness says it does not
# model that (LayoutError with megatron_error None). Counted, not a match.
UNMODELLED = "unmodelled"


def _unmodelled_claim(theirs: dict, ours: LayoutError) -> str:
    """UNMODELLED when Megatron's recorded ``new_group`` calls bear out the error: one
    group kind (description) leaves every job rank it names out and takes in every rank
    past the job it names (so no partition of the job's ranks gives Megatron's groups)."""
    missing, outside = set(ours.values["missing"]), set(ours.values["outside"])
    by_desc: dict = {}
    for desc, ranks, _ in next(r.calls for r in theirs.values() if r.calls is not None):
        by_desc.setdefault(desc, set()).update(ranks)
    if missing and any(not (missing & got) and outside <= got for got in by_desc.values()):
        return UNMODELLED
    return f"'not modelled' but no Megatron group kind leaves out {missing}: {ours}"


def compare(ps, mcore: str, world: int, ag: bool, kwargs: dict) -> tuple[str | None, bool]:
    """``(what differs or None, whether Megatron accepts)``."""
    if ag and get_profile(mcore).ag_in_init:  # 0.16-0.17: a keyword of the init itself
        kwargs = dict(kwargs, create_all_gather_group=True)
    ours = _simharness(mcore, world, ag, kwargs)
    theirs = _megatron(ps, mcore, world, ag, kwargs, ours)
    if isinstance(theirs, Exception):
        kind = type(theirs).__name__
        if not isinstance(ours, LayoutError):
            return f"Megatron raises {kind}, simharness accepts", False
        if ours.megatron_error != kind:
            return f"Megatron raises {kind}, simharness says {ours.megatron_error}: {ours}", False
        said = re.match(r"Rank \d+ is out of range|'tp' is not in list|the new group's world "
                        r"size should be less or equal", str(theirs))
        if said and said.group(0) not in str(ours):  # the same words (and first bad rank)
            return f"Megatron: {said.group(0)}; simharness: {ours}", False
        return None, False
    if isinstance(ours, LayoutError):
        if ours.megatron_error is None and ours.values.get("repeated"):
            return _unmodelled_claim(theirs, ours), True
        return f"Megatron accepts, simharness rejects ({ours.megatron_error}): {ours}", True
    expected = [(c.desc, c.ranks, c.backend) for c in ours.creation_order]
    try:
        H.assert_runs_match(theirs, expected, ours, ag and get_profile(mcore).ag_after_init)
    except (AssertionError, pytest.fail.Exception) as exc:
        return f"layouts differ: {str(exc)[:300]}", True
    return None, True


@pytest.mark.parametrize("mcore,release", RELEASES, ids=[f"{m}-vs-{r}" for m, r in RELEASES])
def test_generated_edges_match_megatron(mcore, release):
    ps = H.parity_module(ROOT, release)  # skips (fails under SIMHARNESS_REQUIRE_PARITY)
    counts: Counter = Counter()
    misses = []
    for cls, world, ag, kwargs in generated(mcore, release):
        miss, accepted = compare(ps, mcore, world, ag, kwargs)
        counts["configs"] += 1
        counts[(cls, "accepted" if accepted else "rejected")] += 1
        counts["accepted" if accepted else "rejected"] += 1
        if miss is None:
            counts["matches"] += 1
        elif miss == UNMODELLED:
            counts["unmodelled"] += 1
        else:
            misses.append(f"{cls} world={world} ag={ag} {kwargs}: {miss}")
    by_class = ", ".join(f"{c} {counts[(c, 'accepted')]}/{counts[(c, 'rejected')]}"
                         for c in DRAWS if counts[(c, "accepted")] + counts[(c, "rejected")])
    print(f"\nprofile {mcore} vs megatron-core {release}: {counts['configs']} configs, "
          f"{counts['accepted']} accepted, {counts['rejected']} rejected, {counts['matches']} "
          f"match, {counts['unmodelled']} not modelled (accepted/rejected by class: {by_class})")
    assert not misses, f"{len(misses)} mismatches:\n" + "\n".join(misses)
    for cls in DRAWS:  # each class that ran must have exercised both outcomes
        if counts[(cls, "accepted")] + counts[(cls, "rejected")]:
            assert counts[(cls, "accepted")] and counts[(cls, "rejected")], (cls, counts)


def _draw_repeat_past_job(rng: random.Random, gtp_axis: bool) -> tuple[int, bool, dict]:
    """A repeated token of size > 1 and the job's window at the start of a bigger torch
    world, all-gather on or off: where Megatron keeps groups that leave job ranks out."""
    kw = _sizes(rng, gtp_axis)
    if rng.random() < 0.8:  # mostly no experts (an expert world that does not divide wins)
        kw["expert_model_parallel_size"] = 1
        kw.pop("expert_tensor_parallel_size", None)
    tokens = rng.sample(BASE, len(BASE))
    named = (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"),
             ("cp", "context_parallel_size"))
    big = [t for t, k in named if kw[k] > 1] or ["dp"]
    tokens.insert(rng.randint(0, 2), rng.choice(big))  # early: larger dimensions follow
    kw["order"] = "-".join(tokens)
    kw["local_world_size"] = W = _window(kw, rng)
    return W + rng.randint(1, 3 * W), rng.random() < 0.5, kw


AG_AFTER_INIT = RELEASES[2:]  # 0.18, 0.19: create_all_gather_groups() after the init


@pytest.mark.parametrize("mcore,release", AG_AFTER_INIT,
                         ids=[f"{m}-vs-{r}" for m, r in AG_AFTER_INIT])
def test_repeat_past_the_job_matches_megatron(mcore, release):
    """0.18+: with the all-gather option on, ``create_all_gather_groups()`` fails on the
    first job rank Megatron's kept groups leave out (RuntimeError / AssertionError), as
    simharness says; with it off the not-modelled claim is checked on Megatron's groups."""
    ps = H.parity_module(ROOT, release)
    rng = random.Random(f"{SEED}-repeat-{release}")
    outcomes: Counter = Counter()
    misses = []
    for _ in range(64 * SCALE):
        world, ag, kwargs = _draw_repeat_past_job(rng, get_profile(mcore).gtp_axis)
        miss, accepted = compare(ps, mcore, world, ag, kwargs)
        if miss not in (None, UNMODELLED):
            misses.append(f"world={world} ag={ag} {kwargs}: {miss}")
        ours = _simharness(mcore, world, ag, kwargs)
        outcomes[getattr(ours, "values", {}).get("rule", "accepted")] += 1
    print(f"\nrepeat past the job, profile {mcore}: {dict(outcomes)}")
    assert not misses, "\n".join(misses)
    assert outcomes["all-gather-job-ranks"] and outcomes["repeated-token-groups"], outcomes
