"""Compare two layouts: groups added and removed per kind, communicators per
rank, and the ranks whose all-gather group changes (pure: data in, data out).

Groups are compared as rank *sets* (torch's ``new_group`` sorts its ranks);
everything is vectorised, so two worlds of 100,000+ ranks compare in well
under a second.

>>> from simharness import ParallelismConfig, build_layout
>>> cfg = ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
...                         pipeline_model_parallel_size=2, context_parallel_size=2)
>>> d = diff_layouts(build_layout(cfg), build_layout(cfg.replace(create_all_gather_group=True)))
>>> [k.kind for k in d.changed_kinds], d.new_group_calls
(['dp_cp_ag'], (159, 163))
>>> d.all_gather["dense"].kinds, d.all_gather["dense"].ranks_changed.size
(('dp_cp', 'dp_cp_ag'), 16)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .views import collective_kinds, group_index


def _row_keys(arr: np.ndarray) -> np.ndarray:
    """One hashable/sortable key per group: its sorted ranks as raw bytes."""
    arr = np.asarray(arr, dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] == 0:
        return np.zeros(arr.shape[0] if arr.ndim else 0, dtype="V8")
    s = np.ascontiguousarray(np.sort(arr, axis=1))
    return s.view(np.dtype((np.void, 8 * s.shape[1]))).ravel()


def _present(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each group (row) of ``a``: is the same rank set a group of ``b``?"""
    if a.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    if b.shape[0] == 0 or a.shape[1] != b.shape[1]:
        return np.zeros(a.shape[0], dtype=bool)
    if a is b or (a.shape == b.shape and np.array_equal(a, b)):  # the common case: unchanged
        return np.ones(a.shape[0], dtype=bool)
    return np.isin(_row_keys(a), _row_keys(b))


@dataclass(frozen=True)
class KindDiff:
    """One group kind in the two layouts (``None`` fields where a side lacks it)."""

    kind: str
    desc: tuple[str | None, str | None]
    backend: tuple[str | None, str | None]
    n_groups: tuple[int, int]
    group_size: tuple[int | None, int | None]
    added: np.ndarray      # groups of B whose rank set is not a group of A (B's order)
    removed: np.ndarray    # groups of A whose rank set is not a group of B (A's order)

    @property
    def in_a(self) -> bool:
        return self.desc[0] is not None

    @property
    def in_b(self) -> bool:
        return self.desc[1] is not None

    @property
    def changed(self) -> bool:
        return (len(self.added) > 0 or len(self.removed) > 0 or self.in_a != self.in_b
                or self.desc[0] != self.desc[1] or self.backend[0] != self.backend[1])

    @property
    def status(self) -> str:
        if not self.in_a:
            return "added"
        if not self.in_b:
            return "removed"
        return "changed" if self.changed else "same"

    def to_dict(self, limit: int | None = None) -> dict:
        def rows(a):
            a = np.asarray(a)
            return a.tolist() if limit is None else a[:limit].tolist()

        return {"kind": self.kind, "status": self.status,
                "desc": list(self.desc), "backend": list(self.backend),
                "n_groups": list(self.n_groups), "group_size": list(self.group_size),
                "n_added": int(len(self.added)), "n_removed": int(len(self.removed)),
                "added": rows(self.added), "removed": rows(self.removed)}


@dataclass(frozen=True)
class AllGatherDiff:
    """Where the parameter all-gather runs (dense or expert) before and after.

    ``kinds``: the all-gather's kind in A and B; ``shared``: whether it is the
    reduce-scatter's own communicator (so the two serialise). Per rank (of the
    ranks both layouts cover): ``ranks_members_changed`` - the all-gather group
    has other ranks; ``ranks_changed`` - other ranks *or* another communicator.
    """

    which: str
    kinds: tuple[str, str]
    shared: tuple[bool, bool]
    ranks_members_changed: np.ndarray
    ranks_changed: np.ndarray

    @property
    def changed(self) -> bool:
        return self.ranks_changed.size > 0

    def to_dict(self, limit: int | None = None) -> dict:
        def ranks(a):
            return a.tolist() if limit is None else a[:limit].tolist()

        return {"kinds": list(self.kinds), "shared_with_reduce_scatter": list(self.shared),
                "n_ranks_changed": int(self.ranks_changed.size),
                "n_ranks_members_changed": int(self.ranks_members_changed.size),
                "ranks_changed": ranks(self.ranks_changed),
                "ranks_members_changed": ranks(self.ranks_members_changed)}


@dataclass(frozen=True)
class LayoutDiff:
    a: Any
    b: Any
    config_changes: dict[str, tuple[Any, Any]]
    kinds: list[KindDiff]
    new_group_calls: tuple[int, int]
    communicators: tuple[np.ndarray, np.ndarray]   # total per rank, over the common ranks
    common_ranks: range
    all_gather: dict[str, AllGatherDiff] = field(default_factory=dict)

    @property
    def changed_kinds(self) -> list[KindDiff]:
        return [k for k in self.kinds if k.changed]

    @property
    def ranks_communicators_changed(self) -> np.ndarray:
        ca, cb = self.communicators
        return np.flatnonzero(ca != cb) + self.common_ranks.start

    @property
    def identical(self) -> bool:
        return (not self.changed_kinds and self.new_group_calls[0] == self.new_group_calls[1]
                and self.a.world_size == self.b.world_size)

    def to_dict(self, limit: int | None = None) -> dict:
        ca, cb = self.communicators

        def dist(c):
            values, counts = np.unique(c, return_counts=True)
            return {str(int(v)): int(n) for v, n in zip(values, counts, strict=True)}

        changed = self.ranks_communicators_changed
        return {
            "a": {"mcore": self.a.mcore, "world_size": self.a.world_size,
                  "order": self.a.config.order},
            "b": {"mcore": self.b.mcore, "world_size": self.b.world_size,
                  "order": self.b.config.order},
            "identical": self.identical,
            "config_changes": {k: list(v) for k, v in self.config_changes.items()},
            "new_group_calls": list(self.new_group_calls),
            "communicators_per_rank": {
                "a": dist(ca), "b": dist(cb),
                "n_ranks_changed": int(changed.size),
                "ranks_changed": changed.tolist() if limit is None else changed[:limit].tolist()},
            "kinds": [k.to_dict(limit) for k in self.kinds if k.changed],
            "unchanged_kinds": [k.kind for k in self.kinds if not k.changed],
            "all_gather": {w: d.to_dict(limit) for w, d in self.all_gather.items()},
        }


def _config_changes(a, b) -> dict[str, tuple[Any, Any]]:
    da, db = a.config.to_dict(), b.config.to_dict()
    out = {k: (da.get(k), db.get(k)) for k in da if da.get(k) != db.get(k)}
    if a.mcore != b.mcore:
        out = {"mcore": (a.mcore, b.mcore), **out}
    return out


def _totals(layout, common: range) -> np.ndarray:
    comm = layout.communicators_per_rank()
    total = comm["nccl"] + comm["gloo"]
    lo = common.start - layout.rank_offset
    return total[lo:lo + len(common)]


def _all_gather(a, b, which: str, ka: dict, kb: dict, common: range) -> AllGatherDiff:
    ag_a, ag_b = ka[f"{which}_all_gather"], kb[f"{which}_all_gather"]
    rs_a, rs_b = ka[f"{which}_reduce_scatter"], kb[f"{which}_reduce_scatter"]
    n = len(common)
    ga, gb = np.asarray(a.groups(ag_a)), np.asarray(b.groups(ag_b))
    ia, ib = group_index(a, ag_a), group_index(b, ag_b)
    lo_a, lo_b = common.start - a.rank_offset, common.start - b.rank_offset
    gid_a, gid_b = ia.group[lo_a:lo_a + n], ib.group[lo_b:lo_b + n]
    present = _present(ga, gb)  # A's group also a group of B (B's kind partitions the ranks)
    same_members = np.zeros(n, dtype=bool)
    have = (gid_a >= 0) & (gid_b >= 0)
    same_members[have] = present[gid_a[have]]
    # Both sides absent counts as unchanged.
    same_members |= (gid_a < 0) & (gid_b < 0)
    members_changed = np.flatnonzero(~same_members) + common.start
    # Another communicator: a different kind, or a shared/own switch, or other ranks.
    comm_same = same_members & (ag_a == ag_b) & ((ag_a == rs_a) == (ag_b == rs_b))
    changed = np.flatnonzero(~comm_same) + common.start
    return AllGatherDiff(which, (ag_a, ag_b), (ag_a == rs_a, ag_b == rs_b), members_changed,
                         changed)


def all_gather_diffs(a, b, impl: str = "unknown", sharding: str | None = None
                     ) -> dict[str, AllGatherDiff]:
    """Where the dense and expert parameter all-gather run in ``a`` and ``b`` for the
    data-parallel implementation ``impl`` (``"unknown"``: as Megatron-FSDP, the AG
    group's one reader, runs it; :mod:`simharness.ag_readers`)."""
    lo = max(a.ranks.start, b.ranks.start)
    common = range(lo, max(lo, min(a.ranks.stop, b.ranks.stop)))
    ka, kb = collective_kinds(a, impl, sharding), collective_kinds(b, impl, sharding)
    return {w: _all_gather(a, b, w, ka, kb, common) for w in ("dense", "expert")}


def diff_layouts(a, b, impl: str = "unknown", sharding: str | None = None) -> LayoutDiff:
    """Everything that differs between layout ``a`` (before) and ``b`` (after); the
    all-gather for the data-parallel implementation ``impl`` (see :func:`all_gather_diffs`)."""
    order = list(a.kinds) + [k for k in b.kinds if not a.has(k)]
    kinds = []
    empty = np.zeros((0, 0), dtype=np.int64)
    for k in order:
        in_a, in_b = a.has(k), b.has(k)
        ga = np.asarray(a.groups(k)) if in_a else empty
        gb = np.asarray(b.groups(k)) if in_b else empty
        removed = ga[~_present(ga, gb)] if in_a else empty
        added = gb[~_present(gb, ga)] if in_b else empty
        kinds.append(KindDiff(
            kind=k,
            desc=(a.desc(k) if in_a else None, b.desc(k) if in_b else None),
            backend=(a.backend(k) if in_a else None, b.backend(k) if in_b else None),
            n_groups=(int(ga.shape[0]), int(gb.shape[0])),
            group_size=(int(ga.shape[1]) if in_a else None, int(gb.shape[1]) if in_b else None),
            added=added, removed=removed))
    lo = max(a.ranks.start, b.ranks.start)
    hi = min(a.ranks.stop, b.ranks.stop)
    common = range(lo, max(lo, hi))
    return LayoutDiff(
        a=a, b=b, config_changes=_config_changes(a, b), kinds=kinds,
        new_group_calls=(len(a.creation_order), len(b.creation_order)),
        communicators=(_totals(a, common), _totals(b, common)), common_ranks=common,
        all_gather=all_gather_diffs(a, b, impl, sharding))
