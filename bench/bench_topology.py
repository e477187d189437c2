"""Benchmark and calibration figures of simharness.topology (prints; not a test).

    taskset -c 0,1 .venv/bin/python bench/bench_topology.py

Times placement, locality + findings and the overlap simulation of 16,384-GPU
layouts on a DGX H100 SuperPOD (2,048 nodes, 64 scalable units; target: under
10 s on 2 cores; figures are CPU seconds of this process, as the machine is shared),
then prints the predicted nccl-tests bus bandwidth next to the public figures in
../shared/reference/cluster-numbers.md and PyTorch DTensor's MeshTopoInfo baseline.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simharness import ParallelismConfig, build_layout  # noqa: E402
from simharness.step import SimulateInputs, simulate  # noqa: E402
from simharness.step.workload import job_stages  # noqa: E402
from simharness.topology import load_cluster  # noqa: E402
from simharness.topology.cost import predict  # noqa: E402
from simharness.topology.locality import analyse  # noqa: E402
from simharness.topology.placement import place_layout  # noqa: E402

WORLD = 16384
CONFIGS = {
    "dense tp8 pp4 (+AG group)": dict(tensor_model_parallel_size=8, pipeline_model_parallel_size=4,
                                      create_all_gather_group=True),
    "moe tp2 cp2 ep8 pp4 (+AG)": dict(tensor_model_parallel_size=2, context_parallel_size=2,
                                      expert_model_parallel_size=8,
                                      pipeline_model_parallel_size=4,
                                      create_all_gather_group=True),
    "dp only tp1 (+AG group)": dict(create_all_gather_group=True),
}


def timed(fn, *args, **kwargs):
    t = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - t


def bench_scale() -> None:
    cluster, t_cluster = timed(load_cluster, "dgx-h100-superpod", WORLD // 8)
    _, t_graph = timed(cluster.graph)
    print(f"cluster: {cluster.n_devices} GPUs, {cluster.n_leaves} leaves; load {t_cluster:.3f} s, "
          f"networkx graph {t_graph:.2f} s (not needed for placement or simulation)")
    print(f"{'config':28s} {'layout':>7s} {'place':>7s} {'locality':>9s} {'simulate':>9s} "
          f"{'total':>7s}  kinds findings gain")
    for name, sizes in CONFIGS.items():
        lay, t_lay = timed(build_layout, ParallelismConfig(world_size=WORLD, **sizes))
        placement, t_place = timed(place_layout, lay, cluster)
        (rows, findings), t_loc = timed(analyse, lay, placement)
        expert = 100e9 if sizes.get("expert_model_parallel_size", 1) > 1 else None
        stages, _ = job_stages(lay.config, model_bytes=140e9, layers=80, expert_bytes=expert)
        rep, t_sim = timed(simulate, lay, placement, SimulateInputs(stages=stages, compute_ms=5.0))
        total = t_place + t_loc + t_sim
        print(f"{name:28s} {t_lay:7.3f} {t_place:7.3f} {t_loc:9.3f} {t_sim:9.3f} {total:7.3f}"
              f"  {len(rows):5d} {len(findings):8d} {rep.gain_pct:5.1f}%")


def calibration() -> None:
    """A few groups' NCCL pick and busbw next to PyTorch DTensor's MeshTopoInfo baseline;
    the sourced comparison with published figures is bench/bench_cost.py."""
    size = 8 * 2 ** 30
    node = load_cluster("dgx-h100")
    rows = [("8 x H100, one node", node, range(8), "all_gather"),
            ("8 x H100, one node", node, range(8), "all_reduce")]
    for n in (2, 4):
        c = load_cluster("dgx-h100-superpod", n)
        rows.append((f"{n} nodes x 8, rails", c, range(8 * n), "all_reduce"))
        rows.append((f"{n} nodes x 8, rails", c, range(8 * n), "all_gather"))
        rows.append((f"{n} nodes x 1 GPU, rail 0", c, [8 * i for i in range(n)], "all_gather"))
    print(f"\nNCCL model, busbw GB/s at {size / 2**30:.0f} GiB (published figures: "
          "bench/bench_cost.py):")
    print(f"{'case':26s} {'collective':11s} {'pick':16s} {'predicted':>9s}  DTensor baseline")
    for label, c, ranks, coll in rows:
        e = predict(c, ranks, coll, size)
        inter = c.n_domains > 1 and len({r // 8 for r in ranks}) > 1
        dtensor = 87.7 * (0.22 if inter else 1.0)
        print(f"{label:26s} {coll:11s} {e.pick:16s} {e.busbw_gb_per_s:9.1f}  {dtensor:.1f}")


if __name__ == "__main__":
    bench_scale()
    calibration()
