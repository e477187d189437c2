"""Property tests of the layout engine (hypothesis).

Valid configurations are constructed so that they are valid by Megatron's rules
(the world is a multiple of every divisor Megatron checks); the properties are
the invariants of Megatron's group construction (reference §1-§2): the kinds
partition the ranks, group sizes follow from the sizes, the per-rank view agrees
with the arrays, the lazy creation order agrees with itself, the all-gather
groups equal DP-with-CP where Megatron builds them that way, exports round-trip.
Invalid and junk inputs must raise ``LayoutError`` and nothing else.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simharness import LayoutError, ParallelismConfig, build_layout
from simharness.config import DEFAULT_ORDER, MCORE_PROFILES, TP_PP_DP_ORDER
from simharness.layout import Layout
from simharness.profiles import PROFILES

# SIMHARNESS_HYPOTHESIS_EXAMPLES=3000 for a longer hunt (the default keeps the file < 30 s).
EXAMPLES = int(os.environ.get("SIMHARNESS_HYPOTHESIS_EXAMPLES", "250"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def valid_configs(draw):
    mcore = draw(st.sampled_from(MCORE_PROFILES))
    prof = PROFILES[mcore]
    tp = draw(st.sampled_from([1, 2, 3, 4]))
    pp = draw(st.sampled_from([1, 2, 3, 4]))
    cp = draw(st.sampled_from([1, 2, 4]))
    dp = draw(st.integers(1, 6))
    ag = draw(st.booleans())
    n_wanted = draw(st.sampled_from([1, 1, 2, 4]))
    gtp = egtp = 1
    if prof.gtp_axis and not ag and n_wanted == 1:
        gtp = draw(st.sampled_from([1, 1, 2]))
        egtp = draw(st.sampled_from([1, 1, 2]))
    world = tp * pp * cp * dp * gtp
    assume(world % (pp * egtp) == 0)
    etp = draw(st.sampled_from(divisors(world // (pp * egtp))))
    ep = draw(st.sampled_from(divisors(world // (pp * egtp * etp))))
    edp = world // (etp * ep * pp * egtp)
    # Orders: Megatron's default, NeMo's pp-before-dp, or a random permutation.
    perm = draw(st.permutations(["tp", "cp", "ep", "dp", "pp"]))
    order = draw(st.sampled_from([DEFAULT_ORDER, TP_PP_DP_ORDER, "-".join(perm)]))
    common = math.gcd(dp * cp, edp)
    n = n_wanted if common % n_wanted == 0 else 1
    hcp = None
    if cp > 1 and draw(st.booleans()):
        hcp = draw(st.sampled_from([[cp], [2, cp // 2], [cp // 2, 2], [1, cp]]))
    dpcp = dp * cp
    hybrid = dpcp >= 2 and dpcp & (dpcp - 1) == 0 and draw(st.booleans())
    kwargs = dict(
        world_size=world, tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
        context_parallel_size=cp, expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp if etp != tp else draw(st.sampled_from([None, etp])),
        num_distributed_optimizer_instances=n, order=order,
        use_gloo_process_groups=draw(st.booleans()), create_all_gather_group=ag,
        virtual_pipeline_model_parallel_size=draw(st.sampled_from([None, 2, 3])) if pp > 1
        else None,
        hierarchical_context_parallel_sizes=hcp, hybrid_context_parallel=hybrid,
        rank_offset=draw(st.sampled_from([0, 0, 3, 16])),
        pipeline_model_parallel_comm_backend=draw(st.sampled_from([None, "nccl", "ucc"])),
        gtp_remat_size=gtp, expert_gtp_remat_size=egtp,
    )
    try:
        cfg = ParallelismConfig(**kwargs)
    except LayoutError as exc:
        # Only Megatron's own cross-checks may reject a constructed config: the pp-last
        # rule and equal pipeline groups (random orders), nothing else.
        assert exc.megatron_error == "AssertionError", str(exc)
        assume(False)
    assert cfg.dp == dp and cfg.edp == edp
    return cfg, mcore


def expected_sizes(cfg, mcore):
    gtp_axis = PROFILES[mcore].gtp_axis
    g = cfg.gtp_remat_size if gtp_axis else 1
    n = cfg.num_distributed_optimizer_instances
    gtp_any = gtp_axis and (cfg.gtp_remat_size > 1 or cfg.expert_gtp_remat_size > 1)
    sizes = {
        "tp": cfg.tp, "cp": cfg.cp, "dp": cfg.dp, "pp": cfg.pp, "dp_cp": cfg.dp * cfg.cp,
        "mp": cfg.tp * cfg.pp * g, "tp_dp": cfg.tp * cfg.dp * g,
        "tp_dp_cp": cfg.tp * cfg.dp * cfg.cp * g, "tp_cp": cfg.tp * cfg.cp,
        "ep": cfg.ep, "ep_tp": cfg.etp, "ep_dp": cfg.edp, "tp_ep_mp": cfg.etp * cfg.ep,
        "tp_ep_pp": cfg.etp * cfg.ep * cfg.pp,
        "intra_dp_cp": cfg.dp * cfg.cp // n, "intra_ep_dp": cfg.edp // n, "inter_ep_dp": n,
        "intra_dist_opt": cfg.world_size if gtp_any else cfg.world_size // n,
        "dp_cp_ag": cfg.dp * cfg.cp, "ep_dp_ag": cfg.edp,
        "embd": min(cfg.pp, 2), "pos_embd": 1,
        "gtp_remat": cfg.gtp_remat_size, "expt_gtp_remat": cfg.expert_gtp_remat_size,
        "tp_ep_egtp_pp": cfg.etp * cfg.ep * cfg.pp * cfg.expert_gtp_remat_size,
        "gtp_remat_dp": cfg.dp * cfg.gtp_remat_size,
        "gtp_remat_dp_cp": cfg.dp * cfg.cp * cfg.gtp_remat_size,
        "ep_gtp_remat_dp": cfg.edp * cfg.expert_gtp_remat_size,
    }
    for i, s in enumerate(cfg.hierarchical_context_parallel_sizes or ()):
        sizes[f"hcp_l{i}"] = s
    return sizes


def base_kind(kind):
    if kind.endswith("_gloo"):
        return kind[:-5]
    if kind.startswith("hybrid_dp_cp_"):
        return None
    return kind


@SETTINGS
@given(valid_configs())
def test_layout_invariants(drawn):
    cfg, mcore = drawn
    layout = build_layout(cfg, mcore=mcore)
    prof = PROFILES[mcore]
    assert layout.profile is prof
    ranks = np.arange(cfg.rank_offset, cfg.rank_offset + cfg.world_size)
    sizes = expected_sizes(cfg, mcore)
    # Kinds that exist exactly when Megatron creates them.
    assert layout.has("dp_cp_ag") == cfg.create_all_gather_group
    assert layout.has("ep_dp_ag") == (prof.ag_after_init and cfg.create_all_gather_group
                                      and cfg.ep > 1)
    assert layout.has("inter_ep_dp") == (cfg.num_distributed_optimizer_instances > 1)
    gloo = cfg.use_gloo_process_groups and not (prof.gtp_axis and cfg.gtp_remat_size > 1)
    assert layout.has("dp_gloo") == gloo
    gtp_kinds = {"gtp_remat", "expt_gtp_remat", "tp_ep_egtp_pp"}
    assert gtp_kinds <= set(layout.kinds) if prof.gtp_axis else not gtp_kinds & set(layout.kinds)
    if cfg.create_all_gather_group:  # in init: right after dp_cp; after init: last
        assert (layout.creation_order[1].kind == "dp_cp_ag") == prof.ag_in_init
        assert layout.kinds[-1].endswith("_ag") == prof.ag_after_init
    total = 0
    for kind in layout.kinds:
        arr = layout.groups(kind)
        total += arr.shape[0]
        base = base_kind(kind)
        if base is None:  # HYBRID_DP_CP_GROUP_{s}
            assert arr.shape[1] == int(kind.rsplit("_", 1)[1])
        else:
            assert arr.shape[1] == sizes[base], kind
        if kind in ("embd", "pos_embd"):
            continue
        if prof.ag_after_init and kind in ("dp_cp_ag", "ep_dp_ag"):
            # create_all_gather_groups() hard-codes rank_offset 0 (notes §4).
            assert np.array_equal(np.sort(arr, axis=None), np.arange(cfg.world_size)), kind
            continue
        assert np.array_equal(np.sort(arr, axis=None), ranks), f"{kind} does not partition"
        assert arr.shape[0] * arr.shape[1] == cfg.world_size
    # Creation order: length, and iteration == indexing. Indexing and the rank views use a
    # fresh layout (no arrays built), so the arithmetic paths are compared with the arrays.
    fresh = build_layout(cfg, mcore=mcore)
    co = layout.creation_order
    assert len(co) == total == sum(co.count_by_kind().values())
    calls = list(co)
    assert len(calls) == len(co)
    fco = fresh.creation_order
    step = max(1, len(co) // 97)
    for i in range(0, len(co), step):
        assert fco[i] == calls[i]
    mid = len(co) // 2
    assert fco[-1] == calls[-1] and fco[mid:mid + 3] == calls[mid:mid + 3]
    by_kind = {}
    for c in calls:
        by_kind.setdefault(c.kind, []).append(c.ranks)
    for kind, rows in by_kind.items():
        assert [tuple(r) for r in layout.groups(kind).tolist()] == rows, kind
    # Per-rank view == the row of each kind's array containing the rank.
    sample = sorted({int(ranks[0]), int(ranks[-1]), int(ranks[len(ranks) // 2]),
                     int(ranks[(7 * len(ranks)) // 11])})
    for r in sample:
        view = fresh.rank(r)
        for kind in layout.kinds:
            arr = layout.groups(kind)
            rows, cols = np.nonzero(arr == r)
            if len(rows) == 0:
                assert kind not in view.groups, (kind, r)
                continue
            m = view.groups[kind]
            assert (m.group, m.position) == (int(rows[0]), int(cols[0])), (kind, r)
            assert m.ranks.tolist() == arr[rows[0]].tolist()
            assert m.group_rank == sorted(arr[rows[0]].tolist()).index(r)
        assert view.new_group_calls == len(co)
        assert view.communicators == len(view.groups)
    # All-gather groups.
    if cfg.create_all_gather_group:
        ag, dpcp = layout.groups("dp_cp_ag"), layout.groups("dp_cp")
        if prof.ag_in_init or (cfg.order == DEFAULT_ORDER and cfg.rank_offset == 0):
            assert np.array_equal(ag, dpcp)
        if prof.ag_after_init and cfg.order == TP_PP_DP_ORDER and cfg.pp > 1 and cfg.dp > 1:
            assert not np.array_equal(ag, dpcp)  # upstream issue #4261
    # Round trips.
    assert ParallelismConfig.from_dict(cfg.to_dict()) == cfg
    back = Layout.from_json(layout.to_json())
    assert back.mcore == mcore and back.config == cfg
    assert list(back.creation_order) == calls


# ------------------------------------------------------------------ invalid
ORDER_TOKENS = st.sampled_from(["tp", "cp", "ep", "dp", "pp", "xx", "TP", "gtp_remat"])


@SETTINGS
@given(
    mcore=st.sampled_from(MCORE_PROFILES),
    world=st.one_of(st.none(), st.integers(1, 48)),
    tp=st.integers(1, 8), pp=st.integers(1, 8), cp=st.integers(1, 8), ep=st.integers(1, 8),
    etp=st.one_of(st.none(), st.integers(1, 8)), n=st.integers(1, 8),
    vpp=st.one_of(st.none(), st.integers(1, 4)),
    order=st.one_of(st.none(), st.lists(ORDER_TOKENS, min_size=1, max_size=6).map("-".join)),
    hcp=st.one_of(st.none(), st.lists(st.integers(1, 4), min_size=1, max_size=3)),
    hybrid=st.booleans(), ag=st.booleans(),
    gtp=st.integers(1, 3), egtp=st.integers(1, 3),
    offset=st.integers(0, 20),
)
def test_random_inputs_raise_only_layout_error(mcore, world, tp, pp, cp, ep, etp, n, vpp, order,
                                               hcp, hybrid, ag, gtp, egtp, offset):
    kwargs = dict(world_size=world, tensor_model_parallel_size=tp,
                  pipeline_model_parallel_size=pp, context_parallel_size=cp,
                  expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
                  num_distributed_optimizer_instances=n, virtual_pipeline_model_parallel_size=vpp,
                  order=order, hierarchical_context_parallel_sizes=hcp,
                  hybrid_context_parallel=hybrid, create_all_gather_group=ag,
                  gtp_remat_size=gtp, expert_gtp_remat_size=egtp, rank_offset=offset)
    try:
        layout = build_layout(ParallelismConfig(**kwargs), mcore=mcore)
    except LayoutError as exc:
        assert str(exc)
        assert exc.megatron_error in (None, "RuntimeError", "AssertionError", "ValueError",
                                      "TypeError", "KeyError")
        return
    # Accepted: then it is a real layout.
    assert len(layout.creation_order) > 0
    layout.rank(layout.ranks[-1])


JUNK = st.one_of(st.none(), st.booleans(), st.integers(-5, 64), st.floats(allow_nan=True),
                 st.text(max_size=5), st.lists(st.integers(-2, 4), max_size=3),
                 st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
FIELDS = ["tp", "pp", "cp", "ep", "etp", "vpp", "world_size", "num_distributed_optimizer_instances",
          "order", "rank_offset", "hierarchical_context_parallel_sizes",
          "pipeline_model_parallel_comm_backend", "gtp_remat_size", "expert_gtp_remat_size",
          "encoder_pipeline_model_parallel_size", "encoder_tensor_model_parallel_size",
          "sharp_enabled_group", "use_sharp", "not_a_field"]


@SETTINGS
@given(st.dictionaries(st.sampled_from(FIELDS), JUNK, min_size=1, max_size=5),
       st.sampled_from(MCORE_PROFILES))
def test_junk_from_dict_raises_only_layout_error(data, mcore):
    try:
        cfg = ParallelismConfig.from_dict(data)
        build_layout(cfg, mcore=mcore)
    except LayoutError as exc:
        assert str(exc)


@pytest.mark.parametrize("field,value", [
    ("tp", "2"), ("tp", 2.0), ("tp", None), ("tp", True), ("tp", -1), ("tp", 0),
    ("pp", [2]), ("world_size", 8.0), ("world_size", "8"), ("rank_offset", -1),
    ("num_distributed_optimizer_instances", 0), ("etp", "x"), ("vpp", 1.5), ("order", 5),
    ("hierarchical_context_parallel_sizes", "a,b"), ("hierarchical_context_parallel_sizes", 4),
])
def test_junk_values_are_named(field, value):
    """Each bad value is a LayoutError whose message shows the value."""
    with pytest.raises(LayoutError) as info:
        ParallelismConfig.from_dict({"world_size": 8, field: value}
                                    if field != "world_size" else {field: value})
    assert repr(value) in str(info.value) or str(value) in str(info.value)


# ------------------------------------------------------- content oracle (no wheels)
def orthogonal_groups(order, sizes, token, offset=0):
    """An independent enumeration of Megatron's rank groups (RankGenerator.get_ranks).

    Ranks are laid out over the axes of ``order`` with the first axis varying fastest
    (rank = sum of index * stride, stride = product of the sizes before it). The groups of
    ``token`` (e.g. ``"tp-dp"``) vary the token's axes and fix the others: group ``g``
    fixes the other axes to the digits of ``g`` (first axis fastest), and member ``k``
    takes the token's axes from the digits of ``k`` (first axis fastest).

    >>> orthogonal_groups("tp-cp-ep-dp-pp", dict(tp=2, cp=1, ep=1, dp=2, pp=2), "dp")
    [[0, 2], [1, 3], [4, 6], [5, 7]]
    """
    axes = order.split("-")
    stride = dict(zip(axes, np.cumprod([1] + [sizes[a] for a in axes[:-1]]).tolist(),
                      strict=True))
    inside = [a for a in axes if a in token.split("-")]
    outside = [a for a in axes if a not in inside]

    def rank(fixed, varying, i, j):
        total = offset
        for group_axes, n in ((fixed, i), (varying, j)):
            for a in group_axes:
                n, digit = divmod(n, sizes[a])
                total += digit * stride[a]
        return total

    n_groups = math.prod(sizes[a] for a in outside)
    n_members = math.prod(sizes[a] for a in inside)
    return [[rank(outside, inside, g, k) for k in range(n_members)] for g in range(n_groups)]


# kind -> (generator, token): the dense generator (ep axis 1) or the expert one (cp axis 1,
# tp = etp, dp = expert dp); the same order and rank offset.
ORACLE_KINDS = {
    "tp": ("dense", "tp"), "pp": ("dense", "pp"), "cp": ("dense", "cp"), "dp": ("dense", "dp"),
    "dp_cp": ("dense", "dp-cp"), "mp": ("dense", "tp-pp"), "tp_dp": ("dense", "tp-dp"),
    "tp_dp_cp": ("dense", "tp-dp-cp"), "tp_cp": ("dense", "tp-cp"), "ep": ("expert", "ep"),
    "ep_tp": ("expert", "tp"), "tp_ep_mp": ("expert", "tp-ep"),
    "tp_ep_pp": ("expert", "tp-ep-pp"), "ep_dp": ("expert", "dp"),
}


@SETTINGS
@given(valid_configs())
def test_group_contents_match_an_independent_enumeration(drawn):
    """Every group of every orthogonal kind, in Megatron's order, from the short oracle above
    (with the GTP axes at 1; the wheels' parity covers GTP > 1). The 0.18+ all-gather groups
    come from the hard-coded order and offset 0 (issue #4261), the 0.16 ones equal dp_cp."""
    cfg, mcore = drawn
    assume(cfg.gtp_remat_size == 1 and cfg.expert_gtp_remat_size == 1)
    layout = build_layout(cfg, mcore=mcore)
    dense = dict(tp=cfg.tp, cp=cfg.cp, ep=1, dp=cfg.dp, pp=cfg.pp)
    expert = dict(tp=cfg.etp, cp=1, ep=cfg.ep, dp=cfg.edp, pp=cfg.pp)
    sizes = {"dense": dense, "expert": expert}
    want = {kind: orthogonal_groups(cfg.order, sizes[gen], token, cfg.rank_offset)
            for kind, (gen, token) in ORACLE_KINDS.items()}
    if cfg.create_all_gather_group:
        if PROFILES[mcore].ag_after_init:
            want["dp_cp_ag"] = orthogonal_groups(DEFAULT_ORDER, dense, "dp-cp")
            if cfg.ep > 1:
                want["ep_dp_ag"] = orthogonal_groups(DEFAULT_ORDER, expert, "dp")
        else:
            want["dp_cp_ag"] = want["dp_cp"]
    for kind, groups in want.items():
        assert layout.groups(kind).tolist() == groups, kind
