"""Alpha-beta ring model: calibration against public nccl-tests figures, bus
factors, and max-min fair sharing of links between concurrent rings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simharness.topology import TopologyError, load_cluster, topology_dir
from simharness.topology.cost import (build_rings, bus_bandwidth, bus_factor, collective_time,
                                      maxmin_rates, ring_steps)

# Public figures, from ../shared/reference/cluster-numbers.md (none measured here).
H100_NODE_RING_BUSBW = 370.0          # 8-GPU NVLink4 ring busbw, nccl-tests issues #212, #290
NDR_NIC_MEASURED = (46.0, 48.0)       # one ConnectX-7 NDR 400G NIC, GB/s
MULTINODE_ALLREDUCE_BUSBW = (400.0, 450.0)  # H100/H200 NVLink + NDR, vendor blogs
NICS_PER_NODE = 8
TOLERANCE = 0.15                      # the bar
SIZE = 8 * 2 ** 30                    # nccl-tests peak figures are quoted at the largest sizes


def within(pred: float, ref) -> bool:
    """``pred`` within TOLERANCE of a figure, or of the nearest end of a reported range."""
    lo, hi = (ref, ref) if np.isscalar(ref) else ref
    nearest = min(max(pred, lo), hi)
    return abs(pred - nearest) <= TOLERANCE * nearest


@pytest.mark.parametrize("collective", ["all_gather", "all_reduce", "reduce_scatter"])
def test_calibration_one_h100_node(collective):
    node = load_cluster("dgx-h100")
    busbw = bus_bandwidth(node, range(8), collective, SIZE)
    assert within(busbw, H100_NODE_RING_BUSBW), busbw
    assert busbw < 450  # never above the NVLink4 line rate


@pytest.mark.parametrize("topology", ["dgx-h100-superpod", "dgx-h200-cluster"])
@pytest.mark.parametrize("nodes", [2, 4])
def test_calibration_multi_node_over_rails(topology, nodes):
    c = load_cluster(topology, nodes)
    ranks = range(8 * nodes)
    ar = bus_bandwidth(c, ranks, "all_reduce", SIZE)
    assert within(ar, MULTINODE_ALLREDUCE_BUSBW), ar
    # all-gather: NIC-bound at 8 NICs x the measured per-NIC figure, or NVLink-bound below it
    ag = bus_bandwidth(c, ranks, "all_gather", SIZE)
    agg = (NICS_PER_NODE * NDR_NIC_MEASURED[0], NICS_PER_NODE * NDR_NIC_MEASURED[1])
    assert within(ag, agg), ag


@pytest.mark.parametrize("nodes", [2, 4, 32])
def test_calibration_one_gpu_per_node_uses_one_nic(nodes):
    c = load_cluster("dgx-h100-superpod", nodes)
    for local in (0, 5):
        ranks = [n * 8 + local for n in range(nodes)]
        busbw = bus_bandwidth(c, ranks, "all_gather", SIZE)
        assert within(busbw, NDR_NIC_MEASURED), busbw


def test_bus_factors_and_steps_follow_nccl_tests():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("allgather", 8) == pytest.approx(7 / 8)
    assert bus_factor("reduce-scatter", 4) == pytest.approx(3 / 4)
    assert ring_steps("all_reduce", 8) == 14 and ring_steps("ag", 8) == 7
    with pytest.raises(TopologyError, match="unknown collective 'bcast'"):
        bus_factor("bcast", 2)


def test_time_is_latency_plus_bytes_over_bandwidth():
    t = collective_time("all_gather", 4, 4e9, rate_gb_per_s=100.0, step_latency_us=2.0,
                        base_latency_us=5.0)
    assert t == pytest.approx(5e-6 + 3 * 2e-6 + 0.75 * 4e9 / 100e9)
    assert collective_time("all_reduce", 1, 1e9, 1.0, 1.0, 5.0) == 0.0


def test_small_messages_are_latency_bound():
    node = load_cluster("dgx-h100-superpod", 32)
    ranks = [n * 8 for n in range(32)]
    small, large = (bus_bandwidth(node, ranks, "all_gather", s) for s in (64 * 1024, SIZE))
    assert small < 0.05 * large


# ------------------------------------------------------------------ link sharing
def _variant(tmp_path, name, **replace):
    text = (topology_dir() / "dgx-h100-superpod.toml").read_text()
    for old, new in replace.items():
        old = old.replace("__", " = ")
        assert old in text, old
        text = text.replace(old, new)
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    return p


def test_concurrent_rings_on_their_own_rails_do_not_share(tmp_path):
    c = load_cluster("dgx-h100-superpod", 4)
    dp = np.arange(32).reshape(4, 8).T  # 8 rings, one per rail
    rings = build_rings(c, dp)
    assert np.allclose(rings.concurrent_gb_per_s(), 47.0)


def test_two_gpus_behind_one_nic_halve_its_bandwidth(tmp_path):
    c = load_cluster(_variant(tmp_path, "shared", **{"nics_per_node__8": "nics_per_node = 4"}), 4)
    dp = np.arange(32).reshape(4, 8).T  # ring r uses NIC r // 2 on every node
    rings = build_rings(c, dp)
    assert np.allclose(rings.alone_gb_per_s, 47.0)
    assert np.allclose(rings.concurrent_gb_per_s(), 23.5)
    # One ring alone on the shared NIC gets it all back.
    assert bus_bandwidth(c, dp[0], "all_gather", SIZE) == pytest.approx(
        2 * bus_bandwidth(c, dp[0], "all_gather", SIZE, concurrent=[dp[1]]), rel=1e-3)


def test_oversubscribed_leaf_uplinks_are_shared(tmp_path):
    # ToR wiring, 2 nodes per leaf, 4 uplinks: 8 rings leave each leaf through 188 GB/s.
    c = load_cluster(_variant(tmp_path, "tor", **{'wiring__"rail"': 'wiring = "tor"',
                                                  "nodes_per_switch__32": "nodes_per_switch = 2",
                                                  "uplink_ports__32": "uplink_ports = 4"}), 4)
    dp = np.arange(32).reshape(4, 8).T
    rings = build_rings(c, dp)
    assert np.allclose(rings.alone_gb_per_s, 47.0)  # alone: the NIC is the bottleneck
    assert np.allclose(rings.concurrent_gb_per_s(), 4 * 50 * 0.94 / 8)


def test_unequal_demands_get_max_min_fair_shares():
    # link 0 (cap 10) carries flows 0, 1; link 1 (cap 3) carries flow 1 only.
    assert maxmin_rates([0, 1, 1], [0, 0, 1], [1, 1, 1], [10.0, 3.0], 2).tolist() == [7.0, 3.0]
    # a flow that crosses a link twice counts twice
    assert maxmin_rates([0, 1], [0, 0], [2.0, 1.0], [9.0], 2).tolist() == [3.0, 3.0]
    assert maxmin_rates([], [], [], [1.0], 2).tolist() == [np.inf, np.inf]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_max_min_fairness_property(data):
    """Feasible, and every flow has a saturated link on which no flow is faster."""
    n_flows = data.draw(st.integers(1, 6))
    n_links = data.draw(st.integers(1, 5))
    cap = np.array(data.draw(st.lists(st.floats(1, 100), min_size=n_links, max_size=n_links)))
    entries = {}
    for f in range(n_flows):
        links = data.draw(st.sets(st.integers(0, n_links - 1), min_size=1, max_size=n_links))
        for l in links:
            entries[(f, l)] = data.draw(st.sampled_from([0.25, 0.5, 1.0, 2.0]))
    flow = np.array([k[0] for k in entries])
    link = np.array([k[1] for k in entries])
    w = np.array(list(entries.values()))
    rate = maxmin_rates(flow, link, w, cap, n_flows)
    load = np.bincount(link, weights=w * rate[flow], minlength=n_links)
    assert (load <= cap * (1 + 1e-9)).all()
    saturated = load >= cap * (1 - 1e-9)
    for f in range(n_flows):
        mine = link[flow == f]
        assert any(saturated[l] and rate[f] >= rate[flow[link == l]].max() * (1 - 1e-9)
                   for l in mine), (f, rate)


def test_groups_on_one_device_are_rejected():
    c = load_cluster("dgx-h100")
    with pytest.raises(TopologyError, match="same device"):
        build_rings(c, [[0, 0]])
