"""The command a capture runs, checked before any rank starts (pure: no torch import).

``-- python SCRIPT.py ARGS`` or ``-- python -m MODULE ARGS`` (``python`` optional) becomes
a :class:`Target`. A missing script, a file that is not Python source, or ``torchrun``/
``srun`` in place of ``python`` is a :class:`CaptureError` naming it.

>>> parse_command(["python", "-m", "json.tool", "x.json"]).argv
('-m', 'json.tool', 'x.json')
>>> parse_command(["torchrun", "train.py"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
simharness.capture.record.CaptureError: capture runs a Python script in every rank itself: ...
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from .record import CaptureError

_PYTHON = re.compile(r"^python[0-9.]*$")


@dataclass(frozen=True)
class Target:
    """A script (``path`` set) or a module (``module`` set) and its arguments."""

    path: str | None
    module: str | None
    args: tuple[str, ...]

    @property
    def argv(self) -> tuple[str, ...]:
        """What follows ``python`` on the command line."""
        head = ("-m", self.module) if self.module else (self.path or "",)
        return (*head, *self.args)

    @property
    def label(self) -> str:
        return "python " + " ".join(self.argv)


def check_source(path: str) -> str:
    """The script's source; a :class:`CaptureError` when it cannot be read or is not Python."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read the script ({exc.strerror or exc}); check "
                           f"the path.") from None
    try:
        source = raw.decode("utf-8")
        ast.parse(source, path)
    except UnicodeDecodeError:
        raise CaptureError(f"{path}: not a Python script (not UTF-8 text); capture runs "
                           f"`python SCRIPT.py`.") from None
    except SyntaxError as exc:
        raise CaptureError(f"{path}:{exc.lineno}: not a Python script, or one that does not "
                           f"parse ({exc.msg}); fix it and capture again.") from None
    except ValueError as exc:  # e.g. NUL bytes
        raise CaptureError(f"{path}: not a Python script ({exc}); capture runs "
                           f"`python SCRIPT.py`.") from None
    return source


def parse_command(command: Sequence[str]) -> Target:
    """``python SCRIPT.py ARGS`` / ``python -m MODULE ARGS`` -> :class:`Target` (checked)."""
    args = list(command)
    if args and (_PYTHON.match(os.path.basename(args[0])) or args[0] == sys.executable):
        args = args[1:]
    if not args:
        raise CaptureError("no command to capture: add `-- python my_init.py ARGS` (or "
                           "`-- python -m module ARGS`) after the capture's own flags.")
    if args[0] == "-m":
        if len(args) < 2:
            raise CaptureError("`python -m` needs a module name: `-- python -m pkg.init ARGS`.")
        module = args[1]
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or spec.origin is None:
            raise CaptureError(f"-m {module}: no such module on the Python path; check the "
                               f"name or run from the directory that holds it.")
        return Target(None, module, tuple(args[2:]))
    script = args[0]
    if not script.endswith(".py") and not os.path.isfile(script):
        raise CaptureError(f"capture runs a Python script in every rank itself: give "
                           f"`-- python SCRIPT.py ARGS` or `-- python -m MODULE ARGS`, not "
                           f"`{' '.join(args[:3])}` (drop torchrun/srun: capture plays every "
                           f"rank).")
    check_source(script)
    return Target(script, None, tuple(args[1:]))
