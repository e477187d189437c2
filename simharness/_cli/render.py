"""Text views of a layout that several commands print: the summary, the kind tables.

``inspect`` prints them, ``demo`` reuses them, ``check`` and ``diff`` head their
output with :func:`short_line`. Generic formatting (tables, rank lists, colour)
is in :mod:`simharness._cli.output`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import ParallelismConfig
from ..layout import Layout
from ..reports import same_groups_as
from . import output as out


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


def range_text(lo: int, hi: int) -> str:
    """``3`` or ``2..5``."""
    return str(lo) if lo == hi else f"{lo}..{hi}"


def all_gather_words(layout: Layout, dp=None) -> str:
    """Where the dense parameter all-gather runs, for ``dp`` (a
    :class:`~simharness.ag_readers.DPImpl`; None: not known), in ag_readers' words."""
    from ..ag_readers import AG_PROFILES, UNKNOWN, all_gather_use

    dp = dp or UNKNOWN
    profile = layout.mcore if layout.mcore in AG_PROFILES else "0.19"
    on = layout.config.create_all_gather_group and layout.has("dp_cp_ag")
    who = "" if dp.impl == "unknown" else f" ({dp.name})"
    return (f"create_all_gather_group {out.onoff(layout.config.create_all_gather_group)}: dense "
            f"parameter all-gather{who} {all_gather_use(profile, dp, option_on=on)}")


#: the note when no world was given and the sizes chose the smallest (inspect, check)
WORLD_AUTO_WORDS = "smallest world these sizes fit; set --world-size or --nodes"


def summary_rows(layout: Layout, *, world_auto: bool = False, dp=None) -> list[list[str]]:
    s = layout.summary()
    cfg = layout.config
    c = s["communicators_per_rank"]
    world = f"{layout.world_size} ranks"
    if world_auto:
        world += f" ({WORLD_AUTO_WORDS})"
    if layout.rank_offset:
        world += f", ranks {layout.ranks.start}..{layout.ranks.stop - 1}"
    order = f"{cfg.order} ({'pp last' if cfg.pp_last else 'pp not last'})"
    n = cfg.num_distributed_optimizer_instances
    rows = [
        ["world", world],
        ["mcore", f"{layout.mcore} profile"],
        ["order", order],
        ["sizes", sizes_line(cfg)],
        ["all-gather", all_gather_words(layout, dp)],
    ]
    if n > 1:
        rows.append(["optimizer", f"{n} distributed-optimizer instances of "
                                  f"{cfg.intra_partial_data_parallel_size} DP ranks"])
    rows += [
        ["groups", f"{s['new_group_calls']} new_group calls in {s['kinds']} kinds"],
        ["communicators", f"{range_text(c['total_min'], c['total_max'])} per rank (nccl up to "
                          f"{c['nccl_max']}, gloo up to {c['gloo_max']})"],
    ]
    return rows


def echo_summary(layout: Layout, *, world_auto: bool = False, dp=None) -> None:
    rows = summary_rows(layout, world_auto=world_auto, dp=dp)
    out.echo(out.render_table(None, [[out.heading(a), b] for a, b in rows]))


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
        echo_kind(layout, kind, show_all=show_all, same=same_groups_as(layout, kind, shown),
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
