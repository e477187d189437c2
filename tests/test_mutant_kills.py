"""Tests written to kill surviving mutants (issue 18, ``make mutate``).

Each test names the module and function whose mutant it kills; every one was seen to
fail with its mutant applied. Mutants judged equivalent are listed, with a reason, in
tests/mutants/equivalent.toml.
"""

from __future__ import annotations

from simharness import ParallelismConfig, build_layout, check


def _findings(lay, code):
    return [f for f in check(lay) if f.code == code]


def test_checks_compare_ag_translates_the_rank_offset():
    """checks._compare_ag: ``first = a[:, 0] - w.off``. A correct 0.16 layout in a window
    (rank_offset 8, local_world_size 16, torch world 32) with the option on has no
    ag-mismatch (the issue 18 mutant drops ``- w.off`` and reports one)."""
    cfg = ParallelismConfig.from_megatron(
        world_size=32, mcore="0.16", tensor_model_parallel_size=2,
        pipeline_model_parallel_size=2, context_parallel_size=2, rank_offset=8,
        local_world_size=16, create_all_gather_group=True)
    lay = build_layout(cfg, "0.16", torch_world=32)
    assert lay.groups("dp_cp_ag").tolist() == lay.groups("dp_cp").tolist()
    assert _findings(lay, "ag-mismatch") == []
    assert [f.code for f in check(lay) if f.severity == "error"] == []
