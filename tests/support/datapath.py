"""The check of a data-path replay whose parameters match the single-process reference,
in both variants, on every rank."""

from simharness.replay.datapath import summary_lines


def explain(rep) -> str:
    return "\n".join(summary_lines(rep))


def assert_bit_identical(rep, world):
    assert rep["status"] == "matched" and rep["exit_code"] == 0, explain(rep)
    assert set(rep["variants"]) == {"shared", "separate"}
    for name, v in rep["variants"].items():
        assert v["ok"] and v["ranks_matched"] == world, (name, v)
        assert len(v["step_s"]) == rep["options"]["steps"] and v["median_step_s"] > 0
    infos = [f for f in rep["findings"] if f["code"] == "datapath-match"]
    assert len(infos) == 2 and all(f"all {world} ranks" in f["message"] for f in infos)
    assert not [f for f in rep["findings"] if f["severity"] == "error"]
