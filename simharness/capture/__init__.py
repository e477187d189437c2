"""Capture: run the user's own initialisation code for every rank, record and check its groups.

* :mod:`.record` - what a capture records (:class:`Capture`, :class:`GroupCall`; pure);
* :mod:`.checks` - :func:`check_capture`, the findings (pure: numpy and the core);
* :mod:`.inprocess` - every rank in forked workers of one interpreter under torch's
  ``fake`` backend (:func:`capture`, :func:`run_program`; ``--fast``), through the workers
  of :mod:`.fork_pool`, with a few ranks run again alone by :mod:`.crosscheck`;
* :mod:`.faithful` - every rank its own interpreter, started through
  :mod:`simharness.launch` (the default), each running the capture worker
  :mod:`.faithful_rank`;
* :mod:`.runtime` - what runs inside a rank: the recording ``new_group``.

Importing this package does not import torch; the runners do when they run. The package
itself is callable, ``simharness.capture(fn, world_size, ...)`` being :func:`capture`.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .checks import check_capture
from .record import (
    CAPTURE_SCHEMA,
    Capture,
    CaptureError,
    GetterSpec,
    GroupCall,
    RankRecord,
    parse_rank_spec,
)

_LAZY = {"capture": "inprocess", "capture_command": "inprocess", "run_program": "inprocess",
         "program_from_command": "inprocess", "failure_message": "inprocess",
         "Program": "inprocess"}

__all__ = ["CAPTURE_SCHEMA", "Capture", "CaptureError", "GetterSpec", "GroupCall", "RankRecord",
           "check_capture", "parse_rank_spec", *_LAZY]


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'simharness.capture' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


class _CallablePackage(types.ModuleType):
    """``simharness.capture(...)``: the package called is :func:`.inprocess.capture`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .inprocess import capture

        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
