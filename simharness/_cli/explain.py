"""``simharness explain``: derived sizes with their formulas and every rule, in words."""

from __future__ import annotations

from typing import Any

import click

from ..errors import SimharnessError
from ..fields import ParallelismFields
from ..resources import layout_memory_check
from . import output as out
from .options import config_fields_from_options, config_options, output_options


def register(main: click.Group) -> None:
    main.add_command(explain_cmd)


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
        _echo_explain(ex)
    if ex.error:
        raise SimharnessError(ex.error)


def _echo_explain(ex) -> None:
    """The table form: derived sizes with formulas, then every rule marked ok/FAIL/?."""
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
