"""The import rules of docs/architecture.md, checked on the source (no module is imported).

Each package of ``simharness/`` may import only the packages listed for it in ``ALLOWED``;
``simharness.replay`` is imported only by itself and the replay commands of the CLI; only
the process side (and live verification) imports ``torch.distributed``; the core, topology,
the step model and the CLI import no ``torch`` at all; and no modules import each other in
a circle. Function-level imports count; imports under ``if TYPE_CHECKING:`` do not.
"""

from __future__ import annotations

import pytest
from support.import_graph import cycles, external, graph

SUBPACKAGES = ("topology", "step", "live", "launch", "replay", "capture", "pytest_ranks",
               "runtests", "testing", "_cli", "topologies")
PROCESS_SIDE = {"launch", "live", "replay", "capture", "pytest_ranks", "runtests", "testing"}

# Which package may import which ("core": the modules directly in simharness/).
ALLOWED = {
    "core": {"core"},
    "topology": {"core", "topology"},
    "step": {"core", "topology", "step"},
    "live": {"core", "live"},
    "launch": {"core", "launch"},
    "replay": {"core", "topology", "launch", "live", "replay"},
    "capture": {"core", "launch", "capture"},
    "pytest_ranks": {"core", "launch", "pytest_ranks"},
    "runtests": {"pytest_ranks", "runtests"},
    "testing": {"core", "live", "pytest_ranks", "testing"},
    "_cli": {"core", "topology", "step", "launch", "replay", "capture", "pytest_ranks", "_cli"},
    "topologies": {"topologies"},
}
# Named exceptions, each with its reason.
EXCEPTIONS = {
    ("simharness", "live"): "the public simharness.verify_live, imported on first use",
    ("simharness.__main__", "_cli"): "python -m simharness runs the CLI",
    ("simharness.topology.overlap", "step"): "the step model's old path, for one release",
    ("simharness.topology.workload", "step"): "the step model's old path, for one release",
    ("simharness.topology.pp_layout", "step"): "the step model's old path, for one release",
    ("simharness.launch.gpu_shim.dist", "capture"): "the one lazy gloo group, "
    "capture/lazy_group.py, reused for run's NCCL-like subgroups (its home belongs in launch/)",
}
REPLAY_IMPORTERS = {"simharness._cli.replay", "simharness._cli.datapath"}


def package(module: str) -> str:
    """``simharness.launch.toolbox`` -> ``launch``; ``simharness.config`` -> ``core``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else "core"


def violations(g: dict[str, set[str]]) -> list[str]:
    """Every import that breaks ``ALLOWED`` (less the named exceptions)."""
    out = []
    for mod, deps in sorted(g.items()):
        for dep in sorted(deps):
            a, b = package(mod), package(dep)
            if b not in ALLOWED[a] and (mod, b) not in EXCEPTIONS:
                out.append(f"{mod} ({a}) imports {dep} ({b})")
    return out


def test_each_package_imports_only_what_the_rules_allow():
    assert violations(graph()) == []


def test_the_rule_check_catches_a_forbidden_import():
    """A core module importing the process side, or topology importing the step model, is
    reported; the same edges inside the rules are not."""
    g = {"simharness.checks": {"simharness.launch.toolbox"},
         "simharness.topology.cost": {"simharness.step.engine"},
         "simharness.step.engine": {"simharness.topology.cost"},
         "simharness.launch.toolbox": {"simharness.errors"}}
    assert violations(g) == [
        "simharness.checks (core) imports simharness.launch.toolbox (launch)",
        "simharness.topology.cost (topology) imports simharness.step.engine (step)"]


def test_every_exception_is_still_needed():
    g = graph()
    for (mod, pkg), why in EXCEPTIONS.items():
        assert any(package(d) == pkg for d in g[mod]), f"{mod} -> {pkg} ({why}) is gone"


def test_only_replay_and_the_replay_commands_import_replay():
    importers = {m for m, deps in graph().items() if package(m) != "replay"
                 and any(package(d) == "replay" for d in deps)}
    assert importers == REPLAY_IMPORTERS


@pytest.mark.parametrize("name", ["torch.distributed", "torch"])
def test_torch_stays_on_the_process_side(name):
    """torch.distributed only on the process side; the core, topology, the step model and
    the CLI import no torch at all (the CLI starts ranks through the process side)."""
    offenders = sorted(m for m, names in external().items()
                       if package(m) not in PROCESS_SIDE
                       and any(n == name or n.startswith(name + ".") for n in names))
    assert offenders == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
