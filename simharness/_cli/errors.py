"""How every ``simharness`` command ends: one ``error:`` line and an exit status.

Raise :class:`InputError` (``fail(message)``) or any
:class:`~simharness.errors.SimharnessError` for bad input: :class:`SimharnessGroup`
prints it as one line ``error: ...`` on stderr and exits 2; click's usage errors get
the same treatment. Commands signal other exit statuses with ``ctx.exit(code)``;
they never return ints. Exit statuses: 0 ok, 1 findings (:data:`EXIT_FINDINGS`),
2 bad input or a request too large for this machine (:data:`EXIT_USAGE`), 3 a
runtime failure or crash (:data:`EXIT_RUNTIME`; ``SIMHARNESS_DEBUG=1`` shows a
crash's traceback).

The mapping, in :meth:`SimharnessGroup.main` (the line goes to stderr):

- a click usage error (bad flag or value): click's message and ``(see 'CMD --help')``, exit 2;
  an unknown option names the ``--set FIELD=VALUE`` form or a close spelling;
- :class:`SimharnessError`: its message, exit 2;
- ``OSError`` on a path: ``PATH: what went wrong; the fix``, exit 2;
- ``UnicodeDecodeError``: the input file is not UTF-8 text, exit 2;
- ``BrokenPipeError`` (``simharness export | head``): nothing, exit 0;
- click's ``Abort``, ``KeyboardInterrupt``, ``EOFError``: ``aborted``, exit 130;
- ``MemoryError``: out of memory with the peak RSS, exit 3;
- anything else is a crash: ``internal error: ...`` and where, exit 3.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import click

from .. import envvars
from ..config import ALIASES, ParallelismConfig
from ..errors import SimharnessError
from ..fieldtypes import FIELD_TYPES

# Exit statuses of every command (README "Exit status").
EXIT_FINDINGS = 1  # the command ran and found an error (check, verify-export, replay mismatch)
EXIT_USAGE = 2     # bad input or a request this machine cannot hold, refused before work
EXIT_RUNTIME = 3   # the work started and failed: a rank died, a crash (a simharness bug)
DEBUG_ENV = "SIMHARNESS_DEBUG"  # set to 1: an unexpected exception shows its traceback

__all__ = [
    "DEBUG_ENV", "EXIT_FINDINGS", "EXIT_RUNTIME", "EXIT_USAGE", "InputError", "SimharnessGroup",
    "fail", "refuse_option_as_command",
]


class InputError(SimharnessError):
    """Bad command-line input (conflicting flags, a bad value): ``error: <message>``, exit 2."""


def fail(message: str) -> NoReturn:
    """Raise :class:`InputError` with ``message`` (one line: the values and the fix)."""
    raise InputError(message)


# --------------------------------------------------------------------------- errors
def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _usage_hint(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        return f" (see '{ctx.command_path} --help')"
    return ""


class SimharnessGroup(click.Group):
    """A click group whose every bad input ends as one ``error:`` line and exit 2.

    Handles click's usage errors, :class:`SimharnessError` (the library's and
    :class:`InputError`), unreadable/unwritable paths (``OSError``) and a closed
    stdout pipe (``simharness export | head``). Any other exception is a crash:
    one ``error: internal error: ...`` line and exit 3 (never 1, which means
    "findings"); ``SIMHARNESS_DEBUG=1`` lets the traceback through.
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        no_args_help = getattr(click.exceptions, "NoArgsIsHelpError", ())
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except no_args_help as exc:  # bare `simharness` / `simharness topology`: the help
            click.echo(exc.format_message(), color=exc.ctx.color)
            sys.exit(0)
        except click.NoSuchOption as exc:
            _error(_no_such_option(exc) + _usage_hint(exc), exc.exit_code)
        except click.ClickException as exc:
            _error(exc.format_message() + _usage_hint(exc), exc.exit_code)
        except SimharnessError as exc:
            _error(str(exc), 2)
        except BrokenPipeError:
            _silence_stdout()
            sys.exit(0)
        except UnicodeDecodeError as exc:  # a reader that missed its own check: still one line
            _error(f"an input file is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                   f"pass the text file the option expects", 2)
        except OSError as exc:
            _error(_os_error_line(exc), 2)
        except (click.Abort, KeyboardInterrupt, EOFError):
            _error("aborted", 130)
        except MemoryError:
            if envvars.debug_on():
                raise
            _error(f"simharness ran out of memory ({_rss_words()}); try a smaller world or "
                   f"free memory, and rerun with {DEBUG_ENV}=1 to see where.", EXIT_RUNTIME)
        except Exception as exc:  # a crash: never a traceback, never exit 1 (findings)
            if envvars.debug_on():
                raise
            where = _crash_site(exc)
            _error(f"internal error: {type(exc).__name__}: {exc}{where}; this is a simharness "
                   f"bug, please report it; rerun with {DEBUG_ENV}=1 to see the traceback.",
                   EXIT_RUNTIME)
        sys.exit(rv if isinstance(rv, int) else 0)

    def get_command(self, ctx, cmd_name):
        # Accept a unique prefix of a command name (``simharness insp``).
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            return cmd
        matches = [n for n in self.list_commands(ctx) if n.startswith(cmd_name)]
        if len(matches) == 1:
            return super().get_command(ctx, matches[0])
        return None

    def resolve_command(self, ctx, args):
        cmd_name = args[0] if args else None
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:
            import difflib

            names = self.list_commands(ctx)
            close = difflib.get_close_matches(cmd_name or "", names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise click.UsageError(f"no such command '{cmd_name}'; {hint}commands are: "
                                   f"{', '.join(names)}.", ctx) from None


def _os_error_line(exc: OSError) -> str:
    """``PATH: what went wrong; the fix`` for a file the command could not read or write."""
    import errno

    path = getattr(exc, "filename", None)
    text = str(exc.strerror or exc)
    if path is None or ";" in text:  # no path, or a message that already says what to do
        return f"{path}: {text}" if path else text
    fixes = {errno.ENOENT: "check the path (its folder must exist)",
             errno.EACCES: "choose a path you may read or write",
             errno.EROFS: "choose a path on a writable file system",
             errno.EISDIR: "give a file name, not a folder",
             errno.ENOSPC: "free some space or choose another disk"}
    return f"{path}: {text}; {fixes.get(exc.errno or 0, 'check the path and its permissions')}"


def _no_such_option(exc: click.NoSuchOption) -> str:
    """Click's 'no such option', with a suggestion only when it is likely meant.

    A ParallelismConfig field without a flag of its own (``--sequence-parallel``)
    points at ``--set``; otherwise only a close spelling (difflib ratio >= 0.75) is
    offered: click's own cut-off turns ``--sequence-parallel`` into
    ``--context-parallel-size``.
    """
    import difflib

    option = exc.option_name
    message = f"no such option '{option}'"
    field = ALIASES.get(option.lstrip("-").replace("-", "_"),
                        option.lstrip("-").replace("-", "_"))
    params = {p.name for p in exc.ctx.command.params} if exc.ctx is not None else set()
    if field in ParallelismConfig.field_names() and "set_fields" in params:
        ftype = FIELD_TYPES.get(field)
        example = "true" if ftype is not None and ftype.kind == "bool" else "VALUE"
        return (f"{message}; {field} has no flag of its own: pass it as "
                f"--set {field}={example}.")
    close = difflib.get_close_matches(option, sorted(exc.possibilities or ()), n=1,
                                      cutoff=0.75)
    return message + (f"; did you mean '{close[0]}'?" if close else ".")


def refuse_option_as_command(command: tuple[str, ...]) -> None:
    """Under ``ignore_unknown_options`` a misspelt option becomes the command's first word
    (``simharness run --junit x.xml -- pytest t.py``); report it as click reports an
    unknown option, with the close spelling, not as a bad command."""
    if not command or not command[0].startswith("-") or command[0] == "-":
        return
    ctx = click.get_current_context()
    opts = [o for p in ctx.command.params
            for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))]
    raise click.NoSuchOption(command[0].partition("=")[0], possibilities=opts, ctx=ctx)


def _error(message: str, code: int) -> NoReturn:
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError, OSError):
        _silence_stdout()
    click.echo(f"error: {_one_line(message)}", err=True)
    sys.exit(code)


def _crash_site(exc: BaseException) -> str:
    """`` (at file.py:123 in func)``: the innermost simharness frame of ``exc``, or ``""``."""
    import traceback

    site = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if "simharness" in frame.filename.replace("\\", "/").split("/"):
            site = f" (at {os.path.basename(frame.filename)}:{frame.lineno} in {frame.name})"
    return site


def _rss_words() -> str:
    """``peak RSS 1.2 GiB``: this process's high-water mark (Linux ``ru_maxrss`` is KiB)."""
    import resource

    return f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} GiB"


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # e.g. CliRunner's in-memory stdout
        pass
