"""``simharness run`` on distributed test files: per file passed / failed / skipped (needs GPU)
/ hung, rounds, wall time, CPU time of the whole process tree and peak RSS per rank.

    python bench/bench_run.py                      # the default files below
    python bench/bench_run.py -n 8 FILE [FILE...]  # any pytest files (paths or node ids)
    python bench/bench_run.py --upstream DIR       # + Megatron-LM's test_parallel_state.py

Default files: tests/run_cases/megatron_cases.py (40 Megatron-Core tests, 8 ranks) and
tests/run_cases/dist_cases.py (7 tests with a fail, a needs-GPU skip and a hang, 4 ranks).

``--upstream DIR``: a Megatron-LM checkout (or the pinned files of
tests/megatron_harness.py's cache) holding tests/unit_tests/test_parallel_state.py; it is run
from DIR with DIR on PYTHONPATH. Nothing is downloaded here (CI has no internet).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

from simharness.runtests.runner import RunSpec, cores, memory_plan, run_pytest
from simharness.runtests.verdicts import counts

DEFAULT = (("tests/run_cases/megatron_cases.py", 8), ("tests/run_cases/dist_cases.py", 4))


def bench_file(path: str, ranks: int, timeout: float, cwd: str | None = None) -> dict:
    """One file's run: counts, rounds, wall and CPU seconds, peak RSS per rank (MiB)."""
    old = os.getcwd()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        if cwd:
            os.chdir(cwd)
        rep = run_pytest(RunSpec((path, "-q", "-W", "ignore::UserWarning"), ranks,
                                 timeout_s=timeout))
    finally:
        os.chdir(old)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    c = counts(rep.verdicts)
    peak = max(rep.peak_rss_kib.values(), default=0) // 1024
    per_test = [v.duration for v in rep.verdicts if v.outcome != "hung"]
    return {"file": path, "ranks": ranks, "tests": len(rep.verdicts), **c,
            "rounds": rep.rounds, "wall_s": wall, "children_cpu_s": cpu,
            "peak_rss_mib": peak,
            "slowest_test_s": max(per_test, default=0.0),
            "failed_ids": [v.nodeid for v in rep.verdicts if v.outcome in ("failed", "hung")]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="pytest files or node ids (default: see above)")
    ap.add_argument("-n", type=int, default=8, help="ranks for FILES (default 8)")
    ap.add_argument("--timeout", type=float, default=60.0, help="per-test hang timeout (s)")
    ap.add_argument("--upstream", default=None, metavar="DIR",
                    help="a Megatron-LM tree with tests/unit_tests/test_parallel_state.py")
    args = ap.parse_args(argv)
    jobs: list[tuple[str, int, str | None]] = (
        [(f, args.n, None) for f in args.files] if args.files
        else [(f, n, None) for f, n in DEFAULT])
    if args.upstream:
        path = os.path.join(args.upstream, "tests/unit_tests/test_parallel_state.py")
        if not os.path.exists(path):
            print(f"error: {path} does not exist (give a Megatron-LM checkout)", file=sys.stderr)
            return 2
        jobs.append(("tests/unit_tests/test_parallel_state.py", 8, args.upstream))
    print(f"{cores()} CPU cores; load average {os.getloadavg()[0]:.1f}; "
          f"{memory_plan(8).describe()}")
    print(f"{'file':45} {'W':>2} {'tests':>5} {'pass':>4} {'fail':>4} {'skip':>4} "
          f"{'gpu':>3} {'hung':>4} {'rnds':>4} {'wall s':>7} {'cpu s':>7} {'rss MiB':>7}")
    for path, ranks, cwd in jobs:
        r = bench_file(path, ranks, args.timeout, cwd)
        print(f"{os.path.basename(r['file'])[:45]:45} {r['ranks']:>2} {r['tests']:>5} "
              f"{r['passed']:>4} {r['failed']:>4} {r['skipped']:>4} {r['needs_gpu']:>3} "
              f"{r['hung']:>4} {r['rounds']:>4} {r['wall_s']:>7.1f} "
              f"{r['children_cpu_s']:>7.1f} {r['peak_rss_mib']:>7}", flush=True)
        for nodeid in r["failed_ids"]:
            print(f"    not passed: {nodeid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
