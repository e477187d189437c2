"""Every ``SIMHARNESS_*`` environment variable, read strictly in one place.

Environment variables are inputs like flags: a value that is not one of the accepted
forms is refused with one line (:class:`EnvVarError`, exit 2 from the CLI) naming the
variable, the value and the forms, whatever the command does with it. The CLI checks
the whole environment before any command runs (:func:`check_environment`), so a bad
value meant for the rank processes (read only after they start) is refused before a
rank starts; the rank-side readers call :func:`read` too, so a rank started by hand
(torchrun, srun) fails as clearly.

Who reads each variable (:attr:`EnvVar.reader`):

- ``simharness``: the user's settings (:data:`USER`).
- ``ranks``: set by simharness for the processes it starts (:data:`INTERNAL`); a value
  set by hand is checked the same way.
- ``tests``: read by the test suite and the scripts under ``scripts/``, never by
  simharness (:data:`TEST_SUITE`); accepted and left alone.

Any other ``SIMHARNESS_*`` name is refused with the closest known name, so a typo
(``SIMHARNESS_MEMORY_LIMT=24G``) is not silently ignored.

>>> read("SIMHARNESS_MEMORY_LIMIT", {"SIMHARNESS_MEMORY_LIMIT": "24G"})
25769803776
>>> read("SIMHARNESS_EAGER_SUBGROUPS", {}), read("SIMHARNESS_EAGER_SUBGROUPS", {
...     "SIMHARNESS_EAGER_SUBGROUPS": "yes"})
(False, True)
>>> try:
...     read("SIMHARNESS_CAPTURE_START_SLOTS", {"SIMHARNESS_CAPTURE_START_SLOTS": "abc"})
... except EnvVarError as e:
...     print(str(e)[:66])
SIMHARNESS_CAPTURE_START_SLOTS='abc' is not a whole number >= 0; a
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .errors import SimharnessError

PREFIX = "SIMHARNESS_"


class EnvVarError(SimharnessError, ValueError):
    """A ``SIMHARNESS_*`` variable with a value that is not one of its accepted forms, or
    an unknown ``SIMHARNESS_*`` name (exit 2)."""


class _Bad(Exception):
    """Raised by a parser: the value is not one of the forms (the reason in words)."""


# ------------------------------------------------------------------------ values
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])i?b?|b)?\s*$", re.IGNORECASE)


def size_bytes(text: str | int) -> int | None:
    """A size in bytes, powers of 1024: ``24G``, ``512MiB``, ``4Gi``, ``1.5K``, ``64b``,
    ``1000``; None when ``text`` is not one or is not a whole number of bytes. The one
    reading of sizes for every option and variable that takes one.

    >>> size_bytes("24G"), size_bytes("512MiB"), size_bytes("1.5K"), size_bytes(" 7 b ")
    (25769803776, 536870912, 1536, 7)
    >>> size_bytes("1.5"), size_bytes("4 GB/s"), size_bytes("-1"), size_bytes(True)
    (None, None, None, None)
    """
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if text >= 0 else None
    m = _SIZE.match(str(text))
    if not m:
        return None
    value = Fraction(m.group(1)) * (1 << (10 * " kmgt".index((m.group(2) or " ").lower())))
    return int(value) if value.denominator == 1 else None


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _flag(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise _Bad("is not a switch")


def _positive_size(text: str) -> int:
    n = size_bytes(text)
    if n is None:
        raise _Bad("is not a size")
    if n == 0:
        raise _Bad("is zero bytes")
    return n


def _whole(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        t = text.strip()
        if not t.isdigit() or int(t) < low:
            raise _Bad(f"is not a whole number >= {low}")
        return int(t)
    return parse


def _seconds(*, zero_ok: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _Bad("is not a number of seconds") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            raise _Bad(f"is not a number of seconds {'>= 0' if zero_ok else '> 0'}")
        return value
    return parse


def _path(text: str) -> str:
    if not text.strip():
        raise _Bad("is empty")
    return text


def _slots(text: str) -> tuple[str, int]:
    folder, _, count = text.rpartition(":")
    if not folder or not count.isdigit() or int(count) < 1:
        raise _Bad("is not FOLDER:N")
    return folder, int(count)


def _unread(text: str) -> str:
    return text


# ------------------------------------------------------------------------- table
@dataclass(frozen=True)
class EnvVar:
    """One variable: its name, who reads it, the accepted forms in words, the parser,
    and the value when unset (or empty)."""

    name: str
    reader: str  # "simharness", "ranks" or "tests"
    forms: str
    parse: Callable[[str], Any]
    default: Any = None
    what: str = ""


_FLAG_FORMS = "1, true, yes, on or 0, false, no, off (any case)"
VARIABLES: dict[str, EnvVar] = {v.name: v for v in (
    # read by simharness: the user's settings
    EnvVar("SIMHARNESS_MEMORY_LIMIT", "simharness",
           "a size above zero such as 24G, 512M, 1.5G or a byte count; it can only lower the "
           "limit this machine (MemAvailable) or its cgroup gives",
           _positive_size, None, "the memory a command may plan for (simharness.resources)"),
    EnvVar("SIMHARNESS_DEBUG", "simharness", _FLAG_FORMS, _flag, False,
           "an unexpected exception shows its traceback"),
    EnvVar("SIMHARNESS_CAPTURE_START_SLOTS", "simharness",
           "a whole number >= 0 (0: every rank starts at once)", _whole(0), None,
           "how many capture ranks import at once (capture --start-slots)"),
    EnvVar("SIMHARNESS_EAGER_SUBGROUPS", "simharness", _FLAG_FORMS, _flag, False,
           "capture: connect every gloo subgroup at creation"),
    EnvVar("SIMHARNESS_CAPTURE_DIR", "simharness", "a folder path (not empty)", _path, None,
           "where a capture rank started by hand writes its record"),
    EnvVar("SIMHARNESS_GPU", "simharness",
           "a GPU name of the shim's table (docs/gpu-shim.md; simharness run checks it)",
           _path, None, "the GPU the shim's devices report (simharness run --gpu)"),
    EnvVar("SIMHARNESS_LAZY_GROUPS", "simharness", _FLAG_FORMS, _flag, True,
           "the shim: subgroups asked of NCCL connect on first use, as NCCL does "
           "(0: at creation)"),
    # set by simharness for the processes it starts
    EnvVar("SIMHARNESS_PREFIX_OUTPUT", "ranks", _FLAG_FORMS, _flag, False,
           "a rank prefixes its output lines with its rank"),
    EnvVar("SIMHARNESS_START_SLOTS", "ranks", "FOLDER:N with N >= 1", _slots, None,
           "the launcher's start-slot lock folder and count"),
    EnvVar("SIMHARNESS_RUN_DIR", "ranks", "a folder path (not empty)", _path, None,
           "simharness run: the round's folder"),
    EnvVar("SIMHARNESS_RUN_DONE", "ranks", "a file path (not empty)", _path, None,
           "simharness run: the tests an earlier round judged"),
    EnvVar("SIMHARNESS_RUN_TIMEOUT", "ranks", "seconds > 0", _seconds(zero_ok=False), 120.0,
           "simharness run: seconds per test"),
    EnvVar("SIMHARNESS_RUN_ROUND", "ranks", "a whole number >= 0", _whole(0), 0,
           "simharness run: the round number"),
    EnvVar("SIMHARNESS_RUN_GRACE", "ranks", "seconds >= 0", _seconds(zero_ok=True), None,
           "simharness run: seconds a rank waits for a skipped peer"),
    EnvVar("SIMHARNESS_RUN_COLLECT_TIMEOUT", "ranks", "seconds > 0", _seconds(zero_ok=False),
           None, "simharness run: seconds to collect the tests"),
    # read by the test suite and scripts, never by simharness
    *(EnvVar(name, "tests", "anything (read by the test suite, not by simharness)", _unread)
      for name in ("SIMHARNESS_HYPOTHESIS_EXAMPLES", "SIMHARNESS_REQUIRE_PARITY",
                   "SIMHARNESS_UPDATE_GOLDEN", "SIMHARNESS_MCORE_CACHE",
                   "SIMHARNESS_NO_DOWNLOAD", "SIMHARNESS_EDGE_SCALE", "SIMHARNESS_EDGE_SEED",
                   "SIMHARNESS_EXAMPLE_MARKS")),
)}
USER = tuple(n for n, v in VARIABLES.items() if v.reader == "simharness")
INTERNAL = tuple(n for n, v in VARIABLES.items() if v.reader == "ranks")
TEST_SUITE = tuple(n for n, v in VARIABLES.items() if v.reader == "tests")


def _unknown(name: str) -> EnvVarError:
    # compared without the shared prefix, which would make every name look close
    tails = {v[len(PREFIX):]: v for v in VARIABLES}
    close = difflib.get_close_matches(name[len(PREFIX):], list(tails), n=1, cutoff=0.75)
    hint = f"did you mean {tails[close[0]]}? " if close else ""
    return EnvVarError(f"{name} is not a simharness variable; {hint}simharness reads "
                       f"{', '.join(USER)}; unset it.")


def read(name: str, environ: Mapping[str, str] | None = None, *, default: Any = None) -> Any:
    """The value of ``name`` (``default``, else its :attr:`EnvVar.default`, when unset or
    empty), or :class:`EnvVarError` naming the variable, the value and the accepted forms."""
    var = VARIABLES.get(name)
    if var is None:
        raise _unknown(name)
    text = (os.environ if environ is None else environ).get(name)
    if text is None or text == "":
        return var.default if default is None else default
    try:
        return var.parse(text)
    except _Bad as bad:
        raise EnvVarError(f"{name}={text!r} {bad}; accepted: {var.forms}; unset it or fix "
                          f"the value.") from None


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Read every ``SIMHARNESS_*`` variable that is set; raise :class:`EnvVarError` for the
    first bad value or unknown name (in name order, so the message is stable).

    >>> check_environment({"SIMHARNESS_MEMORY_LIMIT": "24G", "HOME": "/root"})
    >>> try:
    ...     check_environment({"SIMHARNESS_MEMORY_LIMT": "24G"})
    ... except EnvVarError as e:
    ...     print(str(e)[:90])
    SIMHARNESS_MEMORY_LIMT is not a simharness variable; did you mean SIMHARNESS_MEMORY_LIMIT?
    """
    env = os.environ if environ is None else environ
    for name in sorted(k for k in env if k.startswith(PREFIX)):
        read(name, env)


def debug_on(environ: Mapping[str, str] | None = None) -> bool:
    """``SIMHARNESS_DEBUG`` for the crash handlers: a bad value counts as off there (the
    CLI has refused it before any command ran)."""
    try:
        return bool(read("SIMHARNESS_DEBUG", environ))
    except EnvVarError:
        return False


__all__ = ["INTERNAL", "PREFIX", "TEST_SUITE", "USER", "VARIABLES", "EnvVar", "EnvVarError",
           "check_environment", "debug_on", "read", "size_bytes"]
