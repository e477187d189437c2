"""Megatron-LM's own launch arguments (``pretrain_gpt.py ...``) as an input.

Since megatron-core 0.18 ``create_all_gather_group`` exists only as Megatron-LM's
``--create-all-gather-group`` training argument, so the command line a user has is
``pretrain_gpt.py`` with dozens of arguments. :func:`parse_megatron_args` reads such a list
whole and sorts every argument into what simharness uses and what it does not:

- ``parallel``: :class:`~simharness.config.ParallelismConfig` fields (NeMo's names) from the
  parallelism arguments, the virtual pipeline size derived as Megatron-LM's
  ``validate_args`` derives it;
- ``ddp``: a recipe-``ddp:``-block-like mapping (the vocabulary of
  :func:`simharness.ag_readers.impl_from_ddp_block`) from the data-parallel
  implementation arguments, with ``grad_reduce_in_fp32`` as Megatron-LM sets it (with
  ``--bf16`` it is on unless ``--grad-reduce-in-bf16`` or ``--main-grads-dtype bf16``);
- ``model``: ``simharness simulate``'s model and step flags (parameter names);
- ``unused``: every other argument Megatron-LM knows, accepted and listed as not affecting
  the result.

An argument Megatron-LM does not know is refused (:class:`MegatronArgsError`) with the
closest known name. The known names and how many values each takes are data,
``megatron_lm_arguments.txt`` next to this module, read from Megatron-LM's
``megatron/training/arguments.py`` (``add_megatron_arguments``) at commit
:data:`MEGATRON_LM_COMMIT`; the file's header says how.

>>> a = parse_megatron_args(["--tensor-model-parallel-size", "8", "--num-layers", "96",
...                          "--use-distributed-optimizer", "--lr", "6e-5", "--bf16"])
>>> a.parallel, a.ddp["use_distributed_optimizer"], a.ddp["grad_reduce_in_fp32"]
({'tensor_model_parallel_size': 8}, True, True)
>>> a.model, a.unused
({'layers': 96}, ('--lr',))
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from .errors import SimharnessError

MEGATRON_LM_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
ARGUMENTS_FILE = Path(__file__).with_name("megatron_lm_arguments.txt")

#: older spellings Megatron-LM no longer defines, read as today's (see the data file)
OLD_SPELLINGS = {"--use-custom-fsdp": "--use-megatron-fsdp"}

#: parallelism arguments -> ParallelismConfig field (int unless listed in _FLAG_FIELDS)
PARALLEL = {
    "--tensor-model-parallel-size": "tensor_model_parallel_size",
    "--pipeline-model-parallel-size": "pipeline_model_parallel_size",
    "--context-parallel-size": "context_parallel_size",
    "--expert-model-parallel-size": "expert_model_parallel_size",
    "--expert-tensor-parallel-size": "expert_tensor_parallel_size",
    "--num-distributed-optimizer-instances": "num_distributed_optimizer_instances",
    "--hierarchical-context-parallel-sizes": "hierarchical_context_parallel_sizes",
    "--use-tp-pp-dp-mapping": "use_tp_pp_dp_mapping",
    "--create-all-gather-group": "create_all_gather_group",
    "--hybrid-context-parallel": "hybrid_context_parallel",
    "--disable-gloo-process-groups": "use_gloo_process_groups",  # stored as False
}
#: read to derive the virtual pipeline size (Megatron-LM validate_args, d98e8a6)
VPP_ARGS = ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank")

#: data-parallel implementation arguments -> ddp-block key
DDP = {
    "--use-distributed-optimizer": "use_distributed_optimizer",
    "--use-megatron-fsdp": "use_megatron_fsdp",
    "--data-parallel-sharding-strategy": "data_parallel_sharding_strategy",
    "--overlap-param-gather": "overlap_param_gather",
    "--overlap-grad-reduce": "overlap_grad_reduce",
    "--megatron-fsdp-version": "megatron_fsdp_version",
}
#: read to derive grad_reduce_in_fp32 (Megatron-LM validate_args and training.get_model)
GRAD_DTYPE_ARGS = ("--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16", "--bf16",
                   "--main-grads-dtype")

#: model and step arguments -> ``simharness simulate`` parameter
MODEL = {
    "--num-layers": "layers",
    "--hidden-size": "hidden_size",
    "--ffn-hidden-size": "ffn_hidden_size",
    "--num-attention-heads": "num_attention_heads",
    "--num-query-groups": "num_query_groups",
    "--kv-channels": "kv_channels",
    "--vocab-size": "vocab_size",
    "--num-experts": "num_moe_experts",
    "--moe-ffn-hidden-size": "moe_ffn_hidden_size",
    "--moe-router-topk": "moe_router_topk",
    "--moe-shared-expert-intermediate-size": "moe_shared_expert_intermediate_size",
    "--seq-length": "seq_length",
    "--micro-batch-size": "micro_batch_size",
    "--decoder-first-pipeline-num-layers": "first_layers",
    "--decoder-last-pipeline-num-layers": "last_layers",
    "--account-for-embedding-in-pipeline-split": "acc_embedding",
    "--account-for-loss-in-pipeline-split": "acc_loss",
    "--pipeline-model-parallel-layout": "pp_layout",
    "--overlap-param-gather-with-optimizer-step": "opt_step",
}
_STR_VALUES = {"--data-parallel-sharding-strategy", "--pipeline-model-parallel-layout",
               "--main-grads-dtype"}


class MegatronArgsError(SimharnessError, ValueError):
    """A Megatron-LM argument list simharness cannot read: an unknown argument, a missing
    or bad value (exit 2)."""


@dataclass(frozen=True)
class MegatronArgs:
    """A ``pretrain_gpt.py`` argument list, sorted (see the module docstring)."""

    parallel: dict[str, Any] = field(default_factory=dict)
    ddp: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    unused: tuple[str, ...] = ()
    world_size: int | None = None  # from torchrun's --nproc-per-node x --nnodes, when given
    notes: tuple[str, ...] = ()
    used: tuple[str, ...] = ()  # the arguments read, in order
    model_notes: tuple[str, ...] = ()  # widths filled in as Megatron-LM does (model only)

    @property
    def has_ddp(self) -> bool:
        """Whether any data-parallel implementation argument was given (else the
        implementation is Megatron-LM's default: plain DDP)."""
        return any(k in self.ddp for k in ("use_distributed_optimizer", "use_megatron_fsdp",
                                           "use_custom_fsdp"))


@cache
def known_arguments() -> dict[str, str]:
    """Every Megatron-LM option name -> ``flag``, ``value`` or ``list`` (the data file)."""
    out: dict[str, str] = {}
    for line in ARGUMENTS_FILE.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        *names, takes = line.split()
        for n in names:
            out[n] = takes
    return out


def split_text(text: str) -> list[str]:
    """A shell-quoted argument list (comments, backslash line continuations, quotes) as
    words; a leading launcher (``torchrun ... pretrain_gpt.py``) is kept for
    :func:`parse_megatron_args` to read.

    >>> split_text('--num-layers 96 \\\\\\n  --step-batch-size-schedule "0:16 2.4B:320"  # x')
    ['--num-layers', '96', '--step-batch-size-schedule', '0:16 2.4B:320']
    """
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise MegatronArgsError(f"Megatron-LM arguments: {exc} (an unclosed quote?); write "
                                f"them as a shell would read them.") from None


def read_args_file(path: str | Path) -> list[str]:
    """The words of a ``--megatron-args`` file (see :func:`split_text`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MegatronArgsError(f"--megatron-args {path}: not UTF-8 text; pass the file of "
                                f"pretrain_gpt.py arguments.") from None
    return split_text(text)


def _launcher(words: list[str]) -> tuple[list[str], int | None]:
    """Drop a leading ``[torchrun ARGS] [python] script.py``; the world torchrun's
    ``--nproc-per-node`` x ``--nnodes`` gives, when both are numbers."""
    script = next((i for i, w in enumerate(words) if w.endswith(".py")
                   and not w.startswith("-")), None)
    if script is None:
        return words, None
    head, rest = words[:script], words[script + 1:]
    opts: dict[str, str] = {}
    for i, w in enumerate(head):
        key, eq, val = w.partition("=")
        key = key.replace("_", "-")
        if key in ("--nproc-per-node", "--nnodes"):
            opts[key] = val if eq else (head[i + 1] if i + 1 < len(head) else "")
    n, nodes = opts.get("--nproc-per-node", ""), opts.get("--nnodes", "1")
    world = int(n) * int(nodes) if n.isdigit() and nodes.isdigit() else None
    return rest, world


def _closest(name: str) -> str:
    close = difflib.get_close_matches(name, list(known_arguments()) + list(OLD_SPELLINGS), n=1,
                                      cutoff=0.7)
    return f"did you mean {close[0]}? " if close else ""


def _number(name: str, text: str, *, low: int = 0) -> int:
    if not text.strip().isdigit() or int(text) < low:
        raise MegatronArgsError(f"Megatron-LM argument {name} {text!r}: expected a whole number "
                                f">= {low}; fix the value.")
    return int(text)


def _tokens(words: Sequence[str]) -> list[tuple[str, str | list[str] | bool]]:
    """``(name, value)`` per argument: True for a flag, a string or a list of strings."""
    known = known_arguments()
    out: list[tuple[str, str | list[str] | bool]] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            raise MegatronArgsError(
                f"Megatron-LM argument list: {word!r} is not an --option (a value without its "
                f"option, or a stray word); pass pretrain_gpt.py's arguments as written.")
        name, eq, inline = word.partition("=")
        if name in OLD_SPELLINGS:
            takes = "flag"
        elif name in known:
            takes = known[name]
        else:
            raise MegatronArgsError(
                f"Megatron-LM has no argument {name} (megatron/training/arguments.py at "
                f"{MEGATRON_LM_COMMIT[:10]}); {_closest(name)}remove it or fix its spelling.")
        if takes == "flag":
            if eq:
                raise MegatronArgsError(f"Megatron-LM argument {name} is a switch and takes no "
                                        f"value; write {name} alone.")
            out.append((name, True))
            continue
        if eq:
            out.append((name, inline if takes == "value" else [inline]))
            continue
        values = []
        if takes == "value":
            if i < len(words) and words[i].partition("=")[0] not in known:
                values.append(words[i])  # a value may start with "-" (-1, -5e-3)
                i += 1
        else:
            while i < len(words) and not words[i].startswith("--"):
                values.append(words[i])
                i += 1
        if not values:
            raise MegatronArgsError(f"Megatron-LM argument {name} needs a value; give it after "
                                    f"{name}.")
        out.append((name, values[0] if takes == "value" else values))
    return out


def parse_megatron_args(words: Sequence[str]) -> MegatronArgs:
    """Sort a ``pretrain_gpt.py`` argument list (see the module docstring)."""
    words, world = _launcher(list(words))
    tokens = _tokens(words)
    seen: dict[str, Any] = {}
    for name, value in tokens:
        if name in seen and seen[name] != value:
            raise MegatronArgsError(f"Megatron-LM argument {name} is given twice ({seen[name]} "
                                    f"and {value}); give it once.")
        seen[name] = value
    parallel: dict[str, Any] = {}
    ddp: dict[str, Any] = {}
    model: dict[str, Any] = {}
    unused: list[str] = []
    used: list[str] = []
    notes: list[str] = []
    for name, value in seen.items():
        if name in PARALLEL:
            key = PARALLEL[name]
            if name == "--disable-gloo-process-groups":
                parallel[key] = False
            elif value is True:
                parallel[key] = True
            elif isinstance(value, list):
                parallel[key] = [_number(name, v, low=1) for v in value]
            else:
                parallel[key] = _number(name, str(value), low=1)
        elif name in DDP:
            key = DDP[name]
            ddp[key] = (value if value is True or name in _STR_VALUES
                        else _number(name, str(value), low=1))
        elif name == "--use-custom-fsdp":
            ddp["use_custom_fsdp"] = True
            notes.append("--use-custom-fsdp is the old name of --use-megatron-fsdp (removed "
                         "from Megatron-LM in af28b5a559)")
        elif name in MODEL:
            key = MODEL[name]
            model[key] = value if value is True or name in _STR_VALUES \
                else _number(name, str(value), low=0)
        elif name in VPP_ARGS or name in GRAD_DTYPE_ARGS:
            pass  # read below
        else:
            unused.append(name)
            continue
        used.append(name)
    vpp = _vpp(seen, parallel)
    if vpp is not None:
        parallel["virtual_pipeline_model_parallel_size"] = vpp
    if "--swiglu" in seen:
        used.append("--swiglu")
        unused.remove("--swiglu")
    model_notes: list[str] = []
    _model_defaults(seen, model, model_notes)
    ddp["grad_reduce_in_fp32"] = _grad_reduce_in_fp32(seen)
    if "--num-query-groups" in seen and "--group-query-attention" not in seen:
        model.pop("num_query_groups", None)
        notes.append("--num-query-groups without --group-query-attention: Megatron-LM uses "
                     "one key/value head per attention head")
    return MegatronArgs(parallel, ddp, model, tuple(unused), world, tuple(notes), tuple(used),
                        tuple(model_notes))


def _model_defaults(seen: Mapping[str, Any], model: dict[str, Any], notes: list[str]) -> None:
    """The widths Megatron-LM's ``validate_args`` fills in when they are not given
    (megatron/training/arguments.py at d98e8a6): ``ffn_hidden_size`` 4 h (with ``--swiglu``
    ``int(4 h * 2/3 / 64) * 64``); ``moe_ffn_hidden_size`` = ``ffn_hidden_size`` with
    experts; ``--num-experts 0`` is no experts."""
    if model.get("num_moe_experts") == 0:
        del model["num_moe_experts"]
    hidden = model.get("hidden_size")
    if hidden is not None and "ffn_hidden_size" not in model:
        model["ffn_hidden_size"] = (int((4 * hidden * 2 / 3) / 64) * 64 if "--swiglu" in seen
                                    else 4 * hidden)
        notes.append(f"ffn_hidden_size {model['ffn_hidden_size']} as Megatron-LM derives it")
    if "num_moe_experts" in model and "moe_ffn_hidden_size" not in model \
            and "ffn_hidden_size" in model:
        model["moe_ffn_hidden_size"] = model["ffn_hidden_size"]
        notes.append("moe_ffn_hidden_size = ffn_hidden_size, Megatron-LM's default")


def _vpp(seen: Mapping[str, Any], parallel: Mapping[str, Any]) -> int | None:
    """The virtual pipeline size as Megatron-LM's ``validate_args`` derives it
    (megatron/training/arguments.py at d98e8a6: ``--num-virtual-stages-per-pipeline-rank``
    as is; ``--num-layers-per-virtual-pipeline-stage`` divides the layers per stage; 1 is
    no virtual pipeline)."""
    stages = seen.get("--num-virtual-stages-per-pipeline-rank")
    per = seen.get("--num-layers-per-virtual-pipeline-stage")
    if stages is not None and per is not None:
        raise MegatronArgsError("Megatron-LM takes one of --num-layers-per-virtual-pipeline-stage "
                                "and --num-virtual-stages-per-pipeline-rank; give one.")
    if stages is not None:
        vpp = _number("--num-virtual-stages-per-pipeline-rank", stages, low=1)
    elif per is not None:
        per_n = _number("--num-layers-per-virtual-pipeline-stage", per, low=1)
        if "--num-layers" not in seen:
            raise MegatronArgsError("--num-layers-per-virtual-pipeline-stage needs --num-layers "
                                    "(the virtual pipeline size is layers / pp / it).")
        layers = _number("--num-layers", seen["--num-layers"], low=1)
        layers += bool(seen.get("--account-for-embedding-in-pipeline-split"))
        layers += bool(seen.get("--account-for-loss-in-pipeline-split"))
        pp = parallel.get("pipeline_model_parallel_size", 1)
        if layers % pp or (layers // pp) % per_n:
            raise MegatronArgsError(
                f"--num-layers {layers} over --pipeline-model-parallel-size {pp} does not divide "
                f"by --num-layers-per-virtual-pipeline-stage {per_n} (Megatron-LM asserts it); "
                f"fix one of them.")
        vpp = layers // pp // per_n
    else:
        return None
    return vpp if vpp > 1 else None


def _grad_reduce_in_fp32(seen: Mapping[str, Any]) -> bool:
    """Megatron-LM's ``accumulate_allreduce_grads_in_fp32``, which ``get_model`` passes as
    DistributedDataParallelConfig's ``grad_reduce_in_fp32`` (megatron/training/training.py
    and arguments.py ``validate_args`` at d98e8a6): the flag, or ``--bf16`` unless
    ``--grad-reduce-in-bf16`` or ``--main-grads-dtype bf16``."""
    if seen.get("--grad-reduce-in-bf16"):
        return False
    if seen.get("--accumulate-allreduce-grads-in-fp32"):
        return True
    return bool(seen.get("--bf16")) and seen.get("--main-grads-dtype", "fp32") == "fp32"


__all__ = ["ARGUMENTS_FILE", "DDP", "MEGATRON_LM_COMMIT", "MODEL", "PARALLEL", "MegatronArgs",
           "MegatronArgsError", "known_arguments", "parse_megatron_args", "read_args_file",
           "split_text"]
