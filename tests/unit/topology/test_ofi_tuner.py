"""The aws-ofi-nccl region tuner on p5 (aws-ofi-nccl v1.16.3, src/tuner/nccl_ofi_regions.cpp,
region_init_internal_p5_p5e): its decisions at the polygons' own vertices, where it steps
aside, and that the model applies it only where the cluster file names it."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from simharness.topology import TopologyError, load_cluster
from simharness.topology.cost import build_rings, predict, shape_of
from simharness.topology.loader import topology_dir
from simharness.topology.nccl_model import debug_lines
from simharness.topology.ofi_tuner import MAX_RANKS, MAX_SIZE, extend, region_pick

GIB = 1 << 30


def test_the_constants_and_extend_region_are_the_plugins():
    # TUNER_MAX_SIZE = 100 GiB, TUNER_MAX_RANKS = 1024 x 1024 (nccl_ofi_tuner_region.h)
    assert (MAX_SIZE, MAX_RANKS) == (107374182400, 1048576)
    # extend_region: the NVLSTree/Ring-Simple boundary through (7.5 GiB, 160) and
    # (9 GiB, 192) continued to x = 100 GiB: y = 192 + (100 GiB - 9 GiB) x 32 / 1.5 GiB
    assert extend((8053063680, 160), (9663676416, 192)) == (MAX_SIZE, Fraction(6400, 3))
    # a vertical pair keeps its x and takes the ranks bound
    assert extend((402653184, 2048), (402653184, 4096)) == (402653184, MAX_RANKS)


def test_a_vertex_shared_by_two_regions_goes_to_the_first():
    # {37748736, 32} is a vertex of Tree/LL128 (listed first) and of Ring/LL128
    assert region_pick("all_reduce", 37748736, 32, 4) == ("tree", "ll128")
    assert region_pick("all_reduce", 37748736 + (1 << 20), 32, 4) == ("ring", "ll128")
    # {2147483648, 128} is a vertex of Ring/LL128 (third) and NVLSTree (fourth)
    assert region_pick("all_reduce", 2 * GIB, 128, 16) == ("ring", "ll128")
    # on the NVLSTree edge {2 GiB, 128} - {6 GiB, 128}; 8 GiB lies below the
    # {6 GiB,128}-{7.5 GiB,160} edge, in Ring/Simple
    assert region_pick("all_reduce", 4 * GIB, 128, 16) == ("nvls_tree", "simple")
    assert region_pick("all_reduce", 8 * GIB, 128, 16) == ("ring", "simple")


def test_the_p5_sweep_sizes_get_the_steps_the_measurements_show():
    """Within one published sweep, busbw steps up where the tuner changes its pick:
    4 instances between 1 and 2 GiB (Ring/LL128 -> Ring/Simple), 8 between 2 and 4 GiB."""
    picks4 = [region_pick("all_reduce", s * GIB, 32, 4) for s in (1, 2)]
    picks8 = [region_pick("all_reduce", s * GIB, 64, 8) for s in (2, 4)]
    assert picks4 == [("ring", "ll128"), ("ring", "simple")]
    assert picks8 == [("ring", "ll128"), ("ring", "simple")]
    assert region_pick("all_reduce", 32 << 20, 256, 32) == ("tree", "ll128")


def test_where_the_plugin_steps_aside():
    # two nodes or fewer: the regions are skipped (NCCL's own tuner)
    assert region_pick("all_reduce", GIB, 16, 2) is None
    # 4 GPUs per node: no p5 table
    assert region_pick("all_reduce", GIB, 16, 4) is None
    # all-gather with 8 GPUs per node: no regions
    assert region_pick("all_gather", GIB, 32, 4) is None
    # all-gather, one GPU per node: Ring/Simple right of the {4 MiB,2}-{8 GiB,2048} edge
    assert region_pick("all_gather", 8 << 20, 4, 4) is None
    assert region_pick("all_gather", 16 << 20, 4, 4) == ("ring", "simple")
    # a combination NCCL has not enabled is skipped (v3 interface): without NVLSTree the
    # point falls in no other region
    assert region_pick("all_reduce", 4 * GIB, 128, 16,
                       enabled=[("ring", "simple"), ("ring", "ll128"), ("tree", "ll128")]) is None


def _p5_without_tuner(tmp_path: Path) -> Path:
    text = (topology_dir() / "aws-p5.toml").read_text()
    lines = [ln for ln in text.splitlines()
             if not ln.startswith(("tuner =", "instance_type ="))]
    out = tmp_path / "p5-no-tuner.toml"
    out.write_text("\n".join(lines) + "\n")
    return out


def test_the_model_applies_the_tuner_only_where_the_file_names_it(tmp_path):
    with_tuner = predict(load_cluster("aws-p5", 4), range(32), "all_reduce", GIB)
    plain = predict(load_cluster(_p5_without_tuner(tmp_path), 4), range(32), "all_reduce",
                    GIB)
    assert with_tuner.pick == "ring/ll128"
    assert plain.pick == "nvls_tree/simple"   # NCCL's own pick on the same fabric
    # a forced algorithm filters what the tuner may pick (NCCL_ALGO before the v3 tuner)
    forced = predict(load_cluster("aws-p5", 4), range(32), "all_reduce", GIB, algo="tree")
    assert forced.algo == "tree"


def test_explain_says_what_is_modelled():
    c = load_cluster("aws-p5", 4)
    shape = shape_of(c, build_rings(c, [list(range(32))]), 0)
    text = "\n".join(debug_lines(shape, "all_reduce"))
    assert "v1.16.3 region tuner for p5/p5e MODELLED" in text
    assert "Assumed: the default OFI_NCCL_TUNER_TYPE=Region" in text


@pytest.mark.parametrize("edit, field", [
    (('transport = "efa"', 'transport = "infiniband"'), "tuner"),
    (('instance_type = "p5.48xlarge"', 'instance_type = "p6-b200.48xlarge"'), "instance_type"),
])
def test_a_tuner_the_model_cannot_honour_is_a_typed_error(tmp_path, edit, field):
    text = (topology_dir() / "aws-p5.toml").read_text()
    assert edit[0] in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(edit[0], edit[1]))
    with pytest.raises(TopologyError, match=field):
        load_cluster(bad, 2)
