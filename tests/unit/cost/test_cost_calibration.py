"""Every published point of topologies/calibration/nccl_calibration.toml against the model.

Targets: busbw within +-15 % at >= 64 MB, time within 1.5x below (a busbw
point below 64 MB is judged on its time). Points the model misses
carry a ``known_miss`` reason in the data file and are strict xfails here: they
must keep failing (the model was not tuned to them), and a fix that makes one
pass shows up as an XPASS failure to be looked at.
"""

from __future__ import annotations

import pytest

from simharness.topology import TopologyError, topology_dir
from simharness.topology.calibration import (
    BW_TARGET_MIN_BYTES,
    BW_TOLERANCE,
    DEFAULT_PATH,
    TIME_FACTOR,
    evaluate,
    load_points,
)

POINTS = load_points(DEFAULT_PATH)


def _param(p):
    marks = [pytest.mark.xfail(strict=True, reason=p.known_miss)] if p.known_miss else []
    return pytest.param(p, id=p.id, marks=marks)


@pytest.mark.parametrize("point", [_param(p) for p in POINTS])
def test_published_point(point):
    r = evaluate(point)
    if point.metric == "busbw" and point.size >= BW_TARGET_MIN_BYTES:
        assert abs(r.ratio - 1) <= BW_TOLERANCE, (r.pick, r.predicted, point.measured)
    else:
        time_ratio = r.ratio if point.metric == "time_us" else 1 / r.ratio
        assert 1 / TIME_FACTOR <= time_ratio <= TIME_FACTOR, (r.pick, r.predicted,
                                                              point.measured)
    assert r.within_target


def test_sweeps_are_split_whole():
    """A published sweep is fit or held out as a whole, never point by point."""
    sweeps: dict[str, set[str]] = {}
    for p in POINTS:
        if p.sweep:
            sweeps.setdefault(p.sweep, set()).add(p.split)
    assert len(sweeps) >= 4
    assert all(len(splits) == 1 for splits in sweeps.values()), sweeps
    assert {next(iter(v)) for v in sweeps.values()} == {"fit", "heldout"}
    mid = [p for p in POINTS if p.split == "heldout" and 2**20 <= p.size < 256 * 2**20]
    assert len(mid) >= 8   # the mid-size ramp is checked on held-out sweeps


def test_the_data_set_covers_the_sweep_and_keeps_fit_and_heldout_apart():
    held = [p for p in POINTS if p.split == "heldout"]
    fit = [p for p in POINTS if p.split == "fit"]
    assert len(held) >= 10 and fit
    assert all(p.used_for for p in fit), "every fit point says what it set"
    assert not any(p.used_for for p in held)
    sizes = sorted(p.size for p in held)
    assert sizes[0] <= 1024 and sizes[-1] >= 8 * 2 ** 30   # 1 KB .. 8 GB
    assert {p.metric for p in held} == {"busbw", "time_us"}
    assert all(p.source.startswith("https://github.com/") for p in POINTS)
    assert len({p.id for p in POINTS}) == len(POINTS)


def test_the_data_set_is_package_data_not_tests():
    # An installed wheel has no tests/: the library reads the file shipped with the
    # topologies (tests/packaging/test_wheel.py loads it from an installed wheel).
    assert topology_dir() / "calibration" / "nccl_calibration.toml" == DEFAULT_PATH
    assert "tests" not in DEFAULT_PATH.parts and DEFAULT_PATH.is_file()


def test_the_model_picks_what_the_threads_report():
    by_id = {p.id: p for p in POINTS}
    assert evaluate(by_id["h100x8-ar-476"]).pick == "nvls/simple"       # NVLink SHARP default
    assert evaluate(by_id["gb200-3racks-nvl8-ring"]).pick == "ring/simple"  # nccl#1801: ring
    assert evaluate(by_id["a100-32nodes-ar-8b"]).pick.startswith("tree/")


def test_bad_calibration_rows_are_named(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text('[[point]]\nid = "x"\nsource = "s"\ncollective = "all_reduce"\nsize = 8\n'
                 'topology = "dgx-h100"\nnodes = 1\nranks_per_node = 8\nsplit = "heldout"\n'
                 'busbw = -1\n')
    with pytest.raises(TopologyError, match=r"point #1 \(x\): measured value must be a number"):
        load_points(p)
