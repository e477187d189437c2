"""Small input checks: a format that disagrees with the file suffix, ``check`` saying when
it chose the world, ``simulate``'s compute time refused when non-positive or absurd, and the
slowdown line naming the collective."""

from __future__ import annotations

import json

import pytest
from support.cli_errors import invoke, one_error_line

SIM = ["simulate", "--topology", "dgx-h100-superpod", "--nodes", "2", "-n", "16", "--tp", "2",
       "--pp", "2", "--cp", "2", "--model-bytes", "140GB", "--layers", "80"]


@pytest.mark.parametrize(("fmt", "name", "words"), [
    ("csv", "x.json", "--format csv writes CSV, but --out {p} ends in .json (json); use "
                      "--format json, or an --out path ending in .csv"),
    ("json", "x.csv", "--format json writes JSON, but --out {p} ends in .csv (csv)"),
    ("json", "x.yaml", "ends in .yaml (yaml); use --format yaml"),
])
def test_export_refuses_a_format_the_suffix_contradicts(tmp_path, fmt, name, words):
    path = tmp_path / name
    line = one_error_line(invoke("export", "-n", 16, "--tp", 2, "-f", fmt, "--out", path))
    assert words.format(p=path) in line
    assert not path.exists()  # refused before anything is written


@pytest.mark.parametrize(("fmt", "name"), [("csv", "x.csv"), ("json", "x.json"),
                                           ("csv", "ranks.out"), ("json", "plan")])
def test_export_writes_when_the_suffix_agrees_or_says_nothing(tmp_path, fmt, name):
    path = tmp_path / name
    r = invoke("export", "-n", 16, "--tp", 2, "-f", fmt, "--out", path)
    assert r.exit_code == 0, r.output
    text = path.read_text()
    assert text.lstrip().startswith("{") == (fmt == "json")


def test_check_says_when_it_chose_the_world():
    r = invoke("check", "--tp", 2, "--pp", 2)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[1] == ("world: 4 ranks (smallest world these sizes fit; set --world-size or "
                        "--nodes)")
    inspect = invoke("inspect", "--tp", 2, "--pp", 2).stdout
    assert "4 ranks (smallest world these sizes fit; set --world-size or --nodes)" in inspect
    given = invoke("check", "-n", 8, "--tp", 2, "--pp", 2).stdout
    assert "smallest world" not in given
    data = json.loads(invoke("check", "--tp", 2, "--pp", 2, "-f", "json").stdout)
    assert data["world_auto"] is True


@pytest.mark.parametrize(("value", "words"), [
    ("0", "--compute-ms must be a number > 0, got 0.0"),
    ("-3", "--compute-ms must be a number > 0"),
    ("1e9", "--compute-ms 1e+09 makes one microbatch take"),
    # 80 layers / 2 stages x (70 s backward + 35 s forward) = 4200 s > 1 h
    ("70000", "--compute-ms 70000 makes one microbatch take 1.17 h of compute on one pipeline "
              "stage"),
])
def test_simulate_refuses_non_positive_and_absurd_compute_times(value, words):
    assert words in one_error_line(invoke(*SIM, "--compute-ms", value))


def test_simulate_accepts_a_long_but_plausible_compute_time():
    # 40 layers per stage x (59 s + 29.5 s) = 3540 s: under an hour per microbatch
    r = invoke(*SIM, "--compute-ms", "59000")
    assert r.exit_code == 0, r.output


def test_the_slowdown_line_names_the_collectives_and_why():
    r = invoke(*SIM, "--compute-ms", 8, "--create-all-gather-group")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("latency share"))
    assert ("the dense reduce-scatter (dp_cp) runs up to 2.00x slower while the dense "
            "all-gather (dp_cp_ag) moves data at the same time: their rings cross the same "
            "links, and each link's bandwidth is split between them") in line
    assert "a collective runs up to" not in line
    data = json.loads(invoke(*SIM, "--compute-ms", 8, "--create-all-gather-group", "-f",
                             "json").stdout)
    assert data["shared_slowdown_words"].startswith("the dense reduce-scatter (dp_cp)")


def test_each_sharing_scenario_is_explained_and_more_sharing_coming_out_faster_says_why():
    # MoE, fsdp, 4 nodes: with the SMs shared the slower compute spreads the collectives
    r = invoke("simulate", "--topology", "dgx-h100-superpod", "--tp", 2, "--pp", 2, "--ep", 2,
               "--nodes", 4, "--model-bytes", "40GB", "--expert-bytes", "30GB", "--layers", 32,
               "--compute-ms", 1)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert any(x.startswith("links shared: collectives moving data at the same time split")
               for x in lines)
    assert any(x.startswith("links + SMs: links shared, and compute slows by the SMs")
               for x in lines)
    why = [x for x in lines if x.startswith("links + SMs is ")]
    assert len(why) == 1 and "faster than links shared with separate communicators" in why[0]
    assert "move data at the same time for" in why[0]
    rows = {x.split()[0] + x.split()[1]: x.split() for x in lines
            if x.startswith(("links shared ", "links + SMs "))}
    assert float(rows["links+"][4]) < float(rows["linksshared"][3])  # separate_ms: the case


def test_no_why_line_when_more_sharing_is_slower():
    r = invoke(*SIM, "--compute-ms", 8, "--create-all-gather-group")
    assert r.exit_code == 0, r.output
    assert not [x for x in r.stdout.splitlines() if " faster than " in x]
