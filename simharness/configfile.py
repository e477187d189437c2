"""Read a parallelism configuration from a YAML, TOML or JSON file.

Two shapes are accepted, both with NeMo's field names:

* the bare :class:`~simharness.config.ParallelismConfig` fields (plus the
  optional keys ``mcore``, ``nodes`` and ``gpus_per_node``)::

      tensor_model_parallel_size: 2
      pipeline_model_parallel_size: 2
      world_size: 16

* a NeMo recipe, whose ``trainer.strategy`` section (a ``MegatronStrategy``)
  holds the parallelism fields; ``trainer.devices`` (a number, or a list of
  device ids) x ``trainer.num_nodes`` (Lightning's defaults: ``auto`` and 1)
  give the world; ``devices: auto`` leaves it to the caller (``devices_auto``).
  Nested ``parallelism`` or ``parallel_config`` mappings inside the strategy
  are merged in. The strategy's keys that do not shape process groups (``ddp``,
  ``ckpt_*``, ``_target_``...) are ignored; any other unknown key is an error,
  and so is a parallelism field outside ``trainer.strategy`` (NeMo ignores it).

Values are read strictly (:mod:`simharness.fieldtypes`), and a key written twice
(YAML or JSON), an alias next to its field, or a ``world_size`` that disagrees
with nodes x GPUs per node is an error. Every problem is a
:class:`ConfigFileError` whose message names the file (and the line, where the
parser reports one) and the fix. The module is pure apart from reading the
file: no click, no torch.

>>> cf = parse_config_text("trainer:\\n  devices: 8\\n  num_nodes: 2\\n"
...                        "  strategy:\\n    tensor_model_parallel_size: 2\\n", "job.yaml")
>>> cf.fields, cf.world_size
({'tensor_model_parallel_size': 2}, 16)
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import ALIASES, ParallelismConfig
from .errors import SimharnessError

SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json"}

# Keys of the bare form that are not ParallelismConfig fields.
EXTRA_KEYS = ("mcore", "nodes", "gpus_per_node", "ddp")

# MegatronStrategy / DDPStrategy arguments that do not shape process groups.
STRATEGY_IGNORED = frozenset({
    "data_sampler", "parallel_devices", "cluster_environment", "checkpoint_io",
    "find_unused_parameters", "ddp", "fsdp", "lazy_init", "save_ckpt_format",
    "setup_optimizers", "init_model_parallel", "replace_progress_bar", "progress_interval",
    "restore_config", "megatron_log_level", "process_group_backend", "timeout",
    "start_method", "output_data_idx", "accelerator", "gradient_as_bucket_view",
    "tp_comm_overlap", "tp_comm_bootstrap_backend",
})
STRATEGY_NESTED = ("parallelism", "parallel_config")


class ConfigFileError(SimharnessError, ValueError):
    """A configuration file that cannot be read or does not describe a configuration."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        super().__init__(message)
        self.path = path
        self.line = line


@dataclass(frozen=True)
class ConfigFile:
    """What a file says: ``fields`` (ParallelismConfig names), and the extras."""

    path: str
    fields: dict[str, Any] = field(default_factory=dict)
    mcore: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    devices_auto: bool = False  # trainer.devices 'auto'/-1: GPUs per node not written
    # The DistributedDataParallelConfig block (NeMo's trainer.strategy.ddp, Megatron-Bridge's
    # top-level ddp:, or ddp: in the bare form), read by simharness.ag_readers; None: absent.
    ddp: Mapping[str, Any] | None = None
    ddp_where: str = "ddp"

    @property
    def world_size(self) -> int | None:
        """``world_size`` from the fields, else ``nodes * gpus_per_node``, else None."""
        if self.fields.get("world_size") is not None:
            return self.fields["world_size"]
        if self.nodes is not None and self.gpus_per_node is not None:
            return self.nodes * self.gpus_per_node
        return None


def _format(path: str, text: str) -> str:
    suffix = os.path.splitext(path)[1].lower()
    if suffix in SUFFIXES:
        return SUFFIXES[suffix]
    return "json" if text.lstrip().startswith("{") else "yaml"


def _parse(text: str, path: str, fmt: str) -> Any:
    if fmt == "json":
        try:
            return json.loads(text, object_pairs_hook=lambda pairs: _no_duplicates(pairs, path))
        except json.JSONDecodeError as exc:
            raise ConfigFileError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg} (column "
                                  f"{exc.colno}); fix the syntax.", path=path,
                                  line=exc.lineno) from None
    if fmt == "toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # Python 3.10: the tomli backport, a dependency there
            import tomli as tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            msg = str(exc)
            m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
            line = int(m.group(1)) if m else getattr(exc, "lineno", None)
            msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", msg)
            where = f"{path}:{line}" if line else path
            raise ConfigFileError(f"{where}: invalid TOML: {msg}; fix the syntax.", path=path,
                                  line=line) from None
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader(path))  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        where = f"{path}:{line}" if line else path
        raise ConfigFileError(f"{where}: invalid YAML: {what}; fix the syntax.", path=path,
                              line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{path}: invalid YAML: {' '.join(str(exc).split())}.",
                              path=path) from None


def _no_duplicates(pairs: list[tuple[str, Any]], path: str) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (json keeps the last one silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigFileError(
                f"{path}: key {key!r} appears twice (values {out[key]!r} and {value!r}); JSON "
                f"would keep the last one silently. Keep one of them.", path=path)
        out[key] = value
    return out


def _yaml_loader(path: str):
    """A SafeLoader that refuses a mapping key given twice (PyYAML keeps the last)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:  # the keys written here; '<<' merges may be overridden
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                continue
            line = key_node.start_mark.line + 1
            if first is not None:
                raise ConfigFileError(
                    f"{path}:{line}: key {key!r} appears twice (lines {first} and {line}); "
                    f"YAML would keep the last one silently. Keep one of them.",
                    path=path, line=line)
            seen[key] = line
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 construct_mapping)
    return StrictLoader


def _whole(path: str, key: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigFileError(f"{path}: {key} must be a whole number >= 1, got {value!r}.",
                              path=path)
    return value


def _unknown(path: str, where: str, keys: list[str], known: set[str]) -> ConfigFileError:
    hints = []
    for key in keys:
        close = difflib.get_close_matches(str(key), sorted(known), n=1)
        hints.append(repr(key) + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ConfigFileError(
        f"{path}: unknown field(s) {', '.join(hints)} in {where}; use NeMo's ParallelismConfig "
        f"names (e.g. tensor_model_parallel_size) or remove them.", path=path)


_KNOWN = set(ParallelismConfig.field_names()) | set(ALIASES)


def config_from_mapping(data: Any, path: str = "<config>") -> ConfigFile:
    """Interpret a parsed document (bare fields or a NeMo recipe).

    Every value is read by :func:`simharness.fieldtypes.parse_field` (a quoted
    ``"false"`` is refused, ``2.0`` is not a whole number), and two keys that give
    the same value (an alias and its full name, ``world_size`` and the nodes x GPUs,
    a strategy key and its nested ``parallelism`` copy) must agree.
    """
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigFileError(f"{path}: expected a mapping of configuration fields, the file is "
                              f"{kind}; write e.g. 'tensor_model_parallel_size: 2'.", path=path)
    devices_auto = False
    if "trainer" in data or "strategy" in data:
        fields_, nodes, gpus, devices_auto = _from_recipe(data, path)
        where_nodes = "trainer.num_nodes x trainer.devices"
        if "world_size" in data:  # a top-level world next to the recipe
            fields_["world_size"] = _typed(path, "world_size", data["world_size"])
        stray = sorted(str(k) for k in data if str(k) in _KNOWN and k != "world_size")
        if stray:  # NeMo reads the parallelism from trainer.strategy only
            raise ConfigFileError(
                f"{path}: {', '.join(stray)} at the top level of a recipe would be ignored (NeMo "
                f"reads parallelism from trainer.strategy); move it into trainer.strategy.",
                path=path)
    else:
        fields_, unknown = _known_fields(data, skip=lambda key: key in EXTRA_KEYS)
        if unknown:
            raise _unknown(path, "the file", unknown, _KNOWN | set(EXTRA_KEYS))
        fields_ = _canonical(fields_, path, "the file")
        nodes = _whole(path, "nodes", data.get("nodes"))
        gpus = _whole(path, "gpus_per_node", data.get("gpus_per_node"))
        where_nodes = "nodes x gpus_per_node"
    world = fields_.get("world_size")
    if world is not None and nodes is not None and gpus is not None and world != nodes * gpus:
        raise ConfigFileError(
            f"{path}: world_size {world} conflicts with {where_nodes} = {nodes} x {gpus} = "
            f"{nodes * gpus}; keep one of them (or make them agree).", path=path)
    mcore = data.get("mcore")
    ddp, ddp_where = _ddp_block(data, path)
    return ConfigFile(path=path, fields=fields_, mcore=None if mcore is None else str(mcore),
                      nodes=nodes, gpus_per_node=gpus, devices_auto=devices_auto, ddp=ddp,
                      ddp_where=ddp_where)


def _ddp_block(data: Mapping, path: str) -> tuple[Mapping[str, Any] | None, str]:
    """The ``ddp:`` block and where it was: NeMo 2's ``trainer.strategy.ddp`` (its string
    form ``'megatron'``/``'pytorch'`` says nothing of the implementation: None), else a
    top-level ``ddp`` (Megatron-Bridge's ConfigContainer, or the bare form). Both written
    and different is an error."""
    trainer = data.get("trainer")
    strategy = trainer.get("strategy") if isinstance(trainer, Mapping) else None
    nested = strategy.get("ddp") if isinstance(strategy, Mapping) else None
    top = data.get("ddp")
    if nested is not None and top is not None and nested != top:
        raise ConfigFileError(f"{path}: trainer.strategy.ddp and the top-level ddp disagree; "
                              f"keep one of them.", path=path)
    if nested is not None and not isinstance(nested, str):
        return nested, "trainer.strategy.ddp"
    if top is not None:
        return top, "ddp"
    return None, "ddp"


def _typed(path: str, name: str, value: Any, where: str = "") -> Any:
    """``value`` read strictly (:mod:`simharness.fieldtypes`); errors name the file."""
    from .errors import LayoutError
    from .fieldtypes import parse_field

    try:
        return parse_field(name, value, where=f"{path}{where}")
    except LayoutError as exc:
        raise ConfigFileError(str(exc), path=path) from None


def _canonical(fields_: dict[str, Any], path: str, where: str) -> dict[str, Any]:
    """Aliases resolved to field names and every value read strictly; an alias and its
    field both given (``tp: 2`` and ``tensor_model_parallel_size: 4``) is an error."""
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    suffix = "" if where == "the file" else f" ({where})"
    for key, value in fields_.items():
        name = ALIASES.get(key, key)
        value = _typed(path, name, value, suffix)
        if name in out and out[name] != value:
            raise ConfigFileError(
                f"{path}: {spelled[name]}: {out[name]!r} and {key}: {value!r} in {where} set "
                f"the same field ({name}) to different values; keep one of them.", path=path)
        out[name] = value
        spelled[name] = key
    return out


def _known_fields(items: Mapping, skip: Callable[[str], bool]) -> tuple[dict[str, Any], list[str]]:
    """The configuration fields of ``items`` and its unknown keys (``skip``ped keys in neither)."""
    fields_: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in items.items():
        key = str(key)
        if key in _KNOWN:
            fields_[key] = value
        elif not skip(key):
            unknown.append(key)
    return fields_, unknown


def _from_recipe(data: Mapping, path: str
                 ) -> tuple[dict[str, Any], int | None, int | None, bool]:
    """Fields, nodes, GPUs per node of a NeMo recipe (``trainer.strategy``), and whether
    ``trainer.devices`` leaves the GPUs per node to the machine (``auto`` or -1)."""
    trainer = data.get("trainer", {}) if "trainer" in data else {}
    if not isinstance(trainer, Mapping):
        raise ConfigFileError(f"{path}: 'trainer' must be a mapping.", path=path)
    strategy = trainer.get("strategy", data.get("strategy"))
    if not isinstance(strategy, Mapping):
        raise ConfigFileError(
            f"{path}: the recipe has no 'trainer.strategy' mapping with the parallelism "
            f"fields; add one, or write the ParallelismConfig fields at the top level.",
            path=path)
    merged: dict[str, Any] = {}
    source: dict[str, str] = {}
    nested = [(k, v) for k, v in strategy.items() if k in STRATEGY_NESTED]
    own = [(k, v) for k, v in strategy.items() if k not in STRATEGY_NESTED]
    for key, value in nested:
        if not isinstance(value, Mapping):
            raise ConfigFileError(f"{path}: trainer.strategy.{key} must be a mapping.",
                                  path=path)
    for where, items in [("trainer.strategy", own)] + [
            (f"trainer.strategy.{k}", list(v.items())) for k, v in nested]:
        fields_, unknown = _known_fields(
            dict(items), skip=lambda key: key in STRATEGY_IGNORED or key.startswith(("ckpt_", "_")))
        if unknown:
            raise _unknown(path, where, unknown, _KNOWN)
        for name, value in _canonical(fields_, path, where).items():
            if name in merged and merged[name] != value:
                raise ConfigFileError(
                    f"{path}: {source[name]}.{name} is {merged[name]!r} but {where}.{name} is "
                    f"{value!r}: they disagree; keep one of them.", path=path)
            merged[name] = value
            source[name] = where
    # Lightning's Trainer defaults: num_nodes=1, devices="auto".
    nodes = trainer.get("num_nodes")
    if nodes is not None:
        nodes = _whole(path, "trainer.num_nodes", nodes)
    gpus, auto = _devices(path, trainer.get("devices", "auto" if nodes is not None else None))
    if gpus is not None and nodes is None:
        nodes = 1
    return merged, nodes, gpus, auto


def _devices(path: str, devices: Any) -> tuple[int | None, bool]:
    """GPUs per node from ``trainer.devices``, and whether it is ``auto`` (or -1)."""
    if isinstance(devices, (list, tuple)):  # explicit device ids: one process per id
        return len(devices) or None, False
    if devices in ("auto", -1, "-1"):
        return None, True
    if isinstance(devices, str) and "," in devices:  # Lightning's "0,1,2,3": device ids
        return len([d for d in devices.split(",") if d.strip()]) or None, False
    if isinstance(devices, str) and devices.strip().isascii() and devices.strip().isdigit():
        raise ConfigFileError(f"{path}: trainer.devices is the string {devices!r}; write "
                              f"{devices.strip()} without quotes.", path=path)
    return (None if devices is None else _whole(path, "trainer.devices", devices)), False


def parse_config_text(text: str, path: str = "<config>", fmt: str | None = None) -> ConfigFile:
    """Parse ``text`` as ``fmt`` (``yaml``, ``toml``, ``json``; default: from the name)."""
    return config_from_mapping(_parse(text, path, fmt or _format(path, text)), path)


def read_config_file(path: str | os.PathLike) -> ConfigFile:
    """Read and interpret a configuration file; errors name the file and the line."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: no such file; check the path given to --config.",
                              path=path) from None
    except IsADirectoryError:
        raise ConfigFileError(f"{path}: is a directory, not a configuration file.",
                              path=path) from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not a text file (expected YAML, TOML or JSON).",
                              path=path) from None
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read: {exc.strerror}.", path=path) from None
    return parse_config_text(text, path)
