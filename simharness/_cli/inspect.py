"""``simharness inspect``: the groups of a configuration, one rank's view, the node grid."""

from __future__ import annotations

from typing import Any

import click
import numpy as np

from ..ag_readers import AG_PROFILES, UNKNOWN, DPImpl, all_gather_use
from ..layout import Layout
from ..reports import NodeGrid, node_grid
from . import output as out
from .errors import fail
from .options import (
    config_options,
    dp_impl_from_options,
    load_layout,
    megatron_args_options,
    node_shape,
    output_options,
)
from .render import echo_kinds, echo_summary, kinds_dict


def register(main: click.Group) -> None:
    main.add_command(inspect_cmd)


@click.command("inspect", short_help="Show the groups: summary, per kind, one rank, node grid.")
@click.option("--kind", "-k", "kinds", multiple=True, metavar="KIND",
              help="Only this group kind (repeatable), e.g. dp_cp, tp, ep_dp.")
@click.option("--rank", "-r", "rank", type=int, default=None,
              help="One rank's view: its group in every kind, coordinates, collectives.")
@click.option("--grid", "grid", is_flag=True, default=False,
              help="Draw the ranks node by GPU with one kind's groups marked (default kind "
                   "dp_cp).")
@output_options()
@config_options
@megatron_args_options()
def inspect_cmd(fmt, quiet, show_all, kinds, rank, grid, **kwargs):
    """Show the process groups of a configuration.

    Default: a summary and, per group kind, its groups (first and last ones on
    large worlds; --all shows every one). --kind picks kinds, --rank one rank's
    view, --grid the node-by-GPU picture.

    \b
    Examples:
      simharness inspect -n 16 --tp 2 --pp 2 --cp 2
      simharness inspect -n 16 --tp 2 --pp 2 --cp 2 --rank 5
      simharness inspect --nodes 4 --tp 2 --cp 4 --grid --kind dp_cp
      simharness inspect --config recipe.yaml --kind dp_cp --format json
    """
    if rank is not None and grid:
        fail("--rank and --grid are two views; give one of them.")
    purpose = ("build" if rank is not None else "inspect-grid" if grid
               else "inspect" if fmt == "table" and not show_all
               else "inspect-all" if fmt == "table" else f"inspect-{fmt}")
    dp = dp_impl_from_options(**kwargs)
    layout, world_auto = load_layout(kwargs, purpose)
    for k in kinds:
        layout.entry(k)  # unknown kind -> LayoutError naming the kinds
    if rank is not None:
        return _inspect_rank(layout, rank, kinds, fmt, quiet, dp)
    if grid:
        if len(kinds) > 1:
            fail(f"--grid marks one kind's groups, got {len(kinds)} (--kind "
                 f"{' --kind '.join(kinds)}); give one --kind.")
        _, gpn = node_shape(layout.config, **kwargs)
        return _inspect_grid(layout, kinds[0] if kinds else "dp_cp", gpn, fmt, quiet, show_all)
    _inspect_kinds(layout, list(kinds) or list(layout.kinds), world_auto, fmt, quiet, show_all,
                   dp)


def _inspect_kinds(layout: Layout, selected: list[str], world_auto: bool, fmt: str, quiet: bool,
                   show_all: bool, dp: DPImpl = UNKNOWN) -> None:
    """The default view: the summary and each selected kind's groups."""
    if fmt == "json":
        out.echo_json({"summary": layout.summary(), "world_auto": world_auto,
                       "dp_impl": dp.to_dict(),
                       "kinds": kinds_dict(layout, selected, show_all=show_all)})
    elif fmt == "csv":
        rows: list[list[Any]] = []
        for k in selected:
            arr = layout.groups(k)
            rows.extend([k, i, arr.shape[1], cell]
                        for i, cell in enumerate(out.row_strings(arr)))
        out.echo_csv(["kind", "group", "group_size", "ranks"], rows)
    else:
        if not quiet:
            echo_summary(layout, world_auto=world_auto, dp=dp)
            out.echo()
        echo_kinds(layout, selected, show_all=show_all, quiet=quiet)


def _inspect_rank(layout: Layout, rank: int, kinds, fmt: str, quiet: bool,
                  dp: DPImpl = UNKNOWN) -> None:
    view = layout.rank(rank)
    selected = [k for k in (kinds or view.groups.keys()) if k in view.groups]
    c = layout.resolve_collectives(view.rank, dp.impl, dp.sharding)
    if fmt == "json":
        d = view.to_dict()
        d["collectives"] = c.to_dict()
        d["dp_impl"] = dp.to_dict()
        if kinds:
            d["groups"] = {k: v for k, v in d["groups"].items() if k in kinds}
        out.echo_json(d)
        return
    if fmt == "csv":
        out.echo_csv(["rank", "kind", "group_desc", "backend", "group", "position",
                      "group_rank", "group_size", "ranks"],
                     ([view.rank, k, layout.desc(k), layout.backend(k), m.group, m.position,
                       m.group_rank, len(m.ranks), out.ranks_cell(m.ranks)]
                      for k, m in ((k, view.groups[k]) for k in selected)))
        return
    if not quiet:
        cfg = layout.config
        coords = "  ".join(f"{k} {v}" for k, v in view.coordinates.items())
        stage = ("only stage" if view.is_first_stage and view.is_last_stage else
                 "first stage" if view.is_first_stage else
                 "last stage" if view.is_last_stage else "middle stage")
        emb = []
        emb.append("in" if view.in_embedding_group else "not in")
        emb.append("in" if view.in_position_embedding_group else "not in")
        out.echo(out.heading(f"rank {view.rank} of {layout.world_size}") +
                 f"  (order {cfg.order}, mcore {layout.mcore})")
        out.echo(out.render_table(None, [
            [out.heading("coordinates"), coords],
            [out.heading("pipeline"), f"{stage}; {emb[0]} the embedding group, {emb[1]} the "
                                      f"position-embedding group"],
            [out.heading("communicators"),
             f"{view.communicators} ({view.nccl_communicators} nccl + "
             f"{view.gloo_communicators} gloo) of {view.new_group_calls} new_group calls"],
        ]))
        out.echo()
    rows = []
    for k in selected:
        m = view.groups[k]
        rows.append([k, layout.desc(k), m.group, m.position, m.group_rank, len(m.ranks),
                     out.format_ranks(m.ranks)])
    out.echo(out.render_table(
        None if quiet else ["kind", "group_desc", "group", "position", "group rank", "size",
                            "ranks"], rows))
    if quiet:
        return
    out.echo()
    out.echo(out.heading("optimizer collectives") + "  " + out.dim(dp.describe()))
    profile = layout.mcore if layout.mcore in AG_PROFILES else "0.19"
    on = layout.config.create_all_gather_group
    crow = []
    for label, g, note in (
            ("dense reduce-scatter", c.dense_reduce_scatter,
             "plain DDP all-reduces its gradients here" if dp.impl == "ddp" else ""),
            ("dense all-gather", c.dense_all_gather,
             all_gather_use(profile, dp, expert=False, option_on=on and layout.has("dp_cp_ag"))),
            ("expert reduce-scatter", c.expert_reduce_scatter,
             "plain DDP all-reduces its gradients here" if dp.impl == "ddp" else ""),
            ("expert all-gather", c.expert_all_gather,
             all_gather_use(profile, dp, expert=True, option_on=on and layout.has("ep_dp_ag")))):
        crow.append([label, g.kind, out.format_ranks(g.ranks), out.dim(note) if note else ""])
    out.echo(out.render_table(None, crow, indent=2))
    if on:
        out.echo("  " + dp.sentence(profile))
        if layout.has("ep_dp_ag") or layout.config.ep > 1:
            out.echo("  " + dp.sentence(profile, expert=True))


def _grid_note(g: NodeGrid) -> str | None:
    """A warning when the last node is not full, with the worlds that fill whole nodes."""
    world, gpn, partial = g.world_size, g.gpus_per_node, g.partial
    if not partial:
        return None
    return (f"note: {world} ranks are not a multiple of {gpn} GPUs per node: node "
            f"{g.n_nodes - 1} holds {partial} rank(s) and {gpn - partial} idle GPU(s); use a "
            f"world of {world - partial or gpn} or {world - partial + gpn} ranks to fill whole "
            f"nodes, or --gpus-per-node for another node size")


def _inspect_grid(layout: Layout, kind: str, gpn: int, fmt: str, quiet: bool,
                  show_all: bool) -> None:
    g = node_grid(layout, kind, gpn)
    world, n_nodes, crossing, off = g.world_size, g.n_nodes, g.crossing, layout.rank_offset
    head, tail = out.head_tail(n_nodes, show_all=show_all)
    note = _grid_note(g)
    if fmt == "json":
        def node_row(n):
            span = g.node_ranks(n)
            return {"node": n, "ranks": list(range(span.start + off, span.stop + off)),
                    "groups": g.group[span.start:span.stop].tolist()}
        out.echo_json({
            "kind": kind, "gpus_per_node": gpn, "nodes": n_nodes,
            "n_groups": g.n_groups, "groups_crossing_nodes": int(crossing.size),
            "crossing_groups": crossing.tolist() if show_all else crossing[:64].tolist(),
            "truncated": bool(tail), "grid": [node_row(n) for n in head + tail],
            "note": note})
        return
    if fmt == "csv":
        ranks = np.arange(world)
        out.echo_csv(["node", "gpu", "rank", "group", "crosses_nodes"],
                     zip((ranks // gpn).tolist(), (ranks % gpn).tolist(),
                         (ranks + off).tolist(), g.group.tolist(),
                         g.crosses.astype(int).tolist(), strict=True))
        if note:
            out.echo(note, err=True)
        return
    palette = ("red", "green", "yellow", "blue", "magenta", "cyan")
    rw = len(str(layout.ranks.stop - 1))
    gw = len(str(max(g.n_groups - 1, 0)))

    def cell(r: int) -> str:
        grp = int(g.group[r])
        text = f"{r + off:>{rw}}:" + (f"g{grp:<{gw}}" if grp >= 0 else "-".ljust(gw + 1))
        text += "*" if g.crosses[r] else " "
        return out.style(text, fg=palette[grp % len(palette)]) if grp >= 0 else out.dim(text)

    if not quiet:
        out.echo(out.heading(f"{kind} groups on {n_nodes} nodes x {gpn} GPUs") +
                 f"  ({layout.desc(kind)}; cell = rank:group, * = the group spans nodes)")
    header = ["node"] + [f"gpu{i}" for i in range(gpn)]
    rows: list[Any] = []

    def node_line(n):
        return [n] + [cell(r) for r in g.node_ranks(n)]

    rows += [node_line(n) for n in head]
    if tail:
        rows.append(out.more_line(n_nodes - len(head) - len(tail), "nodes", hint=not quiet))
        rows += [node_line(n) for n in tail]
    out.echo(out.render_table(None if quiet else header, rows, align="r" + "l" * gpn))
    if note:  # on stderr, so it reaches the user with --quiet and leaves the data clean
        out.echo(out.style(note, fg="yellow"), err=True)
    if quiet:
        return
    out.echo()
    if crossing.size:
        spans = g.spans
        most = int(spans.n_nodes.max())
        out.echo(out.style(f"{crossing.size} of {g.n_groups} {kind} groups cross nodes",
                           fg="yellow", bold=True) + f" (up to {most} nodes per group); e.g. "
                 f"g{crossing[0]} {out.format_ranks(layout.groups(kind)[crossing[0]])} spans "
                 f"nodes {spans.first[crossing[0]]}..{spans.last[crossing[0]]}")
    else:
        out.echo(out.style(f"all {g.n_groups} {kind} groups stay inside one node", fg="green"))
