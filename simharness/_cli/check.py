"""``simharness check``: every check on a configuration's layout; exit 1 on a failing finding.

:func:`echo_findings_as` prints findings in every format (``verify-export`` uses it too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..layout import Layout
from ..reports import findings_report
from . import output as out
from .options import (
    config_options,
    dp_impl_from_options,
    launch_from_options,
    load_layout,
    megatron_args_options,
    output_options,
)
from .output import echo_findings, findings_exit_code, findings_verdict
from .render import WORLD_AUTO_WORDS, short_line


def register(main: click.Group) -> None:
    main.add_command(check_cmd)


def _run_check(layout: Layout, **kw):
    """Every check on ``layout``, as a list (``kw``: ``dp``, ``launch``)."""
    from ..checks import check

    return list(check(layout, **kw))


def _findings_csv(findings) -> None:
    out.echo_csv(["code", "severity", "message", "ranks", "groups"],
                 ([f.code, f.severity, f.message, out.ranks_cell(f.ranks), " ".join(f.groups)]
                  for f in findings))


def echo_findings_as(findings, *, fmt: str, quiet: bool, strict: bool, title: str,
                     head: Callable[[], dict[str, Any]]) -> None:
    """The findings as ``fmt``: JSON (the keys ``head()`` returns first), CSV, or ``title``
    then the findings and the verdict."""
    if fmt == "json":
        out.echo_json(findings_report(findings, strict, **head()))
    elif fmt == "csv":
        _findings_csv(findings)
    elif not quiet:
        out.echo(out.dim(title))
        echo_findings(findings, strict=strict)
        out.echo(findings_verdict(findings, strict))


@click.command("check", short_help="Run every check; exit 1 on error findings.")
@click.option("--strict", is_flag=True, default=False, help="Warnings fail too (exit 1).")
@output_options(show_all=False)
@config_options
@megatron_args_options()
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
      simharness check -n 16 --cp 2 --create-all-gather-group --dp-impl dist-opt

    Who reads the all-gather group depends on the data-parallel implementation
    (--dp-impl, or the ddp: block of a recipe): only Megatron-FSDP does. What an
    unread group costs depends on the launch (--lazy-communicators, the default and
    Megatron-LM's own init, or --eager-communicators).
    """
    dp = dp_impl_from_options(**kwargs)
    launch, launch_from = launch_from_options(**kwargs)
    layout, world_auto = load_layout(kwargs, "check")
    findings = _run_check(layout, dp=dp, launch=launch)
    title = short_line(layout)
    if world_auto:  # the same words as inspect's summary
        title += f"\nworld: {layout.world_size} ranks ({WORLD_AUTO_WORDS})"
    if layout.config.create_all_gather_group or dp.impl != "unknown":
        title += f"\n{dp.describe()}; communicators {launch} ({launch_from})"
    echo_findings_as(findings, fmt=fmt, quiet=quiet, strict=strict, title=title,
                     head=lambda: {"summary": layout.summary(), "world_auto": world_auto,
                                   "dp_impl": dp.to_dict(), "communicators": launch})
    click.get_current_context().exit(findings_exit_code(findings, strict))
