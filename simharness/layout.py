"""The layout: every group Megatron builds, a per-rank view, and collective resolution.

>>> from simharness import ParallelismConfig, build_layout
>>> lay = build_layout(ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
...     pipeline_model_parallel_size=2, context_parallel_size=2, create_all_gather_group=True),
...     mcore="0.16")
>>> lay.groups("dp_cp").tolist()
[[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
>>> ag = lay.creation_order[1]
>>> ag.kind, ag.desc, ag.ranks, ag.backend
('dp_cp_ag', 'DATA_PARALLEL_GROUP_WITH_CP_AG', (0, 2, 4, 6), 'nccl')
>>> c = lay.resolve_collectives(5)
>>> c.dense_reduce_scatter.kind, c.dense_all_gather.kind, c.dense_overlap
('dp_cp', 'dp_cp_ag', True)

Invariants (property-tested): every kind except ``embd`` and ``pos_embd``
partitions the ranks; ``rank(r)`` agrees with ``groups(kind)`` for every kind;
``len(creation_order)`` equals the sum of the group counts of all kinds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import DEFAULT_MCORE, ParallelismConfig, validate, validated
from .errors import GroupNotInitialized, LayoutError
from .fields import ParallelismFields
from .plan import CreationOrder, Entry, Loop, Step, kind_count
from .profiles import Profile, build_loops, check_profile, get_profile
from .sources import Fixed, GroupSource

SCHEMA = "simharness.layout/1"
PARTIAL_KINDS = frozenset({"embd", "pos_embd"})  # kinds that need not cover every rank
LEAN_WORLD = 1 << 20  # from this world size on, whole-world sums keep no group arrays

# Coordinate name -> kind whose position gives it (Megatron's get_*_rank()).
COORDINATE_KINDS = {
    "tp": "tp", "cp": "cp", "dp": "dp", "pp": "pp", "dp_cp": "dp_cp",
    "ep": "ep", "etp": "ep_tp", "edp": "ep_dp", "gtp": "gtp_remat",
}


class Membership:
    """A rank's place in one kind: group number, position in Megatron's list,
    ``group_rank`` (torch's rank in the group: position in the sorted list).

    ``ranks`` and ``group_rank`` are computed on first use, so a rank's view of a
    million-rank world costs O(dimensions) per kind until a member list is read.
    """

    __slots__ = ("kind", "group", "position", "_group_rank", "_ranks", "_source", "_rank")

    def __init__(self, kind: str, group: int, position: int, group_rank: int | None = None,
                 ranks: np.ndarray | None = None, *, source: GroupSource | None = None,
                 rank: int | None = None):
        self.kind, self.group, self.position = kind, group, position
        self._group_rank, self._ranks = group_rank, ranks
        self._source, self._rank = source, rank

    @property
    def ranks(self) -> np.ndarray:
        if self._ranks is None:
            self._ranks = np.asarray(self._given_source().members(self.group))
        return self._ranks

    @property
    def size(self) -> int:
        return len(self._ranks) if self._ranks is not None else self._given_source().group_size

    def _given_source(self) -> GroupSource:
        if self._source is None:  # every caller passes ranks or source
            raise AssertionError("Membership needs its ranks or its source")
        return self._source

    @property
    def group_rank(self) -> int:
        if self._group_rank is None:
            if self._source is not None and self._source.sorted_members:
                self._group_rank = self.position  # members ascend: sorted index == position
            else:
                self._group_rank = int(np.count_nonzero(self.ranks < self._rank))
        return self._group_rank

    def __repr__(self) -> str:
        return (f"Membership(kind={self.kind!r}, group={self.group}, position={self.position}, "
                f"group_rank={self.group_rank}, size={self.size})")

    def to_dict(self) -> dict:
        return {"group": self.group, "position": self.position, "group_rank": self.group_rank,
                "ranks": [int(x) for x in self.ranks]}


class CollectiveGroup:
    """Which communicator runs one collective: the kind and its ranks (a tuple, built on
    first use from the rank's membership)."""

    __slots__ = ("kind", "_ranks", "_membership")

    def __init__(self, kind: str, ranks: tuple[int, ...] | None = None, *,
                 membership: Membership | None = None):
        self.kind, self._ranks, self._membership = kind, ranks, membership

    @property
    def ranks(self) -> tuple[int, ...]:
        if self._ranks is None:
            if self._membership is None:  # every caller passes ranks or membership
                raise AssertionError("CollectiveGroup needs its ranks or its membership")
            self._ranks = tuple(self._membership.ranks.tolist())
        return self._ranks

    def __eq__(self, other) -> bool:
        if not isinstance(other, CollectiveGroup):
            return NotImplemented
        return self.kind == other.kind and self.ranks == other.ranks

    def __hash__(self) -> int:
        return hash((self.kind, self.ranks))

    def __repr__(self) -> str:
        return f"CollectiveGroup(kind={self.kind!r}, ranks={self.ranks!r})"


@dataclass(frozen=True)
class Collectives:
    """The groups that run the distributed optimizer's collectives on one rank.

    ``*_overlap`` is True when the all-gather runs on a different communicator
    from the reduce-scatter (so the two can run at the same time). ``impl``: the
    data-parallel implementation they were resolved for (:mod:`simharness.ag_readers`);
    ``"unknown"`` resolves the all-gather as its one reader, Megatron-FSDP, would run it.
    """

    rank: int
    dense_reduce_scatter: CollectiveGroup
    dense_all_gather: CollectiveGroup
    expert_reduce_scatter: CollectiveGroup
    expert_all_gather: CollectiveGroup
    impl: str = "unknown"

    @property
    def dense_overlap(self) -> bool:
        return self.dense_all_gather.kind != self.dense_reduce_scatter.kind

    @property
    def expert_overlap(self) -> bool:
        return self.expert_all_gather.kind != self.expert_reduce_scatter.kind

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"rank": self.rank}
        for name in ("dense_reduce_scatter", "dense_all_gather", "expert_reduce_scatter",
                     "expert_all_gather"):
            g = getattr(self, name)
            out[name] = {"kind": g.kind, "ranks": list(g.ranks)}
        out["dense_overlap"] = self.dense_overlap
        out["expert_overlap"] = self.expert_overlap
        out["dp_impl"] = self.impl
        return out


@dataclass(frozen=True)
class RankView:
    """Everything one rank sees (NeMo's ``fake_initialize_model_parallel``, and more)."""

    rank: int
    groups: Mapping[str, Membership]
    coordinates: Mapping[str, int]
    is_first_stage: bool
    is_last_stage: bool
    in_embedding_group: bool
    in_position_embedding_group: bool
    nccl_communicators: int
    gloo_communicators: int
    new_group_calls: int
    collectives: Collectives

    @property
    def communicators(self) -> int:
        return self.nccl_communicators + self.gloo_communicators

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "coordinates": dict(self.coordinates),
            "is_first_stage": self.is_first_stage,
            "is_last_stage": self.is_last_stage,
            "in_embedding_group": self.in_embedding_group,
            "in_position_embedding_group": self.in_position_embedding_group,
            "communicators": {"nccl": self.nccl_communicators, "gloo": self.gloo_communicators,
                              "total": self.communicators},
            "new_group_calls": self.new_group_calls,
            "groups": {k: m.to_dict() for k, m in self.groups.items()},
            "collectives": self.collectives.to_dict(),
        }


class Layout:
    """All groups of one configuration under one megatron-core profile.

    ``built``: the layout is what :func:`build_layout` (or :meth:`Draft.layout`) made of
    :attr:`config` for :attr:`mcore` in the default torch world, so the configuration
    has been validated for that profile and the groups are the builder's (a layout read
    back from an export, or one made with another ``torch_world``, is not).
    """

    def __init__(self, config: ParallelismConfig, mcore: str, loops: list[Loop], *,
                 built: bool = False):
        self.config = config
        self.mcore = mcore
        self.built = built
        self.creation_order = CreationOrder(loops)
        self._entries: dict[str, Entry] = {}
        for e in self.creation_order.entries():
            if e.kind in self._entries:  # pragma: no cover - builder bug guard
                raise AssertionError(f"kind {e.kind} created twice")
            self._entries[e.kind] = e

    # ------------------------------------------------------------- basics
    @property
    def profile(self) -> Profile:
        """The megatron-core API profile (capability flags) of :attr:`mcore`."""
        return get_profile(self.mcore)

    @property
    def world_size(self) -> int:
        return self.config.world_size_resolved

    @property
    def rank_offset(self) -> int:
        return self.config.rank_offset

    @property
    def ranks(self) -> range:
        return self.config.ranks

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def entry(self, kind: str) -> Entry:
        try:
            return self._entries[kind]
        except KeyError:
            raise LayoutError(f"unknown group kind {kind!r}; this layout has: "
                              f"{', '.join(self._entries)}.", kind=kind) from None

    def has(self, kind: str) -> bool:
        return kind in self._entries

    def groups(self, kind: str) -> np.ndarray:
        """``(n_groups, group_size)`` array of global ranks, Megatron's order."""
        return self.entry(kind).source.array()

    def source(self, kind: str) -> GroupSource:
        return self.entry(kind).source

    def desc(self, kind: str) -> str:
        return self.entry(kind).desc

    def backend(self, kind: str) -> str:
        return self.entry(kind).backend

    def _check_rank(self, rank: int) -> int:
        try:
            r = int(rank)
        except (TypeError, ValueError):
            raise LayoutError(f"rank must be an integer, got {rank!r}.", rank=rank) from None
        if r not in self.ranks:
            raise LayoutError(
                f"rank {rank} is out of range: this layout covers ranks {self.ranks.start}.."
                f"{self.ranks.stop - 1}; pick one of those.", rank=rank)
        return r

    def membership(self, kind: str, rank: int) -> Membership | None:
        src = self.source(kind)
        loc = src.locate(rank)
        if loc is None:
            return None
        g, pos = loc
        return Membership(kind, int(g), int(pos), source=src, rank=int(rank))

    def group_of(self, kind: str, rank: int) -> np.ndarray | None:
        """The ranks of ``rank``'s group of ``kind``, or None when it has none."""
        m = self.membership(kind, self._check_rank(rank))
        return None if m is None else m.ranks

    # ------------------------------------------------------- per-rank view
    def rank(self, rank: int) -> RankView:
        """One rank's view, computed arithmetically (no world-sized arrays)."""
        r = self._check_rank(rank)
        groups: dict[str, Membership] = {}
        nccl = gloo = 0
        for kind, e in self._entries.items():
            m = self.membership(kind, r)
            if m is None:
                continue
            groups[kind] = m
            if e.backend == "gloo":
                gloo += 1
            else:
                nccl += 1
        coords = {c: groups[k].group_rank for c, k in COORDINATE_KINDS.items() if k in groups}
        pp = groups.get("pp")
        first = pp is None or pp.position == 0
        last = pp is None or pp.position == pp.size - 1
        return RankView(
            rank=r, groups=groups, coordinates=coords, is_first_stage=first, is_last_stage=last,
            in_embedding_group="embd" in groups, in_position_embedding_group="pos_embd" in groups,
            nccl_communicators=nccl, gloo_communicators=gloo,
            new_group_calls=len(self.creation_order),
            collectives=self._collectives(r, groups))

    # ------------------------------------------------ collective resolution
    def _pick(self, groups: Mapping[str, Membership], *kinds: str) -> CollectiveGroup:
        for k in kinds:
            if k in groups:
                return CollectiveGroup(k, membership=groups[k])
        raise GroupNotInitialized(f"none of the groups {kinds} exists on this rank")

    def _collectives(self, r: int, groups: Mapping[str, Membership], impl: str = "unknown",
                     sharding: str | None = None) -> Collectives:
        from .ag_readers import AG_PROFILES, reads_ag_group

        n = self.config.num_distributed_optimizer_instances
        profile = self.mcore if self.mcore in AG_PROFILES else "0.19"

        def reads(expert: bool) -> bool:
            return impl == "unknown" or reads_ag_group(profile, impl,  # type: ignore[arg-type]
                                                       expert=expert, sharding=sharding)

        dense_rs = self._pick(groups, *(("intra_dp_cp",) if n > 1 else ()), "dp_cp")
        dense_ag = self._pick(groups, "dp_cp_ag") if "dp_cp_ag" in groups and reads(False) \
            else dense_rs
        expert_rs = self._pick(groups, *(("intra_ep_dp",) if n > 1 else ()), "ep_dp")
        expert_ag = self._pick(groups, "ep_dp_ag") if "ep_dp_ag" in groups and reads(True) \
            else expert_rs
        return Collectives(r, dense_rs, dense_ag, expert_rs, expert_ag, impl)

    def resolve_collectives(self, rank: int, impl: str = "unknown",
                            sharding: str | None = None) -> Collectives:
        """Which group runs the gradient reduce-scatter and the parameter all-gather.

        The AG group is read only by Megatron-FSDP with a sharding strategy
        (:mod:`simharness.ag_readers`, pinned to Megatron's code): for ``impl``
        ``"fsdp"`` with the option on, the all-gather runs on the AG group (its own
        communicator); option off, or any other implementation (``"dist-opt"``,
        ``"ddp"``, ``"torch-fsdp2"``, ``"fsdp-v2"``), on the reduce-scatter's
        DP-with-CP group itself, so the two serialise. ``"unknown"`` (the default)
        resolves it as Megatron-FSDP would. Expert parameters use the expert DP
        group, and under the 0.16 profile there is no expert AG group (the 0.18 and
        0.19 profiles make one when ep > 1), so they never overlap there.
        """
        r = self._check_rank(rank)
        groups = {}
        for k in ("dp_cp", "dp_cp_ag", "intra_dp_cp", "ep_dp", "ep_dp_ag", "intra_ep_dp"):
            if k in self._entries:
                m = self.membership(k, r)
                if m is not None:
                    groups[k] = m
        return self._collectives(r, groups, impl, sharding)

    def get_data_parallel_group(self, rank: int, **kwargs) -> tuple[int, ...]:
        """Megatron's ``get_data_parallel_group`` of this profile, for ``rank``.

        0.16: ``(with_context_parallel=False, partial_data_parallel=False,
        independent_all_gather=False)``; asking for the all-gather group when
        the option is off raises :class:`GroupNotInitialized`, as Megatron's
        assertion does. 0.18: ``(with_context_parallel=False,
        partial_data_parallel=False)``. 0.19: ``(with_context_parallel=False,
        with_gtp_remat=True, partial_data_parallel=False)``. A keyword the
        profile lacks (``independent_all_gather`` from 0.18, ``with_gtp_remat``
        before 0.19) is a ``TypeError`` there (see ``Profile.dp_group_kwargs``).
        """
        bad = sorted(set(kwargs) - set(self.profile.dp_group_kwargs))
        if bad:
            raise LayoutError(f"get_data_parallel_group() of megatron-core {self.mcore} has no "
                              f"argument(s) {', '.join(bad)} (TypeError).",
                              megatron_error="TypeError")
        r = self._check_rank(rank)
        with_cp = kwargs.get("with_context_parallel", False)
        partial = kwargs.get("partial_data_parallel", False)
        gtp = kwargs.get("with_gtp_remat", True) and self.has("gtp_remat_dp")
        n = self.config.num_distributed_optimizer_instances

        def get(kind: str, what: str) -> tuple[int, ...]:
            m = self.membership(kind, r) if self.has(kind) else None
            if m is None:
                raise GroupNotInitialized(f"{what} is not initialized")
            return tuple(int(x) for x in m.ranks)

        if with_cp:
            if partial:
                if gtp:
                    return get("gtp_remat_dp_cp", "Intra partial data parallel group")
                return get("intra_dp_cp" if n > 1 else "dp_cp",
                           "Intra partial data parallel group")
            if kwargs.get("independent_all_gather", False):
                return get("dp_cp_ag", "data parallel group with context parallel AG")
            if gtp:
                return get("gtp_remat_dp_cp", "data parallel group with context parallel combined")
            return get("dp_cp", "data parallel group with context parallel combined")
        if partial:
            raise GroupNotInitialized("Partial DP for Optimizer needs to include CP")
        return get("gtp_remat_dp" if gtp else "dp", "data parallel group")

    # ------------------------------------------------------ whole-world sums
    def communicators_per_rank(self, *, cache: bool | None = None) -> dict[str, np.ndarray]:
        """``{"nccl": counts, "gloo": counts}``, one entry per rank (vectorised).

        ``cache=False`` builds each kind's groups, counts them and drops them (the
        default for worlds of :data:`LEAN_WORLD` ranks and more): same counts.
        """
        if cache is None:
            cache = self.world_size < LEAN_WORLD
        out = {"nccl": np.zeros(self.world_size, dtype=np.int64),
               "gloo": np.zeros(self.world_size, dtype=np.int64)}
        for e in self._entries.values():
            arr = e.source.array() if cache else e.source.fresh()
            if (self.rank_offset == 0 and arr.size and arr.min() >= 0
                    and arr.max() < self.world_size):
                a = arr.ravel()  # in the world: no copies
            else:
                a = arr.ravel() - self.rank_offset
                a = a[(a >= 0) & (a < self.world_size)]
            out["gloo" if e.backend == "gloo" else "nccl"] += np.bincount(
                a, minlength=self.world_size)
        return out

    def summary(self) -> dict:
        cfg = self.config
        comm = self.communicators_per_rank()
        total = comm["nccl"] + comm["gloo"]
        return {
            "world_size": cfg.world_size, "rank_offset": cfg.rank_offset, "mcore": self.mcore,
            "order": cfg.order, "tp": cfg.tp, "pp": cfg.pp, "cp": cfg.cp, "dp": cfg.dp,
            "ep": cfg.ep, "etp": cfg.etp, "expert_dp": cfg.edp,
            "vpp": cfg.virtual_pipeline_model_parallel_size,
            "num_distributed_optimizer_instances": cfg.num_distributed_optimizer_instances,
            "create_all_gather_group": cfg.create_all_gather_group,
            "new_group_calls": len(self.creation_order),
            "kinds": len(self._entries),
            "communicators_per_rank": {
                "nccl_max": int(comm["nccl"].max()), "gloo_max": int(comm["gloo"].max()),
                "total_min": int(total.min()), "total_max": int(total.max())},
        }

    # --------------------------------------------------------------- export
    def to_dict(self, *, groups: bool = True) -> dict:
        """JSON-ready export, schema ``simharness.layout/1``."""
        loops = []
        for lp in self.creation_order.loops:
            loops.append({"n_iter": lp.n_iter, "steps": [
                {"n_sub": s.n_sub, "kinds": [e.kind for e in s.entries]} for s in lp.steps]})
        kinds = {}
        for k, e in self._entries.items():
            item = {"desc": e.desc, "backend": e.backend, "n_groups": e.source.n_groups,
                    "group_size": e.source.group_size}
            if groups:
                item["groups"] = e.source.array().tolist()
            kinds[k] = item
        return {
            "schema": SCHEMA,
            "mcore": self.mcore,
            "config": self.config.to_dict(),
            "derived": {"data_parallel_size": self.config.dp,
                        "expert_data_parallel_size": self.config.edp,
                        "expert_tensor_parallel_size": self.config.etp,
                        "model_parallel_size": self.config.model_parallel_size},
            "creation_order": {"length": len(self.creation_order), "loops": loops},
            "kinds": kinds,
        }

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Layout:
        """Read an export back. Groups are taken as written (they may be hand-edited);
        :func:`simharness.checks.check` compares them with what the config builds."""
        if not isinstance(data, Mapping):
            raise LayoutError("a layout export must be a JSON object.")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise LayoutError(f"unsupported layout schema {schema!r}; this simharness reads "
                              f"{SCHEMA!r}. Re-export the plan with this version.", schema=schema)
        try:
            config = ParallelismConfig.from_dict(data["config"])
            mcore = check_profile(data["mcore"])
            kinds = data["kinds"]
            loops_d = data["creation_order"]["loops"]
        except KeyError as exc:
            raise LayoutError(f"layout export is missing the field {exc.args[0]!r}.") from None
        sources: dict[str, Entry] = {}
        for k, item in kinds.items():
            try:
                arr = np.asarray(item["groups"], dtype=np.int64)
                sources[k] = Entry(k, item["desc"], item["backend"], Fixed(arr, config.ranks))
            except KeyError as exc:
                raise LayoutError(f"kind {k!r} is missing the field {exc.args[0]!r} "
                                  f"(export with groups).") from None
            except ValueError:
                raise LayoutError(f"kind {k!r}: groups must be a list of equal-length rank "
                                  f"lists.", kind=k) from None
        loops = []
        for lp in loops_d:
            steps = []
            for s in lp["steps"]:
                missing = [k for k in s["kinds"] if k not in sources]
                if missing:
                    raise LayoutError(f"creation_order names kind(s) {missing} that the export "
                                      f"does not define.")
                steps.append(Step(int(s["n_sub"]), tuple(sources[k] for k in s["kinds"])))
            loops.append(Loop(int(lp["n_iter"]), tuple(steps)))
        return cls(config, mcore, loops)

    @classmethod
    def from_json(cls, text: str) -> Layout:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise LayoutError(f"not valid JSON: {exc.msg} at line {exc.lineno} column "
                              f"{exc.colno}.") from None

    def __repr__(self) -> str:
        c = self.config
        return (f"Layout(world={c.world_size}, tp={c.tp}, pp={c.pp}, cp={c.cp}, dp={c.dp}, "
                f"ep={c.ep}, etp={c.etp}, order={c.order!r}, mcore={self.mcore!r}, "
                f"ag={c.create_all_gather_group}, {len(self.creation_order)} new_group calls)")


def build_layout(config: ParallelismConfig | ParallelismFields | Mapping[str, Any] | Any,
                 mcore: str = DEFAULT_MCORE, *, torch_world: int | None = None,
                 **overrides) -> Layout:
    """Every group Megatron-Core ``mcore`` builds for ``config``, in creation order.

    ``config`` may be a :class:`ParallelismConfig`, its unvalidated fields
    (:class:`~simharness.fields.ParallelismFields`), a mapping, or any object
    with NeMo's attribute names; ``overrides`` replace fields. ``torch_world`` is
    the size of the torch world when the job is a window of a larger one (it
    decides whether Megatron's groups stay in range); by default
    ``rank_offset + world_size``. Everything but a :class:`ParallelismConfig` is
    validated once, for ``mcore`` (:func:`simharness.config.validated`).
    """
    if isinstance(config, ParallelismConfig):
        if overrides:
            config = config.replace(**overrides)
        mcore = check_profile(mcore)
        validate(config, mcore, world=torch_world)
    else:
        if not isinstance(config, ParallelismFields) or overrides:
            config = ParallelismFields.from_object(config, **overrides)
        config = validated(config, mcore, world=torch_world)
        mcore = check_profile(mcore)
    return Layout(config, mcore, build_loops(config, mcore), built=torch_world is None)


@dataclass(frozen=True)
class Draft:
    """A configuration before validation: its fields (normalised and type-checked), the
    profile, and Megatron's ``new_group`` loops for them, which hold no arrays. Enough
    for the memory estimate (:attr:`kinds`); :meth:`layout` then validates once, for
    the profile, and builds the :class:`Layout` from the same loops.

    >>> d = Draft.of({"world_size": 16, "tp": 2}, "0.19")
    >>> d.kinds, d.layout().world_size
    (23, 16)
    """

    fields: ParallelismFields
    mcore: str
    loops: list[Loop] | None  # None: the sizes make no plan (validation says why)

    @classmethod
    def of(cls, fields: Mapping[str, Any] | ParallelismFields, mcore: str) -> Draft:
        """Normalise and type-check ``fields`` (errors raise here) and draft their loops."""
        raw = fields if isinstance(fields, ParallelismFields) else \
            ParallelismFields.from_dict(fields)
        try:
            loops: list[Loop] | None = build_loops(raw, mcore)
        except Exception:  # noqa: BLE001 - an invalid configuration: validation says why
            loops = None
        return cls(raw, mcore, loops)

    @property
    def kinds(self) -> int:
        """The layout's group kinds (23 when the sizes make no plan)."""
        return 23 if self.loops is None else kind_count(self.loops)

    def layout(self, *, torch_world: int | None = None) -> Layout:
        """Validate once for :attr:`mcore` and build the layout from the drafted loops."""
        cfg = validated(self.fields, self.mcore, world=torch_world)
        mcore = check_profile(self.mcore)
        return Layout(cfg, mcore, self.loops if self.loops is not None
                      else build_loops(cfg, mcore), built=torch_world is None)
