"""A vectorised equivalent of Megatron-Core's ``RankGenerator``.

Megatron's ``generate_masked_orthogonal_rank_groups(world, sizes, mask)``
enumerates, for every value of the *unmasked* dimensions (leftmost fastest),
one group whose members run over the *masked* dimensions (leftmost fastest);
dimension ``k`` has stride ``prod(sizes[:k])``. Here the same groups come out of
one ``transpose`` + ``reshape`` of ``arange(world)``, and a single rank's group
is found arithmetically.

Worked example, W=16, tp=2, cp=2, dp=2, pp=2, order ``tp-cp-ep-dp-pp``
(``rank = tp + 2*cp + 4*dp + 8*pp``):

>>> g = Grid.from_sizes("tp-cp-ep-dp-pp", tp=2, cp=2, ep=1, dp=2, pp=2)
>>> g.groups("dp-cp").tolist()
[[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
>>> g.locate("dp-cp", 12)
(2, 2)
>>> g.members("dp-cp", 2).tolist()
[8, 10, 12, 14]

Like Megatron, a dimension of size 1 missing from the order is appended, the
token order inside a query does not matter (``dp-cp`` == ``cp-dp``) and
``rank_offset`` is added to every rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import LayoutError

RANK_DTYPE = np.int64

# initialize_model_parallel's default ``order``; create_all_gather_groups() (0.18+)
# hard-codes the same string (and rank_offset 0) for its generators.
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


@dataclass(frozen=True)
class Grid:
    """Dimension names, sizes (in order-string order) and a rank offset."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    offset: int = 0

    # ---------------------------------------------------------------- build
    @classmethod
    def from_sizes(cls, order: str, offset: int = 0, **sizes: int) -> Grid:
        """Megatron's ``RankGenerator(order=..., **sizes, rank_offset=offset)``.

        Unknown tokens and dimensions of size > 1 missing from the order raise
        :class:`LayoutError`; size-1 dimensions missing are appended in the
        order Megatron iterates its ``name_to_size`` dict (the keyword order).
        """
        low = order.lower()
        for name, size in sizes.items():
            if name not in low:
                if size != 1:
                    raise LayoutError(
                        f"order {order!r} has no {name!r} but its size is {size}; add it.",
                        megatron_error="RuntimeError", order=order)
                low = f"{low}-{name}"
        names = tuple(low.split("-"))
        for t in names:
            if t not in sizes:
                raise LayoutError(f"order {order!r} has unknown token {t!r}.",
                                  megatron_error="KeyError", order=order)
        return cls(names, tuple(int(sizes[t]) for t in names), int(offset))

    @classmethod
    def dense(cls, order: str, *, tp: int, pp: int, dp: int, cp: int, gtp: int = 1,
              offset: int = 0, gtp_token: bool = False) -> Grid:
        """The decoder generator of ``initialize_model_parallel`` (``ep=1``).

        ``gtp_token`` adds the 0.19 ``gtp_remat`` dimension (see ``profiles``); a GTP size
        ``gtp`` > 1 or the token in ``order`` adds it anyway.
        """
        sizes = dict(tp=tp, pp=pp, dp=dp, ep=1, cp=cp)
        return cls._generator(order, offset, sizes, gtp, "tp", gtp_token)

    @classmethod
    def expert(cls, order: str, *, etp: int, ep: int, pp: int, edp: int, egtp: int = 1,
               offset: int = 0, gtp_token: bool = False) -> Grid:
        """The expert generator: ``tp=etp, ep, dp=expert dp, pp, cp=1``."""
        sizes = dict(tp=etp, pp=pp, dp=edp, ep=ep, cp=1)
        return cls._generator(order, offset, sizes, egtp, "ep", gtp_token)

    @classmethod
    def _generator(cls, order: str, offset: int, sizes: dict[str, int], gtp: int, after: str,
                   gtp_token: bool) -> Grid:
        """A generator of a *validated* configuration; a token the order repeats counts once.

        Megatron accepts a repeated token only when the repeat changes no group (its size
        is 1, or every dimension after it has size 1; ``rules`` rejects the rest), so the
        first occurrence alone gives Megatron's groups.
        """
        if gtp_token or gtp > 1 or "gtp_remat" in order.split("-"):
            sizes["gtp_remat"] = gtp
            order = inject_gtp(order, after=after)
        return cls.from_sizes(first_occurrences(order), offset, **sizes)

    # ------------------------------------------------------------- geometry
    @property
    def world_size(self) -> int:
        return math.prod(self.sizes)

    @property
    def strides(self) -> tuple[int, ...]:
        out, acc = [], 1
        for s in self.sizes:
            out.append(acc)
            acc *= s
        return tuple(out)

    def _mask(self, token: str) -> tuple[int, ...]:
        """Indices of the dimensions named in ``token`` (Megatron's ``get_mask``)."""
        idx = []
        for t in token.lower().split("-"):
            try:
                idx.append(self.names.index(t))
            except ValueError:
                raise LayoutError(
                    f"token {t!r} is not a dimension of order {'-'.join(self.names)!r}",
                    megatron_error="ValueError") from None
        return tuple(sorted(set(idx)))

    def group_size(self, token: str) -> int:
        return math.prod(self.sizes[i] for i in self._mask(token))

    def num_groups(self, token: str) -> int:
        return self.world_size // self.group_size(token)

    # --------------------------------------------------------------- groups
    def groups(self, token: str, *, cache: bool = True) -> np.ndarray:
        """All groups of ``token`` as an ``(n_groups, group_size)`` array, Megatron's order.

        ``cache=False`` builds a fresh array and keeps no reference to it (huge worlds:
        ``check`` builds, uses and drops one kind at a time).
        """
        build = _groups if cache else _groups.__wrapped__
        return build(self.names, self.sizes, self._mask(token), self.offset)

    def same_groups(self, other: Grid, token: str) -> bool:
        a, b = self.groups(token), other.groups(token)
        return a.shape == b.shape and bool(np.array_equal(a, b))

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinate of ``rank`` along every dimension.

        >>> Grid.from_sizes("tp-cp-ep-dp-pp", tp=2, cp=2, ep=1, dp=2, pp=2).coords(5)
        {'tp': 1, 'cp': 0, 'ep': 0, 'dp': 1, 'pp': 0}
        """
        r = int(rank) - self.offset
        if not 0 <= r < self.world_size:
            raise LayoutError(
                f"rank {rank} is outside this layout (ranks {self.offset}.."
                f"{self.offset + self.world_size - 1}); pick a rank in that range.", rank=rank)
        dims = zip(self.names, self.sizes, self.strides, strict=True)
        return {n: (r // st) % s for n, s, st in dims}

    def locate(self, token: str, rank: int) -> tuple[int, int]:
        """``(group index, position in group)`` of ``rank`` for ``token``, in O(dims)."""
        c = self.coords(rank)
        mask = self._mask(token)
        g = pos = 0
        gm = gu = 1
        for i, (n, s) in enumerate(zip(self.names, self.sizes, strict=True)):
            if i in mask:
                pos += c[n] * gm
                gm *= s
            else:
                g += c[n] * gu
                gu *= s
        return g, pos

    def members(self, token: str, group_index: int) -> np.ndarray:
        """The ranks of group ``group_index`` of ``token`` in O(group size)."""
        mask = self._mask(token)
        base = self.offset
        rest = int(group_index)
        for i, (s, st) in enumerate(zip(self.sizes, self.strides, strict=True)):
            if i not in mask:
                base += (rest % s) * st
                rest //= s
        return base + _masked_offsets(self.sizes, self.strides, mask)

    def members_many(self, token: str, group_indices) -> np.ndarray:
        """``(len(group_indices), group_size)``: :meth:`members` of many groups, vectorised."""
        mask = self._mask(token)
        rest = np.asarray(group_indices, dtype=RANK_DTYPE).copy()
        base = np.full(rest.shape, self.offset, dtype=RANK_DTYPE)
        for i, (s, st) in enumerate(zip(self.sizes, self.strides, strict=True)):
            if i not in mask:
                base += (rest % s) * st
                rest //= s
        return base[:, None] + _masked_offsets(self.sizes, self.strides, mask)[None, :]


@lru_cache(maxsize=256)
def _masked_offsets(sizes: tuple[int, ...], strides: tuple[int, ...],
                    mask: tuple[int, ...]) -> np.ndarray:
    off = np.zeros(1, dtype=RANK_DTYPE)
    for i in mask:  # leftmost fastest: later dims vary slower
        off = (np.arange(sizes[i], dtype=RANK_DTYPE)[:, None] * strides[i] + off[None, :]).ravel()
    off.setflags(write=False)
    return off


@lru_cache(maxsize=64)
def _groups(names: tuple[str, ...], sizes: tuple[int, ...], mask: tuple[int, ...],
            offset: int) -> np.ndarray:
    n = len(sizes)
    world = math.prod(sizes)
    # arange(world).reshape(sizes[::-1]): axis n-1-k is dimension k (dimension 0 fastest).
    grid = np.arange(offset, offset + world, dtype=RANK_DTYPE).reshape(sizes[::-1])
    unmasked = [k for k in range(n) if k not in mask]
    axes = [n - 1 - k for k in reversed(unmasked)] + [n - 1 - k for k in reversed(mask)]
    gsize = math.prod(sizes[k] for k in mask)
    out = np.ascontiguousarray(grid.transpose(axes)).reshape(world // gsize, gsize)
    out.setflags(write=False)
    return out


def inject_gtp(order: str, after: str = "tp") -> str:
    """Megatron 0.19's ``_inject_gtp_remat_axis``: put ``gtp_remat`` right after ``after``.

    Falls back to after ``tp``, then to the front; case-sensitive, on the raw order.
    The dense generator injects after ``tp``, the expert one after ``ep``.

    >>> inject_gtp("tp-cp-ep-dp-pp"), inject_gtp("tp-cp-ep-dp-pp", after="ep")
    ('tp-gtp_remat-cp-ep-dp-pp', 'tp-cp-ep-gtp_remat-dp-pp')
    """
    tokens = order.split("-")
    if "gtp_remat" in tokens:
        return order
    anchor = after if after in tokens else "tp"
    i = tokens.index(anchor) + 1 if anchor in tokens else 0
    return "-".join(tokens[:i] + ["gtp_remat"] + tokens[i:])


def first_occurrences(order: str) -> str:
    """The lowercased order with each repeated token kept at its first place only.

    >>> first_occurrences("pp-cp-dp-TP-tp-ep")
    'pp-cp-dp-tp-ep'
    """
    return "-".join(dict.fromkeys(order.lower().split("-")))
