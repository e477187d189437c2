"""Parity with the real megatron-core 0.16.1 ``initialize_model_parallel``.

Every expectation here comes from Megatron itself, run rank by rank under
torch's ``fake`` backend (``tests/support/megatron_harness.py``): the exact sequence of
``new_group`` calls ``(group_desc, ranks as passed, backend)``, and what
Megatron's getters return on each rank. simharness must reproduce both with
``build_layout(cfg, mcore="0.16")``.

Every rank calls ``new_group`` for every group of the world, so a single
rank's log is the whole world's; the full log is compared on every rank for
worlds of at most 16 ranks and on the first and last rank above that, and
the getters on every rank up to 32 ranks and on a fixed sample above.
"""

from __future__ import annotations

import random

import pytest
from support import megatron_harness as H
from support.parity_cases import CASES, INVALID, TP_PP_DP

from simharness import GroupNotInitialized, LayoutError, ParallelismConfig, build_layout

H.require_installed_megatron(module=True)

MCORE = "0.16"


@pytest.fixture(scope="module")
def ps():
    return H.load_parallel_state_016()


def _ranks_to_check(world):
    if world <= 32:
        return list(range(world)), list(range(world)) if world <= 16 else [0, world - 1]
    rng = random.Random(world)
    sample = sorted({0, 1, world // 2, world - 1, *rng.sample(range(world), 8)})
    return sample, [0, world - 1]


def _expected_calls(layout):
    return [(c.desc, c.ranks, c.backend) for c in layout.creation_order]


def _compare_getters(megatron, ours, where):
    diffs = {k: (megatron[k], ours.get(k, "<missing>")) for k in megatron
             if megatron[k] != ours.get(k, "<missing>")}
    assert not diffs, f"{where}: getters differ (megatron, simharness): {diffs}"


@pytest.mark.parametrize("world,kwargs", CASES)
def test_creation_order_and_getters(ps, world, kwargs):
    cfg = ParallelismConfig.from_megatron(world_size=world, mcore=MCORE, **kwargs)
    layout = build_layout(cfg, mcore=MCORE)
    expected = _expected_calls(layout)
    getter_ranks, record_ranks = _ranks_to_check(world)
    runs = H.run_world(ps, world, kwargs, ranks=getter_ranks, record_ranks=record_ranks,
                       mcore=MCORE)
    for r, run in runs.items():
        assert run.n_calls == len(expected) == layout.rank(r).new_group_calls, f"rank {r}"
        if run.calls is not None and run.calls != expected:
            first = next(i for i, (a, b) in enumerate(zip(run.calls, expected, strict=True))
                         if a != b)
            pytest.fail(f"rank {r}: new_group call {first} differs: megatron "
                        f"{run.calls[first]} vs simharness {expected[first]}")
        _compare_getters(run.getters, H.simharness_view(layout, r), f"rank {r}")


def test_case_count():
    """The brief asks for at least 40 parity configurations, world 1..128."""
    worlds = [p.values[0] for p in CASES]
    assert len(CASES) >= 40 and min(worlds) == 1 and max(worlds) == 128


@pytest.mark.parametrize("flag", [False, True])
def test_all_gather_getter_raises_exactly_when_simharness_does(ps, flag):
    """0.16: ``get_data_parallel_group(with_context_parallel=True, independent_all_gather=True)``
    asserts when the option is off; simharness raises GroupNotInitialized then."""
    world, kwargs = 16, dict(tensor_model_parallel_size=2, context_parallel_size=2,
                             pipeline_model_parallel_size=2, create_all_gather_group=flag)
    layout = build_layout(ParallelismConfig.from_megatron(world_size=world, mcore=MCORE, **kwargs),
                          mcore=MCORE)
    for r in (0, 5, 15):
        run = H.run_rank(ps, world, r, kwargs, record=False)
        if flag:
            assert run.getters["dp_cp_ag"] == sorted(layout.get_data_parallel_group(
                r, with_context_parallel=True, independent_all_gather=True))
            assert run.getters["dp_cp_ag"] == run.getters["dp_cp"]
        else:
            assert run.getters["dp_cp_ag"] == H.RAISES
            with pytest.raises(GroupNotInitialized):
                layout.get_data_parallel_group(r, with_context_parallel=True,
                                               independent_all_gather=True)


# ------------------------------------------------------------ rank_offset
def _shift(value, off):
    if isinstance(value, list):
        return [_shift(v, off) for v in value]
    if isinstance(value, dict):
        return {k: _shift(v, off) for k, v in value.items()}
    return value + off if isinstance(value, int) and not isinstance(value, bool) else value


NOT_RANK_LISTS = {"tp_rank", "pp_rank", "cp_rank", "dp_rank", "dp_cp_rank", "ep_rank",
                  "etp_rank", "edp_rank", "first_stage", "last_stage", "in_embd",
                  "in_pos_embd", "vpp_size", "member_groups", "has_ag"}


@pytest.mark.parametrize("world,kwargs,offset", [
    (16, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
              context_parallel_size=2, create_all_gather_group=True), 16),
    (16, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
              context_parallel_size=2, expert_model_parallel_size=2,
              expert_tensor_parallel_size=2, num_distributed_optimizer_instances=2,
              order=TP_PP_DP), 5),
    (8, dict(context_parallel_size=4, hierarchical_context_parallel_sizes=[2, 2],
             hybrid_context_parallel=True), 8),
])
def test_rank_offset_is_megatron_shifted(ps, world, kwargs, offset):
    """megatron-core 0.16.1 has no ``rank_offset`` (0.17+ does). In 0.17+ both
    RankGenerators get the offset and ``get_ranks`` adds it to every rank of every
    list; every other list (intra-partial slices, hierarchical levels, embedding
    picks, the dist-opt concatenation) is derived from those lists by position,
    and the loops run the same number of times. So the 0.17+ call sequence with
    offset k is the offset-0 sequence with k added to every rank, and rank r+k
    sees rank r's groups shifted by k. That is what is compared here: Megatron
    0.16.1's offset-0 run, shifted, against simharness's ``rank_offset=k`` layout."""
    cfg = ParallelismConfig.from_megatron(world_size=world, mcore=MCORE, **kwargs)
    layout = build_layout(cfg.replace(rank_offset=offset), mcore=MCORE)
    assert layout.ranks == range(offset, offset + world)
    runs = H.run_world(ps, world, kwargs, ranks=range(world), record_ranks=[0], mcore=MCORE)
    shifted = [(d, tuple(x + offset for x in rk), b) for d, rk, b in runs[0].calls]
    assert shifted == _expected_calls(layout)
    for r, run in runs.items():
        want = {k: (v if k in NOT_RANK_LISTS else _shift(v, offset))
                for k, v in run.getters.items()}
        _compare_getters(want, H.simharness_view(layout, r + offset), f"rank {r}+{offset}")


@pytest.mark.parametrize("world,kwargs", INVALID)
def test_invalid_config_parity(ps, world, kwargs):
    """Megatron raises, and simharness raises LayoutError naming Megatron's exception type."""
    megatron = H.megatron_error(ps, world, kwargs)
    assert megatron is not None, "Megatron accepted this input"
    with pytest.raises(LayoutError) as info:
        build_layout(ParallelismConfig.from_megatron(world_size=world, mcore=MCORE, **kwargs),
                     mcore=MCORE)
    assert info.value.megatron_error == megatron, str(info.value)


@pytest.mark.parametrize("world,kwargs", [
    pytest.param(10, dict(hybrid_context_parallel=True), id="hybrid-dp-cp-10"),
    # (Repeated order tokens that change no group are accepted now, as by Megatron:
    # tests/parity/test_parity_edges.py compares their layouts.)
])
def test_simharness_only_rejections_are_accepted_by_megatron(ps, world, kwargs):
    """Where simharness rejects an input with ``megatron_error=None``, Megatron must accept it."""
    with pytest.raises(LayoutError) as info:
        build_layout(ParallelismConfig.from_megatron(world_size=world, mcore=MCORE, **kwargs),
                     mcore=MCORE)
    assert info.value.megatron_error is None, str(info.value)
    assert H.megatron_error(ps, world, kwargs) is None


def test_unknown_keyword_is_megatron_type_error(ps):
    """0.16.1 has no gtp_remat_size: Megatron raises TypeError, and so does the profile."""
    assert H.megatron_error(ps, 8, dict(gtp_remat_size=2)) == "TypeError"
    with pytest.raises(LayoutError) as info:
        ParallelismConfig.from_megatron(world_size=8, mcore=MCORE, gtp_remat_size=2)
    assert info.value.megatron_error == "TypeError"


def test_profile_keywords_match_megatron_signature(ps):
    """The 0.16 profile's keywords are 0.16.1's signature plus the two that 0.17.0 added
    (rank_offset, local_world_size: PR #3520), since the profile covers 0.16.x-0.17.x."""
    import inspect

    from simharness.profiles import megatron_kwargs

    params = set(inspect.signature(ps.initialize_model_parallel).parameters)
    assert params == set(megatron_kwargs(MCORE)) - {"rank_offset", "local_world_size"}
