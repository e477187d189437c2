"""Behaviours ``make mutate`` found unasserted, one test each: the module and function it
guards are named, and each test fails with that function's recorded mutant applied. Mutants
judged equivalent are listed, with a reason, in tests/mutants/equivalent.toml."""

from __future__ import annotations

from simharness import ParallelismConfig, build_layout, check


def _findings(lay, code):
    return [f for f in check(lay) if f.code == code]


def test_checks_compare_ag_translates_the_rank_offset():
    """checks._compare_ag: ``first = a[:, 0] - w.off``. A correct 0.16 layout in a window
    (rank_offset 8, local_world_size 16, torch world 32) with the option on has no
    ag-mismatch (a mutant that drops ``- w.off`` and reports one)."""
    cfg = ParallelismConfig.from_megatron(
        world_size=32, mcore="0.16", tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2, context_parallel_size=2, rank_offset=8,
        local_world_size=16, create_all_gather_group=True)
    lay = build_layout(cfg, "0.16", torch_world=32)
    assert lay.groups("dp_cp_ag").tolist() == lay.groups("dp_cp").tolist()
    assert _findings(lay, "ag-mismatch") == []
    assert [f.code for f in check(lay) if f.severity == "error"] == []


def test_nccl_model_choose_honours_a_forced_protocol():
    """topology/nccl_model.choose: ``e.proto == want_p`` (NCCL_PROTO limits the pick).
    Forcing each protocol on one H100 node returns that protocol, for a small and a
    large message, and the pick is the fastest of what is left."""
    from simharness.topology.nccl_model import PROTOS, GroupShape, choose

    node = GroupShape(n_ranks=8, n_nodes=1, arch="hopper", intra_gb_per_s=370.8,
                      ring_gb_per_s=370.8, nvls=True)
    for size in (4096, 1 << 30):
        free = choose(node, "all_gather", size)
        for proto in PROTOS:
            forced = choose(node, "all_gather", size, proto=proto)
            assert forced.proto == proto
            assert forced.time_us >= free.time_us
        assert choose(node, "all_gather", size, proto=free.proto) == free


def test_grid_coords_rejects_the_first_rank_past_the_world():
    """grid.Grid.coords: ``0 <= r < world_size``. The rank one past the last (offset +
    world) is outside the layout, like the one before the offset."""
    import pytest

    from simharness import LayoutError
    from simharness.grid import Grid

    g = Grid.from_sizes("tp-cp-ep-dp-pp", offset=8, tp=2, cp=1, ep=1, dp=2, pp=2)
    assert g.coords(8 + 7) == {"tp": 1, "cp": 0, "ep": 0, "dp": 1, "pp": 1}
    for outside in (8 + 8, 7):
        with pytest.raises(LayoutError, match=f"rank {outside} is outside this layout"):
            g.coords(outside)


def test_getters_raise_when_missing_unless_check_initialized_is_false():
    """getters.Getter.raises_when_missing: Megatron's getters assert when the group is not
    built, except those called with ``check_initialized=False`` (they return None):
    the embedding, position-embedding and inter-instance getters of every profile."""
    from simharness.getters import megatron_getters

    for mcore in ("0.16", "0.18", "0.19"):
        table = megatron_getters(mcore)
        lenient = {k for k, g in table.items() if not g.raises_when_missing}
        assert lenient == {"embd", "pos_embd", "inter_ep_dp"}, (mcore, lenient)


def test_rules_formulas_show_gtp_only_when_it_is_used():
    """rules.model_formula / expert_formula: the worked values name the GTP factor only
    when its size is > 1 (``explain`` prints them)."""
    from simharness.rules import expert_formula, model_formula

    plain = ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
                              pipeline_model_parallel_size=2, expert_model_parallel_size=2)
    assert model_formula(plain) == ("tp*pp*cp", "2*2*1")
    assert expert_formula(plain) == ("etp*ep*pp", "2*2*2")
    gtp = ParallelismConfig(world_size=16, tensor_model_parallel_size=2, gtp_remat_size=2,
                            expert_gtp_remat_size=4)
    assert model_formula(gtp) == ("tp*pp*cp*gtp", "2*1*1*2")
    assert expert_formula(gtp) == ("etp*ep*pp*egtp", "2*1*1*4")


def test_rules_order_verdict_names_every_unknown_token():
    """rules._order_verdict: every unknown order token is named, comma-separated
    (Megatron's KeyError names only the first it meets)."""
    from simharness.profiles import get_profile
    from simharness.rules import Facts, _order_verdict

    cfg = ParallelismConfig.from_megatron(world_size=8, mcore="0.18",
                                          tensor_model_parallel_size=2)
    bad = ParallelismConfig.unchecked(**{**cfg.to_dict(), "order": "tp-foo-bar-dp-pp"})
    v = _order_verdict(Facts(bad, get_profile("0.18"), 8), False)
    assert (v.holds, v.error) == (False, "KeyError")
    assert "has unknown token(s) 'foo', 'bar'; use only tp, pp, dp, ep, cp" in v.message


def test_rules_ranks_verdict_names_every_repeated_token():
    """rules._ranks_verdict: an order repeating two tokens whose groups reach past the
    torch world names both, comma-separated, and the first kind that overflows."""
    import pytest

    from simharness import LayoutError

    with pytest.raises(LayoutError) as exc:
        ParallelismConfig.from_megatron(world_size=8, mcore="0.18", tensor_model_parallel_size=2,
                                        context_parallel_size=2, local_world_size=8,
                                        order="tp-cp-tp-ep-dp-pp-cp")
    assert str(exc.value).startswith(
        "order 'tp-cp-tp-ep-dp-pp-cp' repeats 'cp', 'tp': Megatron's RankGenerator keeps one "
        "size per occurrence, so its dense 'dp-cp' groups reach rank 11 (torch world 8; "
        "Megatron: 'ValueError: Rank 8 is out of range' from new_group)"), str(exc.value)


def test_rules_evaluate_all_arithmetic_error_only_after_a_failure():
    """rules.evaluate_all: a rule's ArithmeticError after an earlier failing rule becomes
    its 'cannot be evaluated' verdict (a size an earlier rule refused); with no failure
    before it (or only rules that hold or do not apply) it is a bug and propagates."""
    from unittest import mock

    import pytest

    from simharness.rules import Rule, Verdict, evaluate_all

    def rule(name, fn):
        return Rule(name, name, "megatron", None, fn)

    boom = rule("boom", lambda f: 1 // 0)
    holds = rule("holds", lambda f: Verdict(True, "ok"))
    skip = rule("skip", lambda f: None)
    fails = rule("fails", lambda f: Verdict(False, "no", "bad"))
    cfg = ParallelismConfig.from_megatron(world_size=8, mcore="0.18")
    for before in ([], [holds], [skip, holds]):
        with mock.patch("simharness.rules.RULES", [*before, boom]), \
                pytest.raises(ZeroDivisionError):
            list(evaluate_all(cfg, "0.18"))
    with mock.patch("simharness.rules.RULES", [fails, holds, skip, boom, boom]):
        got = [(r.name, v) for r, v in evaluate_all(cfg, "0.18")]
    after = Verdict(False, "cannot be evaluated after the failure above (ZeroDivisionError: "
                           "integer division or modulo by zero)",
                    "integer division or modulo by zero")
    assert got == [("fails", Verdict(False, "no", "bad")), ("holds", Verdict(True, "ok")),
                   ("skip", None), ("boom", after), ("boom", after)]
