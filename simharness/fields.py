"""`ParallelismFields`: NeMo's parallelism fields, normalised and type-checked.

The first step of every command: flags, a file or a mapping become one
:class:`ParallelismFields` (aliases resolved, strings such as ``"2,2"`` read, every
value type-checked, ``world_size=None`` and ``order=None`` filled in). Derived sizes are
properties; the two Megatron generators of these sizes are :meth:`~ParallelismFields.dense_grid`
and :meth:`~ParallelismFields.expert_grid`. Nothing here asks whether Megatron-Core
accepts the sizes: that is validation (:mod:`simharness.rules`, run once by
:class:`simharness.config.ParallelismConfig`, the validated subclass, or by
:func:`simharness.config.validated` for one profile). The type of each field's value is
described in :mod:`simharness.fieldtypes`.

>>> f = ParallelismFields(world_size=12, tensor_model_parallel_size=8)   # not validated
>>> f.order, f.data_parallel_size
('tp-cp-ep-dp-pp', 1)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from .errors import LayoutError
from .fieldtypes import FIELD_TYPES
from .grid import DEFAULT_ORDER, Grid

TP_PP_DP_ORDER = "tp-cp-ep-pp-dp"  # NeMo's use_tp_pp_dp_mapping

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

# Fields whose value must be a real bool (see simharness.fieldtypes).
BOOL_FIELDS = tuple(name for name, t in FIELD_TYPES.items() if t.kind == "bool")

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


T = TypeVar("T")
_F = TypeVar("_F", bound="ParallelismFields")


def _resolved(name: str, value: T | None) -> T:
    """``value`` of a field ``__post_init__`` always fills in (a None here is a bug)."""
    if value is None:
        raise AssertionError(f"ParallelismConfig.{name} was not resolved at construction")
    return value


@dataclass(frozen=True)
class ParallelismFields:
    """NeMo ``ParallelismConfig`` fields plus the world they run on, normalised and
    type-checked but not validated (:class:`~simharness.config.ParallelismConfig` is the
    validated subclass).

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
    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen)
        if self.order is None:
            set_("order", TP_PP_DP_ORDER if self.use_tp_pp_dp_mapping else DEFAULT_ORDER)
        elif self.use_tp_pp_dp_mapping is True and self.order != TP_PP_DP_ORDER:
            # Two sources of one value: NeMo turns the mapping into this order.
            raise LayoutError(
                f"order {self.order!r} conflicts with use_tp_pp_dp_mapping=True (which means "
                f"order {TP_PP_DP_ORDER!r}); give one of them.",
                order=self.order, use_tp_pp_dp_mapping=True)
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
        for name in BOOL_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                shown = f"the string {value!r}" if isinstance(value, str) else repr(value)
                raise LayoutError(f"{name} must be True or False, got {shown}; pass a bool "
                                  f"(a string such as 'false' would count as true).",
                                  **{name: value})
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
    def from_dict(cls: type[_F], data: Mapping[str, Any], **overrides) -> _F:
        """Build from a mapping of field names (NeMo's, or the short aliases).

        Unknown keys are an error that lists the close matches.
        >>> ParallelismFields.from_dict({"tp": 2, "world_size": 4}).data_parallel_size
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
    def from_object(cls: type[_F], obj: Any, **overrides) -> _F:
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
    def world_size_resolved(self) -> int:
        """``world_size`` as construction resolved it (the smallest world when None was
        given); typed ``int``, for arithmetic."""
        return _resolved("world_size", self.world_size)

    @property
    def order_resolved(self) -> str:
        """``order`` as construction resolved it (NeMo's default for the mapping when None
        was given); typed ``str``."""
        return _resolved("order", self.order)

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
        return self.world_size_resolved // self.model_size

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
        return self.world_size_resolved // self.expert_model_size

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
        return self.order_resolved.endswith("pp")

    @property
    def ranks(self) -> range:
        return range(self.rank_offset, self.rank_offset + self.world_size_resolved)

    # ------------------------------------------------------------ generators
    def dense_grid(self, *, order: str | None = None, offset: int | None = None,
                   gtp_token: bool = False) -> Grid:
        """The decoder generator of ``initialize_model_parallel`` (:meth:`Grid.dense`) of
        these sizes; ``order`` and ``offset`` default to the configuration's."""
        return Grid.dense(self.order_resolved if order is None else order,
                          tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp,
                          gtp=self.gtp_remat_size,
                          offset=self.rank_offset if offset is None else offset,
                          gtp_token=gtp_token)

    def expert_grid(self, *, order: str | None = None, offset: int | None = None,
                    gtp_token: bool = False) -> Grid:
        """The expert generator (:meth:`Grid.expert`) of these sizes."""
        return Grid.expert(self.order_resolved if order is None else order,
                           etp=self.etp, ep=self.ep, pp=self.pp, edp=self.edp,
                           egtp=self.expert_gtp_remat_size,
                           offset=self.rank_offset if offset is None else offset,
                           gtp_token=gtp_token)


__all__ = ["ALIASES", "BOOL_FIELDS", "DEFAULT_ORDER", "GROUP_FIELDS", "TP_PP_DP_ORDER",
           "ParallelismFields"]
