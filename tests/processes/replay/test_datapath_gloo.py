"""Data-path replay on real gloo processes (worlds 8 and 16).

Each launch runs both variants (all-gather on its own communicator and on the
reduce-scatter group), so one launch covers the option on and off. The
parameters must be bit-identical to the single-process reference; a
misaligned all-gather group must be named by data (whose shard landed where).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from support.datapath import assert_bit_identical
from support.replay import DEADLINE, TIMEOUT, assert_no_leftovers, cfg

from cli import main
from simharness import build_layout
from simharness.replay.datapath import DataPathOptions, replay_data, summary_lines, swap_ranks


def run(layout, **kw):
    rep = replay_data(layout, DataPathOptions(timeout=kw.pop("timeout", TIMEOUT), **kw),
                      deadline=DEADLINE)
    assert_no_leftovers(rep)
    return rep


def explain(rep) -> str:
    return "\n".join(summary_lines(rep))


def test_world8_016_option_on_bit_identical_both_ways():
    layout = build_layout(cfg(8, tp=2, pp=2, cp=2, ag=True), "0.16")
    rep = run(layout)
    assert_bit_identical(rep, 8)
    sep, shared = rep["variants"]["separate"], rep["variants"]["shared"]
    assert sep["plan"] and not shared["plan"]
    assert sep["label"] == "dense AG on dp_cp_ag, expert AG on ep_dp"  # 0.16: no expert AG
    assert shared["label"] == "dense AG on dp_cp, expert AG on ep_dp"


def test_world16_019_experts_option_on_bit_identical_both_ways():
    layout = build_layout(cfg(16, tp=2, cp=2, ep=2, etp=1, ag=True), "0.19")
    rep = run(layout, steps=3, dense_buckets=2, expert_buckets=2)
    assert_bit_identical(rep, 16)
    assert rep["variants"]["separate"]["label"] == "dense AG on dp_cp_ag, expert AG on ep_dp_ag"


@pytest.mark.parametrize("mcore, ep, expert_ag", [("0.16", 1, "ep_dp"),
                                                   ("0.18", 2, "a twin of ep_dp")])
def test_world16_option_off_plan_is_shared_twin_is_separate(mcore, ep, expert_ag):
    layout = build_layout(cfg(16, tp=2, pp=2 if ep == 1 else 1, ep=ep, etp=1 if ep > 1 else None),
                          mcore)
    rep = run(layout, steps=3)
    assert_bit_identical(rep, 16)
    assert rep["variants"]["shared"]["plan"]
    assert rep["variants"]["separate"]["label"] == (f"dense AG on a twin of dp_cp, expert AG on "
                                                    f"{expert_ag}")


def test_issue_4261_layout_is_detected_by_data_under_018():
    """tp-cp-ep-pp-dp with pp>1, dp>1: 0.18 builds AG groups of the wrong ranks; the data
    path says whose shards each rank received, and the shared variant stays correct."""
    layout = build_layout(cfg(8, tp=2, pp=2, ag=True, use_tp_pp_dp_mapping=True), "0.18")
    assert layout.groups("dp_cp").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert layout.groups("dp_cp_ag").tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    rep = run(layout, steps=2)
    assert rep["status"] == "mismatch" and rep["exit_code"] == 1, explain(rep)
    assert not rep["variants"]["separate"]["ok"] and rep["variants"]["shared"]["ok"]
    src = [f for f in rep["findings"] if f["code"] == "datapath-ag-source"]
    assert src and all(f["groups"][0] == "separate" for f in src)
    first = src[0]["message"]
    assert first.startswith("separate: rank 0 holds shard 1 of dense bucket 0 at step 0 but it "
                            "came from rank 2 (its shard 0), expected rank 4"), first
    assert "the all-gather ran on [0, 2], the dp_cp replicas are [0, 4]" in first
    assert src[0]["ranks"] == [0, 2, 4]
    codes = {f["code"] for f in rep["findings"] if f["severity"] == "error"}
    assert codes == {"datapath-ag-source", "datapath-reduce-scatter", "datapath-params"}


def test_injected_swap_in_the_ag_group_is_named():
    layout = swap_ranks(build_layout(cfg(8, tp=2, ag=True), "0.16"), 2, 3)
    rep = run(layout, steps=2, expert_buckets=0)
    assert rep["exit_code"] == 1, explain(rep)
    msgs = [f["message"] for f in rep["findings"] if f["code"] == "datapath-ag-source"]
    assert ("separate: rank 0 holds shard 1 of dense bucket 0 at step 0 but it came from "
            "rank 3 (its shard 1), expected rank 2") in msgs[0], msgs
    assert rep["variants"]["shared"]["ok"]


def test_fsdp2_separate_reduce_scatter_group_on_and_off():
    layout = build_layout(cfg(8, tp=2), "0.16")
    rep = run(layout, kind="fsdp2", steps=3)
    assert_bit_identical(rep, 8)
    assert "set_separate_reduce_scatter_group" in rep["variants"]["separate"]["label"]


def test_fsdp2_world16():
    rep = run(build_layout(cfg(16), "0.19"), kind="fsdp2", steps=2)
    assert_bit_identical(rep, 16)


def test_hang_times_out_naming_the_rank():
    layout = build_layout(cfg(8, tp=2, ag=True), "0.16")
    rep = run(layout, fault="5:hang@verify", timeout=5.0)
    assert rep["exit_code"] == 3 and rep["status"] == "failed"
    f = rep["failure"]
    assert f["kind"] == "timeout" and f["missing_ranks"] == [5], f
    assert "rank(s) [5] did not arrive" in f["message"]


def test_cli_json_report_and_swap_within_a_group_is_harmless(tmp_path):
    """Swapping two ranks inside one AG group only reorders its list: torch sorts a group's
    ranks, so the data path is unaffected (bit-identical)."""
    report = tmp_path / "d.json"
    r = CliRunner().invoke(main, ["replay-data", "-n", "4", "--create-all-gather-group",
                                  "--mcore", "0.19", "--swap", "0,1", "--steps", "2",
                                  "--format", "json", "--report", str(report),
                                  "--timeout", str(TIMEOUT)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["swap"] == "0,1" and out["status"] == "matched"
    assert json.loads(report.read_text())["variants"] == out["variants"]
    assert_no_leftovers(out)
