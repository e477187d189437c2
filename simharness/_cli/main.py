"""The ``simharness`` command line (console script ``simharness`` -> ``main`` here).

Each command is a module-level click command in a module of ``simharness._cli``
that adds it with ``register(main)``: ``inspect``, ``check``, ``diff``, ``export``
(export, verify-export), ``explain``, ``version``, ``topology`` (topology, place,
simulate), ``replay``, ``datapath`` (replay-data), ``capture``, ``run`` and ``demo``.
Shared flags and their merging: ``simharness._cli.options``; the ``error:`` line and
exit statuses: ``simharness._cli.errors``; formatting: ``simharness._cli.output`` and
``simharness._cli.render``.

Every bad input prints one ``error: ...`` line on stderr and exits 2; a crash
exits 3 (see ``simharness --help``, "Exit status").
"""

from __future__ import annotations

import importlib
import os

import click

import simharness

from . import check, demo, diff, explain, export, inspect, version
from .errors import SimharnessGroup


@click.group("simharness", cls=SimharnessGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(simharness.__version__, "--version", prog_name="simharness",
                      message="%(prog)s %(version)s")
@click.option("--color/--no-color", "color", default=None,
              help="Colour the output (default: only on a terminal; NO_COLOR turns it off).")
@click.pass_context
def main(ctx, color):
    """Simulate and check Megatron-Core process-group layouts.

    \b
    Examples:
      simharness inspect -n 16 --tp 2 --pp 2 --cp 2 --rank 5
      simharness check -n 16 --tp 2 --pp 2 --cp 2
      simharness diff -n 16 --tp 2 --pp 2 --cp 2 --toggle create_all_gather_group
      simharness explain --nodes 8 --tp 8 --pp 4

    Every command takes the parallelism flags (Megatron/NeMo names such as
    --tensor-model-parallel-size/--tp) or --config FILE; see `simharness COMMAND --help`.

    \b
    Exit status:
      0 ok
      1 findings: an error finding (check, verify-export), a replay mismatch
      2 bad input, or a request too large for this machine's memory (refused
        before any work; SIMHARNESS_MEMORY_LIMIT=24G sets the limit)
      3 runtime failure: a replay rank died or timed out, or a simharness crash
        (one line; SIMHARNESS_DEBUG=1 shows the traceback)
    """
    _check_environment()
    if color is None and os.environ.get("NO_COLOR"):
        color = False
    ctx.color = color


def _check_environment() -> None:
    """Every ``SIMHARNESS_*`` variable, strictly, before any command (and before any rank
    that reads one starts); a memory limit above the machine's gets its note here."""
    from simharness import envvars, resources

    envvars.check_environment()
    if os.environ.get(resources.MEMORY_ENV):
        note = resources.available_memory().note
        if note:
            click.echo(f"note: {note}", err=True)


for _module in (inspect, check, diff, export, explain, version):
    _module.register(main)

# Other command families register themselves when present; an error inside
# one of them surfaces (only the module's absence is tolerated).
for _name in ("simharness._cli.topology", "simharness._cli.replay", "simharness._cli.datapath",
              "simharness._cli.capture", "simharness._cli.run"):
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as _exc:
        if _exc.name != _name:
            raise
    else:
        _module.register(main)

demo.register(main)


if __name__ == "__main__":
    main()
