"""The arithmetic routes and ring loads agree with networkx on small graphs."""

from __future__ import annotations

import itertools
from collections import defaultdict

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simharness.topology import load_cluster, topology_dir
from simharness.topology.cost import build_rings

TIER_RANK = {"gpu": 0, "nvswitch": 1, "nic": 1, "leaf": 2, "spine": 3}


def _small_clusters(tmp_path_factory):
    """Shipped shapes, plus SuperPOD/ToR variants small enough for all-pairs paths
    that still have several leaves per rail (so some routes take the spine)."""
    d = tmp_path_factory.mktemp("topo")
    pod = (topology_dir() / "dgx-h100-superpod.toml").read_text()
    two_su = d / "two-su.toml"
    two_su.write_text(pod.replace("nodes_per_switch = 32", "nodes_per_switch = 2"))
    tor = d / "tor.toml"
    tor.write_text(pod.replace('wiring = "rail"', 'wiring = "tor"')
                   .replace("nodes_per_switch = 32", "nodes_per_switch = 2"))
    shared_nic = d / "shared-nic.toml"
    shared_nic.write_text(pod.replace("nics_per_node = 8", "nics_per_node = 4")
                          .replace("nodes_per_switch = 32", "nodes_per_switch = 1"))
    return [load_cluster("dgx-h100"), load_cluster(two_su, 4), load_cluster(tor, 3),
            load_cluster(shared_nic, 3), load_cluster("gb200-nvl72-superpod", 20),
            load_cluster("cpu-loopback")]


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    return _small_clusters(tmp_path_factory)


def _nx_route(g, a, b, c=None):
    """Shortest path by latency with GPUs only as endpoints; the directed link ids on it.

    With ``c`` (the cluster) and PXN on, a route between GPUs of different rails and
    NVLink domains is the NVLink hop to the proxy GPU (the source node's GPU on the
    destination's rail) followed by the proxy's own shortest path.
    """
    if c is not None and c.pxn and c.domain_of(a) != c.domain_of(b) \
            and c.rail_of(a) != c.rail_of(b):
        proxy = int(c.pxn_proxy(a, b))
        l1, cap1, lat1 = _nx_route(g, a, proxy)
        l2, cap2, lat2 = _nx_route(g, proxy, b)
        return l1 + l2, min(cap1, cap2), lat1 + lat2
    src, dst = ("gpu", a), ("gpu", b)
    view = nx.subgraph_view(g, filter_node=lambda n: n[0] != "gpu" or n in (src, dst))
    path = nx.shortest_path(view, src, dst, weight="latency_us")
    links, cap, lat = [], [], 0.0
    for u, v in itertools.pairwise(path):
        e = g.edges[u, v]
        up = TIER_RANK[u[0]] < TIER_RANK[v[0]]
        links.append(e["links"][0] if up else e["links"][1])
        cap.append(e["capacity_gb_per_s"])
        lat += e["latency_us"]
    return links, min(cap), lat


def test_arithmetic_routes_equal_networkx_shortest_paths(clusters):
    for c in clusters:
        g = c.graph()
        n = min(c.n_devices, 40)
        devs = np.linspace(0, c.n_devices - 1, n).astype(int)
        pairs = [(a, b) for a, b in itertools.product(devs, devs) if a != b]
        a = np.array([p[0] for p in pairs])
        b = np.array([p[1] for p in pairs])
        routes = c.routes(a, b)
        hops, cap, lat = c.route_stats(routes)
        for i, (x, y) in enumerate(pairs):
            links, ncap, nlat = _nx_route(g, int(x), int(y), c)
            assert sorted(routes[i][routes[i] >= 0].tolist()) == sorted(links), (c.spec.name, x, y)
            assert hops[i] == len(links)
            assert cap[i] == pytest.approx(ncap) and lat[i] == pytest.approx(nlat)


def test_routes_classes(clusters):
    two_su = clusters[1]
    # same node: NVLink; same rail same SU: leaf; other SU: spine; other rail: PXN (NVLink
    # to GPU 1 of node 0, then rail 1 to node 1 under the same leaf)
    assert [two_su.route_hops(0, b) for b in (1, 8, 16, 9)] == [2, 4, 6, 6]
    assert two_su.routes(0, 9)[0][0] == two_su.link_offsets["nvl_up"] + 0
    assert two_su.routes(0, 9)[0][4] == -1  # no spine
    nvl = clusters[4]
    assert nvl.route_hops(0, 71) == 2 and nvl.route_hops(0, 72) == 6


def _reference_loads(c, row):
    """The ring model of simharness.topology.cost, written plainly with networkx paths."""
    g = c.graph()
    ds = sorted(row)
    segments = [list(grp) for _, grp in itertools.groupby(ds, key=lambda d: d // c.domain_gpus)]
    loads = defaultdict(float)
    if len(ds) < 2:
        return loads
    for seg in segments:
        if len(seg) > 1:
            for d in seg:
                loads[c.link_offsets["nvl_up"] + d] += 1
                loads[c.link_offsets["nvl_down"] + d] += 1
    if len(segments) > 1:
        m = min(len(s) for s in segments)
        for j, seg in enumerate(segments):
            nxt = segments[(j + 1) % len(segments)]
            for ch in range(m):
                for link in _nx_route(g, seg[ch], nxt[ch], c)[0]:
                    loads[link] += 1.0 / m
    return loads


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_vectorised_ring_loads_equal_the_plain_model(clusters, data):
    c = data.draw(st.sampled_from(clusters[1:5]))
    k = data.draw(st.integers(2, min(12, c.n_devices)))
    rows = [data.draw(st.lists(st.integers(0, c.n_devices - 1), min_size=k, max_size=k,
                               unique=True)) for _ in range(data.draw(st.integers(1, 4)))]
    rings = build_rings(c, rows)
    for i, row in enumerate(rows):
        ref = _reference_loads(c, row)
        mine = {int(link): float(w)
                for f, link, w in zip(rings.flow, rings.link, rings.weight, strict=True) if f == i}
        assert mine.keys() == ref.keys()
        for link, w in ref.items():
            assert mine[link] == pytest.approx(w)
        alone = min(c.capacity[link] / w for link, w in ref.items())
        assert rings.alone_gb_per_s[i] == pytest.approx(alone)
