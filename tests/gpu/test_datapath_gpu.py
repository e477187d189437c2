"""Data-path replay on NCCL (one GPU per rank; skipped without enough GPUs, never run in CI).

``pytest -m gpu tests/gpu/test_datapath_gpu.py -s`` prints the per-step times: on
NCCL a communicator runs its collectives in order, so the all-gather on its
own communicator ("separate") is what can overlap the reduce-scatter.
"""

from __future__ import annotations

from support.datapath import assert_bit_identical
from support.gpu import need
from support.replay import DEADLINE, assert_no_leftovers, cfg

from simharness import build_layout
from simharness.replay.datapath import DataPathOptions, replay_data, summary_lines


def nccl(layout, **kw):
    need(layout.world_size)
    rep = replay_data(layout, DataPathOptions(backend="nccl", timeout=120.0, **kw),
                      deadline=DEADLINE)
    print("\n".join(summary_lines(rep)))
    assert_no_leftovers(rep)
    return rep


def test_nccl_world8_option_on_bit_identical():
    assert_bit_identical(nccl(build_layout(cfg(8, tp=2, cp=2, ag=True), "0.16"),
                              shard_numel=1 << 16), 8)  # digests, not values, come back


def test_nccl_issue_4261_detected():
    layout = build_layout(cfg(8, tp=2, pp=2, ag=True, use_tp_pp_dp_mapping=True), "0.19")
    rep = nccl(layout, steps=2)
    assert rep["exit_code"] == 1 and rep["variants"]["shared"]["ok"]
    assert any(f["code"] == "datapath-ag-source" for f in rep["findings"])


def test_nccl_fsdp2_on_off():
    assert_bit_identical(nccl(build_layout(cfg(8), "0.19"), kind="fsdp2"), 8)
