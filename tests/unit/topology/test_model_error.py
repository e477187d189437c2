"""The shipped table of the cost model's measured error, and the verdict that uses it."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

from simharness import ParallelismConfig, build_layout
from simharness.step import SimulateInputs, job_stages, simulate
from simharness.step.report import CollRow, OverlapReport, Scenario, StageRow
from simharness.topology import load_cluster, place_layout
from simharness.topology.calibration import evaluate, load_points, network_class
from simharness.topology.model_error import (
    MIN_POINTS,
    BandError,
    compute_table,
    lookup,
    network_class_of,
    read_table,
    size_band,
)

# the module (simharness.step re-exports the function under the same name)
simulate_module = importlib.import_module("simharness.step.simulate")
CALIBRATION = Path(__file__).resolve().parents[3] / "topologies" / "calibration"


def test_shipped_table_is_what_the_model_gives_now():
    shipped = read_table(CALIBRATION / "model_error.toml")
    now = compute_table(CALIBRATION / "nccl_calibration.toml")
    assert shipped == now, ("topologies/calibration/model_error.toml is out of date: run "
                            "PYTHONPATH=. .venv/bin/python scripts/model_error_table.py")


def test_band_percentiles_are_the_held_out_time_ratios():
    """One band recomputed from the points' own metrics (time, or size over busbw)."""
    ratios = []
    for p in load_points(CALIBRATION / "nccl_calibration.toml"):
        if p.split == "heldout" and network_class(p) == "NVLink hopper" \
                and size_band(p.size) == "1-256 MB":
            r = evaluate(p)
            ratios.append(r.predicted / p.measured if p.metric == "time_us"
                          else p.measured / r.predicted)
    row = next(r for r in compute_table(CALIBRATION / "nccl_calibration.toml")
               if (r.network, r.band) == ("NVLink hopper", "1-256 MB"))
    assert row.n == len(ratios) >= MIN_POINTS
    assert (row.p10, row.p50, row.p90) == pytest.approx(
        tuple(np.percentile(ratios, (10, 50, 90))), abs=1e-3)


def test_network_class_of_a_group_names_what_the_calibration_names():
    for p in load_points(CALIBRATION / "nccl_calibration.toml"):
        spec = load_cluster(p.topology, p.nodes).spec
        nodes = p.node_list if p.node_list is not None else range(p.nodes)
        domains = len({n // spec.nodes_per_domain for n in nodes})
        assert network_class_of(spec, domains) == network_class(p), p.id


def test_a_band_with_few_points_has_no_figure():
    assert lookup("RoCE volta", 2e6).words() == \
        f"RoCE volta 1-256 MB: no held-out data (0 points, fewer than {MIN_POINTS})"
    few = [r for r in read_table(CALIBRATION / "model_error.toml") if r.n < MIN_POINTS]
    assert few and all(r.p10 is None and "no held-out data" in r.words() for r in few)


def _report(monkeypatch, err: BandError | None):
    if err is not None:
        monkeypatch.setattr(simulate_module, "lookup", lambda network, size: err)
    layout = build_layout(ParallelismConfig(world_size=16, tensor_model_parallel_size=8,
                                            create_all_gather_group=True))
    placement = place_layout(layout, load_cluster("aws-p5", nodes=2))
    stages, _ = job_stages(layout.config, model_bytes=14e9, layers=16)
    return simulate(layout, placement, SimulateInputs(stages=stages, compute_ms=5))


def test_gain_under_the_model_error_brackets_slower_and_faster_collectives(monkeypatch):
    exact = _report(monkeypatch, BandError("x", "y", 9, 9, 1.0, 1.0, 1.0))
    assert exact.error_range_pct == pytest.approx(exact.gain_range_pct)
    wide = _report(monkeypatch, BandError("x", "y", 9, 9, 0.5, 1.0, 2.0))
    assert wide.error_range_pct is not None
    assert wide.error_range_pct[0] < exact.gain_range_pct[0] - 0.1 or \
        wide.error_range_pct[1] > exact.gain_range_pct[1] + 0.1
    none = _report(monkeypatch, BandError("x", "y", 2, 2))
    assert none.error_range_pct is None


def test_shipped_report_names_its_class_and_band(monkeypatch):
    rep = _report(monkeypatch, None)
    errs = {(e.network, e.band) for e in rep.model_errors}
    assert errs == {("EFA hopper", size_band(c.size_bytes)) for c in rep.collectives}
    assert "cost model's measured error (EFA hopper" in rep.verdict \
        or "error is not measured here (EFA hopper" in rep.verdict
    d = rep.to_dict()
    assert d["model_error"] and "gain_range_with_model_error_pct" in d


def test_verdict_sign_holds_only_within_the_model_error():
    one = StageRow(0, (8,), 0, 0.0, 0.0, 0.0, 0.0, *(2 * (None,)))  # type: ignore[arg-type]
    err = BandError("EFA hopper", "1-256 MB", 9, 8, 0.9, 1.0, 1.4)
    row = CollRow("dense all-gather", "dp_cp_ag", 16, 1e8, "ring/simple", 4, 1e-3, 1,
                  error=err)
    rep = OverlapReport(schedule="fsdp", nccl="2.28", compute_how="given", groups={},
                        stages=(one,), worst_stage=0, collectives=(row,),
                        scenarios=(Scenario("links shared", 1.0, 0.95),),
                        comm_memories=(("dp_cp_ag", 100.0),), cost_classes=1,
                        error_range_pct=(-1.0, 6.0))
    assert rep.verdict.startswith("may hurt: +5.0% of the step over the sharing scenarios, "
                                  "down to -1.0% within the cost model's measured error"), \
        rep.verdict
    assert rep.verdict.endswith("-1.0% to +6.0% with collective times anywhere in the cost "
                                "model's measured error (EFA hopper 1-256 MB: model time -10% "
                                "to +40% of measured (p10-p90 of 9 held-out points))")
    sure = OverlapReport(**{**rep.__dict__, "error_range_pct": (2.0, 6.0)})
    assert sure.verdict.startswith("helps: +5.0% of the step")
