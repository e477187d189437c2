"""The flags every ``simharness`` command shares, and how flags, files and recipes merge.

Configuration flags
-------------------
``@config_options`` adds every configuration flag to a click command; the
command receives them as keyword arguments and turns them into a validated
configuration with ``config_from_options(**kwargs)``. Keys that are not
configuration flags are ignored, so a command may pass all its kwargs::

    import click
    from simharness._cli.options import (config_from_options, config_options, layout_from_options,
                                         node_shape, output_options)

    @click.command("place")
    @click.option("--topology", type=click.Path())
    @output_options()
    @config_options
    def place_cmd(topology, fmt, quiet, show_all, **kwargs):
        cfg, mcore = config_from_options(**kwargs)         # ParallelismConfig, profile name
        nodes, gpus_per_node = node_shape(cfg, **kwargs)    # from --nodes/--gpus-per-node/file
        layout = layout_from_options(**kwargs)             # = build_layout(cfg, mcore)

    def register(main):
        main.add_command(place_cmd)

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

Two more flags describe the job rather than its groups (not configuration fields, so not
in :data:`CONFIG_PARAMS`): ``--dp-impl fsdp|fsdp-v2|dist-opt|ddp|torch-fsdp2`` [dp_impl],
the data-parallel implementation (it decides who reads the all-gather group,
:mod:`simharness.ag_readers`), and ``--lazy-communicators/--eager-communicators``
[launch], whether NCCL communicators are created at a group's first collective
(Megatron-LM's own init) or when the group is (``init_process_group(device_id=...)``).
``dp_impl_from_options(**kwargs) -> DPImpl`` merges ``--dp-impl`` with the ``ddp:`` block
of ``--config`` (a flag that contradicts the file is refused); ``launch_from_options``
gives ``("lazy"|"eager", where it came from)``.

``@config_options(mcore_multiple=True)`` makes ``--mcore`` repeatable (its
value is then a tuple; ``config_from_options`` takes the first, or pass
``mcore=`` explicitly).

Helpers: ``config_fields_from_options(**kwargs) -> (dict, mcore)`` (merged fields, not
yet validated: for ``explain``), ``layout_from_options(**kwargs) -> Layout``,
``node_shape(cfg, **kwargs) -> (nodes, gpus_per_node)``,
``config_flags_given(**kwargs) -> [param names]`` and
``load_layout(kwargs, command) -> (Layout, world_auto)`` (the memory estimate first).

Output flags
------------
``@output_options(formats=("table", "json", "csv"))`` adds ``--format/-f``
[fmt], ``--quiet/-q`` [quiet] and ``--all`` [show_all]. Format helpers live in
:mod:`simharness._cli.output`.

Errors and exit statuses: :mod:`simharness._cli.errors`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ..config import ALIASES, DEFAULT_MCORE, MCORE_PROFILES, TP_PP_DP_ORDER, ParallelismConfig
from ..profiles import profiles_help
from .errors import fail

if TYPE_CHECKING:
    from ..configfile import ConfigFile
    from ..layout import Layout

DEFAULT_GPUS_PER_NODE = 8

__all__ = [
    "CONFIG_PARAMS", "DEFAULT_GPUS_PER_NODE", "WholeNumber",
    "config_fields_from_options", "config_flags_given", "config_from_options", "config_options",
    "dp_impl_from_options", "launch_from_options", "layout_from_options", "load_layout",
    "node_shape", "output_options",
]


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
        return _job_options(f)

    return decorate(func) if func is not None else decorate


def _job_options(f: Callable) -> Callable:
    """``--dp-impl`` and ``--lazy-communicators/--eager-communicators``."""
    from ..ag_readers import IMPL_CHOICES

    f = click.option(
        "--lazy-communicators/--eager-communicators", "launch", default=None,
        help="How the job creates NCCL communicators: at a group's first collective (lazy, "
             "the default: Megatron-LM's initialize.py passes no device_id to "
             "init_process_group) or when the group is created (eager: "
             "init_process_group(device_id=...)). Decides what an unread group costs.")(f)
    f = click.option(
        "--dp-impl", "dp_impl", type=click.Choice(IMPL_CHOICES), default=None,
        help="The data-parallel implementation: fsdp (Megatron-FSDP), dist-opt (DDP with the "
             "distributed optimizer), ddp, torch-fsdp2, fsdp-v2 (Megatron-LM main). Only "
             "Megatron-FSDP reads the all-gather group. Default: the ddp: block of --config, "
             "else not known (both cases shown).")(f)
    return f


def dp_impl_from_options(**kwargs):
    """The :class:`~simharness.ag_readers.DPImpl` of ``--dp-impl`` and the ``ddp:`` block of
    ``--config``; a flag that names another implementation than the file is refused."""
    from ..ag_readers import DPImpl, dp_impl_from_ddp_block

    cf = _read_file(kwargs.get("config_file"))
    mcore = kwargs.get("mcore")
    if isinstance(mcore, (tuple, list)):
        mcore = mcore[0] if mcore else None
    profile = mcore or (cf.mcore if cf else None)
    from_file = DPImpl()
    if cf is not None and cf.ddp is not None:
        from_file = dp_impl_from_ddp_block(cf.ddp, profile=profile,
                                           where=f"{cf.path} {cf.ddp_where}")
    megatron = kwargs.get(MEGATRON_DDP)
    if megatron is not None:
        from_args = dp_impl_from_ddp_block(megatron, profile=profile,
                                           where="the Megatron-LM arguments")
        if from_file.impl not in ("unknown", from_args.impl):
            fail(f"the Megatron-LM arguments give {from_args.name}, but {from_file.source} "
                 f"gives {from_file.name}; give one of them.")
        from_file = from_args
    flag = kwargs.get("dp_impl")
    if flag is None:
        return from_file
    if from_file.impl not in ("unknown", flag):
        fail(f"--dp-impl {flag} conflicts with {from_file.source} ({from_file.name}); give "
             f"one of them.")
    if from_file.impl == flag:
        return from_file
    return DPImpl(flag, source="--dp-impl")


def launch_from_options(**kwargs) -> tuple[str, str]:
    """``("lazy"|"eager", "flag"|"default")``: how communicators are created."""
    launch = kwargs.get("launch")
    if launch is None:
        return "lazy", "default: Megatron-LM's own init"
    return ("lazy" if launch else "eager"), "flag"


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


def load_layout(kwargs: dict[str, Any], command: str = "build") -> tuple[Layout, bool]:
    """The layout of the options, and whether the world was chosen automatically.

    ``command`` names the memory estimate (:mod:`simharness.resources`) checked first.
    """
    from ..layout import Draft
    from ..resources import layout_memory_check

    fields, mcore = config_fields_from_options(**kwargs)
    draft = Draft.of(fields, mcore)  # normalised, type-checked; its loops hold no arrays
    # The estimate comes first: validating a huge world already builds world-sized arrays.
    layout_memory_check(draft.fields, mcore, command, kinds=draft.kinds,
                        what=command.split("-")[0] if command != "build" else None)
    return draft.layout(), fields.get("world_size") is None


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


# ------------------------------------------------------------ Megatron-LM's arguments
#: the kwargs key where a command finds the data-parallel implementation the Megatron-LM
#: arguments give (a ddp-block mapping; :func:`dp_impl_from_options` reads it)
MEGATRON_DDP = "megatron_ddp"


def megatron_args_options():
    """Decorator: ``--megatron-args FILE`` and everything after ``--``: a ``pretrain_gpt.py``
    argument list read whole (:mod:`simharness.megatron_args`) and merged into the
    command's flags before the command runs. A flag that disagrees with an argument is
    refused; every argument the command does not use is listed on stderr as not affecting
    the result; the data-parallel implementation goes to ``kwargs[MEGATRON_DDP]``, where
    :func:`dp_impl_from_options` reads it. Place it directly above the command's function
    (below ``@config_options``)."""
    import functools

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def run(*args, **kwargs):
            apply_megatron_args(kwargs)
            return f(*args, **kwargs)

        run = click.argument("megatron_argv", nargs=-1, type=click.UNPROCESSED,
                             metavar="[-- PRETRAIN_GPT_ARGS...]")(run)
        return click.option(
            "--megatron-args", "megatron_args_file", type=click.Path(dir_okay=False),
            default=None, metavar="FILE",
            help="Megatron-LM's pretrain_gpt.py arguments (shell-quoted text, a torchrun line "
                 "too), or give them after --. Parallelism, the data-parallel implementation "
                 "and the model are read; every other argument is listed as unused.")(run)

    return decorate


def apply_megatron_args(kwargs: dict[str, Any]):
    """Merge the Megatron-LM arguments in ``kwargs`` (``megatron_args_file``,
    ``megatron_argv``; both removed) into the command's own parameters, in place; returns
    the :class:`~simharness.megatron_args.MegatronArgs`, or None when none were given."""
    from ..megatron_args import MODEL, PARALLEL, parse_megatron_args, read_args_file

    path = kwargs.pop("megatron_args_file", None)
    argv = list(kwargs.pop("megatron_argv", None) or ())
    if path is None and not argv:
        return None
    if path is not None and not str(path).strip():
        fail("--megatron-args was given an empty path; pass the file of pretrain_gpt.py "
             "arguments, or leave --megatron-args out.")
    words = (read_args_file(path) if path is not None else []) + argv
    a = parse_megatron_args(words)
    arg_of = {v: k for k, v in {**PARALLEL, **MODEL}.items()}
    arg_of["virtual_pipeline_model_parallel_size"] = "the virtual pipeline arguments"

    def merge(param: str, value: Any) -> bool:
        if param not in kwargs:
            return False
        given = kwargs[param]
        value = tuple(value) if isinstance(value, list) else value
        if given is None or given is False and value is True:
            kwargs[param] = value
        elif given != value:
            shown = ",".join(map(str, given)) if isinstance(given, tuple) else given
            fail(f"{_flag_of(param)} {shown} conflicts with Megatron-LM's {arg_of[param]} "
                 f"{value}; give it once.")
        return True

    for name, value in a.parallel.items():
        if not merge(name, value):
            items = tuple(kwargs.get("set_fields") or ())
            kwargs["set_fields"] = (*items, (name, value, f"{arg_of[name]} (Megatron-LM)"))
    if a.world_size is not None and kwargs.get("nodes") is None:
        if kwargs.get("world_size") not in (None, a.world_size):
            fail(f"-n {kwargs['world_size']} conflicts with the torchrun line's "
                 f"--nproc-per-node x --nnodes = {a.world_size}; give it once.")
        kwargs["world_size"] = a.world_size
    unused = list(a.unused)
    model_used = False
    for name, value in a.model.items():
        if merge(name, value):
            model_used = True
        elif arg_of[name] in a.used:  # given, not a width Megatron-LM fills in
            unused.append(arg_of[name])
    if "--swiglu" in a.used and not model_used:
        unused.append("--swiglu")
    kwargs[MEGATRON_DDP] = dict(a.ddp)
    _megatron_note(a, unused, kwargs, a.model_notes if model_used else ())
    return a


def _flag_of(param: str) -> str:
    decls = _FLAG_DECLS.get(param)
    if decls:
        return decls[0].split("/")[0]
    return "--" + param.replace("_", "-")


def _megatron_note(a, unused: list[str], kwargs: dict[str, Any], model_notes) -> None:
    """One stderr line: what was read, the implementation, what does not affect the result."""
    if kwargs.get("quiet"):
        return
    from ..ag_readers import impl_from_ddp_block

    impl = impl_from_ddp_block(a.ddp, where="Megatron-LM arguments")[0]
    read = [n for n in a.used if n not in unused]
    words = [f"Megatron-LM arguments: read {len(read)} ({' '.join(read) or 'none'})",
             f"data-parallel implementation {impl}"
             + ("" if a.has_ddp else " (Megatron-LM's default: no --use-distributed-optimizer "
                                     "or --use-megatron-fsdp)"),
             f"not affecting the result: {len(unused)} ({' '.join(unused) or 'none'})"]
    click.echo("note: " + "; ".join(words + list(a.notes) + list(model_notes)), err=True)
