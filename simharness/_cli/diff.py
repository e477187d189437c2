"""``simharness diff``: two layouts side by side (two files, or one configuration with an
option toggled, a field changed or two megatron-core profiles)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click
import numpy as np

from ..config import GROUP_FIELDS, ParallelismConfig
from ..errors import SimharnessError
from ..fields import ParallelismFields
from ..layout import Layout, build_layout
from ..planfile import read_plan
from ..reports import communicator_deltas, kind_change_counts
from . import output as out
from .errors import fail
from .options import (
    config_fields_from_options,
    config_flags_given,
    config_from_options,
    config_options,
    dp_impl_from_options,
    launch_from_options,
    output_options,
)
from .render import range_text, short_line

TOGGLES = tuple(f for f in GROUP_FIELDS
                if isinstance(getattr(ParallelismConfig, f, None), bool))


def register(main: click.Group) -> None:
    main.add_command(diff_cmd)


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
        return read_plan(path)
    fields, mcore = config_fields_from_options(**{**kwargs, "config_file": path})
    try:
        return build_layout(ParallelismFields.from_dict(fields), mcore)
    except SimharnessError as exc:
        raise SimharnessError(f"{path}: {exc}") from None


def _describe_value(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return "-" if v is None else str(v)


def _dist(c: np.ndarray) -> str:
    if c.size == 0:
        return "-"
    lo, hi = int(c.min()), int(c.max())
    return range_text(lo, hi)


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

    dp = dp_impl_from_options(**kwargs)
    launch, launch_from = launch_from_options(**kwargs)
    d = diff_layouts(*_sides(files, toggles, changes, kwargs), dp.impl, dp.sharding)
    code = 1 if (exit_code or quiet) and not d.identical else 0
    if fmt == "json":
        doc = d.to_dict(limit=None if show_all else 64)
        doc["dp_impl"] = dp.to_dict()
        doc["all_gather_memory"] = _memory_words(d, dp, launch)
        out.echo_json(doc)
    elif fmt == "csv":
        rows: list[list[str]] = []
        for k in d.changed_kinds:
            for sign, arr in (("removed", k.removed), ("added", k.added)):
                rows.extend([k.kind, sign, out.ranks_cell(r)] for r in np.asarray(arr))
        out.echo_csv(["kind", "change", "ranks"], rows)
    elif not quiet:
        _echo_diff(d, show_all, "as Megatron-FSDP runs it" if dp.impl == "unknown"
                   else f"for {dp.name}")
        _echo_readers(d, dp, launch, launch_from)
    click.get_current_context().exit(code)


def _ag_profile(layout: Layout) -> str:
    from ..ag_readers import AG_PROFILES

    return layout.mcore if layout.mcore in AG_PROFILES else "0.19"


def _memory_words(d, dp, launch: str) -> str | None:
    """Which memory case the change in communicators is, when side B has an AG group."""
    from ..ag_readers import memory_case

    b = d.b
    if not b.has("dp_cp_ag"):
        return None
    return memory_case(launch, dp.reads(_ag_profile(b)))


def _echo_readers(d, dp, launch: str, launch_from: str) -> None:
    """Who reads the all-gather group, in ag_readers' words: what the diff above means for
    the data-parallel implementation, and (unknown) for the others too."""
    from ..diff import all_gather_diffs

    a, b = d.a, d.b
    if not (a.has("dp_cp_ag") or b.has("dp_cp_ag")):
        return
    profile = _ag_profile(b if b.has("dp_cp_ag") else a)
    out.echo(out.dim(f"  {dp.describe()}"))
    out.echo(f"  {dp.sentence(profile)}")
    if dp.impl == "unknown":
        other = all_gather_diffs(a, b, "dist-opt")["dense"]
        out.echo(f"  above: Megatron-FSDP; under DDP with the distributed optimizer (or plain "
                 f"DDP, torch FSDP2) the dense all-gather stays on {other.kinds[1]}: "
                 f"{'unchanged' if not other.changed else 'it changes too'}")
    mem = _memory_words(d, dp, launch)
    if mem:
        out.echo(f"  communicators per rank above: {mem} ({launch_from})")


def _sides(files: Sequence[str], toggles: Sequence[str], changes: Sequence[str],
           kwargs: dict) -> tuple[Layout, Layout]:
    """Layouts A and B: the two FILES, or the configuration against itself changed."""
    mcores = tuple(kwargs.get("mcore") or ())
    if len(mcores) > 2:
        fail(f"--mcore given {len(mcores)} times; give it once (both sides) or twice (A, B).")
    if not files:
        if not (toggles or changes or len(mcores) == 2):
            fail("nothing to compare: give --toggle FIELD (e.g. create_all_gather_group), "
                 "--change FIELD=VALUE, --mcore twice, or two files.")
        return _changed_sides(kwargs, mcores, toggles, changes)
    if len(files) != 2:
        fail(f"diff takes two files (A and B), got {len(files)}; or give one configuration "
             f"with --toggle, --change or two --mcore.")
    if toggles or changes or len(mcores) == 2:
        fail("give two files, or one configuration with --toggle/--change/--mcore twice; "
             "not both.")
    if kwargs.get("config_file"):
        fail("--config and two FILES both name configurations; give the two FILES only.")
    kw = {**kwargs, "mcore": mcores[:1]}
    return _read_side(files[0], kw), _read_side(files[1], kw)


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


def _echo_diff(d, show_all: bool, whose: str = "") -> None:
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
    moved = ""
    if changed.size:
        deltas = communicator_deltas(d)
        moved = (f"; {changed.size} of {len(d.common_ranks)} ranks change ("
                 + ", ".join(f"{int(x):+d}" for x in deltas[:4]) + ")")
    out.echo(out.render_table(None, [
        [out.heading("new_group calls"), f"{na} -> {nb} ({nb - na:+d})"],
        [out.heading("communicators per rank"), f"{_dist(ca)} -> {_dist(cb)}{moved}"],
    ]))
    out.echo()
    counts = kind_change_counts(d)
    out.echo(out.heading("kinds") + f"  {counts['added']} added, {counts['removed']} removed, "
             f"{counts['changed']} changed, {counts['unchanged']} unchanged")
    for k in d.changed_kinds:
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
    out.echo(out.heading("parameter all-gather") + (f"  {out.dim(whose)}" if whose else ""))
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
