"""NCCL's graph search and what it feeds: channels, tree graph, versions, memory.

Expected figures are worked out by hand from NCCL's source (search.cc, connect.cc,
tuning.cc at v2.23.4-1 / v2.28.3-1), not read back from the code.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from simharness._cli.main import main
from simharness.topology import TopologyError, load_cluster
from simharness.topology.comm_memory import CommMemoryInputs, comm_memory, pat_peers
from simharness.topology.cost import build_rings, predict, shape_of
from simharness.topology.nccl_graph import (
    PATH_PXB,
    TREE,
    NodeView,
    plan_channels,
    search,
)
from simharness.topology.nccl_model import GroupShape, choose, tune


def _shape(topology: str, nodes: int, devices, **kw) -> GroupShape:
    c = load_cluster(topology, nodes)
    return shape_of(c, build_rings(c, [list(devices)]), 0, **kw)


H100 = NodeView(arch="hopper", ppn=8, nvlink_gb_per_s=370.8, nvls=True)


def test_one_h100_node_has_24_channels():
    """Ring search: 6 x 60 (360 < 370.8), dup -> 12 x 30; connect.cc doubles -> 24."""
    g = _shape("dgx-h100", 1, range(8)).graphs()
    assert (g.ring.n_channels, g.ring.bw_intra, g.n_channels) == (12, 30.0, 24)
    assert choose(_shape("dgx-h100", 1, range(8)), "all_gather", 1 << 30).n_channels == 24


@pytest.mark.parametrize("nodes", [2, 4, 16])
def test_multi_node_groups_of_8_per_node_have_16_channels(nodes):
    """8 NICs x 1 channel at 48 GB/s (crossNic 2, 8 x 48 >= 370.8: done), no dup at
    bw < 50 with > 4 channels, connect.cc doubles -> 16."""
    g = _shape("dgx-h100-superpod", nodes, range(8 * nodes)).graphs()
    assert (g.ring.n_channels, g.ring.bw_inter, g.ring.cross_nic) == (8, 48.0, 2)
    assert g.n_channels == 16


def test_dp_group_with_one_gpu_per_node_has_4_channels():
    """One GPU, its NIC and PCIe at 48: 1 x 48, dup -> 2 x 24, connect.cc -> 4; the
    '4 channels per search channel' rule needs bwIntra > 45 and does not fire."""
    g = _shape("dgx-h100-superpod", 16, range(0, 128, 8)).graphs()
    assert (g.ring.n_channels, g.ring.bw_inter, g.n_channels) == (2, 24.0, 4)


def test_plan_channels_shrink_for_small_messages():
    """topoGetAlgoInfo: drop a channel while nBytes < nc x 512 threads x 64 (Simple)."""
    g = search(H100, 1)
    assert plan_channels(g, "ring", "simple", 1 << 30, 512, 8) == 24
    assert plan_channels(g, "ring", "simple", 256 * 1024, 512, 8) == 8   # stops at 8 x 32 KiB
    assert plan_channels(g, "ring", "simple", 200 * 1024, 512, 8) == 6
    assert plan_channels(g, "nvls", "simple", 1 << 30, 512, 8) == 16


def test_tree_on_two_nodes_uses_the_tree_graph_not_full_nvlink():
    """DP=2, one GPU per node: tree graph 2 ch, bwIntra 48 (pass 2 raises it up to 2 x
    bwInter), pattern TREE; 2 x 48 x 0.92 capped at 2 x 41.4, x0.85, /2 = 35.2 GB/s,
    below Ring's 2 x 24 = 48 (capped by the link model's 47): Ring wins at every size."""
    s = _shape("dgx-h100-superpod", 2, [0, 8])
    g = s.graphs()
    assert (g.tree.n_channels, g.tree.bw_intra, g.tree.bw_inter, g.tree.pattern) == \
        (2, 48.0, 24.0, TREE)
    bw = tune(s, "all_reduce").entries[("tree", "simple")][1]
    assert bw == pytest.approx(min(2 * 48 * 0.92, 2 * 41.4) * 0.85 / 2)
    for size in (512 << 10, 64 << 20, 8 << 30):
        assert choose(s, "all_reduce", size).algo == "ring"


def test_tree_pattern_factor_on_multi_node_hopper():
    """Balanced tree fails at PXB with one NIC per GPU; SM90 tries the simpler TREE
    pattern, which tuning.cc:309 discounts by 0.85 (> 2 nodes: bwInter 48, cap 36)."""
    s = _shape("dgx-h100-superpod", 4, range(32))
    g = s.graphs()
    assert g.tree.pattern == TREE and g.tree.type_inter == PATH_PXB
    bw = tune(s, "all_reduce").entries[("tree", "simple")][1]
    assert bw == pytest.approx(min(8 * 48 * 0.92, 8 * 36.0) * 0.85 / 2)


def test_versions_differ_where_the_tags_differ():
    node = _shape("dgx-h100", 1, range(8))
    new = tune(node, "all_reduce", nccl="2.28").entries[("nvls", "simple")][1]
    old = tune(node, "all_reduce", nccl="2.23").entries[("nvls", "simple")][1]
    assert new == pytest.approx(8 * 59.5 * 8 / 14) and old == pytest.approx(8 * 40 * 5 / 6)
    b200 = _shape("dgx-b200", 1, range(8))
    assert ("ring", "ll128") in tune(b200, "all_gather", nccl="2.28").entries
    assert ("ring", "ll128") not in tune(b200, "all_gather", nccl="2.23").entries
    # 2.28 Blackwell tree row (70.0 per channel on one node) vs Hopper's 38.7 in 2.23
    g = b200.graphs("2.28")
    t28 = tune(b200, "all_reduce", nccl="2.28").entries[("tree", "simple")][1]
    assert t28 == pytest.approx(min(g.tree.n_channels * g.tree.bw_intra * 0.92,
                                    g.tree.n_channels * 70.0) / 2)
    # NVLSTree cap (2.28 only): 2 nodes x 8 H100, bwInter 48 x 2, cap 57.7 per channel
    two = _shape("dgx-h100-superpod", 2, range(16))
    nv = two.graphs().nvls
    assert tune(two, "all_reduce").entries[("nvls_tree", "simple")][1] == pytest.approx(
        nv.n_channels * min(nv.bw_intra * 0.85 * 7 / 8 * 2, 96.0, 57.7) * 16 / 30)


def test_mnnvl_domain_gets_nvls_in_both_releases():
    s = _shape("gb200-nvl72", 18, range(72))
    for v in ("2.23", "2.28"):
        assert ("nvls", "simple") in tune(s, "all_reduce", nccl=v).entries


def test_unknown_version_is_a_typed_error_and_a_cli_error_line():
    with pytest.raises(TopologyError, match="unknown NCCL version '3.0'"):
        predict(load_cluster("dgx-h100"), range(8), "all_reduce", 1024, nccl="3.0")
    r = CliRunner().invoke(main, ["topology", "cost", "dgx-h100", "--nccl", "2.99"],
                           prog_name="simharness")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [
        "error: unknown NCCL version '2.99'; expected one of 2.23, 2.28 (give --nccl 2.23 "
        "or --nccl 2.28)"]


def test_memory_figures_from_the_source():
    """Per GPU: 8 x H100 ring 24 ch x (10 + 2 MiB) + 24 x 6 MiB of channel structures;
    8 per node on 4 nodes 16 ch x (7 x 12 + 20) / 8 MiB + 16 x 6; PAT on 16 nodes x 1 GPU:
    4 ch x 7 peers x 20 MiB + 4 x 6 (fixed 6.3 MB on top)."""
    mib = 1 << 20
    fixed = CommMemoryInputs().fixed_mb
    one = comm_memory(CommMemoryInputs(algos=("ring",)), shape=_shape("dgx-h100", 1, range(8)))
    assert one.total_mb == pytest.approx((24 * 12 + 24 * 6) * mib / 1e6 + fixed)
    multi = comm_memory(CommMemoryInputs(algos=("ring",)),
                        shape=_shape("dgx-h100-superpod", 4, range(32)))
    assert multi.total_mb == pytest.approx((16 * 13 + 16 * 6) * mib / 1e6 + fixed)
    pat = comm_memory(CommMemoryInputs(algos=("pat",)),
                      shape=_shape("dgx-h100-superpod", 16, range(0, 128, 8)))
    assert pat_peers(16) == 7
    assert pat.total_mb == pytest.approx((4 * 7 * 20 + 4 * 6) * mib / 1e6 + fixed)
    nvls = comm_memory(CommMemoryInputs(algos=("nvls",)), shape=_shape("dgx-h100", 1, range(8)))
    assert nvls.parts["nvls"] == (16 * 2 * 8 + 2) * mib   # 16 channels x 2 x 1 MiB x 8 heads
    # the rough figures: ~500, ~350, ~600 MB
    assert 420 < one.total_mb < 520 and 300 < multi.total_mb < 380 and 560 < pat.total_mb < 660


def test_explain_lines_read_like_nccl_debug():
    """GRAPH lines in ncclTopoPrintGraph's words, the channel line of init.cc, and the
    TUNING table in tuning.cc's layout (blocks of three algorithms, lat/bw per protocol)."""
    from simharness.topology.nccl_model import debug_lines

    lines = debug_lines(_shape("dgx-h100", 1, range(8)), "all_reduce")
    assert ("NCCL INFO Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type "
            "NVL/PIX, sameChannels 1") in lines
    assert "NCCL INFO 24 coll channels, 24 collnet channels, 16 nvls channels" in lines
    rows = [line for line in lines if line.startswith("NCCL INFO     AllReduce |")]
    assert len(rows) == 3 and rows[0].count("/") == 9
    assert "    25.0/ 272.0 |" in rows[1]          # NVLS Simple, second block


def test_topology_cost_columns_are_nccl_tests_and_reach_8gb():
    """algbw is nccl-tests' size / time, busbw = algbw x bus factor, and the
    default sizes reach the 8 GB the help promises; --nccl picks the release."""
    import json

    r = CliRunner().invoke(main, ["topology", "cost", "dgx-h100", "-f", "json", "--nccl",
                                  "2.23"], prog_name="simharness")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert rows[-1]["size"] == 8 * 2 ** 30 and {row["nccl"] for row in rows} == {"2.23"}
    for row in rows:
        assert row["algbw_gb_per_s"] == pytest.approx(row["size"] / (row["time_us"] * 1e3))
        assert row["busbw_gb_per_s"] == pytest.approx(row["algbw_gb_per_s"] * 2 * 7 / 8)
    table = CliRunner().invoke(main, ["topology", "cost", "dgx-h100", "-q"],
                               prog_name="simharness").stdout
    assert table.splitlines()[0].split()[:4] == ["size(B)", "time(us)", "algbw(GB/s)",
                                                 "busbw(GB/s)"]


def test_launch_mode_of_a_calibration_point():
    from simharness.topology.calibration import _point
    from simharness.topology.nccl_model import LAUNCH_US_SINGLE_PER_GPU, launch_overhead_us

    # back-to-back calls: the launch shows only where it outlasts the GPU time
    period = 8 * LAUNCH_US_SINGLE_PER_GPU
    assert launch_overhead_us("single", 8) == pytest.approx(period)
    assert launch_overhead_us("single", 8, gpu_time_us=25.0) == pytest.approx(period - 25.0)
    assert launch_overhead_us("single", 8, gpu_time_us=100.0) == 0.0
    assert launch_overhead_us("per-gpu", 8, gpu_time_us=10.0) == 0.0
    base = dict(id="x", source="s", collective="all_reduce", size=1024, topology="dgx-h100",
                nodes=1, ranks_per_node=8, split="heldout", time_us=20.0)
    assert _point(dict(base), "f").launch_mode == "per-gpu"
    with pytest.raises(TopologyError, match="launch must be per-gpu or single, got 'mpi'"):
        _point(dict(base, launch="mpi"), "f")
    with pytest.raises(TopologyError, match="unknown launch mode 'g8'"):
        launch_overhead_us("g8", 8)


def test_node_views_per_domain_at_scale(tmp_path):
    """node_views counts, per NVLink domain, the group's GPUs, distinct NICs and the fewest
    GPUs on one NIC; checked against a per-domain loop on uneven groups."""
    import numpy as np

    from simharness.topology.cost import node_views
    from simharness.topology.loader import topology_dir

    def by_loop(c, dev):
        out = []
        doms = c.domain_of(dev)
        for d in np.unique(doms):
            members = dev[doms == d]
            _, counts = np.unique(c.nic_of(members), return_counts=True)
            multi = np.unique(doms).size > 1
            out.append((members.size, counts.size if multi else 0,
                        int(counts.min()) if multi else 1))
        return list(dict.fromkeys(out))

    rng = np.random.default_rng(7)
    # a node with 4 NICs for 8 GPUs: two GPUs share a NIC
    text = (topology_dir() / "dgx-h100-superpod.toml").read_text()
    assert "nics_per_node = 8" in text
    four = tmp_path / "four-nics.toml"
    four.write_text(text.replace("nics_per_node = 8", "nics_per_node = 4"))
    for topo, nodes in (("dgx-h100-superpod", 64), ("gb200-nvl72-superpod", 36), (four, 16)):
        c = load_cluster(topo, nodes)
        cases = [np.arange(c.n_devices), np.arange(0, c.n_devices, 8), np.arange(3, 40, 3),
                 rng.choice(c.n_devices, size=50, replace=False), np.array([5])]
        for dev in cases:
            got = [(v.ppn, v.nics, v.gpus_per_nic) for v in node_views(c, dev)]
            assert got == by_loop(c, np.asarray(dev)), (topo, dev[:8])
    c = load_cluster(four, 2)
    assert [(v.ppn, v.nics, v.gpus_per_nic) for v in node_views(c, [0, 1, 2, 8])] == [
        (3, 2, 1), (1, 1, 1)]
    assert [(v.ppn, v.nics, v.gpus_per_nic) for v in node_views(c, range(16))] == [(8, 4, 2)]
    # one domain: no NICs (NCCL removes them); uneven: ppn 2 and 1 listed once each
    c = load_cluster("dgx-h100-superpod", 4)
    assert [(v.ppn, v.nics) for v in node_views(c, [0, 1])] == [(2, 0)]
    assert [(v.ppn, v.nics, v.gpus_per_nic) for v in node_views(c, [0, 1, 8, 16, 17])] == [
        (2, 2, 1), (1, 1, 1)]
