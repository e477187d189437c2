"""``simharness capture``: run the user's own initialisation script for every rank, on CPU.

Nothing here imports torch at start-up; :mod:`simharness.capture.inprocess` does
when the command runs.
"""

from __future__ import annotations

import click

from . import output as out
from .common import (
    config_fields_from_options,
    config_flags_given,
    config_options,
    fail,
)

DEFAULT_OUT = "simharness-capture.json"
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
        from ..replay.megatron_engine import installed_version, profile_for_version

        ver = installed_version()
        if ver is not None:
            mcore = profile_for_version(ver)
    return build_layout(ParallelismConfig.from_dict(fields), mcore)


def register(main):
    @main.command(short_help="Run your own init script for every rank (fake backend) and check "
                             "its groups.",
                  context_settings={"allow_interspersed_args": False,
                                    "ignore_unknown_options": True})
    @config_options
    @click.option("--ranks", "rank_spec", default="all", show_default=True, metavar="SPEC",
                  help="Ranks to run: all, or e.g. 0-7,12.")
    @click.option("--timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
                  help="Seconds one rank may run; a rank that takes longer is stopped and "
                       "the place it was in is named.")
    @click.option("--out", "out_path", default=DEFAULT_OUT, show_default=True,
                  type=click.Path(dir_okay=False), help="Where the capture (JSON) is written, "
                                                        "also when a rank fails.")
    @click.option("--getter", "getters", multiple=True, metavar="MODULE:NAME(ARGS)",
                  help="A collective-free getter to read on every rank after the script, e.g. "
                       "megatron.core.parallel_state:get_data_parallel_group(with_context_"
                       "parallel=True). Repeatable; __main__:NAME reads the script's globals.")
    @click.option("--twin", "twin_specs", multiple=True, metavar="A=B",
                  help="Two group_desc that must hold the same ranks in the same order on "
                       "every rank (the all-gather/DP-with-CP and fsdp_reduce_scatter/"
                       "mesh_shard pairs are built in). Repeatable.")
    @click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
                  help="Worker processes (default: one per CPU core).")
    @click.option("--isolate", is_flag=True, default=False,
                  help="Run every rank in its own forked process (slower; for code that keeps "
                       "state outside module globals).")
    @click.option("--format", "-f", "fmt", type=click.Choice(("table", "json")),
                  default="table", show_default=True)
    @click.option("--strict", is_flag=True, default=False, help="Exit 1 on warnings too.")
    @click.argument("command", nargs=-1, type=click.UNPROCESSED)
    @click.pass_context
    def capture(ctx, rank_spec, timeout, out_path, getters, twin_specs, jobs, isolate, fmt,
                strict, command, **kwargs):
        """Run your own initialisation script once per rank under torch's fake backend
        (no GPU, no NCCL), record every new_group call (ranks, group_desc, backend,
        options, use_local_synchronization, call site) and check them: the same
        creation order on every rank, groups of one kind partitioning the world,
        twin groups lining up, and, with configuration flags or --config, the
        groups build_layout(config) predicts.

        The script must call torch.distributed.init_process_group (any backend); it
        reads RANK/WORLD_SIZE/LOCAL_RANK like under torchrun. Exit status: 0 clean,
        1 on an error finding, 2 when the script fails on a rank or on bad input
        (the capture is still written to --out).

        \b
        Examples:
          simharness capture -n 16 -- python examples/capture/megatron_init.py --tp 2 --pp 2 --cp 2
          simharness capture -n 16 --tp 2 --cp 2 --create-all-gather-group --mcore 0.16 \\
              -- python examples/capture/nemo_style_init.py --tp 2 --cp 2 --create-all-gather-group
          simharness capture -n 8 -- python examples/capture/fsdp2_init.py --shard 4
          simharness capture -n 8 -- python examples/capture/divergent_groups.py
        """
        from ..capture import GetterSpec, check_capture, parse_rank_spec
        from ..capture.inprocess import failure_message, program_from_command, run_program

        fields, _ = config_fields_from_options(**kwargs)
        world = fields.get("world_size")
        if world is None:
            fail("give the world size: -n WORLD (or --nodes/--gpus-per-node, or --config).")
        layout = _layout(kwargs)
        ranks = parse_rank_spec(rank_spec, world)
        twins = _twins(twin_specs)
        specs = [GetterSpec.parse(g) for g in getters]
        program = program_from_command(command)

        def progress(done, total, elapsed):
            out.echo(f"capture: {done}/{total} ranks, {elapsed:.0f} s", err=True)

        cap = run_program(program, world, ranks=ranks, timeout=timeout, getters=specs,
                          jobs=jobs, isolate=isolate,
                          gpus_per_node=kwargs.get("gpus_per_node") or 8, progress=progress)
        with open(out_path, "w", encoding="utf-8") as fh:
            fh.write(cap.to_json(indent=1))
        problem = failure_message(cap, out_path)
        if problem:
            fail(problem)
        findings = check_capture(cap, layout, twins=twins)
        code = out.findings_exit_code(findings, strict)
        if fmt == "json":
            out.echo_json({"capture": out_path, "meta": dict(cap.meta),
                           "config": None if layout is None else layout.summary(),
                           "findings": [f.to_dict() for f in findings], "exit": code})
        else:
            meta = cap.meta
            out.echo(out.heading(f"captured {len(cap.ok_ranks)} of {world} ranks of "
                                 f"`{meta['command']}` in {meta['elapsed_s']:.1f} s "
                                 f"({meta['workers']} workers) -> {out_path}"))
            if layout is not None:
                out.echo(f"compared with build_layout(config), mcore {layout.mcore}")
            out.echo_findings(findings, strict=strict)
            out.echo(out.findings_verdict(findings, strict))
        ctx.exit(code)
