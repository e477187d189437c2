"""What every command module of the ``simharness`` command line imports, in one place.

Moved: the flags and their merging live in :mod:`simharness._cli.options`, the
``error:`` line and exit statuses in :mod:`simharness._cli.errors`. This module
re-exports both, private names included, so ``from .common import ...`` keeps working
for one release; new code imports from the module that holds the name.
"""

from __future__ import annotations

from .errors import (  # noqa: F401 - re-exported
    DEBUG_ENV,
    EXIT_FINDINGS,
    EXIT_RUNTIME,
    EXIT_USAGE,
    InputError,
    SimharnessGroup,
    _crash_site,
    _error,
    _no_such_option,
    _one_line,
    _os_error_line,
    _rss_words,
    _silence_stdout,
    _usage_hint,
    fail,
    refuse_option_as_command,
)
from .options import (  # noqa: F401 - re-exported
    _CONFIG_OPTIONS,
    _FIELD_PARAMS,
    _FLAG_DECLS,
    _INT,
    _POS,
    CONFIG_PARAMS,
    DEFAULT_GPUS_PER_NODE,
    WholeNumber,
    _csv_ints,
    _field_value,
    _gpus_per_node,
    _no_flag_conflict,
    _read_file,
    config_fields_from_options,
    config_flags_given,
    config_from_options,
    config_options,
    layout_from_options,
    load_layout,
    node_shape,
    output_options,
)

__all__ = [
    "CONFIG_PARAMS", "DEBUG_ENV", "DEFAULT_GPUS_PER_NODE", "EXIT_FINDINGS", "EXIT_RUNTIME",
    "EXIT_USAGE", "InputError", "SimharnessGroup",
    "config_fields_from_options", "config_flags_given", "config_from_options", "config_options",
    "fail", "layout_from_options", "node_shape", "output_options",
]
