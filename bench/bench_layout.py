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

Targets (printed next to the figures): build <= 1 s, RSS <= 1.5 GiB, rank view
<= 1 ms, >= 100x faster than RankGenerator. Exits 1 when a target is missed or the
results differ.
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
    a = p.parse_args(argv)
    oks = bench_layout(a)
    if not a.no_megatron:
        oks += bench_rank_generator(a)
    print("\nall targets met" if all(oks) else "\nSOME TARGETS MISSED")
    return 0 if all(oks) else 1


if __name__ == "__main__":
    sys.exit(main())
