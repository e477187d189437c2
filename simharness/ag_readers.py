"""Who reads the all-gather groups that ``create_all_gather_group`` builds: one table.

The option builds a second data-parallel communicator: ``dp_cp_ag`` over the
DP-with-CP ranks and, from 0.18 with ``ep > 1``, ``ep_dp_ag`` over the expert-DP
ranks (Megatron's ``pg_collection.dp_cp_ag`` / ``pg_collection.expt_dp_ag``). It only
helps when some data-parallel implementation moves its parameter all-gather onto it.
Megatron's source is the judge of which one does; this module holds the answer per
megatron-core profile (:data:`~simharness.profiles.MCORE_PROFILES`, plus ``"main"``,
Megatron-LM's main branch where it differs), each row citing the file and function
of Megatron that reads the group. ``tests/parity/test_ag_readers_parity.py`` scans the
installed megatron-core (and the cached 0.17.1 / 0.18.2 / 0.19.2 trees) for every
call site and fails when this table and the code disagree.

What the code says (megatron-core 0.16.1, 0.17.1, 0.18.2, 0.19.2 and main):

* **Megatron-FSDP** (``use_megatron_fsdp``, or the older ``use_custom_fsdp``) is the
  only reader. Its ``ParamAndGradBuffer._init_each_parameter_group_buffers`` puts
  each parameter group's *model weight buffer* on the AG group, so the parameter
  all-gather (``AllGatherPipeline.async_bucket_gather``) runs there while the
  gradient reduce-scatter stays on the DP group. That buffer exists for the
  sharding strategies ``optim``, ``optim_grads`` and ``optim_grads_params``;
  ``no_shard`` builds none and gathers nothing. Expert parameters use the expert
  twin from 0.18 (0.16/0.17 build none). Hybrid FSDP with outer sharding
  (``num_distributed_optimizer_instances > 1`` and ``outer_dp_sharding_strategy``
  not ``no_shard``) keeps the gather on its own groups.
* **DDP with the distributed optimizer** gathers parameters in
  ``_ParamAndGradBucketGroup.start_param_sync`` on the bucket group's
  ``intra_distributed_optimizer_instance_group``, the communicator of its gradient
  reduce-scatter: nothing in it asks for the AG group.
* **Plain DDP** all-reduces gradients and gathers no parameters.
* **torch FSDP2** (Megatron's ``use_torch_fsdp2``) shards over the DP-with-CP group;
  its own twin, torch's ``FSDPModule.set_separate_reduce_scatter_group()``, gives the
  *reduce-scatter* a group that torch creates itself. It never reads Megatron's AG group.
* **Megatron-FSDP v2** (main only, ``megatron_fsdp_version=2``) builds its meshes
  from ``pg_collection.dp_cp`` / ``expt_dp`` and reads no AG group.

The words every command prints live here too: :class:`DPImpl` (the user's implementation,
from ``--dp-impl`` or a recipe's ``ddp:`` block, :func:`dp_impl_from_ddp_block`),
:func:`all_gather_use` (inspect, diff, the summary), :func:`option_off_sentence` and
:func:`no_effect_words` (check), :func:`datapath_variants` (replay-data),
:func:`memory_case` (which memory case check, diff and simulate price: communicators
created at a group's first collective, as Megatron-LM's ``megatron/training/initialize.py``
``_initialize_distributed`` at main d98e8a64 leaves them by passing no ``device_id`` to
``init_process_group``, or eagerly with ``device_id``), and :func:`reader_table_markdown`
(docs/all-gather-option.md).

Pure data and functions (no torch).

>>> reads_ag_group("0.16", "fsdp", sharding="optim_grads_params")
True
>>> reads_ag_group("0.19", "dist-opt")
False
>>> print(ag_reader_sentence("0.19", "dist-opt"))
nothing in DDP with the distributed optimizer reads dp_cp_ag: it gathers parameters on its \
reduce-scatter group (_ParamAndGradBucketGroup.start_param_sync), so the option costs a \
communicator and buys nothing
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .configfile import ConfigFileError
from .profiles import MCORE_PROFILES, PROFILES

Impl = Literal["fsdp", "fsdp-v2", "dist-opt", "ddp", "torch-fsdp2", "unknown"]
IMPLS: tuple[Impl, ...] = ("fsdp", "fsdp-v2", "dist-opt", "ddp", "torch-fsdp2", "unknown")
IMPL_NAMES: dict[str, str] = {
    "fsdp": "Megatron-FSDP",
    "fsdp-v2": "Megatron-FSDP v2",
    "dist-opt": "DDP with the distributed optimizer",
    "ddp": "DDP without the distributed optimizer",
    "torch-fsdp2": "torch FSDP2",
    "unknown": "an unknown data-parallel implementation",
}
SHARDING_STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")
AG_PROFILES = MCORE_PROFILES + ("main",)
KIND = {False: "dp_cp_ag", True: "ep_dp_ag"}  # simharness's kind of each side's AG group

# Megatron's source each profile's rows are pinned to (paths under megatron/core/).
PINNED: dict[str, str] = {
    "0.16": "megatron-core 0.16.1 (0.17.1 has the same call sites)",
    "0.18": "megatron-core 0.18.2",
    "0.19": "megatron-core 0.19.2",
    "main": "Megatron-LM main, commit d98e8a64 (2026-08-22)",
}
SHORT_PIN = {"0.16": "megatron-core 0.16.1", "0.18": "megatron-core 0.18.2",
             "0.19": "megatron-core 0.19.2", "main": "Megatron-LM main"}


@dataclass(frozen=True)
class Site:
    """One place in ``megatron/core/<path>`` that reads an AG group: ``function`` is the
    enclosing ``Class.method`` (or function), ``side`` ``"dense"``, ``"expert"`` or
    ``"both"`` (the side is chosen at run time)."""

    path: str
    function: str
    side: str
    what: str

    @property
    def label(self) -> str:
        return f"{self.path} {self.function}"


@dataclass(frozen=True)
class Reader:
    """What one data-parallel implementation does with the AG groups under one profile.

    ``dense`` / ``expert``: whether it reads ``dp_cp_ag`` / ``ep_dp_ag``; ``sharding``:
    the Megatron-FSDP strategies under which its parameter all-gather runs there (empty
    for the others); ``sites``: Megatron's call sites that read the group (what the
    parity test compares); ``where``: the function that moves the parameters, whatever
    group it uses; ``notes``: conditions worth saying."""

    impl: Impl
    dense: bool
    expert: bool
    sharding: tuple[str, ...]
    where: str
    sites: tuple[Site, ...] = ()
    notes: tuple[str, ...] = ()


_FSDP = "distributed/fsdp/src/megatron_fsdp/"
_PGB = _FSDP + "param_and_grad_buffer.py"
_ADAPTER = "distributed/fsdp/mcore_fsdp_adapter.py"
_GATHER = ("AllGatherPipeline.async_bucket_gather (all_gather_into_tensor on the model "
           "weight buffer's group)")
_SHARDED = ("optim", "optim_grads", "optim_grads_params")
_NCCL_UB = ("with nccl_ub the buffer registration also runs a barrier on the AG group "
            "(ParamAndGradBuffer.__init__), whatever the strategy")
_HSDP = ("hybrid FSDP with outer sharding (num_distributed_optimizer_instances > 1, "
         "outer_dp_sharding_strategy not 'no_shard') keeps the gather off the AG group")
_NO_SHARD = "'no_shard' builds no model weight buffer and gathers no parameters"


def _fsdp_rows(profile: str) -> Reader:
    if profile == "0.16":
        return Reader("fsdp", True, False, _SHARDED, _GATHER, (
            Site(_FSDP + "utils.py", "FSDPDistributedIndex.__init__", "dense",
                 "parallel_state.has_separate_all_gather_group() and "
                 "get_data_parallel_group(with_context_parallel=True, "
                 "independent_all_gather=True)"),
            Site(_PGB, "ParamAndGradBuffer.__init__", "dense",
                 "get_fsdp_group(independent_all_gather=True) for nccl_ub registration"),
            Site(_PGB, "ParamAndGradBuffer._init_each_parameter_group_buffers", "dense",
                 "get_fsdp_group(is_expert_parallel=False, independent_all_gather=True) "
                 "as the model weight buffer's group"),
        ), (_NO_SHARD, "expert parameters stay on the expert DP group (no expert AG group "
            "exists before 0.18)", _HSDP, _NCCL_UB))
    adapter = "FullyShardedDataParallelV1._init_dist_index" if profile == "main" \
        else "FullyShardedDataParallel._init_dist_index"
    notes = [_NO_SHARD, _HSDP, _NCCL_UB,
             "the training loop must put the groups in pg_collection (Megatron-LM's "
             "get_model calls create_all_gather_groups(); otherwise dp_cp_ag is None)"]
    if profile == "main":
        notes.append("megatron_fsdp_version=1 (the default); version 2 reads no AG group")
    return Reader("fsdp", True, True, _SHARDED, _GATHER, (
        Site(_ADAPTER, adapter, "dense", "getattr(pg_collection, 'dp_cp_ag', None)"),
        Site(_ADAPTER, adapter, "expert", "getattr(pg_collection, 'expt_dp_ag', None)"),
        Site(_PGB, "ParamAndGradBuffer.__init__", "dense",
             "get_fsdp_group(independent_all_gather=True) for nccl_ub registration"),
        Site(_PGB, "ParamAndGradBuffer.__init__", "expert",
             "get_fsdp_group(is_expert_parallel=True, independent_all_gather=True) for "
             "nccl_ub registration"),
        Site(_PGB, "ParamAndGradBuffer._init_each_parameter_group_buffers", "both",
             "get_fsdp_group(is_expert_parallel=group.is_expert_param, "
             "independent_all_gather=True) as the model weight buffer's group"),
    ), tuple(notes))


def _others(profile: str) -> tuple[Reader, ...]:
    rows = [
        Reader("dist-opt", False, False, (), (
            "_ParamAndGradBucketGroup.start_param_sync (distributed/param_and_grad_buffer.py)"
            " on intra_distributed_optimizer_instance_group, the group of its gradient "
            "reduce-scatter")),
        Reader("ddp", False, False, (), (
            "none: gradients are all-reduced (_ParamAndGradBucketGroup.start_grad_sync), "
            "parameters are not gathered")),
        Reader("torch-fsdp2", False, False, (), (
            "torch's fully_shard over get_data_parallel_group(with_context_parallel=True) "
            "(distributed/torch_fully_sharded_data_parallel.py)"), notes=(
            "torch's FSDPModule.set_separate_reduce_scatter_group() is a separate "
            "reduce-scatter group that torch creates itself, not Megatron's AG group",)),
    ]
    if profile == "main":
        rows.append(Reader("fsdp-v2", False, False, (), (
            "FullyShardedDataParallelV2 (distributed/fsdp/mcore_fsdp_adapter.py): "
            "experimental fully_shard over pg_collection.dp_cp / expt_dp"), notes=(
            "requires data_parallel_sharding_strategy 'optim_grads_params'",)))
    return tuple(rows)


TABLE: dict[str, tuple[Reader, ...]] = {
    p: (_fsdp_rows(p),) + _others(p) for p in AG_PROFILES}


def check_ag_profile(profile: str) -> str:
    """``profile`` when the table has it, else a :class:`ValueError` naming the choices."""
    if profile not in TABLE:
        raise ValueError(f"unknown megatron-core profile {profile!r} for the all-gather "
                         f"readers; use one of {', '.join(AG_PROFILES)}")
    return profile


def row(profile: str, impl: Impl) -> Reader | None:
    """The table row of ``impl`` under ``profile`` (None: ``unknown``, or ``fsdp-v2``
    before main)."""
    return next((r for r in TABLE[check_ag_profile(profile)] if r.impl == impl), None)


def readers(profile: str, expert: bool = False) -> tuple[Reader, ...]:
    """The implementations that read the dense (``expert=False``) or expert AG group.

    >>> [r.impl for r in readers("0.18", expert=True)]
    ['fsdp']
    >>> readers("0.16", expert=True)
    ()
    """
    return tuple(r for r in TABLE[check_ag_profile(profile)]
                 if (r.expert if expert else r.dense))


def reads_ag_group(profile: str, impl: Impl, expert: bool = False,
                   sharding: str | None = None) -> bool:
    """Whether ``impl`` moves its parameter all-gather onto the AG group of that side.

    ``sharding`` (Megatron-FSDP only): its ``data_parallel_sharding_strategy``; None
    means not known, answered as for a sharding strategy (any but ``no_shard``).
    ``unknown`` is True when some implementation reads it (the option may help).
    """
    if impl not in IMPLS:
        raise ValueError(f"unknown data-parallel implementation {impl!r}; use one of "
                         f"{', '.join(IMPLS)}")
    if sharding is not None and sharding not in SHARDING_STRATEGIES:
        raise ValueError(f"unknown data_parallel_sharding_strategy {sharding!r}; use one of "
                         f"{', '.join(SHARDING_STRATEGIES)}")
    if impl == "unknown":
        return bool(readers(profile, expert))
    r = row(profile, impl)
    if r is None or not (r.expert if expert else r.dense):
        return False
    return sharding is None or sharding in r.sharding


def ag_reader_sentence(profile: str, impl: Impl = "unknown", *, expert: bool = False,
                       sharding: str | None = None) -> str:
    """The one user-facing sentence saying who reads the AG group of that side.

    >>> print(ag_reader_sentence("0.16", "fsdp", sharding="optim"))
    Megatron-FSDP's parameter all-gather reads dp_cp_ag (megatron-core 0.16.1: \
FSDPDistributedIndex.__init__ hands it to the model weight buffers of \
ParamAndGradBuffer._init_each_parameter_group_buffers), so the gather does not queue \
behind the gradient reduce-scatter on dp_cp
    >>> print(ag_reader_sentence("0.16", "fsdp", expert=True))
    megatron-core 0.16.x-0.17.x builds no expert all-gather group: nothing reads ep_dp_ag
    """
    check_ag_profile(profile)
    kind, rs_kind = KIND[expert], ("ep_dp" if expert else "dp_cp")
    waste = "so the option costs a communicator and buys nothing"
    if expert and profile in PROFILES and not PROFILES[profile].expert_all_gather:
        return (f"megatron-core {PROFILES[profile].versions} builds no expert all-gather "
                f"group: nothing reads {kind}")
    if impl == "unknown":
        others = ("DDP (with or without the distributed optimizer), torch FSDP2 or Megatron-FSDP "
                  "v2" if profile == "main" else
                  "DDP (with or without the distributed optimizer) or torch FSDP2")
        return (f"{ag_reader_sentence(profile, 'fsdp', expert=expert)}; with {others} "
                f"nothing reads {kind} and the option costs a communicator and buys nothing")
    r = row(profile, impl)
    if impl == "fsdp" and r is not None:
        if sharding is not None and sharding not in r.sharding:
            return (f"Megatron-FSDP with data_parallel_sharding_strategy {sharding!r} gathers "
                    f"no parameters, so nothing reads {kind}: the option costs a communicator "
                    f"and buys nothing")
        who = ("FSDPDistributedIndex.__init__ hands it to" if profile == "0.16" else
               "the FSDP adapter's _init_dist_index takes it from pg_collection for")
        what = "the expert parameters' " if expert else "the "
        return (f"Megatron-FSDP's parameter all-gather reads {kind} ({SHORT_PIN[profile]}: "
                f"{who} {what}model weight buffers of "
                f"ParamAndGradBuffer._init_each_parameter_group_buffers), so the gather does "
                f"not queue behind the gradient reduce-scatter on {rs_kind}")
    name = IMPL_NAMES[impl]
    if impl == "dist-opt":
        return (f"nothing in {name} reads {kind}: it gathers parameters on its reduce-scatter "
                f"group (_ParamAndGradBucketGroup.start_param_sync), {waste}")
    if impl == "torch-fsdp2":
        return (f"nothing in {name} reads {kind}: its set_separate_reduce_scatter_group() "
                f"makes torch's own reduce-scatter group, {waste}")
    if impl == "fsdp-v2":
        if r is None:
            return (f"Megatron-FSDP v2 exists only on Megatron-LM main; nothing in "
                    f"megatron-core {profile} reads {kind} through it")
        return (f"nothing in {name} reads {kind}: it builds its meshes from dp_cp and ep_dp "
                f"only, {waste}")
    return (f"nothing in {name} reads {kind}: it all-reduces gradients and gathers no "
            f"parameters, {waste}")


# ------------------------------------------------------------ ddp: block of a recipe
class DDPBlockError(ConfigFileError):
    """A recipe's ``ddp:`` block (a ``DistributedDataParallelConfig``) with a value
    Megatron would not read as meant; ``key`` names it."""

    def __init__(self, message: str, *, key: str, path: str | None = None):
        super().__init__(message, path=path)
        self.key = key


DDP_BOOL_KEYS = ("use_megatron_fsdp", "use_custom_fsdp", "use_distributed_optimizer",
                 "overlap_param_gather", "overlap_grad_reduce", "grad_reduce_in_fp32")


def _bool(block: Mapping[str, Any], key: str, where: str) -> bool:
    value = block.get(key, False)  # DistributedDataParallelConfig's default for each
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    fix = (f"write {value.strip().lower()} without quotes" if isinstance(value, str)
           and value.strip().lower() in ("true", "false") else "write true or false")
    got = f"the string {value!r}" if isinstance(value, str) else repr(value)
    raise DDPBlockError(f"{where}: ddp.{key} must be true or false, got {got}; {fix}.",
                        key=key)


def impl_from_ddp_block(mapping: Mapping[str, Any] | None, *, profile: str | None = None,
                        where: str = "recipe") -> tuple[Impl, str | None, tuple[str, ...]]:
    """``(impl, sharding, notes)`` from a NeMo / Megatron-Bridge recipe's ``ddp:`` block.

    ``use_megatron_fsdp`` (or its old name ``use_custom_fsdp``) selects Megatron-FSDP
    (then ``sharding`` is its ``data_parallel_sharding_strategy``, ``'no_shard'`` when
    unset, DistributedDataParallelConfig's default); else ``use_distributed_optimizer``
    selects ``dist-opt``; else ``ddp``. A missing block is ``unknown``. ``main``'s
    ``megatron_fsdp_version: 2`` selects ``fsdp-v2``. Bad values raise
    :class:`DDPBlockError` naming the key and the fix.

    >>> impl_from_ddp_block({"use_distributed_optimizer": True, "overlap_param_gather": True})[0]
    'dist-opt'
    >>> impl_from_ddp_block({"use_megatron_fsdp": True,
    ...                      "data_parallel_sharding_strategy": "optim_grads_params"})[:2]
    ('fsdp', 'optim_grads_params')
    """
    if mapping is None:
        return "unknown", None, ("no ddp block: the data-parallel implementation is not known",)
    flags, strategy, version = _read_ddp_block(mapping, profile, where)
    notes: list[str] = []
    if flags["use_custom_fsdp"] and not flags["use_megatron_fsdp"]:
        notes.append("use_custom_fsdp is the deprecated name of use_megatron_fsdp")
    if flags["use_megatron_fsdp"] or flags["use_custom_fsdp"]:
        return _fsdp_impl(flags, strategy, version, where, notes)
    if strategy is not None and strategy != "no_shard":
        notes.append(f"data_parallel_sharding_strategy {strategy!r} is read only by "
                     f"Megatron-FSDP (use_megatron_fsdp is off)")
    if flags["use_distributed_optimizer"]:
        if flags["overlap_param_gather"] and not flags["overlap_grad_reduce"]:
            notes.append("Megatron-LM refuses overlap_param_gather without overlap_grad_reduce")
        return "dist-opt", None, tuple(notes)
    if flags["overlap_param_gather"]:
        notes.append("overlap_param_gather needs the distributed optimizer or Megatron-FSDP "
                     "(Megatron-LM refuses it otherwise); plain DDP gathers no parameters")
    return "ddp", None, tuple(notes)


def _read_ddp_block(mapping: Any, profile: str | None,
                    where: str) -> tuple[dict[str, bool], str | None, int]:
    """The block's flags, sharding strategy (None: unset) and Megatron-FSDP version, each
    checked; a :class:`DDPBlockError` on the first bad value."""
    if not isinstance(mapping, Mapping):
        raise DDPBlockError(f"{where}: ddp must be a mapping of DistributedDataParallelConfig "
                            f"fields, got {type(mapping).__name__}; write ddp: followed by "
                            f"indented keys.", key="ddp")
    if profile is not None:
        check_ag_profile(profile)
    flags = {k: _bool(mapping, k, where) for k in DDP_BOOL_KEYS}
    strategy = mapping.get("data_parallel_sharding_strategy")
    if strategy is not None and strategy not in SHARDING_STRATEGIES:
        raise DDPBlockError(
            f"{where}: ddp.data_parallel_sharding_strategy must be one of "
            f"{', '.join(repr(s) for s in SHARDING_STRATEGIES)}, got {strategy!r}; "
            f"use one of them (Megatron-FSDP raises ValueError 'Invalid "
            f"data_parallel_sharding_strategy').", key="data_parallel_sharding_strategy")
    version = mapping.get("megatron_fsdp_version", 1)
    if isinstance(version, bool) or version not in (1, 2):
        raise DDPBlockError(f"{where}: ddp.megatron_fsdp_version must be 1 or 2, got "
                            f"{version!r}; write 1 or 2.", key="megatron_fsdp_version")
    if "megatron_fsdp_version" in mapping and profile is not None and profile != "main":
        raise DDPBlockError(f"{where}: ddp.megatron_fsdp_version is not a field of "
                            f"{SHORT_PIN[profile]}'s DistributedDataParallelConfig (Megatron: "
                            f"TypeError); remove it or use the 'main' profile.",
                            key="megatron_fsdp_version")
    return flags, strategy, version


def _fsdp_impl(flags: dict[str, bool], strategy: str | None, version: int, where: str,
               notes: list[str]) -> tuple[Impl, str | None, tuple[str, ...]]:
    sharding = strategy if strategy is not None else "no_shard"
    if strategy is None:
        notes.append("data_parallel_sharding_strategy unset: DistributedDataParallelConfig's "
                     "default 'no_shard' (Megatron-LM's --data-parallel-sharding-strategy "
                     "defaults to 'optim_grads_params' from 0.18)")
    if version == 2:
        if sharding != "optim_grads_params":
            raise DDPBlockError(
                f"{where}: Megatron-FSDP v2 requires data_parallel_sharding_strategy "
                f"'optim_grads_params', got {sharding!r}; set it or use "
                f"megatron_fsdp_version: 1.", key="data_parallel_sharding_strategy")
        return "fsdp-v2", sharding, tuple(notes)
    if sharding == "no_shard":
        notes.append(f"Megatron-FSDP with {_NO_SHARD}")
    if flags["use_distributed_optimizer"]:
        notes.append("use_distributed_optimizer goes with Megatron-FSDP v1 (Megatron-LM turns "
                     "it on); the parameters still move in Megatron-FSDP's buffers")
    return "fsdp", sharding, tuple(notes)


# ------------------------------------------------------------ the user's implementation
IMPL_CHOICES: tuple[str, ...] = tuple(i for i in IMPLS if i != "unknown")


@dataclass(frozen=True)
class DPImpl:
    """The data-parallel implementation a command models, and where it came from.

    ``impl``: one of :data:`IMPLS`; ``sharding``: Megatron-FSDP's
    ``data_parallel_sharding_strategy`` (None: not known); ``source``: ``"--dp-impl"``,
    ``"<file> <where the ddp block is>"`` or ``"not given"``; ``grad_reduce_in_fp32`` /
    ``overlap_param_gather`` / ``overlap_grad_reduce``: the recipe's ``ddp:`` values
    (None: not written there)."""

    impl: Impl = "unknown"
    sharding: str | None = None
    source: str = "not given"
    notes: tuple[str, ...] = ()
    grad_reduce_in_fp32: bool | None = None
    overlap_param_gather: bool | None = None
    overlap_grad_reduce: bool | None = None

    @property
    def name(self) -> str:
        extra = f" ({self.sharding})" if self.impl == "fsdp" and self.sharding else ""
        return IMPL_NAMES[self.impl] + extra

    def describe(self) -> str:
        """``data-parallel implementation: ... (from ...)``: one line every command prints."""
        if self.impl == "unknown":
            return ("data-parallel implementation: not known (give --dp-impl fsdp|dist-opt|ddp, "
                    "or a recipe with a ddp: block); both cases are shown")
        return f"data-parallel implementation: {self.name} (from {self.source})"

    def reads(self, profile: str, expert: bool = False) -> bool | None:
        """Whether it reads that side's AG group; None when the implementation is unknown."""
        if self.impl == "unknown":
            return None
        return reads_ag_group(profile, self.impl, expert=expert, sharding=self.sharding)

    def sentence(self, profile: str, expert: bool = False) -> str:
        return ag_reader_sentence(profile, self.impl, expert=expert, sharding=self.sharding)

    def to_dict(self) -> dict[str, Any]:
        return {"impl": self.impl, "name": self.name, "sharding": self.sharding,
                "source": self.source, "notes": list(self.notes)}


UNKNOWN = DPImpl()


def no_effect_words(dp: DPImpl) -> str:
    """``no effect for <who>``: how check's ``ag-unread`` and simulate's verdict open when
    nothing in the implementation reads the AG group.

    >>> no_effect_words(DPImpl("dist-opt"))
    'no effect for the distributed optimizer'
    """
    who = {"dist-opt": "the distributed optimizer", "ddp": "plain DDP"}.get(dp.impl, dp.name)
    return f"no effect for {who}"


def dp_impl_from_ddp_block(mapping: Mapping[str, Any] | None, *, profile: str | None,
                           where: str) -> DPImpl:
    """:class:`DPImpl` of a recipe's ``ddp:`` block (``where``: the file, for messages)."""
    if mapping is None:
        return UNKNOWN
    impl, sharding, notes = impl_from_ddp_block(mapping, profile=profile, where=where)

    def flag(key: str) -> bool | None:
        return _bool(mapping, key, where) if key in mapping else None

    return DPImpl(impl, sharding, where, notes, flag("grad_reduce_in_fp32"),
                  flag("overlap_param_gather"), flag("overlap_grad_reduce"))


def all_gather_use(profile: str, dp: DPImpl, *, expert: bool = False,
                   option_on: bool) -> str:
    """Where that side's parameter all-gather runs, in a few words (inspect, diff, summary).

    >>> all_gather_use("0.19", DPImpl("dist-opt"), option_on=True)
    'on dp_cp, the reduce-scatter group (DDP with the distributed optimizer does not read dp_cp_ag)'
    """
    kind, rs = KIND[expert], ("ep_dp" if expert else "dp_cp")
    if expert and profile in PROFILES and not PROFILES[profile].expert_all_gather:
        option_on = False  # no expert AG group exists before 0.18
    if dp.impl == "ddp":
        return "none: DDP without the distributed optimizer gathers no parameters"
    reads = dp.reads(profile, expert)
    if reads is None:
        if not option_on:
            return f"on {rs}, the reduce-scatter's communicator: they serialise"
        return (f"on {kind} (own communicator) under Megatron-FSDP; on {rs} (the "
                f"reduce-scatter's) under DDP with the distributed optimizer")
    if not reads:
        return f"on {rs}, the reduce-scatter group ({dp.name} does not read {kind})"
    if option_on:
        return f"on {kind}, its own communicator: does not queue behind the reduce-scatter"
    return f"on {rs}, the reduce-scatter's communicator: they serialise"


# ------------------------------------------------------------ communicator memory
Launch = Literal["lazy", "eager"]
LAUNCH_WORDS: dict[str, str] = {
    "lazy": ("communicators created at a group's first collective (init_process_group without "
             "device_id, as Megatron-LM's initialize.py _initialize_distributed does)"),
    "eager": ("communicators created when the group is (init_process_group(device_id=...): "
              "torch splits every subgroup's communicator eagerly)"),
}


def memory_case(launch: str, read: bool | None) -> str:
    """Which memory case a price is for: ``launch`` ``"lazy"`` or ``"eager"``, ``read``
    whether the implementation runs a collective on the group (None: not known).

    >>> print(memory_case("eager", False))
    priced as paid at creation: communicators created when the group is \
(init_process_group(device_id=...): torch splits every subgroup's communicator eagerly)
    """
    if launch not in LAUNCH_WORDS:
        raise ValueError(f"unknown launch {launch!r}; use lazy or eager")
    how = LAUNCH_WORDS[launch]
    if launch == "eager":
        return f"priced as paid at creation: {how}"
    if read is None:
        return (f"priced as paid when read: with {how}, the group costs memory only if the "
                f"implementation runs its all-gather there (Megatron-FSDP), none otherwise")
    if read:
        return f"priced as paid at the first all-gather: {how}"
    return (f"priced as none: no collective runs on the group, and with {how} it never "
            f"gets one")


def memory_paid(launch: str, read: bool | None) -> bool:
    """Whether the communicators' memory is paid under that case (unknown: priced as paid)."""
    return launch == "eager" or read is not False


def option_off_sentence(profile: str, dp: DPImpl) -> str:
    """What ``create_all_gather_group`` off means for ``dp`` (check's ``ag-off``)."""
    check_ag_profile(profile)
    head = "create_all_gather_group is off: no AG group exists"
    fsdp = ("Megatron-FSDP's parameter all-gather runs on dp_cp (DATA_PARALLEL_GROUP_WITH_CP), "
            "the communicator of its gradient reduce-scatter, so the two serialise")
    if dp.impl == "unknown":
        return (f"{head}; {fsdp}; for DDP (with or without the distributed optimizer) and the "
                f"others the option changes nothing, since none of them reads the AG group "
                f"(the data-parallel implementation is not known: both cases shown)")
    if dp.reads(profile):
        return f"{head}; {fsdp}"
    return (f"{head}, which changes nothing for {dp.name}: nothing in it reads the AG group "
            f"(on, the option would cost a communicator and buy nothing)")


def datapath_variants(profile: str, dp: DPImpl) -> list[str]:
    """What ``replay-data --kind megatron``'s two variants stand for, in this table's words."""
    sent = dp.sentence(profile)
    lines = ["shared: the all-gather on the reduce-scatter's communicator: DDP with the "
             "distributed optimizer (option on or off), and Megatron-FSDP with the option off",
             "separate: the all-gather on its own communicator (the AG group): Megatron-FSDP "
             "with the option on, the AG group's one reader"]
    if dp.impl == "unknown":
        return lines + [dp.describe()]
    if dp.impl == "ddp":
        return lines + [f"{dp.describe()}: it gathers no parameters, so neither variant is its "
                        f"path; {sent}"]
    path = "separate" if dp.reads(profile) else "shared"
    return lines + [f"{dp.describe()}: its path is '{path}'; {sent}"]


def reader_table_markdown() -> str:
    """The reader table as the Markdown docs/all-gather-option.md holds (a unit test keeps
    the page equal to it): one row per implementation, one column per profile, then the
    call sites of Megatron that read the group, per profile."""
    impls = [i for i in IMPLS if i != "unknown"]
    head = "| implementation | " + " | ".join(f"{p} ({SHORT_PIN[p]})" for p in AG_PROFILES) + " |"
    lines = [head, "|---" * (len(AG_PROFILES) + 1) + "|"]
    for impl in impls:
        cells = []
        for p in AG_PROFILES:
            r = row(p, impl)
            if r is None:
                cells.append("not in this release")
            elif r.dense:
                side = "`dp_cp_ag`" + (" and `ep_dp_ag`" if r.expert else "")
                cells.append(f"reads {side} ({', '.join(r.sharding)})")
            else:
                cells.append("reads no AG group")
        lines.append(f"| {IMPL_NAMES[impl]} | " + " | ".join(cells) + " |")
    lines.append("")
    for p in AG_PROFILES:
        fsdp = row(p, "fsdp")
        assert fsdp is not None
        sites = sorted({f"`{s.path}` `{s.function}`" for s in fsdp.sites})
        lines.append(f"- {PINNED[p]}, under `megatron/core/`: " + "; ".join(sites) + ".")
    return "\n".join(lines)
