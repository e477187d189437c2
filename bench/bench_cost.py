"""The cost model against published NCCL measurements (prints; not a test).

    PYTHONPATH=. python bench/bench_cost.py [--heldout] [--sweep] [FILE]

One row per point of topologies/calibration/nccl_calibration.toml (or FILE, e.g. what
``bench/bench_replay.py --gpu`` wrote): measured, predicted, ratio
(predicted / measured), NCCL's pick, and whether it is within the issue-8
target (busbw +-15 %, time 1.5x). The summary is over held-out points only
(points that set no constant); fit points are shown for completeness.
``--heldout`` prints only the held-out points and the issue-15 figures: the share
within target (goal >= 90 %), how many the model predicts too fast, and the median
of predicted / measured speed (goal 0.92-1.08; speed = busbw, or 1 / time), also per
size band (<1 MB, 1-256 MB, >= 256 MB) and per network class (one NVLink domain, or the
network's transport: InfiniBand, RoCE, EFA; with the GPUs' architecture) and size band.
``--nccl`` prices every point with one release instead of the point's own.
``--sweep`` adds NCCL's pick and busbw over 1 KB .. 8 GB for a few groups.
``--memory`` adds the published communicator-memory reports (nccl_memory.toml).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simharness.topology import load_cluster  # noqa: E402
from simharness.topology.calibration import (  # noqa: E402
    DEFAULT_PATH,
    band_summaries,
    class_summaries,
    evaluate,
    evaluate_memory,
    format_table,
    load_memory_reports,
    load_points,
)
from simharness.topology.cost import predict  # noqa: E402

SWEEP = [("dgx-h100", 1, range(8), "all_reduce"), ("dgx-h100", 1, range(8), "all_gather"),
         ("dgx-h100-superpod", 16, range(128), "all_reduce"),
         ("dgx-h100-superpod", 32, range(256), "all_gather"),
         ("gb200-nvl72", 18, range(72), "all_reduce")]


def _print_classes(held) -> None:
    """The held-out summary per network class, then per size band inside it."""
    print("per network class (all sizes, then per size band):")
    for cls in class_summaries(held):
        print(f"  {cls.network}: " + cls.all.line().strip().removeprefix("all: "))
        for band in cls.bands:
            if band.n:
                print("    " + band.line())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(DEFAULT_PATH))
    ap.add_argument("--heldout", action="store_true", help="only held-out points")
    ap.add_argument("--sweep", action="store_true", help="also print NCCL's pick over sizes")
    ap.add_argument("--memory", action="store_true",
                    help="also compare communicator memory with published reports")
    ap.add_argument("--nccl", default=None, help="price every point with this release "
                    "(2.23 or 2.28) instead of the point's own")
    args = ap.parse_args(argv)
    points = load_points(args.file)
    if args.heldout:
        points = [p for p in points if p.split == "heldout"]
    results = [evaluate(p, args.nccl) for p in points]
    print(f"calibration: {args.file}")
    print(format_table(results))
    held = [r for r in results if r.point.split != "fit"]
    if held:
        ok = sum(r.within_target for r in held)
        speeds = [r.speed_ratio for r in held]
        fast = sum(v > 1.0 for v in speeds)
        med = statistics.median(speeds)
        print(f"\nheld-out: {ok} of {len(held)} within target ({ok / len(held):.0%}; goal >= 90 %)"
              f"; too fast on {fast} of {len(held)}; median predicted/measured speed "
              f"{med:.2f} (goal 0.92-1.08), min {min(speeds):.2f}, max {max(speeds):.2f}")
        sizes = [r.point.size for r in held]
        print(f"held-out sizes {min(sizes):.0f} B .. {max(sizes):.0f} B; per size band:")
        for band in band_summaries(held):
            print("  " + band.line())
        _print_classes(held)
        fit = [r for r in results if r.point.split == "fit"]
        if fit:
            print("fit points, same bands (shown for completeness; they set constants):")
            for band in band_summaries(fit):
                print("  " + band.line())
        for r in held:
            if not r.within_target:
                print(f"  miss {r.point.id}: {r.point.known_miss or 'NOT EXPLAINED'}")
    if args.memory:
        print("\ncommunicator memory (MB per GPU) vs published reports:")
        for rep in load_memory_reports():
            mb, how = evaluate_memory(rep)
            print(f"  {rep.id:28s} {rep.split:7s} measured {rep.measured_mb:7.0f}  model "
                  f"{mb:7.0f}  ratio {mb / rep.measured_mb:5.2f}  ({rep.source})")
            print("      " + "; ".join(how))
    if args.sweep:
        sizes = [1 << k for k in range(10, 34, 3)]
        print("\nNCCL's pick and busbw (GB/s) over sizes:")
        for topo, nodes, ranks, coll in SWEEP:
            c = load_cluster(topo, nodes)
            cells = []
            for s in sizes:
                e = predict(c, ranks, coll, s)
                cells.append(f"{e.pick}:{e.busbw_gb_per_s:.0f}")
            print(f"{topo} x{len(ranks)} {coll}: " + "  ".join(
                f"{s >> 10}K={cell}" if s < 1 << 20 else f"{s >> 20}M={cell}"
                for s, cell in zip(sizes, cells, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
