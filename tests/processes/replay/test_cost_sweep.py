"""The --gpu sweep's machinery on gloo (the NCCL path needs GPUs: tests/gpu/test_replay_gpu.py)."""

from __future__ import annotations

from simharness.replay.nccl_sweep import COLLECTIVES, SweepOptions, run_sweep, to_toml
from simharness.topology.calibration import evaluate, load_points


def test_gloo_sweep_writes_calibration_points(tmp_path):
    result = run_sweep(SweepOptions(world=2, backend="gloo", sizes=(1024, 1 << 16),
                                    warmup=1, iters=2, overlap_bytes=1 << 16, timeout_s=150))
    assert result["world"] == 2 and len(result["rows"]) == 2 * len(COLLECTIVES)
    assert all(r["time_us"] > 0 for r in result["rows"])
    assert result["overlap"]["one_communicator"] > 0 < result["overlap"]["two_communicators"]
    path = tmp_path / "measured.toml"
    path.write_text(to_toml(result, topology="cpu-loopback"))
    points = load_points(path)
    assert {p.collective for p in points} == set(COLLECTIVES)
    assert all(p.split == "measured" and p.busbw > 0 for p in points)
    # the file feeds bench/bench_cost.py: every point can be priced
    assert all(evaluate(p).predicted > 0 for p in points)
