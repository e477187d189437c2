"""``simharness demo``: a 16-rank example with create_all_gather_group off and on."""

from __future__ import annotations

import click

from . import output as out
from .render import echo_kinds, echo_summary


def register(main: click.Group) -> None:
    main.add_command(demo)


@click.command("demo", short_help="A 16-rank example: option off and on, with the checks.")
def demo():
    """A 16-rank layout (tp 2, pp 2, cp 2) with create_all_gather_group off and on, and the checks.

    \b
    Example:
      simharness demo
    """
    import simharness

    base = simharness.ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
                                        pipeline_model_parallel_size=2, context_parallel_size=2)
    for i, ag in enumerate((False, True)):
        layout = simharness.build_layout(base.replace(create_all_gather_group=ag))
        if i:
            out.echo()
        out.echo(out.style(f"== create_all_gather_group {out.onoff(ag)} ==", bold=True,
                           fg="cyan"))
        echo_summary(layout)
        out.echo()
        echo_kinds(layout, layout.kinds, show_all=False)
        out.echo()
        out.echo(out.heading("checks"))
        findings = simharness.check(layout)
        out.echo_findings(findings, indent=2)
        out.echo("  " + out.findings_verdict(findings, strict=False))
