"""Megatron's getter of each group kind, per megatron-core profile: the one table.

Replay (``--engine megatron``), :func:`simharness.verify_live` and the
parity tests read Megatron's groups through this table; it is pure data (no
torch). A :class:`Getter` is a ``parallel_state`` function with its keyword
arguments; ``alias`` names the kind whose group Megatron returns when this
kind is not built (e.g. one optimizer instance: the intra-partial DP group is
the DP-with-CP group itself).

From 0.19 the default DP getters return the GTP-merged groups
(``with_gtp_remat=True``); the plain kinds need ``with_gtp_remat=False``:

>>> getter("dp", "0.19").label
'get_data_parallel_group(with_gtp_remat=False)'
>>> getter("gtp_remat_dp", "0.19").label
'get_data_parallel_group()'
>>> getter("dp", "0.16").label
'get_data_parallel_group()'
>>> getter("ep_dp", "0.19").label
'get_expert_data_parallel_group(with_gtp_remat=False)'
>>> getter("hcp_l1", "0.18").label
'get_hierarchical_context_parallel_groups()[1]'
>>> getter("dp_cp_ag", "0.18") is None  # 0.18+: the caller owns the all-gather groups
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from .profiles import get_profile


@dataclass(frozen=True)
class Getter:
    """``parallel_state.<function>(**kwargs)`` (then ``[index]`` when set)."""

    function: str
    kwargs: tuple[tuple[str, Any], ...] = ()
    index: int | None = None
    alias: str | None = None  # the kind whose group this returns when its own is not built

    @property
    def label(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.kwargs)
        return f"{self.function}({args})" + ("" if self.index is None else f"[{self.index}]")

    @property
    def raises_when_missing(self) -> bool:
        """Megatron asserts when the group is not built, unless called with
        ``check_initialized=False`` (then it returns None)."""
        return ("check_initialized", False) not in self.kwargs


def _g(function: str, alias: str | None = None, /, **kwargs: Any) -> Getter:
    """The getter ``function(**kwargs)``; ``function`` and ``alias`` are positional only, so
    every keyword (even from a ``**dict``) is a keyword of the Megatron call."""
    return Getter(function, tuple(kwargs.items()), alias=alias)


_DP, _EDP = "get_data_parallel_group", "get_expert_data_parallel_group"
_DP_GLOO, _EDP_GLOO = "get_data_parallel_group_gloo", "get_expert_data_parallel_group_gloo"
_NO_CHECK = {"check_initialized": False}


@cache
def megatron_getters(mcore: str) -> Mapping[str, Getter]:
    """Kind -> :class:`Getter` for the fixed kinds of profile ``mcore`` (see :func:`getter`
    for the numbered ``hcp_l*`` / ``hybrid_dp_cp_*`` kinds)."""
    prof = get_profile(mcore)
    # 0.19's DP getters default to the GTP-merged groups; the plain kinds are the replicas.
    rep = {"with_gtp_remat": False} if prof.gtp_axis else {}
    table = {
        "dp_cp": _g(_DP, with_context_parallel=True, **rep),
        "dp_cp_gloo": _g(_DP_GLOO, with_context_parallel=True),
        "intra_dp_cp": _g(_DP, "dp_cp", with_context_parallel=True, **rep,
                          partial_data_parallel=True),
        "intra_dp_cp_gloo": _g(_DP_GLOO, "dp_cp_gloo", with_context_parallel=True,
                               partial_data_parallel=True),
        "dp": _g(_DP, **rep),
        "dp_gloo": _g(_DP_GLOO),
        "cp": _g("get_context_parallel_group"),
        "mp": _g("get_model_parallel_group"),
        "tp": _g("get_tensor_model_parallel_group"),
        "pp": _g("get_pipeline_model_parallel_group"),
        "embd": _g("get_embedding_group", **_NO_CHECK),
        "pos_embd": _g("get_position_embedding_group", **_NO_CHECK),
        "tp_dp_cp": _g("get_tensor_and_data_parallel_group", with_context_parallel=True),
        "tp_dp": _g("get_tensor_and_data_parallel_group"),
        "tp_cp": _g("get_tensor_and_context_parallel_group"),
        "ep": _g("get_expert_model_parallel_group"),
        "ep_tp": _g("get_expert_tensor_parallel_group"),
        "tp_ep_mp": _g("get_expert_tensor_and_model_parallel_group"),
        "tp_ep_pp": _g("get_expert_tensor_model_pipeline_parallel_group"),
        "ep_dp": _g(_EDP, **rep),
        "ep_dp_gloo": _g(_EDP_GLOO),
        "intra_ep_dp": _g(_EDP, "ep_dp", **rep, partial_expert_data_parallel=True),
        "intra_ep_dp_gloo": _g(_EDP_GLOO, "ep_dp_gloo", partial_expert_data_parallel=True),
        "inter_ep_dp": _g("get_inter_distributed_optimizer_instance_group", **_NO_CHECK),
        "intra_dist_opt": _g("get_intra_distributed_optimizer_instance_group"),
    }
    if prof.ag_in_init:  # 0.16/0.17; from 0.18 the caller owns the all-gather groups
        table["dp_cp_ag"] = _g(_DP, with_context_parallel=True, independent_all_gather=True)
    if prof.gtp_axis:  # 0.19: the GTP groups; the merged DP groups alias the plain ones at 1
        table.update({
            "gtp_remat": _g("get_gtp_weight_remat_group"),
            "gtp_remat_dp": _g(_DP, "dp"),
            "gtp_remat_dp_cp": _g(_DP, "dp_cp", with_context_parallel=True),
            "expt_gtp_remat": _g("get_expert_gtp_weight_remat_group"),
            "tp_ep_egtp_pp": _g("get_expert_tensor_model_pipeline_parallel_group",
                                with_egtp_remat=True),
            "ep_gtp_remat_dp": _g(_EDP, "ep_dp"),
        })
    return table


def getter(kind: str, mcore: str) -> Getter | None:
    """Megatron's getter for ``kind`` under profile ``mcore``; None when Megatron has none."""
    fixed = megatron_getters(mcore).get(kind)
    if fixed is not None:
        return fixed
    if kind.startswith("hcp_l") and kind[5:].isdigit():
        return Getter("get_hierarchical_context_parallel_groups", index=int(kind[5:]))
    if kind.startswith("hybrid_dp_cp_") and kind[13:].isdigit():
        return _g("get_hybrid_data_context_parallel_groups", group_size=int(kind[13:]))
    return None


@cache
def ordered_rank_globals(mcore: str) -> Mapping[str, str]:
    """Kind -> the ``parallel_state`` global holding Megatron's own (unsorted) rank list."""
    out = {
        "dp_cp": "_DATA_PARALLEL_GLOBAL_RANKS_WITH_CP", "dp": "_DATA_PARALLEL_GLOBAL_RANKS",
        "cp": "_CONTEXT_PARALLEL_GLOBAL_RANKS", "mp": "_MODEL_PARALLEL_GLOBAL_RANKS",
        "tp": "_TENSOR_MODEL_PARALLEL_GLOBAL_RANKS", "pp": "_PIPELINE_GLOBAL_RANKS",
        "embd": "_EMBEDDING_GLOBAL_RANKS", "pos_embd": "_POSITION_EMBEDDING_GLOBAL_RANKS",
        "ep": "_EXPERT_MODEL_PARALLEL_RANKS",
    }
    if get_profile(mcore).gtp_axis:
        out.update(gtp_remat="_GTP_WEIGHT_REMAT_GLOBAL_RANKS",
                   expt_gtp_remat="_EXPERT_GTP_WEIGHT_REMAT_GLOBAL_RANKS")
    return out
