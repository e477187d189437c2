"""Alpha-beta ring model: calibration against public nccl-tests figures, bus
factors, and max-min fair sharing of links between concurrent rings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simharness.topology import TopologyError, load_cluster, topology_dir
from simharness.topology.cost import build_rings, bus_bandwidth, maxmin_rates, predict

# The old alpha-beta calibration tests (fitted efficiencies checked at 8 GiB against an
# unsourced range) are replaced by tests/unit/cost/test_cost_calibration.py, which checks every
# published point of topologies/calibration/nccl_calibration.toml over the size sweep.
SIZE = 8 * 2 ** 30


def test_small_messages_are_latency_bound():
    node = load_cluster("dgx-h100-superpod", 32)
    ranks = [n * 8 for n in range(32)]
    small, large = (bus_bandwidth(node, ranks, "all_gather", s) for s in (64 * 1024, SIZE))
    assert small < 0.05 * large


def test_pxn_keeps_cross_rail_rings_off_the_spine():
    """GPU 0 of node 0 -> GPU 3 of node 1: with PXN the data crosses NVLink to GPU 3 of
    node 0 and leaves on rail 3; without PXN it takes rail 0 and the spine."""
    c = load_cluster("dgx-h100-superpod", 2)
    rings = build_rings(c, [[0, 11]])
    assert not rings.uses_spine[0] and rings.rail_mismatch[0]
    route = c.routes(0, 11)[0]
    assert route[0] == c.link_offsets["nvl_up"] + 0 and route[1] == c.link_offsets["nvl_down"] + 3
    assert route[3] == c.link_offsets["nic_up"] + int(c.nic_of(3))


def test_without_pxn_cross_rail_traffic_takes_the_spine(tmp_path):
    p = _variant(tmp_path, "nopxn", **{"pxn__true": "pxn = false"})
    c = load_cluster(p, 2)
    rings = build_rings(c, [[0, 11]])
    assert rings.uses_spine[0]
    assert c.routes(0, 11)[0][0] == -1   # no NVLink hop first


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
    # One ring alone on the shared NIC gets it all back (bandwidth-bound at 8 GiB).
    alone = predict(c, dp[0], "all_gather", SIZE)
    shared = predict(c, dp[0], "all_gather", SIZE, concurrent=[dp[1]])
    assert alone.algbw_gb_per_s == pytest.approx(2 * shared.algbw_gb_per_s, rel=1e-6)


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
        for li in links:
            entries[(f, li)] = data.draw(st.sampled_from([0.25, 0.5, 1.0, 2.0]))
    flow = np.array([k[0] for k in entries])
    link = np.array([k[1] for k in entries])
    w = np.array(list(entries.values()))
    rate = maxmin_rates(flow, link, w, cap, n_flows)
    load = np.bincount(link, weights=w * rate[flow], minlength=n_links)
    assert (load <= cap * (1 + 1e-9)).all()
    saturated = load >= cap * (1 - 1e-9)
    for f in range(n_flows):
        mine = link[flow == f]
        assert any(saturated[li] and rate[f] >= rate[flow[link == li]].max() * (1 - 1e-9)
                   for li in mine), (f, rate)


def test_groups_on_one_device_are_rejected():
    c = load_cluster("dgx-h100")
    with pytest.raises(TopologyError, match="same device"):
        build_rings(c, [[0, 0]])
