"""The numbers behind the command line's reports (pure: data in, data out).

The ``simharness`` commands format what these functions compute: the verdict
of a list of findings and its JSON report, which kinds repeat an earlier kind's
groups, a kind's groups on a node-by-GPU grid, what a diff changed, and the
versions of the installed packages.

>>> from simharness import ParallelismConfig, build_layout, check
>>> lay = build_layout(ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
...                                      context_parallel_size=4))
>>> findings_exit_code(check(lay), strict=False)
0
>>> g = node_grid(lay, "dp_cp", gpus_per_node=4)
>>> g.n_nodes, g.crossing.size, g.partial
(4, 2, 0)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .findings import SEVERITIES
from .views import group_index, node_spans


# ---------------------------------------------------------------- findings
def severity_counts(findings: Iterable[Any]) -> dict[str, int]:
    """How many findings of each severity, in the order error, warning, info."""
    findings = list(findings)
    return {s: sum(1 for f in findings if f.severity == s) for s in SEVERITIES}


def findings_exit_code(findings: Iterable[Any], strict: bool) -> int:
    """1 when a finding fails (an error, or a warning under ``strict``), else 0."""
    sev = {f.severity for f in findings}
    return 1 if "error" in sev or (strict and "warning" in sev) else 0


def findings_report(findings: Sequence[Any], strict: bool, **extra: Any) -> dict[str, Any]:
    """The JSON report of a check: ``extra`` keys first, then the counts, verdict, findings."""
    return {**extra, "strict": strict, "counts": severity_counts(findings),
            "exit_code": findings_exit_code(findings, strict),
            "findings": [f.to_dict() for f in findings]}


# ------------------------------------------------------------------- kinds
def same_groups_as(layout, kind: str, earlier: Iterable[str]) -> str | None:
    """The first of ``earlier`` kinds with the very same groups as ``kind`` (the Gloo twins,
    the 0.16 all-gather groups), or None. Arrays above 1M entries are compared only when
    they are the same object."""
    earlier = list(earlier)
    src = layout.source(kind)
    for other in earlier:
        if layout.source(other) is src:
            return other
    arr = layout.groups(kind)
    for other in earlier:
        o = layout.groups(other)
        if o.shape == arr.shape and o.size <= 1 << 20 and np.array_equal(o, arr):
            return other
    return None


# -------------------------------------------------------------------- grid
@dataclass(frozen=True)
class NodeGrid:
    """One kind's groups on ``n_nodes`` nodes of ``gpus_per_node`` GPUs (ranks in order).

    ``group[r]`` is the group of the ``r``-th rank of the layout (-1: in none),
    ``crosses[r]`` whether that group spans nodes; ``spans`` per group (first node,
    last node, node count); ``partial`` the ranks on a last node that is not full
    (0 when every node is full).
    """

    kind: str
    gpus_per_node: int
    world_size: int
    n_nodes: int
    group: np.ndarray
    crosses: np.ndarray
    spans: Any  # simharness.views.NodeSpans

    @property
    def crossing(self) -> np.ndarray:
        """Indices of the groups that span more than one node."""
        return self.spans.crossing

    @property
    def n_groups(self) -> int:
        return int(self.spans.n_nodes.size)

    @property
    def partial(self) -> int:
        return self.world_size % self.gpus_per_node

    def node_ranks(self, node: int) -> range:
        """The positions (rank minus rank offset) on ``node``."""
        return range(node * self.gpus_per_node,
                     min(self.world_size, (node + 1) * self.gpus_per_node))


def node_grid(layout, kind: str, gpus_per_node: int) -> NodeGrid:
    """Where ``kind``'s groups sit on nodes of ``gpus_per_node`` GPUs."""
    idx = group_index(layout, kind)
    spans = node_spans(layout, kind, gpus_per_node)
    world = layout.world_size
    crosses = np.zeros(world, dtype=bool)
    ok = idx.present
    crosses[ok] = spans.n_nodes[idx.group[ok]] > 1
    return NodeGrid(kind, gpus_per_node, world, -(-world // gpus_per_node), idx.group, crosses,
                    spans)


# -------------------------------------------------------------------- diff
def communicator_deltas(d) -> np.ndarray:
    """The distinct non-zero changes of communicators per rank of a
    :class:`~simharness.diff.LayoutDiff` (B minus A, ascending)."""
    ca, cb = d.communicators
    delta = (cb.astype(np.int64) - ca) if ca.size else ca
    return np.unique(delta[delta != 0])


def kind_change_counts(d) -> dict[str, int]:
    """How many kinds a :class:`~simharness.diff.LayoutDiff` added, removed, changed and
    left unchanged."""
    ck = d.changed_kinds
    counts = {s: sum(1 for k in ck if k.status == s) for s in ("added", "removed", "changed")}
    counts["unchanged"] = len(d.kinds) - len(ck)
    return counts


# ---------------------------------------------------------------- versions
def versions() -> dict[str, Any]:
    """simharness, torch, megatron-core (None when not installed), the API profiles, numpy,
    click and Python versions."""
    import sys
    from importlib import metadata

    from . import __version__
    from .config import DEFAULT_MCORE, MCORE_PROFILES

    def installed(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"simharness": __version__, "torch": installed("torch"),
            "megatron_core": installed("megatron-core"), "mcore_profiles": list(MCORE_PROFILES),
            "default_mcore": DEFAULT_MCORE, "numpy": np.__version__,
            "click": installed("click"), "python": sys.version.split()[0]}
