"""NCCL's tuning model: formulas checked by hand from tuning.cc, picks, bad input."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simharness.topology import TopologyError, load_cluster
from simharness.topology.cost import predict
from simharness.topology.nccl_model import ALGOS, GroupShape, bus_factor, choose, tune

H100_NODE = GroupShape(n_ranks=8, n_nodes=1, arch="hopper", intra_gb_per_s=370.8,
                       ring_gb_per_s=370.8, nvls=True)


def test_ring_latency_splits_intra_and_inter_node_steps():
    """Ring/Simple all-reduce on 4 nodes x 8: 62 steps, 6 of them over the network."""
    s = GroupShape(n_ranks=32, n_nodes=4, arch="hopper", intra_gb_per_s=370.8,
                   ring_gb_per_s=370.0, net_gb_per_s=376.0)
    lat, bw = tune(s, "all_reduce").entries[("ring", "simple")]
    # base 8.4 + (62 - 6) x max(3.4, 3 x 1.0 net overhead) + 6 x 14 (net Ring/Simple)
    assert lat == pytest.approx(8.4 + 56 * 3.4 + 6 * 14.0)
    assert bw == pytest.approx(370.0 * 32 / 62)
    # the slowest hop is not charged on every step (the old model's mistake)
    assert lat < 8.4 + 62 * 14.0


def test_tree_and_nvls_tree_latency_are_log_scaled():
    s = GroupShape(n_ranks=128, n_nodes=16, arch="hopper", intra_gb_per_s=370.8,
                   ring_gb_per_s=370.0, net_gb_per_s=376.0, nvls=True)
    t = tune(s, "all_reduce").entries
    assert t[("tree", "ll")][0] == pytest.approx(6.8 + 2 * (7 * 0.6 + 4 * 5.0))
    assert t[("nvls_tree", "simple")][0] == pytest.approx(25.0 + 2 * 4 * 14.0)
    assert ("nvls", "simple") not in t            # NVLS across nodes needs CollNet


def test_protocol_factors():
    """Bandwidths from the graph search: ring 12 x 30, tree 12 x 30, NVLS 8 heads at 40/60."""
    t = tune(H100_NODE, "all_reduce").entries
    ring = 12 * 30.0 * 8 / 14
    assert t[("ring", "ll")][1] == pytest.approx(141.0 * 8 / 14)          # llMaxBw Hopper N1
    assert t[("ring", "ll128")][1] == pytest.approx(0.92 * ring)
    assert t[("ring", "simple")][1] == pytest.approx(ring)
    # 2.28: bwIntra x nvlsEfficiency x (nCh-1)/nCh x 2 for all-reduce, capped by bwInter
    assert t[("nvls", "simple")][1] == pytest.approx(8 * min(40 * 0.85 * 7 / 8 * 2, 60) * 8 / 14)
    assert t[("tree", "simple")][1] == pytest.approx(12 * 30.0 * 0.92 * 0.5)
    old = tune(H100_NODE, "all_reduce", nccl="2.23").entries
    assert old[("nvls", "simple")][1] == pytest.approx(8 * 40.0 * 5 / 6)  # no efficiency factor


def test_pat_only_with_one_gpu_per_node():
    one = GroupShape(n_ranks=16, n_nodes=16, arch="hopper", intra_gb_per_s=370.8,
                     ring_gb_per_s=47.0, net_gb_per_s=47.0)
    lat, bw = tune(one, "all_gather").entries[("pat", "simple")]
    # PAT prices the tree graph: 2 channels x bwInter 24 (> 2 nodes), x0.75 from 2.24
    assert lat == pytest.approx(8 + 4 * 14.0 / 3.5 + 16 * 2.8) and bw == pytest.approx(48 * .75)
    assert tune(one, "all_gather", nccl="2.23").entries[("pat", "simple")][1] == \
        pytest.approx(48 * .85)
    eight = GroupShape(n_ranks=128, n_nodes=16, arch="hopper", intra_gb_per_s=370.8,
                       ring_gb_per_s=370.0, net_gb_per_s=376.0)
    assert ("pat", "simple") not in tune(eight, "all_gather").entries


def test_nccl_picks_ll_for_small_and_nvls_for_large_on_one_h100_node():
    assert choose(H100_NODE, "all_reduce", 1024).pick == "ring/ll"
    assert choose(H100_NODE, "all_reduce", 8 << 30).pick == "nvls/simple"
    assert choose(H100_NODE, "all_gather", 8 << 30).pick == "ring/simple"
    ampere = GroupShape(n_ranks=8, n_nodes=1, arch="ampere", intra_gb_per_s=240.0,
                        ring_gb_per_s=240.0, nvls=True)
    assert "nvls" not in {a for a, _ in tune(ampere, "all_reduce").entries}


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 1 << 34), n=st.sampled_from([2, 8, 16, 64, 256]),
       coll=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]))
def test_the_pick_is_the_fastest_enabled_option(size, n, coll):
    c = load_cluster("dgx-h100-superpod", max(1, n // 8))
    best = predict(c, range(n), coll, size)
    for algo in ALGOS:
        try:
            other = predict(c, range(n), coll, size, algo=algo)
        except TopologyError:
            continue
        assert best.nccl_time_us <= other.nccl_time_us + 1e-9
    assert 0 < best.busbw_gb_per_s <= 600   # never above NVLS's H100 figure by much
    assert math.isclose(best.busbw_gb_per_s,
                        size / (best.time_us * 1e3) * bus_factor(coll, n))


@pytest.mark.parametrize("kw, words", [
    (dict(algo="ringo"), "unknown algorithm 'ringo'; expected one of tree, ring"),
    (dict(proto="LL256"), "unknown protocol 'LL256'"),
    (dict(algo="pat"), "not available for 8 ranks on 1 node"),
])
def test_bad_algorithm_or_protocol(kw, words):
    with pytest.raises(TopologyError, match=words):
        predict(load_cluster("dgx-h100"), range(8), "all_reduce", 1 << 20, **kw)


@pytest.mark.parametrize("size", [-1, float("nan"), float("inf"), 2 ** 41, "1G", True])
def test_sizes_out_of_range(size):
    with pytest.raises(TopologyError, match="message size .* is out of range"):
        predict(load_cluster("dgx-h100"), range(8), "all_reduce", size)


def test_unknown_collective_and_collnet_without_sharp():
    with pytest.raises(TopologyError, match="unknown collective 'bcast'"):
        predict(load_cluster("dgx-h100"), range(8), "bcast", 8)
    with pytest.raises(TopologyError, match="has no SHARP switches"):
        predict(load_cluster("dgx-h100"), range(8), "all_reduce", 8, collnet=True)
    e = predict(load_cluster("dgx-h100-superpod", 4), range(32), "all_reduce", 8,
                collnet=True)
    assert e.time_us > 0


def test_gloo_topology_is_a_plain_ring_with_file_latencies():
    c = load_cluster("cpu-loopback")
    e = predict(c, range(4), "all_gather", 4e6)
    assert e.pick == "ring/simple"
    assert e.latency_us == pytest.approx(30 + 3 * 15)


def test_estimate_reports_channels_and_version_keyword():
    """The estimate carries the plan's channel count; ``nccl`` names one release."""
    e = choose(H100_NODE, "all_gather", 1 << 30, nccl="2.23")
    assert e.n_channels >= 1
    assert tune(H100_NODE, "all_reduce", nccl="v2.28.3-1").nccl == "2.28"
    with pytest.raises(TopologyError, match="unknown NCCL version '2.99'"):
        choose(H100_NODE, "all_gather", 1 << 20, nccl="2.99")
