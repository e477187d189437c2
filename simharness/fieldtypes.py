"""One strict reading of every configuration value, whatever its source.

A value of a :class:`~simharness.config.ParallelismConfig` field comes from a
flag, ``--set FIELD=VALUE``, ``diff --change``, a YAML/TOML/JSON file or a NeMo
recipe. Each field has one type here, and :func:`parse_field` reads a value of
it the same way for every source:

* ``bool``: a real boolean. Text from the command line (``from_text=True``) may
  also be ``true/false/yes/no/on/off/1/0`` (any case). A quoted ``"false"`` in a
  file is refused: YAML would make it a string, and a string is always true.
* ``int``: a whole number (never a bool, never ``2.0``, never ``"4"`` from a
  file); command-line text must be decimal digits.
* ``choice``: one of a listed set of strings (the error lists them).
* ``names``: a list of Megatron process-group names (``high_priority_stream_groups``).
* ``str`` / ``ints`` (a list of whole numbers, or ``2,2`` text) / ``any``.

Every refusal is a :class:`~simharness.errors.LayoutError` whose message starts
with where the value came from and ends with the fix.

>>> parse_field("use_sharp", "on", where="--set use_sharp=on", from_text=True)
True
>>> parse_field("tensor_model_parallel_size", 4, where="job.yaml")
4
>>> try:
...     parse_field("create_all_gather_group", "false", where="job.yaml")
... except LayoutError as exc:
...     print(exc)  # doctest: +NORMALIZE_WHITESPACE
job.yaml: create_all_gather_group must be true or false, got the string 'false';
write false without quotes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import LayoutError

TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")
NULL_WORDS = ("null", "none", "~")


@dataclass(frozen=True)
class FieldType:
    """How one field's values are read: ``kind``, the smallest whole number, whether
    ``None`` is allowed, and the allowed strings of a ``choice``."""

    kind: str  # "bool", "int", "choice", "names", "str", "ints", "any"
    minimum: int = 1
    nullable: bool = False
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        """The type in words (``a whole number >= 1 or null``)."""
        words = {"bool": "true or false", "int": f"a whole number >= {self.minimum}",
                 "choice": " or ".join(repr(c) for c in self.choices),
                 "str": "a string", "ints": "a list of whole numbers such as [2, 2]",
                 "names": "a list of process-group names", "any": "any value"}[self.kind]
        return words + (" or null" if self.nullable else "")


_BOOL, _COUNT, _NAT = FieldType("bool"), FieldType("int"), FieldType("int", minimum=0)

# The process-group names Megatron looks up in its NCCL communicator configuration
# (get_nccl_options("<name>", ...) in parallel_state.py, megatron-core 0.16.1-0.19.2): what
# high_priority_stream_groups may name. Another name would be accepted by Megatron and
# silently change no communicator.
PG_NAMES = (
    "cp", "dp", "dp_cp", "embd", "ep", "ep_dp", "ep_gtp_remat_dp", "ep_tp", "expt_gtp_remat",
    "gtp_remat", "gtp_remat_dp", "gtp_remat_dp_cp", "hcp", "inter_ep_dp",
    "intra_dist_opt_instance", "intra_dp_cp", "intra_ep_dp", "mp", "pos_embd", "pp", "tp",
    "tp_cp", "tp_dp", "tp_dp_cp", "tp_ep_gtp_remat_pp", "tp_ep_mp", "tp_ep_pp",
)

# Every ParallelismConfig field (tests/test_fieldtypes.py checks the table is complete).
FIELD_TYPES: dict[str, FieldType] = {
    "tensor_model_parallel_size": _COUNT,
    "pipeline_model_parallel_size": _COUNT,
    "virtual_pipeline_model_parallel_size": FieldType("int", nullable=True),
    "microbatch_group_size_per_vp_stage": FieldType("int", nullable=True),
    "context_parallel_size": _COUNT,
    "sequence_parallel": _BOOL,
    "expert_model_parallel_size": _COUNT,
    "moe_extended_tp": _BOOL,
    # A torch dtype: a name in a file, or the object NeMo-Run's YAML writes for it; it
    # shapes no group (ParallelismConfig keeps it as text).
    "pipeline_dtype": FieldType("any", nullable=True),
    "encoder_tensor_model_parallel_size": _NAT,
    "encoder_pipeline_model_parallel_size": _NAT,
    "pipeline_model_parallel_comm_backend": FieldType("choice", nullable=True,
                                                      choices=("nccl", "ucc")),
    "num_layers_in_first_pipeline_stage": FieldType("int", nullable=True),
    "num_layers_in_last_pipeline_stage": FieldType("int", nullable=True),
    "account_for_embedding_in_pipeline_split": _BOOL,
    "account_for_loss_in_pipeline_split": _BOOL,
    "use_te_rng_tracker": _BOOL,
    "expert_tensor_parallel_size": FieldType("int", nullable=True),
    "use_tp_pp_dp_mapping": _BOOL,
    "num_distributed_optimizer_instances": _COUNT,
    "nccl_communicator_config_path": FieldType("str", nullable=True),
    "use_sharp": _BOOL,
    "pipeline_model_parallel_layout": FieldType("any", nullable=True),
    "use_gloo_process_groups": _BOOL,
    "create_all_gather_group": _BOOL,
    "world_size": FieldType("int", nullable=True),
    "order": FieldType("str", nullable=True),
    "hierarchical_context_parallel_sizes": FieldType("ints", nullable=True),
    "rank_offset": _NAT,
    "hybrid_context_parallel": _BOOL,
    "sharp_enabled_group": FieldType("choice", nullable=True, choices=("dp", "dp_replica")),
    "gtp_remat_size": _COUNT,
    "expert_gtp_remat_size": _COUNT,
    "distributed_timeout_minutes": _COUNT,
    "high_priority_stream_groups": FieldType("names", choices=PG_NAMES),
}


def _digits(text: str) -> bool:
    """ASCII decimal digits only (``str.isdigit`` also takes '²', which ``int`` refuses)."""
    return text.isascii() and text.isdigit()


def _refuse(where: str, name: str, ftype: FieldType, value: Any, fix: str) -> LayoutError:
    shown = f"the string {value!r}" if isinstance(value, str) else repr(value)
    return LayoutError(f"{where}: {name} must be {ftype.describe()}, got {shown}; {fix}.",
                       **{name: value, "source": where})


def parse_field(name: str, value: Any, *, where: str, from_text: bool = False) -> Any:
    """``value`` of field ``name`` read strictly; ``from_text``: command-line text.

    >>> parse_field("world_size", "16", where="--set world_size=16", from_text=True)
    16
    >>> parse_field("hierarchical_context_parallel_sizes", "2,2", where="--set", from_text=True)
    (2, 2)
    """
    ftype = FIELD_TYPES.get(name)
    if ftype is None:  # not a field: from_dict names the unknown key with a close match
        return value
    if from_text and isinstance(value, str):
        return _from_text(name, value, ftype, where)
    if value is None:
        if ftype.nullable:
            return None
        raise _refuse(where, name, ftype, value, f"give {name} a value or leave it out")
    reader = _READERS.get(ftype.kind)
    return value if reader is None else reader(name, value, ftype, where)


def _read_bool(name: str, value: Any, ftype: FieldType, where: str) -> bool:
    if isinstance(value, bool):
        return value
    fix = (f"write {value.strip().lower()} without quotes"
           if isinstance(value, str) and value.strip().lower() in ("true", "false")
           else "write true or false")
    raise _refuse(where, name, ftype, value, fix)


def _read_int(name: str, value: Any, ftype: FieldType, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fix = "write a whole number such as 2"
        if isinstance(value, str) and _digits(value.strip()):
            fix = "write it without quotes"
        elif isinstance(value, float) and value.is_integer():
            fix = f"write {int(value)}"
        raise _refuse(where, name, ftype, value, fix)
    if value < ftype.minimum:
        raise _refuse(where, name, ftype, value, f"use a value >= {ftype.minimum}")
    return value


def _read_choice(name: str, value: Any, ftype: FieldType, where: str) -> str:
    if isinstance(value, str) and value in ftype.choices:
        return value
    raise _refuse(where, name, ftype, value, f"use one of {', '.join(ftype.choices)}"
                  + (" or leave it out" if ftype.nullable else ""))


def _read_str(name: str, value: Any, ftype: FieldType, where: str) -> str:
    if isinstance(value, str):
        return value
    raise _refuse(where, name, ftype, value, "write it as a string")


def _read_ints(name: str, value: Any, ftype: FieldType, where: str) -> tuple[int, ...]:
    items = value.replace(" ", "").split(",") if isinstance(value, str) else value
    if isinstance(items, (list, tuple)):
        out: list[Any] = [int(i) if isinstance(i, str) and _digits(i) else i for i in items]
        if all(type(i) is int and i >= 1 for i in out):
            return tuple(int(i) for i in out)
    raise _refuse(where, name, ftype, value, "write it like [2, 2] (or 2,2)")


def _read_names(name: str, value: Any, ftype: FieldType, where: str) -> tuple[str, ...]:
    items = value.replace(" ", "").split(",") if isinstance(value, str) else value
    if isinstance(items, (list, tuple)) and all(isinstance(i, str) and i for i in items):
        unknown = [i for i in items if i not in ftype.choices]
        if not unknown:
            return tuple(items)
        raise _refuse(where, name, ftype, value,
                      f"{', '.join(map(repr, unknown))} is no group Megatron configures; use "
                      f"names from {', '.join(ftype.choices)}")
    raise _refuse(where, name, ftype, value, "write it like [dp_cp, ep_dp] (or dp_cp,ep_dp)")


_READERS = {"bool": _read_bool, "int": _read_int, "choice": _read_choice, "str": _read_str,
            "ints": _read_ints, "names": _read_names}


def _from_text(name: str, text: str, ftype: FieldType, where: str) -> Any:
    """Command-line text (``--set``, ``--change``): the CLI spellings are allowed."""
    word = text.strip()
    low = word.lower()
    if ftype.nullable and low in NULL_WORDS:  # an empty value is refused below, not None
        return None
    if ftype.kind == "bool":
        if low in TRUE_WORDS:
            return True
        if low in FALSE_WORDS:
            return False
        raise _refuse(where, name, ftype, text,
                      f"write one of {'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)}")
    if ftype.kind == "int":
        digits = word[1:] if word.startswith("-") else word
        if not _digits(digits):
            raise _refuse(where, name, ftype, text, "write a whole number such as 2")
        return parse_field(name, int(word), where=where)
    if ftype.kind == "ints":
        body = word.strip("[]()")
        return parse_field(name, body, where=where)
    if ftype.kind == "names":
        return parse_field(name, word.strip("[]()"), where=where)
    if ftype.kind == "any":
        import yaml

        if not word:
            raise _refuse(where, name, ftype, text, "give a value (or null)")
        try:
            value = yaml.safe_load(word)
        except yaml.YAMLError:
            return word
        # YAML reads text such as '#' (a comment) as null; null was asked for only by the
        # null words handled above, so the text stays what the user wrote
        return word if value is None else value
    return parse_field(name, word, where=where)


__all__ = ["FIELD_TYPES", "PG_NAMES", "FieldType", "parse_field"]
