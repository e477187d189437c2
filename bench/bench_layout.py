#!/usr/bin/env python
"""Layout-engine benchmark (a script, not a test): ``python bench/bench_layout.py``.

1. A full layout at 1,048,576 ranks (default tp8 pp8 cp2 ep8 etp1, two optimizer
   instances, Gloo on, all-gather group on, both generators): time to validate the
   config, build the layout and force every kind's ``groups()`` array; peak RSS
   (``ru_maxrss``) right after; the mean time of ``layout.rank(r)`` for random ranks,
   on a fresh layout (nothing built) and on the built one; ``len(creation_order)``;
   the time of ``simharness.check(layout)``.
2. The speed-up over megatron-core's own ``RankGenerator`` at 65,536 ranks, in the
   same run, on the same tokens: the tokens ``initialize_model_parallel`` asks the
   dense and the expert generator for. Results are compared for equality.

3. ``check`` at 1M, 4M and 16M ranks (``--check-worlds``; tp8 pp8, mcore 0.19, the
   configuration of ``simharness check -n W --tp 8 --pp 8``), each in a fresh process:
   wall time and peak RSS of ``build_layout`` + ``check``, in the lean mode huge worlds
   use and, with ``--check-full``, in the full mode (every array kept: the code before
   the lean mode) for comparison; the findings of the two must be equal.

Targets (printed next to the figures): build <= 1 s, RSS <= 1.5 GiB, rank view
<= 1 ms, >= 100x faster than RankGenerator, ``check`` of 16M ranks <= 1.5 GiB peak RSS
(:data:`CHECK_16M_BOUND_MIB`). Exits 1 when a target is missed or the results differ.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import sys
import time
import warnings

import numpy as np

DENSE_TOKENS = ("dp-cp", "dp", "cp", "tp-pp", "tp", "pp", "tp-dp-cp", "tp-dp", "tp-cp")
EXPERT_TOKENS = ("ep", "tp", "tp-ep", "tp-ep-pp", "dp")


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def row(name: str, value: str, target: str = "", ok: bool | None = None) -> None:
    mark = "" if ok is None else ("ok" if ok else "MISSED")
    print(f"  {name:<44} {value:>16}  {target:<14} {mark}")


def sizes_for(world: int, a) -> dict:
    return dict(world_size=world, tensor_model_parallel_size=a.tp,
                pipeline_model_parallel_size=a.pp, context_parallel_size=a.cp,
                expert_model_parallel_size=a.ep, expert_tensor_parallel_size=a.etp,
                num_distributed_optimizer_instances=a.n, use_gloo_process_groups=True,
                create_all_gather_group=True)


def bench_layout(a) -> list[bool]:
    from simharness import ParallelismConfig, build_layout, check

    oks = []
    print(f"simharness layout, {a.world:,} ranks, mcore {a.mcore}: tp{a.tp} pp{a.pp} cp{a.cp} "
          f"ep{a.ep} etp{a.etp}, n={a.n}, gloo on, all-gather group on")
    rss0 = rss_mib()
    gc.collect()
    t0 = time.perf_counter()
    cfg = ParallelismConfig(**sizes_for(a.world, a))
    layout = build_layout(cfg, mcore=a.mcore)
    t1 = time.perf_counter()
    cells = 0
    for kind in layout.kinds:
        cells += layout.groups(kind).size
    t2 = time.perf_counter()
    rss = rss_mib()
    ok = t2 - t0 <= 1.0
    oks.append(ok)
    row("build: config + layout + every groups()", f"{t2 - t0:.3f} s", "<= 1 s", ok)
    row("  of which config + build_layout", f"{t1 - t0:.3f} s")
    row("  kinds / rank cells (twins share arrays)", f"{len(layout.kinds)} / {cells:,}")
    ok = rss <= 1.5 * 1024
    oks.append(ok)
    row("peak RSS (ru_maxrss)", f"{rss:.0f} MiB", "<= 1536 MiB", ok)
    row("  RSS before the build", f"{rss0:.0f} MiB")
    row("len(creation_order)", f"{len(layout.creation_order):,}")

    rng = random.Random(0)
    picks = [rng.randrange(layout.ranks.start, layout.ranks.stop) for _ in range(a.views)]
    fresh = build_layout(cfg, mcore=a.mcore)  # no arrays built: the arithmetic path
    for label, lay in (("rank view, fresh layout (mean)", fresh),
                       ("rank view, arrays built (mean)", layout)):
        t = time.perf_counter()
        for r in picks:
            lay.rank(r)
        dt = (time.perf_counter() - t) / len(picks)
        ok = dt <= 1e-3
        oks.append(ok)
        row(f"{label}, {len(picks)} ranks", f"{dt * 1e3:.3f} ms", "<= 1 ms", ok)
    v = layout.rank(picks[0])
    t = time.perf_counter()
    v.to_dict()
    row("  one full to_dict() of a view (all member lists)",
        f"{(time.perf_counter() - t) * 1e3:.1f} ms")

    t = time.perf_counter()
    findings = check(layout)
    dt = time.perf_counter() - t
    row("simharness.check(layout)", f"{dt:.3f} s")
    row("  findings (error/warning/info)",
        "/".join(str(sum(f.severity == s for f in findings)) for s in ("error", "warning", "info")))
    row("peak RSS after check", f"{rss_mib():.0f} MiB")
    return oks


def bench_rank_generator(a) -> list[bool]:
    from simharness.grid import Grid, _groups, _masked_offsets

    world = a.rankgen_world
    tp, pp, cp, ep, etp = a.tp, a.pp, a.cp, a.ep, a.etp
    dp, edp = world // (tp * pp * cp), world // (etp * ep * pp)
    order = "tp-cp-ep-dp-pp"
    print(f"\nvs megatron-core RankGenerator, {world:,} ranks, same tokens "
          f"({len(DENSE_TOKENS)} dense + {len(EXPERT_TOKENS)} expert)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import megatron.core
            from megatron.core.parallel_state import RankGenerator
        except ImportError as exc:
            print(f"  skipped: megatron-core not importable ({exc})")
            return []
    row("megatron-core version", megatron.core.__version__)
    t = time.perf_counter()
    dense_m = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
    expert_m = RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order=order)
    theirs = {("dense", k): dense_m.get_ranks(k) for k in DENSE_TOKENS}
    theirs.update({("expert", k): expert_m.get_ranks(k) for k in EXPERT_TOKENS})
    t_meg = time.perf_counter() - t

    _groups.cache_clear()  # time a cold build, not the cache
    _masked_offsets.cache_clear()
    t = time.perf_counter()
    dense_s = Grid.from_sizes(order, tp=tp, pp=pp, dp=dp, ep=1, cp=cp)
    expert_s = Grid.from_sizes(order, tp=etp, pp=pp, dp=edp, ep=ep, cp=1)
    ours = {("dense", k): dense_s.groups(k) for k in DENSE_TOKENS}
    ours.update({("expert", k): expert_s.groups(k) for k in EXPERT_TOKENS})
    t_ours = time.perf_counter() - t

    equal = all(np.array_equal(np.asarray(theirs[k], dtype=np.int64), ours[k]) for k in theirs)
    speedup = t_meg / t_ours
    row("RankGenerator.get_ranks, all tokens", f"{t_meg:.3f} s")
    row("simharness Grid.groups, all tokens (cold)", f"{t_ours * 1e3:.2f} ms")
    ok = speedup >= 100
    row("speed-up", f"{speedup:,.0f}x", ">= 100x", ok)
    row("results equal", str(equal), "True", equal)
    return [ok, equal]


CHECK_16M_BOUND_MIB = 1536  # the stated bound: check of 16M ranks in lean mode

_CHECK_CHILD = """
import json, resource, sys, time
from simharness import ParallelismConfig, build_layout, check
world, lean = int(sys.argv[1]), sys.argv[2] == "lean"
t = time.perf_counter()
lay = build_layout(ParallelismConfig(world_size=world, tensor_model_parallel_size=8,
                                     pipeline_model_parallel_size=8), "0.19")
findings = check(lay, lean=lean)
print(json.dumps({"s": time.perf_counter() - t,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "findings": [f.to_dict() for f in findings]}))
"""


def _check_run(world: int, mode: str) -> dict:
    import json
    import subprocess

    done = subprocess.run([sys.executable, "-c", _CHECK_CHILD, str(world), mode],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    return json.loads(done.stdout)


def bench_check(a) -> list[bool]:
    oks = []
    modes = ("lean", "full") if a.check_full else ("lean",)
    print("\nsimharness check (build_layout + check), tp8 pp8, mcore 0.19, fresh process each")
    for world in a.check_worlds:
        runs = {m: _check_run(world, m) for m in modes}
        for m, r in runs.items():
            if "error" in r:
                row(f"{world:,} ranks, {m}", "failed", "", False)
                print(f"    {r['error']}")
                oks.append(False)
                continue
            bound = m == "lean" and world == 1 << 24
            ok = r["rss_mib"] <= CHECK_16M_BOUND_MIB if bound else None
            if ok is not None:
                oks.append(ok)
            row(f"{world:,} ranks, {m}: time / peak RSS",
                f"{r['s']:.1f} s / {r['rss_mib']:.0f} MiB",
                f"<= {CHECK_16M_BOUND_MIB} MiB" if bound else "", ok)
        if all("findings" in r for r in runs.values()) and len(runs) == 2:
            equal = runs["lean"]["findings"] == runs["full"]["findings"]
            oks.append(equal)
            row(f"  {world:,} ranks: lean findings == full", str(equal), "True", equal)
    return oks


def _world(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(t[:-1] if mult > 1 else t) * mult


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=1 << 20)
    p.add_argument("--rankgen-world", type=int, default=1 << 16)
    p.add_argument("--mcore", default="0.16", choices=["0.16", "0.19"])
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--pp", type=int, default=8)
    p.add_argument("--cp", type=int, default=2)
    p.add_argument("--ep", type=int, default=8)
    p.add_argument("--etp", type=int, default=1)
    p.add_argument("--n", type=int, default=2, help="distributed-optimizer instances")
    p.add_argument("--views", type=int, default=1000, help="random ranks for the view timing")
    p.add_argument("--no-megatron", action="store_true", help="skip the RankGenerator part")
    p.add_argument("--check-worlds", type=lambda v: [_world(x) for x in v.split(",") if x],
                   default=[1 << 20, 1 << 22, 1 << 24],
                   help="worlds for the check part, e.g. 1M,4M,16M (empty: skip it)")
    p.add_argument("--check-full", action="store_true",
                   help="also run check in full mode (every array kept), the code before")
    p.add_argument("--only-check", action="store_true", help="run only the check part")
    a = p.parse_args(argv)
    oks = [] if a.only_check else bench_layout(a)
    if not a.no_megatron and not a.only_check:
        oks += bench_rank_generator(a)
    if a.check_worlds:
        oks += bench_check(a)
    print("\nall targets met" if all(oks) else "\nSOME TARGETS MISSED")
    return 0 if all(oks) else 1


if __name__ == "__main__":
    sys.exit(main())
