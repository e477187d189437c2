"""Megatron-Core API profiles: the block list of ``new_group`` calls per version.

Three profiles, because the all-gather option changed shape upstream and 0.19
added the GTP weight-remat axis. A profile is a :class:`Profile`, a few
capability flags looked up by name in :data:`PROFILES`:

``"0.16"`` (megatron-core 0.16.x-0.17.x, PR #2663): ``ag_in_init``
    ``initialize_model_parallel(create_all_gather_group=True)`` creates
    ``DATA_PARALLEL_GROUP_WITH_CP_AG`` right after each
    ``DATA_PARALLEL_GROUP_WITH_CP``; there is no expert all-gather group.
    (0.17.0 added the ``rank_offset`` / ``local_world_size`` keywords, PR #3520;
    the profile takes them.)
``"0.18"`` (megatron-core 0.18.x, PR #3249): ``ag_after_init``
    no keyword; the training loop calls ``create_all_gather_groups(
    for_expert_parallelism=ep > 1)`` *after* initialisation, which rebuilds a
    generator with the hard-coded order ``tp-cp-ep-dp-pp`` and rank_offset 0
    (upstream issue #4261). Otherwise the 0.17 sequence.
``"0.19"`` (megatron-core 0.19.x and later): ``ag_after_init`` + ``gtp_axis``
    the 0.18 all-gather path, plus the GTP weight-remat groups (singletons when
    ``gtp_remat_size`` is 1, a duplicate ``_WITH_EGTP`` expert group) and the
    injected ``gtp_remat`` token in the order.

All profiles share one builder, :func:`build_loops`, which reads only the flags.
This module is the one home of the profile names (:data:`MCORE_PROFILES`) and the
default profile (:data:`DEFAULT_MCORE`); Megatron's default order
(:data:`DEFAULT_ORDER`) is :mod:`simharness.grid`'s, imported here. The rules that
differ per profile are in :mod:`simharness.rules`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import LayoutError
from .grid import DEFAULT_ORDER, Grid, inject_gtp
from .plan import Entry, Loop, Step
from .sources import Chunks, Concat, GroupSource, Hierarchical, Ortho, Pick

if TYPE_CHECKING:  # pragma: no cover
    from .fields import ParallelismFields

# Keyword arguments of initialize_model_parallel every profile takes (besides world_size).
_COMMON_KWARGS = (
    "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size", "pipeline_model_parallel_comm_backend", "use_sharp",
    "context_parallel_size", "hierarchical_context_parallel_sizes", "hybrid_context_parallel",
    "expert_model_parallel_size", "num_distributed_optimizer_instances",
    "expert_tensor_parallel_size", "nccl_communicator_config_path",
    "distributed_timeout_minutes", "order", "get_embedding_ranks",
    "get_position_embedding_ranks", "create_gloo_process_groups", "high_priority_stream_groups",
    "sharp_enabled_group", "rank_offset", "local_world_size",
)
_GTP_KWARGS = ("gtp_remat_size", "expert_gtp_remat_size")


@dataclass(frozen=True)
class Profile:
    """What one megatron-core API profile has. :func:`build_loops` reads only these flags.

    ``ag_in_init``: ``initialize_model_parallel(create_all_gather_group=)`` makes the AG
    twin inside the DP-with-CP loop, reachable with ``get_data_parallel_group(...,
    independent_all_gather=True)`` (0.16-0.17). ``ag_after_init``: the caller's
    ``create_all_gather_groups()`` makes the dense and expert AG groups after
    initialisation, from a generator with the hard-coded order and offset 0 (0.18+).
    ``gtp_axis``: the GTP weight-remat axis, its groups and keywords (0.19+).
    ``since``: the first ``(major, minor)`` release the profile models; it covers every
    release up to the next profile's.
    """

    name: str
    versions: str
    since: tuple[int, int]
    ag_in_init: bool
    ag_after_init: bool
    gtp_axis: bool

    @property
    def init_kwargs(self) -> tuple[str, ...]:
        """Keyword arguments of this profile's ``initialize_model_parallel``."""
        return (_COMMON_KWARGS + (("create_all_gather_group",) if self.ag_in_init else ())
                + (_GTP_KWARGS if self.gtp_axis else ()))

    @property
    def dp_group_kwargs(self) -> tuple[str, ...]:
        """Keyword arguments of this profile's ``get_data_parallel_group``."""
        return (("with_context_parallel",) + (("with_gtp_remat",) if self.gtp_axis else ())
                + ("partial_data_parallel",)
                + (("independent_all_gather",) if self.ag_in_init else ()))

    @property
    def expert_all_gather(self) -> bool:
        """Whether the option also makes an expert-DP all-gather group (when ep > 1)."""
        return self.ag_after_init


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("0.16", "0.16.x-0.17.x", (0, 16), ag_in_init=True, ag_after_init=False,
            gtp_axis=False),
    Profile("0.18", "0.18.x", (0, 18), ag_in_init=False, ag_after_init=True, gtp_axis=False),
    Profile("0.19", "0.19.x and later", (0, 19), ag_in_init=False, ag_after_init=True,
            gtp_axis=True),
)}
MCORE_PROFILES = tuple(PROFILES)  # profile names, in release order
DEFAULT_MCORE = "0.19"  # the profile used when none is named


def profiles_help() -> str:
    """``"0.16 (0.16.x-0.17.x), 0.18 (0.18.x), 0.19 (0.19.x and later)"``."""
    return ", ".join(f"{p.name} ({p.versions})" for p in PROFILES.values())


def check_profile(mcore: str) -> str:
    mcore = str(mcore)
    if mcore not in PROFILES:
        raise LayoutError(
            f"unknown megatron-core profile {mcore!r}; use one of {profiles_help()}.",
            mcore=mcore)
    return mcore


def profile_for_release(major: int, minor: int) -> Profile | None:
    """The profile modelling megatron-core ``major.minor`` (None before the first)."""
    found = None
    for prof in PROFILES.values():  # in release order
        if (major, minor) >= prof.since:
            found = prof
    return found


def get_profile(mcore: str) -> Profile:
    """The :class:`Profile` named ``mcore`` (a :class:`LayoutError` for an unknown name)."""
    return PROFILES[check_profile(mcore)]


def megatron_kwargs(mcore: str) -> tuple[str, ...]:
    return get_profile(mcore).init_kwargs


def _gloo(on: bool, kind: str, desc: str, source) -> tuple[Entry, ...]:
    if not on:
        return ()
    return (Entry(f"{kind}_gloo", f"{desc}_GLOO", "gloo", source),)


def _hier_descs(desc: str, level: int, gloo: bool) -> str:
    return f"HIERARCHICAL_{desc}_GLOO_L{level}" if gloo else f"HIERARCHICAL_{desc}_L{level}"


def build_loops(cfg: ParallelismFields, mcore: str) -> list[Loop]:
    """The whole ``new_group`` sequence of ``initialize_model_parallel`` (+ AG groups)."""
    prof = get_profile(mcore)  # cfg is validated for this profile, or a draft (layout.Draft)
    gtp_axis = prof.gtp_axis  # the gtp_remat token and the GTP groups (0.19)
    nccl = "nccl"
    dense = cfg.dense_grid(gtp_token=gtp_axis)
    expert = cfg.expert_grid(gtp_token=gtp_axis)
    gtp_dense = gtp_axis and cfg.gtp_remat_size > 1
    gtp_expert = gtp_axis and cfg.expert_gtp_remat_size > 1
    # GTP (0.19): gtp > 1 turns Gloo off for the whole function, egtp > 1 before expert DP.
    gloo_dense = cfg.use_gloo_process_groups and not gtp_dense
    gloo_expert = gloo_dense and not gtp_expert
    loops: list[Loop] = []

    def simple(kind: str, desc: str, source, backend: str = nccl, gloo: bool = False) -> None:
        entries: tuple[Entry, ...] = (Entry(kind, desc, backend, source),)
        if gloo:
            entries += _gloo(gloo_dense, kind, desc, source)
        loops.append(Loop.simple(*entries))

    # 0. (GTP axis) GTP weight-remat groups: singletons when gtp=1.
    if gtp_axis:
        simple("gtp_remat", "GTP_WEIGHT_REMAT_GROUP", Ortho(dense, "gtp_remat"))

    # 1. DP-with-CP, its AG twin (ag_in_init), its Gloo twin, the partial-DP groups;
    # 3. the hybrid DP-CP groups.
    loops.extend(_dp_cp_loops(cfg, prof, dense, gloo_dense))

    # 4. DP (+ gtp_remat-dp groups when gtp > 1).
    simple("dp", "DATA_PARALLEL_GROUP", Ortho(dense, "dp"), gloo=True)
    if gtp_dense:
        simple("gtp_remat_dp", "DATA_PARALLEL_GROUP_WITH_GTP_REMAT", Ortho(dense, "gtp_remat-dp"))
        simple("gtp_remat_dp_cp", "DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT",
               Ortho(dense, "gtp_remat-dp-cp"))

    # 5. CP and its hierarchical sub-groups (created right after each CP group).
    loops.append(_cp_loop(cfg, dense))

    # 6-7. MP and TP.
    g = "gtp_remat-" if gtp_axis else ""  # the GTP axis adds the token to mp, tp-dp-cp, tp-dp
    simple("mp", "MODEL_PARALLEL_GROUP", Ortho(dense, f"tp-{g}pp"))
    simple("tp", "TENSOR_MODEL_PARALLEL_GROUP", Ortho(dense, "tp"))

    # 8. PP with its embedding and position-embedding groups.
    pp = Ortho(dense, "pp")
    pp_backend = cfg.pipeline_model_parallel_comm_backend or nccl
    loops.append(Loop.simple(
        Entry("pp", "PIPELINE_MODEL_PARALLEL_GROUP", pp_backend, pp),
        Entry("embd", "EMBEDDING_GROUP", nccl, Pick(pp, (0, -1))),
        Entry("pos_embd", "POSITION_EMBEDDING_GROUP", nccl, Pick(pp, (0,))),
    ))

    # 9-10. TP-DP-CP, TP-DP, TP-CP.
    simple("tp_dp_cp", "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP",
           Ortho(dense, f"tp-{g}dp-cp"))
    simple("tp_dp", "TENSOR_AND_DATA_PARALLEL_GROUP", Ortho(dense, f"tp-{g}dp"))
    # The GTP axis keeps the plain 'tp-cp' token here (only mp, tp-dp-cp, tp-dp gain gtp_remat).
    simple("tp_cp", "TENSOR_AND_CONTEXT_PARALLEL_GROUP", Ortho(dense, "tp-cp"))

    # 11. Expert groups.
    if gtp_axis:
        simple("expt_gtp_remat", "EXPERT_GTP_WEIGHT_REMAT_GROUP", Ortho(expert, "gtp_remat"))
    simple("ep", "EXPERT_MODEL_PARALLEL_GROUP", Ortho(expert, "ep"))
    simple("ep_tp", "EXPERT_TENSOR_PARALLEL_GROUP", Ortho(expert, "tp"))
    simple("tp_ep_mp", "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP", Ortho(expert, "tp-ep"))
    tp_ep_pp = Ortho(expert, "tp-ep-pp")
    simple("tp_ep_pp", "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP", tp_ep_pp)
    if gtp_axis:
        simple("tp_ep_egtp_pp", "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP",
               Ortho(expert, "tp-ep-gtp_remat-pp"))

    # 12. Expert DP and its hierarchical intra/inter groups.
    loops.append(_expert_dp_loop(cfg, expert, gloo_expert))
    if gtp_expert:
        simple("ep_gtp_remat_dp", "EXPERT_DATA_PARALLEL_GROUP_WITH_GTP_REMAT",
               Ortho(expert, "gtp_remat-dp"))

    # 13. Intra distributed-optimizer instance groups.
    intra_opt: GroupSource
    if gtp_dense or gtp_expert:  # one group of all ranks, sorted (GTP axis)
        intra_opt = Ortho(expert, "-".join(expert.names))
    else:
        intra_opt = Concat(tp_ep_pp, cfg.intra_partial_expert_data_parallel_size)
    simple("intra_dist_opt", "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", intra_opt)

    # (ag_after_init) create_all_gather_groups(for_expert_parallelism=ep > 1), after init.
    if prof.ag_after_init and cfg.create_all_gather_group:
        loops.extend(all_gather_loops_after_init(cfg, prof.name))
    return loops


def _dp_cp_loops(cfg: ParallelismFields, prof: Profile, dense: Grid,
                 gloo: bool) -> list[Loop]:
    """DP-with-CP with its AG twin (``ag_in_init``), its Gloo twin and the partial-DP
    groups of each instance; then the hybrid DP-CP groups."""
    nccl, n = "nccl", cfg.num_distributed_optimizer_instances
    dp_cp = Ortho(dense, "dp-cp")
    first = [Entry("dp_cp", "DATA_PARALLEL_GROUP_WITH_CP", nccl, dp_cp)]
    if prof.ag_in_init and cfg.create_all_gather_group:
        first.append(Entry("dp_cp_ag", "DATA_PARALLEL_GROUP_WITH_CP_AG", nccl, dp_cp))
    first.extend(_gloo(gloo, "dp_cp", "DATA_PARALLEL_GROUP_WITH_CP", dp_cp))
    steps = [Step(1, tuple(first))]
    if n > 1:
        intra = Chunks(dp_cp, cfg.intra_partial_data_parallel_size)
        desc = "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP"
        steps.append(Step(n, (Entry("intra_dp_cp", desc, nccl, intra),)
                          + _gloo(gloo, "intra_dp_cp", desc, intra)))
    loops = [Loop(dp_cp.n_groups, tuple(steps))]
    if cfg.hybrid_context_parallel:
        size = cfg.data_parallel_size_with_cp
        loops.append(Loop(dp_cp.n_groups, tuple(
            Step(size // s, (Entry(f"hybrid_dp_cp_{s}", f"HYBRID_DP_CP_GROUP_{s}", nccl,
                                   Chunks(dp_cp, s)),)) for s in hybrid_chunk_sizes(size))))
    return loops


def _cp_loop(cfg: ParallelismFields, dense: Grid) -> Loop:
    """CP groups, each followed by its hierarchical sub-groups."""
    cp = Ortho(dense, "cp")
    steps = [Step(1, (Entry("cp", "CONTEXT_PARALLEL_GROUP", "nccl", cp),))]
    hcp = cfg.hierarchical_context_parallel_sizes or ()
    for lvl in range(len(hcp)):
        src = Hierarchical(cp, tuple(hcp), lvl)
        steps.append(Step(src.per_parent, (Entry(
            f"hcp_l{lvl}", _hier_descs("CONTEXT_PARALLEL_GROUP", lvl, False), "nccl", src),)))
    return Loop(cp.n_groups, tuple(steps))


def _expert_dp_loop(cfg: ParallelismFields, expert: Grid, gloo: bool) -> Loop:
    """Expert DP (and its Gloo twin), each followed by its intra/inter-instance groups."""
    n = cfg.num_distributed_optimizer_instances
    ep_dp = Ortho(expert, "dp")
    steps = [Step(1, (Entry("ep_dp", "EXPERT_DATA_PARALLEL_GROUP", "nccl", ep_dp),)
                  + _gloo(gloo, "ep_dp", "EXPERT_DATA_PARALLEL_GROUP", ep_dp))]
    if n > 1:
        iedp = cfg.intra_partial_expert_data_parallel_size
        for lvl, kind in ((0, "intra_ep_dp"), (1, "inter_ep_dp")):
            src = Hierarchical(ep_dp, (iedp, n), lvl)
            entries: tuple[Entry, ...] = (Entry(
                kind, _hier_descs("EXPERT_DATA_PARALLEL_GROUP", lvl, False), "nccl", src),)
            if gloo:
                entries += (Entry(f"{kind}_gloo",
                                  _hier_descs("EXPERT_DATA_PARALLEL_GROUP", lvl, True), "gloo",
                                  src),)
            steps.append(Step(src.per_parent, entries))
    return Loop(ep_dp.n_groups, tuple(steps))


def hybrid_chunk_sizes(dp_cp: int) -> list[int]:
    """Sizes of Megatron's HYBRID_DP_CP groups: the powers of two from 2 below ``dp_cp``.

    >>> hybrid_chunk_sizes(8), hybrid_chunk_sizes(10)
    ([2, 4], [2, 4])
    """
    return [2 ** i for i in range(int(math.log2(dp_cp)))][1:]


def ag_grids_after_init(cfg: ParallelismFields, mcore: str) -> tuple[Grid, Grid | None]:
    """The generators ``create_all_gather_groups`` builds: hard-coded order, offset 0.

    Its sizes come from the getters: ``dp`` is ``get_data_parallel_world_size()``, which
    in 0.19 counts the GTP peers in (``dp*gtp``), and the GTP axis is ``gtp`` again, so
    with GTP > 1 the generator spans ``world*gtp`` ranks (0.19.2, notes/mcore019.md §4).
    The expert generator exists only when ``ep > 1`` (the training loop passes
    ``for_expert_parallelism=ep > 1``).
    """
    gtp_axis = get_profile(mcore).gtp_axis
    gtp = cfg.gtp_remat_size if gtp_axis else 1
    egtp = cfg.expert_gtp_remat_size if gtp_axis else 1
    extra = {"gtp_remat": gtp} if gtp_axis else {}
    dense = Grid.from_sizes(inject_gtp(DEFAULT_ORDER, "tp") if gtp_axis else DEFAULT_ORDER, 0,
                            tp=cfg.tp, pp=cfg.pp, dp=cfg.dp * gtp, ep=1, cp=cfg.cp, **extra)
    expert = None
    if cfg.ep > 1:
        extra = {"gtp_remat": egtp} if gtp_axis else {}
        expert = Grid.from_sizes(inject_gtp(DEFAULT_ORDER, "ep") if gtp_axis else DEFAULT_ORDER,
                                 0, tp=cfg.etp, pp=cfg.pp, dp=cfg.edp * egtp, ep=cfg.ep, cp=1,
                                 **extra)
    return dense, expert


def all_gather_loops_after_init(cfg: ParallelismFields, mcore: str) -> list[Loop]:
    dense, expert = ag_grids_after_init(cfg, mcore)
    loops = [Loop.simple(Entry("dp_cp_ag", "DATA_PARALLEL_GROUP_WITH_CP_AG", "nccl",
                               Ortho(dense, "dp-cp")))]
    if expert is not None:
        loops.append(Loop.simple(Entry("ep_dp_ag", "EXPERT_DATA_PARALLEL_GROUP_AG", "nccl",
                                       Ortho(expert, "dp"))))
    return loops
