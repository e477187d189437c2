"""``check()`` is total: every layout ``build_layout`` returns is checked without an
exception, under every profile, with rank_offset, the all-gather option, GTP and
repeated size-1 order tokens.

The property also pins the two findings these inputs must give: ``ag-window``
exactly when the after-init AG groups (offset 0 hard-coded) meet a job that does
not start at rank 0, and ``suspicious-order`` exactly when the order repeats a token.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simharness import LayoutError, ParallelismConfig, build_layout
from simharness.checks import check
from simharness.findings import Finding
from simharness.profiles import MCORE_PROFILES, PROFILES

EXAMPLES = int(os.environ.get("SIMHARNESS_HYPOTHESIS_EXAMPLES", "120"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TOKENS = ["tp", "cp", "ep", "dp", "pp"]


@st.composite
def layouts(draw, mcore: str):
    prof = PROFILES[mcore]
    tp, pp, cp = (draw(st.sampled_from(v)) for v in ([1, 2, 4], [1, 2, 3], [1, 2]))
    dp = draw(st.integers(1, 4))
    gtp = draw(st.sampled_from([1, 1, 2])) if prof.gtp_axis else 1
    egtp = draw(st.sampled_from([1, 1, 2])) if prof.gtp_axis else 1
    world = tp * pp * cp * dp * gtp
    rest = world // pp
    assume(rest % egtp == 0)
    etp = draw(st.sampled_from([d for d in range(1, rest // egtp + 1) if rest // egtp % d == 0]))
    ep = draw(st.sampled_from([d for d in range(1, rest // (egtp * etp) + 1)
                               if rest // (egtp * etp) % d == 0]))
    tokens = list(draw(st.permutations(TOKENS)))
    if prof.gtp_axis and draw(st.booleans()):  # 0.19 takes an explicit gtp_remat token
        tokens.insert(draw(st.integers(0, len(tokens))), "gtp_remat")
    ones = [t for t, s in (("tp", tp), ("cp", cp), ("pp", pp)) if s == 1]
    if ones and draw(st.booleans()):  # a repeated size-1 token: Megatron accepts it
        tokens.insert(draw(st.integers(0, len(tokens))), draw(st.sampled_from(ones)))
    cfg_kw = dict(
        world_size=world, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        context_parallel_size=cp, expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp, order="-".join(tokens),
        num_distributed_optimizer_instances=draw(st.sampled_from([1, 1, 2])),
        create_all_gather_group=draw(st.booleans()),
        rank_offset=draw(st.sampled_from([0, 1, 3, world, 2 * world + 1])),
        use_gloo_process_groups=draw(st.booleans()),
        gtp_remat_size=gtp, expert_gtp_remat_size=egtp)
    try:
        return build_layout(ParallelismConfig(**cfg_kw), mcore)
    except LayoutError:
        assume(False)


@pytest.mark.parametrize("mcore", MCORE_PROFILES)
def test_check_is_total(mcore):
    @SETTINGS
    @given(layouts(mcore))
    def prop(layout):
        findings = check(layout)
        assert all(isinstance(f, Finding) and f.severity in ("error", "warning", "info")
                   for f in findings)
        codes = {f.code for f in findings}
        c = layout.config
        outside = (c.create_all_gather_group and layout.profile.ag_after_init
                   and c.rank_offset > 0)
        assert ("ag-window" in codes) == outside, codes
        tokens = c.order.lower().split("-")
        assert ("suspicious-order" in codes) == (len(set(tokens)) < len(tokens)), codes
    prop()


def test_offset_all_gather_is_a_finding_not_a_crash():
    """The issue's reproducer: rank_offset 4, tp 2, AG on (0.18, 0.19): the AG groups are
    [0,2,4,6], [1,3,5,7]; job ranks 8..11 get none."""
    for mcore in ("0.18", "0.19"):
        layout = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2,
                                                rank_offset=4, create_all_gather_group=True),
                              mcore)
        (win,) = [f for f in check(layout) if f.code == "ag-window"]
        assert win.severity == "error" and win.ranks == (8, 9, 10, 11)
        assert "0..7" in win.message and "4..11" in win.message
