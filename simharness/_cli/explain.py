"""``simharness explain``: derived sizes with their formulas and every rule, in words."""

from __future__ import annotations

from typing import Any

import click

from ..errors import SimharnessError
from ..fields import ParallelismFields
from ..resources import layout_memory_check
from . import output as out
from .options import (
    config_fields_from_options,
    config_options,
    dp_impl_from_options,
    output_options,
)


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
      simharness explain -n 16 --cp 2 --create-all-gather-group --dp-impl dist-opt

    The last section says who reads create_all_gather_group's groups under this
    profile (only Megatron-FSDP), with Megatron's call sites, and what that means
    for the data-parallel implementation (--dp-impl, or the ddp: block of --config).
    """
    from ..explain import explain

    dp = dp_impl_from_options(**kwargs)
    fields, mcore = config_fields_from_options(**kwargs)
    try:  # the rules build a huge world's pipeline groups: estimate first
        raw = ParallelismFields.from_dict(fields)
    except SimharnessError:
        raw = None  # explain describes it
    if raw is not None:
        layout_memory_check(raw, mcore, "explain", what="explain")
    ex = explain(fields, mcore)
    readers = reader_rows(mcore, dp, bool(fields.get("create_all_gather_group")))
    if fmt == "json":
        out.echo_json({**ex.to_dict(), "all_gather_readers": readers})
    elif quiet:
        for dv in ex.derived:
            out.echo(f"{dv.name}={dv.value}")
    else:
        _echo_explain(ex)
        _echo_readers(readers)
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


def reader_rows(mcore: str, dp, option_on: bool) -> dict[str, Any]:
    """Who reads the AG groups under ``mcore`` (:data:`simharness.ag_readers.TABLE`), the
    user's implementation ``dp`` and its sentence: explain's last section."""
    from ..ag_readers import AG_PROFILES, IMPL_NAMES, PINNED, TABLE

    profile = mcore if mcore in AG_PROFILES else "0.19"
    rows = [{"impl": r.impl, "name": IMPL_NAMES[r.impl], "dense": r.dense, "expert": r.expert,
             "sharding": list(r.sharding), "where": r.where,
             "sites": [s.label for s in r.sites]} for r in TABLE[profile]]
    return {"profile": profile, "source": PINNED[profile], "create_all_gather_group": option_on,
            "dp_impl": dp.to_dict(), "readers": rows, "sentence": dp.sentence(profile),
            "describe": dp.describe()}


def _echo_readers(doc: dict[str, Any]) -> None:
    out.echo()
    out.echo(out.heading("all-gather group readers") + f"  ({doc['source']})")
    rows = []
    for r in doc["readers"]:
        mark = "*" if r["impl"] == doc["dp_impl"]["impl"] else " "
        reads = ("reads dp_cp_ag" + (" and ep_dp_ag" if r["expert"] else "")
                 + f" ({', '.join(r['sharding'])})") if r["dense"] else "reads no AG group"
        rows.append([mark, r["name"], reads])
        rows.append(["", "", out.dim(r["where"])])
    out.echo(out.render_table(None, rows, indent=2))
    out.echo(f"  {doc['describe']}")
    out.echo(f"  {doc['sentence']}")
