"""Where a group kind's ranks come from: arrays for the world, arithmetic for one rank.

Every group kind is a :class:`GroupSource` with three operations:

* ``array()`` - all groups, ``(n_groups, group_size)``, Megatron's order (cached);
* ``locate(rank)`` - ``(group index, position)`` of ``rank`` or ``None`` when it
  is in no group of this kind, without building the array;
* ``members(g)`` - the ranks of group ``g``.

The sources mirror the ways ``initialize_model_parallel`` derives lists:
``Ortho`` (a ``RankGenerator`` token), ``Chunks`` (contiguous slices of each
parent group: partial-DP groups, hybrid DP-CP groups), ``Hierarchical``
(``create_hierarchical_groups`` levels), ``Pick`` (embedding groups: chosen
positions of each pipeline group) and ``Concat`` (the intra distributed-optimizer
instance group: consecutive parent groups joined).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from .grid import RANK_DTYPE, Grid


class GroupSource:
    """Base: subclasses define ``n_groups``, ``group_size`` and the three operations."""

    @property
    def n_groups(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def group_size(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def array(self) -> np.ndarray:
        cached = self.__dict__.get("_array")
        if cached is None:
            cached = self._build()
            cached.setflags(write=False)
            object.__setattr__(self, "_array", cached)
        return cached

    def fresh(self) -> np.ndarray:
        """``array()`` without caching it (nor any parent's array): the cached array when
        there is one, else a new one the caller may drop (memory bound of huge checks)."""
        cached = self.__dict__.get("_array")
        return cached if cached is not None else self._build(cache=False)

    def _parent_array(self, parent: GroupSource, cache: bool) -> np.ndarray:
        return parent.array() if cache else parent.fresh()

    def _build(self, cache: bool = True) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def locate(self, rank: int) -> tuple[int, int] | None:  # pragma: no cover
        raise NotImplementedError

    def members(self, g: int) -> np.ndarray:
        if "_array" in self.__dict__:
            return self.__dict__["_array"][g]
        return self._members(g)

    def _members(self, g: int) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def members_many(self, groups: np.ndarray) -> np.ndarray:
        """``(len(groups), group_size)``: the ranks of several groups at once."""
        if "_array" in self.__dict__:
            return self.__dict__["_array"][np.asarray(groups)]
        return self._members_many(np.asarray(groups))

    def _members_many(self, groups: np.ndarray) -> np.ndarray:
        rows = [self._members(int(g)) for g in groups]
        return np.stack(rows) if rows else np.zeros((0, self.group_size), dtype=RANK_DTYPE)

    def group_of(self, rank: int) -> np.ndarray | None:
        loc = self.locate(rank)
        return None if loc is None else self.members(loc[0])

    @property
    def partitions(self) -> bool:
        """True when every rank of the world is in exactly one group of this kind."""
        return True

    @property
    def sorted_members(self) -> bool:
        """True when every group lists its ranks in ascending order, so a rank's
        position in Megatron's list is also its torch group rank."""
        return False


@dataclass(frozen=True, eq=False)
class Ortho(GroupSource):
    """``RankGenerator.get_ranks(token)``."""

    grid: Grid
    token: str

    @property
    def n_groups(self) -> int:
        return self.grid.num_groups(self.token)

    @property
    def group_size(self) -> int:
        return self.grid.group_size(self.token)

    def _build(self, cache=True):
        return self.grid.groups(self.token, cache=cache)

    def locate(self, rank):
        r = int(rank) - self.grid.offset
        if not 0 <= r < self.grid.world_size:
            return None
        return self.grid.locate(self.token, rank)

    def _members(self, g):
        return self.grid.members(self.token, g)

    def _members_many(self, groups):
        return self.grid.members_many(self.token, groups)

    @property
    def sorted_members(self) -> bool:
        # In-group index runs over the masked dimensions leftmost fastest, and each
        # dimension's stride exceeds the largest sum of the strides before it.
        return True


@dataclass(frozen=True, eq=False)
class Chunks(GroupSource):
    """Each parent group cut into contiguous pieces of ``size`` ranks.

    >>> from .grid import Grid
    >>> dpcp = Ortho(Grid.from_sizes("tp-cp-dp", tp=1, cp=2, dp=2), "dp-cp")
    >>> Chunks(dpcp, 2).array().tolist()
    [[0, 1], [2, 3]]
    """

    parent: GroupSource
    size: int

    @property
    def per_parent(self) -> int:
        return self.parent.group_size // self.size

    @property
    def n_groups(self):
        return self.parent.n_groups * self.per_parent

    @property
    def group_size(self):
        return self.size

    def _build(self, cache=True):
        return self._parent_array(self.parent, cache).reshape(self.n_groups, self.size)

    def locate(self, rank):
        loc = self.parent.locate(rank)
        if loc is None:
            return None
        g, pos = loc
        return g * self.per_parent + pos // self.size, pos % self.size

    def _members(self, g):
        p, c = divmod(int(g), self.per_parent)
        return self.parent.members(p)[c * self.size:(c + 1) * self.size]

    @property
    def sorted_members(self) -> bool:  # contiguous slices of ascending lists
        return self.parent.sorted_members


@dataclass(frozen=True, eq=False)
class Hierarchical(GroupSource):
    """Level ``level`` of Megatron's ``create_hierarchical_groups(ranks, sizes)``.

    Each parent group (length ``prod(sizes)``) is rearranged
    ``(l s u) -> (l u) s`` with ``u = prod(sizes[:level])``, ``s = sizes[level]``,
    ``l = prod(sizes[level+1:])``; rows are groups.

    >>> from .grid import Grid
    >>> p = Ortho(Grid.from_sizes("tp-cp", tp=1, cp=4), "cp")
    >>> Hierarchical(p, (2, 2), 1).array().tolist()
    [[0, 2], [1, 3]]
    """

    parent: GroupSource
    sizes: tuple[int, ...]
    level: int

    @property
    def u(self):
        return math.prod(self.sizes[:self.level])

    @property
    def s(self):
        return self.sizes[self.level]

    @property
    def l(self):  # noqa: E743
        return math.prod(self.sizes[self.level + 1:])

    @property
    def per_parent(self):
        return self.l * self.u

    @property
    def n_groups(self):
        return self.parent.n_groups * self.per_parent

    @property
    def group_size(self):
        return self.s

    def _build(self, cache=True):
        a = self._parent_array(self.parent, cache)
        a = a.reshape(self.parent.n_groups, self.l, self.s, self.u)
        return np.ascontiguousarray(a.transpose(0, 1, 3, 2)).reshape(self.n_groups, self.s)

    def locate(self, rank):
        loc = self.parent.locate(rank)
        if loc is None:
            return None
        g, p = loc
        su = self.s * self.u
        row = (p // su) * self.u + p % self.u
        return g * self.per_parent + row, (p // self.u) % self.s

    def _members(self, g):
        p, row = divmod(int(g), self.per_parent)
        li, ui = divmod(row, self.u)
        parent = self.parent.members(p)
        return parent[li * self.s * self.u + ui + self.u * np.arange(self.s)]

    @property
    def sorted_members(self) -> bool:  # increasing positions of an ascending parent list
        return self.parent.sorted_members


@dataclass(frozen=True, eq=False)
class Pick(GroupSource):
    """Chosen positions of each parent group (``get_embedding_ranks``).

    ``positions`` may be negative (``-1`` = last); duplicates collapse, as in
    Megatron's default (``[first]`` when the pipeline has one stage).
    """

    parent: GroupSource
    positions: tuple[int, ...]

    @property
    def resolved(self) -> tuple[int, ...]:
        n = self.parent.group_size
        out = []
        for p in self.positions:
            q = p % n
            if q not in out:
                out.append(q)
        return tuple(out)

    @property
    def n_groups(self):
        return self.parent.n_groups

    @property
    def group_size(self):
        return len(self.resolved)

    @property
    def partitions(self):
        return self.group_size == self.parent.group_size

    def _build(self, cache=True):
        return np.ascontiguousarray(self._parent_array(self.parent, cache)[:, list(self.resolved)])

    def locate(self, rank):
        loc = self.parent.locate(rank)
        if loc is None:
            return None
        g, p = loc
        res = self.resolved
        return (g, res.index(p)) if p in res else None

    def _members(self, g):
        return self.parent.members(g)[list(self.resolved)]

    @property
    def sorted_members(self) -> bool:
        res = self.resolved
        return self.parent.sorted_members and all(a < b for a, b in pairwise(res))


@dataclass(frozen=True, eq=False)
class Concat(GroupSource):
    """Every ``k`` consecutive parent groups joined into one group.

    >>> from .grid import Grid
    >>> p = Ortho(Grid.from_sizes("tp-dp", tp=2, dp=2), "tp")
    >>> Concat(p, 2).array().tolist()
    [[0, 1, 2, 3]]
    """

    parent: GroupSource
    k: int

    @property
    def n_groups(self):
        return self.parent.n_groups // self.k

    @property
    def group_size(self):
        return self.parent.group_size * self.k

    def _build(self, cache=True):
        return self._parent_array(self.parent, cache).reshape(self.n_groups, self.group_size)

    def locate(self, rank):
        loc = self.parent.locate(rank)
        if loc is None:
            return None
        g, p = loc
        return g // self.k, (g % self.k) * self.parent.group_size + p

    def _members(self, g):
        first = int(g) * self.k  # one vectorised call, not k Python-level ones
        return self.parent.members_many(np.arange(first, first + self.k)).ravel()

    @property
    def sorted_members(self) -> bool:  # joined lists need not ascend ([0,1,4,5,2,3,6,7])
        return self.k == 1 and self.parent.sorted_members


@dataclass(frozen=True, eq=False)
class Fixed(GroupSource):
    """Groups given as an explicit array (layouts read back from JSON)."""

    data: np.ndarray
    world: range = field(default=range(0))
    # Set by __post_init__: (group, position) per rank of the world (-1: in no group) and
    # {rank outside the world: (group, position)}; whether every group ascends.
    _inverse: tuple[np.ndarray, np.ndarray, dict[int, tuple[int, int]]] = field(
        init=False, repr=False)
    _sorted: bool = field(init=False, repr=False)

    def __post_init__(self):
        arr = np.asarray(self.data, dtype=RANK_DTYPE)
        if arr.ndim != 2:
            arr = arr.reshape(len(arr), -1)
        arr.setflags(write=False)
        object.__setattr__(self, "data", arr)
        object.__setattr__(self, "_array", arr)
        # Inverse index (rank -> first group and position holding it), vectorised;
        # ranks outside the world (a corrupted plan) go to a small dict.
        start, size = self.world.start, len(self.world)
        flat = arr.ravel() - start
        n_rows, width = arr.shape if arr.size else (0, 0)
        g_of = np.repeat(np.arange(n_rows, dtype=RANK_DTYPE), width)
        p_of = np.tile(np.arange(width, dtype=RANK_DTYPE), n_rows)
        inside = (flat >= 0) & (flat < size)
        inv_g = np.full(size, -1, dtype=RANK_DTYPE)
        inv_p = np.full(size, -1, dtype=RANK_DTYPE)
        idx = np.flatnonzero(inside)[::-1]  # reversed: the first occurrence wins
        inv_g[flat[idx]] = g_of[idx]
        inv_p[flat[idx]] = p_of[idx]
        outside: dict[int, tuple[int, int]] = {}
        for i in np.flatnonzero(~inside)[::-1]:
            outside[int(flat[i]) + start] = (int(g_of[i]), int(p_of[i]))
        object.__setattr__(self, "_inverse", (inv_g, inv_p, outside))
        object.__setattr__(self, "_sorted", bool(arr.shape[1] < 2 or
                                                 (np.diff(arr, axis=1) > 0).all()))

    @property
    def n_groups(self):
        return self.data.shape[0]

    @property
    def group_size(self):
        return self.data.shape[1] if self.data.size else 0

    def _build(self, cache=True):
        return self.data

    def locate(self, rank):
        inv_g, inv_p, outside = self._inverse
        r = int(rank) - self.world.start
        if 0 <= r < len(inv_g):
            return None if inv_g[r] < 0 else (int(inv_g[r]), int(inv_p[r]))
        return outside.get(int(rank))

    @property
    def sorted_members(self) -> bool:
        return self._sorted

    def _members(self, g):
        return self.data[g]
