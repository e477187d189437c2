"""The all-gather option with a rank offset, judged by the real megatron-core.

A hand-made mutant that drops the offset in ``checks._compare_ag``
(``first = a[:, 0]`` instead of ``a[:, 0] - w.off``); with it, a correct 0.16 layout
with ``rank_offset=8, local_world_size=16`` in a torch world of 32 reports a false
``ag-mismatch``. Here every profile (0.16 vs 0.17.1, the first release with
``rank_offset``; 0.18 vs 0.18.2; 0.19 vs 0.19.2) runs that window with the option on,
with the default order (DP and AG groups line up under 0.16) and NeMo's tp-pp-dp mapping
(0.18+: upstream #4261), through Megatron under torch's ``fake`` backend, on every job
rank. simharness must build Megatron's groups, and ``ag-mismatch`` must name exactly the
job ranks whose Megatron AG group is not their Megatron DP-with-CP group (0.16: none;
0.18+: ``create_all_gather_groups()`` hard-codes offset 0, so its groups sit on ranks
0..15 and the job is 8..23: with the default order ranks 8..15 still line up, with the
tp-pp-dp mapping they do not).
"""

from __future__ import annotations

import warnings

import pytest
from support import megatron_harness as H
from support.paths import ROOT

from simharness import ParallelismConfig, build_layout, check
from simharness.profiles import get_profile

RELEASES = [("0.16", "0.17.1"), ("0.18", "0.18.2"), ("0.19", "0.19.2")]
ORDERS = {"aligned": "tp-cp-ep-dp-pp", "misaligned": "tp-cp-ep-pp-dp"}
WORLD, OFFSET, LOCAL = 32, 8, 16
# tp2 pp2 cp2 (dp 2 in the window of 16); ep2 etp2 keeps the expert DP size equal to the
# dense one, which the tp-pp-dp order requires with pp > 1.
SIZES = dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
             context_parallel_size=2, expert_model_parallel_size=2,
             expert_tensor_parallel_size=2)


def _megatron_ag(ps, mcore: str, kwargs: dict) -> dict:
    """Megatron's runs of every job rank, with its AG groups (``run.extra`` for 0.18+)."""
    after = None
    if get_profile(mcore).ag_after_init:
        after = lambda ps: ps.create_all_gather_groups(for_expert_parallelism=True)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return H.run_world(ps, WORLD, kwargs, ranks=range(OFFSET, OFFSET + LOCAL),
                           record_ranks=[OFFSET], mcore=mcore, after_init=after)


def _misaligned(runs: dict, mcore: str) -> dict[str, set[int]]:
    """Per base kind, the job ranks whose Megatron AG group is not their base group."""
    out: dict[str, set[int]] = {"dp_cp": set(), "ep_dp": set()}
    for r, run in runs.items():
        if get_profile(mcore).ag_after_init:
            dense, expert = run.extra
        else:  # 0.16-0.17: the in-init getter; no expert AG group
            dense, expert = run.getters["dp_cp_ag"], None
        if dense is not None and dense != run.getters["dp_cp"]:
            out["dp_cp"].add(r)
        if expert is not None and expert != run.getters["ep_dp"]:
            out["ep_dp"].add(r)
    return out


@pytest.mark.parametrize("which", list(ORDERS))
@pytest.mark.parametrize("mcore,release", RELEASES, ids=[f"{m}-vs-{r}" for m, r in RELEASES])
def test_ag_check_with_rank_offset_matches_megatron(mcore, release, which):
    ps = H.parity_module(ROOT, release)  # skips (fails under SIMHARNESS_REQUIRE_PARITY)
    prof = get_profile(mcore)
    kwargs = dict(SIZES, order=ORDERS[which], rank_offset=OFFSET, local_world_size=LOCAL)
    if prof.ag_in_init:
        kwargs["create_all_gather_group"] = True
    cfg = ParallelismConfig.from_megatron(world_size=WORLD, mcore=mcore, **kwargs)
    if prof.ag_after_init:
        cfg = cfg.replace(create_all_gather_group=True)
    layout = build_layout(cfg, mcore, torch_world=WORLD)
    assert layout.ranks == range(OFFSET, OFFSET + LOCAL)

    runs = _megatron_ag(ps, mcore, kwargs)
    expected = [(c.desc, c.ranks, c.backend) for c in layout.creation_order]
    H.assert_runs_match(runs, expected, layout, prof.ag_after_init)  # the same groups

    truth = _misaligned(runs, mcore)
    findings = [f for f in check(layout) if f.code == "ag-mismatch"]
    job = set(layout.ranks)
    for base in ("dp_cp", "ep_dp"):
        said = [f for f in findings if f.groups[1:] == (base,)]
        claimed = {r for f in said for r in f.ranks} & job
        assert claimed == truth[base], (base, [f.message for f in said])
        # (0.18+ aligned: the AG groups wholly below the job, [0,2,4,6] and [1,3,5,7], are
        # named too, as ranks outside the job: they equal no DP-with-CP group.)
    if mcore == "0.16":  # the case: no false error
        assert truth == {"dp_cp": set(), "ep_dp": set()} and not findings
    elif which == "misaligned":  # #4261 with an offset: dense and expert misaligned
        assert truth["dp_cp"] and truth["ep_dp"]
