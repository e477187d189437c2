"""``simharness topology list|show``, ``place`` and ``simulate`` through click."""

from __future__ import annotations

import importlib.util
import json
import re
import xml.etree.ElementTree as ET

import click
import pytest
from click.testing import CliRunner

from simharness._cli.common import SimharnessGroup
from simharness._cli.topology import register
from simharness.topology import list_topologies


@click.group(cls=SimharnessGroup)
def main():
    """A bare simharness group with only the topology commands registered."""


register(main)


def invoke(*args):
    return CliRunner().invoke(main, list(args), prog_name="simharness")


def one_error_line(result, code=2):
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_list_names_every_topology():
    r = invoke("topology", "list")
    assert r.exit_code == 0
    for name in list_topologies():
        assert name in r.stdout
    data = json.loads(invoke("topology", "list", "--format", "json").stdout)
    assert {d["name"] for d in data} == set(list_topologies())


def test_show_summarises_the_graph():
    r = invoke("topology", "show", "dgx-h100-superpod", "--nodes", "32")
    assert r.exit_code == 0, r.output
    assert "256 GPUs" in r.stdout and "8 rails" in r.stdout
    assert ("graph: 553 nodes (32 nvswitch, 256 gpu, 256 nic, 8 leaf, 1 spine), 776 links"
            in r.stdout)
    data = json.loads(invoke("topology", "show", "gb200-nvl72", "-f", "json").stdout)
    assert (data["gpus"], data["nvlink_domains"], data["node_kinds"]["gpu"]) == (72, 1, 72)
    assert data["tiers"]["nvlink"]["bandwidth_gb_per_s"] == 900


def test_show_writes_an_svg_picture(tmp_path):
    out = tmp_path / "pod.svg"
    r = invoke("topology", "show", "dgx-h100-superpod", "--nodes", "4", "--out", str(out))
    assert r.exit_code == 0, r.output
    root = ET.parse(out).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    classes = [e.get("class") for e in root.iter(f"{ns}rect")]
    assert classes.count("gpu") == 32 and classes.count("node") == 4
    assert classes.count("leaf") == 8 and classes.count("nic") == 32
    assert len([e for e in root.iter(f"{ns}line") if e.get("class") == "cable"]) == 32


def test_show_caps_the_picture_of_a_large_cluster(tmp_path):
    out = tmp_path / "big.svg"
    assert invoke("topology", "show", "gb200-nvl72-superpod", "--out", str(out)).exit_code == 0
    text = out.read_text()
    assert "first 32 of 144 nodes drawn" in text and 'class="domain"' in text


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None,
                    reason="matplotlib installed: PNG works")
def test_png_without_matplotlib_is_a_clear_error(tmp_path):
    line = one_error_line(invoke("topology", "show", "dgx-h100", "--out", str(tmp_path / "a.png")))
    assert "needs matplotlib" in line and ".svg" in line


def test_show_errors():
    line = one_error_line(invoke("topology", "show", "dgx-h900"))
    assert "unknown topology 'dgx-h900'" in line and "dgx-h100-superpod" in line
    line = one_error_line(invoke("topology", "show", "dgx-h100", "--nodes", "2"))
    assert "at most 1 node" in line
    line = one_error_line(invoke("topology", "show", "dgx-h100", "--out", "x.pdf"))
    assert ".svg or .png" in line


def test_show_accepts_a_file_and_reports_its_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[node]\ngpus = 0\n')
    line = one_error_line(invoke("topology", "show", str(bad)))
    assert f"{bad}: [node] gpus: expected a whole number >= 1, got 0" in line


def test_place_table_and_findings():
    r = invoke("place", "--topology", "dgx-h100-superpod", "--nodes", "4", "--tp", "8",
               "--cp", "2")
    assert r.exit_code == 0, r.output
    assert "ranks 0..31 on node0/gpu0 .. node3/gpu7" in r.stdout
    tp = next(line.split() for line in r.stdout.splitlines() if line.startswith("tp "))
    assert tp[1:6] == ["4", "8", "4", "4", "4"]  # groups, size, in board, nvlink, node
    assert "warnings (1)" in r.stdout and "topology-cp-nodes: cp: 16 of 16 groups" in r.stdout


def test_place_exits_1_on_an_error_finding_and_prints_json():
    r = invoke("place", "--topology", "dgx-h100-superpod", "--nodes", "4", "--tp", "16")
    assert r.exit_code == 1
    assert "topology-tp-nvlink: tp: 2 of 2 groups leave their NVLink domain" in r.stdout
    r = invoke("place", "--topology", "dgx-h100-superpod", "--nodes", "4", "--tp", "16",
               "-f", "json")
    data = json.loads(r.stdout)
    assert data["topology"]["gpus"] == 32
    tp = next(row for row in data["locality"] if row["kind"] == "tp")
    assert (tp["in_node"], tp["network"]) == (0, 2)
    assert {f["code"] for f in data["findings"]} == {"topology-tp-nvlink"}


def test_place_sizes_and_hosts(tmp_path):
    # --world-size smaller than the cluster: the cluster keeps --nodes
    r = invoke("place", "--topology", "dgx-h100-superpod", "--nodes", "4", "--world-size", "16",
               "--tp", "8", "-f", "json")
    assert json.loads(r.stdout)["topology"]["nodes"] == 4
    hosts = tmp_path / "hosts"
    hosts.write_text("b slots=8\na slots=8\n")
    r = invoke("place", "--topology", "dgx-h100-superpod", "--world-size", "16", "--tp", "8",
               "--hosts", str(hosts), "-f", "json")
    data = json.loads(r.stdout)
    assert data["placement"]["how"] == "hosts" and data["topology"]["nodes"] == 2
    r = invoke("place", "--topology", "dgx-h100-superpod", "--world-size", "16",
               "--first-device", "8", "-f", "json")
    assert json.loads(r.stdout)["placement"]["first_device"] == "node1/gpu0"


@pytest.mark.parametrize("args, words", [
    (["--topology", "dgx-h100-superpod", "--gpus-per-node", "4"], "contradicts topology"),
    (["--topology", "dgx-h100", "--nodes", "2"], "at most 1 node"),
    (["--topology", "nope"], "unknown topology 'nope'"),
    (["--topology", "dgx-h100-superpod", "--tp", "3", "--world-size", "8"], "not divisible"),
    (["--topology", "dgx-h100-superpod", "--world-size", "16", "--hosts", "a,b"],
     "names 2 ranks but the layout has 16"),
])
def test_place_bad_input_is_one_error_line(args, words):
    assert words in one_error_line(invoke("place", *args))


def test_simulate_table_and_json():
    args = ["simulate", "--topology", "dgx-h100-superpod", "--nodes", "2",
            "--create-all-gather-group", "--model-bytes", "70GB", "--layers", "32",
            "--compute-ms", "1"]
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    assert "dense reduce-scatter over dp_cp, all-gather over dp_cp_ag" in r.stdout
    assert "schedule fsdp: Megatron-FSDP" in r.stdout
    assert "one communicator" in r.stdout and "separate all-gather communicator" in r.stdout
    assert re.search(r"verdict: (helps|may help|no measurable gain).*\+\d+ MB per GPU", r.stdout)
    assert re.search(r"memory: \+(\d+) MB per GPU \(dp_cp_ag \1 MB\)", r.stdout), r.stdout
    assert "communicator memory, dp_cp_ag (runs ring)" in r.stdout
    assert "connections made lazily" in r.stdout and "ring/simple" in r.stdout
    assert "the model cannot know:" in r.stdout
    explain = invoke(*args, "--explain").stdout
    assert "NCCL's table for 16 ranks on 2 node(s)" in explain and "ring/ll128" in explain
    data = json.loads(invoke(*args, "-f", "json").stdout)
    assert data["stages"][0]["dense_bytes"] == pytest.approx(70e9)
    assert data["topology"]["nodes"] == 2
    assert data["one_communicator"]["step_s"] >= data["separate_ag_communicator"]["step_s"]


@pytest.mark.parametrize("args, words", [
    (["--model-bytes", "lots", "--layers", "4"], "is not a byte count"),
    (["--model-bytes", "1GB", "--layers", "0"], "--layers"),
    (["--model-bytes", "1GB", "--layers", "4", "--rs-kind", "zz", "--compute-ms", "1"],
     "no 'zz' groups"),
    (["--model-bytes", "0", "--layers", "4", "--compute-ms", "1"], "--model-bytes 0 is out"),
    (["--model-bytes", "1e30", "--layers", "4", "--compute-ms", "1"], "--model-bytes 1e+30"),
    (["--pp", "4", "--nodes", "4", "--model-bytes", "1GB", "--layers", "10", "--compute-ms",
      "1"], "--layers 10 does not divide by --pp 4"),
    (["--tp", "8", "--model-bytes", "1GB", "--layers", "4", "--compute-ms", "1", "--ag-kind",
      "tp"], "--ag-kind tp: the all-gather must run over"),
    (["--model-bytes", "1GB", "--layers", "4"], "no compute time"),
    (["--ep", "2", "--model-bytes", "1GB", "--layers", "4", "--compute-ms", "1"],
     "--ep 2 with --model-bytes: give --expert-bytes"),
    (["--model-bytes", "1GB", "--expert-bytes", "2GB", "--layers", "4", "--compute-ms", "1"],
     "must be between 0 and --model-bytes"),
    (["--hidden-size", "64", "--ffn-hidden-size", "256", "--layers", "4", "--mfu", "2",
      "--micro-batch-size", "1", "--seq-length", "8"], "--mfu must be in (0, 1]"),
    (["--model-bytes", "1GB", "--layers", "4", "--compute-ms", "1", "--schedule", "dist-opt",
      "--overlap-param-gather-with-optimizer-step"], "needs interleaved pipelining"),
])
def test_simulate_bad_input_is_one_error_line(args, words):
    line = one_error_line(invoke("simulate", "--topology", "dgx-h100-superpod", "--nodes", "2",
                                 *args))
    assert words in line


def test_simulate_uneven_stages_and_help_examples():
    r = invoke("simulate", "--topology", "dgx-h100-superpod", "--nodes", "4", "--pp", "4",
               "--model-bytes", "10GB", "--layers", "10", "--compute-ms", "1",
               "--decoder-first-pipeline-num-layers", "2",
               "--decoder-last-pipeline-num-layers", "2")
    assert r.exit_code == 0, r.output
    assert "uneven pipeline stages: 2 to 3 layers per stage" in r.stdout
    via_set = invoke("simulate", "--topology", "dgx-h100-superpod", "--nodes", "4", "--pp", "4",
                     "--model-bytes", "10GB", "--layers", "10", "--compute-ms", "1",
                     "--set", "num_layers_in_first_pipeline_stage=2",
                     "--set", "num_layers_in_last_pipeline_stage=2")
    assert via_set.exit_code == 0 and "uneven pipeline stages" in via_set.stdout
    help_text = invoke("simulate", "--help").stdout
    assert "Examples:" in help_text and "--model-config deepseek_v3.json" in help_text


def test_simulate_help_examples_run(tmp_path):
    import shlex
    text = invoke("simulate", "--help").stdout.split("Examples:")[1].split("Options:")[0]
    commands = [" ".join(c.split()) for c in text.replace("\\\n", " ").split("simharness ")
                if c.strip()]
    assert len(commands) == 3
    dsv3 = tmp_path / "deepseek_v3.json"
    dsv3.write_text(json.dumps({
        "hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
        "vocab_size": 129280, "num_attention_heads": 128, "n_routed_experts": 256,
        "moe_intermediate_size": 2048, "num_experts_per_tok": 8, "n_shared_experts": 1,
        "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}))
    for command in commands:
        args = [str(dsv3) if a == "deepseek_v3.json" else a for a in shlex.split(command)]
        r = invoke(*args, "-q")
        assert r.exit_code == 0, (command, r.output)
        assert "verdict:" in r.stdout


def test_byte_sizes():
    from simharness._cli.topology import ByteSize

    conv = ByteSize().convert
    assert [conv(v, None, None) for v in ("140e9", "140GB", "1.5G", "64GiB", "512", 7)] == [
        140e9, 140e9, 1.5e9, 64 * 2 ** 30, 512.0, 7.0]


def test_topology_cost_shows_nccl_s_pick_per_size():
    r = invoke("topology", "cost", "dgx-h100", "--size", "1KB", "--size", "8GiB")
    assert r.exit_code == 0, r.output
    assert "ring/ll" in r.stdout and "nvls/simple" in r.stdout
    rows = json.loads(invoke("topology", "cost", "dgx-h100-superpod", "--nodes", "4",
                             "--ranks-per-node", "1", "--collective", "all_gather",
                             "--size", "1GiB", "-f", "json").stdout)
    assert rows[0]["pick"] == "ring/simple" and 40 < rows[0]["busbw_gb_per_s"] < 50


@pytest.mark.parametrize("args, words", [
    (["--algo", "ringo"], "unknown algorithm 'ringo'"),
    (["--proto", "LL256"], "unknown protocol 'LL256'"),
    (["--size", "2TiB"], "message size 2199023255552.0 is out of range"),
    (["--collective", "bcast"], "unknown collective 'bcast'"),
    (["--ranks-per-node", "9"], "--ranks-per-node 9 exceeds the 8 GPUs"),
    (["--algo", "pat"], "not available"),
])
def test_topology_cost_bad_input_is_one_error_line(args, words):
    assert words in one_error_line(invoke("topology", "cost", "dgx-h100", *args))


def test_bad_topology_constant_is_one_error_line(tmp_path):
    from simharness.topology import topology_dir
    bad = tmp_path / "neg.toml"
    bad.write_text((topology_dir() / "dgx-h100.toml").read_text()
                   .replace("latency_us = 0.6", "latency_us = -1", 1))
    line = one_error_line(invoke("topology", "cost", str(bad)))
    assert f"{bad}: [scale_up] latency_us: expected a number >= 0.0, got -1" in line
