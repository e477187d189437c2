"""``simharness replay``: replay a layout on real processes (torch.distributed).

The torchrun entry point (``python -m simharness.replay.worker --plan FILE``)
lives in the replay package and does not use this module. Nothing here imports
torch: the replay package starts it in the ranks.
"""

from __future__ import annotations

import click

from ..layout import Layout
from ..planfile import read_plan, write_plan
from . import output as out
from .common import (
    CONFIG_PARAMS,
    config_from_options,
    config_options,
    fail,
    output_options,
)

DEFAULT_PLAN_OUT = "simharness-plan.json"


class ByteSize(click.ParamType):
    """A byte count: 1048576, 512K, 4M, 4MiB, 1G."""

    name = "bytes"

    def convert(self, value, param, ctx):
        from ..replay.options import ReplayError, parse_bytes

        try:
            return parse_bytes(value)
        except ReplayError as exc:
            self.fail(str(exc), param, ctx)


def _config_given(kwargs) -> list[str]:
    given = []
    for name in CONFIG_PARAMS:
        v = kwargs.get(name)
        if v not in (None, (), []):
            given.append(name)
    return given


def _read_plan(path: str) -> Layout:
    return read_plan(path, f"export a plan with `simharness export ... --out {path}`")


def layout_for_replay(plan_path: str | None, engine: str, kwargs: dict) -> tuple[Layout, str]:
    """The layout to replay and a note (or ""): ``--plan`` or the configuration flags.

    In Megatron mode without ``--mcore``, the profile of the installed
    megatron-core is used (a plan or an explicit ``--mcore`` must match it).
    """
    from ..layout import build_layout

    given = [n for n in _config_given(kwargs)]
    if plan_path:
        if given:
            flags = ", ".join("--" + n.replace("_", "-") for n in sorted(given))
            fail(f"--plan {plan_path} replays exactly that plan; drop the configuration flags "
                 f"({flags}) or drop --plan.")
        return _read_plan(plan_path), ""
    note = ""
    if engine == "megatron" and kwargs.get("mcore") is None:
        from ..mcore import installed_version, profile_for_version

        ver = installed_version()
        if ver is not None:
            kwargs = {**kwargs, "mcore": profile_for_version(ver)}
            note = (f"note: --engine megatron uses profile {kwargs['mcore']} of the installed "
                    f"megatron-core {ver}")
    cfg, mcore = config_from_options(**kwargs)
    return build_layout(cfg, mcore), note


def _replay_options(f):
    f = click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None,
                     help="Write the JSON report to FILE.")(f)
    f = click.option("--iters", type=click.IntRange(min=0), default=10, show_default=True,
                     help="Timed iterations of the overlap probe (0: no probe).")(f)
    f = click.option("--overlap-bytes", type=ByteSize(), default="4M", show_default=True,
                     help="Bytes of the probe's reduce-scatter input / all-gather output "
                          "(e.g. 4M; 0: no probe).")(f)
    f = click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
                     show_default=True,
                     help="Seconds a collective or group creation may take before the replay "
                          "fails naming the group and the ranks that did not arrive.")(f)
    f = click.option("--engine", type=click.Choice(("plan", "megatron")), default="plan",
                     show_default=True,
                     help="plan: create the plan's groups with new_group; megatron: run the "
                          "installed megatron-core's initialize_model_parallel and compare.")(f)
    f = click.option("--plan", "plan_path", type=click.Path(dir_okay=False), default=None,
                     help="Replay this exported plan (simharness export --out FILE) instead "
                          "of building one from the configuration flags.")(f)
    return f


def register(main: click.Group) -> None:
    main.add_command(replay_cmd)


@click.command("replay")
@config_options
@_replay_options
@click.option("--backend", type=click.Choice(("gloo", "nccl")), default=None,
              help="gloo: CPU processes (NCCL groups are created as gloo); nccl: one GPU per "
                   "rank. Default gloo (nccl for --print-torchrun).")
@click.option("--force", is_flag=True, default=False,
              help="Start more local gloo ranks than this machine comfortably hosts.")
@click.option("--print-torchrun", is_flag=True, default=False,
              help="Print the torchrun command that replays the plan on a cluster, and exit.")
@click.option("--nnodes", type=click.IntRange(min=1), default=None,
              help="Nodes for --print-torchrun (default: --nodes, else 1).")
@click.option("--save-plan", "save_plan", type=click.Path(dir_okay=False), default=None,
              help="Write the replayed plan to FILE (for --print-torchrun: the plan the "
                   "command reads; default " + DEFAULT_PLAN_OUT + ").")
@click.option("--inject-fault", "fault", default=None, hidden=True,
              help="Testing: RANK:exit|hang|raise@init|create|verify|probe|gather.")
@click.option("--deadline", type=float, default=None, hidden=True,
              help="Testing: kill the whole replay after this many seconds.")
@output_options(formats=("table", "json"), show_all=False)
@click.pass_context
def replay_cmd(ctx, plan_path, engine, timeout, overlap_bytes, iters, report_path, backend,
               force, print_torchrun, nnodes, save_plan, fault, deadline, fmt, quiet,
               **kwargs):
    """Replay the layout on real processes through torch.distributed and verify it.

    Starts world-size processes on this machine (gloo on CPU by default,
    --backend nccl with one GPU per rank), creates every group of the plan
    with new_group in Megatron's creation order (--engine megatron: runs the
    installed megatron-core's initialize_model_parallel instead), and checks
    each group with torch (ranks, group rank, one all_gather), the all-gather
    groups, and the plan against what its config builds. Then times a
    reduce-scatter and an all-gather issued together, on one group and on
    separate groups (--overlap-bytes, --iters).

    Exit status: 0 everything matched, 1 mismatches, 2 bad input (nothing
    started), 3 the replay failed (a rank died, a collective timed out), 130
    interrupted.

    \b
    Examples:
      simharness replay -n 8 --tp 2 --pp 2 --cp 2 --create-all-gather-group --mcore 0.16
      simharness replay --plan plan.json --report replay.json
      simharness replay -n 8 --tp 2 --cp 2 --engine megatron
      simharness replay --nodes 4 --tp 8 --print-torchrun --nnodes 4
    """
    from ..replay import ReplayOptions, replay, summary_lines

    layout, note = layout_for_replay(plan_path, engine, kwargs)
    if print_torchrun:
        _print_torchrun(layout, plan_path or save_plan or DEFAULT_PLAN_OUT,
                        write=not plan_path, quiet=quiet,
                        nnodes=nnodes or kwargs.get("nodes") or 1, backend=backend or "nccl",
                        engine=engine, timeout=timeout, overlap_bytes=overlap_bytes,
                        iters=iters, report_path=report_path or "replay-report.json")
        return
    out.check_writable(report_path, "--report")  # before any rank starts
    if save_plan:
        write_plan(layout, save_plan)
    opts = ReplayOptions(backend=backend or "gloo", engine=engine, timeout=timeout,
                         overlap_bytes=overlap_bytes, iters=iters, force=force, fault=fault)
    if note and not quiet and fmt == "table":
        out.echo(out.dim(note), err=True)
    report = replay(layout, opts, report_path=report_path, deadline=deadline)
    if fmt == "json":
        out.echo_json(report)
    elif not quiet:
        for line in summary_lines(report):
            if line.startswith("result:"):
                line = out.style(line, fg="green" if report["ok"] else "red", bold=True)
            out.echo(line)
    ctx.exit(report["exit_code"])


def _print_torchrun(layout: Layout, path: str, *, write: bool, quiet: bool, nnodes: int,
                    backend: str, engine: str, timeout: float, overlap_bytes: int, iters: int,
                    report_path: str) -> None:
    """``--print-torchrun``: the torchrun command that replays the plan at ``path`` on a
    cluster (the plan written there first when ``write``)."""
    from ..replay import ReplayOptions, torchrun_command

    if write:
        write_plan(layout, path)
        if not quiet:
            out.echo(f"wrote the plan to {path}; copy it to every node", err=True)
    ReplayOptions(backend=backend, engine=engine, timeout=timeout,
                  overlap_bytes=overlap_bytes, iters=iters).validate()
    out.echo(torchrun_command(path, world_size=layout.world_size, nnodes=nnodes,
                              backend=backend, engine=engine, timeout=timeout,
                              overlap_bytes=overlap_bytes, iters=iters, report_path=report_path))
