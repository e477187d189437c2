"""The job's shape: a model description -> per-pipeline-stage parameters and FLOPs.

A :class:`ModelSpec` (hidden size, FFN sizes, layers, experts, vocabulary,
attention shape; or a Megatron / Hugging Face config file) gives every
transformer layer's *dense* parameters (attention, dense MLP, shared experts,
router, norms) and *expert* parameters (routed experts), and its forward FLOPs
per token. :func:`pipeline_split` places the layers on pipeline stages (and
virtual-pipeline chunks) exactly as Megatron-Core does, and
:func:`stage_work` turns both into what one rank of each stage holds:

- dense parameters are sharded by TP and data-parallel over ``dp_cp``;
- expert parameters are sharded by EP x expert-TP and data-parallel over the
  expert-DP group ``ep_dp``;
- the first stage also holds the input embedding, the last the output layer.

Megatron's split (``megatron/core/transformer/transformer_block.py``
``get_num_layers_to_build`` and ``transformer_config.py`` ``__post_init__``,
Megatron-LM main d98e8a6): without ``num_layers_in_first/last_pipeline_stage``
the layers (plus one for the embedding / one for the loss when
``account_for_embedding/loss_in_pipeline_split``) must divide evenly by the
pipeline size, else Megatron refuses; with them, the remaining middle layers
must divide evenly by the middle stages; the uneven options and the
account-for options exclude each other; with virtual pipelining every stage's
count must divide by the virtual size. Chunks are laid out chunk-major
(chunk 0 of stages 0..pp-1, then chunk 1, ...), as
``get_transformer_layer_offset`` counts them.

>>> [len(r) for st in pipeline_split(10, 4, first=1, last=1) for r in st]
[1, 4, 4, 1]
>>> pipeline_split(8, 2, vpp=2)
((range(0, 2), range(4, 6)), (range(2, 4), range(6, 8)))
>>> m = ModelSpec(hidden_size=4096, num_layers=32, ffn_hidden_size=14336, vocab_size=128256,
...               num_attention_heads=32, num_query_groups=8)
>>> round(m.total_params() / 1e9, 2)   # Llama-3-8B
8.03
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..topology.errors import TopologyError
from .pp_layout import expand_layout, layout_split

# ---------------------------------------------------------------- the model


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer (GPT / Llama / Mixtral / DeepSeek shapes).

    ``ffn_hidden_size`` is the dense MLP width; ``num_moe_experts`` > 0 makes
    layers MoE (all of them, or all but the first ``moe_first_dense_layers``),
    each with ``moe_ffn_hidden_size`` per expert, ``moe_router_topk`` active
    experts per token and an optional shared expert of
    ``moe_shared_expert_intermediate_size``. Attention is multi-head / grouped
    (``num_query_groups``) with ``kv_channels`` per head (default hidden /
    heads), or multi-latent (MLA) when ``kv_lora_rank`` is given. Without
    ``num_attention_heads`` attention counts ``4 h^2`` parameters.
    """

    hidden_size: int
    num_layers: int
    ffn_hidden_size: int | None = None
    vocab_size: int = 0
    num_attention_heads: int | None = None
    num_query_groups: int | None = None
    kv_channels: int | None = None
    num_moe_experts: int = 0
    moe_ffn_hidden_size: int | None = None
    moe_router_topk: int | None = None
    moe_shared_expert_intermediate_size: int = 0
    moe_first_dense_layers: int = 0
    gated_linear_unit: bool = True
    untie_embeddings_and_output_weights: bool = True
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_pos_emb_head_dim: int = 0
    v_head_dim: int | None = None

    def __post_init__(self):
        _check_model(self)

    # ---- per layer
    @property
    def _mlp_mult(self) -> int:
        return 3 if self.gated_linear_unit else 2

    def attention_params(self) -> int:
        h = self.hidden_size
        nh = self.num_attention_heads
        if self.kv_lora_rank is not None:
            assert nh is not None and self.qk_head_dim is not None and self.v_head_dim is not None
            qk = self.qk_head_dim + self.qk_pos_emb_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * nh * qk if self.q_lora_rank
                 else h * nh * qk)
            kv = h * (self.kv_lora_rank + self.qk_pos_emb_head_dim) \
                + self.kv_lora_rank * nh * (self.qk_head_dim + self.v_head_dim)
            return q + kv + nh * self.v_head_dim * h
        if nh is None:
            return 4 * h * h
        d = self.kv_channels or h // nh
        g = self.num_query_groups or nh
        return h * nh * d + 2 * h * g * d + nh * d * h

    def is_moe_layer(self, index: int) -> bool:
        return self.num_moe_experts > 0 and index >= self.moe_first_dense_layers

    def layer_params(self, index: int) -> tuple[int, int]:
        """(dense, expert) parameters of layer ``index`` (0-based)."""
        h = self.hidden_size
        dense = self.attention_params() + 2 * h  # + two norms
        if self.is_moe_layer(index):
            assert self.moe_ffn_hidden_size is not None
            dense += h * self.num_moe_experts  # router
            dense += self._mlp_mult * h * self.moe_shared_expert_intermediate_size
            expert = self.num_moe_experts * self._mlp_mult * h * self.moe_ffn_hidden_size
            return dense, expert
        assert self.ffn_hidden_size is not None
        return dense + self._mlp_mult * h * self.ffn_hidden_size, 0

    def layer_flops_per_token(self, index: int, seq_length: int) -> float:
        """Forward FLOPs of layer ``index`` per token: 2 x the parameters a token
        uses (top-k experts only) + causal attention scores (half the s x s matrix)."""
        dense, _ = self.layer_params(index)
        active = float(dense)
        if self.is_moe_layer(index):
            assert self.moe_ffn_hidden_size is not None and self.moe_router_topk is not None
            active += self.moe_router_topk * self._mlp_mult * self.hidden_size \
                * self.moe_ffn_hidden_size
        nh = self.num_attention_heads or 1
        if self.kv_lora_rank is not None:
            assert self.qk_head_dim is not None and self.v_head_dim is not None
            dqk, dv = self.qk_head_dim + self.qk_pos_emb_head_dim, self.v_head_dim
        else:
            dqk = dv = self.kv_channels or self.hidden_size // nh
        scores = 2.0 * seq_length * nh * (dqk + dv) * 0.5  # QK^T and AV, causal half
        return 2.0 * active + scores

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def total_params(self) -> int:
        out = self.embedding_params() * (2 if self.untie_embeddings_and_output_weights else 1)
        return out + sum(sum(self.layer_params(i)) for i in range(self.num_layers)) \
            + self.hidden_size  # final norm


def _check_types(m: ModelSpec) -> None:
    for f in fields(m):
        v = getattr(m, f.name)
        if f.type in ("bool",):
            if not isinstance(v, bool):
                raise TopologyError(f"model field {f.name} must be true or false, got {v!r}")
            continue
        low = 1 if f.name in ("hidden_size", "num_layers") else 0
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
            raise TopologyError(f"model field {f.name} must be a whole number >= {low}, "
                                f"got {v!r}")


def _missing(m: ModelSpec) -> list[str]:
    missing = []
    if m.num_moe_experts > 0:
        if m.moe_ffn_hidden_size is None:
            missing.append("moe_ffn_hidden_size (the FFN width of one expert)")
        if not m.moe_router_topk:
            missing.append("moe_router_topk (experts per token)")
        if m.moe_first_dense_layers and m.ffn_hidden_size is None:
            missing.append("ffn_hidden_size (the dense layers' FFN width)")
    elif m.ffn_hidden_size is None:
        missing.append("ffn_hidden_size")
    if m.kv_lora_rank is not None:
        missing += [f"{name} (multi-latent attention)"
                    for name in ("num_attention_heads", "qk_head_dim", "v_head_dim")
                    if getattr(m, name) is None]
    return missing


def _check_model(m: ModelSpec) -> None:
    _check_types(m)
    if missing := _missing(m):
        raise TopologyError("the model description lacks " + "; ".join(missing))
    nh = m.num_attention_heads
    moe = m.num_moe_experts > 0
    problems = [
        (nh and m.kv_lora_rank is None and m.kv_channels is None and m.hidden_size % nh,
         f"hidden_size {m.hidden_size} is not divisible by num_attention_heads {nh}; give "
         "kv_channels"),
        (nh and m.num_query_groups and nh % m.num_query_groups,
         f"num_attention_heads {nh} is not divisible by num_query_groups {m.num_query_groups}"),
        (m.num_query_groups is not None and nh is None,
         "num_query_groups given without num_attention_heads"),
        (moe and m.moe_router_topk and m.moe_router_topk > m.num_moe_experts,
         f"moe_router_topk {m.moe_router_topk} exceeds num_moe_experts {m.num_moe_experts}"),
        (m.moe_first_dense_layers > m.num_layers,
         f"moe_first_dense_layers {m.moe_first_dense_layers} exceeds num_layers "
         f"{m.num_layers}"),
        (not moe and (m.moe_ffn_hidden_size or m.moe_router_topk or m.moe_first_dense_layers
                      or m.moe_shared_expert_intermediate_size),
         "MoE fields (moe_ffn_hidden_size, moe_router_topk, ...) given without "
         "num_moe_experts; give num_moe_experts or drop them"),
    ]
    for bad, message in problems:
        if bad:
            raise TopologyError(message)


# ---------------------------------------------------------------- config files
# Each ModelSpec field and the names it has in Megatron (first) and Hugging Face files.
_NAMES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "d_model", "n_embd"),
    "num_layers": ("num_layers", "num_hidden_layers", "n_layer"),
    "ffn_hidden_size": ("ffn_hidden_size", "intermediate_size", "n_inner"),
    "vocab_size": ("padded_vocab_size", "vocab_size"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_query_groups": ("num_query_groups", "num_key_value_heads"),
    "kv_channels": ("kv_channels", "head_dim"),
    "num_moe_experts": ("num_moe_experts", "num_experts", "num_local_experts",
                        "n_routed_experts"),
    "moe_ffn_hidden_size": ("moe_ffn_hidden_size", "moe_intermediate_size"),
    "moe_router_topk": ("moe_router_topk", "num_experts_per_tok"),
    "moe_shared_expert_intermediate_size": ("moe_shared_expert_intermediate_size",
                                            "shared_expert_intermediate_size"),
    "moe_first_dense_layers": ("first_k_dense_replace",),
    "gated_linear_unit": ("gated_linear_unit",),
    "untie_embeddings_and_output_weights": ("untie_embeddings_and_output_weights",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_head_dim": ("qk_head_dim", "qk_nope_head_dim"),
    "qk_pos_emb_head_dim": ("qk_pos_emb_head_dim", "qk_rope_head_dim"),
    "v_head_dim": ("v_head_dim",),
}
MODEL_FIELDS = tuple(_NAMES)


def _read_mapping(path: str | Path) -> dict:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise TopologyError(f"--model-config {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TopologyError(f"--model-config {path}: not a text file; give a config.json or "
                            "a Megatron YAML file") from None
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml
            raw = yaml.safe_load(text)
        else:
            raw = json.loads(text)
    except Exception as exc:  # json.JSONDecodeError, yaml.YAMLError
        raise TopologyError(f"--model-config {path}: cannot parse it ({_first_line(exc)})") \
            from None
    for section in ("model", "text_config"):
        if isinstance(raw, dict) and isinstance(raw.get(section), dict):
            raw = raw[section]
    if not isinstance(raw, dict):
        raise TopologyError(f"--model-config {path}: expected a mapping of model fields")
    return raw


def _hf_extras(raw: dict, out: dict[str, Any]) -> None:
    """Hugging Face spellings that are not a plain rename."""
    if "hidden_act" in raw and "gated_linear_unit" not in out:
        out["gated_linear_unit"] = str(raw["hidden_act"]).lower() in ("silu", "swiglu", "swish",
                                                                     "geglu", "gelu_glu")
    if "tie_word_embeddings" in raw and "untie_embeddings_and_output_weights" not in out:
        out["untie_embeddings_and_output_weights"] = not bool(raw["tie_word_embeddings"])
    if raw.get("n_shared_experts") and "moe_shared_expert_intermediate_size" not in out \
            and out.get("moe_ffn_hidden_size"):
        out["moe_shared_expert_intermediate_size"] = int(raw["n_shared_experts"]) \
            * int(out["moe_ffn_hidden_size"])
    if out.get("num_moe_experts") and "moe_ffn_hidden_size" not in out \
            and "num_local_experts" in raw and "ffn_hidden_size" in out:
        # Mixtral: intermediate_size is each expert's width, every layer MoE
        out["moe_ffn_hidden_size"] = out.pop("ffn_hidden_size")


def model_fields_from_file(path: str | Path) -> dict[str, Any]:
    """ModelSpec fields read from a Megatron (YAML/JSON, ``model:`` section allowed)
    or Hugging Face ``config.json``; two names of one field that disagree are an error."""
    raw = _read_mapping(path)
    out: dict[str, Any] = {}
    for name, aliases in _NAMES.items():
        found = {a: raw[a] for a in aliases if raw.get(a) is not None}
        if name == "vocab_size":  # Megatron writes the padded size next to the raw one
            found = dict(list(found.items())[:1])
        if len(set(map(repr, found.values()))) > 1:
            pairs = ", ".join(f"{a}={v!r}" for a, v in found.items())
            raise TopologyError(f"--model-config {path}: contradictory fields {pairs}; "
                                "keep one")
        if found:
            out[name] = next(iter(found.values()))
    _hf_extras(raw, out)
    pattern = _moe_pattern(raw, path)
    if pattern is not None and "moe_first_dense_layers" in out and \
            out["moe_first_dense_layers"] != pattern:
        raise TopologyError(f"--model-config {path}: moe_layer_freq puts {pattern} dense layers "
                            f"first but first_k_dense_replace says "
                            f"{out['moe_first_dense_layers']}; keep one")
    if pattern is not None:
        out["moe_first_dense_layers"] = pattern
    if not out:
        raise TopologyError(f"--model-config {path}: no model fields found (expected e.g. "
                            "hidden_size, num_layers / num_hidden_layers, ffn_hidden_size / "
                            "intermediate_size)")
    return out


def _moe_pattern(raw: dict, path) -> int | None:
    """Leading dense layers from Megatron's ``moe_layer_freq`` (1, a 0/1 list or
    ``"([0]*3+[1]*58)"``) or Hugging Face's ``mlp_only_layers`` / ``decoder_sparse_step``;
    other patterns are refused (only leading dense layers are modelled)."""
    import re
    freq = raw.get("moe_layer_freq")
    step = raw.get("decoder_sparse_step")
    if step not in (None, 1) or raw.get("mlp_only_layers"):
        raise TopologyError(f"--model-config {path}: interleaved dense/MoE layers "
                            "(decoder_sparse_step, mlp_only_layers) are not modelled; only "
                            "leading dense layers (first_k_dense_replace) are")
    if freq is None or freq == 1:
        return None
    if isinstance(freq, str):
        m = re.fullmatch(r"\s*\(?\s*\[0\]\s*\*\s*(\d+)\s*\+\s*\[1\]\s*\*\s*(\d+)\s*\)?\s*",
                         freq)
        if m:
            return int(m.group(1))
    if isinstance(freq, list) and all(x in (0, 1) for x in freq):
        k = freq.index(1) if 1 in freq else len(freq)
        if all(x == 1 for x in freq[k:]):
            return k
    raise TopologyError(f"--model-config {path}: moe_layer_freq {freq!r} is not modelled; "
                        "only 1 or leading dense layers then MoE ([0]*k+[1]*n) are")


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def model_spec(fields_: dict[str, Any], *, source: str = "the model description") -> ModelSpec:
    """A :class:`ModelSpec` from field values; missing required fields are named."""
    unknown = sorted(set(fields_) - set(MODEL_FIELDS))
    if unknown:
        raise TopologyError(f"unknown model field(s) {', '.join(unknown)}; known: "
                            f"{', '.join(MODEL_FIELDS)}")
    missing = [k for k in ("hidden_size", "num_layers") if fields_.get(k) is None]
    if missing:
        raise TopologyError(f"{source} lacks {' and '.join(missing)}")
    vals = {k: v for k, v in fields_.items() if v is not None}
    for k, v in vals.items():
        if isinstance(v, float) and v.is_integer():
            vals[k] = int(v)
    return ModelSpec(**vals)


# ---------------------------------------------------------------- pipeline split


def _suggest(num_layers: int, pp: int, vpp: int) -> str:
    """A first/last split Megatron accepts, e.g. ``--set num_layers_in_first_pipeline_stage=2
    --set num_layers_in_last_pipeline_stage=3``; empty when none exists."""
    if pp < 3:
        return ""
    for mid in range(math.ceil(num_layers / pp), 0, -1):
        if mid % vpp:
            continue
        rest = num_layers - mid * (pp - 2)
        for first in range(rest // 2, 0, -1):
            last = rest - first
            if last > 0 and not first % vpp and not last % vpp:
                return (f"e.g. --set num_layers_in_first_pipeline_stage={first} --set "
                        f"num_layers_in_last_pipeline_stage={last} ({first}, {mid} x {pp - 2}, "
                        f"{last})")
    return ""


def _uneven_counts(num_layers: int, pp: int, v: int, first: int | None,
                   last: int | None) -> tuple[int, ...]:
    """Megatron's uneven split (``transformer_config.py`` "Uneven PP" checks)."""
    counts: list[int | None] = [None] * pp
    for name, value, idx in (("first", first, 0), ("last", last, pp - 1)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TopologyError(f"num_layers_in_{name}_pipeline_stage must be a whole "
                                f"number >= 1, got {value!r}")
        if value % v:
            raise TopologyError(f"num_layers_in_{name}_pipeline_stage {value} is not "
                                f"divisible by the virtual pipeline size {v}")
        counts[idx] = value
    middle_stages = sum(c is None for c in counts)
    middle_layers = num_layers - sum(c for c in counts if c is not None)
    if middle_layers < 0 or bool(middle_layers) != bool(middle_stages) \
            or (middle_stages and middle_layers % middle_stages):
        raise TopologyError(
            f"{middle_layers} layers left for {middle_stages} middle pipeline stage(s) "
            f"(--layers {num_layers}, first {first}, last {last}); Megatron needs them to "
            "divide evenly")
    mid = middle_layers // middle_stages if middle_stages else 0
    if middle_stages and mid % v:
        raise TopologyError(f"{mid} layers per middle stage are not divisible by the "
                            f"virtual pipeline size {v}")
    return tuple(mid if c is None else c for c in counts)


def _even_counts(num_layers: int, pp: int, v: int, embedding: bool,
                 loss: bool) -> tuple[int, ...]:
    """Megatron's even split, one slot for the embedding / loss when accounted for."""
    total = num_layers + int(embedding) + int(loss)
    if total % pp:
        extra = " (+1 embedding, +1 loss)" if embedding and loss else \
            " (+1 embedding)" if embedding else " (+1 loss)" if loss else ""
        hint = _suggest(num_layers, pp, v) if not (embedding or loss) else ""
        raise TopologyError(
            f"--layers {num_layers}{extra} does not divide by --pp {pp}: Megatron refuses an "
            "uneven split unless num_layers_in_first/last_pipeline_stage say where the "
            "remainder goes" + (f"; {hint}" if hint else ""))
    per = total // pp
    if per % v:
        raise TopologyError(f"{per} layers per pipeline stage are not divisible by the virtual "
                            f"pipeline size {v}")
    counts = [per] * pp
    counts[0] -= int(embedding)
    counts[-1] -= int(loss)
    if min(counts) < 0:
        raise TopologyError("not enough layers for the embedding / loss stage")
    return tuple(counts)


def stage_layer_counts(num_layers: int, pp: int, *, vpp: int | None = None,
                       first: int | None = None, last: int | None = None,
                       embedding: bool = False, loss: bool = False) -> tuple[int, ...]:
    """Transformer layers of each pipeline stage, Megatron's checks applied.

    >>> stage_layer_counts(61, 16, first=2, last=3)[:3], stage_layer_counts(6, 4, embedding=True,
    ...                                                                       loss=True)
    ((2, 4, 4), (1, 2, 2, 1))
    """
    uneven = first is not None or last is not None
    if uneven and (embedding or loss):
        raise TopologyError("num_layers_in_first/last_pipeline_stage cannot be combined with "
                            "account_for_embedding/loss_in_pipeline_split (Megatron refuses "
                            "it); keep one of the two")
    if pp == 1:
        if uneven:
            raise TopologyError("num_layers_in_first/last_pipeline_stage need pipeline "
                                "parallelism (--pp >= 2)")
        return (num_layers,)
    v = vpp or 1
    if uneven:
        return _uneven_counts(num_layers, pp, v, first, last)
    return _even_counts(num_layers, pp, v, embedding, loss)


def pipeline_split(num_layers: int, pp: int, *, vpp: int | None = None,
                   first: int | None = None, last: int | None = None,
                   embedding: bool = False, loss: bool = False) -> tuple[tuple[range, ...], ...]:
    """Per stage, per virtual chunk: the range of global layer indices it builds."""
    counts = stage_layer_counts(num_layers, pp, vpp=vpp, first=first, last=last,
                                embedding=embedding, loss=loss)
    v = (vpp or 1) if pp > 1 else 1
    # chunk sizes; the embedding / loss slot comes off chunk 0 of stage 0 / the last chunk
    # of the last stage (get_num_layers_to_build)
    sizes = [[(c + int(embedding and s == 0) + int(loss and s == pp - 1)) // v
              for _ in range(v)] for s, c in enumerate(counts)]
    if embedding:
        sizes[0][0] -= 1
    if loss:
        sizes[-1][-1] -= 1
    out: list[list[range]] = [[] for _ in range(pp)]
    start = 0
    for chunk in range(v):
        for s in range(pp):
            out[s].append(range(start, start + sizes[s][chunk]))
            start += sizes[s][chunk]
    assert start == num_layers, (start, num_layers)
    return tuple(tuple(r) for r in out)


# ---------------------------------------------------------------- per-stage work


@dataclass(frozen=True)
class Slot:
    """One unit of a stage's model (a layer, the embedding or the output layer) on one
    rank: parameters in the all-gather dtype (bytes) and forward FLOPs per micro-batch;
    ``gemm``: the output (rows, columns) of its largest GEMM, (0, 0) when not known."""

    name: str
    chunk: int
    dense_bytes: float
    expert_bytes: float
    forward_flops: float
    gemm: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class StageWork:
    stage: int
    layers: tuple[range, ...]  # per virtual chunk
    slots: tuple[Slot, ...]

    @property
    def n_layers(self) -> int:
        return sum(len(r) for r in self.layers)

    @property
    def dense_bytes(self) -> float:
        return sum(s.dense_bytes for s in self.slots)

    @property
    def expert_bytes(self) -> float:
        return sum(s.expert_bytes for s in self.slots)

    @property
    def forward_flops(self) -> float:
        return sum(s.forward_flops for s in self.slots)


def stage_work(model: ModelSpec, split: tuple[tuple[range, ...], ...], *, tp: int, cp: int,
               ep: int, etp: int, bytes_per_param: float, tokens: int | None,
               seq_length: int | None) -> tuple[StageWork, ...]:
    """What one rank of each stage holds and computes (``tokens`` per micro-batch:
    micro-batch size x sequence length; FLOPs are 0 without it).

    Per rank: dense parameters / tp, expert parameters / (ep x etp), FLOPs of
    its ``tokens / cp`` tokens / tp (expert FLOPs assume balanced routing: each
    rank computes top-k experts for as many tokens as it holds).
    """
    toks = (tokens or 0) / cp
    seq = seq_length or 0
    out = []
    pp = len(split)
    for s, chunks in enumerate(split):
        slots: list[Slot] = []
        if s == 0 and model.vocab_size:
            slots.append(Slot("embedding", 0, model.embedding_params() * bytes_per_param / tp,
                              0.0, 0.0))
        for c, layers in enumerate(chunks):
            for i in layers:
                dense, expert = model.layer_params(i)
                fc1 = 0 if model.is_moe_layer(i) else (  # MoE: tokens per expert unknown
                    model._mlp_mult - 1) * (model.ffn_hidden_size or 0) // tp  # gated: 2 halves
                slots.append(Slot(f"layer {i}", c, dense * bytes_per_param / tp,
                                  expert * bytes_per_param / (ep * etp),
                                  toks * model.layer_flops_per_token(i, seq) / tp,
                                  (math.ceil(toks), fc1) if fc1 and toks else (0, 0)))
        if s == pp - 1 and model.vocab_size:
            own = model.untie_embeddings_and_output_weights or pp > 1  # else tied, same stage
            slots.append(Slot("output layer", len(chunks) - 1,
                              model.embedding_params() * bytes_per_param / tp if own else 0.0,
                              0.0, toks * 2.0 * model.embedding_params() / tp,
                              (math.ceil(toks), model.vocab_size // tp) if toks else (0, 0)))
        out.append(StageWork(s, chunks, tuple(slots)))
    return tuple(out)


def bytes_work(model_bytes: float, num_layers: int, split: tuple[tuple[range, ...], ...], *,
               tp: int, expert_bytes: float = 0.0, ep: int = 1, etp: int = 1,
               first_dense: int = 0) -> tuple[StageWork, ...]:
    """Stages for raw byte counts (no FLOPs known): ``model_bytes`` in all, of which
    ``expert_bytes`` are routed experts spread evenly over the MoE layers (all but the
    first ``first_dense``), the rest dense and spread evenly over every layer.

    >>> st = bytes_work(100.0, 4, pipeline_split(4, 2), tp=1, expert_bytes=60.0, ep=2,
    ...                 first_dense=1)
    >>> [(s.dense_bytes, s.expert_bytes) for s in st]
    [(20.0, 10.0), (20.0, 20.0)]
    """
    dense = (model_bytes - expert_bytes) / (num_layers * tp)
    moe_layers = num_layers - first_dense
    expert = expert_bytes / (moe_layers * ep * etp) if expert_bytes else 0.0
    return tuple(StageWork(s, chunks, tuple(
        Slot(f"layer {i}", c, dense, expert if i >= first_dense else 0.0, 0.0)
        for c, layers in enumerate(chunks) for i in layers))
        for s, chunks in enumerate(split))


MAX_MODEL_BYTES = 1e15  # 1 PB: far above any model; larger is a typo


def _pipeline_options(cfg, **given) -> dict[str, Any]:
    """first / last / embedding / loss from the flags, else from ``cfg``; a flag that
    contradicts the configuration is an error."""
    out = {}
    for name, flag, field_ in (
            ("first", "--decoder-first-pipeline-num-layers",
             "num_layers_in_first_pipeline_stage"),
            ("last", "--decoder-last-pipeline-num-layers", "num_layers_in_last_pipeline_stage"),
            ("embedding", "--account-for-embedding-in-pipeline-split",
             "account_for_embedding_in_pipeline_split"),
            ("loss", "--account-for-loss-in-pipeline-split",
             "account_for_loss_in_pipeline_split")):
        value, have = given.get(name), getattr(cfg, field_, None)
        if value is not None and have not in (None, False) and have != value:
            raise TopologyError(f"{flag} {value} contradicts {field_}={have} in the "
                                "configuration; give one")
        out[name] = value if value is not None else have
    out["embedding"], out["loss"] = bool(out["embedding"]), bool(out["loss"])
    return out


def _layout_option(cfg, given: str | None, pipe: dict[str, Any]) -> str | None:
    """The layout string from the flag, else from ``cfg``; Megatron refuses it beside
    num_layers_in_first/last_pipeline_stage or account_for_embedding/loss_in_pipeline_split."""
    have = getattr(cfg, "pipeline_model_parallel_layout", None)
    if given is not None and have is not None and str(have) != given:
        raise TopologyError(f"--pipeline-model-parallel-layout {given!r} contradicts "
                            f"pipeline_model_parallel_layout={have!r} in the configuration; "
                            "give one")
    text = given if given is not None else have
    if text is None:
        return None
    if not isinstance(text, str):
        raise TopologyError(f"pipeline_model_parallel_layout must be a layout string such as "
                            f"'Et*3|(tt|)*29,m|L', got {text!r}")
    clash = [k for k in ("first", "last") if pipe[k] is not None] + \
        [k for k in ("embedding", "loss") if pipe[k]]
    if clash:
        names = {"first": "num_layers_in_first_pipeline_stage",
                 "last": "num_layers_in_last_pipeline_stage",
                 "embedding": "account_for_embedding_in_pipeline_split",
                 "loss": "account_for_loss_in_pipeline_split"}
        raise TopologyError(f"pipeline_model_parallel_layout {text!r} cannot be combined with "
                            f"{', '.join(names[k] for k in clash)} (Megatron refuses it); the "
                            "layout already places every layer, keep one")
    return text


def _check_bytes(model_bytes, layers, pp: int) -> None:
    if isinstance(model_bytes, bool) or not isinstance(model_bytes, (int, float)):
        raise TopologyError(f"--model-bytes must be a byte count, got {model_bytes!r}")
    if not math.isfinite(model_bytes) or not 0 < model_bytes <= MAX_MODEL_BYTES:
        raise TopologyError(f"--model-bytes {model_bytes:g} is out of range; give the "
                            f"parameter bytes, > 0 and at most {MAX_MODEL_BYTES:g} (e.g. 140GB)")
    if layers is None:
        raise TopologyError("--model-bytes needs --layers (transformer layers of the model)")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise TopologyError(f"--layers must be a whole number >= 1, got {layers!r}")
    if layers < pp:
        raise TopologyError(f"--layers {layers} is fewer than the {pp} pipeline stages; "
                            f"use --layers >= {pp}")


def _check_expert_bytes(expert_bytes, model_bytes: float, ep: int, layers: int,
                       first_dense: int) -> float:
    """The routed experts' share of ``model_bytes``; with EP it must be given (an MoE
    model's experts ride on the expert-DP group, not dp_cp)."""
    if expert_bytes is None:
        if ep > 1:
            raise TopologyError(f"--ep {ep} with --model-bytes: give --expert-bytes (the routed "
                                "experts' share of the bytes, e.g. about 1308GB of DeepSeek-V3's "
                                "1342GB) or a model description, so expert parameters go on "
                                "the expert-DP group instead of dp_cp")
        return 0.0
    if isinstance(expert_bytes, bool) or not isinstance(expert_bytes, (int, float)) or \
            not math.isfinite(expert_bytes) or not 0 <= expert_bytes <= model_bytes:
        raise TopologyError(f"--expert-bytes {expert_bytes!r} must be between 0 and "
                            f"--model-bytes ({model_bytes:g})")
    if first_dense >= layers and expert_bytes:
        raise TopologyError(f"--moe-first-dense-layers {first_dense} leaves no MoE layer of "
                            f"the {layers} for --expert-bytes")
    return float(expert_bytes)


def _described_model(given: dict[str, Any], model_config: str | None,
                     layers: int | None) -> ModelSpec:
    fields_ = model_fields_from_file(model_config) if model_config else {}
    for k, v in given.items():
        if k in fields_ and fields_[k] != v:
            raise TopologyError(f"--{k.replace('_', '-')} {v} contradicts {k}={fields_[k]!r} "
                                f"in {model_config}; give one")
        fields_[k] = v
    if layers is not None:
        if fields_.get("num_layers") not in (None, layers):
            raise TopologyError(f"--layers {layers} contradicts num_layers="
                                f"{fields_['num_layers']} of the model description; give one")
        fields_["num_layers"] = layers
    return model_spec(fields_, source=f"--model-config {model_config}" if model_config
                      else "the model description")


def job_stages(cfg, *, model_bytes: float | None = None, layers: int | None = None,
               model_fields: dict[str, Any] | None = None, model_config: str | None = None,
               micro_batch_size: int | None = None, seq_length: int | None = None,
               bytes_per_param: float = 2.0, first: int | None = None, last: int | None = None,
               embedding: bool | None = None, loss: bool | None = None,
               expert_bytes: float | None = None, pp_layout: str | None = None
               ) -> tuple[tuple[StageWork, ...], ModelSpec | None]:
    """The stages of the job described by ``cfg`` (a ParallelismConfig) and either
    ``model_bytes`` + ``layers`` or a model description (``model_fields`` and/or
    ``model_config``); pipeline options given here must agree with ``cfg``'s.
    ``pp_layout`` (or ``cfg.pipeline_model_parallel_layout``): Megatron's layout string
    (:mod:`.pp_layout`), which then places every layer; with ``model_bytes`` it also gives
    ``layers`` when that is not given."""
    given = {k: v for k, v in (model_fields or {}).items() if v is not None}
    # --moe-first-dense-layers also shapes raw bytes (which layers hold expert bytes)
    described = bool(set(given) - ({"moe_first_dense_layers"} if model_bytes is not None
                                    else set())) or model_config is not None
    if (model_bytes is not None) == described:
        raise TopologyError("give --model-bytes or a model description (--model-config, "
                            "--hidden-size, ...), not both" if described else
                            "no model: give --model-bytes with --layers, or a model description "
                            "(--model-config FILE, or --hidden-size, --ffn-hidden-size, ...)")
    if (micro_batch_size is None) != (seq_length is None):
        raise TopologyError("--micro-batch-size and --seq-length go together (tokens per "
                            "micro-batch); give both")
    pipe = _pipeline_options(cfg, first=first, last=last, embedding=embedding, loss=loss)
    pp = int(cfg.pipeline_model_parallel_size)
    vpp = cfg.virtual_pipeline_model_parallel_size
    pp_layout = _layout_option(cfg, pp_layout, pipe)
    if pp_layout is not None and layers is None and model_bytes is not None:
        layers = "".join(expand_layout(pp_layout)).count("t")  # the layout places them all

    def split(num_layers: int) -> tuple[tuple[range, ...], ...]:
        if pp_layout is not None:
            return layout_split(pp_layout, pp, vpp=vpp, num_layers=num_layers)
        return pipeline_split(num_layers, pp, vpp=vpp, **pipe)
    tp = int(cfg.tensor_model_parallel_size)
    ep = int(getattr(cfg, "expert_model_parallel_size", 1) or 1)
    etp = int(getattr(cfg, "expert_tensor_parallel_size", None) or tp)
    if model_bytes is not None:
        _check_bytes(model_bytes, layers, 1 if pp_layout is not None else pp)
        assert layers is not None
        expert = _check_expert_bytes(expert_bytes, model_bytes, ep, layers,
                                     given.get("moe_first_dense_layers") or 0)
        return bytes_work(float(model_bytes), layers, split(layers),
                          tp=tp, expert_bytes=expert, ep=ep, etp=etp,
                          first_dense=given.get("moe_first_dense_layers") or 0), None
    if expert_bytes is not None:
        raise TopologyError("--expert-bytes goes with --model-bytes; a model description "
                            "gives the expert parameters itself")
    model = _described_model(given, model_config, layers)
    if model.num_layers < pp and pp_layout is None:
        raise TopologyError(f"the model's {model.num_layers} layers are fewer than the {pp} "
                            "pipeline stages")
    if model.num_moe_experts and model.num_moe_experts % ep:
        raise TopologyError(f"num_moe_experts {model.num_moe_experts} is not divisible by --ep "
                            f"{ep}")
    tokens = micro_batch_size * seq_length if micro_batch_size and seq_length else None
    return stage_work(model, split(model.num_layers), tp=tp, cp=int(cfg.context_parallel_size),
                      ep=ep, etp=etp, bytes_per_param=bytes_per_param, tokens=tokens,
                      seq_length=seq_length), model
