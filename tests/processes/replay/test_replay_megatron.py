"""Megatron mode: the installed megatron-core 0.16.1 builds the groups on real gloo ranks.

Each rank runs ``initialize_model_parallel`` (``new_group`` recorded), the
record is compared call by call with the plan, every group is verified with
torch and one collective, the getters are compared with the plan, and
``simharness.verify_live`` runs on the same job and must agree.
"""

from __future__ import annotations

import pytest
from support import megatron_harness as H
from support.replay import DEADLINE, TIMEOUT, assert_matched, assert_no_leftovers

from simharness import Layout, ParallelismConfig, build_layout
from simharness.replay import ReplayOptions, replay, summary_lines

H.require_installed_megatron(module=True)

pytestmark = pytest.mark.parity  # starts gloo ranks (the folder) that run megatron-core


def run(layout, **kw):
    opts = ReplayOptions(engine="megatron", timeout=TIMEOUT,
                         **{"overlap_bytes": 64 << 10, "iters": 2, **kw})
    rep = replay(layout, opts, deadline=DEADLINE)
    assert_no_leftovers(rep)
    return rep


def test_megatron_world8_all_gather_on():
    layout = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2,
                                            pipeline_model_parallel_size=2,
                                            context_parallel_size=2,
                                            create_all_gather_group=True), "0.16")
    rep = run(layout)
    assert_matched(rep, layout)
    m = rep["megatron"]
    assert m["version"].startswith("0.16")
    assert m["kwargs"]["create_all_gather_group"] is True
    assert m["creation_order_matches"] and m["verify_live_ok"]
    assert m["getters_checked_per_rank"] >= 20
    # Megatron's own count of the groups each rank is in equals the plan's.
    assert m["communicators_per_rank"] == sorted({c["total"] for c in
                                                  rep["communicators_per_rank"]["by_rank"]})
    checks = rep["all_gather"]["checks"]
    assert checks["megatron_has_separate_ag"] == {"ranks": 8, "ok": 8}
    assert checks["megatron_ag_getter"] == {"ranks": 8, "ok": 8}
    assert checks["ag_distinct"] == {"ranks": 8, "ok": 8}


def test_megatron_world8_ep2_etp1_two_instances_all_gather_off():
    layout = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2,
                                            context_parallel_size=2,
                                            expert_model_parallel_size=2,
                                            expert_tensor_parallel_size=1,
                                            num_distributed_optimizer_instances=2), "0.16")
    rep = run(layout, overlap_bytes=0)
    assert_matched(rep, layout)
    m = rep["megatron"]
    assert m["creation_order_matches"] and m["verify_live_ok"]
    assert m["kinds_without_getter"] == ["inter_ep_dp_gloo"]  # verified through the record
    checks = rep["all_gather"]["checks"]
    assert checks["megatron_has_separate_ag"] == {"ranks": 8, "ok": 8}
    assert checks["megatron_ag_getter_raises"] == {"ranks": 8, "ok": 8}
    assert checks["ag_resolution"] == {"ranks": 16, "ok": 16}


def test_megatron_corrupted_plan_all_gather_off():
    """ep2 etp1, two optimizer instances, option off; the plan has ranks 2 and 3 swapped
    between the DP-with-CP groups: Megatron's real groups name the difference."""
    good = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2,
                                          context_parallel_size=2, expert_model_parallel_size=2,
                                          expert_tensor_parallel_size=1,
                                          num_distributed_optimizer_instances=2), "0.16")
    d = good.to_dict()
    g = d["kinds"]["dp_cp"]["groups"]          # [[0, 2, 4, 6], [1, 3, 5, 7]]
    g[0][1], g[1][1] = g[1][1], g[0][1]
    rep = run(Layout.from_dict(d), overlap_bytes=0)
    text = "\n".join(summary_lines(rep))
    assert rep["status"] == "mismatch" and rep["exit_code"] == 1, text
    m = rep["megatron"]
    assert not m["creation_order_matches"] and not m["verify_live_ok"]
    order = [x for x in rep["mismatches"] if x["check"] == "creation_order"]
    assert [(x["kind"], x["group"]) for x in order] == [("dp_cp", 0), ("dp_cp", 1)]
    assert order[0]["expected"][1] == [0, 3, 4, 6] and order[0]["actual"][1] == [0, 2, 4, 6]
    getters = [x for x in rep["mismatches"] if x["check"] == "getter"]
    assert sorted(r for x in getters for r in x["ranks"]) == list(range(8))
    assert all(x["kind"] == "dp_cp" for x in getters)
    # Megatron's groups themselves are sound, and the option-off checks hold.
    assert rep["groups"]["verified"] == rep["groups"]["memberships"]
    assert rep["all_gather"]["ok"]
    assert rep["all_gather"]["checks"]["megatron_ag_getter_raises"] == {"ranks": 8, "ok": 8}
    assert "dp_cp group 0" in text


def _verify_live_rank(rank: int, world: int, init_file: str, q) -> None:
    """One rank of a plain gloo job (no simharness launcher): Megatron builds the groups,
    then ``verify_live(collectives=True)`` runs one all-gather per group."""
    from datetime import timedelta

    import torch.distributed as dist
    from megatron.core import parallel_state

    import simharness

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=TIMEOUT))
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
    layout = simharness.build_layout(
        simharness.ParallelismConfig(world_size=world, tensor_model_parallel_size=2), "0.16")
    rep = simharness.verify_live(layout, collectives=True, print_report=False)
    q.put((rank, rep))
    dist.barrier()
    dist.destroy_process_group()


def test_verify_live_with_collectives_in_a_plain_job(tmp_path):
    """``verify_live(collectives=True)`` (the path the replay does not take): every group
    object Megatron keeps for a rank gets exactly one all-gather, and all of them agree."""
    import multiprocessing as mp
    import queue

    world = 2
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_verify_live_rank, args=(r, world, str(tmp_path / "init"), q))
             for r in range(world)]
    for p in procs:
        p.start()
    try:
        reports = dict(q.get(timeout=DEADLINE) for _ in procs)
    except queue.Empty:
        pytest.fail("verify_live did not return on every rank")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0] * world
    rep = reports[0]
    assert rep == reports[1]  # every rank returns the same report
    assert rep["ok"] and rep["status"] == "matched", rep["mismatches"]
    megatron_groups = [c["megatron"] for c in rep["communicators_per_rank"]["by_rank"]]
    assert all(n > 0 for n in megatron_groups)
    assert rep["collectives"] == sum(megatron_groups)
