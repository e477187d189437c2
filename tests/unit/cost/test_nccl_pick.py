"""NCCL's pick (``nccl_model.choose``) and what it prices: the algorithms enabled per group,
every algorithm's latency and bandwidth formula, worked by hand from tuning.cc with the
graph search's channels and per-channel rates. Figures: tuning.cc tables as copied in
``nccl_model`` (baseLat, hwLat, llMaxBw, per-channel caps, nvlsEfficiency)."""

from __future__ import annotations

import pytest

from simharness.topology import TopologyError
from simharness.topology.nccl_model import GroupShape, choose, tune

# one H100 node (NVSwitch: NVLS), 4 nodes x 8 with SHARP, 2 nodes x 8, 4 nodes x 1 GPU
NODE = GroupShape(n_ranks=8, n_nodes=1, arch="hopper", intra_gb_per_s=370.8,
                  ring_gb_per_s=370.8, nvls=True)
POD = GroupShape(n_ranks=32, n_nodes=4, arch="hopper", intra_gb_per_s=370.8,
                 ring_gb_per_s=370.0, net_gb_per_s=376.0, nvls=True, collnet=True)
TWO = GroupShape(n_ranks=16, n_nodes=2, arch="hopper", intra_gb_per_s=370.8,
                 ring_gb_per_s=370.0, net_gb_per_s=376.0, nvls=True)
ONE_PER_NODE = GroupShape(n_ranks=4, n_nodes=4, arch="hopper", intra_gb_per_s=370.8,
                          ring_gb_per_s=47.0, net_gb_per_s=47.0)


def algos(shape, coll, nccl="2.28"):
    return list(dict.fromkeys(a for a, _ in tune(shape, coll, nccl=nccl).entries))


@pytest.mark.parametrize("nccl", ["2.23", "2.28"])
def test_the_algorithms_nccl_enables(nccl):
    # one node: NVLS for every collective, Tree for all-reduce only
    assert algos(NODE, "all_reduce", nccl) == ["ring", "tree", "nvls"]
    assert algos(NODE, "all_gather", nccl) == ["ring", "nvls"]
    assert algos(NODE, "reduce_scatter", nccl) == ["ring", "nvls"]
    # across nodes with SHARP: CollNet chain and direct, NVLSTree, and NVLS (over CollNet)
    assert algos(POD, "all_reduce", nccl) == ["ring", "tree", "collnet_chain",
                                              "collnet_direct", "nvls_tree", "nvls"]
    assert algos(POD, "all_gather", nccl) == ["ring"]  # CollNet AG/RS: not modelled
    # across nodes without SHARP: no NVLS, NVLSTree for all-reduce
    assert algos(TWO, "all_reduce", nccl) == ["ring", "tree", "nvls_tree"]
    assert algos(TWO, "reduce_scatter", nccl) == ["ring"]
    # one GPU per node: PAT for all-gather and reduce-scatter
    assert algos(ONE_PER_NODE, "all_gather", nccl) == ["ring", "pat"]
    assert algos(ONE_PER_NODE, "reduce_scatter", nccl) == ["ring", "pat"]
    assert algos(ONE_PER_NODE, "all_reduce", nccl) == ["ring", "tree"]
    # every algorithm but NVLS/CollNet/PAT has the three protocols
    assert [p for a, p in tune(NODE, "all_reduce", nccl=nccl).entries] == [
        "ll", "ll128", "simple", "ll", "ll128", "simple", "simple"]


def test_latencies_of_every_algorithm():
    lat = {k: v[0] for k, v in tune(POD, "all_reduce").entries.items()}
    # ppn 8, 4 nodes: collnet_direct 2 x (min(1, 7) x 3.7 + 7 x 0.4) + net 31
    assert lat[("collnet_direct", "simple")] == pytest.approx(2 * (3.7 + 7 * 0.4) + 31.0)
    assert lat[("collnet_chain", "simple")] == pytest.approx(2 * 7 * 2.8 + 30.0)
    assert lat[("nvls", "simple")] == pytest.approx(25.0 + 18.0)        # + net across nodes
    assert lat[("nvls_tree", "simple")] == pytest.approx(25.0 + 2 * 2 * 14.0)
    assert lat[("tree", "ll")] == pytest.approx(6.8 + 2 * (7 * 0.6 + 2 * 5.0))
    assert lat[("tree", "ll128")] == pytest.approx(14.0 + 2 * (7 * 1.25 + 2 * 8.5))
    # ring: 62 steps, 6 over the network; the NVLink step is at least the net overhead
    # (1 us; x3 for Simple)
    assert lat[("ring", "ll")] == pytest.approx(6.6 + 56 * 1.0 + 6 * 2.7)
    assert lat[("ring", "ll128")] == pytest.approx(14.0 + 56 * 1.9 + 6 * 4.0)
    assert lat[("ring", "simple")] == pytest.approx(8.4 + 56 * 3.4 + 6 * 14.0)
    one = {k: v[0] for k, v in tune(NODE, "all_reduce").entries.items()}
    assert one[("nvls", "simple")] == pytest.approx(25.0)              # no network
    assert one[("ring", "ll")] == pytest.approx(6.6 + 14 * 0.6)       # no overhead floor
    # one GPU per node: the network latency is Tree's (hwLat[NET][Tree]) for the ring too
    ag = {k: v[0] for k, v in tune(ONE_PER_NODE, "all_gather").entries.items()}
    assert ag[("ring", "ll")] == pytest.approx(6.6 + 3 * 5.0)
    assert ag[("ring", "ll128")] == pytest.approx(14.0 + 3 * 8.5)
    assert ag[("pat", "simple")] == pytest.approx(8.0 + 2 * 14.0 / 3.5 + 4 * 2.8)
    two = {k: v[0] for k, v in tune(TWO, "all_reduce").entries.items()}
    assert two[("tree", "simple")] == pytest.approx(8.4 + 2 * (7 * 4.0 + 1 * 14.0))


def test_bandwidths_on_one_node():
    # graphs: ring/tree 12 channels x 30 GB/s, NVLS 8 heads at 40 (NVLink) / 60
    bw = {k: v[1] for k, v in tune(NODE, "all_gather").entries.items()}
    assert bw[("ring", "simple")] == pytest.approx(12 * 30.0 * 8 / 7)
    assert bw[("ring", "ll")] == pytest.approx(141.0 * 8 / 7)           # llMaxBw Hopper
    assert bw[("ring", "ll128")] == pytest.approx(12 * 30.0 * 0.92 * 8 / 7)
    # 2.28 NVLS all-gather: 40 x 0.85 x 7/8 x (ppn-1)/ppn, no bus -> algorithm conversion
    assert bw[("nvls", "simple")] == pytest.approx(8 * 40 * 0.85 * 7 / 8 * 7 / 8)
    old = {k: v[1] for k, v in tune(NODE, "all_gather", nccl="2.23").entries.items()}
    assert old[("nvls", "simple")] == pytest.approx(8 * 40.0)          # min(bwIntra, bwInter)
    # the ring figure is capped by the links (ring_gb_per_s), then shared
    slow = GroupShape(n_ranks=8, n_nodes=1, arch="hopper", intra_gb_per_s=370.8,
                      ring_gb_per_s=100.0, nvls=True, share=0.5)
    bw = {k: v[1] for k, v in tune(slow, "all_gather").entries.items()}
    assert bw[("ring", "simple")] == pytest.approx(min(360 * 0.5, 100.0) * 8 / 7)
    assert bw[("nvls", "simple")] == pytest.approx(8 * 40 * 0.85 * 7 / 8 * 7 / 8 * 0.5)


def test_bandwidths_across_nodes():
    # 4 nodes: 8 channels at bwInter 48 GB/s (bwIntra for CollNet); tree pattern TREE: x0.85
    bw = {k: v[1] for k, v in tune(POD, "all_reduce").entries.items()}
    assert bw[("ring", "simple")] == pytest.approx(min(8 * 48.0, 370.0) * 32 / 62)
    assert bw[("ring", "ll")] == pytest.approx(20.4 * 32 / 62)            # llMaxBw Intel N4
    assert bw[("ring", "ll128")] == pytest.approx(min(370.0 * 0.92, 8 * 36.7) * 32 / 62)
    tree = min(8 * 48.0 * 0.92, 8 * 36.0)                              # perChMaxTreeBw N4
    assert bw[("tree", "simple")] == pytest.approx(tree * 0.85 * 0.5)
    assert bw[("tree", "ll")] == pytest.approx(min(tree / 3.8, 20.4) * 0.85 * 0.5)
    assert bw[("tree", "ll128")] == pytest.approx(
        min(tree * 120 / 128, 8 * 29.0) * 0.85 * 0.5)
    # CollNet direct: factor ppn / channels = 1, x0.85 on SM90; chain: no factor
    assert bw[("collnet_direct", "simple")] == pytest.approx(8 * 48.0 * 0.85 * 0.5)
    assert bw[("collnet_chain", "simple")] == pytest.approx(8 * 48.0 * 0.5)
    # NVLSTree 2.28: min(40 x 0.85 x 7/8 x 2, bwInter 48) capped at 45.5 per channel
    assert bw[("nvls_tree", "simple")] == pytest.approx(8 * 45.5 * 32 / 62)
    assert bw[("nvls", "simple")] == pytest.approx(8 * min(40 * 0.85 * 7 / 8 * 2, 48.0) * 32 / 62)
    old = {k: v[1] for k, v in tune(POD, "all_reduce", nccl="2.23").entries.items()}
    assert old[("nvls_tree", "simple")] == pytest.approx(8 * 24.0 * 5 / 6)   # inter / 2, > 2 nodes
    assert old[("nvls", "simple")] == pytest.approx(8 * 40.0 * 5 / 6)
    two = {k: v[1] for k, v in tune(TWO, "all_reduce").entries.items()}
    # two nodes: NVLSTree's network figure doubles; bwIntra for the rings
    assert two[("nvls_tree", "simple")] == pytest.approx(
        8 * min(40 * 0.85 * 7 / 8 * 2, 96.0, 57.7) * 16 / 30)
    old2 = {k: v[1] for k, v in tune(TWO, "all_reduce", nccl="2.23").entries.items()}
    assert old2[("nvls_tree", "simple")] == pytest.approx(8 * 40.0 * 5 / 6)


def test_the_pick_is_the_fastest_of_the_allowed_options():
    for size in (1 << 10, 1 << 20, 1 << 26, 1 << 33):
        table = tune(POD, "all_reduce")
        every = table.all_estimates(size)
        assert [e.nccl_time_us for e in every] == sorted(e.nccl_time_us for e in every)
        best = choose(POD, "all_reduce", size)
        assert (best.algo, best.proto) == (every[0].algo, every[0].proto)
        ring = choose(POD, "all_reduce", size, algo="Ring")
        assert ring.algo == "ring" and ring.nccl_time_us == min(
            e.nccl_time_us for e in every if e.algo == "ring")
        simple = choose(POD, "all_reduce", size, proto="SIMPLE")
        assert simple.proto == "simple" and simple.nccl_time_us == min(
            e.nccl_time_us for e in every if e.proto == "simple")
        both = choose(POD, "all_reduce", size, algo="tree", proto="ll128")
        assert (both.algo, both.proto, both.size_bytes) == ("tree", "ll128", size)
    assert choose(POD, "all_reduce", 1 << 10).pick != choose(POD, "all_reduce", 1 << 33).pick
    # the 2.23 release is priced when asked for (its NVLS all-gather has no efficiency factor)
    old = choose(NODE, "all_gather", 1 << 30, algo="nvls", nccl="2.23")
    assert old.algbw_gb_per_s == pytest.approx(8 * 40.0)
    assert choose(NODE, "all_gather", 1 << 30, algo="nvls").algbw_gb_per_s == pytest.approx(
        8 * 40 * 0.85 * 7 / 8 * 7 / 8)


def test_a_combination_nccl_would_not_enable_is_named():
    with pytest.raises(TopologyError) as exc:
        choose(NODE, "allgather", 1 << 20, algo="tree")
    assert str(exc.value) == (
        "all_gather with algorithm tree and protocol any is not available for 8 ranks on 1 "
        "node(s) (8 per node), hopper, NVLink 370.8 GB/s, ring 370.8 GB/s, net 0.0 GB/s/rank, "
        "NVLS (NCCL 2.28); NCCL would enable: ring/ll, ring/ll128, ring/simple, nvls/simple")
    with pytest.raises(TopologyError) as exc:
        choose(NODE, "all_gather", 1 << 20, algo="nvls", proto="ll", nccl="2.23")
    assert str(exc.value).startswith("all_gather with algorithm nvls and protocol ll is not "
                                     "available for 8 ranks on 1 node(s)")
    assert "(NCCL 2.23)" in str(exc.value)
    with pytest.raises(TopologyError, match="with algorithm any and protocol ll128 is not"):
        choose(GroupShape(n_ranks=8, n_nodes=1, arch="blackwell", intra_gb_per_s=740.0,
                          ring_gb_per_s=740.0), "all_gather", 1 << 20, proto="ll128",
               nccl="2.23")   # 2.23 has no LL128 on Blackwell


def test_collnet_direct_with_fewer_heads_than_gpus_and_blackwell_under_223():
    from simharness.topology.nccl_graph import NodeView

    # 8 GPUs, 4 NICs per node: 4 CollNet Direct heads at 48 GB/s; factor ppn / heads = 2,
    # less half its excess (tuning.cc): 1.5
    node = NodeView(arch="hopper", ppn=8, nvlink_gb_per_s=370.8, nics=4, gpus_per_nic=2)
    s = GroupShape(n_ranks=32, n_nodes=4, arch="hopper", intra_gb_per_s=370.8,
                   ring_gb_per_s=370.0, net_gb_per_s=188.0, collnet=True, nodes=(node,))
    assert tune(s, "all_reduce").entries[("collnet_direct", "simple")][1] == pytest.approx(
        4 * 48.0 / 1.5 * 0.85 * 0.5)
    # 2.23 has no Blackwell row in llMaxBw: Blackwell takes Hopper's (141, not 282)
    b = GroupShape(n_ranks=8, n_nodes=1, arch="blackwell", intra_gb_per_s=740.0,
                   ring_gb_per_s=740.0)
    assert tune(b, "all_gather", nccl="2.23").entries[("ring", "ll")][1] == pytest.approx(
        141.0 * 8 / 7)
    assert tune(b, "all_gather").entries[("ring", "ll")][1] == pytest.approx(282.0 * 8 / 7)


def _g(n, nodes, **kw):
    base = dict(n_ranks=n, n_nodes=nodes, arch="hopper", intra_gb_per_s=370.8,
                ring_gb_per_s=47.0, net_gb_per_s=47.0)
    return GroupShape(**{**base, **kw})


def test_few_nodes_and_one_gpu_per_node():
    # tree graph 2 channels, bwIntra 48 / bwInter 24: up to 2 nodes NCCL prices bwIntra
    # (tuning.cc), from 3 bwInter; perChMaxTreeBw N2 41.4, N4 36.0; pattern TREE x0.85
    two, three = _g(2, 2), _g(3, 3)
    assert tune(two, "all_reduce").entries[("tree", "simple")][1] == pytest.approx(
        min(2 * 48 * 0.92, 2 * 41.4) * 0.85 * 0.5)
    assert tune(three, "all_reduce").entries[("tree", "simple")][1] == pytest.approx(
        min(2 * 24 * 0.92, 2 * 36.0) * 0.85 * 0.5)
    assert algos(two, "all_gather") == ["ring", "pat"]      # PAT from 2 nodes of 1 GPU
    # CollNet with one GPU per node: NET latency of Tree (ppn 1), no NVLink part;
    # Chain priced at bwIntra 48 (CollNet always), Direct 1 head: factor 1, x0.85
    c = tune(_g(4, 4, collnet=True), "all_reduce").entries
    assert c[("collnet_chain", "simple")] == pytest.approx((14.0, 2 * 48.0 * 0.5))
    assert c[("collnet_direct", "simple")] == pytest.approx((14.0, 48.0 * 0.85 * 0.5))
    # two GPUs per node: one NVLink hop for Direct
    c = tune(_g(8, 4, collnet=True), "all_reduce").entries
    assert c[("collnet_direct", "simple")][0] == pytest.approx(2 * (3.7 + 0.4) + 31.0)


def test_two_nodes_with_sharp_and_collnet_on_one_node():
    s = GroupShape(n_ranks=16, n_nodes=2, arch="hopper", intra_gb_per_s=370.8,
                   ring_gb_per_s=370.0, net_gb_per_s=376.0, nvls=True, collnet=True)
    assert algos(s, "all_reduce") == ["ring", "tree", "collnet_chain", "collnet_direct",
                                      "nvls_tree", "nvls"]
    lat = {k: v[0] for k, v in tune(s, "all_reduce").entries.items()}
    assert lat[("nvls", "simple")] == pytest.approx(25.0 + 18.0)     # 2 nodes: + network
    # ring across 2 nodes: 30 steps, 2 over the network; the NVLink step floored at 1 us
    assert lat[("ring", "ll")] == pytest.approx(6.6 + 28 * 1.0 + 2 * 2.7)
    # SHARP asked for on one node: no network, no CollNet
    one = GroupShape(n_ranks=8, n_nodes=1, arch="hopper", intra_gb_per_s=370.8,
                     ring_gb_per_s=370.8, nvls=True, collnet=True)
    assert algos(one, "all_reduce") == ["ring", "tree", "nvls"]


def test_reduce_scatter_and_the_share():
    # NVLS reduce-scatter: no bus -> algorithm conversion, like the all-gather
    rs = tune(NODE, "reduce_scatter").entries
    assert rs[("nvls", "simple")][1] == pytest.approx(8 * 40 * 0.85 * 7 / 8 * 7 / 8)
    # the ring's share of the links applies below the link cap too
    half = GroupShape(n_ranks=8, n_nodes=1, arch="hopper", intra_gb_per_s=370.8,
                      ring_gb_per_s=370.8, nvls=True, share=0.5)
    assert tune(half, "all_gather").entries[("ring", "simple")][1] == pytest.approx(
        12 * 30.0 * 0.5 * 8 / 7)
