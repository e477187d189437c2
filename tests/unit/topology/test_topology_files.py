"""Topology files: every shipped file loads, graphs have the known shapes,
malformed files fail with the file, the field and what was expected."""

from __future__ import annotations

import dataclasses
import re
import sys

import networkx as nx
import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport, a dependency there
    import tomli as tomllib

from support.paths import ROOT

from simharness.errors import SimharnessError
from simharness.topology import (
    TopologyError,
    list_topologies,
    load_cluster,
    load_graph,
    load_spec,
    topology_dir,
)

SHIPPED = list_topologies()
REQUIRED = {"dgx-h100", "dgx-h100-superpod", "dgx-h200-cluster", "hgx-a100-cluster",
            "gb200-nvl72", "gb200-nvl72-superpod", "cpu-loopback",
            # the fabrics users rent (issue 26)
            "aws-p5", "gcp-a3-ultra", "gcp-a4", "azure-nd-h100-v5", "azure-nd-h200-v5",
            "dgx-a100"}


def test_the_promised_topologies_ship():
    assert set(SHIPPED) >= REQUIRED
    assert topology_dir() == ROOT / "topologies"


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_topology_loads_and_builds_a_consistent_graph(name):
    spec = load_spec(name)
    assert spec.name == name  # the file's name field matches its file name
    cluster = load_cluster(spec)
    g = cluster.graph()
    kinds = [k for _, k in g.nodes(data="kind")]
    assert kinds.count("gpu") == cluster.n_devices == spec.default_nodes * spec.node.gpus
    assert kinds.count("nvswitch") == cluster.n_domains
    assert kinds.count("nic") == cluster.n_nics
    assert kinds.count("leaf") == cluster.n_leaves
    assert nx.is_connected(g)
    for _, _, e in g.edges(data=True):
        assert e["bandwidth_gb_per_s"] > 0 and 0 < e["efficiency"] <= 1
        assert e["capacity_gb_per_s"] == pytest.approx(e["bandwidth_gb_per_s"] * e["efficiency"])
        assert e["latency_us"] >= 0
    # Every directed link id appears exactly once in the graph.
    ids = sorted(i for _, _, e in g.edges(data=True) for i in e["links"])
    assert ids == list(range(cluster.n_links))


def test_32_dgx_nodes_have_256_gpus_8_rails_and_8_leaves():
    c = load_cluster("dgx-h100-superpod", nodes=32)
    g = c.graph()
    assert (c.n_devices, c.n_rails, c.n_leaves, c.n_domains) == (256, 8, 8, 32)
    rails = {d["rail"] for _, d in g.nodes(data=True) if d["kind"] == "nic"}
    assert rails == set(range(8))
    # rail-optimised: every NIC of rail r hangs off the same leaf
    for r in range(8):
        leaves = {next(n for n in g[("nic", nic)] if n[0] == "leaf")
                  for nic, d in ((n[1], d) for n, d in g.nodes(data=True) if d["kind"] == "nic")
                  if d["rail"] == r}
        assert len(leaves) == 1
    assert g.degree[("spine", 0)] == 8


def test_more_than_one_scalable_unit_adds_rail_leaves():
    c = load_cluster("dgx-h100-superpod", nodes=128)  # 4 SUs
    assert (c.n_devices, c.n_leaves) == (1024, 32)
    assert int(c.leaf_of(32 * 8 + 3)) == 8 + 3   # node 32 (SU 1), GPU 3 -> rail 3 of SU 1


def test_nvl72_shapes():
    rack = load_cluster("gb200-nvl72")
    assert (rack.n_devices, rack.n_domains, rack.nodes) == (72, 1, 18)
    pod = load_cluster("gb200-nvl72-superpod")
    assert (pod.n_devices, pod.n_domains, pod.n_rails) == (576, 8, 4)
    g = pod.graph()
    assert g.degree[("nvswitch", 0)] == 72


def test_explicit_path_loads(tmp_path):
    src = topology_dir() / "dgx-h100.toml"
    copy = tmp_path / "mine.toml"
    copy.write_text(src.read_text().replace('name = "dgx-h100"', 'name = "mine"'))
    assert load_spec(copy).name == "mine"
    assert load_spec(str(copy)).source == str(copy)


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(TopologyError) as e:
        load_spec("dgx-h900")
    msg = str(e.value)
    assert "dgx-h900" in msg and all(n in msg for n in SHIPPED)
    assert isinstance(e.value, SimharnessError) and isinstance(e.value, ValueError)


def test_missing_file_path_is_an_error(tmp_path):
    with pytest.raises(TopologyError, match="does not exist"):
        load_spec(tmp_path / "nope.toml")


# ------------------------------------------------------------------ malformed files
BASE = (topology_dir() / "dgx-h100-superpod.toml").read_text()


def _mutate(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


MALFORMED = [
    # (mutation, field named in the error, words of what was expected)
    (("gpus = 8\n", 'gpus = "eight"\n'), "[node] gpus", "a whole number >= 1, got 'eight'"),
    (("domain_gpus = 8", "domain_gpus = 12"), "[scale_up] domain_gpus",
     "a multiple of [node] gpus (8)"),
    (("efficiency = 0.824", "efficiency = 1.5"), "[scale_up] efficiency", "<= 1.0, got 1.5"),
    (("bandwidth_gb_per_s = 450", ""), "[scale_up] bandwidth_gb_per_s", "it is missing"),
    (("latency_us = 0.6", "latency_us = -0.6"), "[scale_up] latency_us",
     "a number >= 0.0, got -0.6"),
    (("speed_gbit_per_s = 400", "speed_gbit_per_s = -400"), "[scale_out] speed_gbit_per_s",
     "a number > 0.0, got -400"),
    (("nic_latency_us = 1.0", ""), "[scale_out] nic_latency_us", "it is missing"),
    (('arch = "hopper"', 'arch = "pascal"'), "[node] arch", "one of 'volta', 'ampere'"),
    (('arch = "hopper"', 'arch = "ampere"'), "[scale_up] nvls", "false unless [node] arch"),
    (("nvls = true", 'nvls = "yes"'), "[scale_up] nvls", "true or false, got 'yes'"),
    (("sms = 132", "sms = 0"), "[node] sms", "a whole number >= 1, got 0"),
    (("nics_per_node = 8", "nics_per_node = 3"), "[scale_out] nics_per_node",
     "a divisor of [node] gpus (8)"),
    (('wiring = "rail"', 'wiring = "star"'), "[scale_out] wiring", "one of 'rail', 'tor'"),
    (("[node]\n", "[node]\ngpu_count = 8\n"), "[node] gpu_count", "unknown field"),
    (("ports = 64 ", "ports = 40 "), "ports", "at least 32 downlinks + 32 uplinks"),
    (("uplink_ports = 32\n", "uplink_ports = 0\n"), "uplink_ports", "a whole number >= 1"),
    (("max_nodes = 2048", "max_nodes = 4"), "default_nodes",
     "at most max_nodes (4)"),
    (('name = "dgx-h100-superpod"', "name = 5"), "name", "a string, got 5"),
    (('wiring = "rail"', 'wiring = "rail"\ntransport = "ethernet"'), "[scale_out] transport",
     "one of 'infiniband', 'roce', 'efa', got 'ethernet'"),
    (("sharp = true ", 'transport = "efa"\nsharp = false '),
     "[scale_out] net_plugin", "the NCCL net plugin that drives EFA"),
    (('wiring = "rail"', 'wiring = "rail"\ntransport = "roce"'), "[scale_out] sharp",
     "false unless transport is 'infiniband'"),
    (('wiring = "rail"', 'wiring = "rail"\ntuner_plugin = 3'), "[scale_out] tuner_plugin",
     "a string, got 3"),
]


@pytest.mark.parametrize("mutation, field, expected", MALFORMED,
                         ids=[m[1] + ":" + m[2][:20] for m in MALFORMED])
def test_malformed_files_name_the_file_the_field_and_the_expectation(tmp_path, mutation, field,
                                                                     expected):
    bad = tmp_path / "bad.toml"
    bad.write_text(_mutate(BASE, *mutation))
    with pytest.raises(TopologyError) as e:
        load_spec(bad)
    msg = str(e.value)
    assert msg.startswith(f"{bad}: "), msg
    assert field in msg and expected in msg, msg


def test_a_third_tier_is_rejected(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(BASE + '\n[[scale_out.tiers]]\nname = "core"\nport_speed_gbit_per_s = 400\n'
                   'latency_us = 1\n')
    with pytest.raises(TopologyError, match=r"tiers: expected 1 or 2"):
        load_spec(bad)


def test_toml_syntax_error_names_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(TopologyError, match=re.escape(str(bad)) + ": not valid TOML"):
        load_spec(bad)


def test_readme_example_error_is_the_real_one(tmp_path):
    readme = (topology_dir() / "README.md").read_text()
    example = re.search(r"error: my\.toml: (.*)", readme).group(1)
    bad = tmp_path / "my.toml"
    bad.write_text(_mutate(BASE, "domain_gpus = 8", "domain_gpus = 12"))
    with pytest.raises(TopologyError) as e:
        load_spec(bad)
    assert str(e.value) == f"{bad}: {example}"


@pytest.mark.parametrize("name, nodes, words", [
    ("dgx-h100", 2, "at most 1 node"),
    ("gb200-nvl72", 19, "at most 18 node"),
    ("cpu-loopback", 2, "at most 1 node"),
    ("dgx-h100-superpod", 0, "--nodes must be a whole number >= 1"),
])
def test_node_counts_beyond_the_description_are_errors(name, nodes, words):
    with pytest.raises(TopologyError, match=words):
        load_cluster(name, nodes)


def test_no_spine_means_one_leaf_per_rail(tmp_path):
    text = (topology_dir() / "gb200-nvl72.toml").read_text().replace("max_nodes = 18\n", "")
    f = tmp_path / "rackless.toml"
    f.write_text(text)
    assert load_cluster(f, 18).n_leaves == 4
    with pytest.raises(TopologyError, match="no spine"):
        load_cluster(f, 19)


def test_shipped_files_are_plain_toml_with_the_documented_sections():
    readme = (topology_dir() / "README.md").read_text()
    for name in SHIPPED:
        data = tomllib.loads((topology_dir() / f"{name}.toml").read_text())
        assert {"name", "node", "scale_up"} <= set(data)
        assert f"`{name}.toml`" in readme  # every file is listed in the README
    assert load_graph("dgx-h100").number_of_nodes() == 8 + 1 + 8 + 8


# ------------------------------------------------------------------ rented fabrics (issue 26)
@pytest.mark.parametrize("name, transport, nics, gbit, sharp", [
    ("aws-p5", "efa", 8, 400, False),            # 32 x 100G EFA = one 400G NCCL device per GPU
    ("gcp-a3-ultra", "roce", 8, 400, False),     # 8 x CX-7 400G RoCE
    ("gcp-a4", "roce", 8, 400, False),           # the same NICs as A3 Ultra (GCP documents both)
    ("azure-nd-h100-v5", "infiniband", 8, 400, False),
    ("azure-nd-h200-v5", "infiniband", 8, 400, False),
])
def test_cloud_fabrics_say_what_network_they_are(name, transport, nics, gbit, sharp):
    so = load_spec(name).scale_out
    assert (so.transport, so.nics_per_node, so.speed_gbit_per_s, so.sharp) == (
        transport, nics, gbit, sharp)
    assert ("aws-ofi-nccl" in so.net_plugin) == (transport == "efa")


def test_every_network_constant_of_the_rented_fabrics_has_a_source_or_says_assumed():
    """Each `key = value` line of the network tables carries a comment (source or "assumed")."""
    for name in ("aws-p5", "gcp-a3-ultra", "gcp-a4", "azure-nd-h100-v5", "azure-nd-h200-v5"):
        text = (topology_dir() / f"{name}.toml").read_text()
        assert load_spec(name).references
        body = text.split("[scale_out]", 1)[1].split("[collective]", 1)[0]
        for line in body.splitlines():
            if "=" in line and not line.startswith(("#", "[", "name ", "nic ", "net_plugin",
                                                     "tuner_plugin")):
                assert "#" in line, f"{name}: {line!r} has no source"


def test_gcp_a4_is_the_a3_ultra_fabric_with_the_b200_node():
    """GCP documents one NIC arrangement for A4 and A3 Ultra; the node is a DGX B200's."""
    a4, a3u, b200 = load_spec("gcp-a4"), load_spec("gcp-a3-ultra"), load_spec("dgx-b200")
    def network(spec):   # every number of the fabric; the names and plugin notes aside
        return dataclasses.replace(spec.scale_out, nic="", net_plugin="", tuner_plugin="")
    assert network(a4) == network(a3u)
    assert (a4.node, a4.scale_up) == (b200.node, b200.scale_up)
    assert a4.node.arch == "blackwell" and a4.scale_up.nvls
    # NVLink5 on the node, RoCE across: two A4 VMs ring over the network, NVLS inside one
    from simharness.topology.cost import predict
    one, two = load_cluster("gcp-a4", 1), load_cluster("gcp-a4", 2)
    assert predict(one, range(8), "all_reduce", 2**30).pick.startswith("nvls/")
    slow = predict(two, range(16), "all_gather", 2**30).time_us
    fast = predict(load_cluster("gcp-a3-ultra", 2), range(16), "all_gather", 2**30).time_us
    assert slow == pytest.approx(fast, rel=0.02)   # network-bound: same NICs, same time
    from simharness.topology.cost import build_rings, shape_of
    from simharness.topology.nccl_model import debug_lines
    lines = debug_lines(shape_of(two, build_rings(two, [list(range(16))]), 0), "all_reduce")
    fabric = "\n".join(lines[lines.index(next(x for x in lines if x.startswith("fabric"))):])
    assert "RoCE" in fabric and "lossless" in fabric and "gIB" in fabric


def test_the_a100_node_has_nvlink3_and_no_nvls():
    spec = load_spec("dgx-a100")
    assert (spec.node.arch, spec.scale_up.nvls, spec.scale_out) == ("ampere", False, None)
    assert spec.scale_up.bandwidth_gb_per_s * spec.scale_up.efficiency == pytest.approx(240.0)


def test_explain_says_what_a_fabric_changes_in_nccl():
    from simharness.topology.cost import build_rings, shape_of
    from simharness.topology.nccl_model import debug_lines

    def fabric(name):
        c = load_cluster(name, 2)
        shape = shape_of(c, build_rings(c, [list(range(16))]), 0)
        lines = debug_lines(shape, "all_reduce")
        return "\n".join(lines[lines.index(next(x for x in lines if x.startswith("fabric"))):])

    efa = fabric("aws-p5")
    assert "EFA through a net plugin" in efa and "aws-ofi-nccl" in efa
    assert "tuner plugin" in efa and "region tuner for p5/p5e MODELLED" in efa
    assert "FITTED" in efa and "not checked" in efa   # what is fitted, where it is unchecked
    roce = fabric("gcp-a3-ultra")
    assert "RoCE" in roce and "lossless" in roce and "gIB" in roce
    assert "NOT modelled" in roce   # gIB's tuner configuration is named, not modelled
    assert "FITTED" in roce and "not blind" in roce   # the RoCE fit and its caveat
    azure = fabric("azure-nd-h100-v5")
    assert "tuner plugin" not in azure and "net plugin" not in azure
    assert "InfiniBand through NCCL's own IB verbs" in fabric("azure-nd-h100-v5")
    # the proxy pipeline is named on every transport; EFA's message latency is the plugin's
    assert "proxy pipeline" in azure and "proxy pipeline" in roce
    assert "aws-ofi-nccl's own latency (20 us, +3 us for Simple" in efa
    one = load_cluster("dgx-a100")
    lines = debug_lines(shape_of(one, build_rings(one, [list(range(8))]), 0), "all_reduce")
    assert not any(x.startswith("fabric") for x in lines)   # no network, nothing to say
