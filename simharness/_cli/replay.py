"""``simharness replay``: replay a layout on real processes (torch.distributed).

Also the click command behind ``python -m simharness.replay.worker`` (the
torchrun entry point), so both take the same flags. Nothing here imports
torch: the replay package starts it in the ranks.
"""

from __future__ import annotations

import re
import sys

import click

from ..errors import SimharnessError
from ..layout import Layout
from . import output as out
from .common import (
    CONFIG_PARAMS, config_from_options, config_options, fail, output_options, read_plan,
)

DEFAULT_PLAN_OUT = "simharness-plan.json"
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.IGNORECASE)


class ByteSize(click.ParamType):
    """A byte count: 1048576, 512K, 4M, 4MiB, 1G."""

    name = "bytes"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            m = _SIZE.match(str(value))
            if not m:
                self.fail(f"{value!r} is not a byte count; write e.g. 4M, 512K or 1048576.",
                          param, ctx)
            unit = (m.group(2) or "b").lower()[0]
            n = int(m.group(1)) * {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]
        if n < 0:
            self.fail("the byte count must be >= 0.", param, ctx)
        return n


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
        from ..replay.megatron_engine import installed_version, profile_for_version

        ver = installed_version()
        if ver is not None:
            kwargs = {**kwargs, "mcore": profile_for_version(ver)}
            note = (f"note: --engine megatron uses profile {kwargs['mcore']} of the installed "
                    f"megatron-core {ver}")
    cfg, mcore = config_from_options(**kwargs)
    return build_layout(cfg, mcore), note


def _save_plan(layout: Layout, path: str) -> None:
    try:
        from .layout import _export_json_text as export_text
    except ImportError:  # pragma: no cover - layout commands always ship
        import json

        def export_text(lay):
            return json.dumps(lay.to_dict(), indent=2) + "\n"
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(export_text(layout))
    except OSError as exc:
        fail(f"{path}: cannot write the plan: {exc.strerror or exc}.")


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
    from ..replay import ReplayOptions, replay, summary_lines, torchrun_command

    layout, note = layout_for_replay(plan_path, engine, kwargs)
    if print_torchrun:
        nnodes = nnodes or kwargs.get("nodes") or 1
        path = plan_path or save_plan or DEFAULT_PLAN_OUT
        if not plan_path:
            _save_plan(layout, path)
            if not quiet:
                out.echo(f"wrote the plan to {path}; copy it to every node", err=True)
        ReplayOptions(backend=backend or "nccl", engine=engine, timeout=timeout,
                      overlap_bytes=overlap_bytes, iters=iters).validate()
        out.echo(torchrun_command(path, world_size=layout.world_size, nnodes=nnodes,
                                  backend=backend or "nccl", engine=engine, timeout=timeout,
                                  overlap_bytes=overlap_bytes, iters=iters,
                                  report_path=report_path or "replay-report.json"))
        return
    if save_plan:
        _save_plan(layout, save_plan)
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


# ----------------------------------------------------------- torchrun worker
@click.command("simharness.replay.worker",
               context_settings={"help_option_names": ["-h", "--help"]})
@config_options
@_replay_options
@click.option("--backend", type=click.Choice(("gloo", "nccl")), default=None,
              help="Default: nccl when this rank has a GPU, else gloo.")
@click.option("--quiet", "-q", is_flag=True, default=False, help="No summary on rank 0.")
@click.pass_context
def worker_cmd(ctx, plan_path, engine, timeout, overlap_bytes, iters, report_path, backend,
               quiet, **kwargs):
    """One replay rank under torchrun (reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT).

    \b
    Example:
      torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
          --rdzv-endpoint $MASTER_ADDR:29500 -m simharness.replay.worker --plan plan.json
    """
    from ..replay import ReplayOptions
    from ..replay.worker import torchrun_env, torchrun_main

    torchrun_env()  # a clear error outside torchrun, before anything else
    layout, _ = layout_for_replay(plan_path, engine, kwargs)
    if backend is None:
        import torch

        backend = "nccl" if torch.cuda.is_available() else "gloo"
    opts = ReplayOptions(backend=backend, engine=engine, timeout=timeout,
                         overlap_bytes=overlap_bytes, iters=iters)
    ctx.exit(torchrun_main(layout, opts, report_path=report_path, quiet=quiet,
                           echo=click.echo))


def worker_main(args=None) -> None:
    """``python -m simharness.replay.worker``: bad input is one ``error:`` line, exit 2."""
    try:
        rv = worker_cmd.main(args, prog_name="python -m simharness.replay.worker",
                             standalone_mode=False)
    except click.ClickException as exc:
        click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
        sys.exit(2)
    except SimharnessError as exc:
        click.echo(f"error: {' '.join(str(exc).split())}", err=True)
        sys.exit(2)
    except (click.Abort, KeyboardInterrupt):
        click.echo("error: aborted", err=True)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
