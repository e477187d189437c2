"""``simharness run`` on distributed test files: per file passed / failed / skipped (needs GPU)
/ hung, rounds, wall time, CPU time of the whole process tree and peak RSS per rank.

    python bench/bench_run.py                      # the default files below
    python bench/bench_run.py -n 8 FILE [FILE...]  # any pytest files (paths or node ids)
    python bench/bench_run.py --upstream           # + the pinned upstream suites

Default files: tests/fixtures/run/megatron_cases.py (40 Megatron-Core tests, 8 ranks) and
tests/fixtures/run/dist_cases.py (7 tests with a fail, a needs-GPU skip and a hang, 4 ranks).

``--upstream``: also the pinned upstream suites of tests/support/upstream_suites.py: Megatron-LM
core_v0.16.1 tests/unit_tests/test_parallel_state.py (8 ranks), run from its cache directory
without this project's pytest options, and torch 2.13.0's distributed_test.py (3 ranks,
through tests/fixtures/run/torch_distributed_driver.py, from the installed wheel once its sha256
matches the pin). A suite whose files are not there is listed as "needs the files"
(``python tests/support/upstream_suites.py --git MIRROR`` puts Megatron-LM's there; nothing is
downloaded). ``--suite NAME`` runs only that suite. A suite of several files
(``megatron-lm-main``: Megatron-LM main's unit tests with the ``megatron`` of the same commit)
runs them in one ``simharness run`` and prints a row per file; it needs an interpreter in
which ``megatron.core`` resolves to the suite's own copy (docs/run.md, "Megatron-LM main").
``--log FILE`` writes every verdict not passed with its detail (its first 20 and last 40
lines).

Columns: ``gpu`` = skipped because a call needs a real GPU (part of ``skip``); ``div`` =
diverged (the ranks did not all run the test).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

from simharness.pytest_ranks.controller import RunSpec, cores, memory_plan, run_pytest
from simharness.pytest_ranks.verdicts import counts, junit_xml

DEFAULT = (("tests/fixtures/run/megatron_cases.py", 8), ("tests/fixtures/run/dist_cases.py", 4))


def own_import(package: str, root: str) -> str | None:
    """None when this interpreter imports ``package`` from ``root`` (as pytest run there
    does); else where it comes from."""
    code = ("import importlib.util,sys; s=importlib.util.find_spec(sys.argv[1]); "
            "print(s.origin if s else 'nowhere')")
    got = subprocess.run([sys.executable, "-c", code, package], cwd=root, capture_output=True,
                         text=True, timeout=300).stdout.strip()
    return None if got.startswith(os.path.realpath(root) + os.sep) or got.startswith(
        root + os.sep) else got or "an import error"


def per_file(verdicts) -> dict[str, dict]:
    """Counts per test file (the node id's path), in the order the files ran."""
    by: dict[str, list] = {}
    for v in verdicts:
        by.setdefault(v.nodeid.split("::")[0], []).append(v)
    return {f: {"tests": len(vs), **counts(vs)} for f, vs in by.items()}


def bench_file(path: str | tuple[str, ...], ranks: int, timeout: float, cwd: str | None = None,
               extra: tuple[str, ...] = (), shim: bool = True) -> dict:
    """One run of a file (or several files together): counts, rounds, wall and CPU seconds,
    peak RSS per rank (MiB)."""
    paths = (path,) if isinstance(path, str) else path
    old = os.getcwd()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        if cwd:
            os.chdir(cwd)
        own = ("-o", "addopts=", "--rootdir", ".") if cwd else ()  # not this project's ini
        rep = run_pytest(RunSpec((*paths, "-q", "-W", "ignore::UserWarning", *own, *extra),
                                 ranks, timeout_s=timeout, shim=shim))
    finally:
        os.chdir(old)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    c = counts(rep.verdicts)
    peak = max(rep.peak_rss_kib.values(), default=0) // 1024
    per_test = [v.duration for v in rep.verdicts if v.outcome != "hung"]
    return {"file": paths[0] if len(paths) == 1 else f"{len(paths)} files", "ranks": ranks,
            "tests": len(rep.verdicts), **c,
            "verdicts": rep.verdicts,
            "rounds": rep.rounds, "wall_s": wall, "children_cpu_s": cpu,
            "peak_rss_mib": peak,
            "slowest_test_s": max(per_test, default=0.0),
            "load_after": os.getloadavg()[0],
            "failed_ids": [f"{v.outcome}: {v.nodeid}" for v in rep.verdicts
                           if v.outcome in ("failed", "hung", "diverged")]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="pytest files or node ids (default: see above)")
    ap.add_argument("-n", type=int, default=8, help="ranks for FILES (default 8)")
    ap.add_argument("--timeout", type=float, default=60.0, help="per-test hang timeout (s)")
    ap.add_argument("--upstream", action="store_true",
                    help="also the pinned upstream suites (tests/support/upstream_suites.py)")
    ap.add_argument("--no-shim", action="store_true", help="run the ranks without the GPU shim")
    ap.add_argument("--junit-dir", help="write each file's verdicts as JUnit XML here")
    ap.add_argument("--suite", action="append", default=[],
                    help="only this upstream suite (repeatable; no default files)")
    ap.add_argument("--log", help="write each verdict not passed, with its detail, here")
    ap.add_argument("--only", action="append", default=[], metavar="PATH",
                    help="of a suite's files, only this one (repeatable)")
    args = ap.parse_args(argv)
    jobs: list[tuple[str | tuple[str, ...], int, str | None, tuple[str, ...]]] = (
        [(f, args.n, None, ()) for f in args.files] if args.files
        else [] if args.suite else [(f, n, None, ()) for f, n in DEFAULT])
    if args.upstream or args.suite:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "support"))
        import upstream_suites

        for suite in upstream_suites.SUITES.values():
            if args.suite and suite.name not in args.suite:
                continue
            root = upstream_suites.cached(suite)
            if root is None:
                how = (f"{suite.package} installed with the pinned files: "
                       f"{'; '.join(upstream_suites.mismatches(suite))}" if suite.package
                       else f"python tests/support/upstream_suites.py --git MIRROR-OF-{suite.repo}")
                print(f"{suite.name}: needs the files ({how})")
            elif suite.imports and (where := own_import(suite.imports, str(root))):
                print(f"{suite.name}: needs an interpreter without another {suite.imports} "
                      f"(this one imports it from {where}; docs/run.md)")
            else:
                runs = tuple(f for f in suite.runs if not args.only or f in args.only)
                if not runs:
                    print(f"{suite.name}: none of its files is given by --only")
                    continue
                jobs.append((runs[0] if isinstance(suite.run, str) else runs, suite.ranks,
                             None if suite.package else str(root), suite.pytest_args))
    print(f"{cores()} CPU cores; load average {os.getloadavg()[0]:.1f}; "
          f"{memory_plan(8).describe()}")
    print(f"{'file':45} {'W':>2} {'tests':>5} {'pass':>4} {'fail':>4} {'skip':>4} "
          f"{'gpu':>3} {'hung':>4} {'div':>3} {'rnds':>4} {'wall s':>7} {'cpu s':>7} "
          f"{'rss MiB':>7} {'load':>5}")
    log = open(args.log, "w", encoding="utf-8") if args.log else None  # noqa: SIM115
    for path, ranks, cwd, extra in jobs:
        r = bench_file(path, ranks, args.timeout, cwd, extra, not args.no_shim)
        verdicts = r.pop("verdicts")
        if args.junit_dir:
            os.makedirs(args.junit_dir, exist_ok=True)
            first = path if isinstance(path, str) else path[0]
            name = os.path.splitext(os.path.basename(first))[0] + ".xml"
            with open(os.path.join(args.junit_dir, name), "w", encoding="utf-8") as fh:
                fh.write(junit_xml(verdicts, wall_s=r["wall_s"], world=ranks))
        if log is not None:
            for v in verdicts:
                if v.outcome != "passed":
                    lines = v.detail.splitlines()
                    cut = lines if len(lines) <= 60 else [*lines[:20], "...", *lines[-40:]]
                    detail = "\n    ".join(cut)
                    log.write(f"{v.label} {v.nodeid}\n    {detail}\n")
            log.flush()
        if not isinstance(path, str):
            for f, c in per_file(verdicts).items():
                print(f"  {f:60} {c['tests']:>5} {c['passed']:>4} {c['failed']:>4} "
                      f"{c['skipped']:>4} {c['needs_gpu']:>3} {c['hung']:>4} "
                      f"{c['diverged']:>3}", flush=True)
        print(f"{os.path.basename(r['file'])[:45]:45} {r['ranks']:>2} {r['tests']:>5} "
              f"{r['passed']:>4} {r['failed']:>4} {r['skipped']:>4} {r['needs_gpu']:>3} "
              f"{r['hung']:>4} {r['diverged']:>3} {r['rounds']:>4} {r['wall_s']:>7.1f} "
              f"{r['children_cpu_s']:>7.1f} {r['peak_rss_mib']:>7} {r['load_after']:>5.1f}",
              flush=True)
        for nodeid in r["failed_ids"]:
            print(f"    not passed: {nodeid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
