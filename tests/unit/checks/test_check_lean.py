"""The lean check (huge worlds: arrays built and dropped one kind at a time, int32 inverses,
a sorted key instead of ``np.unique``) finds exactly what the full check finds.

Each case runs ``check(layout, lean=True)`` and ``check(layout, lean=False)`` and compares
the findings field by field (codes, messages, ranks): clean layouts of every profile, plans
with a fault injected (the faults of test_checks.py), and random rank swaps (hypothesis).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.layouts import edited, layout

from simharness import Layout, ParallelismConfig, build_layout, check
from simharness.checks import CHUNK_CELLS, _World


def same(lay):
    full = [f.to_dict() for f in check(lay, lean=False)]
    lean = [f.to_dict() for f in check(lay, lean=True)]
    assert lean == full
    return full


CLEAN = [
    ("0.16", {}), ("0.18", dict(create_all_gather_group=True)),
    ("0.19", dict(create_all_gather_group=True, use_tp_pp_dp_mapping=True)),  # #4261 errors
    ("0.19", dict(world_size=64, tensor_model_parallel_size=4, context_parallel_size=2,
                  hierarchical_context_parallel_sizes=(2, 1), expert_model_parallel_size=4,
                  expert_tensor_parallel_size=1, num_distributed_optimizer_instances=2,
                  create_all_gather_group=True)),
    ("0.19", dict(world_size=32, gtp_remat_size=2, expert_model_parallel_size=1)),
]


@pytest.mark.parametrize("mcore,kw", CLEAN)
def test_clean_and_upstream_layouts_give_the_same_findings(mcore, kw):
    findings = same(layout(mcore, **kw))
    assert findings  # at least the info findings (communicators, ag-*)


def _swap_dp_cp(d):
    g = d["kinds"]["dp_cp"]["groups"]
    g[0][1], g[1][1] = g[1][1], g[0][1]


def _tp_twice(d):
    d["kinds"]["tp"]["groups"][0] = [0, 2]


def _dp_is_tp(d):
    d["kinds"]["dp"]["groups"] = d["kinds"]["tp"]["groups"]


def _outside(d):
    d["kinds"]["cp"]["groups"][0] = [0, 99]


def _pp_swapped(d):
    g = d["kinds"]["pp"]["groups"]
    g[0], g[1] = g[1], g[0]


def _embd(d):
    d["kinds"]["embd"]["groups"][0] = [8, 0]


def _negative(d):
    d["kinds"]["ep"]["groups"][1] = [-1, 3]


@pytest.mark.parametrize("edit", [_swap_dp_cp, _tp_twice, _dp_is_tp, _outside, _pp_swapped,
                                  _embd, _negative])
def test_faulty_plans_give_the_same_findings(edit):
    findings = same(edited(layout(create_all_gather_group=True), edit))
    assert any(f["severity"] == "error" for f in findings)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_rank_swaps_give_the_same_findings(data):
    lay = layout(data.draw(st.sampled_from(["0.16", "0.19"])), create_all_gather_group=True)
    d = lay.to_dict()
    kind = data.draw(st.sampled_from(sorted(d["kinds"])))
    flat = np.asarray(d["kinds"][kind]["groups"]).ravel()
    i = data.draw(st.integers(0, flat.size - 1))
    flat[i] = data.draw(st.integers(-2, 20))  # a rank moved, doubled or out of the world
    shape = np.asarray(d["kinds"][kind]["groups"]).shape
    d["kinds"][kind]["groups"] = flat.reshape(shape).tolist()
    same(Layout.from_dict(d))


def test_lean_inverse_is_filled_in_chunks_and_equals_the_full_one(monkeypatch):
    monkeypatch.setattr("simharness.checks.CHUNK_CELLS", 4)  # several chunks at 16 ranks
    assert CHUNK_CELLS > 4
    lay = edited(layout(), _tp_twice)
    lean, full = _World(lay, lean=True), _World(lay, lean=False)
    for kind in ("tp", "dp", "cp", "dp_cp", "ep_dp"):
        assert lean.inverse(kind).dtype == np.int32
        assert np.array_equal(lean.inverse(kind), full.inverse(kind))


def test_lean_check_leaves_no_group_array_cached():
    lay = build_layout(ParallelismConfig(world_size=4096, tensor_model_parallel_size=8,
                                         pipeline_model_parallel_size=8,
                                         create_all_gather_group=True))
    check(lay, lean=True)
    cached = [k for k in lay.kinds if "_array" in lay.source(k).__dict__]
    assert cached == []
    check(lay, lean=False)
    assert "dp_cp" in [k for k in lay.kinds if "_array" in lay.source(k).__dict__]


def test_a_rank_left_out_of_its_dp_cp_group_is_a_finding_not_a_crash():
    # found by the hypothesis test above: rank 0 replaced by rank 1 in dp_cp group 0
    def leave_out_rank_0(d):
        d["kinds"]["dp_cp"]["groups"][0][0] = 1

    findings = same(edited(layout(create_all_gather_group=True), leave_out_rank_0))
    assert any(f["code"] == "creation-order" and f["severity"] == "error"
               and "rank 0" in f["message"] for f in findings)
