"""The network transport's per-step cost (EFA) and the held-out report per network class.

NCCL's tuning prices the network with InfiniBand's latencies (tuning.cc hwLat[NET]); its own
IB verbs transport drives InfiniBand and RoCE alike, so neither adds anything. EFA goes
through the aws-ofi-nccl plugin, whose per-step cost is fitted on the `fit` p5 sweeps only
(``NET_STEP_US["efa"]``) and multiplies the call's sequential network steps.
"""

from __future__ import annotations

import dataclasses

import pytest

from simharness.topology import load_cluster
from simharness.topology.calibration import (
    DEFAULT_PATH,
    class_summaries,
    evaluate,
    fit_net_step_us,
    load_points,
    network_class,
)
from simharness.topology.cost import predict
from simharness.topology.nccl_ramp import NET_STEP_US, net_steps

POINTS = load_points(DEFAULT_PATH)
# Held-out sweeps added after those figures (end of the data file): reported on their own.
LATER_SWEEPS = ("gcp-a3-ultra-ag-2n-gib", "skypilot-a3-ultra-ag-2n", "awsome-p5-efa-ar-2n",
                "nccltests309-xe9680-ar-2n", "oci-h100-roce-ar-2n", "gcm-a100x8-ar",
                "gcm-a100x16-ar-2n")


def test_efa_adds_its_per_step_cost_to_the_pipeline_by_hand():
    """64 MiB all-reduce on 2 p5 instances (16 GPUs): NCCL picks NVLSTree, which crosses
    the network up and down one tree level (2 steps); EFA adds 2 x 113 us, the same call
    on Azure's NDR InfiniBand adds nothing, and NCCL's own figures are the same."""
    size = 64 << 20
    efa = predict(load_cluster("aws-p5", 2), range(16), "all_reduce", size)
    ib = predict(load_cluster("azure-nd-h100-v5", 2), range(16), "all_reduce", size)
    assert efa.pick == ib.pick == "nvls_tree/simple"
    assert (efa.latency_us, efa.algbw_gb_per_s) == (ib.latency_us, ib.algbw_gb_per_s)
    assert NET_STEP_US["efa"] == 113.0
    assert efa.transport_us == 2 * 113.0 and ib.transport_us == 0.0
    fill = ib.ramp_us   # NVLSTree's own pipeline fill (no transport term on InfiniBand)
    nccl = efa.latency_us + size / (1000 * efa.algbw_gb_per_s)
    assert efa.time_us == pytest.approx(nccl + fill + 226.0)
    assert efa.time_us - ib.time_us == pytest.approx(226.0)


def test_a_ring_pays_the_step_cost_on_every_network_crossing():
    c = load_cluster("aws-p5", 4)
    ring = predict(c, range(32), "all_reduce", 64 << 20, algo="ring", proto="simple")
    assert ring.transport_us == 2 * (4 - 1) * NET_STEP_US["efa"]
    ag = predict(c, range(0, 32, 8), "all_gather", 64 << 20, algo="ring")
    assert ag.transport_us == (4 - 1) * NET_STEP_US["efa"]
    one_node = predict(load_cluster("aws-p5", 1), range(8), "all_reduce", 64 << 20)
    assert one_node.transport_us == 0.0
    assert net_steps("all_reduce", "collnet_chain", 8) == 0


def test_roce_is_priced_as_infiniband():
    size = 256 << 20
    roce = predict(load_cluster("gcp-a3-ultra", 2), range(16), "all_reduce", size)
    ib = predict(load_cluster("azure-nd-h200-v5", 2), range(16), "all_reduce", size)
    assert roce.transport_us == 0.0 and roce.time_us == pytest.approx(ib.time_us)


def test_the_efa_step_cost_is_fitted_on_fit_sweeps_only():
    assert fit_net_step_us(POINTS) == NET_STEP_US["efa"]
    # a held-out point changed beyond reason moves nothing
    moved = [dataclasses.replace(p, busbw=p.busbw / 10) if p.split == "heldout" and
             p.busbw is not None else p for p in POINTS]
    assert fit_net_step_us(moved) == NET_STEP_US["efa"]
    # ... while the fit sweeps do set it
    slower = [dataclasses.replace(p, busbw=p.busbw / 2) if p.split == "fit" and
              p.sweep.startswith("aws-p5") else p for p in POINTS]
    assert fit_net_step_us(slower) > NET_STEP_US["efa"]
    fit_sweeps = {p.sweep for p in POINTS if p.sweep.startswith("aws-p5") and p.split == "fit"}
    assert fit_sweeps == {"aws-p5-efa-ar-2n", "aws-p5-efa-ar-16n"}


def test_points_are_classed_by_their_network():
    by_id = {p.id: p for p in POINTS}
    assert network_class(by_id["aws-p5-efa-ar-4n-1g"]) == "EFA hopper"
    assert network_class(by_id["h100-32nodes-ag-2g"]) == "InfiniBand hopper"
    assert network_class(by_id["together-h100x8-ar-ring-1g"]) == "NVLink hopper"
    assert network_class(by_id["nvl72-ar-1g"]) == "NVLink blackwell"   # one NVL72 rack


def test_the_held_out_report_per_class_keeps_the_earlier_figures():
    """Issue 15's held-out figures (131 of 136 on NVLink and InfiniBand) do not get worse
    now that EFA is priced; the EFA class is reported on its own."""
    held = [evaluate(p) for p in POINTS if p.split == "heldout" and p.sweep not in LATER_SWEEPS]
    classes = {c.network: c for c in class_summaries(held)}
    others = [c for name, c in classes.items() if not name.startswith("EFA")]
    assert sum(c.all.n for c in others) == 136
    assert sum(c.all.within for c in others) >= 131
    efa = classes["EFA hopper"].all
    assert efa.n == 27 and efa.within >= 19
    assert sum(b.n for b in classes["EFA hopper"].bands) == 27


def test_the_later_sweeps_are_held_out_whole_and_land_in_their_network_classes():
    later = [p for p in POINTS if p.sweep in LATER_SWEEPS]
    assert {p.sweep for p in later} == set(LATER_SWEEPS)
    assert {p.split for p in later} == {"heldout"} and not any(p.used_for for p in later)
    counts: dict[str, int] = {}
    for p in later:
        counts[network_class(p)] = counts.get(network_class(p), 0) + 1
    assert counts == {"RoCE hopper": 53, "EFA hopper": 32, "InfiniBand hopper": 32,
                      "NVLink ampere": 6, "InfiniBand ampere": 6}
