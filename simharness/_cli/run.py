"""``simharness run``: distributed tests or scripts written for GPUs, unedited, on CPU ranks.

Nothing here imports torch at start-up; :mod:`simharness.pytest_ranks` and
:mod:`simharness.launch` do when the command runs.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import click

from . import output as out
from .common import fail, refuse_option_as_command

# pytest options that take a value (so the next word is not a test path).
_VALUE_OPTIONS = frozenset({
    "-k", "-m", "-p", "-c", "-o", "-W", "-r", "--deselect", "--ignore", "--ignore-glob",
    "--rootdir", "--confcutdir", "--basetemp", "--junit-xml", "--junitxml", "--log-file",
    "--log-level", "--maxfail", "--durations", "--tb", "--import-mode", "--override-ini",
    "--capture", "--timeout", "--cov", "--log-cli-level", "--color", "--doctest-glob",
    "--junit-prefix", "--config-file", "--inifile"})


def parse_command(command: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """``("pytest", pytest_args)`` or ``("script", target)`` for the words after ``--``.

    >>> parse_command(("pytest", "-q", "t.py"))
    ('pytest', ('-q', 't.py'))
    >>> parse_command(("python", "-m", "pytest", "t.py"))
    ('pytest', ('t.py',))
    >>> parse_command(("python3", "train.py", "--lr", "1"))
    ('script', ('train.py', '--lr', '1'))
    >>> parse_command(("python", "-m", "pkg.train"))
    ('script', ('-m', 'pkg.train'))
    """
    words = tuple(command)
    if not words:
        fail("nothing to run: give `-- pytest ARGS`, `-- python script.py ARGS` or "
             "`-- python -m module ARGS` after the options.")
    head = os.path.basename(words[0])
    if head in ("pytest", "py.test"):
        return "pytest", words[1:]
    if head.startswith("python"):
        rest = words[1:]
        if rest[:2] == ("-m", "pytest"):
            return "pytest", rest[2:]
        if rest[:1] == ("-m",) and len(rest) > 1:
            return "script", rest
        if rest and not rest[0].startswith("-"):
            return "script", rest
        fail(f"`{' '.join(words)}`: give the script (python script.py ARGS) or a module "
             f"(python -m module ARGS).")
    if words[0].endswith(".py"):
        return "script", words
    fail(f"simharness run starts Python ranks; `{words[0]}` is neither pytest, python nor a "
         f".py script. Write `-- pytest ARGS` or `-- python script.py ARGS`.")


def check_pytest_args(args: tuple[str, ...]) -> None:
    """Refuse xdist's ``-n`` and pytest's own ``--junit-xml`` inside the ranks, and test
    paths that do not exist."""
    prev = ""
    for word in args:
        if word in ("-n", "--numprocesses", "--dist") or word.startswith(
                ("--numprocesses=", "--dist=")) or (word.startswith("-n") and word[2:].isdigit()):
            fail(f"pytest argument {word!r}: pytest-xdist inside the ranks would split the "
                 f"tests between processes of one rank; remove it (the ranks are already "
                 f"separate processes).")
        if word.split("=", 1)[0] in ("--junit-xml", "--junitxml"):
            fail(f"pytest argument {word!r}: every rank would write that file; give "
                 f"--junit-xml FILE before `--` (one file with one verdict per test).")
        if not word.startswith("-") and prev not in _VALUE_OPTIONS:
            path = word.split("::", 1)[0]
            if not os.path.exists(path):
                fail(f"test path {path!r} does not exist (cwd {os.getcwd()}).")
        prev = word if word.startswith("-") and "=" not in word else ""


def _sizes(world, nproc, nnodes) -> tuple[int, int]:
    if nnodes is not None and nnodes < 1:
        fail(f"--nnodes must be >= 1, got {nnodes}.")
    nnodes = nnodes or 1
    if world is not None and world < 1:
        fail(f"-n/--world-size must be >= 1, got {world}.")
    if nproc is not None and nproc < 1:
        fail(f"--nproc-per-node must be >= 1, got {nproc}.")
    if world is None and nproc is None:
        fail("give the number of ranks: -n WORLD (or --nproc-per-node K [--nnodes N]).")
    if nproc is None:
        if world % nnodes:
            fail(f"-n {world} is not a multiple of --nnodes {nnodes}; give --nproc-per-node.")
        nproc = world // nnodes
    if world is not None and world != nproc * nnodes:
        fail(f"-n {world} must equal --nproc-per-node {nproc} x --nnodes {nnodes} "
             f"= {nproc * nnodes}.")
    return nproc, nnodes


def _topology_gpu(topology: str) -> str:
    """The shim's key for the GPU of cluster file ``topology`` (``[node] gpu``); one
    ``error:`` line when the file is bad or its GPU is not in the shim's table."""
    from ..launch.gpu_shim.identity import GPUS, gpu_for_description
    from ..topology.errors import TopologyError
    from ..topology.loader import load_spec

    try:
        spec = load_spec(topology)
    except TopologyError as exc:
        fail(f"--topology: {exc}")
    found = gpu_for_description(spec.node.gpu)
    if found is None:
        fail(f"--topology {topology}: its GPU {spec.node.gpu!r} is not one the shim knows "
             f"({', '.join(sorted(GPUS))}); give --gpu NAME instead")
    return found.key


def _choose_gpu(name: str | None, topology: str | None = None) -> None:
    """Check ``--gpu`` (else ``--topology``'s GPU, else ``SIMHARNESS_GPU``) against the
    shim's table and hand it to the ranks in ``SIMHARNESS_GPU``; an unknown name, or
    ``--gpu`` and ``--topology`` naming different GPUs, is one ``error:`` line."""
    from ..launch.gpu_shim.identity import ENV_GPU, UnknownGPU, gpu_spec

    given = name if name is not None else os.environ.get(ENV_GPU)
    try:
        spec = gpu_spec(given)
    except UnknownGPU as exc:
        where = "--gpu" if name is not None else f"the environment's {ENV_GPU}"
        fail(f"{where}: {exc}")
    if topology is not None:
        key = _topology_gpu(topology)
        if name is not None and spec.key != key:
            fail(f"--gpu {name} and --topology {topology} (GPU {key}) disagree; give one "
                 f"of them")
        spec = gpu_spec(key)
    os.environ[ENV_GPU] = spec.key


def _echo_verdict(v) -> None:
    color = {"passed": "green", "failed": "red", "hung": "red", "skipped": "yellow",
             "diverged": "red"}[v.outcome]
    head = f"{out.style(f'{v.label:<8}', fg=color, bold=True)} {v.duration:7.2f}s  {v.nodeid}"
    if v.outcome == "failed":
        head += f"  (first failing rank {v.first_rank}; failing ranks {_span(v.ranks)})"
    elif v.outcome == "hung":
        head += f"  (stuck ranks {_span(v.ranks)})"
    elif v.outcome == "diverged":
        head += f"  (the ranks did not all run it: ranks {_span(v.ranks)})"
    elif v.outcome == "skipped":
        head += f"  {v.detail.splitlines()[0] if v.detail else ''}"
    out.echo(head)
    if v.outcome in ("failed", "hung", "diverged") and v.detail:
        for line in v.detail.rstrip().splitlines():
            out.echo("    " + line)


def _span(ranks) -> str:
    from ..pytest_ranks.verdicts import _span as span

    return span(ranks)


def register(main: click.Group) -> None:
    main.add_command(run_cmd)


@click.command("run",
               short_help="Run distributed tests or scripts written for GPUs on CPU ranks.",
               context_settings={"allow_interspersed_args": False,
                                 "ignore_unknown_options": True})
@click.option("-n", "--world-size", "world", type=int, default=None, metavar="W",
              help="Ranks in all (default: --nproc-per-node x --nnodes).")
@click.option("--nproc-per-node", "nproc", type=int, default=None, metavar="K",
              help="Ranks on this node (default: W / --nnodes).")
@click.option("--nnodes", type=int, default=None, metavar="N",
              help="Nodes (agents); each runs this command with the same --rdzv-endpoint "
                   "and --run-id.")
@click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT",
              help="The c10d rendezvous (needed with --nnodes > 1; default: 127.0.0.1 "
                   "and a free port).")
@click.option("--run-id", default=None, help="Rendezvous id, the same on every node.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
              help="Seconds one test may take; past it the test is reported hung with the "
                   "stuck ranks' stacks and the rest of the file goes on.")
@click.option("--diverge-grace", "grace", type=click.FloatRange(min=0.1), default=5.0,
              show_default=True,
              help="Seconds ranks may stay in a test that another rank skipped or failed "
                   "before they are stopped: a skip that depends on the rank is reported "
                   "diverged, a failure that leaves them waiting is the verdict.")
@click.option("--collect-timeout", "collect_timeout", type=click.FloatRange(min=0.1),
              default=300.0, show_default=True,
              help="Seconds a rank may take to collect the tests (imports included); "
                   "past it the run ends naming the stuck ranks, with their stacks.")
@click.option("--junit-xml", "junit", type=click.Path(dir_okay=False), default=None,
              help="Write the verdicts as JUnit XML (also when interrupted).")
@click.option("--log-dir", default=None, type=click.Path(file_okay=False),
              help="Keep every rank's stdout/stderr under this directory.")
@click.option("--results-dir", default=None, type=click.Path(file_okay=False),
              help="Where ranks write their records (shared by all nodes when --nnodes "
                   "> 1; default: a temporary directory).")
@click.option("--mem-per-rank", type=click.IntRange(min=1), default=None, metavar="MIB",
              help="Memory estimate per rank in MiB (default: measured torch footprint "
                   "+ an allowance).")
@click.option("--no-shim", is_flag=True, default=False,
              help="Do not install the CPU GPU shim in the ranks.")
@click.option("--gpu", default=None, metavar="NAME",
              help="The GPU each rank's device reports to torch.cuda (name, compute "
                   "capability, SMs, memory): h100 (default), h100-pcie, h200, b200, a100, "
                   "a100-40gb, l40s, v100; also SIMHARNESS_GPU. See docs/gpu-shim.md.")
@click.option("--topology", default=None, metavar="NAME|FILE",
              help="Report the GPU of this cluster file (topologies/*.toml), as --gpu "
                   "does; with --gpu, both must name the same GPU.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run_cmd(world, nproc, nnodes, rdzv_endpoint, run_id, timeout, grace, collect_timeout, junit,
            log_dir, results_dir, mem_per_rank, no_shim, gpu, topology, command):
    """Start W ranks the way torchrun does (torch's elastic agent, c10d rendezvous on
    127.0.0.1), with a shim that answers the CUDA device calls per local rank and runs
    NCCL as gloo, and run a pytest file or a script on every rank.

    With pytest, every test runs on all ranks together and gets one verdict: passed
    only if it passed on every rank; failed with the first failing rank's traceback;
    skipped (a call that needs a real GPU is "skipped: needs GPU"); hung, with the
    stuck ranks' stacks, after which the rest of the file goes on; or diverged, when
    the ranks did not all run it (a rank-dependent skip; -x stopping one rank). The
    exit status is pytest's (0, 1, 2 interrupted, 5 no tests). With a script, each
    rank's output is prefixed [rankN]: and the status is the first failing rank's.

    \b
    Examples:
      simharness run -n 8 -- pytest tests/unit_tests/test_parallel_state.py
      simharness run -n 4 --junit-xml out.xml -- python -m pytest -q tests/test_x.py
      simharness run -n 4 -- python train.py --tp 2
      simharness run -n 8 --gpu b200 -- pytest tests/unit_tests/ssm
      simharness run -n 8 --nnodes 2 --rdzv-endpoint HOST:29500 --run-id job \\
          --results-dir /shared/run -- pytest tests/test_x.py      # on each node
    """
    nproc, nnodes = _sizes(world, nproc, nnodes)
    _choose_gpu(gpu, topology)
    refuse_option_as_command(command)
    kind, words = parse_command(command)
    if kind == "pytest":
        check_pytest_args(words)
    elif words[0] != "-m" and not os.path.isfile(words[0]):
        fail(f"script {words[0]!r} does not exist (cwd {os.getcwd()}).")
    if nnodes > 1 and not rdzv_endpoint:
        fail(f"--nnodes {nnodes} needs --rdzv-endpoint HOST:PORT (the same on every node).")
    from ..pytest_ranks.controller import cores, memory_plan

    plan = memory_plan(nproc, mem_per_rank)
    n_cores = cores()
    out.echo(f"simharness run: {nproc * nnodes} ranks ({nnodes} node(s) x {nproc}); this "
             f"node: {nproc} ranks on {n_cores} CPU cores ({nproc / n_cores:.1f} per core, "
             f"OMP_NUM_THREADS=1); {plan.describe()}", err=True)
    if not plan.fits:
        fail(f"{plan.describe()}: that does not fit in 90% of what is available; lower "
             f"-n/--nproc-per-node, or give --mem-per-rank if the estimate is wrong.")
    if kind == "script":
        sys.exit(_run_script(words, nproc, nnodes, rdzv_endpoint, run_id, log_dir,
                             not no_shim))
    sys.exit(_run_pytest(words, nproc, nnodes, rdzv_endpoint, run_id, timeout,
                         (grace, collect_timeout), junit, log_dir, results_dir,
                         not no_shim))


def _run_script(target, nproc, nnodes, rdzv_endpoint, run_id, log_dir, shim) -> int:
    from ..launch.launcher import LaunchSpec, launch

    res = launch(LaunchSpec(tuple(target), nproc, nnodes, rdzv_endpoint, run_id, shim,
                            log_dir))
    if res.signal is not None:
        out.echo(f"interrupted by signal {res.signal}; every rank was stopped", err=True)
    elif res.ok:
        out.echo(f"all {len(res.ranks)} ranks exited 0", err=True)
    else:  # name the rank that failed first (torch's agent order), not the lowest
        first = res.first_failure
        gpu = [r.rank for r in res.ranks if r.needs_gpu]
        others = [r.rank for r in res.ranks if r is not first and r.exitcode != 0]
        code = None if first is None else first.exitcode
        if first is None:
            out.echo(f"ranks {_span(others)} ended without an exit status", err=True)
        elif first.needs_gpu:
            out.echo(f"skipped: needs GPU (ranks {_span(gpu)} stopped on a call that needs a "
                     f"real GPU, rank {first.rank} first; see their error lines)", err=True)
        else:
            out.echo(f"rank {first.rank} "
                     + (f"was killed by signal {-code}" if code is not None and code < 0
                        else f"exited with status {code}")
                     + (" (the first to fail)" if others else "")
                     + (f"; ranks {_span(others)} were stopped or failed after it"
                        if others else ""), err=True)
    return res.exit_code


def _run_pytest(args, nproc, nnodes, rdzv_endpoint, run_id, timeout, limits, junit, log_dir,
                results_dir, shim) -> int:
    """``limits``: (--diverge-grace, --collect-timeout) seconds."""
    from ..pytest_ranks.controller import RunError, RunSpec, run_pytest
    from ..pytest_ranks.verdicts import counts, exit_code, junit_xml

    spec = RunSpec(tuple(args), nproc, nnodes, rdzv_endpoint, run_id, float(timeout), shim,
                   results_dir, log_dir, grace_s=float(limits[0]),
                   collect_timeout_s=float(limits[1]))
    seen = []
    t0 = time.monotonic()

    def on_verdict(v) -> None:
        seen.append(v)
        _echo_verdict(v)

    def on_round(number, judged) -> None:
        out.echo(f"simharness run: round {number + 1}: new ranks, after the {judged} tests "
                 f"judged so far", err=True)

    interrupted = None
    not_run = 0
    stopped_in: dict[str, tuple[int, ...]] = {}
    old_term = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # outside a launch (between rounds): stop like Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        report = run_pytest(spec, on_verdict, on_round)
        interrupted = report.interrupted
        rounds, peaks, not_run = report.rounds, report.peak_rss_kib, report.not_run
        stopped_in = report.stopped_in
        if report.shim_ignored:
            out.echo("simharness shim (rank 0): ignored GPU-only options, not run on CPU: "
                     + "; ".join(report.shim_ignored), err=True)
    except KeyboardInterrupt:
        interrupted, rounds, peaks = signal.SIGINT, 0, {}
    except RunError as exc:
        if getattr(exc, "stacks", None):
            out.echo(exc.stacks, err=True)  # type: ignore[attr-defined]
        if junit:  # CI reads the file: nothing judged is an empty suite that says why
            no_tests = getattr(exc, "code", None) == 5
            with open(junit, "w", encoding="utf-8") as fh:
                fh.write(junit_xml(seen, wall_s=time.monotonic() - t0, world=nproc * nnodes,
                                   reason=str(exc) if no_tests else None,
                                   error=None if no_tests else str(exc)))
        if getattr(exc, "code", None) == 5:
            click.echo(f"error: {exc}", err=True)
            return 5
        raise
    finally:
        signal.signal(signal.SIGTERM, old_term)
    wall = time.monotonic() - t0
    c = counts(seen)
    parts = [f"{c['passed']} passed", f"{c['failed']} failed",
             f"{c['skipped']} skipped" + (f" ({c['needs_gpu']} need a GPU)"
                                          if c["needs_gpu"] else ""),
             f"{c['hung']} hung"]
    if c["diverged"] or not_run:
        parts.append(f"{c['diverged']} diverged" + (f" ({not_run} tests after it not run, as "
                                                    f"with -x)" if not_run else ""))
    peak = ""
    if peaks:
        worst = max(peaks, key=lambda r: peaks[r])
        peak = f"; peak RSS per rank {peaks[worst] // 1024} MiB (max, rank {worst})"
    out.echo(out.style(f"== {', '.join(parts)} in {wall:.1f}s on {nproc * nnodes} ranks "
                       f"({rounds} round(s)){peak} ==", bold=True))
    if junit:
        with open(junit, "w", encoding="utf-8") as fh:
            fh.write(junit_xml(seen, wall_s=wall, world=nproc * nnodes))
    if interrupted is not None:
        during = "".join(f" inside {n} (ranks {_span(r)}; no verdict for it)"
                         for n, r in stopped_in.items())
        out.echo(f"interrupted by signal {int(interrupted)}{during}; the results so far are "
                 f"above" + (f" and in {junit}" if junit else ""), err=True)
    return exit_code(seen, interrupted=interrupted is not None)
