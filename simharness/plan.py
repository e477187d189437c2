"""The ordered ``new_group`` calls, kept as blocks of arrays.

``initialize_model_parallel`` calls ``new_group`` on every rank for every
group, in loops such as::

    for ranks in dp_cp_lists:           # Loop, one iteration per dp-cp group
        new_group(ranks)                #   Step(1, [dp_cp, dp_cp_ag, dp_cp_gloo])
        ...
        for i in range(n):              #   Step(n, [intra_dp_cp, intra_dp_cp_gloo])
            new_group(ranks[i*k:(i+1)*k])

A :class:`Loop` has ``n_iter`` iterations; each iteration runs its steps in
turn; a :class:`Step` emits ``n_sub`` rows of each of its entries, entries
interleaved row by row. :class:`CreationOrder` walks the loops lazily and
makes a :class:`GroupCreation` only when one is asked for, so a world of a
million ranks (millions of groups) costs arrays, not objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .sources import GroupSource


class GroupCreation(NamedTuple):
    """One ``new_group`` call: ``kind`` (short name), Megatron's ``group_desc``,
    the ranks in the order Megatron passes them, and the backend."""

    kind: str
    desc: str
    ranks: tuple[int, ...]
    backend: str


@dataclass(frozen=True, eq=False)
class Entry:
    kind: str
    desc: str
    backend: str
    source: GroupSource


@dataclass(frozen=True, eq=False)
class Step:
    n_sub: int
    entries: tuple[Entry, ...]

    @property
    def length(self) -> int:
        return self.n_sub * len(self.entries)


@dataclass(frozen=True, eq=False)
class Loop:
    n_iter: int
    steps: tuple[Step, ...]

    @property
    def per_iter(self) -> int:
        return sum(s.length for s in self.steps)

    @property
    def length(self) -> int:
        return self.n_iter * self.per_iter

    @property
    def entries(self) -> tuple[Entry, ...]:
        return tuple(e for s in self.steps for e in s.entries)

    @classmethod
    def simple(cls, *entries: Entry) -> Loop:
        """One group per iteration for each entry (all entries same group count)."""
        return cls(entries[0].source.n_groups, (Step(1, tuple(entries)),))


class CreationOrder(Sequence):
    """Lazy sequence of :class:`GroupCreation`, in Megatron's call order."""

    def __init__(self, loops: Sequence[Loop]):
        self.loops = tuple(lp for lp in loops if lp.length)
        starts, acc = [], 0
        for lp in self.loops:
            starts.append(acc)
            acc += lp.length
        self._starts = starts
        self._len = acc

    def __len__(self) -> int:
        return self._len

    @staticmethod
    def _make(entry: Entry, row: int) -> GroupCreation:
        return GroupCreation(entry.kind, entry.desc,
                             tuple(int(x) for x in entry.source.members(row)), entry.backend)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise IndexError(index)
        import bisect

        li = bisect.bisect_right(self._starts, i) - 1
        lp = self.loops[li]
        it, off = divmod(i - self._starts[li], lp.per_iter)
        for step in lp.steps:
            if off < step.length:
                sub, e = divmod(off, len(step.entries))
                return self._make(step.entries[e], it * step.n_sub + sub)
            off -= step.length
        raise AssertionError("unreachable")  # pragma: no cover

    def __iter__(self) -> Iterator[GroupCreation]:
        for lp in self.loops:
            arrays = [[e.source.array() for e in s.entries] for s in lp.steps]
            for it in range(lp.n_iter):
                for step, arrs in zip(lp.steps, arrays, strict=True):
                    for sub in range(step.n_sub):
                        row = it * step.n_sub + sub
                        for e, a in zip(step.entries, arrs, strict=True):
                            yield GroupCreation(e.kind, e.desc, tuple(a[row].tolist()), e.backend)

    def entries(self) -> tuple[Entry, ...]:
        return tuple(e for lp in self.loops for e in lp.entries)

    def count_by_kind(self) -> dict[str, int]:
        return {e.kind: e.source.n_groups for e in self.entries()}

    def __repr__(self) -> str:
        return f"CreationOrder({self._len} new_group calls, {len(self.entries())} kinds)"


def kind_count(loops: Sequence[Loop]) -> int:
    """The group kinds the loops create (the kinds of a :class:`CreationOrder` of them)."""
    return sum(len(lp.entries) for lp in loops if lp.length)
