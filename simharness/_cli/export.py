"""``simharness export``: the layout as JSON (schema simharness.layout/1) or CSV;
``simharness verify-export``: the checks on an exported file."""

from __future__ import annotations

import click

from ..layout import Layout
from ..planfile import plan_json, read_plan
from . import output as out
from .check import _run_check, echo_findings_as
from .options import config_options, load_layout, output_options
from .output import findings_exit_code
from .render import short_line


def register(main: click.Group) -> None:
    main.add_command(export_cmd)
    main.add_command(verify_export_cmd)


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
    out.check_format_suffix(fmt, out_path)
    layout, _ = load_layout(kwargs, "export" if fmt == "json" else "export-csv")
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
    layout = read_plan(file)
    findings = _run_check(layout)
    echo_findings_as(findings, fmt=fmt, quiet=quiet, strict=strict,
                     title=f"{file}: {short_line(layout)}",
                     head=lambda: {"file": file, "summary": layout.summary()})
    click.get_current_context().exit(findings_exit_code(findings, strict))
