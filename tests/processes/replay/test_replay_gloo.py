"""Replay layouts on real gloo processes (worlds 8 and 16) and verify them.

Each replay forks ``world_size`` ranks from a helper that imports torch once;
the rendezvous store listens on a port the kernel picks, so replays run in
parallel under ``pytest -n auto``. Generous timeouts: a loaded 2-core machine
runs 16 ranks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner
from support.replay import (
    DEADLINE,
    TIMEOUT,
    assert_matched,
    assert_no_leftovers,
    cfg,
    explain,
    run_replay,
)

from cli import main
from simharness import Layout, build_layout


def test_world8_tp2_pp2_cp2_all_gather_on():
    layout = build_layout(cfg(8, tp=2, pp=2, cp=2, ag=True), "0.16")
    rep = run_replay(layout)
    assert_matched(rep, layout)
    ag = rep["all_gather"]
    assert ag["option"] and ag["ok"]
    assert ag["dense"] == {"reduce_scatter": "dp_cp", "all_gather": "dp_cp_ag"}
    for name in ("ag_exists", "ag_distinct", "ag_same_ranks"):
        assert ag["checks"][name] == {"ranks": 8, "ok": 8}
    # dense (on the AG group) and expert (no expert AG group in 0.16: on ep_dp itself)
    assert ag["checks"]["ag_resolution"] == {"ranks": 16, "ok": 16}
    assert ag["expert"] == {"reduce_scatter": "ep_dp", "all_gather": "ep_dp"}
    ov = rep["overlap"]
    assert ov["ag_group"] == "dp_cp_ag" and ov["group_size"] == 2 and ov["values_ok"]
    assert set(ov["seconds"]) == {"rs_only", "ag_only", "same", "separate"}
    assert ov["ratio_separate_over_same"] > 0


def test_world8_ep2_etp1_two_instances_all_gather_off():
    layout = build_layout(cfg(8, tp=2, cp=2, ep=2, etp=1, n=2), "0.19")
    rep = run_replay(layout)
    assert_matched(rep, layout)
    ag = rep["all_gather"]
    assert not ag["option"] and ag["ok"]
    # Off: the all-gather resolves to the reduce-scatter group object itself.
    assert ag["dense"] == {"reduce_scatter": "intra_dp_cp", "all_gather": "intra_dp_cp"}
    assert ag["expert"] == {"reduce_scatter": "intra_ep_dp", "all_gather": "intra_ep_dp"}
    assert ag["checks"]["ag_resolution"] == {"ranks": 16, "ok": 16}  # dense + expert, 8 ranks
    assert rep["overlap"]["ag_group"] == "probe twin"


def test_world16_tp2_pp2_cp2_ep2_etp1_two_instances_all_gather_on():
    layout = build_layout(cfg(16, tp=2, pp=2, cp=2, ep=2, etp=1, n=2, ag=True), "0.19")
    rep = run_replay(layout, overlap_bytes=0)
    assert_matched(rep, layout)
    ag = rep["all_gather"]
    assert ag["ok"] and ag["checks"]["ag_distinct"] == {"ranks": 32, "ok": 32}  # + expert AG
    assert rep["overlap"] is None
    assert rep["groups"]["by_kind"]["intra_ep_dp"]["verified"] == 16


def test_corrupted_plan_is_caught_and_named():
    """A rank swapped between two DP-with-CP groups: torch builds it (every rank's view is
    self-consistent), the AG checks and the comparison with the config name it."""
    good = build_layout(cfg(8, tp=2, pp=2, cp=2, ag=True), "0.16")
    d = good.to_dict()
    g = d["kinds"]["dp_cp"]["groups"]          # [[0, 2], [1, 3], [4, 6], [5, 7]]
    g[0][1], g[1][1] = g[1][1], g[0][1]       # -> [[0, 3], [1, 2], ...]
    bad = Layout.from_dict(d)
    rep = run_replay(bad, overlap_bytes=0)
    assert rep["status"] == "mismatch" and rep["exit_code"] == 1, explain(rep)
    # Torch-level: every group was built exactly as the (corrupted) plan says ...
    assert rep["groups"]["verified"] == rep["groups"]["memberships"]
    # ... but the all-gather group no longer has the DP-with-CP group's ranks ...
    ag = [m for m in rep["mismatches"] if m["check"] == "ag_same_ranks"]
    assert sorted(r for m in ag for r in m["ranks"]) == [0, 1, 2, 3]
    # ... and the plan differs from what its config builds: group and ranks named.
    vs = rep["plan_checks"]["vs_config"]["mismatches"]
    assert [(m["kind"], m["group"], m["plan"], m["config"]) for m in vs] == [
        ("dp_cp", 0, [0, 3], [0, 2]), ("dp_cp", 1, [1, 2], [1, 3])]
    text = explain(rep)
    assert "dp_cp group 0" in text and "rank 3 belongs in group 1" in text


def test_megatron_019_order_bug_is_visible_in_the_replay():
    """tp-cp-ep-pp-dp with pp>1 and dp>1: 0.18+ builds AG groups that are not the dp-cp
    groups (upstream #4261); the plan models it and the replay's AG checks name it."""
    layout = build_layout(cfg(8, tp=2, pp=2, ag=True, use_tp_pp_dp_mapping=True), "0.19")
    rep = run_replay(layout, overlap_bytes=0)
    assert rep["status"] == "mismatch", explain(rep)
    assert rep["plan_checks"]["ok"]  # the plan is what the config builds
    bad = [m for m in rep["mismatches"] if m["check"] == "ag_same_ranks"]
    assert bad and "#4261" in bad[0]["message"]
    assert rep["groups"]["verified"] == rep["groups"]["memberships"]


def test_cli_replay_json_and_report(tmp_path):
    report = tmp_path / "r.json"
    plan = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["export", "-n", "4", "--tp", "2", "--out", str(plan)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["replay", "--plan", str(plan), "--format", "json",
                                  "--report", str(report), "--overlap-bytes", "64K",
                                  "--iters", "2", "--timeout", str(TIMEOUT)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["status"] == "matched" and out["world_size"] == 4
    assert json.loads(report.read_text())["groups"] == out["groups"]
    assert_no_leftovers(out)


def test_torchrun_worker_entry_point(tmp_path):
    """`torchrun -m simharness.replay.worker` (the multi-node path) on one machine."""
    from simharness.planfile import write_plan

    report, plan = tmp_path / "tr.json", tmp_path / "plan.json"
    write_plan(build_layout(cfg(4, tp=2, ag=True), mcore="0.16"), str(plan))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "4", "-m", "simharness.replay.worker", "--plan", str(plan),
           "--backend", "gloo",
           "--overlap-bytes", "64K", "--iters", "2", "--timeout", str(TIMEOUT),
           "--report", str(report)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail("torchrun replay did not finish")
    assert p.returncode == 0, out + err
    assert "result: MATCHED (exit 0)" in out
    rep = json.loads(report.read_text())
    assert rep["status"] == "matched" and rep["all_gather"]["ok"]
    assert rep["groups"]["verified"] == rep["groups"]["memberships"]
