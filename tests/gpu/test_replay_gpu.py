"""NCCL replays and the overlap probe on GPUs (skipped without enough GPUs).

Run on a machine with at least 8 GPUs: ``pytest -m gpu tests/gpu/test_replay_gpu.py -s``
prints the overlap figures (the number users care about: does the all-gather
on its own communicator overlap the reduce-scatter?).
"""

from __future__ import annotations

import pytest
from support.gpu import need
from support.replay import DEADLINE, assert_no_leftovers

from simharness import ParallelismConfig, build_layout
from simharness.replay import ReplayOptions, replay, summary_lines


def nccl_replay(layout, **kw):
    rep = replay(layout, ReplayOptions(backend="nccl", timeout=120.0, **kw),
                 deadline=DEADLINE)
    print("\n".join(summary_lines(rep)))
    assert_no_leftovers(rep)
    return rep


@pytest.mark.parametrize("ag", [True, False], ids=["ag-on", "ag-off"])
def test_nccl_world8_tp2_pp2_cp2(ag):
    need(8)
    layout = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2,
                                            pipeline_model_parallel_size=2,
                                            context_parallel_size=2,
                                            create_all_gather_group=ag), "0.16")
    rep = nccl_replay(layout, overlap_bytes=64 << 20, iters=20)
    assert rep["status"] == "matched"
    assert rep["backend_map"] == {"nccl": "nccl", "ucc": "nccl", "gloo": "gloo"}
    created = {k for c in rep["communicators_per_rank"]["by_rank"] for k in c["created"]}
    assert created == {"nccl", "gloo"}
    ov = rep["overlap"]
    assert ov["values_ok"] and ov["ratio_separate_over_same"] > 0


def test_nccl_overlap_dp_cp_of_8():
    """dp*cp = 8 on one node: the probe's reduce-scatter and all-gather span all 8 GPUs."""
    need(8)
    layout = build_layout(ParallelismConfig(world_size=8, context_parallel_size=2,
                                            create_all_gather_group=True), "0.16")
    rep = nccl_replay(layout, overlap_bytes=256 << 20, iters=20)
    assert rep["status"] == "matched"
    assert rep["overlap"]["group_size"] == 8


def test_nccl_megatron_world8():
    need(8)
    pytest.importorskip("megatron.core")
    layout = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2,
                                            context_parallel_size=2,
                                            create_all_gather_group=True), "0.16")
    rep = nccl_replay(layout, engine="megatron", overlap_bytes=64 << 20, iters=10)
    assert rep["status"] == "matched" and rep["megatron"]["verify_live_ok"]


def test_nccl_sweep_against_the_cost_model(tmp_path):
    """bench/bench_replay.py --gpu's measurement on 8 GPUs, compared with the model.

    Never run in this repository's development (no GPU); on a DGX H100/H200 node it
    should land within the calibration targets for the large sizes."""
    need(8)
    from simharness.replay.nccl_sweep import SweepOptions, run_sweep, to_toml
    from simharness.topology.calibration import evaluate, format_table, load_points

    result = run_sweep(SweepOptions(world=8, sizes=(1 << 10, 1 << 20, 1 << 30), iters=10))
    path = tmp_path / "measured.toml"
    path.write_text(to_toml(result, topology="dgx-h100"))
    results = [evaluate(p) for p in load_points(path)]
    print("\n" + format_table(results))
    big = [r for r in results if r.point.size >= 1 << 30]
    assert big and all(0.5 < r.ratio < 2.0 for r in big)
