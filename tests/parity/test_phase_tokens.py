"""The groups ``rules._phase_tokens`` says Megatron creates, judged by the real
megatron-core.

``_phase_tokens(f, phase)`` lists ``(expert, token, first list only)`` of the
``new_group`` calls Megatron makes in each stretch of ``initialize_model_parallel``; the
``_ranks_verdict`` and ``repeated-token-groups`` rules read Megatron's groups through it.
Here the five stretches, joined (a token split over a stretch boundary, its first group
then the rest, counts once), must be Megatron's own ``new_group`` calls, group kind by
group kind in creation order (torch's ``fake`` backend; megatron-core 0.17.1 for the 0.16
profile, 0.18.2, 0.19.2; the
kinds ``_phase_tokens`` does not model, embedding and optimizer-instance groups, left
out; a kind's gloo twin merged into it): the same kinds, in the same order, with the same
rank lists.
"""

from __future__ import annotations

import warnings

import pytest
from support import megatron_harness as H
from support.paths import ROOT

from simharness import ParallelismConfig
from simharness.profiles import get_profile
from simharness.rules import Facts, _megatron_grid, _megatron_lists, _phase_tokens

WORLD = 16
# kinds simharness's phases do not model (no rank of theirs can be past the torch world
# unless one of the modelled kinds' is)
UNMODELLED = ("EMBEDDING_GROUP", "POSITION_EMBEDDING_GROUP",
              "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP")
MOE = dict(tensor_model_parallel_size=2, context_parallel_size=2,
           pipeline_model_parallel_size=2, expert_model_parallel_size=2,
           expert_tensor_parallel_size=1)
CASES = [
    ("0.16", "0.17.1", "moe", MOE),
    ("0.18", "0.18.2", "moe", MOE),
    ("0.19", "0.19.2", "moe", MOE),
    ("0.19", "0.19.2", "moe-gtp2", dict(MOE, gtp_remat_size=2)),
    ("0.19", "0.19.2", "moe-egtp2", dict(MOE, expert_gtp_remat_size=2)),
]


def _ours(f: Facts) -> list[set[tuple[int, ...]]]:
    grids = {e: _megatron_grid(f, e) for e in (False, True)}
    out: list[tuple[tuple[bool, str], set[tuple[int, ...]]]] = []
    for phase in range(1, 6):
        for expert, token, first in _phase_tokens(f, phase):
            assert token == token.lower(), token  # Megatron's get_ranks tokens (messages)
            lists = _megatron_lists(grids[expert], token, WORLD)
            rows = {tuple(r) for r in (lists[:1] if first else lists).tolist()}
            if out and out[-1][0] == (expert, token):  # split over a stretch boundary
                out[-1][1].update(rows)
            else:
                out.append(((expert, token), rows))
    return [rows for _, rows in out]


def _megatron(calls) -> list[set[tuple[int, ...]]]:
    kinds: dict[str, set[tuple[int, ...]]] = {}  # first appearance order (gloo twins merge)
    for desc, ranks, _ in calls:
        if desc not in UNMODELLED:
            kinds.setdefault(desc.removesuffix("_GLOO"), set()).add(tuple(ranks))
    return list(kinds.values())


@pytest.mark.parametrize("mcore,release,name,kwargs", CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_phase_tokens_are_megatrons_groups(mcore, release, name, kwargs):
    ps = H.parity_module(ROOT, release)
    cfg = ParallelismConfig.from_megatron(world_size=WORLD, mcore=mcore, **kwargs)
    f = Facts(cfg, get_profile(mcore), WORLD)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run = H.run_rank(ps, WORLD, 0, kwargs, mcore=mcore, record=True, getters=False)
    theirs, ours = _megatron(run.calls), _ours(f)
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, (i, sorted(a), sorted(b))


@pytest.mark.parametrize("lists", [[[0, 1, 2, 3, 4]], [[0, 1], [2, 5], [3, 4]], [[0, 1], [2, 3]]],
                         ids=["too-large", "out-of-range", "fits"])
def test_new_group_error_is_torchs(lists):
    """``rules._new_group_error`` is what torch's ``new_group`` says (ValueError) for the
    first of the lists it rejects in a 4-rank world (or None when it takes them all)."""
    import numpy as np
    import torch.distributed as dist

    from simharness.rules import _new_group_error

    said = None
    with H.fake_world(0, 4):
        for ranks in lists:
            try:
                dist.new_group(ranks, backend="fake")
            except ValueError as exc:
                said = str(exc)
                break
    ours = _new_group_error(np.array(lists), 4)
    if said is None:
        assert ours is None
    else:
        assert ours is not None and said.startswith(ours), (said, ours)
