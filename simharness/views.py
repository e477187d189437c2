"""Whole-world views of a layout as numpy arrays (pure: data in, data out).

Everything here is vectorised over the ranks, so a world of 100,000+ ranks
costs arrays, not Python loops: the rank -> group index of a kind, the
per-rank rows of a CSV export, and which groups cross node boundaries.

>>> from simharness import ParallelismConfig, build_layout
>>> lay = build_layout(ParallelismConfig(world_size=8, tensor_model_parallel_size=2))
>>> group_index(lay, "tp").group.tolist()
[0, 0, 1, 1, 2, 2, 3, 3]
>>> node_spans(lay, "dp", gpus_per_node=4).n_nodes.tolist()
[2, 2]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RANK_COLUMNS = ("rank", "kind", "group_desc", "backend", "group", "position", "group_rank",
                "group_size")  # export CSV columns; rows by kind (creation order), then rank


@dataclass(frozen=True)
class GroupIndex:
    """Per rank of the world (index ``rank - rank_offset``): its group of one kind.

    ``group``, ``position`` (in Megatron's list) and ``group_rank`` (torch's rank
    in the group: position in the sorted list) are ``-1`` where the rank is in
    no group of the kind (``embd``, ``pos_embd``).
    """

    kind: str
    group: np.ndarray
    position: np.ndarray
    group_rank: np.ndarray

    @property
    def present(self) -> np.ndarray:
        return self.group >= 0


def group_index(layout, kind: str) -> GroupIndex:
    """The inverse index of ``layout.groups(kind)`` (one scatter, no search)."""
    arr = np.asarray(layout.groups(kind))
    world, offset = layout.world_size, layout.rank_offset
    group = np.full(world, -1, dtype=np.int64)
    position = np.full(world, -1, dtype=np.int64)
    group_rank = np.full(world, -1, dtype=np.int64)
    if arr.size:
        n, size = arr.shape
        flat = arr.ravel() - offset
        ok = (flat >= 0) & (flat < world)
        g = np.repeat(np.arange(n, dtype=np.int64), size)
        p = np.tile(np.arange(size, dtype=np.int64), n)
        if size > 1 and np.any(arr[:, 1:] < arr[:, :-1]):
            sorted_pos = np.argsort(np.argsort(arr, axis=1, kind="stable"), axis=1).ravel()
        else:
            sorted_pos = p
        idx = flat[ok]
        group[idx] = g[ok]
        position[idx] = p[ok]
        group_rank[idx] = sorted_pos[ok]
    return GroupIndex(kind, group, position, group_rank)


def kind_rows(layout, kind: str) -> np.ndarray:
    """The export's rows of one kind, by rank: ``(n, 5)`` int array of
    ``rank, group, position, group_rank, group_size`` (ranks in no group of the
    kind, as in the embedding groups, have no row).
    """
    ix = group_index(layout, kind)
    ranks = np.flatnonzero(ix.present)
    size = layout.source(kind).group_size
    return np.stack([ranks + layout.rank_offset, ix.group[ranks], ix.position[ranks],
                     ix.group_rank[ranks], np.full(ranks.size, size, dtype=np.int64)], axis=1)


@dataclass(frozen=True)
class NodeSpans:
    """Per group of one kind: the first and last node it touches and how many nodes.

    Node of a rank: ``(rank - rank_offset) // gpus_per_node``.
    """

    kind: str
    gpus_per_node: int
    first: np.ndarray
    last: np.ndarray
    n_nodes: np.ndarray

    @property
    def crossing(self) -> np.ndarray:
        """Indices of the groups that span more than one node."""
        return np.flatnonzero(self.n_nodes > 1)


def node_spans(layout, kind: str, gpus_per_node: int) -> NodeSpans:
    arr = np.asarray(layout.groups(kind))
    if arr.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return NodeSpans(kind, gpus_per_node, empty, empty, empty)
    nodes = np.sort((arr - layout.rank_offset) // gpus_per_node, axis=1)
    n_nodes = 1 + np.count_nonzero(np.diff(nodes, axis=1), axis=1)
    return NodeSpans(kind, gpus_per_node, nodes[:, 0], nodes[:, -1], n_nodes)


def collective_kinds(layout, impl: str = "unknown", sharding: str | None = None
                     ) -> dict[str, str]:
    """Which kind runs each optimizer collective (the same on every rank), for the
    data-parallel implementation ``impl`` (:meth:`Layout.resolve_collectives`).

    >>> from simharness import ParallelismConfig, build_layout
    >>> collective_kinds(build_layout(ParallelismConfig(world_size=4)))["dense_all_gather"]
    'dp_cp'
    """
    c = layout.resolve_collectives(layout.ranks.start, impl, sharding)
    return {"dense_reduce_scatter": c.dense_reduce_scatter.kind,
            "dense_all_gather": c.dense_all_gather.kind,
            "expert_reduce_scatter": c.expert_reduce_scatter.kind,
            "expert_all_gather": c.expert_all_gather.kind}
