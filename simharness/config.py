"""`ParallelismConfig`: NeMo's parallelism fields, validated in one place.

The dataclass takes every field of NeMo's
``nemo.lightning.pytorch.strategies.megatron_strategy.ParallelismConfig`` under
NeMo's names and defaults, plus the Megatron-only inputs that change the groups
(``world_size``, ``order``, ``hierarchical_context_parallel_sizes``,
``rank_offset``, ...). Derived sizes are properties.

>>> cfg = ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
...                         pipeline_model_parallel_size=2, context_parallel_size=2)
>>> cfg.data_parallel_size, cfg.order, cfg.model_parallel_size
(2, 'tp-cp-ep-dp-pp', 4)

Validation mirrors what Megatron-Core (``initialize_model_parallel`` and
``RankGenerator``) and NeMo (``init_parallel_ranks``,
``initialize_model_parallel_for_nemo``) reject; every rejection is a
:class:`~simharness.errors.LayoutError` that names the values and the fix.
Inputs Megatron accepts but that look wrong are not errors here: the checker
reports them as warnings (see :func:`simharness.checks.check`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from .errors import LayoutError

DEFAULT_ORDER = "tp-cp-ep-dp-pp"
TP_PP_DP_ORDER = "tp-cp-ep-pp-dp"
ORDER_TOKENS = ("tp", "cp", "ep", "dp", "pp")
MCORE_PROFILES = ("0.16", "0.18", "0.19")  # see simharness.profiles.PROFILES
DEFAULT_MCORE = "0.19"

# Fields that decide which groups exist (the rest are carried into exports).
GROUP_FIELDS = (
    "world_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size", "context_parallel_size",
    "expert_model_parallel_size", "expert_tensor_parallel_size",
    "num_distributed_optimizer_instances", "order", "use_tp_pp_dp_mapping",
    "hierarchical_context_parallel_sizes", "hybrid_context_parallel", "rank_offset",
    "use_gloo_process_groups", "create_all_gather_group",
    "pipeline_model_parallel_comm_backend", "gtp_remat_size", "expert_gtp_remat_size",
)

# Short flag names users know from Megatron's arguments.
ALIASES = {
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "vpp": "virtual_pipeline_model_parallel_size",
    "cp": "context_parallel_size",
    "ep": "expert_model_parallel_size",
    "etp": "expert_tensor_parallel_size",
    "world": "world_size",
    "create_gloo_process_groups": "use_gloo_process_groups",
}


def _pos_int(name: str, value: Any, *, allow_none: bool = False, minimum: int = 1) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise LayoutError(
            f"{name} must be an integer >= {minimum}, got {value!r}; "
            f"pass a whole number such as {max(minimum, 1)}.",
            **{name: value},
        )


@dataclass(frozen=True)
class ParallelismConfig:
    """NeMo ``ParallelismConfig`` fields plus the world they run on.

    ``world_size=None`` picks the smallest world the sizes fit:
    ``lcm(tp*pp*cp, etp*ep*pp)`` grown until the optimizer instances divide
    the data-parallel sizes.
    """

    # --- NeMo ParallelismConfig, NeMo's names and MegatronStrategy defaults ---
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None
    microbatch_group_size_per_vp_stage: int | None = None
    context_parallel_size: int = 1
    sequence_parallel: bool = False
    expert_model_parallel_size: int = 1
    moe_extended_tp: bool = False
    pipeline_dtype: str | None = None
    encoder_tensor_model_parallel_size: int = 0
    encoder_pipeline_model_parallel_size: int = 0
    pipeline_model_parallel_comm_backend: str | None = None
    num_layers_in_first_pipeline_stage: int | None = None
    num_layers_in_last_pipeline_stage: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    use_te_rng_tracker: bool = False
    expert_tensor_parallel_size: int | None = None
    use_tp_pp_dp_mapping: bool = False
    num_distributed_optimizer_instances: int = 1
    nccl_communicator_config_path: str | None = None
    use_sharp: bool = False
    pipeline_model_parallel_layout: Any = None
    use_gloo_process_groups: bool = True
    create_all_gather_group: bool = False
    # --- the world and Megatron-only inputs ---
    world_size: int | None = None
    order: str | None = None
    hierarchical_context_parallel_sizes: tuple[int, ...] | None = None
    rank_offset: int = 0
    hybrid_context_parallel: bool = False
    sharp_enabled_group: str | None = None
    gtp_remat_size: int = 1
    expert_gtp_remat_size: int = 1
    distributed_timeout_minutes: int = 30
    high_priority_stream_groups: tuple[str, ...] = field(default=())

    # ------------------------------------------------------------------ build
    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen)
        if self.order is None:
            set_("order", TP_PP_DP_ORDER if self.use_tp_pp_dp_mapping else DEFAULT_ORDER)
        if self.hierarchical_context_parallel_sizes is not None:
            hcp = self.hierarchical_context_parallel_sizes
            if isinstance(hcp, str):
                hcp = [p for p in hcp.replace(" ", "").split(",") if p]
            try:
                hcp = tuple(int(x) for x in hcp)
            except (TypeError, ValueError):
                raise LayoutError(
                    f"hierarchical_context_parallel_sizes must be a list of integers, got "
                    f"{self.hierarchical_context_parallel_sizes!r}; write it like 2,2.",
                    hierarchical_context_parallel_sizes=self.hierarchical_context_parallel_sizes,
                ) from None
            set_("hierarchical_context_parallel_sizes", hcp or None)
        if isinstance(self.high_priority_stream_groups, (list, str)):
            hp = self.high_priority_stream_groups
            set_("high_priority_stream_groups", tuple([hp] if isinstance(hp, str) else hp))
        if self.pipeline_dtype is not None and not isinstance(self.pipeline_dtype, str):
            set_("pipeline_dtype", str(self.pipeline_dtype))
        self._check_types()
        if self.world_size is None:
            set_("world_size", self._smallest_world())
        validate(self)

    def _check_types(self) -> None:
        for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                     "context_parallel_size", "expert_model_parallel_size",
                     "num_distributed_optimizer_instances", "gtp_remat_size",
                     "expert_gtp_remat_size"):
            _pos_int(name, getattr(self, name))
        _pos_int("world_size", self.world_size, allow_none=True)
        _pos_int("virtual_pipeline_model_parallel_size",
                 self.virtual_pipeline_model_parallel_size, allow_none=True)
        _pos_int("expert_tensor_parallel_size", self.expert_tensor_parallel_size, allow_none=True)
        _pos_int("rank_offset", self.rank_offset, minimum=0)
        _pos_int("encoder_tensor_model_parallel_size",
                 self.encoder_tensor_model_parallel_size, minimum=0)
        _pos_int("encoder_pipeline_model_parallel_size",
                 self.encoder_pipeline_model_parallel_size, minimum=0)
        if not isinstance(self.order, str) or not self.order:
            raise LayoutError(f"order must be a string such as {DEFAULT_ORDER!r}, got "
                              f"{self.order!r}.", order=self.order)
        if self.hierarchical_context_parallel_sizes is not None:
            for s in self.hierarchical_context_parallel_sizes:
                _pos_int("hierarchical_context_parallel_sizes entry", s)

    def _smallest_world(self) -> int:
        step = math.lcm(self.tensor_model_parallel_size * self.pipeline_model_parallel_size
                        * self.context_parallel_size * self.gtp_remat_size,
                        self.expert_tensor_parallel_size_resolved
                        * self.expert_model_parallel_size * self.pipeline_model_parallel_size
                        * self.expert_gtp_remat_size)
        world = step
        n = self.num_distributed_optimizer_instances
        for _ in range(64):
            dp = world // (self.tensor_model_parallel_size * self.pipeline_model_parallel_size
                           * self.context_parallel_size * self.gtp_remat_size)
            edp = world // (self.expert_tensor_parallel_size_resolved
                            * self.expert_model_parallel_size * self.pipeline_model_parallel_size
                            * self.expert_gtp_remat_size)
            if (dp * self.context_parallel_size) % n == 0 and edp % n == 0:
                return world
            world += step
        return step

    # ---------------------------------------------------------- constructors
    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **overrides) -> "ParallelismConfig":
        """Build from a mapping of field names (NeMo's, or the short aliases).

        Unknown keys are an error that lists the close matches.
        >>> ParallelismConfig.from_dict({"tp": 2, "world_size": 4}).data_parallel_size
        2
        """
        merged = {**dict(data), **overrides}
        known = set(cls.field_names())
        kwargs: dict[str, Any] = {}
        unknown = []
        for key, value in merged.items():
            name = ALIASES.get(key, key.replace("-", "_"))
            if name not in known:
                unknown.append(key)
                continue
            kwargs[name] = value
        if unknown:
            import difflib
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(key, sorted(known | set(ALIASES)), n=1)
                hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise LayoutError(
                f"unknown parallelism field(s): {', '.join(hints)}; known fields are NeMo's "
                f"ParallelismConfig names plus world_size, order, rank_offset, "
                f"hierarchical_context_parallel_sizes.",
                unknown=unknown,
            )
        return cls(**kwargs)

    @classmethod
    def from_object(cls, obj: Any, **overrides) -> "ParallelismConfig":
        """Build from any object with NeMo's attribute names (e.g. NeMo's own config).

        Only attributes that exist on ``obj`` are read; ``overrides`` win.
        """
        if isinstance(obj, Mapping):
            return cls.from_dict(obj, **overrides)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            data = {f.name: getattr(obj, f.name) for f in fields(obj)
                    if f.name in cls.field_names()}
        else:
            data = {}
            for name in cls.field_names():
                try:
                    value = getattr(obj, name)
                except AttributeError:
                    continue
                if callable(value) and not isinstance(value, (int, str)):
                    continue  # MagicMock-style attribute, not a value
                data[name] = value
        return cls.from_dict(data, **overrides)

    @classmethod
    def from_megatron(cls, *, world_size: int, mcore: str = DEFAULT_MCORE,
                      **kwargs) -> "ParallelismConfig":
        """Build from exactly the keyword arguments of Megatron's ``initialize_model_parallel``.

        ``mcore`` picks the API profile: ``"0.16"`` (0.16.x-0.17.x, takes
        ``create_all_gather_group``), ``"0.18"`` (0.18.x, neither that nor GTP) or
        ``"0.19"`` (0.19.x and later, takes ``gtp_remat_size`` and
        ``expert_gtp_remat_size``). A keyword that version does not have is a
        :class:`LayoutError` (Megatron raises ``TypeError``).

        >>> ParallelismConfig.from_megatron(world_size=8, tensor_model_parallel_size=2,
        ...     create_all_gather_group=True, mcore="0.16").create_all_gather_group
        True
        """
        from .profiles import megatron_kwargs  # local: profiles imports this module

        allowed = megatron_kwargs(mcore)
        bad = sorted(set(kwargs) - set(allowed))
        if bad:
            raise LayoutError(
                f"initialize_model_parallel() of megatron-core {mcore} has no keyword(s) "
                f"{', '.join(bad)} (Megatron raises TypeError); "
                + ("use mcore='0.16' for create_all_gather_group, or set it on the NeMo config "
                   "for the 0.18+ create_all_gather_groups() path (mcore '0.18' or '0.19')."
                   if "create_all_gather_group" in bad else
                   f"valid keywords are: {', '.join(sorted(allowed))}."),
                megatron_error="TypeError", keywords=bad,
            )
        cfg: dict[str, Any] = {}
        for key, value in kwargs.items():
            if key in ("get_embedding_ranks", "get_position_embedding_ranks"):
                if value is not None:
                    raise LayoutError(
                        f"{key} is a callable; simharness models only Megatron's default "
                        f"embedding ranks (first and last pipeline stage). Pass None.",
                        keyword=key)
                continue
            if key == "local_world_size":
                if value is not None:
                    if value != world_size:
                        cfg["world_size"] = value
                continue
            if key == "create_gloo_process_groups":
                cfg["use_gloo_process_groups"] = bool(value)
                continue
            cfg[key] = value
        cfg.setdefault("world_size", world_size)
        if "order" not in cfg:
            cfg["order"] = DEFAULT_ORDER
        return cls(**cfg)

    def replace(self, **changes) -> "ParallelismConfig":
        """A copy with some fields changed (validated again)."""
        if "use_tp_pp_dp_mapping" in changes and "order" not in changes:
            changes["order"] = None
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(changes)
        return ParallelismConfig(**data)

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (tuples become lists)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    # -------------------------------------------------------- derived sizes
    @property
    def tp(self) -> int:
        return self.tensor_model_parallel_size

    @property
    def pp(self) -> int:
        return self.pipeline_model_parallel_size

    @property
    def cp(self) -> int:
        return self.context_parallel_size

    @property
    def ep(self) -> int:
        return self.expert_model_parallel_size

    @property
    def expert_tensor_parallel_size_resolved(self) -> int:
        """Megatron's ``expert_tensor_parallel_size or tensor_model_parallel_size``."""
        return self.expert_tensor_parallel_size or self.tensor_model_parallel_size

    @property
    def etp(self) -> int:
        return self.expert_tensor_parallel_size_resolved

    @property
    def model_size(self) -> int:
        """``tp*pp*cp*gtp``: the divisor Megatron checks the world against."""
        return self.tp * self.pp * self.cp * self.gtp_remat_size

    @property
    def model_parallel_size(self) -> int:
        """``tp*pp``: ranks in one MODEL_PARALLEL_GROUP (NeMo's model_parallel_size)."""
        return self.tp * self.pp

    @property
    def data_parallel_size(self) -> int:
        """``world / (tp*pp*cp*gtp)``."""
        return self.world_size // self.model_size

    @property
    def dp(self) -> int:
        return self.data_parallel_size

    @property
    def data_parallel_size_with_cp(self) -> int:
        """Ranks in one DATA_PARALLEL_GROUP_WITH_CP: ``dp*cp``."""
        return self.data_parallel_size * self.cp

    @property
    def expert_model_size(self) -> int:
        """``etp*ep*pp*egtp``: the expert divisor of the world."""
        return self.etp * self.ep * self.pp * self.expert_gtp_remat_size

    @property
    def expert_data_parallel_size(self) -> int:
        """``world / (etp*ep*pp*egtp)``."""
        return self.world_size // self.expert_model_size

    @property
    def edp(self) -> int:
        return self.expert_data_parallel_size

    @property
    def intra_partial_data_parallel_size(self) -> int:
        """``dp*cp / num_distributed_optimizer_instances``."""
        return self.data_parallel_size_with_cp // self.num_distributed_optimizer_instances

    @property
    def intra_partial_expert_data_parallel_size(self) -> int:
        return self.expert_data_parallel_size // self.num_distributed_optimizer_instances

    @property
    def pp_last(self) -> bool:
        """Megatron's test ``order.endswith("pp")`` (on the order as given)."""
        return self.order.endswith("pp")

    @property
    def ranks(self) -> range:
        return range(self.rank_offset, self.rank_offset + self.world_size)


def order_problem(order: str, sizes: Mapping[str, int]) -> LayoutError | None:
    """Megatron's RankGenerator order handling, as an error or None.

    Checked in Megatron's sequence: a dimension of size > 1 missing from the
    order first (``RuntimeError``), then tokens it has no size for (the
    ``name_to_size`` lookup: ``KeyError``). Megatron does not check for a
    repeated token; simharness rejects it (``values["repeated"]`` names the
    tokens, and :func:`validate` works out what Megatron would do).

    >>> order_problem("tp-dp-pp", {"tp": 2, "cp": 2, "ep": 1, "dp": 2, "pp": 1}).megatron_error
    'RuntimeError'
    >>> order_problem("tp-xx-dp-pp", {"tp": 2, "cp": 2, "ep": 1, "dp": 2, "pp": 1}).megatron_error
    'RuntimeError'
    """
    low = order.lower()
    tokens = low.split("-")
    for name, size in sizes.items():
        # Megatron tests substring membership on the lowercased order.
        if name not in low and size != 1:
            return LayoutError(
                f"order {order!r} has no {name!r} but its size is {size} (Megatron: 'The size of "
                f"({name}) is ({size}), but you haven'tspecified the order ({order}).'); add "
                f"'{name}' to the order, e.g. {DEFAULT_ORDER!r}.",
                megatron_error="RuntimeError", order=order, **{name: size})
    unknown = [t for t in tokens if t not in sizes]
    if unknown:
        return LayoutError(
            f"order {order!r} has unknown token(s) {', '.join(map(repr, unknown))}; use only "
            f"{', '.join(sizes)} joined by '-', e.g. {DEFAULT_ORDER!r}.",
            megatron_error="KeyError", order=order)
    dup = sorted({t for t in tokens if tokens.count(t) > 1})
    if dup:
        return LayoutError(
            f"order {order!r} repeats {', '.join(map(repr, dup))}; name each dimension once, "
            f"e.g. {DEFAULT_ORDER!r}.", order=order, repeated=dup)
    return None


# Tokens initialize_model_parallel asks each generator for (every other list is a
# part of one of these).
_DENSE_TOKENS = ("dp-cp", "dp", "cp", "tp-pp", "tp", "pp", "tp-dp-cp", "tp-dp", "tp-cp")
_EXPERT_TOKENS = ("ep", "tp", "tp-ep", "tp-ep-pp", "dp")


def _repeated_order_outcome(cfg: "ParallelismConfig") -> str | None:
    """What Megatron does with an order that names a dimension twice.

    It does not check: its RankGenerator keeps one size per token occurrence, so
    it enumerates a grid of ``W * s`` positions (``s`` the repeated sizes), masks
    the first occurrence, and ``get_ranks`` returns the first ``W // group_size``
    groups. It fails only when the two generators' pipeline lists then differ
    (``AssertionError``) or a group holds a rank ``>= W`` (torch's ``new_group``:
    ``ValueError: Rank N is out of range``); otherwise it accepts the input.
    """
    import numpy as np

    from .grid import Grid

    W = cfg.world_size

    def megatron_grid(sizes: dict[str, int]) -> Grid:
        low = cfg.order.lower()
        for name in sizes:  # Megatron appends missing names in name_to_size order
            if name not in low:
                low = f"{low}-{name}"
        names = tuple(low.split("-"))
        return Grid(names, tuple(sizes[t] for t in names))

    def lists(grid: Grid, token: str) -> np.ndarray:
        return grid.groups(token)[: W // grid.group_size(token)]

    dense = megatron_grid(dict(tp=cfg.tp, pp=cfg.pp, dp=cfg.dp, ep=1, cp=cfg.cp))
    expert = megatron_grid(dict(tp=cfg.etp, pp=cfg.pp, dp=cfg.edp, ep=cfg.ep, cp=1))
    if not np.array_equal(lists(dense, "pp"), lists(expert, "pp")):
        return "AssertionError"
    for grid, tokens in ((dense, _DENSE_TOKENS), (expert, _EXPERT_TOKENS)):
        if any(int(lists(grid, t).max()) >= W for t in tokens):
            return "ValueError"
    return None


_order_problem = order_problem  # former private name


def validate(cfg: ParallelismConfig) -> None:
    """Raise :class:`LayoutError` for every input Megatron-Core or NeMo rejects.

    Checks run in Megatron's order, so the first error is the one Megatron
    (or NeMo, for ``world < pp``) would raise. Profile-specific rules
    (gtp_remat before 0.19, the 0.19 GTP limits) live in ``profiles``.
    """
    W, tp, pp, cp, ep = cfg.world_size, cfg.tp, cfg.pp, cfg.cp, cfg.ep
    n = cfg.num_distributed_optimizer_instances
    # NeMo's init_parallel_ranks / initialize_model_parallel_for_nemo.
    if W < pp:
        raise LayoutError(
            f"world_size ({W}) is smaller than pipeline_model_parallel_size ({pp}) "
            f"(NeMo: 'Expected world_size ({W}) to be greater than/equal to pipeline size "
            f"({pp})'); use at least {pp} ranks or a smaller pipeline.",
            # NeMo's ValueError comes first in a NeMo run; megatron-core alone raises
            # RuntimeError here (W < pp means W is not divisible by tp*pp*cp).
            megatron_error="RuntimeError", nemo_error="ValueError", world_size=W,
            pipeline_model_parallel_size=pp)
    if cfg.encoder_pipeline_model_parallel_size != 0:
        raise LayoutError(
            f"encoder_pipeline_model_parallel_size={cfg.encoder_pipeline_model_parallel_size}: "
            f"NeMo asserts it is 0 (the encoder/decoder split was removed from megatron-core); "
            f"set it to 0.", megatron_error="AssertionError")
    if cfg.encoder_tensor_model_parallel_size not in (0, tp):
        raise LayoutError(
            f"encoder_tensor_model_parallel_size={cfg.encoder_tensor_model_parallel_size} must be "
            f"0 or equal to tensor_model_parallel_size ({tp}) (NeMo asserts it); set it to 0.",
            megatron_error="AssertionError")
    # SHARP pre-checks.
    if cfg.use_sharp:
        if cfg.sharp_enabled_group not in (None, "dp", "dp_replica"):
            raise LayoutError(
                f"sharp_enabled_group={cfg.sharp_enabled_group!r} is invalid (Megatron: "
                f"'Invalid sharp_enabled_group'); use 'dp' or 'dp_replica'.",
                megatron_error="AssertionError")
        if cfg.sharp_enabled_group == "dp_replica" and n <= 1:
            raise LayoutError(
                "sharp_enabled_group='dp_replica' needs num_distributed_optimizer_instances > 1 "
                f"(got {n}); raise the instances or use 'dp'.", megatron_error="AssertionError")
    elif cfg.sharp_enabled_group is not None:
        raise LayoutError(
            f"sharp_enabled_group={cfg.sharp_enabled_group!r} is only valid with use_sharp=True; "
            "set use_sharp or drop sharp_enabled_group.", megatron_error="AssertionError")
    # megatron-core 0.19 asserts this before the divisibility checks (GTP exists only from 0.19;
    # the 0.16 and 0.18 profiles reject any GTP size > 1 in profiles.validate_profile).
    if (cfg.gtp_remat_size > 1 or cfg.expert_gtp_remat_size > 1) and n > 1:
        raise LayoutError(
            f"gtp_remat_size={cfg.gtp_remat_size}, expert_gtp_remat_size="
            f"{cfg.expert_gtp_remat_size} with "
            f"num_distributed_optimizer_instances={n} (Megatron 0.19: 'GTP_remat with "
            f"num_distributed_optimizer_instances > 1 is not yet supported.'); use one instance "
            f"or GTP sizes of 1.", megatron_error="AssertionError")
    # Divisibility of the dense grid.
    if W % cfg.model_size:
        gtp = f"*gtp_remat({cfg.gtp_remat_size})" if cfg.gtp_remat_size > 1 else ""
        raise LayoutError(
            f"world_size ({W}) is not divisible by {cfg.model_size} = tp({tp})*pp({pp})*cp({cp})"
            f"{gtp} (Megatron: 'world_size ({W}) is not divisible by {cfg.model_size}'); use a "
            f"world that is a multiple of {cfg.model_size}, e.g. "
            f"{(W // cfg.model_size + 1) * cfg.model_size}, or change tp/pp/cp.",
            megatron_error="RuntimeError", world_size=W, model_size=cfg.model_size)
    if cfg.virtual_pipeline_model_parallel_size is not None and pp <= 1:
        raise LayoutError(
            f"virtual_pipeline_model_parallel_size={cfg.virtual_pipeline_model_parallel_size} "
            f"needs pipeline_model_parallel_size > 1 (got {pp}) (Megatron: 'pipeline-model-"
            f"parallel size should be greater than 1 with interleaved schedule'); unset vpp or "
            f"raise pp.", megatron_error="RuntimeError")
    # Generators: dense first, then expert (Megatron's order).
    problem = order_problem(cfg.order, {"tp": tp, "pp": pp, "dp": cfg.dp, "ep": 1, "cp": cp})
    repeated = problem if problem is not None and problem.values.get("repeated") else None
    if problem and not repeated:
        raise problem
    emp = cfg.expert_model_size
    if W % emp:
        raise LayoutError(
            f"world_size ({W}) is not divisible by expert_tensor_model_pipeline_parallel size "
            f"({emp}) = etp({cfg.etp})*ep({ep})*pp({pp}) (Megatron RuntimeError); use a world "
            f"that is a multiple of {emp} or change expert_tensor_parallel_size / "
            f"expert_model_parallel_size.",
            megatron_error="RuntimeError", world_size=W, expert_model_size=emp)
    problem = order_problem(cfg.order, {"tp": cfg.etp, "pp": pp, "dp": cfg.edp, "ep": ep,
                                         "cp": 1})
    if problem and not problem.values.get("repeated"):
        raise problem
    if not (cfg.pp_last or pp == 1 or cfg.edp == cfg.dp):
        raise LayoutError(
            f"order {cfg.order!r} does not end with 'pp', pp={pp} > 1 and the expert data-"
            f"parallel size ({cfg.edp}) differs from the data-parallel size ({cfg.dp}) (Megatron: "
            f"'When not using pp-last rank ordering, the data parallel size of the attention and "
            f"moe layers must be the same'); make etp*ep equal tp*cp ({tp * cp}) or use a pp-last "
            f"order such as {DEFAULT_ORDER!r}.",
            megatron_error="AssertionError", dp=cfg.dp, expert_dp=cfg.edp)
    if repeated:  # Megatron goes on with a bogus grid; say what it then does
        raise LayoutError(str(repeated), megatron_error=_repeated_order_outcome(cfg),
                          **repeated.values)
    # Dense and expert pipeline groups must agree (checked on the arrays).
    from .grid import Grid  # local import: grid is pure numpy, no cycle at runtime

    dense, expert = Grid.dense(cfg), Grid.expert(cfg)
    if not dense.same_groups(expert, "pp"):
        raise LayoutError(
            f"with order {cfg.order!r} the dense and expert pipeline groups differ (Megatron: "
            f"'Pipeline parallel groups are expected to be the same for Non-Expert and Expert "
            f"part'); make etp*ep equal tp*cp ({tp * cp}) or use order {DEFAULT_ORDER!r}.",
            megatron_error="AssertionError")
    if cfg.data_parallel_size_with_cp % n:
        raise LayoutError(
            f"num_distributed_optimizer_instances ({n}) does not divide dp*cp = "
            f"{cfg.dp}*{cp} = {cfg.data_parallel_size_with_cp} (Megatron: 'Data parallel size "
            f"should be divisible by partial DistOpt shard factor'); use a divisor of "
            f"{cfg.data_parallel_size_with_cp}.",
            megatron_error="AssertionError", instances=n, dp_cp=cfg.data_parallel_size_with_cp)
    if cfg.hybrid_context_parallel and cfg.data_parallel_size_with_cp % 2:
        raise LayoutError(
            f"hybrid_context_parallel needs an even dp*cp, got {cfg.data_parallel_size_with_cp} "
            f"(Megatron: 'Hybrid context parallel requires an even number of ranks').",
            megatron_error="AssertionError")
    if cfg.hierarchical_context_parallel_sizes:
        prod = math.prod(cfg.hierarchical_context_parallel_sizes)
        if prod != cp:
            raise LayoutError(
                f"hierarchical_context_parallel_sizes {list(cfg.hierarchical_context_parallel_sizes)}"
                f" multiply to {prod}, not context_parallel_size ({cp}) (Megatron: bare "
                f"AssertionError); give sizes whose product is {cp}.",
                megatron_error="AssertionError")
    if cfg.pipeline_model_parallel_comm_backend not in (None, "nccl", "ucc"):
        raise LayoutError(
            f"pipeline_model_parallel_comm_backend={cfg.pipeline_model_parallel_comm_backend!r} "
            f"is not supported (Megatron asserts None, 'nccl' or 'ucc'); use one of those.",
            megatron_error="AssertionError")
    if cfg.edp % n:
        raise LayoutError(
            f"num_distributed_optimizer_instances ({n}) does not divide the expert data-parallel "
            f"size ({cfg.edp}) (Megatron: 'Expert data parallel size should be divisible by "
            f"partial DistOpt shard factor'); use a divisor of {cfg.edp}.",
            megatron_error="AssertionError", instances=n, expert_dp=cfg.edp)
