"""Environment variables are inputs: every ``SIMHARNESS_*`` variable is read strictly by
``simharness.envvars``; a bad value is one ``error:`` line and exit 2 whatever the command
would do with it, and a memory limit above the machine's is capped at it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import main
from simharness import envvars, resources
from simharness.envvars import VARIABLES, EnvVarError, check_environment, read

ROOT = Path(__file__).resolve().parents[3]
GIB = 1 << 30
#: names that are not variables: two group descriptions, and the typos these tests refuse
NOT_VARIABLES = {"SIMHARNESS_OVERLAP_PROBE_AG", "SIMHARNESS_DATAPATH_AG_TWIN",
                 "SIMHARNESS_MEMORY_LIMT", "SIMHARNESS_COLOUR"}

BAD = {  # every variable simharness reads, with values that are not one of its forms
    "SIMHARNESS_MEMORY_LIMIT": ["abc", "0", "-5G", "1.5", "4 GB/s"],
    "SIMHARNESS_DEBUG": ["maybe", "2"],
    "SIMHARNESS_CAPTURE_START_SLOTS": ["abc", "-1", "1.5"],
    "SIMHARNESS_EAGER_SUBGROUPS": ["maybe", "11"],
    "SIMHARNESS_CAPTURE_DIR": ["   "],
    "SIMHARNESS_GPU": ["  "],
    "SIMHARNESS_LAZY_GROUPS": ["maybe", "2"],
    "SIMHARNESS_PREFIX_OUTPUT": ["yes please"],
    "SIMHARNESS_START_SLOTS": ["no-count", "/tmp/x:0", ":3"],
    "SIMHARNESS_RUN_DIR": [" "],
    "SIMHARNESS_RUN_DONE": [" "],
    "SIMHARNESS_RUN_TIMEOUT": ["0", "-1", "soon", "inf", "nan"],
    "SIMHARNESS_RUN_ROUND": ["-1", "x"],
    "SIMHARNESS_RUN_GRACE": ["-0.5", "x"],
    "SIMHARNESS_RUN_COLLECT_TIMEOUT": ["0", "x"],
}
GOOD = {
    "SIMHARNESS_MEMORY_LIMIT": [("24G", 24 * GIB), ("512MiB", 512 << 20), ("1000", 1000)],
    "SIMHARNESS_DEBUG": [("1", True), ("off", False), ("TRUE", True)],
    "SIMHARNESS_CAPTURE_START_SLOTS": [("0", 0), ("4", 4)],
    "SIMHARNESS_EAGER_SUBGROUPS": [("1", True), ("0", False)],
    "SIMHARNESS_LAZY_GROUPS": [("0", False), ("off", False), ("1", True)],
    "SIMHARNESS_START_SLOTS": [("/tmp/s:4", ("/tmp/s", 4))],
    "SIMHARNESS_RUN_TIMEOUT": [("2.5", 2.5)],
    "SIMHARNESS_RUN_GRACE": [("0", 0.0)],
}


def test_every_variable_the_package_names_is_in_the_table():
    named = set()
    for path in (ROOT / "simharness").rglob("*.py"):
        named |= set(re.findall(r"\bSIMHARNESS_[A-Z_]+[A-Z]\b", path.read_text()))
    named -= NOT_VARIABLES
    assert named <= set(VARIABLES), named - set(VARIABLES)
    assert set(BAD) == {n for n, v in VARIABLES.items() if v.reader != "tests"}


def test_the_test_suite_s_variables_are_known_and_unread():
    named = set()
    for path in [*(ROOT / "tests").rglob("*.py"), ROOT / "Makefile"]:
        named |= set(re.findall(r"\bSIMHARNESS_[A-Z_]+[A-Z]\b", path.read_text()))
    named -= NOT_VARIABLES
    assert named <= set(VARIABLES), named - set(VARIABLES)
    check_environment({"SIMHARNESS_REQUIRE_PARITY": "whatever"})


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, vs in BAD.items() for v in vs])
def test_a_bad_value_names_the_variable_the_value_and_the_forms(name, value):
    with pytest.raises(EnvVarError) as info:
        read(name, {name: value})
    msg = str(info.value)
    assert msg.startswith(f"{name}={value!r} ") and "accepted: " in msg
    assert VARIABLES[name].forms in msg
    with pytest.raises(EnvVarError):
        check_environment({name: value})


@pytest.mark.parametrize(("name", "value", "want"),
                         [(n, v, w) for n, vs in GOOD.items() for v, w in vs])
def test_good_values_read_as_their_meaning(name, value, want):
    assert read(name, {name: value}) == want


def test_unset_or_empty_is_the_default():
    assert read("SIMHARNESS_RUN_TIMEOUT", {}) == 120.0
    assert read("SIMHARNESS_MEMORY_LIMIT", {"SIMHARNESS_MEMORY_LIMIT": ""}) is None
    assert read("SIMHARNESS_RUN_GRACE", {}, default=5.0) == 5.0
    # the shim's NCCL-style subgroups connect on first use unless switched off
    assert read("SIMHARNESS_LAZY_GROUPS", {}) is True
    assert read("SIMHARNESS_LAZY_GROUPS", {"SIMHARNESS_LAZY_GROUPS": ""}) is True


def test_an_unknown_name_is_refused_with_the_closest():
    with pytest.raises(EnvVarError, match="did you mean SIMHARNESS_MEMORY_LIMIT"):
        check_environment({"SIMHARNESS_MEMORY_LIMT": "24G"})
    with pytest.raises(EnvVarError, match="not a simharness variable; simharness reads"):
        check_environment({"SIMHARNESS_COLOUR": "1"})


# ----------------------------------------------------------------- the CLI
@pytest.mark.parametrize(("name", "value"), [
    ("SIMHARNESS_MEMORY_LIMIT", "abc"), ("SIMHARNESS_MEMORY_LIMIT", "0"),
    ("SIMHARNESS_MEMORY_LIMIT", "-5G"), ("SIMHARNESS_CAPTURE_START_SLOTS", "abc"),
    ("SIMHARNESS_EAGER_SUBGROUPS", "maybe"), ("SIMHARNESS_RUN_TIMEOUT", "0"),
])
def test_the_cli_refuses_a_bad_value_even_for_a_small_world(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    result = CliRunner().invoke(main, ["check", "-n", "16", "--tp", "2"])
    assert result.exit_code == 2, result.output
    err = result.stderr
    assert err.startswith(f"error: {name}={value!r}") and len(err.splitlines()) == 1, err
    assert "Traceback" not in result.output


def test_a_limit_above_the_machine_is_capped_with_a_note(monkeypatch):
    monkeypatch.setattr(resources, "machine_memory",
                        lambda: resources.MemoryLimit(8 * GIB, "MemAvailable"))
    monkeypatch.setenv("SIMHARNESS_MEMORY_LIMIT", "100T")
    lim = resources.available_memory()
    assert lim.available == 8 * GIB and "capped" in lim.source and "100T" in lim.note
    monkeypatch.setenv("SIMHARNESS_MEMORY_LIMIT", "2G")  # lower: taken as is
    lim = resources.available_memory()
    assert lim.available == 2 * GIB and lim.note is None


def test_the_issue_s_100T_check_is_refused_not_killed(monkeypatch):
    monkeypatch.setattr(resources, "machine_memory",
                        lambda: resources.MemoryLimit(16 * GIB, "MemAvailable"))
    monkeypatch.setenv("SIMHARNESS_MEMORY_LIMIT", "100T")
    result = CliRunner().invoke(main, ["check", "-n", "2147483648", "--tp", "8", "--pp", "8"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines[0].startswith("note: SIMHARNESS_MEMORY_LIMIT=100T is more than") and \
        "capped at that" in lines[0]
    assert len(lines) == 2 and lines[1].startswith("error: check of 2,147,483,648 ranks")
    assert "14.4 GiB usable" in lines[1]
    # the refusal no longer offers the variable as a way past the guard
    assert "can only lower the limit" in lines[1] and "=64G" not in lines[1]


def test_the_rank_side_readers_use_the_table(monkeypatch):
    from simharness.capture.faithful import start_slots_for

    assert start_slots_for(None, {"SIMHARNESS_CAPTURE_START_SLOTS": "3"}) == 3
    with pytest.raises(EnvVarError, match="SIMHARNESS_CAPTURE_START_SLOTS='x'"):
        start_slots_for(None, {"SIMHARNESS_CAPTURE_START_SLOTS": "x"})
    assert envvars.debug_on({"SIMHARNESS_DEBUG": "maybe"}) is False
