"""Run Megatron-Core's real ``initialize_model_parallel`` for every rank of a world.

There is no GPU and no second process: each rank is simulated in turn in this
process with torch's ``fake`` process-group backend
(``dist.init_process_group("fake", store=FakeStore(), rank=r, world_size=W)``).
While Megatron runs, ``torch.distributed.new_group`` is wrapped so that every
call is recorded as ``(group_desc, ranks as passed, backend)`` and then
forwarded to torch with the ``fake`` backend (gloo cannot rendezvous on a
FakeStore, and the CPU build has no NCCL/UCC). Megatron's ``create_group``
passes ``backend=None`` for NCCL groups; the log writes that as ``"nccl"``
(under a real NCCL job ``None`` means the default backend, NCCL). A backend
name torch does not know is forwarded unchanged, so torch's own error surfaces
as it would in a real job.

After the init the harness reads Megatron's getters for that rank (see
:func:`read_getters`), then calls ``destroy_model_parallel()`` and
``dist.destroy_process_group()``. ``destroy_model_parallel`` does not reset
every module global (e.g. ``_EMBEDDING_GLOBAL_RANKS``, ``_PIPELINE_GLOBAL_RANKS``,
``_HYBRID_DP_CP_GROUPS`` survive it); in a real job each process initialises
once, so the harness also restores every module global to its import-time
value before each rank, and restores ``os.environ`` (the UCC path writes
variables) afterwards.

The same harness drives megatron-core 0.16.1 (installed) and the 0.17.1, 0.18.2
and 0.19.2 ``parallel_state.py`` files loaded straight from their wheels
(:func:`fetch_parallel_state`, :func:`load_parallel_state_file`); the replay
engine can reuse :func:`run_world` / :func:`recording_new_group`. What the
getters read depends on the simharness profile's capability flags
(``simharness.profiles.PROFILES``), not on its name.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

KNOWN_BACKENDS = ("nccl", "gloo", "ucc", "fake")

Call = tuple[str, tuple[int, ...], str]  # (group_desc, ranks as passed, backend)


# ------------------------------------------------------- parity unavailable
REQUIRE_PARITY_ENV = "SIMHARNESS_REQUIRE_PARITY"  # "1": a parity tier that cannot run fails
CACHE_ENV = "SIMHARNESS_MCORE_CACHE"  # where the wheels' parallel_state.py go (default .cache)


def parity_unavailable(reason: str, *, module: bool = False):
    """Skip a parity test (or, with ``module``, its whole module) whose megatron-core
    cannot be had, with the reason; with ``SIMHARNESS_REQUIRE_PARITY=1`` (set by CI)
    fail instead, so that a parity tier never vanishes silently."""
    import pytest

    if os.environ.get(REQUIRE_PARITY_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_PARITY_ENV}=1: the parity tests must run)",
                    pytrace=False)
    pytest.skip(reason, allow_module_level=module)


def require_installed_megatron(*, module: bool = False) -> None:
    """The installed megatron-core (0.16.1, a test dependency) or :func:`parity_unavailable`."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import megatron.core  # noqa: F401
    except ImportError as exc:
        parity_unavailable(f"megatron-core 0.16.1 is a test dependency (pip install -e "
                           f"'.[test]'): {exc}", module=module)


def parity_module(root: str | os.PathLike, version: str):
    """megatron-core ``version``'s ``parallel_state`` (installed for 0.16.1, else from the
    pinned wheel), or :func:`parity_unavailable` with the reason."""
    if version == "0.16.1":
        require_installed_megatron()
        return load_parallel_state_016()
    try:
        return load_version(root, version)
    except RuntimeError as exc:
        parity_unavailable(f"megatron-core {version} not available: {exc}")


# ---------------------------------------------------------------- loading
def load_parallel_state_016():
    """The installed megatron-core's ``parallel_state`` (0.16.1 in the test venv)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import parallel_state
    return parallel_state


_STUB_PACKAGE = "_simharness_mcore019"


def _stub_modules(package: str = _STUB_PACKAGE) -> dict[str, types.ModuleType]:
    """Minimal stand-ins for what 0.17-0.19's parallel_state imports besides torch/numpy/einops.

    ``from .utils import GlobalMemoryBuffer, is_torch_min_version`` and
    ``from megatron.core.inference.symmetric_memory import SymmetricMemoryManager``
    at import time (0.17.1, 0.18.2, 0.19.2); 0.19's ``destroy_model_parallel`` also
    tries ``megatron.core.transformer.moe.fused_a2a.nccl_ep_finalize`` (inside
    ``try/except Exception``). None of them creates groups.
    """
    from packaging.version import Version

    utils = types.ModuleType(f"{package}.utils")

    class GlobalMemoryBuffer:  # only constructed by _set_global_memory_buffer
        def __init__(self):
            self.buffer = {}

    def is_torch_min_version(version, check_equality=True):
        have = Version(torch.__version__.split("+")[0])
        return have >= Version(version) if check_equality else have > Version(version)

    utils.GlobalMemoryBuffer = GlobalMemoryBuffer
    utils.is_torch_min_version = is_torch_min_version

    symm = types.ModuleType("megatron.core.inference.symmetric_memory")

    class SymmetricMemoryManager:
        @staticmethod
        def destroy(*args, **kwargs):
            return None

    symm.SymmetricMemoryManager = SymmetricMemoryManager
    a2a = types.ModuleType("megatron.core.transformer.moe.fused_a2a")
    a2a.nccl_ep_finalize = lambda: None
    return {utils.__name__: utils, symm.__name__: symm, a2a.__name__: a2a}


@contextlib.contextmanager
def _leaf_modules(mods: dict[str, types.ModuleType]):
    """Put leaf modules into ``sys.modules`` for the duration (the import system
    returns a ``sys.modules`` hit without importing the parents), then restore."""
    saved = {k: sys.modules.get(k) for k in mods}
    sys.modules.update(mods)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def load_parallel_state_file(path: str | os.PathLike, tag: str):
    """Load a megatron-core 0.17+ ``megatron/core/parallel_state.py`` as a stand-alone module.

    The files target Python >= 3.12 but compile under 3.11; one is executed as
    ``_simharness_mcore{tag}.parallel_state`` (``tag`` such as ``"018"``) with the
    stubs of :func:`_stub_modules`, so the installed megatron-core (0.16.1) is
    neither imported nor touched, and several versions can be loaded side by side.
    """
    package = f"_simharness_mcore{tag}"
    name = f"{package}.parallel_state"
    if name in sys.modules:
        return sys.modules[name]
    stubs = _stub_modules(package)
    pkg = types.ModuleType(package)
    pkg.__path__ = []  # a namespace-like package: only our stubs live in it
    sys.modules[package] = pkg
    sys.modules[f"{package}.utils"] = stubs[f"{package}.utils"]
    spec = importlib.util.spec_from_file_location(name, os.fspath(path))
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    with _leaf_modules({k: v for k, v in stubs.items() if k.startswith("megatron.")}):
        spec.loader.exec_module(module)
    module._simharness_stubs = stubs
    sys.modules[name] = module
    return module


def load_parallel_state_019(path: str | os.PathLike):
    """megatron-core 0.19.x's ``parallel_state.py`` (see :func:`load_parallel_state_file`)."""
    return load_parallel_state_file(path, "019")


# -------------------------------------------------------------- recording
@dataclass
class CallLog:
    """What ``new_group`` saw during one rank's run."""

    record: bool = True
    calls: list[Call] = field(default_factory=list)
    count: int = 0
    groups: dict[int, tuple[int, ...]] = field(default_factory=dict)  # id(group) -> ranks


@contextlib.contextmanager
def recording_new_group(log: CallLog):
    """Wrap ``torch.distributed.new_group`` (Megatron looks it up at call time)."""
    original = dist.new_group

    def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
                  use_local_synchronization=False, group_desc=None, **kwargs):
        name = "nccl" if backend is None else str(backend).lower()
        ranks_t = tuple(int(r) for r in ranks)
        log.count += 1
        if log.record:
            log.calls.append((group_desc, ranks_t, name))
        forward = "fake" if name in KNOWN_BACKENDS else backend
        group = original(ranks=list(ranks_t), timeout=timeout, backend=forward,
                         use_local_synchronization=use_local_synchronization,
                         group_desc=group_desc, **kwargs)
        log.groups[id(group)] = ranks_t
        return group

    dist.new_group = new_group
    try:
        yield log
    finally:
        dist.new_group = original


def _module_state(ps) -> dict[str, Any]:
    """The module's mutable globals (``_UPPER_CASE`` and ``_global_process_group_list``)."""
    return {k: v for k, v in vars(ps).items()
            if (k.startswith("_") and k[1:2].isupper()) or k == "_global_process_group_list"}


_PRISTINE: dict[int, dict[str, Any]] = {}


def _reset_module(ps) -> None:
    pristine = _PRISTINE.get(id(ps))
    if pristine is None:  # first use: the module is as imported
        pristine = _PRISTINE[id(ps)] = copy.deepcopy(_module_state(ps))
    for k, v in pristine.items():
        setattr(ps, k, copy.deepcopy(v))


@contextlib.contextmanager
def fake_world(rank: int, world_size: int):
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# ----------------------------------------------------------------- getters
def group_ranks(group) -> list[int] | None:
    """Sorted global ranks of a group object as torch reports them; None when absent."""
    if group is None or group == dist.GroupMember.NON_GROUP_MEMBER:
        return None
    return list(dist.get_process_group_ranks(group))


RAISES = "raises AssertionError"


def _call(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except AssertionError:
        return RAISES


def _g(fn: Callable[[], Any]) -> Any:
    """A group getter's ranks, or RAISES."""
    out = _call(fn)
    return out if out == RAISES else group_ranks(out)


def _copy(v):
    return None if v is None else copy.deepcopy(v)


def read_getters(ps, mcore: str) -> dict[str, Any]:
    """Megatron's view of the current rank, in plain values.

    Every getter of the profile's table (:func:`simharness.getters.megatron_getters`,
    the one replay and ``verify_live`` use) under its kind; group objects become
    their sorted torch ranks, getters that assert become ``RAISES``. The
    ``*_GLOBAL_RANKS`` module globals (``<kind>_global_ranks``) keep Megatron's
    order. ``mcore`` is the simharness profile the module should follow.
    """
    from simharness.getters import megatron_getters, ordered_rank_globals
    from simharness.profiles import get_profile

    prof = get_profile(mcore)
    out: dict[str, Any] = {}
    g = out.__setitem__
    for kind, get in megatron_getters(mcore).items():
        g(kind, _g(lambda get=get: getattr(ps, get.function)(**dict(get.kwargs))))
    for kind, name in ordered_rank_globals(mcore).items():
        g(f"{kind}_global_ranks", _copy(getattr(ps, name)))
    hcp = ps.get_hierarchical_context_parallel_groups(check_initialized=False)
    g("hcp", None if hcp is None else [group_ranks(x) for x in hcp])
    g("hybrid", {int(k): group_ranks(v) for k, v in (ps._HYBRID_DP_CP_GROUPS or {}).items()})
    # The module's API against the profile's flags.
    g("api_ag_in_init", hasattr(ps, "has_separate_all_gather_group"))
    g("api_ag_after_init", hasattr(ps, "create_all_gather_groups"))
    g("api_gtp", hasattr(ps, "get_gtp_weight_remat_group"))
    if prof.ag_in_init:
        g("has_ag", ps.has_separate_all_gather_group())
    # Ranks within groups and stage flags.
    g("tp_rank", _call(ps.get_tensor_model_parallel_rank))
    g("pp_rank", _call(ps.get_pipeline_model_parallel_rank))
    g("cp_rank", _call(ps.get_context_parallel_rank))
    g("dp_rank", _call(lambda: ps.get_data_parallel_rank()))
    g("dp_cp_rank", _call(lambda: ps.get_data_parallel_rank(with_context_parallel=True)))
    g("ep_rank", _call(ps.get_expert_model_parallel_rank))
    g("etp_rank", _call(ps.get_expert_tensor_parallel_rank))
    g("edp_rank", _call(lambda: ps.get_expert_data_parallel_rank()))
    g("first_stage", _call(ps.is_pipeline_first_stage))
    g("last_stage", _call(ps.is_pipeline_last_stage))
    g("in_embd", _call(ps.is_rank_in_embedding_group))
    g("in_pos_embd", _call(ps.is_rank_in_position_embedding_group))
    g("vpp_size", ps.get_virtual_pipeline_model_parallel_world_size())
    # Communicators this rank is a member of (Megatron appends member groups only).
    g("member_groups", len(ps._global_process_group_list or [None]) - 1)
    return out


# --------------------------------------------------------------------- run
@dataclass
class RankRun:
    rank: int
    n_calls: int
    calls: list[Call] | None  # None when the log was not kept for this rank
    getters: dict[str, Any]
    extra: Any = None


@contextlib.contextmanager
def _saved_environ():
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_rank(ps, world_size: int, rank: int, init_kwargs: dict, *, mcore: str = "0.16",
             record: bool = True, after_init: Callable[[Any], Any] | None = None,
             getters: bool = True) -> RankRun:
    """One rank: fake world, Megatron init (+ ``after_init(ps)``), getters, teardown."""
    log = CallLog(record=record)
    stubs = getattr(ps, "_simharness_stubs", {})
    leaf = {k: v for k, v in stubs.items() if k.startswith("megatron.")}
    with _saved_environ(), fake_world(rank, world_size):
        _reset_module(ps)
        try:
            with recording_new_group(log):
                ps.initialize_model_parallel(**init_kwargs)
                extra = after_init(ps) if after_init is not None else None
            if isinstance(extra, tuple):  # groups returned by create_all_gather_groups
                extra = tuple(group_ranks(x) for x in extra)
            values = read_getters(ps, mcore) if getters else {}
        finally:
            with _leaf_modules(leaf):
                ps.destroy_model_parallel()
            _reset_module(ps)
    return RankRun(rank, log.count, log.calls if record else None, values, extra)


def run_world(ps, world_size: int, init_kwargs: dict, *, ranks: Iterable[int] | None = None,
              record_ranks: Iterable[int] = (0,), mcore: str = "0.16",
              after_init: Callable[[Any], Any] | None = None) -> dict[int, RankRun]:
    """Run ``ranks`` (default: all) of a world; keep the full call log on ``record_ranks``."""
    record_ranks = set(record_ranks)
    ranks = range(world_size) if ranks is None else sorted(set(ranks) | record_ranks)
    return {r: run_rank(ps, world_size, r, init_kwargs, mcore=mcore, record=r in record_ranks,
                        after_init=after_init) for r in ranks}


def megatron_error(ps, world_size: int, init_kwargs: dict, *, rank: int = 0,
                   after_init: Callable[[Any], Any] | None = None) -> str | None:
    """The exception type name Megatron raises for this input on ``rank``, or None."""
    try:
        with warnings.catch_warnings():  # torch warns about backend names it does not know
            warnings.simplefilter("ignore", UserWarning)
            run_rank(ps, world_size, rank, init_kwargs, record=False, after_init=after_init,
                     getters=False)
    except Exception as exc:  # noqa: BLE001 - the type is the result
        return type(exc).__name__
    return None


# ------------------------------------------------ wheels (0.17-0.19)
# megatron-core releases whose parallel_state.py the parity tests load, with the sha256 of
# megatron/core/parallel_state.py in the PyPI wheel (cp312 manylinux; notes/mcore019.md,
# notes/mcore018.md). The wheels themselves are only downloaded, never installed.
MCORE_WHEELS = {
    "0.17.1": "ac56a6236c694f90e71fa33a38c5cfb80f926f2d9c6deb48e69da570024293c6",
    "0.18.2": "6b284e2580f5941eb0a24ac7a7f3f38dba0431d262334cc8ea836d93ac29b559",
    "0.19.2": "1f6e23a01022c06be3b67f930095898e5032f6ff93695f8da5aae3b5a546dcf0",
}
MCORE019_VERSION = "0.19.2"
MCORE019_SHA256 = MCORE_WHEELS[MCORE019_VERSION]


def version_tag(version: str) -> str:
    """``"0.18.2"`` -> ``"018"`` (cache folder ``.cache/mcore018``, module package suffix)."""
    major, minor = version.split(".")[:2]
    return f"{int(major)}{int(minor):02d}"


def download_wheel(version: str, into: str | os.PathLike, *, timeout: float = 180.0) -> Path:
    """The megatron-core ``version`` wheel (Python 3.12 tag, no dependencies), downloaded with
    pip into ``into``; ``RuntimeError`` with pip's last line when it cannot be had."""
    import subprocess

    cmd = [sys.executable, "-m", "pip", "download", f"megatron-core=={version}",
           "--no-deps", "--only-binary", ":all:", "--python-version", "3.12",
           "--timeout", "15", "--retries", "1", "--disable-pip-version-check", "-q",
           "-d", str(into)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"pip download megatron-core=={version} failed: {exc}") from None
    wheels = sorted(Path(into).glob("megatron_core-*.whl"))
    if proc.returncode or not wheels:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"pip download megatron-core=={version} failed "
                           f"(exit {proc.returncode}): {tail[0]}")
    return wheels[-1]


def fetch_parallel_state(root: str | os.PathLike, version: str, *,
                         timeout: float = 180.0) -> Path:
    """Path of megatron-core ``version``'s ``parallel_state.py`` under
    ``root/.cache/mcore{tag}`` (``$SIMHARNESS_MCORE_CACHE/mcore{tag}`` when set), downloading
    the wheel with pip when it is missing (``tests/support/fetch_mcore019.sh VERSION`` does the same
    by hand).

    ``version`` must be a key of :data:`MCORE_WHEELS` (its sha256 is pinned).
    Raises ``RuntimeError`` with the reason when it cannot be had (no network, no pip,
    a file that is not that version's)."""
    import hashlib
    import tempfile
    import zipfile

    sha256 = MCORE_WHEELS[version]
    cache = Path(os.environ.get(CACHE_ENV) or Path(root) / ".cache")
    dest = cache / f"mcore{version_tag(version)}"
    target = dest / "megatron" / "core" / "parallel_state.py"

    def verified() -> bool:
        return target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == sha256

    if verified():
        return target
    if os.environ.get("SIMHARNESS_NO_DOWNLOAD"):
        raise RuntimeError(f"{target} is missing and SIMHARNESS_NO_DOWNLOAD is set "
                           f"(run tests/support/fetch_mcore019.sh {version})")
    dest.mkdir(parents=True, exist_ok=True)
    (cache / ".gitignore").write_text("*\n")
    try:
        from filelock import FileLock  # a torch dependency; serialises xdist workers
        lock = FileLock(str(dest / ".lock"))
    except ImportError:  # pragma: no cover
        lock = contextlib.nullcontext()
    with lock:
        if verified():
            return target
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            with zipfile.ZipFile(download_wheel(version, tmp, timeout=timeout)) as z:
                data = z.read("megatron/core/parallel_state.py")
            target.parent.mkdir(parents=True, exist_ok=True)
            part = target.with_suffix(".py.part")
            part.write_bytes(data)
            os.replace(part, target)
    if not verified():
        raise RuntimeError(f"{target} is not megatron-core {version}'s parallel_state.py "
                           f"(sha256 mismatch)")
    return target


def fetch_parallel_state_019(root: str | os.PathLike, *, timeout: float = 180.0) -> Path:
    """:func:`fetch_parallel_state` for 0.19.2."""
    return fetch_parallel_state(root, MCORE019_VERSION, timeout=timeout)


def load_version(root: str | os.PathLike, version: str):
    """Fetch (if needed) and load megatron-core ``version``'s ``parallel_state``."""
    return load_parallel_state_file(fetch_parallel_state(root, version), version_tag(version))


# ------------------------------------------------- simharness, same shape
def simharness_view(layout, rank: int) -> dict[str, Any]:
    """What :func:`read_getters` should read on ``rank``, computed from a simharness layout.

    Only the layout's own API and the getter table are used: ``layout.rank(r)``
    memberships (Megatron order; sorted where torch sorts), or the getter's
    ``alias`` where the kind is not built; ``layout.get_data_parallel_group``
    called with the keywords of each ``get_data_parallel_group`` row must agree.
    """
    from simharness import GroupNotInitialized
    from simharness.getters import megatron_getters, ordered_rank_globals

    cfg = layout.config
    view = layout.rank(rank)
    groups = view.groups
    prof = layout.profile

    def srt(kind):
        m = groups.get(kind)
        return None if m is None else sorted(int(x) for x in m.ranks)

    def dpg(**kw):
        try:
            return sorted(layout.get_data_parallel_group(rank, **kw))
        except GroupNotInitialized:
            return RAISES

    def expect(kind, get):
        want = next((srt(k) for k in (kind, get.alias) if k in groups),
                    RAISES if get.raises_when_missing else None)
        if get.function == "get_data_parallel_group" and dpg(**dict(get.kwargs)) != want:
            return f"layout.{get.label} = {dpg(**dict(get.kwargs))}, the {kind} group {want}"
        return want

    out: dict[str, Any] = {kind: expect(kind, get)
                           for kind, get in megatron_getters(layout.mcore).items()}
    for kind in ordered_rank_globals(layout.mcore):
        m = groups.get(kind)
        out[f"{kind}_global_ranks"] = None if m is None else [int(x) for x in m.ranks]
    out["hcp"] = ([srt(f"hcp_l{i}") for i in range(len(cfg.hierarchical_context_parallel_sizes))]
                  if cfg.hierarchical_context_parallel_sizes else None)
    out["hybrid"] = {int(k.rsplit("_", 1)[1]): srt(k) for k in groups
                     if k.startswith("hybrid_dp_cp_")}
    out["api_ag_in_init"] = prof.ag_in_init
    out["api_ag_after_init"] = prof.ag_after_init
    out["api_gtp"] = prof.gtp_axis
    if prof.ag_in_init:
        out["has_ag"] = "dp_cp_ag" in groups
    c = view.coordinates
    # Megatron's *_rank() getters are torch ranks in the group (position in the sorted list).
    # 0.19's defaults count GTP peers in (with_gtp_remat=True); the layout's coordinates
    # are the replicate ranks, so with GTP > 1 read the merged group.
    gtp = prof.gtp_axis and cfg.gtp_remat_size > 1
    egtp = prof.gtp_axis and cfg.expert_gtp_remat_size > 1
    out.update({
        "tp_rank": c["tp"], "pp_rank": c["pp"], "cp_rank": c["cp"],
        "dp_rank": dpg().index(rank) if gtp else c["dp"],
        "dp_cp_rank": dpg(with_context_parallel=True).index(rank) if gtp else c["dp_cp"],
        "ep_rank": c["ep"], "etp_rank": c["etp"],
        "edp_rank": srt("ep_gtp_remat_dp").index(rank) if egtp else c["edp"],
        "first_stage": view.is_first_stage, "last_stage": view.is_last_stage,
        "in_embd": view.in_embedding_group, "in_pos_embd": view.in_position_embedding_group,
        "vpp_size": cfg.virtual_pipeline_model_parallel_size,
        "member_groups": view.communicators,
    })
    return out


def assert_runs_match(runs: dict, expected: list, layout, ag: bool) -> None:
    """Every recorded rank of a Megatron run agrees with ``layout``: the number and
    (where recorded) the exact sequence of new_group calls, the getters, and the
    groups ``create_all_gather_groups()`` returned (``run.extra``) when ``ag``."""
    import pytest

    for r, run in runs.items():
        assert run.n_calls == len(expected), f"rank {r}"
        if run.calls is not None and run.calls != expected:
            first = next((i for i, (a, b) in enumerate(zip(run.calls, expected, strict=False))
                          if a != b),
                         min(len(run.calls), len(expected)))
            pytest.fail(f"rank {r}: new_group call {first} differs: megatron "
                        f"{run.calls[first:first + 1]} vs simharness {expected[first:first + 1]}")
        if r not in layout.ranks:  # outside [offset, offset + local_world_size): no groups
            assert run.getters["member_groups"] == 0 and run.getters["tp"] == RAISES
            continue
        assert layout.rank(r).new_group_calls == len(expected)
        ours = simharness_view(layout, r)
        diffs = {k: (v, ours.get(k, "<missing>")) for k, v in run.getters.items()
                 if v != ours.get(k, "<missing>")}
        assert not diffs, f"rank {r}: getters differ (megatron, simharness): {diffs}"
        if ag:
            view = layout.rank(r).groups
            want = tuple(None if k not in view else sorted(int(x) for x in view[k].ranks)
                         for k in ("dp_cp_ag", "ep_dp_ag"))
            assert run.extra == want, f"rank {r}: create_all_gather_groups()"


def fetch_all(root: str | os.PathLike, fetch: Callable[..., Path] | None = None,
              versions: Iterable[str] = ()) -> int:
    """Fetch ``versions`` (default every pinned one, :data:`MCORE_WHEELS`) with ``fetch``
    (default :func:`fetch_parallel_state`); 1 with the reasons when one fails.
    ``python tests/support/megatron_harness.py`` (CI runs it before the tests)."""
    fetch = fetch or fetch_parallel_state
    failed = 0
    for version in list(versions) or list(MCORE_WHEELS):
        try:
            print(f"megatron-core {version}: {fetch(root, version)}")
        except RuntimeError as exc:
            print(f"error: megatron-core {version}: {exc}", file=sys.stderr)
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(fetch_all(Path(__file__).resolve().parents[2]))
