"""Configurations shared by the parity tests (0.16.1, 0.17.1, 0.18.2).

``CASES`` and ``INVALID`` are Megatron keyword arguments in the 0.16/0.17 form:
the all-gather option is the ``create_all_gather_group`` keyword. The 0.18
parity (``tests/parity/test_profile_018_parity.py``) turns it into the after-init
``create_all_gather_groups()`` call with :func:`split_ag`.
"""

from __future__ import annotations

import pytest

TP_PP_DP = "tp-cp-ep-pp-dp"

SHORT_NAMES = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
               "vpp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
               "ep": "expert_model_parallel_size", "etp": "expert_tensor_parallel_size",
               "n": "num_distributed_optimizer_instances",
               "hcp": "hierarchical_context_parallel_sizes",
               "gloo": "create_gloo_process_groups", "ag": "create_all_gather_group",
               "pp_backend": "pipeline_model_parallel_comm_backend",
               "hybrid": "hybrid_context_parallel", "offset": "rank_offset",
               "local": "local_world_size", "gtp": "gtp_remat_size",
               "egtp": "expert_gtp_remat_size"}


def split_ag(kwargs: dict) -> tuple[bool, dict]:
    """``(create_all_gather_group, the other keywords)`` (0.18+ have no such keyword)."""
    rest = dict(kwargs)
    return bool(rest.pop("create_all_gather_group", False)), rest


def case(world, **kw):
    """A configuration as Megatron's keyword arguments (short names expanded)."""
    kwargs = {SHORT_NAMES.get(k, k): v for k, v in kw.items()}
    label = f"W{world}-" + "-".join(f"{k}{v}" for k, v in kw.items()) if kw else f"W{world}"
    return pytest.param(world, kwargs, id=label.replace(" ", "").replace("'", ""))


CASES = [
    # plain tp / pp / dp
    case(1),
    case(2, tp=2),
    case(4, pp=4),
    case(5),
    case(6, tp=3, pp=2),
    case(8, tp=2, pp=4),                                   # Megatron's own test shape
    case(8, tp=2, pp=4, order=TP_PP_DP),
    case(8, pp=8, order="tp-cp-pp-ep-dp"),
    case(12, tp=2, pp=3, vpp=2),
    case(16, tp=2, pp=4, vpp=4, order=TP_PP_DP),
    case(20, tp=5),
    case(128, tp=8, pp=4, vpp=3),
    case(128, tp=1, pp=1),                                 # 128 singleton tp/pp groups
    # context parallel (reference §1.4) and hierarchical CP
    case(16, tp=2, pp=2, cp=2),
    case(16, tp=2, pp=2, cp=2, ep=2, order=TP_PP_DP),      # reference §1.4 (+ep so edp == dp)
    case(8, cp=8, ag=True),                                # Megatron's AG test (cp = W)
    case(8, cp=4, hcp=[2, 2]),
    case(32, tp=2, cp=8, hcp=[2, 4], pp=2),
    case(24, cp=4, hcp=[4, 1], order=TP_PP_DP, pp=2, ep=4),
    case(48, tp=2, pp=2, cp=3),
    # hybrid DP x CP
    case(8, cp=2, hybrid=True),
    case(16, tp=2, cp=8, hybrid=True),
    case(12, cp=2, hybrid=True),                           # dp*cp = 12: chunks of 2 and 4
    # expert parallel, etp == tp, etp != tp
    case(16, tp=2, pp=2, cp=2, ep=2, etp=2),
    case(16, tp=2, pp=2, cp=2, ep=2, etp=1),
    case(8, ep=2, cp=4),                                   # Megatron's expert AG test shape
    case(64, tp=2, pp=2, cp=2, ep=4),                      # golden test shape
    case(16, tp=2, etp=4, ep=2),                           # etp > tp (accepted)
    case(24, tp=4, etp=3),                                 # etp does not divide tp (accepted)
    case(32, tp=2, cp=2, ep=8, etp=1),                     # ep*etp > tp*cp (accepted)
    case(64, tp=2, pp=4, cp=2, ep=4, etp=1, order=TP_PP_DP),
    case(96, tp=4, pp=3, ep=2, etp=2),
    case(8, tp=2, ep=4, order="tp-pp-ep-dp"),             # Megatron's order-consistency shapes
    case(8, tp=2, ep=4, order="tp-ep-dp-pp"),
    # distributed-optimizer instances
    case(16, tp=2, pp=2, cp=2, ep=2, etp=2, n=2),          # reference §1.4
    case(16, n=2),
    case(32, ep=4, n=4),
    case(16, cp=2, n=4, ep=2, etp=1, gloo=False),
    case(64, tp=2, cp=2, ep=2, n=2, ag=True, pp=2),
    case(48, tp=2, pp=2, cp=3, etp=1, n=3),
    # all-gather group, gloo, pipeline backend, orders
    case(16, tp=2, pp=2, cp=2, ag=True),
    case(16, tp=2, pp=2, cp=2, ep=2, ag=True, order=TP_PP_DP),
    case(16, tp=2, pp=2, ag=True, gloo=False),
    case(32, tp=2, pp=2, cp=2, ep=4, etp=1, ag=True, n=2, gloo=False),
    case(8, tp=2, pp=2, pp_backend="nccl"),
    case(8, tp=2, pp=2, pp_backend="ucc"),
    case(16, tp=2, pp=2, order="TP-CP-EP-DP-PP"),          # Megatron lowercases the order
    case(8, tp=2, pp=2, order="tp-pp-dp"),                 # missing size-1 dims appended
    case(128, tp=8, pp=4, cp=2, ep=8, etp=1, n=2, ag=True),
    case(128, tp=2, pp=2, cp=4, hcp=[2, 2], ep=4, etp=2, n=2, order=TP_PP_DP, ag=True, vpp=2),
]


# ---------------------------------------------------------- invalid inputs
INVALID = [
    pytest.param(8, dict(tensor_model_parallel_size=3), id="tp-not-dividing-world"),
    pytest.param(12, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                          context_parallel_size=2), id="model-size-not-dividing"),
    pytest.param(2, dict(pipeline_model_parallel_size=4), id="world-smaller-than-pp"),
    pytest.param(16, dict(expert_tensor_parallel_size=1, expert_model_parallel_size=3),
                 id="expert-size-not-dividing"),
    pytest.param(8, dict(tensor_model_parallel_size=2, num_distributed_optimizer_instances=3),
                 id="instances-not-dividing-dp-cp"),
    pytest.param(8, dict(context_parallel_size=2, expert_model_parallel_size=2,
                         num_distributed_optimizer_instances=8),
                 id="instances-not-dividing-expert-dp"),
    pytest.param(8, dict(virtual_pipeline_model_parallel_size=2), id="vpp-without-pp"),
    pytest.param(8, dict(context_parallel_size=2, order="tp-ep-dp-pp"), id="order-missing-cp"),
    pytest.param(8, dict(expert_model_parallel_size=2, order="tp-cp-dp-pp"),
                 id="order-missing-ep"),
    pytest.param(8, dict(context_parallel_size=2, order="tp-xx-dp-pp"),
                 id="order-missing-cp-and-unknown-token"),
    pytest.param(8, dict(order="tp-cp-ep-dp-pp-foo"), id="order-unknown-token"),
    pytest.param(16, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                          expert_tensor_parallel_size=1, order=TP_PP_DP),
                 id="not-pp-last-expert-dp-differs"),
    pytest.param(16, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                          expert_tensor_parallel_size=1, order="TP-CP-EP-DP-PP"),
                 id="uppercase-order-is-not-pp-last"),
    pytest.param(8, dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                         expert_tensor_parallel_size=1, expert_model_parallel_size=2,
                         order="tp-pp-cp-ep-dp"), id="pp-groups-differ"),
    pytest.param(8, dict(context_parallel_size=4, hierarchical_context_parallel_sizes=[2, 4]),
                 id="hcp-product-not-cp"),
    pytest.param(8, dict(hierarchical_context_parallel_sizes=[2]), id="hcp-without-cp"),
    pytest.param(3, dict(hybrid_context_parallel=True), id="hybrid-odd-dp-cp"),
    pytest.param(8, dict(pipeline_model_parallel_size=2,
                         pipeline_model_parallel_comm_backend="foo"),
                 id="pp-backend-unknown"),
    pytest.param(8, dict(sharp_enabled_group="dp"), id="sharp-group-without-sharp"),
    pytest.param(8, dict(use_sharp=True, sharp_enabled_group="tp"), id="sharp-group-invalid"),
    pytest.param(8, dict(use_sharp=True, sharp_enabled_group="dp_replica"),
                 id="sharp-dp-replica-one-instance"),
    pytest.param(8, dict(tensor_model_parallel_size=2, order="tp-tp-cp-ep-dp-pp"),
                 id="order-repeats-tp"),
]
