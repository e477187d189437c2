"""What each collective of the step costs on a placed layout.

:func:`job_groups` says which layout group kind every collective role runs on
(dense / expert, all-gather / reduce-scatter) and which communicators (FIFO
queues) they share with one and with separate all-gather communicators.
:class:`Pricer` builds the rings of every role on the cluster
(:func:`~simharness.topology.cost.build_rings`), their link shares while other roles
move data (max-min over every subset of roles), groups ranks of equal costs into
classes (each class is simulated once) and prices one call with NCCL's pick
(:func:`~simharness.topology.nccl_model.choose`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..topology.cost import Rings, build_rings, maxmin_rates, shape_of
from ..topology.errors import TopologyError
from ..topology.nccl_model import Estimate, choose
from ..topology.placement import Placement
from .engine import Coll
from .workload import StageWork

ROLE_NAMES = {"dense_ag": "dense all-gather", "dense_rs": "dense reduce-scatter",
               "exp_ag": "expert all-gather", "exp_rs": "expert reduce-scatter"}
ROLE_COLLECTIVE = {"ag": "all_gather", "rs": "reduce_scatter"}


def _significant(x: np.ndarray, digits: int) -> np.ndarray:
    """``x`` rounded to ``digits`` significant digits (for grouping equal costs)."""
    mag = np.where(x > 0, 10.0 ** np.floor(np.log10(np.where(x > 0, x, 1.0))), 1.0)
    return np.round(x / mag, digits - 1) * mag


def _inverse(groups: np.ndarray, first_rank: int, world: int, kind: str) -> np.ndarray:
    inv = np.full(world, -1, dtype=np.int64)
    inv[groups.ravel() - first_rank] = np.repeat(np.arange(groups.shape[0]), groups.shape[1])
    if (inv < 0).any():
        raise TopologyError(f"{kind} groups do not cover every rank; pick a kind that partitions "
                            "the world (dp_cp, dp, ep_dp, ...)")
    return inv


def _same_ranks(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two group kinds partition the ranks into the same sets."""
    return a.shape == b.shape and {frozenset(map(int, r)) for r in a} == \
        {frozenset(map(int, r)) for r in b}


@dataclass(frozen=True)
class JobGroups:
    """Which layout group each collective role runs on, and the communicators (queues)
    with one and with separate all-gather communicators."""

    kind: dict[str, str]            # role label -> layout group kind
    groups: dict[str, np.ndarray]   # role label -> group rows
    one_q: dict[str, str]
    sep_q: dict[str, str]
    #: why the separate all-gather communicator changes no queue here ("" when it does)
    unused: str = ""


def job_groups(layout, stages: Sequence[StageWork], schedule: str, rs_kind: str,
                ag_kind: str | None) -> JobGroups:
    kinds = tuple(layout.kinds)
    present = ", ".join(k for k in kinds if not k.endswith("_gloo"))

    def need(kind: str) -> np.ndarray:
        if kind not in kinds:
            raise TopologyError(f"the layout has no {kind!r} groups; kinds present: {present}")
        return np.asarray(layout.groups(kind), dtype=np.int64)

    rs = need(rs_kind)
    if schedule == "dist-opt" and ag_kind not in (None, rs_kind):
        raise TopologyError(f"--ag-kind {ag_kind}: the distributed optimizer gathers "
                            f"parameters on its reduce-scatter group ({rs_kind}); drop "
                            "--ag-kind or use --schedule fsdp")
    twin = f"{rs_kind}_ag" if f"{rs_kind}_ag" in kinds else rs_kind
    dense_ag = rs_kind if schedule == "dist-opt" else ag_kind or twin
    ag = need(dense_ag)
    if not _same_ranks(rs, ag):
        raise TopologyError(f"--ag-kind {dense_ag}: the all-gather must run over the "
                            f"reduce-scatter group's ranks ({rs_kind} groups of {rs.shape[1]}), "
                            f"but {dense_ag} groups have other ranks; use {rs_kind}_ag "
                            f"(create_all_gather_group) or {rs_kind}")
    kind = {"dense_rs": rs_kind, "dense_ag": dense_ag}
    groups = {"dense_rs": rs, "dense_ag": ag}
    if any(st.expert_bytes > 0 for st in stages):
        kind["exp_rs"] = "ep_dp"
        kind["exp_ag"] = "ep_dp_ag" if schedule == "fsdp" and "ep_dp_ag" in kinds else "ep_dp"
        groups.update(exp_rs=need("ep_dp"), exp_ag=need(kind["exp_ag"]))
    # one communicator per layout group; "separate": each all-gather on its own (fsdp; the
    # expert one only where the profile has an expert all-gather group, 0.18+)
    one_q = {lab: k.removesuffix("_ag") for lab, k in kind.items()}
    sep_q = dict(one_q)
    profile = getattr(layout, "profile", None)
    # the flag adds dp_cp_ag: the dense all-gather leaves the reduce-scatter's communicator
    # only on another group (the twin, or --ag-kind), or on dp_cp when the flag is off (what
    # turning it on would buy); on the reduce-scatter's own group (--rs-kind tp) it stays
    unused = ""
    if schedule == "fsdp":
        if dense_ag != rs_kind or (rs_kind == "dp_cp" and "dp_cp_ag" not in kinds):
            sep_q["dense_ag"] = "dense_ag"
        if "exp_ag" in kind and (profile is None or bool(profile.expert_all_gather)):
            sep_q["exp_ag"] = "exp_ag"
        if sep_q == one_q:
            unused = (f"the dense all-gather runs on the reduce-scatter's own group "
                      f"({rs_kind}) and create_all_gather_group only adds dp_cp_ag, which "
                      "nothing here uses")
    return JobGroups(kind, groups, one_q, sep_q, unused)


@dataclass
class _Kind:
    """One role's rings on the cluster, ring classes and NCCL prices (mutable cache)."""

    groups: np.ndarray
    rings: Rings
    conc: np.ndarray
    inv: np.ndarray
    keep: dict = field(default_factory=dict)      # frozenset(labels) -> per-ring share
    ring_class: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    class_first: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    prices: dict = field(default_factory=dict)


class Pricer:
    """Rings of every role with traffic, their link shares while other roles move data
    (max-min over every subset of roles), rank classes, and NCCL's price per size."""

    def __init__(self, layout, placement: Placement, jg: JobGroups, *, collnet: bool,
                 nccl: str):
        self.cluster = placement.cluster
        self.collnet, self.nccl = collnet, nccl
        world, first = int(layout.world_size), int(layout.rank_offset)
        self.info: dict[str, _Kind] = {}
        for lab, g in jg.groups.items():
            if g.shape[1] > 1:
                r = build_rings(self.cluster, placement.device_of(g))
                self.info[lab] = _Kind(g, r, r.concurrent_gb_per_s(),
                                       _inverse(g, first, world, jg.kind[lab]))
        labels = list(self.info)
        for n_sub in range(2, len(labels) + 1):
            for sub in itertools.combinations(labels, n_sub):
                self._share(sub)
        for k in self.info.values():
            self._classes(k)

    def _share(self, sub: tuple[str, ...]) -> None:
        rings = [self.info[lab].rings for lab in sub]
        offs = [0]
        for r in rings:
            offs.append(offs[-1] + r.n_rings)
        flows = [r.flow + o for r, o in zip(rings, offs, strict=False)]
        rates = maxmin_rates(np.concatenate(flows), np.concatenate([r.link for r in rings]),
                             np.concatenate([r.weight for r in rings]), self.cluster.capacity,
                             int(offs[-1]))
        for lab, r, o in zip(sub, rings, offs, strict=False):
            conc = self.info[lab].conc
            with np.errstate(divide="ignore", invalid="ignore"):
                self.info[lab].keep[frozenset(sub)] = np.where(
                    np.isfinite(conc), rates[o:o + r.n_rings] / conc, 1.0)

    def _classes(self, k: _Kind) -> None:
        r = k.rings
        domains = np.array([np.unique(self.cluster.domain_of(d)).size for d in r.devices])
        cols = [domains, _significant(np.where(np.isfinite(k.conc), k.conc, 0.0), 9),
                _significant(np.where(np.isfinite(r.net_gb_per_s), r.net_gb_per_s, 0.0), 9),
                r.step_latency_us] + [_significant(v, 9) for v in k.keep.values()]
        _, k.class_first, inv = np.unique(np.stack(cols, axis=1), axis=0, return_index=True,
                                          return_inverse=True)
        k.ring_class = np.asarray(inv).ravel()

    def combos(self, ranks: np.ndarray) -> list[dict[str, int]]:
        """The distinct (ring class per role) rows of ``ranks`` (0-based)."""
        if not self.info:
            return [{}]
        cols = np.stack([k.ring_class[k.inv[ranks]] for k in self.info.values()], axis=1)
        return [dict(zip(self.info, map(int, row), strict=False))
                for row in np.unique(cols, axis=0)]

    def price(self, lab: str, cls: int, role: str, size: float):
        """(NCCL's estimate, the group shape) for one call of ``role`` of ``size`` bytes."""
        k = self.info[lab]
        key = (cls, role, round(size))
        if key not in k.prices:
            i = int(k.class_first[cls])
            shape = shape_of(self.cluster, k.rings, i, rate_gb_per_s=float(k.conc[i]),
                             collnet=self.collnet)
            k.prices[key] = (choose(shape, ROLE_COLLECTIVE[role], size, nccl=self.nccl), shape)
        return k.prices[key]

    def coll(self, combo: dict[str, int], lab: str, size: float) -> Coll | None:
        if lab not in self.info or size <= 0:
            return None
        role = lab.split("_")[1]
        est: Estimate = self.price(lab, combo[lab], role, size)[0]
        # latency part: NCCL's latency plus the pipeline fill (time_us = both + size / bw)
        return Coll(role, lab, (est.latency_us + est.ramp_us) * 1e-6, size,
                    est.algbw_gb_per_s * 1e9, int(est.n_channels))

    def keep_fn(self, combo: dict[str, int]) -> Callable[[str, frozenset[str]], float]:
        cache: dict = {}

        def keep(lab: str, moving: frozenset[str]) -> float:
            sub = frozenset(m for m in moving if m in self.info)
            if len(sub) < 2 or lab not in self.info:
                return 1.0
            if (lab, sub) not in cache:
                k = self.info[lab]
                cache[(lab, sub)] = float(k.keep[sub][int(k.class_first[combo[lab]])])
            return cache[(lab, sub)]
        return keep
