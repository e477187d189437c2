"""``simharness run --topology NAME``: the ranks report the GPU of that cluster file, as
``--gpu`` does; ``--gpu`` naming another GPU, or a cluster file whose GPU the shim's table
lacks, is one error line before any rank starts."""

from __future__ import annotations

import pytest
from support.cli_errors import fails

from simharness._cli.run import _choose_gpu
from simharness.launch.gpu_shim.identity import ENV_GPU, gpu_for_description


@pytest.mark.parametrize(("topology", "key"), [
    ("dgx-h100", "h100"), ("azure-nd-h100-v5", "h100"), ("dgx-h200-cluster", "h200"),
    ("azure-nd-h200-v5", "h200"), ("dgx-b200", "b200"), ("dgx-a100", "a100")])
def test_the_topology_picks_the_gpu_the_ranks_report(monkeypatch, topology, key):
    monkeypatch.setenv(ENV_GPU, "v100")  # the flag outranks the environment
    _choose_gpu(None, topology)
    import os

    assert os.environ[ENV_GPU] == key


def test_gpu_and_topology_agreeing_is_accepted(monkeypatch):
    monkeypatch.delenv(ENV_GPU, raising=False)
    _choose_gpu("H200", "dgx-h200-cluster")
    import os

    assert os.environ[ENV_GPU] == "h200"


def test_gpu_and_topology_disagreeing_is_one_error_line(monkeypatch):
    monkeypatch.delenv(ENV_GPU, raising=False)
    fails(["run", "-n", "2", "--gpu", "a100", "--topology", "dgx-h100", "--", "pytest", "t.py"],
          "--gpu a100 and --topology dgx-h100 (GPU h100) disagree")


@pytest.mark.parametrize(("topology", "part"), [
    ("hgx-h800", "'H800 SXM5 80GB'"), ("gb200-nvl72", "'B200 (GB200 superchip)'"),
    ("cpu-loopback", "'CPU process (gloo)'")])
def test_a_gpu_the_table_lacks_is_one_error_line(monkeypatch, topology, part):
    monkeypatch.delenv(ENV_GPU, raising=False)
    fails(["run", "-n", "2", "--topology", topology, "--", "pytest", "t.py"],
          f"--topology {topology}: its GPU {part} is not one the shim knows", "--gpu NAME")


def test_an_unknown_topology_is_one_error_line():
    fails(["run", "-n", "2", "--topology", "no-such-cluster", "--", "pytest", "t.py"],
          "--topology: unknown topology 'no-such-cluster'")


@pytest.mark.parametrize(("text", "key"), [
    ("H100 PCIe 80GB", "h100-pcie"), ("A100 SXM4 40GB", "a100-40gb"), ("a100 80 GB", "a100"),
    ("NVIDIA L40S", "l40s"), ("H100 SXM5 94GB", None), ("A100", None), ("GH200 96GB", None)])
def test_descriptions(text, key):
    found = gpu_for_description(text)
    assert (found.key if found else None) == key
