"""Layout commands: inspect, check, diff, export, verify-export, explain, version.

Each command parses its flags (``common``), asks the library, and formats
(``output``); the pieces the commands share (summary, kind tables, findings)
are functions here so ``demo`` can reuse them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click
import numpy as np

from .. import __version__
from ..config import DEFAULT_MCORE, GROUP_FIELDS, MCORE_PROFILES, ParallelismConfig
from ..errors import SimharnessError
from ..fields import ParallelismFields
from ..layout import Draft, Layout, build_layout
from ..planfile import plan_json, read_plan
from ..resources import layout_memory_check
from . import output as out
from .common import (
    config_fields_from_options,
    config_flags_given,
    config_from_options,
    config_options,
    fail,
    node_shape,
    output_options,
)
from .output import SEVERITY_ORDER, echo_findings, findings_exit_code, findings_verdict

TOGGLES = tuple(f for f in GROUP_FIELDS
                if isinstance(getattr(ParallelismConfig, f, None), bool))


# =============================================================== shared views
def sizes_line(cfg: ParallelismConfig) -> str:
    parts = [f"tp {cfg.tp}", f"pp {cfg.pp}", f"cp {cfg.cp}", f"dp {cfg.dp}",
             f"dp*cp {cfg.data_parallel_size_with_cp}", f"ep {cfg.ep}", f"etp {cfg.etp}",
             f"expert dp {cfg.edp}"]
    if cfg.virtual_pipeline_model_parallel_size:
        parts.append(f"vpp {cfg.virtual_pipeline_model_parallel_size}")
    if cfg.gtp_remat_size > 1 or cfg.expert_gtp_remat_size > 1:
        parts.append(f"gtp {cfg.gtp_remat_size}  egtp {cfg.expert_gtp_remat_size}")
    return "  ".join(parts)


def short_line(layout: Layout) -> str:
    cfg = layout.config
    return (f"{layout.world_size} ranks  tp {cfg.tp} pp {cfg.pp} cp {cfg.cp} dp {cfg.dp}"
            f"{f' ep {cfg.ep}' if cfg.ep > 1 else ''}  order {cfg.order}  mcore {layout.mcore}"
            f"  create_all_gather_group {out.onoff(cfg.create_all_gather_group)}")


def _range(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}..{hi}"


def all_gather_words(layout: Layout) -> str:
    from ..views import collective_kinds

    k = collective_kinds(layout)
    dense = ("its own communicator (overlaps the reduce-scatter)"
             if k["dense_all_gather"] != k["dense_reduce_scatter"]
             else "the reduce-scatter's communicator (they serialise)")
    return (f"create_all_gather_group {out.onoff(layout.config.create_all_gather_group)}: dense "
            f"all-gather on {k['dense_all_gather']}, {dense}")


def summary_rows(layout: Layout, *, world_auto: bool = False) -> list[list[str]]:
    s = layout.summary()
    cfg = layout.config
    c = s["communicators_per_rank"]
    world = f"{layout.world_size} ranks"
    if world_auto:
        world += " (smallest world these sizes fit; set --world-size or --nodes)"
    if layout.rank_offset:
        world += f", ranks {layout.ranks.start}..{layout.ranks.stop - 1}"
    order = f"{cfg.order} ({'pp last' if cfg.pp_last else 'pp not last'})"
    n = cfg.num_distributed_optimizer_instances
    rows = [
        ["world", world],
        ["mcore", f"{layout.mcore} profile"],
        ["order", order],
        ["sizes", sizes_line(cfg)],
        ["all-gather", all_gather_words(layout)],
    ]
    if n > 1:
        rows.append(["optimizer", f"{n} distributed-optimizer instances of "
                                  f"{cfg.intra_partial_data_parallel_size} DP ranks"])
    rows += [
        ["groups", f"{s['new_group_calls']} new_group calls in {s['kinds']} kinds"],
        ["communicators", f"{_range(c['total_min'], c['total_max'])} per rank (nccl up to "
                          f"{c['nccl_max']}, gloo up to {c['gloo_max']})"],
    ]
    return rows


def echo_summary(layout: Layout, *, world_auto: bool = False) -> None:
    out.echo(out.render_table(None, [[out.heading(a), b]
                                     for a, b in summary_rows(layout, world_auto=world_auto)]))


def _same_as(layout: Layout, kind: str, shown: dict[str, str]) -> str | None:
    """An earlier kind with the very same groups (the Gloo twins, the 0.16 AG groups)."""
    src = layout.source(kind)
    for other in shown:
        if layout.source(other) is src:
            return other
    arr = layout.groups(kind)
    for other in shown:
        o = layout.groups(other)
        if o.shape == arr.shape and o.size <= 1 << 20 and np.array_equal(o, arr):
            return other
    return None


def kind_title(layout: Layout, kind: str) -> str:
    src = layout.source(kind)
    return (f"{out.style(kind, bold=True)}  {layout.desc(kind)}  {layout.backend(kind)}  "
            f"{out.plural(src.n_groups, 'group')} of {src.group_size}")


def echo_kind(layout: Layout, kind: str, *, show_all: bool, same: str | None = None,
              quiet: bool = False, indent: int = 2) -> None:
    out.echo(kind_title(layout, kind))
    if same is not None and not show_all:
        out.echo(" " * indent + out.dim(f"same groups as {same}"))
        return
    arr = layout.groups(kind)
    head, tail = out.head_tail(arr.shape[0], show_all=show_all)
    if tail:
        width = len(f"g{arr.shape[0] - 1}")
        rows: list[list[str] | str] = [[f"g{i}".ljust(width), out.format_ranks(arr[i])]
                                       for i in head]
        rows.append(out.more_line(arr.shape[0] - len(head) - len(tail), hint=not quiet))
        rows += [[f"g{i}".ljust(width), out.format_ranks(arr[i])] for i in tail]
        out.echo(out.render_table(None, rows, indent=indent))
    else:
        cells = [f"g{i} {out.format_ranks(arr[i])}" for i in head]
        out.echo(out.pack_cells(cells, indent=indent))


def echo_kinds(layout: Layout, kinds: Sequence[str], *, show_all: bool,
               quiet: bool = False) -> None:
    shown: dict[str, str] = {}
    for i, kind in enumerate(kinds):
        if i and not quiet:
            out.echo()
        echo_kind(layout, kind, show_all=show_all, same=_same_as(layout, kind, shown),
                  quiet=quiet)
        shown[kind] = kind


def kinds_dict(layout: Layout, kinds: Sequence[str], *, show_all: bool) -> dict:
    result = {}
    for kind in kinds:
        src = layout.source(kind)
        arr = layout.groups(kind)
        head, tail = out.head_tail(arr.shape[0], show_all=show_all)
        item: dict[str, Any] = {"desc": layout.desc(kind), "backend": layout.backend(kind),
                                "n_groups": src.n_groups, "group_size": src.group_size,
                                "truncated": bool(tail)}
        if tail:
            item["first_groups"] = arr[head].tolist()
            item["last_groups"] = arr[tail].tolist()
        else:
            item["groups"] = arr.tolist()
        result[kind] = item
    return result


def _findings_json(findings, strict: bool, **extra) -> dict:
    counts = {s: sum(1 for f in findings if f.severity == s) for s in SEVERITY_ORDER}
    return {**extra, "strict": strict, "counts": counts,
            "exit_code": findings_exit_code(findings, strict),
            "findings": [f.to_dict() for f in findings]}


def _findings_csv(findings) -> None:
    out.echo_csv(["code", "severity", "message", "ranks", "groups"],
                 ([f.code, f.severity, f.message, out.ranks_cell(f.ranks), " ".join(f.groups)]
                  for f in findings))


def _run_check(layout: Layout):
    from ..checks import check

    return list(check(layout))


def _load(kwargs, command: str = "build") -> tuple[Layout, bool]:
    """The layout of the options, and whether the world was chosen automatically.

    ``command`` names the memory estimate (``simharness.resources``) checked first.
    """
    fields, mcore = config_fields_from_options(**kwargs)
    draft = Draft.of(fields, mcore)  # normalised, type-checked; its loops hold no arrays
    # The estimate comes first: validating a huge world already builds world-sized arrays.
    layout_memory_check(draft.fields, mcore, command, kinds=draft.kinds,
                        what=command.split("-")[0] if command != "build" else None)
    return draft.layout(), fields.get("world_size") is None


# ==================================================================== commands
def register(main: click.Group) -> None:
    """Add the layout commands to ``main``."""
    for cmd in (inspect_cmd, check_cmd, diff_cmd, export_cmd, verify_export_cmd, explain_cmd,
                version_cmd):
        main.add_command(cmd)


# ------------------------------------------------------------------- inspect
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
    layout, world_auto = _load(kwargs, purpose)
    for k in kinds:
        layout.entry(k)  # unknown kind -> LayoutError naming the kinds
    if rank is not None:
        return _inspect_rank(layout, rank, kinds, fmt, quiet)
    if grid:
        if len(kinds) > 1:
            fail(f"--grid marks one kind's groups, got {len(kinds)} (--kind "
                 f"{' --kind '.join(kinds)}); give one --kind.")
        _, gpn = node_shape(layout.config, **kwargs)
        return _inspect_grid(layout, kinds[0] if kinds else "dp_cp", gpn, fmt, quiet, show_all)
    selected = list(kinds) or list(layout.kinds)
    if fmt == "json":
        out.echo_json({"summary": layout.summary(), "world_auto": world_auto,
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
            echo_summary(layout, world_auto=world_auto)
            out.echo()
        echo_kinds(layout, selected, show_all=show_all, quiet=quiet)


def _inspect_rank(layout: Layout, rank: int, kinds, fmt: str, quiet: bool) -> None:
    view = layout.rank(rank)
    selected = [k for k in (kinds or view.groups.keys()) if k in view.groups]
    if fmt == "json":
        d = view.to_dict()
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
    c = view.collectives
    out.echo()
    out.echo(out.heading("optimizer collectives"))
    crow = []
    for label, g, note in (
            ("dense reduce-scatter", c.dense_reduce_scatter, ""),
            ("dense all-gather", c.dense_all_gather,
             "own communicator: overlaps the reduce-scatter" if c.dense_overlap
             else "same communicator as the reduce-scatter: they serialise"),
            ("expert reduce-scatter", c.expert_reduce_scatter, ""),
            ("expert all-gather", c.expert_all_gather,
             "own communicator: overlaps the reduce-scatter" if c.expert_overlap
             else "same communicator as the reduce-scatter: they serialise")):
        crow.append([label, g.kind, out.format_ranks(g.ranks), out.dim(note) if note else ""])
    out.echo(out.render_table(None, crow, indent=2))


def _inspect_grid(layout: Layout, kind: str, gpn: int, fmt: str, quiet: bool,
                  show_all: bool) -> None:
    from ..views import group_index, node_spans

    idx = group_index(layout, kind)
    spans = node_spans(layout, kind, gpn)
    world = layout.world_size
    n_nodes = -(-world // gpn)
    crossing = spans.crossing
    crosses_rank = np.zeros(world, dtype=bool)
    ok = idx.present
    crosses_rank[ok] = spans.n_nodes[idx.group[ok]] > 1
    head, tail = out.head_tail(n_nodes, show_all=show_all)
    partial = world % gpn  # ranks on the last node (0: every node full)
    note = (f"note: {world} ranks are not a multiple of {gpn} GPUs per node: node "
            f"{n_nodes - 1} holds {partial} rank(s) and {gpn - partial} idle GPU(s); use a world "
            f"of {world - partial or gpn} or {world - partial + gpn} ranks to fill whole nodes, or "
            f"--gpus-per-node for another node size" if partial else None)
    if fmt == "json":
        def node_row(n):
            lo, hi = n * gpn, min(world, (n + 1) * gpn)
            return {"node": n, "ranks": list(range(lo + layout.rank_offset,
                                                   hi + layout.rank_offset)),
                    "groups": idx.group[lo:hi].tolist()}
        out.echo_json({
            "kind": kind, "gpus_per_node": gpn, "nodes": n_nodes,
            "n_groups": int(spans.n_nodes.size), "groups_crossing_nodes": int(crossing.size),
            "crossing_groups": crossing.tolist() if show_all else crossing[:64].tolist(),
            "truncated": bool(tail), "grid": [node_row(n) for n in head + tail],
            "note": note})
        return
    if fmt == "csv":
        ranks = np.arange(world)
        out.echo_csv(["node", "gpu", "rank", "group", "crosses_nodes"],
                     zip((ranks // gpn).tolist(), (ranks % gpn).tolist(),
                         (ranks + layout.rank_offset).tolist(), idx.group.tolist(),
                         crosses_rank.astype(int).tolist(), strict=True))
        if note:
            out.echo(note, err=True)
        return
    palette = ("red", "green", "yellow", "blue", "magenta", "cyan")
    rw = len(str(layout.ranks.stop - 1))
    gw = len(str(max(int(spans.n_nodes.size) - 1, 0)))

    def cell(r: int) -> str:
        g = int(idx.group[r])
        text = f"{r + layout.rank_offset:>{rw}}:" + (f"g{g:<{gw}}" if g >= 0 else "-".ljust(gw + 1))
        text += "*" if crosses_rank[r] else " "
        return out.style(text, fg=palette[g % len(palette)]) if g >= 0 else out.dim(text)

    if not quiet:
        out.echo(out.heading(f"{kind} groups on {n_nodes} nodes x {gpn} GPUs") +
                 f"  ({layout.desc(kind)}; cell = rank:group, * = the group spans nodes)")
    header = ["node"] + [f"gpu{i}" for i in range(gpn)]
    rows: list[Any] = []

    def node_line(n):
        lo, hi = n * gpn, min(world, (n + 1) * gpn)
        return [n] + [cell(r) for r in range(lo, hi)]

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
    total = int(spans.n_nodes.size)
    if crossing.size:
        most = int(spans.n_nodes.max())
        out.echo(out.style(f"{crossing.size} of {total} {kind} groups cross nodes", fg="yellow",
                           bold=True) + f" (up to {most} nodes per group); e.g. g{crossing[0]} "
                 f"{out.format_ranks(layout.groups(kind)[crossing[0]])} spans nodes "
                 f"{spans.first[crossing[0]]}..{spans.last[crossing[0]]}")
    else:
        out.echo(out.style(f"all {total} {kind} groups stay inside one node", fg="green"))


# --------------------------------------------------------------------- check
@click.command("check", short_help="Run every check; exit 1 on error findings.")
@click.option("--strict", is_flag=True, default=False, help="Warnings fail too (exit 1).")
@output_options(show_all=False)
@config_options
def check_cmd(fmt, quiet, strict, **kwargs):
    """Run every check on a configuration's layout and print the findings.

    Findings are grouped by severity. Exit status: 0 clean, 1 when any error
    finding (or warning, with --strict), 2 for bad input or a world too large for
    this machine's memory (refused before the work, naming the largest that fits),
    3 a crash. From 1M ranks the checks keep memory bounded (16M ranks: about 1.2 GiB).

    \b
    Examples:
      simharness check -n 16 --tp 2 --pp 2 --cp 2
      simharness check --config recipe.yaml --strict --format json
    """
    layout, world_auto = _load(kwargs, "check")
    findings = _run_check(layout)
    code = findings_exit_code(findings, strict)
    if fmt == "json":
        out.echo_json(_findings_json(findings, strict, summary=layout.summary()))
    elif fmt == "csv":
        _findings_csv(findings)
    elif not quiet:
        out.echo(out.dim(short_line(layout)))
        echo_findings(findings, strict=strict)
        out.echo(findings_verdict(findings, strict))
    click.get_current_context().exit(code)


# ---------------------------------------------------------------------- diff
def _read_side(path: str, kwargs: dict) -> Layout:
    """A positional diff operand: a layout export (JSON with a schema) or a config file."""
    from ..configfile import ConfigFileError

    try:
        with open(path, encoding="utf-8") as fh:
            head = fh.read(4096)
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: no such file; check the path.", path=path) from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not a text file; diff takes exported layouts (JSON) or "
                              f"configuration files (YAML, TOML, JSON).", path=path) from None
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read: {exc.strerror}.", path=path) from None
    if head.lstrip().startswith("{") and '"schema"' in head:
        given = [f for f in config_flags_given(**kwargs) if f != "mcore"]
        if given or kwargs.get("mcore"):
            fail(f"{path} is an exported layout; configuration flags "
                 f"({', '.join(sorted(given + (['mcore'] if kwargs.get('mcore') else [])))}) "
                 f"cannot change it. Diff configuration files to vary flags.")
        return _read_export(path)
    fields, mcore = config_fields_from_options(**{**kwargs, "config_file": path})
    try:
        return build_layout(ParallelismFields.from_dict(fields), mcore)
    except SimharnessError as exc:
        raise SimharnessError(f"{path}: {exc}") from None


def _read_export(path: str) -> Layout:
    return read_plan(path)


def _describe_value(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return "-" if v is None else str(v)


def _dist(c: np.ndarray) -> str:
    if c.size == 0:
        return "-"
    lo, hi = int(c.min()), int(c.max())
    return _range(lo, hi)


@click.command("diff", short_help="Compare two layouts (or --toggle an option).")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--toggle", "toggles", multiple=True, type=click.Choice(TOGGLES),
              help="Compare with this boolean field flipped (repeatable).")
@click.option("--change", "changes", multiple=True, metavar="FIELD=VALUE",
              help="Compare with this field changed, e.g. --change tp=4 (repeatable).")
@click.option("--exit-code", "exit_code", is_flag=True, default=False,
              help="Exit 1 when the layouts differ (like git diff --exit-code).")
@output_options(show_all=True)
@config_options(mcore_multiple=True)
def diff_cmd(files, fmt, quiet, show_all, toggles, changes, exit_code, **kwargs):
    """Compare two layouts: groups added/removed, communicators, all-gather groups.

    The two sides are: two FILES (configuration files or exported layouts;
    configuration flags apply to both), or one configuration (flags/--config)
    against itself with --toggle FIELD, --change FIELD=VALUE, or --mcore given
    twice. --quiet prints nothing and exits 1 when they differ.

    \b
    Examples:
      simharness diff -n 16 --tp 2 --pp 2 --cp 2 --toggle create_all_gather_group
      simharness diff -n 64 --tp 2 --cp 2 --toggle use_tp_pp_dp_mapping
      simharness diff -n 16 --tp 2 --cp 2 --mcore 0.16 --mcore 0.19 --create-all-gather-group
      simharness diff before.yaml after.yaml
      simharness diff -n 64 --tp 2 --change tp=4 --format json
    """
    from ..diff import diff_layouts

    mcores = tuple(kwargs.get("mcore") or ())
    if len(mcores) > 2:
        fail(f"--mcore given {len(mcores)} times; give it once (both sides) or twice (A, B).")
    if files:
        if len(files) != 2:
            fail(f"diff takes two files (A and B), got {len(files)}; or give one configuration "
                 f"with --toggle, --change or two --mcore.")
        if toggles or changes or len(mcores) == 2:
            fail("give two files, or one configuration with --toggle/--change/--mcore twice; "
                 "not both.")
        if kwargs.get("config_file"):
            fail("--config and two FILES both name configurations; give the two FILES only.")
        kw = {**kwargs, "mcore": mcores[:1]}
        a, b = _read_side(files[0], kw), _read_side(files[1], kw)
    else:
        if not (toggles or changes or len(mcores) == 2):
            fail("nothing to compare: give --toggle FIELD (e.g. create_all_gather_group), "
                 "--change FIELD=VALUE, --mcore twice, or two files.")
        a, b = _changed_sides(kwargs, mcores, toggles, changes)
    d = diff_layouts(a, b)
    code = 1 if (exit_code or quiet) and not d.identical else 0
    if fmt == "json":
        out.echo_json(d.to_dict(limit=None if show_all else 64))
    elif fmt == "csv":
        rows: list[list[str]] = []
        for k in d.changed_kinds:
            for sign, arr in (("removed", k.removed), ("added", k.added)):
                rows.extend([k.kind, sign, out.ranks_cell(r)] for r in np.asarray(arr))
        out.echo_csv(["kind", "change", "ranks"], rows)
    elif not quiet:
        _echo_diff(d, show_all)
    click.get_current_context().exit(code)


def _parse_change(item: str) -> tuple[str, Any]:
    """``--change FIELD=VALUE``: the field name (aliases resolved) and the value, read as
    ``--set`` reads it (:func:`simharness.fieldtypes.parse_field`)."""
    from ..config import ALIASES

    if "=" not in item:
        fail(f"--change expects FIELD=VALUE such as tp=4, got {item!r}.")
    key, _, raw = item.partition("=")
    key = key.strip().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in ParallelismConfig.field_names():
        import difflib

        close = difflib.get_close_matches(key, ParallelismConfig.field_names(), n=1)
        fail(f"--change {item!r}: unknown field {key!r}"
             + (f" (did you mean {close[0]!r}?)" if close else "")
             + "; use a ParallelismConfig field name such as "
               "tensor_model_parallel_size or tp.")
    from ..errors import LayoutError
    from ..fieldtypes import parse_field

    try:
        return key, parse_field(key, raw, where=f"--change {item}", from_text=True)
    except LayoutError as exc:
        fail(str(exc))


def _changed_sides(kwargs: dict, mcores: tuple[str, ...], toggles: Sequence[str],
                   changes: Sequence[str]) -> tuple[Layout, Layout]:
    """Side A from the configuration flags; side B with ``toggles`` flipped,
    ``changes`` applied and the second ``--mcore``."""
    cfg, mcore_a = config_from_options(**{**kwargs, "mcore": mcores[:1]})
    mcore_b = mcores[1] if len(mcores) == 2 else mcore_a
    updates: dict[str, Any] = {f: not getattr(cfg, f) for f in toggles}
    updates.update(_parse_change(item) for item in changes)
    a = build_layout(cfg, mcore_a)
    what = ", ".join([f"{f} {out.onoff(v)}" if isinstance(v, bool) else f"{f}={v}"
                      for f, v in updates.items()]
                     + ([f"mcore {mcore_b}"] if mcore_b != mcore_a else []))
    try:
        b = build_layout(cfg.replace(**updates) if updates else cfg, mcore_b)
    except SimharnessError as exc:
        raise SimharnessError(f"side B ({what}) is invalid: {exc}") from None
    return a, b


def _echo_diff(d, show_all: bool) -> None:
    a, b = d.a, d.b
    out.echo(out.render_table(None, [[out.heading("A"), short_line(a)],
                                     [out.heading("B"), short_line(b)]]))
    if d.config_changes:
        out.echo(out.heading("changed") + "  " + ", ".join(
            f"{k} {_describe_value(x)} -> {_describe_value(y)}"
            for k, (x, y) in d.config_changes.items()))
    out.echo()
    if d.identical:
        out.echo(out.style("no difference: both create the same groups", fg="green"))
        return
    na, nb = d.new_group_calls
    ca, cb = d.communicators
    changed = d.ranks_communicators_changed
    delta = (cb.astype(np.int64) - ca) if ca.size else ca
    moved = ""
    if changed.size:
        deltas = np.unique(delta[delta != 0])
        moved = (f"; {changed.size} of {len(d.common_ranks)} ranks change ("
                 + ", ".join(f"{int(x):+d}" for x in deltas[:4]) + ")")
    out.echo(out.render_table(None, [
        [out.heading("new_group calls"), f"{na} -> {nb} ({nb - na:+d})"],
        [out.heading("communicators per rank"), f"{_dist(ca)} -> {_dist(cb)}{moved}"],
    ]))
    out.echo()
    ck = d.changed_kinds
    counts = {s: sum(1 for k in ck if k.status == s) for s in ("added", "removed", "changed")}
    out.echo(out.heading("kinds") + f"  {counts['added']} added, {counts['removed']} removed, "
             f"{counts['changed']} changed, {len(d.kinds) - len(ck)} unchanged")
    for k in ck:
        sign = {"added": "+", "removed": "-", "changed": "~"}[k.status]
        color = {"added": "green", "removed": "red", "changed": "yellow"}[k.status]
        ga, gb = k.n_groups
        sa, sb = k.group_size
        if k.status == "added":
            what = f"{k.desc[1]}  {k.backend[1]}  {out.plural(gb, 'group')} of {sb} (new kind)"
        elif k.status == "removed":
            what = f"{k.desc[0]}  {k.backend[0]}  {out.plural(ga, 'group')} of {sa} (kind gone)"
        else:
            what = (f"{k.desc[1]}  {ga} x {sa} -> {gb} x {sb}: {len(k.removed)} removed, "
                    f"{len(k.added)} added")
            if k.backend[0] != k.backend[1]:
                what += f"; backend {k.backend[0]} -> {k.backend[1]}"
        out.echo(f"  {out.style(sign + ' ' + k.kind, fg=color, bold=True)}  {what}")
        for mark, arr in (("-", k.removed), ("+", k.added)):
            arr = np.asarray(arr)
            if arr.size == 0:
                continue
            head, tail = out.head_tail(arr.shape[0], show_all=show_all, head=4, tail=1,
                                       threshold=8)
            color = "red" if mark == "-" else "green"
            out.echo(out.pack_cells([out.style(f"{mark}{out.format_ranks(arr[i])}", fg=color)
                                     for i in head], indent=6))
            if tail:
                out.echo("      " + out.more_line(arr.shape[0] - len(head) - len(tail)))
                out.echo(out.pack_cells([out.style(f"{mark}{out.format_ranks(arr[i])}",
                                                   fg=color) for i in tail], indent=6))
    out.echo()
    out.echo(out.heading("parameter all-gather"))
    rows = []
    for which, ag in d.all_gather.items():
        def side(kind, shared):
            return f"{kind} ({'shared with the reduce-scatter' if shared else 'own communicator'})"
        before, after = side(ag.kinds[0], ag.shared[0]), side(ag.kinds[1], ag.shared[1])
        if not ag.changed:
            rows.append([which, before, out.dim("unchanged")])
            continue
        rows.append([which, f"{before} -> {after}",
                     f"{ag.ranks_changed.size} ranks change communicator, "
                     f"{ag.ranks_members_changed.size} change members"])
    out.echo(out.render_table(None, rows, indent=2))
    changed_any = np.union1d(d.all_gather["dense"].ranks_changed,
                             d.all_gather["expert"].ranks_changed)
    out.echo(out.heading("ranks whose all-gather group changes") + "  "
             + (out.format_rank_set(changed_any, limit=10 if not show_all else 10 ** 9)
                + f" ({changed_any.size} of {len(d.common_ranks)})" if changed_any.size
                else "none"))


# -------------------------------------------------------------------- export
def _export_csv(layout: Layout, sink: out.Sink) -> None:
    """Rows by kind (creation order), then rank; each kind's block formatted at C speed."""
    import csv
    import io

    from ..views import RANK_COLUMNS, kind_rows

    sink.write(",".join(RANK_COLUMNS) + "\n")
    for k in layout.kinds:
        rows = kind_rows(layout, k)
        if rows.shape[0] == 0:
            continue
        buf = io.StringIO()
        csv.writer(buf, lineterminator="").writerow([k, layout.desc(k), layout.backend(k)])
        sink.write(out.int_csv_block(rows, buf.getvalue(), at=1))


@click.command("export", short_help="Export the layout as JSON or CSV.")
@click.option("--out", "-o", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Write to FILE instead of stdout.")
@output_options(formats=("json", "csv"), show_all=False)
@config_options
def export_cmd(fmt, quiet, out_path, **kwargs):
    """Export the layout: JSON (schema simharness.layout/1) or CSV (a row per rank and kind).

    The JSON is the engine's versioned schema (read back by verify-export and
    Layout.from_json); the CSV has the columns rank, kind, group_desc, backend,
    group, position, group_rank, group_size.

    \b
    Examples:
      simharness export -n 16 --tp 2 --pp 2 --cp 2 --out plan.json
      simharness verify-export plan.json
      simharness export --nodes 16 --tp 8 --format csv > ranks.csv
    """
    layout, _ = _load(kwargs, "export" if fmt == "json" else "export-csv")
    with out.Sink(out_path) as sink:  # CSV rows: by kind (creation order), then rank
        if fmt == "json":
            sink.write(plan_json(layout))
        else:
            _export_csv(layout, sink)
    if out_path and not quiet:
        out.echo(f"wrote {out_path} ({fmt}, {layout.world_size} ranks, "
                 f"{len(layout.kinds)} kinds, {len(layout.creation_order)} groups)", err=True)


@click.command("verify-export", short_help="Re-check an exported layout file.")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--strict", is_flag=True, default=False, help="Warnings fail too (exit 1).")
@output_options(show_all=False)
def verify_export_cmd(file, fmt, quiet, strict):
    """Re-check an exported layout (JSON from `simharness export`).

    Reads FILE, rebuilds the layout from the groups it contains and runs every
    check on it. Exit status as for `check`: 0 clean, 1 findings that fail,
    2 unreadable or invalid FILE.

    \b
    Example:
      simharness export -n 16 --tp 2 --pp 2 --cp 2 --out plan.json
      simharness verify-export plan.json
    """
    layout = _read_export(file)
    findings = _run_check(layout)
    code = findings_exit_code(findings, strict)
    if fmt == "json":
        out.echo_json(_findings_json(findings, strict, file=file, summary=layout.summary()))
    elif fmt == "csv":
        _findings_csv(findings)
    elif not quiet:
        out.echo(out.dim(f"{file}: {short_line(layout)}"))
        echo_findings(findings, strict=strict)
        out.echo(findings_verdict(findings, strict))
    click.get_current_context().exit(code)


# ------------------------------------------------------------------- explain
@click.command("explain", short_help="Derived sizes and validation rules, in words.")
@output_options(formats=("table", "json"), show_all=False)
@config_options
def explain_cmd(fmt, quiet, **kwargs):
    """Explain a configuration: derived sizes with formulas, and every rule that applies.

    Works on invalid configurations too: the failing rule is marked, then the
    error is printed and the exit status is 2.

    \b
    Examples:
      simharness explain -n 64 --tp 4 --pp 2
      simharness explain -n 12 --tp 8
    """
    from ..explain import explain

    fields, mcore = config_fields_from_options(**kwargs)
    try:  # the rules build a huge world's pipeline groups: estimate first
        raw = ParallelismFields.from_dict(fields)
    except SimharnessError:
        raw = None  # explain describes it
    if raw is not None:
        layout_memory_check(raw, mcore, "explain", what="explain")
    ex = explain(fields, mcore)
    if fmt == "json":
        out.echo_json(ex.to_dict())
    elif quiet:
        for dv in ex.derived:
            out.echo(f"{dv.name}={dv.value}")
    else:
        out.echo(out.heading("derived sizes") + f"  (mcore {ex.mcore})")
        out.echo(out.render_table(None, [[dv.name, dv.value, dv.formula]
                                          for dv in ex.derived], indent=2, align="lrl"))
        out.echo()
        out.echo(out.heading("rules") + "  (in Megatron's order; [who enforces it])")
        rows: list[Any] = []
        for r in ex.rules:
            mark = (out.style("ok", fg="green") if r.holds else
                    out.style("FAIL", fg="red", bold=True) if r.holds is False else
                    out.dim("?"))
            rows.append([mark, r.name, f"{r.statement} [{r.source}]"])
            rows.append(["", "", out.dim(r.check)])
        out.echo(out.render_table(None, rows, indent=2))
    if ex.error:
        raise SimharnessError(ex.error)


# ------------------------------------------------------------------- version
@click.command("version", short_help="Versions and the default megatron-core profile.")
@output_options(formats=("table", "json"), show_all=False)
def version_cmd(fmt, quiet):
    """Print the simharness, torch and megatron-core versions and the default profile.

    \b
    Example:
      simharness version --format json
    """
    from importlib import metadata

    def installed(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    info = {"simharness": __version__, "torch": installed("torch"),
            "megatron_core": installed("megatron-core"), "mcore_profiles": list(MCORE_PROFILES),
            "default_mcore": DEFAULT_MCORE, "numpy": np.__version__,
            "click": installed("click"), "python": sys.version.split()[0]}
    if fmt == "json":
        out.echo_json(info)
        return
    if quiet:
        out.echo(__version__)
        return
    out.echo(out.render_table(None, [
        [out.heading("simharness"), __version__],
        [out.heading("torch"), info["torch"] or "not installed"],
        [out.heading("megatron-core"),
         f"profiles {', '.join(MCORE_PROFILES)}; default {DEFAULT_MCORE} (--mcore); installed: "
         f"{info['megatron_core'] or 'no'}"],
        [out.heading("python"), f"{info['python']} (numpy {info['numpy']}, click "
                                f"{info['click']})"],
    ]))
