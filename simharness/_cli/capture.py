"""``simharness capture``: run the user's own initialisation script for every rank, on CPU.

Nothing here imports torch at start-up; :mod:`simharness.capture.inprocess` does
when the command runs.
"""

from __future__ import annotations

import click

from . import output as out
from .common import (
    EXIT_RUNTIME,
    config_fields_from_options,
    config_flags_given,
    config_options,
    fail,
    refuse_option_as_command,
)

DEFAULT_OUT = "simharness-capture.json"
FAST_CANNOT_SEE = ("--fast ran the ranks in forked workers of one interpreter under the fake "
                   "backend: it cannot see string-hash order differing between ranks, code "
                   "that reads the environment outside the script's own modules at import "
                   "time, real collective results (all_gather_object, all_reduce return "
                   "made-up data) or GPU calls (refused).")
# Flags that only size the world; any other configuration flag asks for the comparison.
_WORLD_ONLY = {"world_size", "nodes", "gpus_per_node", "mcore"}


def _twins(values) -> list[tuple[str, str]]:
    twins = []
    for v in values:
        a, sep, b = str(v).partition("=")
        if not sep or not a.strip() or not b.strip():
            fail(f"--twin {v!r}: write GROUP_DESC_A=GROUP_DESC_B, e.g. "
                 f"--twin fsdp_reduce_scatter=mesh_dp_shard.")
        twins.append((a.strip(), b.strip()))
    return twins


def _layout(kwargs: dict):
    """``build_layout`` of the configuration flags, or None when only the world was given.
    Without ``--mcore``, the installed megatron-core's profile."""
    if not set(config_flags_given(**kwargs)) - _WORLD_ONLY:
        return None
    from ..config import ParallelismConfig
    from ..layout import build_layout

    fields, mcore = config_fields_from_options(**kwargs)
    if kwargs.get("mcore") is None:
        from ..mcore import installed_version, profile_for_version

        ver = installed_version()
        if ver is not None:
            mcore = profile_for_version(ver)
    return build_layout(ParallelismConfig.from_dict(fields), mcore)


def _check_out_path(path: str) -> None:
    """Fail before any rank runs when the capture could not be written to ``path``."""
    import os

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        fail(f"--out {path}: is a directory; give a file name, e.g. {path}/capture.json.")
    if not os.path.isdir(folder):
        fail(f"--out {path}: the folder {folder} does not exist; create it or pick another "
             f"path.")
    existed = os.path.exists(path)
    try:  # a real open, not os.access: root passes access() on /proc, whose files refuse
        with open(path, "a" if existed else "x", encoding="utf-8"):
            pass
        if not existed:
            os.remove(path)
    except OSError as exc:
        fail(f"--out {path}: not writable ({exc.strerror or exc}); pick a path you can write "
             f"(checked before running the ranks).")


def _check_getter_modules(specs, target) -> None:
    """A getter whose module cannot be found anywhere the ranks look is bad input."""
    import importlib.util
    import os
    import sys

    extra = [os.path.dirname(os.path.abspath(target.path))] if target and target.path else []
    sys.path[:0] = extra
    try:
        for spec in specs:
            if spec.module == "__main__":
                continue
            try:
                found = importlib.util.find_spec(spec.module)
            except (ImportError, ValueError):
                found = None
            if found is None:
                fail(f"--getter {spec.text!r}: no module {spec.module!r} on the ranks' Python "
                     f"path; check the name (MODULE:NAME, e.g. megatron.core.parallel_state:"
                     f"get_data_parallel_group).")
    finally:
        del sys.path[:len(extra)]


def _getter_failures(cap) -> str | None:
    """A getter that raised on every captured rank: its text and the error, else None."""
    ok = cap.ok_ranks
    if not ok:
        return None
    first = cap.records[ok[0]].getters
    for text, value in first.items():
        if not (isinstance(value, dict) and "raises" in value):
            continue
        if all(isinstance(cap.records[r].getters.get(text), dict)
               and "raises" in cap.records[r].getters[text] for r in ok):
            return f"--getter {text!r} raised on every rank: {value['raises']}"
    return None


def register(main: click.Group) -> None:
    main.add_command(capture_cmd)


@click.command("capture",
               short_help="Run your own init script as a torchrun job on CPU (one process "
                          "per rank) and check its groups.",
               context_settings={"allow_interspersed_args": False,
                                 "ignore_unknown_options": True})
@config_options
@click.option("--fast", is_flag=True, default=False,
              help="Run the ranks in forked workers of one interpreter under the fake "
                   "backend (big worlds). It cannot see per-process behaviour (hash seeds, "
                   "environment read at import time) or real collective results.")
@click.option("--crosscheck/--no-crosscheck", default=True, show_default=True,
              help="With --fast: also run rank 0, a middle rank and the last alone, each "
                   "in its own interpreter, and compare their calls with the fast ones "
                   "(catches hash-order and import-time differences).")
@click.option("--ranks", "rank_spec", default="all", show_default=True, metavar="SPEC",
              help="With --fast: ranks to run, all or e.g. 0-7,12.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
              help="Seconds one rank may run; a rank that takes longer is stopped and "
                   "the place it was in is named.")
@click.option("--grace", type=click.FloatRange(min=0.0), default=5.0, show_default=True,
              help="Seconds a rank may run on once every other rank has finished before "
                   "it is named as stuck, with its stack.")
@click.option("--out", "out_path", default=DEFAULT_OUT, show_default=True,
              type=click.Path(dir_okay=False), help="Where the capture (JSON) is written, "
                                                    "also when a rank fails.")
@click.option("--log-dir", type=click.Path(file_okay=False), default=None,
              help="Write each rank's output to files under this folder instead of "
                   "stderr (prefixed [rankN]:).")
@click.option("--merge", "merge_dir", type=click.Path(file_okay=False), default=None,
              help="Check the rank records (rank-NNNNN.json) that `python -m "
                   "simharness.capture.rank --out-dir DIR` wrote under torchrun/srun; "
                   "no command.")
@click.option("--getter", "getters", multiple=True, metavar="MODULE:NAME(ARGS)",
              help="A collective-free getter to read on every rank after the script, e.g. "
                   "megatron.core.parallel_state:get_data_parallel_group(with_context_"
                   "parallel=True). Repeatable; __main__:NAME reads the script's globals.")
@click.option("--twin", "twin_specs", multiple=True, metavar="A=B",
              help="Two group_desc that must hold the same ranks in the same order on "
                   "every rank (the all-gather/DP-with-CP and fsdp_reduce_scatter/"
                   "mesh_shard pairs are built in). Repeatable.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="With --fast: worker processes (default: one per CPU core).")
@click.option("--isolate", is_flag=True, default=False,
              help="With --fast: run every rank in its own forked process.")
@click.option("--format", "-f", "fmt", type=click.Choice(("table", "json")),
              default="table", show_default=True)
@click.option("--strict", is_flag=True, default=False, help="Exit 1 on warnings too.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def capture_cmd(ctx, fast, crosscheck, rank_spec, timeout, grace, out_path, log_dir, merge_dir,
                getters, twin_specs, jobs, isolate, fmt, strict, command, **kwargs):
    """Run your own initialisation script as a torchrun job would, on CPU: every rank
    its own Python process with torchrun's environment and its own hash seed, a real
    gloo default group on loopback (collectives return real data), GPU calls
    (torch.cuda.set_device, NCCL, device_id=, a "cuda" DeviceMesh, split_group)
    answered by a CPU shim. Every new_group/split_group call is recorded (ranks,
    group_desc, backend, options, use_local_synchronization, call site) and checked:
    the same creation order on every rank, groups of one kind partitioning the world,
    twin groups lining up, and, with configuration flags or --config, the groups
    build_layout(config) predicts.

    The script must call torch.distributed.init_process_group (any backend; ending
    with destroy_process_group, os._exit or atexit handlers is fine). The script's
    output goes to stderr, each line prefixed [rankN]: (or to --log-dir). Ranks that
    wait for each other in a collective while their new_group calls differ are stopped
    --grace seconds after every running rank is blocked, and the divergence is named.
    Exit status: 0 clean; 1 on an error finding (a divergence included); 2 on bad
    input, refused before any rank starts; 3 when the script fails, hangs or needs a
    real GPU on a rank (the partial capture is still written to --out); 128+N when
    interrupted by signal N (the partial capture is written).

    \b
    Examples:
      simharness capture -n 16 -- python examples/capture/megatron_init.py --tp 2 --pp 2 --cp 2
      simharness capture -n 16 --tp 2 --cp 2 --create-all-gather-group --mcore 0.16 \\
          -- python examples/capture/nemo_style_init.py --tp 2 --cp 2 --create-all-gather-group
      simharness capture -n 8 -- python examples/capture/fsdp2_init.py --shard 4
      simharness capture -n 1024 --fast -- python examples/capture/megatron_init.py --tp 8
      torchrun --nnodes 2 --nproc-per-node 8 ... -m simharness.capture.rank \\
          --out-dir /shared/cap -- init.py
      simharness capture --merge /shared/cap
    """
    from ..capture import GetterSpec, check_capture

    _check_out_path(out_path)
    twins = _twins(twin_specs)
    specs = [GetterSpec.parse(g) for g in getters]
    layout = _layout(kwargs) if (merge_dir is None or
                                 set(config_flags_given(**kwargs)) - _WORLD_ONLY) else None
    if merge_dir is not None:
        cap, world = _merged(merge_dir, command)
    else:
        cap, world = _run_ranks(command, specs, kwargs, fast=fast, crosscheck=crosscheck,
                                rank_spec=rank_spec, timeout=timeout, grace=grace,
                                log_dir=log_dir, jobs=jobs, isolate=isolate)
    with open(out_path, "w", encoding="utf-8") as fh:
        fh.write(cap.to_json(indent=1))
    _exit_when_a_rank_failed(ctx, cap, world, out_path)
    findings = check_capture(cap, layout, twins=twins)
    code = out.findings_exit_code(findings, strict)
    if fmt == "json":
        out.echo_json({"capture": out_path, "meta": dict(cap.meta),
                       "config": None if layout is None else layout.summary(),
                       "findings": [f.to_dict() for f in findings], "exit": code})
    else:
        _echo_capture(cap, layout, findings, world, out_path, strict)
    ctx.exit(code)


def _merged(merge_dir: str, command: tuple[str, ...]):
    """``--merge DIR``: the capture of the rank records under ``merge_dir``, and its world."""
    if command:
        fail("--merge DIR checks records already written: give no command after it.")
    from ..capture.merge import merge_records

    cap = merge_records(merge_dir, complete=True, meta={"command": f"merge {merge_dir}",
                                                       "mode": "merged", "elapsed_s": 0.0})
    return cap, cap.world_size


def _run_ranks(command: tuple[str, ...], specs, kwargs: dict, *, fast: bool, crosscheck: bool,
               rank_spec: str, timeout: float, grace: float, log_dir: str | None,
               jobs: int | None, isolate: bool):
    """Run ``command`` on every rank (``--fast``: in forked workers): the capture and the
    world size."""
    from ..capture import parse_rank_spec
    from ..capture.command import parse_command

    fields, _ = config_fields_from_options(**kwargs)
    world = fields.get("world_size")
    if world is None:
        fail("give the world size: -n WORLD (or --nodes/--gpus-per-node, or --config).")
    refuse_option_as_command(command)
    target = parse_command(command)
    _check_getter_modules(specs, target)
    if fast:
        cap = _fast_capture(command, target, world, parse_rank_spec(rank_spec, world),
                            timeout=timeout, getters=specs, jobs=jobs, isolate=isolate,
                            gpus_per_node=kwargs.get("gpus_per_node") or 8,
                            crosscheck=crosscheck, echo=lambda m: out.echo(m, err=True))
        return cap, world
    if rank_spec.strip().lower() not in ("", "all"):
        fail(f"--ranks {rank_spec}: a faithful capture runs every rank (they talk "
             f"to each other); add --fast to run a subset.")
    if jobs is not None or isolate:
        fail("--jobs/--isolate size the --fast mode's workers; add --fast, or "
             "drop them (a faithful capture runs one process per rank).")
    from ..capture.faithful import run_faithful

    cap = run_faithful(target, world, timeout=timeout, grace=grace, getters=specs,
                       log_dir=log_dir, progress=lambda m: out.echo(m, err=True))
    return cap, world


def _exit_when_a_rank_failed(ctx: click.Context, cap, world: int, out_path: str) -> None:
    """Stop with one ``error:`` line when the ranks were interrupted (128 + the signal) or
    one failed (a runtime failure, not bad input: exit 3); the capture is already written."""
    from ..capture.inprocess import failure_message

    sig = cap.meta.get("signal")
    if sig:
        import signal as signals

        why = (f"stopped after {cap.meta['stopped_after_s']} s: a rank outlived --timeout "
               f"and its own watchdog" if cap.meta.get("stopped_after_s") is not None
               else f"interrupted by {sig}")
        out.echo(f"error: {why}; {len(cap.ok_ranks)} of {world} ranks had finished; the "
                 f"partial capture is in {out_path}", err=True)
        ctx.exit(128 + int(getattr(signals.Signals, sig)))
    problem = failure_message(cap, out_path) or _getter_failures(cap)
    if problem:
        out.echo(f"error: {problem}", err=True)
        ctx.exit(EXIT_RUNTIME)


def _echo_capture(cap, layout, findings, world: int, out_path: str, strict: bool) -> None:
    """The table report: what ran, how, where the capture went, and the findings."""
    meta = cap.meta
    mode = meta.get("mode", "fast")
    how = (f"{meta.get('workers')} workers, --fast" if mode == "fast"
           else f"one process per rank, {mode}")
    peak = meta.get("peak_rss_kb_sum")
    mem = f", peak memory {peak / 1024:.0f} MB (sum over ranks)" if peak else ""
    out.echo(out.heading(f"captured {len(cap.ok_ranks)} of {world} ranks of "
                         f"`{meta['command']}` in {meta['elapsed_s']:.1f} s "
                         f"({how}{mem}) -> {out_path}"))
    if mode == "fast":
        out.echo(out.wrap(FAST_CANNOT_SEE + (
            " Cross-checked alone: ranks "
            f"{', '.join(str(c['rank']) for c in meta['crosscheck'])}."
            if meta.get("crosscheck") else "")))
    if layout is not None:
        out.echo(f"compared with build_layout(config), mcore {layout.mcore}")
    out.echo_findings(findings, strict=strict)
    out.echo(out.findings_verdict(findings, strict))


def _fast_capture(command, target, world, ranks, *, timeout, getters, jobs, isolate,
                  gpus_per_node, crosscheck, echo):
    """``--fast``: the ranks in forked workers, and (``crosscheck``) rank 0, a middle one and
    the last alone in fresh interpreters, started first so that their imports overlap the
    capture's own (which run on one core)."""
    from ..capture.crosscheck import crosscheck_ranks, start_crosscheck
    from ..capture.inprocess import program_from_command, run_program

    alone = [r for r in crosscheck_ranks(world) if r in ranks] if crosscheck else []
    checking = (start_crosscheck(world, target.argv, ranks=alone, gpus_per_node=gpus_per_node)
                if alone else None)
    try:
        program = program_from_command(command)

        def progress(done, total, elapsed):
            echo(f"capture: {done}/{total} ranks, {elapsed:.0f} s")

        cap = run_program(program, world, ranks=ranks, timeout=timeout, getters=getters,
                          jobs=jobs, isolate=isolate, gpus_per_node=gpus_per_node,
                          progress=progress)
    except BaseException:
        if checking is not None:
            checking.cancel()
        raise
    if checking is None:
        return cap
    if cap.meta.get("signal") or cap.failed:
        checking.cancel()
        return cap
    echo(f"capture: cross-checking ranks {alone} alone, each in its own interpreter "
         f"(started with the capture)")
    return checking.finish(cap)
