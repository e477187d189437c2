"""`ParallelismConfig`: NeMo's parallelism fields, validated in one place.

The dataclass takes every field of NeMo's
``nemo.lightning.pytorch.strategies.megatron_strategy.ParallelismConfig`` under
NeMo's names and defaults, plus the Megatron-only inputs that change the groups
(``world_size``, ``order``, ``hierarchical_context_parallel_sizes``,
``rank_offset``, ...). Derived sizes are properties. The fields, their
normalisation and type checks are :class:`simharness.fields.ParallelismFields`;
a :class:`ParallelismConfig` is one that has also been validated.

>>> cfg = ParallelismConfig(world_size=16, tensor_model_parallel_size=2,
...                         pipeline_model_parallel_size=2, context_parallel_size=2)
>>> cfg.data_parallel_size, cfg.order, cfg.model_parallel_size
(2, 'tp-cp-ep-dp-pp', 4)

Validation (:func:`validate`) runs the rule table of :mod:`simharness.rules`:
what Megatron-Core (``initialize_model_parallel``, ``RankGenerator``,
``create_all_gather_groups``, torch's ``new_group``) and NeMo
(``init_parallel_ranks``, ``initialize_model_parallel_for_nemo``) reject, per
megatron-core profile, in Megatron's order; every rejection is a
:class:`~simharness.errors.LayoutError` that names the values and the fix and
carries Megatron's exception type. Inputs Megatron accepts but that look wrong
are not errors here: the checker reports them as warnings (see
:func:`simharness.checks.check`).

A bare ``ParallelismConfig(...)`` names no profile, so its construction accepts what
some profile accepts (the default profile is tried first; the others only when it
rejects). A command knows its profile: :func:`validated` validates the fields once, for
that profile. ``DEFAULT_ORDER`` is defined in :mod:`simharness.grid`, ``MCORE_PROFILES``
and ``DEFAULT_MCORE`` in :mod:`simharness.profiles` (imported here).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .errors import LayoutError
from .fields import (
    ALIASES,
    BOOL_FIELDS,
    GROUP_FIELDS,
    TP_PP_DP_ORDER,
    ParallelismFields,
    _pos_int,
    _resolved,
)
from .profiles import (
    DEFAULT_MCORE,
    DEFAULT_ORDER,
    MCORE_PROFILES,
    check_profile,
    megatron_kwargs,
)
from .rules import first_failure

__all__ = ["ALIASES", "BOOL_FIELDS", "DEFAULT_MCORE", "DEFAULT_ORDER", "GROUP_FIELDS",
           "MCORE_PROFILES", "TP_PP_DP_ORDER", "ParallelismConfig", "ParallelismFields",
           "_pos_int", "_resolved", "validate", "validated"]


@dataclass(frozen=True)
class ParallelismConfig(ParallelismFields):
    """NeMo ``ParallelismConfig`` fields plus the world they run on, validated.

    ``world_size=None`` picks the smallest world the sizes fit:
    ``lcm(tp*pp*cp, etp*ep*pp)`` grown until the optimizer instances divide
    the data-parallel sizes. Construction raises :class:`LayoutError` for sizes no
    megatron-core profile accepts (:func:`validate` without a profile).
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        validate(self)

    # ---------------------------------------------------------- constructors
    @classmethod
    def unchecked(cls, **fields_: Any) -> ParallelismConfig:
        """A configuration of these fields, normalised and type-checked but NOT validated
        (for tests and tools that evaluate the rules on an input Megatron may reject;
        :func:`validate` or :func:`simharness.rules.evaluate_all` judge it later).

        >>> ParallelismConfig.unchecked(world_size=12, tensor_model_parallel_size=8).dp
        1
        """
        return cls._adopt(ParallelismFields(**fields_))

    @classmethod
    def _adopt(cls, raw: ParallelismFields) -> ParallelismConfig:
        """``raw``'s values as an instance of ``cls``, without running its checks again."""
        out = object.__new__(cls)
        for f in fields(raw):
            object.__setattr__(out, f.name, getattr(raw, f.name))
        return out

    @classmethod
    def from_megatron(cls, *, world_size: int, mcore: str = DEFAULT_MCORE,
                      **kwargs) -> ParallelismConfig:
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
                if value is not None and value != world_size:
                    cfg["world_size"] = value
                continue
            if key == "create_gloo_process_groups":
                cfg["use_gloo_process_groups"] = bool(value)
                continue
            cfg[key] = value
        cfg.setdefault("world_size", world_size)
        if "order" not in cfg:
            cfg["order"] = DEFAULT_ORDER
        out = cls.unchecked(**cfg)
        validate(out, mcore, world=world_size)
        return out

    def replace(self, **changes) -> ParallelismConfig:
        """A copy with some fields changed (validated again).

        The mapping and the order are one value: changing one alone resets the other
        (a new order drops ``use_tp_pp_dp_mapping`` unless it is that mapping's order).
        """
        if "use_tp_pp_dp_mapping" in changes and "order" not in changes:
            changes["order"] = None
        elif "order" in changes and "use_tp_pp_dp_mapping" not in changes:
            changes["use_tp_pp_dp_mapping"] = changes["order"] == TP_PP_DP_ORDER
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(changes)
        return ParallelismConfig(**data)


def validate(cfg: ParallelismFields, mcore: str | None = None, *,
             world: int | None = None) -> None:
    """Raise :class:`LayoutError` for an input megatron-core ``mcore`` (or NeMo) rejects.

    The rules are :data:`simharness.rules.RULES`, checked in Megatron's order, so the
    error is the one Megatron (or NeMo, for ``world < pp``) raises first, with its
    exception type in ``megatron_error``. ``world`` is the torch world when the job is a
    window of it (``local_world_size``); it defaults to ``rank_offset + world_size``.
    Without ``mcore`` (a bare :class:`ParallelismConfig`) the input must be valid for
    some profile; the default profile's error is raised when none takes it.

    >>> cfg = ParallelismConfig(world_size=8, order="cp-ep-dp-pp")   # valid for 0.16-0.18
    >>> try:
    ...     validate(cfg, "0.19")
    ... except LayoutError as exc:
    ...     print(exc.megatron_error, exc.values["rule"])
    ValueError tp-token
    """
    if mcore is not None:
        error = first_failure(cfg, mcore, world)
        if error is not None:
            raise error
        return
    errors = []
    for name in (DEFAULT_MCORE, *(p for p in MCORE_PROFILES if p != DEFAULT_MCORE)):
        error = first_failure(cfg, name, world)
        if error is None:
            return
        errors.append(error)
    raise errors[0]


def validated(raw: ParallelismFields, mcore: str, *,
              world: int | None = None) -> ParallelismConfig:
    """``raw`` as a :class:`ParallelismConfig`, validated once, for profile ``mcore``.

    The error is the one constructing ``ParallelismConfig(**raw)`` and then calling
    ``validate(cfg, mcore, world=world)`` raises: when no profile accepts the input, the
    default profile's error (a bare configuration must suit some profile first);
    otherwise ``mcore``'s. Only the failure path (and a ``world`` larger than the
    configuration's own) evaluates other profiles.

    >>> from simharness.fields import ParallelismFields
    >>> validated(ParallelismFields(world_size=8, tensor_model_parallel_size=2), "0.18").dp
    4
    """
    try:
        error = first_failure(raw, check_profile(mcore), world)
    except LayoutError as exc:  # an unknown profile
        error = exc
    if error is None:
        if world is not None:  # accepted in the larger torch world; a bare configuration
            validate(raw)      # must suit some profile in its own world first
        return ParallelismConfig._adopt(raw)
    try:
        validate(raw)
    except LayoutError as any_profile:
        raise any_profile from None
    raise error
