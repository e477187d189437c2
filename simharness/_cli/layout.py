"""Moved: the layout commands each have their module now; this path re-exports them for one
release.

``inspect`` -> :mod:`simharness._cli.inspect`, ``check`` -> :mod:`simharness._cli.check`,
``diff`` -> :mod:`simharness._cli.diff`, ``export`` and ``verify-export`` ->
:mod:`simharness._cli.export`, ``explain`` -> :mod:`simharness._cli.explain`, ``version``
-> :mod:`simharness._cli.version`; the shared views (summary, kind tables) ->
:mod:`simharness._cli.render`; loading a layout from the flags ->
:func:`simharness._cli.options.load_layout`.
"""

from __future__ import annotations

import click

from ..planfile import read_plan as _read_export  # noqa: F401 - re-exported
from ..reports import findings_report as _findings_json  # noqa: F401 - re-exported
from ..reports import same_groups_as as _same_as  # noqa: F401 - re-exported
from . import check as _check
from . import diff as _diff
from . import explain as _explain
from . import export as _export
from . import inspect as _inspect
from . import version as _version
from .check import _findings_csv, _run_check, check_cmd  # noqa: F401 - re-exported
from .diff import (  # noqa: F401 - re-exported
    TOGGLES,
    _changed_sides,
    _describe_value,
    _dist,
    _echo_diff,
    _parse_change,
    _read_side,
    diff_cmd,
)
from .explain import explain_cmd  # noqa: F401 - re-exported
from .export import _export_csv, export_cmd, verify_export_cmd  # noqa: F401 - re-exported
from .inspect import _inspect_grid, _inspect_rank, inspect_cmd  # noqa: F401 - re-exported
from .options import load_layout as _load  # noqa: F401 - re-exported
from .render import (  # noqa: F401 - re-exported
    all_gather_words,
    echo_kind,
    echo_kinds,
    echo_summary,
    kind_title,
    kinds_dict,
    short_line,
    sizes_line,
    summary_rows,
)
from .render import range_text as _range  # noqa: F401 - re-exported
from .version import version_cmd  # noqa: F401 - re-exported


def register(main: click.Group) -> None:
    """Add the layout commands (inspect, check, diff, export, verify-export, explain,
    version) to ``main``."""
    for module in (_inspect, _check, _diff, _export, _explain, _version):
        module.register(main)
