"""``simharness replay-data``: the optimizer's data path on real processes, checked by data.

Nothing here imports torch: :func:`simharness.replay.datapath.replay_data`
starts it in the ranks.
"""

from __future__ import annotations

import click

from . import output as out
from .options import config_options, dp_impl_from_options, output_options
from .replay import layout_for_replay


def register(main: click.Group) -> None:
    main.add_command(replay_data_cmd)


@click.command("replay-data")
@config_options
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False), default=None,
              help="Replay this exported plan (simharness export --out FILE).")
@click.option("--capture", "capture_path", type=click.Path(dir_okay=False), default=None,
              help="Replay the groups a `simharness capture` file recorded (your code's "
                   "groups) instead of the model's; the configuration flags name the kinds.")
@click.option("--kind", type=click.Choice(("megatron", "fsdp2")), default="megatron",
              show_default=True,
              help="megatron: the distributed optimizer's buckets; fsdp2: fully_shard with and "
                   "without set_separate_reduce_scatter_group().")
@click.option("--steps", type=click.IntRange(min=1), default=4, show_default=True,
              help="Optimizer steps.")
@click.option("--buckets", "dense_buckets", type=click.IntRange(min=0), default=3,
              show_default=True, help="Dense buckets per rank (megatron).")
@click.option("--expert-buckets", type=click.IntRange(min=0), default=1, show_default=True,
              help="Expert buckets per rank, on the expert data-parallel groups (megatron).")
@click.option("--shard-numel", type=click.IntRange(min=1), default=8, show_default=True,
              help="float64 elements of one rank's shard of a bucket.")
@click.option("--swap", default=None, metavar="A,B[@KIND]",
              help="Fault injection: swap ranks A and B in the plan's KIND groups "
                   "(default dp_cp_ag) before the replay.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True,
              help="Seconds a collective may take before the replay fails naming the rank.")
@click.option("--backend", type=click.Choice(("gloo", "nccl")), default="gloo",
              show_default=True, help="gloo: CPU processes; nccl: one GPU per rank.")
@click.option("--force", is_flag=True, default=False,
              help="Start more local gloo ranks than this machine comfortably hosts.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON report to FILE.")
@click.option("--inject-fault", "fault", default=None, hidden=True,
              help="Testing: RANK:exit|hang|raise@init|create|verify|gather.")
@click.option("--deadline", type=float, default=None, hidden=True,
              help="Testing: kill the whole replay after this many seconds.")
@output_options(formats=("table", "json"), show_all=False)
@click.pass_context
def replay_data_cmd(ctx, plan_path, capture_path, kind, steps, dense_buckets, expert_buckets,
                    shard_numel, swap, timeout, backend, force, report_path, fault, deadline, fmt,
                    quiet,
                    **kwargs):
    """Run the optimizer's data path on real processes and compare it with a reference.

    Megatron (--kind megatron): every rank reduce-scatters bucketed float64
    gradients on its DP-with-CP group (expert buckets on the expert DP group)
    and all-gathers the updated shards, issued asynchronously so that the
    all-gather of one bucket can overlap the reduce-scatter of the next, for
    --steps SGD steps. It runs twice in one launch: the all-gather on the
    reduce-scatter group ("shared": what DDP with the distributed optimizer does,
    option on or off) and on its own communicator ("separate": the plan's AG
    group, or a twin when the option is off: what Megatron-FSDP, the AG group's
    one reader, does with the option on). --dp-impl (or the ddp: block of
    --config) names which one is your job's path. The parameters must be
    bit-identical to a single-process reference on every rank; each
    all-gathered element carries its sender's rank, shard, bucket and step, so
    a misaligned AG group is reported as
    "rank 0 holds shard 1 ... but it came from rank 2, expected rank 4".

    FSDP2 (--kind fsdp2): a two-layer model under fully_shard on the
    DP-with-CP group, with and without set_separate_reduce_scatter_group().

    Exit status: 0 bit-identical everywhere, 1 mismatch, 2 bad input, 3 the
    replay failed (a rank died or a collective timed out: the rank is named).

    \b
    Examples:
      simharness replay-data -n 8 --tp 2 --pp 2 --cp 2 --create-all-gather-group --mcore 0.16
      simharness replay-data -n 8 --tp 2 --pp 2 --use-tp-pp-dp-mapping \\
          --create-all-gather-group --mcore 0.19          # upstream #4261, found by data
      simharness replay-data -n 8 --tp 2 --create-all-gather-group --swap 2,3
      simharness replay-data -n 8 --kind fsdp2
    """
    from ..ag_readers import AG_PROFILES, datapath_variants
    from ..replay.controller import write_report
    from ..replay.datapath import (
        DataPathOptions,
        parse_swap,
        replay_data,
        summary_lines,
        swap_ranks,
    )

    dp = dp_impl_from_options(**kwargs)
    layout, _ = layout_for_replay(plan_path, "plan", kwargs)
    out.check_writable(report_path, "--report")  # before any rank starts
    notes = []
    if capture_path:
        layout, notes = _captured(capture_path, layout)
    if swap:
        a, b, swap_kind = parse_swap(swap)
        layout = swap_ranks(layout, a, b, swap_kind)
    opts = DataPathOptions(kind=kind, steps=steps, dense_buckets=dense_buckets,
                           expert_buckets=expert_buckets, shard_numel=shard_numel,
                           backend=backend, timeout=timeout, force=force, fault=fault)
    report = replay_data(layout, opts, deadline=deadline)
    if swap:
        report["swap"] = swap
    if capture_path:
        report["capture"] = {"file": capture_path, "notes": [f.message for f in notes]}
    readers: list[str] = []
    if kind == "megatron":
        readers = datapath_variants(layout.mcore if layout.mcore in AG_PROFILES else "0.19", dp)
        report["dp_impl"] = dp.to_dict()
        report["all_gather_readers"] = readers
    if report_path:
        write_report(report, report_path)
    if fmt == "json":
        out.echo_json(report)
    elif not quiet:
        for line in summary_lines(report):
            if line.startswith("result:"):
                for words in readers:  # who each variant stands for, before the result
                    out.echo(out.dim(f"  {words}"))
                line = out.style(line, fg="green" if report["exit_code"] == 0 else "red",
                                 bold=True)
            out.echo(line)
    ctx.exit(report["exit_code"])


def _captured(path: str, layout):
    """The groups of a capture file as a layout under ``layout``'s configuration."""
    import json

    from ..capture import Capture
    from ..capture.checks import captured_layout
    from .errors import fail

    with open(path, encoding="utf-8") as fh:
        try:
            cap = Capture.from_dict(json.load(fh))
        except ValueError as exc:
            fail(f"--capture {path}: not JSON ({exc}); give a file `simharness capture` "
                 f"wrote.")
    if cap.world_size != layout.world_size:
        fail(f"--capture {path}: the capture ran {cap.world_size} ranks but the configuration's "
             f"world is {layout.world_size}; give -n {cap.world_size} and the sizes the "
             f"script used.")
    if not cap.complete:
        fail(f"--capture {path}: only {len(cap.ok_ranks)} of {len(cap.ranks)} ranks completed; "
             f"capture again until every rank finishes.")
    captured, notes = captured_layout(cap, layout)
    if captured is None:
        fail(f"--capture {path}: none of the captured groups' group_desc is one the "
             f"configuration builds; give the configuration flags the script used.")
    return captured, notes
