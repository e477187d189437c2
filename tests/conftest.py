"""The test tiers, one folder each; the folder sets the tier's markers.

tests/unit/        pure: starts no process, needs no megatron-core       -> unit
tests/parity/      compares with megatron-core (torch's fake backend)     -> parity
tests/processes/   starts processes: gloo ranks, torchrun agents, the     -> processes
                   CLI in a fresh interpreter, a child pytest
                   (replay/ and capture/ also -> replay; launch/ and run/ also -> launch)
tests/gpu/         NCCL and CUDA GPUs, skipped without them               -> gpu, processes, replay
tests/packaging/   builds and installs the wheel, applies the recorded    -> packaging
                   mutants

``replay`` and ``launch`` are the older names of parts of the processes tier: ``-m
"not replay"`` and ``-m launch`` still select what they did. Helpers shared by test
modules live in tests/support/ (imported as ``support``); the scripts the process tests
run live in tests/fixtures/ and are not collected.

A unit test that starts a process fails: while one runs, an audit hook refuses
subprocesses, fork, spawn and exec, naming the call (such a test belongs in
tests/processes/).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

#: tier folder -> markers every test under it gets
TIER_MARKS = {
    "unit": ("unit",),
    "parity": ("parity",),
    "processes": ("processes",),
    "gpu": ("gpu", "processes", "replay"),
    "packaging": ("packaging",),
}
#: processes/<folder> -> the older marker its tests carried
PROCESS_ALIASES = {"replay": "replay", "capture": "replay", "launch": "launch", "run": "launch"}

_PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn",
                             "os.spawn", "os.system", "os.exec"})
_guard = {"on": False, "test": ""}


def _refuse_processes(event: str, args: tuple) -> None:
    if _guard["on"] and event in _PROCESS_EVENTS:
        raise RuntimeError(f"{_guard['test']}: a unit test started a process ({event} "
                           f"{str(args[:2])[:120]}); tests that start processes belong in "
                           "tests/processes/")


sys.addaudithook(_refuse_processes)


def tier_marks(path: Path) -> tuple[str, ...]:
    """The markers of the test file at ``path`` (none outside a tier folder)."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return ()
    marks = TIER_MARKS.get(parts[0], ()) if len(parts) > 1 else ()
    if parts[0] == "processes" and len(parts) > 2 and parts[1] in PROCESS_ALIASES:
        marks += (PROCESS_ALIASES[parts[1]],)
    return marks


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for name in tier_marks(Path(item.path)):
            item.add_marker(name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    _guard["on"] = item.get_closest_marker("unit") is not None
    _guard["test"] = item.nodeid
    try:
        yield
    finally:
        _guard["on"] = False
