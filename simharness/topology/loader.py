"""Find, read and validate topology files.

A topology is named by the stem of a file in ``topologies/`` at the repository
root (``dgx-h100-superpod`` -> ``topologies/dgx-h100-superpod.toml``) or given
as a path to any TOML file that follows the schema in ``topologies/README.md``.

>>> spec = load_spec("dgx-h100")
>>> spec.node.gpus, spec.scale_up.domain_gpus, spec.scale_out.nics_per_node
(8, 8, 8)
>>> load_cluster("dgx-h100-superpod", nodes=32).graph().number_of_nodes()
553
"""

from __future__ import annotations

import importlib.resources
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport, a dependency there
    import tomli as tomllib

from .cluster import Cluster
from .errors import TopologyError
from .schema import TopologySpec, parse_spec

SUFFIX = ".toml"


def topology_dir() -> Path:
    """The shipped topologies: the package data ``simharness.topologies`` of an installed
    simharness (wheel or editable: ``topologies/`` at the repository root), else, in a
    source checkout that is on ``sys.path`` but not installed, ``topologies/`` beside it."""
    try:
        return Path(str(importlib.resources.files("simharness.topologies")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "topologies"


def list_topologies() -> list[str]:
    """Names of the shipped topologies, sorted."""
    return sorted(p.stem for p in topology_dir().glob(f"*{SUFFIX}"))


def _resolve(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    path = Path(text)
    looks_like_path = path.suffix == SUFFIX or "/" in text or "\\" in text
    if looks_like_path:
        if not path.is_file():
            raise TopologyError(f"topology file {text!r} does not exist; pass an existing "
                                f"{SUFFIX} file or one of: {', '.join(list_topologies())}")
        return path
    shipped = topology_dir() / f"{text}{SUFFIX}"
    if shipped.is_file():
        return shipped
    raise TopologyError(f"unknown topology {text!r}; known topologies: "
                        f"{', '.join(list_topologies())} (or pass a path to a {SUFFIX} file)")


def load_spec(name_or_path: str | Path) -> TopologySpec:
    """Read and validate one topology file; errors name the file and the field."""
    path = _resolve(name_or_path)
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise TopologyError(f"{path}: not valid TOML: {exc}", source=str(path)) from None
    except UnicodeDecodeError:
        raise TopologyError(f"{path}: not a text file (expected a topology TOML file); pass "
                            f"a {SUFFIX} file or a shipped name", source=str(path)) from None
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read: {exc.strerror}", source=str(path)) from None
    return parse_spec(data, str(path))


def load_cluster(name_or_path: str | Path | TopologySpec, nodes: int | None = None) -> Cluster:
    """A :class:`Cluster` of ``nodes`` nodes (the file's ``default_nodes`` if None)."""
    spec = name_or_path if isinstance(name_or_path, TopologySpec) else load_spec(name_or_path)
    return Cluster(spec, spec.default_nodes if nodes is None else nodes)


def load_graph(name_or_path: str | Path, nodes: int | None = None):
    """The networkx graph of a topology file at ``nodes`` nodes."""
    return load_cluster(name_or_path, nodes).graph()
