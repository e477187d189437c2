"""Wall time of a local gloo replay, split into its phases.

    python bench/bench_replay.py                 # world 8, tp 2, cp 2, option on and off
    python bench/bench_replay.py --world 16 --pp 2 --repeat 3 --engine megatron --mcore 0.16

Phases (seconds, from the report): start-up (launcher -> every rank has
initialised the default group: helper start, torch import, fork, rendezvous),
group creation (every new_group of the plan), verification (torch membership,
one all_gather per group, the all-gather group checks), overlap probe, results
(all_gather_object of the results, report), total (wall time of replay()).

    python bench/bench_replay.py --gpu [--world 8] [--topology dgx-h100] [--out FILE]

``--gpu``: an nccl-tests-style sweep through torch.distributed on NCCL, one GPU
per rank (all-reduce, all-gather, reduce-scatter, 1 KB .. 8 GB; and a
reduce-scatter + all-gather issued together on one communicator vs two),
written to FILE in the calibration format of topologies/calibration/nccl_calibration.toml
and compared with the cost model (bench/bench_cost.py FILE does the same). It
has not been run on GPUs in this repository's development.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from simharness import ParallelismConfig, build_layout
from simharness.replay import ReplayOptions, replay

PHASES = (("start-up", "startup_s"), ("groups", "group_creation_s"),
          ("verify", "verification_s"), ("probe", "overlap_probe_s"), ("results", "results_s"),
          ("total", "total_s"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--mcore", default="0.16")
    ap.add_argument("--engine", default="plan", choices=("plan", "megatron"))
    ap.add_argument("--overlap-bytes", type=int, default=4 << 20)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--option", choices=("on", "off", "both"), default="both")
    ap.add_argument("--gpu", action="store_true",
                    help="NCCL sweep on local GPUs instead of the gloo replay (see above)")
    ap.add_argument("--topology", default="dgx-h100",
                    help="--gpu: topology the measured points are compared on")
    ap.add_argument("--out", default="nccl_measured.toml", help="--gpu: calibration file out")
    ap.add_argument("--max-bytes", type=int, default=1 << 33, help="--gpu: largest size")
    args = ap.parse_args(argv)
    if args.gpu:
        return gpu_sweep(args)

    toggles = {"on": (True,), "off": (False,), "both": (True, False)}[args.option]
    print(f"replay bench: world {args.world}, tp {args.tp} pp {args.pp} cp {args.cp} "
          f"ep {args.ep}, mcore {args.mcore}, engine {args.engine}, gloo, probe "
          f"{args.overlap_bytes / 2**20:.2f} MiB x {args.iters} iters, {args.repeat} run(s) "
          f"each (median)")
    header = f"{'option':8s} {'groups':>6s} " + " ".join(f"{name:>9s}" for name, _ in PHASES)
    print(header + "   probe: same / separate / ratio")
    rc = 0
    for ag in toggles:
        cfg = ParallelismConfig(world_size=args.world, tensor_model_parallel_size=args.tp,
                                pipeline_model_parallel_size=args.pp,
                                context_parallel_size=args.cp,
                                expert_model_parallel_size=args.ep,
                                create_all_gather_group=ag)
        layout = build_layout(cfg, args.mcore)
        opts = ReplayOptions(engine=args.engine, overlap_bytes=args.overlap_bytes,
                             iters=args.iters)
        runs = [replay(layout, opts) for _ in range(args.repeat)]
        for r in runs:
            if not r["ok"]:
                print(f"replay failed: status {r['status']}: "
                      f"{(r.get('failure') or {}).get('message') or r['mismatches'][:2]}",
                      file=sys.stderr)
                rc = 1
        med = {key: statistics.median(r["timings"].get(key, float("nan")) for r in runs)
               for _, key in PHASES}
        ov = runs[0].get("overlap") or {}
        probe = "-"
        if "seconds" in ov:
            same = statistics.median(r["overlap"]["seconds"]["same"] for r in runs)
            sep = statistics.median(r["overlap"]["seconds"]["separate"] for r in runs)
            probe = f"{same * 1e3:.2f} ms / {sep * 1e3:.2f} ms / {sep / same:.2f}"
        print(f"{'on' if ag else 'off':8s} {len(layout.creation_order):6d} "
              + " ".join(f"{med[key]:8.2f}s" for _, key in PHASES) + f"   {probe}")
    return rc


def gpu_sweep(args) -> int:
    """The --gpu path: measure, write the calibration file, compare with the model."""
    from pathlib import Path

    from simharness.replay.nccl_sweep import DEFAULT_SIZES, SweepOptions, run_sweep, to_toml
    from simharness.topology.calibration import evaluate, format_table, load_points

    sizes = tuple(s for s in DEFAULT_SIZES if s <= args.max_bytes)
    result = run_sweep(SweepOptions(world=args.world, backend="nccl", sizes=sizes,
                                    iters=args.iters))
    Path(args.out).write_text(to_toml(result, topology=args.topology))
    print(f"wrote {args.out}: {len(result['rows'])} points, NCCL {result.get('nccl', '?')}, "
          f"{result.get('gpu', '?')}")
    ov = result["overlap"]
    print(f"reduce-scatter + all-gather of {ov['size'] / 2**20:.0f} MiB: one communicator "
          f"{ov['one_communicator']:.1f} us, two {ov['two_communicators']:.1f} us")
    print(format_table([evaluate(p) for p in load_points(args.out)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
