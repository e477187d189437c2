"""Helpers of the gloo replay tests: configurations, one replay with the suite's timeouts,
and the checks every replay test makes (no process left behind, a matched report)."""

from __future__ import annotations

import os

from simharness import Layout, ParallelismConfig
from simharness.replay import ReplayOptions, replay, summary_lines

DEADLINE = 300          # backstop per replay (the ranks' own timeout fires first)
TIMEOUT = 120.0         # per collective / group creation, generous on a loaded machine
SMALL_PROBE = dict(overlap_bytes=64 << 10, iters=2)


def cfg(world, *, tp=1, pp=1, cp=1, ep=1, etp=None, n=1, ag=False, **kw):
    return ParallelismConfig(world_size=world, tensor_model_parallel_size=tp,
                             pipeline_model_parallel_size=pp, context_parallel_size=cp,
                             expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
                             num_distributed_optimizer_instances=n,
                             create_all_gather_group=ag, **kw)


def run_replay(layout, **kw):
    opts = ReplayOptions(timeout=kw.pop("timeout", TIMEOUT), **{**SMALL_PROBE, **kw})
    rep = replay(layout, opts, deadline=DEADLINE)
    assert_no_leftovers(rep)
    return rep


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - reused by another user
        return False
    try:  # a zombie is not a leftover
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def assert_no_leftovers(rep):
    procs = rep.get("processes") or {}
    pids = [procs.get("helper")] + list((procs.get("ranks") or {}).values())
    left = [p for p in pids if p and alive(p)]
    assert not left, f"processes left behind: {left}"


def explain(rep) -> str:
    return "\n".join(summary_lines(rep))


def assert_matched(rep, layout: Layout):
    assert rep["status"] == "matched", explain(rep)
    assert rep["exit_code"] == 0 and rep["ok"]
    g = rep["groups"]
    assert g["new_group_calls"] == len(layout.creation_order)
    memberships = sum(len(layout.rank(r).groups) for r in layout.ranks)
    assert g["memberships"] == g["verified"] == g["collectives"] == memberships
    for c in rep["communicators_per_rank"]["by_rank"]:
        assert c["total"] == layout.rank(c["rank"]).communicators
        assert sum(c["created"].values()) == c["total"]
        assert set(c["created"]) == {"gloo"}  # nccl groups were created as gloo
    assert rep["backend_map"]["nccl"] == "gloo"
    assert rep["plan_checks"]["ok"]
    assert set(rep["timings"]) >= {"startup_s", "group_creation_s", "verification_s",
                                   "overlap_probe_s", "total_s"}
