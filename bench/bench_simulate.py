"""``simharness simulate`` at 16,384 GPUs: seconds per configuration against the 1 s target
(prints; not a test).

    PYTHONPATH=. .venv/bin/python bench/bench_simulate.py [--repeat N] [--no-cli]

Per configuration, on 2,048 nodes of a DGX H100 SuperPOD or of AWS p5: the library path (build the
layout, place it, :func:`simharness.step.simulate`; CPU seconds of this process, best of
``--repeat``), then the whole command (``python -m simharness simulate ... --format json``
in a fresh interpreter: start-up, imports, parsing, output; wall seconds and the child's
CPU seconds, best of ``--repeat``). The ratio is to the 1 s target; the script exits 1
when a configuration's command takes more CPU than that.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simharness import ParallelismConfig, build_layout  # noqa: E402
from simharness.step import SimulateInputs, job_stages, simulate  # noqa: E402
from simharness.topology import load_cluster, place_layout  # noqa: E402

TARGET_S = 1.0
NODES = 2048
LLAMA70B = ["--hidden-size", "8192", "--ffn-hidden-size", "28672", "--num-attention-heads",
            "64", "--num-query-groups", "8", "--vocab-size", "128256", "--layers", "80",
            "--micro-batch-size", "1", "--seq-length", "8192", "--mfu", "0.4"]
MOE = ["--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32",
       "--num-query-groups", "8", "--vocab-size", "32000", "--layers", "32", "--num-experts",
       "64", "--moe-ffn-hidden-size", "14336", "--moe-router-topk", "2",
       "--micro-batch-size", "1", "--seq-length", "4096", "--mfu", "0.35"]
SUPERPOD = "dgx-h100-superpod"
#: name -> (topology, parallel sizes, model flags); every config fills the 16,384 GPUs. On
#: aws-p5 the cost model's error is measured (EFA), so the gain is also run with every
#: collective at the p10 and the p90 of that error
CONFIGS = {
    "dense tp8 pp4, 70B (no AG group)": (SUPERPOD, dict(tp=8, pp=4), LLAMA70B),
    "dense tp8 pp4, 70B (+AG group)": (SUPERPOD, dict(tp=8, pp=4, ag=True), LLAMA70B),
    "dense tp8 pp4, 140GB dist-opt (+AG)": (SUPERPOD, dict(tp=8, pp=4, ag=True),
                                            ["--model-bytes", "140e9", "--layers", "80",
                                             "--compute-ms", "8", "--schedule", "dist-opt"]),
    "moe tp2 ep8 pp4, 64 experts (+AG)": (SUPERPOD, dict(tp=2, ep=8, pp=4, ag=True), MOE),
    "aws-p5: dense tp8 pp4, 70B (+AG)": ("aws-p5", dict(tp=8, pp=4, ag=True), LLAMA70B),
    "aws-p5: moe tp2 ep8 pp4 (+AG)": ("aws-p5", dict(tp=2, ep=8, pp=4, ag=True), MOE),
}


def _flags(sizes: dict) -> list[str]:
    flags: list[str] = []
    for k, v in sizes.items():
        flags += ["--create-all-gather-group"] if k == "ag" else [f"--{k}", str(v)]
    return flags


def _library(topology: str, sizes: dict, model: list[str]) -> float:
    """CPU seconds of layout + placement + simulate (the model flags parsed by hand)."""
    cfg = ParallelismConfig(world_size=NODES * 8, tensor_model_parallel_size=sizes.get("tp", 1),
                            pipeline_model_parallel_size=sizes.get("pp", 1),
                            expert_model_parallel_size=sizes.get("ep", 1),
                            create_all_gather_group=bool(sizes.get("ag")))
    opts = dict(zip(model[::2], model[1::2], strict=True))
    t = time.process_time()
    layout = build_layout(cfg)
    placement = place_layout(layout, load_cluster(topology, NODES))
    if "--model-bytes" in opts:
        stages, _ = job_stages(layout.config, model_bytes=float(opts["--model-bytes"]),
                               layers=int(opts["--layers"]))
        inputs = SimulateInputs(stages=stages, compute_ms=float(opts["--compute-ms"]),
                                schedule=opts.get("--schedule", "fsdp"))
    else:
        names = {"--hidden-size": "hidden_size", "--ffn-hidden-size": "ffn_hidden_size",
                 "--num-attention-heads": "num_attention_heads",
                 "--num-query-groups": "num_query_groups", "--vocab-size": "vocab_size",
                 "--num-experts": "num_moe_experts", "--moe-ffn-hidden-size":
                 "moe_ffn_hidden_size", "--moe-router-topk": "moe_router_topk"}
        fields = {v: int(opts[k]) for k, v in names.items() if k in opts}
        stages, _ = job_stages(layout.config, layers=int(opts["--layers"]), model_fields=fields,
                               micro_batch_size=int(opts["--micro-batch-size"]),
                               seq_length=int(opts["--seq-length"]))
        inputs = SimulateInputs(stages=stages, mfu=float(opts["--mfu"]))
    simulate(layout, placement, inputs)
    return time.process_time() - t


def _command(topology: str, sizes: dict, model: list[str]) -> tuple[float, float]:
    """(wall s, child CPU s) of the whole command in a fresh interpreter."""
    cmd = [sys.executable, "-m", "simharness", "simulate", "--topology", topology,
           "--nodes", str(NODES), *_flags(sizes), *model, "--format", "json"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (best is shown)")
    ap.add_argument("--no-cli", action="store_true", help="skip the whole-command timing")
    args = ap.parse_args(argv)
    print(f"simulate at {NODES * 8} GPUs ({NODES} nodes); target "
          f"{TARGET_S:g} s per configuration")
    print(f"{'configuration':38s} {'library_cpu_s':>13s} {'command_wall_s':>14s} "
          f"{'command_cpu_s':>13s} {'cpu/target':>10s}")
    over = False
    for name, (topology, sizes, model) in CONFIGS.items():
        lib = min(_library(topology, sizes, model) for _ in range(args.repeat))
        if args.no_cli:
            print(f"{name:38s} {lib:13.3f} {'-':>14s} {'-':>13s} {lib / TARGET_S:10.2f}")
            over |= lib > TARGET_S
            continue
        runs = [_command(topology, sizes, model) for _ in range(args.repeat)]
        wall, cpu = min(w for w, _ in runs), min(c for _, c in runs)
        over |= cpu > TARGET_S
        print(f"{name:38s} {lib:13.3f} {wall:14.3f} {cpu:13.3f} {cpu / TARGET_S:10.2f}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
