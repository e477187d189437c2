"""``simharness version``: the simharness, torch and megatron-core versions."""

from __future__ import annotations

import click

from .. import __version__
from ..config import DEFAULT_MCORE, MCORE_PROFILES
from ..reports import versions
from . import output as out
from .options import output_options


def register(main: click.Group) -> None:
    main.add_command(version_cmd)


@click.command("version", short_help="Versions and the default megatron-core profile.")
@output_options(formats=("table", "json"), show_all=False)
def version_cmd(fmt, quiet):
    """Print the simharness, torch and megatron-core versions and the default profile.

    \b
    Example:
      simharness version --format json
    """
    info = versions()
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
