"""Shared pieces of the ``simharness`` command line (stable API for every command module).

Configuration flags
-------------------
``@config_options`` adds every configuration flag to a click command; the
command receives them as keyword arguments and turns them into a validated
configuration with ``config_from_options(**kwargs)``. Keys that are not
configuration flags are ignored, so a command may pass all its kwargs::

    import click
    from simharness._cli.common import (config_from_options, config_options, layout_from_options,
                                        node_shape, output_options)

    def register(main):
        @main.command()
        @config_options
        @output_options()
        @click.option("--topology", type=click.Path())
        def place(topology, fmt, quiet, show_all, **kwargs):
            cfg, mcore = config_from_options(**kwargs)         # ParallelismConfig, profile name
            nodes, gpus_per_node = node_shape(cfg, **kwargs)    # from --nodes/--gpus-per-node/file
            layout = layout_from_options(**kwargs)             # = build_layout(cfg, mcore)

The flags (parameter names in brackets; they equal the
:class:`~simharness.config.ParallelismConfig` field names where there is one):

``--world-size/-n`` [world_size], ``--nodes`` [nodes], ``--gpus-per-node``
[gpus_per_node], ``--tensor-model-parallel-size/--tp``,
``--pipeline-model-parallel-size/--pp``, ``--virtual-pipeline-model-parallel-size/--vpp``,
``--context-parallel-size/--cp``, ``--expert-model-parallel-size/--ep``,
``--expert-tensor-parallel-size/--etp``, ``--num-distributed-optimizer-instances``,
``--order``, ``--use-tp-pp-dp-mapping/--no-use-tp-pp-dp-mapping``,
``--hierarchical-cp-sizes 2,2`` [hierarchical_context_parallel_sizes],
``--gloo/--no-gloo`` [use_gloo_process_groups],
``--create-all-gather-group/--no-create-all-gather-group``,
``--hybrid-context-parallel``, ``--rank-offset``, ``--gtp-remat-size``,
``--expert-gtp-remat-size``, ``--set FIELD=VALUE`` [set_fields] (any other
field, value parsed as YAML, repeatable), ``--config FILE`` [config_file] and
``--mcore 0.16|0.18|0.19`` [mcore]. Every flag defaults to ``None`` ("not given").

Precedence: ``--config`` file < ``--set`` < named flags. The world is
``--world-size``, else ``--nodes * --gpus-per-node`` (8 GPUs per node when not
given), else the file's ``world_size`` (or ``trainer.num_nodes *
trainer.devices``), else the library's smallest valid world. ``--world-size``
and ``--nodes`` that disagree are an error.

``@config_options(mcore_multiple=True)`` makes ``--mcore`` repeatable (its
value is then a tuple; ``config_from_options`` takes the first, or pass
``mcore=`` explicitly).

Helpers: ``config_fields_from_options(**kwargs) -> (dict, mcore)`` (merged fields, not
yet validated: for ``explain``), ``layout_from_options(**kwargs) -> Layout``,
``node_shape(cfg, **kwargs) -> (nodes, gpus_per_node)`` and
``config_flags_given(**kwargs) -> [param names]``.

Output flags
------------
``@output_options(formats=("table", "json", "csv"))`` adds ``--format/-f``
[fmt], ``--quiet/-q`` [quiet] and ``--all`` [show_all]. Format helpers live in
:mod:`simharness._cli.output`.

Errors
------
Raise :class:`InputError` (or any :class:`~simharness.errors.SimharnessError`)
for bad input: :class:`SimharnessGroup` prints it as one line ``error: ...``
on stderr and exits 2; click's usage errors get the same treatment. Commands
signal other exit statuses with ``ctx.exit(code)``; they never return ints.
Exit statuses: 0 ok, 1 findings (:data:`EXIT_FINDINGS`), 2 bad input or a
request too large for this machine (:data:`EXIT_USAGE`), 3 a runtime failure
or crash (:data:`EXIT_RUNTIME`; ``SIMHARNESS_DEBUG=1`` shows a crash's traceback).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

from ..config import ALIASES, DEFAULT_MCORE, MCORE_PROFILES, TP_PP_DP_ORDER, ParallelismConfig
from ..errors import SimharnessError
from ..fieldtypes import FIELD_TYPES
from ..profiles import profiles_help

if TYPE_CHECKING:
    from ..configfile import ConfigFile

DEFAULT_GPUS_PER_NODE = 8

# Exit statuses of every command (README "Exit status").
EXIT_FINDINGS = 1  # the command ran and found an error (check, verify-export, replay mismatch)
EXIT_USAGE = 2     # bad input or a request this machine cannot hold, refused before work
EXIT_RUNTIME = 3   # the work started and failed: a rank died, a crash (a simharness bug)
DEBUG_ENV = "SIMHARNESS_DEBUG"  # set to 1: an unexpected exception shows its traceback

__all__ = [
    "CONFIG_PARAMS", "DEBUG_ENV", "DEFAULT_GPUS_PER_NODE", "EXIT_FINDINGS", "EXIT_RUNTIME",
    "EXIT_USAGE", "InputError", "SimharnessGroup",
    "config_fields_from_options", "config_flags_given", "config_from_options", "config_options",
    "fail", "layout_from_options", "node_shape", "output_options",
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
            if os.environ.get(DEBUG_ENV):
                raise
            _error(f"simharness ran out of memory ({_rss_words()}); try a smaller world or "
                   f"free memory, and rerun with {DEBUG_ENV}=1 to see where.", EXIT_RUNTIME)
        except Exception as exc:  # a crash: never a traceback, never exit 1 (findings)
            if os.environ.get(DEBUG_ENV):
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


# ------------------------------------------------------------------ config options
def _csv_ints(ctx, param, value):
    if value is None:
        return None
    parts = [p for p in value.replace(" ", "").split(",") if p]
    try:
        if not parts:  # an empty value must not quietly mean "no hierarchy"
            raise ValueError(value)
        return tuple(int(p) for p in parts)
    except ValueError:
        raise click.BadParameter(f"expected integers separated by commas such as 2,2, got "
                                 f"{value!r}.", ctx, param) from None


def _field_value(ctx, param, values):
    """``--set FIELD=VALUE`` items as ``(field, value, item)``: the field name (aliases
    resolved), its value read strictly from text (:mod:`simharness.fieldtypes`)."""
    from ..errors import LayoutError
    from ..fieldtypes import parse_field

    out = []
    for item in values or ():
        if "=" not in item:
            raise click.BadParameter(f"expected FIELD=VALUE such as use_sharp=true, got "
                                     f"{item!r}.", ctx, param)
        key, _, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        name = ALIASES.get(key, key)
        if name not in ParallelismConfig.field_names():
            import difflib

            close = difflib.get_close_matches(key, sorted(ParallelismConfig.field_names()), n=1)
            raise click.BadParameter(
                f"{item!r}: unknown field {key!r}" + (f" (did you mean {close[0]!r}?)"
                                                       if close else "")
                + "; use a ParallelismConfig field name such as use_sharp.", ctx, param)
        try:
            value = parse_field(name, raw, where=item, from_text=True)
        except LayoutError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
        out.append((name, value, item))
    return tuple(out)


class WholeNumber(click.ParamType):
    """An integer >= ``minimum``, with a message that names the value and the fix."""

    name = "integer"

    def __init__(self, minimum: int = 1):
        self.minimum = minimum

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not a whole number; pass e.g. {max(self.minimum, 2)}.",
                          param, ctx)
        if number < self.minimum:
            self.fail(f"{number} is too small; it must be >= {self.minimum}.", param, ctx)
        return number


_INT = WholeNumber(0)
_POS = WholeNumber(1)

# (param name, decls, click kwargs). Field names of ParallelismConfig where one exists.
_CONFIG_OPTIONS: list[tuple[str, tuple[str, ...], dict[str, Any]]] = [
    ("config_file", ("--config",), dict(
        type=click.Path(dir_okay=False), metavar="FILE",
        help="YAML, TOML or JSON file: ParallelismConfig fields or a NeMo recipe with "
             "trainer.strategy (NeMo's field names). Flags override its values.")),
    ("world_size", ("--world-size", "-n"), dict(
        type=_POS, help="Number of ranks. Default: --nodes x --gpus-per-node, else the file, "
                        "else the smallest world the sizes fit.")),
    ("nodes", ("--nodes",), dict(type=_POS, help="Number of nodes (world = nodes x "
                                                  "gpus-per-node).")),
    ("gpus_per_node", ("--gpus-per-node",), dict(
        type=_POS, help=f"GPUs per node (default {DEFAULT_GPUS_PER_NODE}).")),
    ("tensor_model_parallel_size", ("--tensor-model-parallel-size", "--tp"), dict(type=_POS)),
    ("pipeline_model_parallel_size", ("--pipeline-model-parallel-size", "--pp"),
     dict(type=_POS)),
    ("virtual_pipeline_model_parallel_size",
     ("--virtual-pipeline-model-parallel-size", "--vpp"), dict(type=_POS)),
    ("context_parallel_size", ("--context-parallel-size", "--cp"), dict(type=_POS)),
    ("expert_model_parallel_size", ("--expert-model-parallel-size", "--ep"), dict(type=_POS)),
    ("expert_tensor_parallel_size", ("--expert-tensor-parallel-size", "--etp"),
     dict(type=_POS, help="Default: the tensor-parallel size.")),
    ("num_distributed_optimizer_instances", ("--num-distributed-optimizer-instances",),
     dict(type=_POS)),
    ("order", ("--order",), dict(
        help="Megatron's rank order, e.g. tp-cp-ep-dp-pp (default) or tp-cp-ep-pp-dp.")),
    ("use_tp_pp_dp_mapping", ("--use-tp-pp-dp-mapping/--no-use-tp-pp-dp-mapping",), dict(
        default=None, help="Order tp-cp-ep-pp-dp (NeMo's use_tp_pp_dp_mapping).")),
    ("hierarchical_context_parallel_sizes",
     ("--hierarchical-cp-sizes", "--hierarchical-context-parallel-sizes"),
     dict(callback=_csv_ints, metavar="A,B", help="e.g. 2,2 (product = cp).")),
    ("hybrid_context_parallel", ("--hybrid-context-parallel/--no-hybrid-context-parallel",),
     dict(default=None)),
    ("use_gloo_process_groups", ("--gloo/--no-gloo",), dict(
        default=None, help="Create the Gloo twin groups (default on).")),
    ("create_all_gather_group", ("--create-all-gather-group/--no-create-all-gather-group",),
     dict(default=None, help="Separate all-gather communicators for the DP-with-CP group "
                              "(default off).")),
    ("rank_offset", ("--rank-offset",), dict(type=_INT)),
    ("gtp_remat_size", ("--gtp-remat-size",), dict(type=_POS, help="mcore 0.19 only.")),
    ("expert_gtp_remat_size", ("--expert-gtp-remat-size",), dict(type=_POS,
                                                                help="mcore 0.19 only.")),
    ("set_fields", ("--set",), dict(
        multiple=True, callback=_field_value, metavar="FIELD=VALUE",
        help="Any other ParallelismConfig field (NeMo name), e.g. --set use_sharp=true. "
             "Repeatable.")),
]

# ParallelismConfig fields that have a named flag.
_FIELD_PARAMS = tuple(name for name, _, _ in _CONFIG_OPTIONS
                      if name in ParallelismConfig.field_names())
CONFIG_PARAMS = frozenset(name for name, _, _ in _CONFIG_OPTIONS) | {"mcore"}


def config_options(func: Callable | None = None, *, mcore_multiple: bool = False):
    """Decorator: add every configuration flag (see the module docstring).

    Usable bare (``@config_options``) or called (``@config_options(mcore_multiple=True)``).
    """
    def decorate(f: Callable) -> Callable:
        mcore_help = f"megatron-core API profile: {profiles_help()}; default {DEFAULT_MCORE}."
        if mcore_multiple:
            f = click.option("--mcore", "mcore", type=click.Choice(MCORE_PROFILES),
                             multiple=True, help=mcore_help + " Give twice to compare.")(f)
        else:
            f = click.option("--mcore", "mcore", type=click.Choice(MCORE_PROFILES),
                             default=None, help=mcore_help)(f)
        for name, decls, kw in reversed(_CONFIG_OPTIONS):
            kw = dict(kw)
            kw.setdefault("default", None)
            f = click.option(*decls, name, **kw)(f)
        return f

    return decorate(func) if func is not None else decorate


def config_flags_given(**kwargs) -> list[str]:
    """The configuration flags given on the command line (their parameter names)."""
    return [name for name in CONFIG_PARAMS
            if kwargs.get(name) is not None and kwargs.get(name) != ()]


def _read_file(path: str | None) -> ConfigFile | None:
    if path is None:
        return None
    if not path.strip():
        fail("--config was given an empty path; pass a YAML, TOML or JSON file, or leave "
             "--config out.")
    from ..configfile import read_config_file

    return read_config_file(path)


def config_fields_from_options(**kwargs) -> tuple[dict[str, Any], str]:
    """The merged ParallelismConfig fields (not yet validated) and the profile.

    For commands that want to describe a configuration even when it is
    invalid (``explain``); others use :func:`config_from_options`.
    """
    cf = _read_file(kwargs.get("config_file"))
    fields: dict[str, Any] = dict(cf.fields) if cf else {}
    flags = {name: kwargs[name] for name in _FIELD_PARAMS if kwargs.get(name) is not None}
    set_items: dict[str, tuple[Any, str]] = {}
    for entry in kwargs.get("set_fields") or ():
        name, value, item = entry if len(entry) == 3 else (*entry, f"{entry[0]}={entry[1]}")
        name = ALIASES.get(name, name)
        if name in set_items and set_items[name][0] != value:
            fail(f"--set {set_items[name][1]} and --set {item} give {name} two values; "
                 f"give it once.")
        set_items[name] = (value, item)
        _no_flag_conflict(name, value, item, flags, kwargs)
        fields[name] = value
    if ("use_tp_pp_dp_mapping" in flags and "order" not in flags
            and flags["use_tp_pp_dp_mapping"]
            and fields.get("order") not in (None, TP_PP_DP_ORDER)):
        fields.pop("order", None)  # the flag overrides an order written in the file
    if flags.get("use_tp_pp_dp_mapping") and flags.get("order") not in (None, TP_PP_DP_ORDER):
        fail(f"--order {flags['order']} conflicts with --use-tp-pp-dp-mapping (which means order "
             f"{TP_PP_DP_ORDER}); give one of them.")
    fields.update(flags)
    # The world.
    world, nodes = kwargs.get("world_size"), kwargs.get("nodes")
    if nodes is not None:
        gpn = _gpus_per_node(kwargs, cf)
        if world is not None and world != nodes * gpn:
            fail(f"--world-size {world} conflicts with --nodes {nodes} x --gpus-per-node {gpn} "
                 f"= {nodes * gpn}; give only one of them.")
        fields["world_size"] = nodes * gpn
    elif world is None and cf is not None and cf.world_size is not None:
        flag_gpn = kwargs.get("gpus_per_node")
        if flag_gpn is not None and cf.gpus_per_node is not None \
                and flag_gpn != cf.gpus_per_node and "world_size" not in set_items:
            fail(f"--gpus-per-node {flag_gpn} conflicts with {cf.path}'s {cf.gpus_per_node} GPUs "
                 f"per node (its world is {cf.world_size} ranks); give -n or --nodes with "
                 f"--gpus-per-node, or drop --gpus-per-node.")
        if "world_size" not in set_items:
            fields["world_size"] = cf.world_size
    elif world is None and cf is not None and cf.nodes is not None \
            and "world_size" not in set_items:
        # A file's node count without its GPUs per node: --gpus-per-node (else 8, as for
        # --nodes) for the bare form; a recipe's devices 'auto' has no default to assume.
        if cf.devices_auto and kwargs.get("gpus_per_node") is None:
            fail(f"{cf.path}: trainer.devices is 'auto' (Lightning's default when it is not "
                 f"written) with trainer.num_nodes {cf.nodes}, so "
                 f"the world depends on the GPUs per node; pass --gpus-per-node (world = "
                 f"{cf.nodes} x it) or -n, or write trainer.devices as a number.")
        fields["world_size"] = cf.nodes * _gpus_per_node(kwargs, cf)
    mcore = kwargs.get("mcore")
    if isinstance(mcore, (tuple, list)):
        mcore = mcore[0] if mcore else None
    if mcore is None:
        mcore = (cf.mcore if cf else None) or DEFAULT_MCORE
    from ..profiles import check_profile

    return fields, check_profile(mcore)


# Flags that set a field besides the field's own flag (--nodes sets world_size).
_FLAG_DECLS = {name: decls for name, decls, _ in _CONFIG_OPTIONS}


def _no_flag_conflict(name: str, value: Any, item: str, flags: dict[str, Any],
                      kwargs: dict[str, Any]) -> None:
    """``--set`` must not give a different value to a field a flag also sets."""
    flag = "/".join(d.split("/")[0] for d in _FLAG_DECLS.get(name, ())[:2])
    given = flags.get(name)
    if name == "world_size" and kwargs.get("nodes") is not None:
        gpn = kwargs.get("gpus_per_node") or DEFAULT_GPUS_PER_NODE
        flag, given = f"--nodes {kwargs['nodes']} x --gpus-per-node {gpn} =", \
            kwargs["nodes"] * gpn
    if name == "order" and flags.get("use_tp_pp_dp_mapping") and value != TP_PP_DP_ORDER:
        fail(f"--set {item} conflicts with --use-tp-pp-dp-mapping (order {TP_PP_DP_ORDER}); "
             f"give one of them.")
    if given is not None and given != value:
        decls = _FLAG_DECLS.get(name, ("",))
        if isinstance(given, bool) and "/" in decls[0]:  # --gloo / --no-gloo: the one given
            on, off = decls[0].split("/")
            said = on if given else off
        else:
            said = f"{flag} {','.join(map(str, given)) if isinstance(given, tuple) else given}"
        fail(f"{said} conflicts with --set {item}: both set {name}; give one of them.")


def config_from_options(**kwargs) -> tuple[ParallelismConfig, str]:
    """``(ParallelismConfig, mcore)`` from a command's kwargs; raises SimharnessError."""
    fields, mcore = config_fields_from_options(**kwargs)
    return ParallelismConfig.from_dict(fields), mcore


def layout_from_options(**kwargs):
    """``build_layout(*config_from_options(**kwargs))``."""
    from ..fields import ParallelismFields
    from ..layout import build_layout

    fields, mcore = config_fields_from_options(**kwargs)
    return build_layout(ParallelismFields.from_dict(fields), mcore)  # validated once


def node_shape(cfg: ParallelismConfig, **kwargs) -> tuple[int, int]:
    """``(nodes, gpus_per_node)`` for ``cfg``: the flags, else the file, else 8 per node.

    ``nodes`` is ``ceil(world / gpus_per_node)`` when not given.
    """
    gpn = _gpus_per_node(kwargs, _read_file(kwargs.get("config_file")))
    world = cfg.world_size
    assert world is not None  # ParallelismConfig fills it in on construction
    nodes = kwargs.get("nodes") or -(-world // gpn)
    return nodes, gpn


def _gpus_per_node(kwargs: dict[str, Any], cf: ConfigFile | None) -> int:
    """``--gpus-per-node``, else the configuration file's, else 8."""
    return kwargs.get("gpus_per_node") or (cf.gpus_per_node if cf else None) \
        or DEFAULT_GPUS_PER_NODE


# ------------------------------------------------------------------ output options
def output_options(formats: tuple[str, ...] = ("table", "json", "csv"), *,
                   show_all: bool = True):
    """Decorator: ``--format/-f`` [fmt], ``--quiet/-q`` [quiet], ``--all`` [show_all]."""
    def decorate(f: Callable) -> Callable:
        if show_all:
            f = click.option("--all", "show_all", is_flag=True, default=False,
                             help="Print every group/rank instead of the first and last "
                                  "(large worlds).")(f)
        f = click.option("--quiet", "-q", "quiet", is_flag=True, default=False,
                         help="Only the data: no headings, hints or summaries.")(f)
        f = click.option("--format", "-f", "fmt", type=click.Choice(formats),
                         default=formats[0], show_default=True, help="Output format.")(f)
        return f

    return decorate

