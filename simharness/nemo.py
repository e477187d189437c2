"""NeMo's ``fake_initialize_model_parallel``, answered from the layout arithmetic.

NeMo calls it on every rank before torch.distributed exists, to learn the
rank's coordinates without creating groups. Here it costs O(dims) per rank.

>>> fake_initialize_model_parallel(16, 5, 2, 2, cp_=2)
(1, 0, 0, 1, 4, 2, None, None)
"""

from __future__ import annotations

from .config import DEFAULT_ORDER, TP_PP_DP_ORDER, ParallelismConfig


def fake_initialize_model_parallel(world_size: int, rank: int, tp_: int, pp_: int,
                                   split: int | None = None, vpp_: int | None = None,
                                   ep_: int = 1, etp_: int | None = None, cp_: int = 1,
                                   enc_tp_: int = 0, enc_pp_: int = 0,
                                   use_tp_pp_dp_mapping: bool = False) -> tuple:
    """Same arguments and return value as NeMo's function.

    Returns ``(tp_rank, pp_rank, ep_rank, etp_rank, tp*pp, dp, split_rank, vpp_rank)``;
    like NeMo, tp, pp and cp are clamped to the world size and cp is left out of
    the model-parallel size. Invalid sizes raise :class:`~simharness.LayoutError`.
    """
    tp, pp, cp = min(tp_, world_size), min(pp_, world_size), min(cp_, world_size)
    cfg = ParallelismConfig(
        world_size=world_size, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        context_parallel_size=cp, expert_model_parallel_size=ep_,
        expert_tensor_parallel_size=etp_, virtual_pipeline_model_parallel_size=vpp_,
        encoder_tensor_model_parallel_size=enc_tp_,
        encoder_pipeline_model_parallel_size=enc_pp_,
        order=TP_PP_DP_ORDER if use_tp_pp_dp_mapping else DEFAULT_ORDER)
    dense, expert = cfg.dense_grid(), cfg.expert_grid()
    d, e = dense.coords(rank), expert.coords(rank)
    ep_rank = e["ep"] if ep_ > 1 else 0
    etp_rank = e["tp"] if cfg.etp > 1 else 0
    vpp_rank = 0 if vpp_ is not None else None
    return (d["tp"], d["pp"], ep_rank, etp_rank, tp * pp, cfg.dp, None, vpp_rank)
