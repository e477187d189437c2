"""``--rs-kind`` on a group the flag does not twin: the all-gather communicator is unused."""

from __future__ import annotations

from simharness import ParallelismConfig, build_layout
from simharness.step import SimulateInputs, job_stages, simulate
from simharness.topology import load_cluster, place_layout


def _report(rs_kind: str, flag: bool = True):
    layout = build_layout(ParallelismConfig(world_size=32, tensor_model_parallel_size=8,
                                            create_all_gather_group=flag))
    placement = place_layout(layout, load_cluster("dgx-h100-superpod", nodes=4))
    stages, _ = job_stages(layout.config, model_bytes=14e9, layers=32)
    return simulate(layout, placement, SimulateInputs(stages=stages, compute_ms=0.2,
                                                      rs_kind=rs_kind))


def test_rs_kind_tp_prices_no_traffic_on_dp_cp_ag_and_gains_nothing():
    rep = _report("tp")
    assert rep.groups == {"dense_rs": "tp", "dense_ag": "tp"}
    # the all-gather stays on tp's communicator: the same step with and without the flag
    assert all(sc.one_step_s == sc.separate_step_s for sc in rep.scenarios)
    assert rep.verdict.startswith("no effect: the dense all-gather runs on the "
                                  "reduce-scatter's own group (tp)"), rep.verdict
    (kind, mb), = rep.comm_memories
    assert kind == "dp_cp_ag"
    assert rep.memory_lines[0].startswith("dp_cp_ag (no traffic here: init structures only)")


def test_rs_kind_dp_cp_still_runs_its_all_gathers_on_dp_cp_ag():
    rep = _report("dp_cp")
    assert rep.groups["dense_ag"] == "dp_cp_ag"
    assert rep.memory_lines[0].startswith("dp_cp_ag (runs ")
    assert rep.ag_used and not rep.unused_words
    # with the flag off the same job says what turning it on would buy: a separate queue
    off = _report("dp_cp", flag=False)
    assert off.ag_used and off.memory_lines[0].startswith("dp_cp_ag (runs ")
    assert [sc.separate_step_s for sc in off.scenarios] == \
        [sc.separate_step_s for sc in rep.scenarios]
