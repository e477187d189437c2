"""Placement of real layouts on clusters: known locality and the findings."""

from __future__ import annotations

import pytest

from simharness import ParallelismConfig, build_layout
from simharness.findings import Finding
from simharness.topology import TopologyError, load_cluster
from simharness.topology.locality import analyse, is_dp_kind, locality, topology_findings
from simharness.topology.placement import parse_hosts, place, place_layout, read_hosts


def layout(world, **sizes):
    return build_layout(ParallelismConfig(world_size=world, **sizes))


def rows_of(lay, cluster, **kw):
    return {r.kind: r for r in locality(lay, place_layout(lay, cluster, **kw))}


def codes(findings):
    return sorted({(f.code, f.severity, f.groups[0].split("[")[0]) for f in findings})


# ------------------------------------------------------------------ placement
def test_torchrun_order_fills_nodes_in_turn():
    c = load_cluster("dgx-h100-superpod", 4)
    p = place(c, 32)
    assert [c.device_name(d) for d in p.device_of([0, 7, 8, 31])] == [
        "node0/gpu0", "node0/gpu7", "node1/gpu0", "node3/gpu7"]


def test_megatron_rank_offset_keeps_torchrun_positions_and_first_device_moves_them():
    c = load_cluster("dgx-h100-superpod", 4)
    lay = build_layout(ParallelismConfig(world_size=16, tensor_model_parallel_size=8,
                                         rank_offset=16))
    p = place_layout(lay, c)
    assert c.device_name(p.device_of(16)) == "node2/gpu0"
    assert place_layout(lay, c, first_device=0).device_of(16) == 0
    with pytest.raises(TopologyError, match="rank 0 is outside the placed ranks 16..31"):
        p.device_of(0)
    with pytest.raises(TopologyError, match="use --nodes 5"):
        place_layout(lay, c, first_device=24)


def test_host_list_places_each_hosts_ranks_on_its_gpus_in_order():
    c = load_cluster("dgx-h100-superpod", 2)
    hosts = ["b"] * 4 + ["a"] * 4 + ["b"] * 4 + ["a"] * 4
    p = place(c, 16, hosts=hosts)
    assert p.devices.tolist() == [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15]
    assert place(c, 4, hosts=[1, 1, 0, 0]).devices.tolist() == [8, 9, 0, 1]  # numeric = node


@pytest.mark.parametrize("hosts, words", [
    (["a"] * 9 + ["b"] * 7, "host 'a' gets 9 ranks but a node"),
    (["a", "b", "c"] + ["a"] * 13, "uses 3 hosts"),
    (["a"] * 15, "names 15 ranks but the layout has 16"),
])
def test_bad_host_lists(hosts, words):
    c = load_cluster("dgx-h100-superpod", 2)
    with pytest.raises(TopologyError, match=words):
        place(c, 16, hosts=hosts)


def test_host_files(tmp_path):
    f = tmp_path / "hosts"
    f.write_text("# rank order\nnodeB slots=2\nnodeA\n\nnodeA # last\n")
    assert read_hosts(str(f)) == ["nodeB", "nodeB", "nodeA", "nodeA"]
    assert parse_hosts("x,y") == ["x", "y"]
    with pytest.raises(TopologyError, match="does not exist"):
        read_hosts(str(tmp_path / "missing"))
    with pytest.raises(TopologyError, match="cannot read host line"):
        parse_hosts("a b c")


def test_too_few_nodes_names_the_fix():
    with pytest.raises(TopologyError, match=r"has 16 GPUs; use --nodes 4"):
        place(load_cluster("dgx-h100-superpod", 2), 32)


# ------------------------------------------------------------------ locality
def test_tp8_on_8_gpu_nodes_stays_inside_nodes():
    r = rows_of(layout(64, tensor_model_parallel_size=8), load_cluster("dgx-h100-superpod", 8))
    tp, dp = r["tp"], r["dp"]
    assert (tp.groups, tp.in_board, tp.in_nvlink, tp.in_node, tp.network) == (8, 8, 8, 8, 0)
    assert tp.bottleneck == "nvlink" and tp.max_hop_links == 2
    # DP: one GPU per node, all on one rail, one leaf switch; NIC-bound
    assert (dp.groups, dp.in_node, dp.one_rail, dp.one_leaf, dp.network) == (8, 0, 8, 8, 8)
    assert dp.bottleneck == "nic" and dp.max_hop_links == 4 and dp.spine == 0


def test_tp16_leaves_the_node_and_is_an_error_naming_groups_and_devices():
    lay = layout(32, tensor_model_parallel_size=16)
    c = load_cluster("dgx-h100-superpod", 4)
    r = rows_of(lay, c)
    assert (r["tp"].in_node, r["tp"].network) == (0, 2)
    f = [x for x in topology_findings(lay, place_layout(lay, c)) if x.groups[0].startswith("tp[")]
    assert len(f) == 1 and isinstance(f[0], Finding)
    assert f[0].code == "topology-tp-nvlink" and f[0].severity == "error"
    assert f[0].groups == ("tp[0]", "tp[1]")
    assert "node0/gpu0" in f[0].message and "node2/gpu0" in f[0].message
    assert f[0].ranks[:3] == (0, 1, 2)


def test_tp_inside_a_72_gpu_nvlink_domain_crosses_nodes_without_error():
    lay = layout(72, tensor_model_parallel_size=8)
    c = load_cluster("gb200-nvl72")
    r = rows_of(lay, c)
    # 8 of 4-GPU trays: groups span 2 trays (nodes) but stay in the NVLink domain
    assert (r["tp"].in_node, r["tp"].in_nvlink, r["tp"].network) == (0, 9, 0)
    assert r["tp"].in_board == 0
    assert not [f for f in topology_findings(lay, place_layout(lay, c)) if f.severity == "error"]


def test_cp_and_ep_crossing_nodes_are_warnings_only_over_the_network():
    lay = layout(32, tensor_model_parallel_size=8, context_parallel_size=2,
                 expert_model_parallel_size=2)
    found = codes(topology_findings(lay, place_layout(lay, load_cluster("dgx-h100-superpod", 4))))
    assert ("topology-cp-nodes", "warning", "cp") in found
    assert ("topology-ep-nodes", "warning", "ep") in found
    assert all(sev != "error" for _, sev, _ in found)
    # EP 8 inside one node: no EP warning
    lay = layout(16, expert_model_parallel_size=8)
    found = codes(topology_findings(lay, place_layout(lay, load_cluster("dgx-h100-superpod", 2))))
    assert not [f for f in found if f[0] == "topology-ep-nodes"]


def test_dp_rings_that_cross_rails_needlessly_are_warnings():
    # tp=6 on 8-GPU nodes: DP peers land on different local GPUs, so on different rails.
    lay = layout(96, tensor_model_parallel_size=6)
    c = load_cluster("dgx-h100-superpod", 12)
    rows, findings = analyse(lay, place_layout(lay, c))
    rails = [f for f in findings if f.code == "topology-dp-rails"]
    assert {f.groups[0].split("[")[0] for f in rails} >= {"dp", "dp_cp"}
    assert all(f.severity == "warning" and "PXN" in f.message for f in rails)
    dp = {r.kind: r for r in rows}["dp"]
    # PXN moves cross-rail traffic over NVLink onto the destination's rail: no spine
    assert dp.one_rail == 0 and dp.spine == 0
    # tp=8: DP rings stay on their rails; no such warning
    lay = layout(96, tensor_model_parallel_size=8)
    assert not [f for f in topology_findings(lay, place_layout(lay, c))
                if f.code == "topology-dp-rails"]


def test_a_shuffled_host_list_makes_dp_cross_rails_and_tp_leave_the_node():
    lay = layout(16, tensor_model_parallel_size=8)
    c = load_cluster("dgx-h100-superpod", 2)
    assert not topology_findings(lay, place(c, 16, hosts=["n0"] * 8 + ["n1"] * 8))
    # rank 7 on n1: n1's GPUs go to ranks 7..14, so rank 8 sits on n1/gpu1, not gpu0
    hosts = ["n0"] * 7 + ["n1"] * 8 + ["n0"]
    p = place(c, 16, hosts=hosts)
    assert c.device_name(p.device_of(8)) == "node1/gpu1"
    found = {f.groups[0]: f for f in topology_findings(lay, p)}
    assert found["tp[0]"].code == "topology-tp-nvlink" and found["tp[0]"].severity == "error"
    assert found["dp[0]"].code == "topology-dp-rails"
    assert found["dp[0]"].message.startswith("dp: 8 of 8 groups cross rails")
    assert "dp[0] ranks [0, 8] on node0/gpu0, node1/gpu1" in found["dp[0]"].message


def test_gloo_twins_are_left_out_and_dp_kinds_are_recognised():
    lay = layout(16, tensor_model_parallel_size=2, create_all_gather_group=True)
    kinds = [r.kind for r in locality(lay, place_layout(lay, load_cluster("dgx-h100-superpod", 2)))]
    assert "dp_cp_ag" in kinds and not [k for k in kinds if k.endswith("_gloo")]
    assert [k for k in ("dp", "dp_cp", "dp_cp_ag", "ep_dp", "intra_dp_cp", "tp_dp", "tp_dp_cp",
                        "dp_gloo") if is_dp_kind(k)] == ["dp", "dp_cp", "dp_cp_ag", "ep_dp",
                                                         "intra_dp_cp"]


def test_concurrent_rates_charge_shared_links():
    # tp4 on 8-GPU nodes: a DP group has GPUs i and i+4 of every node, so its ring
    # stripes over those two NICs; the four DP rings use disjoint NICs: no sharing
    lay = layout(32, tensor_model_parallel_size=4)
    r = rows_of(lay, load_cluster("dgx-h100-superpod", 4))
    assert r["dp"].alone_gb_per_s == pytest.approx(2 * 47.0)
    assert r["dp"].concurrent_gb_per_s == pytest.approx(2 * 47.0)
    # the whole-world tp_dp group: NVLink-bound, striped over 8 NICs per node
    assert r["tp_dp"].bottleneck == "nvlink"
