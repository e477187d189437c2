"""Memory estimates, the machine's memory limit, and the refusal when a request cannot fit.

Every command that grows with its inputs (``check``/``inspect``/``export`` with the
world, ``replay`` with the world and ``--overlap-bytes``, ``replay-data`` with the
world, ``--steps`` and ``--shard-numel``) estimates its peak memory *before* any work
and refuses with one line (:class:`ResourceError`, exit 2) when the estimate exceeds
the memory it may use: the estimate, the limit, and the largest input that fits.

The estimates are linear models fitted to measured peak RSS (``bench/bench_layout.py``
and the figures in the README, "Resource limits"); each constant says what it covers.
The limit is :data:`USABLE_FRACTION` of what :func:`available_memory` finds: Linux's
``MemAvailable``, lowered by a cgroup memory limit when the process runs under one, or
``SIMHARNESS_MEMORY_LIMIT`` (``24G``, ``512M``, bytes) when set.

>>> fmt_bytes(3 * 2**30 + 2**29), fmt_bytes(1536)
('3.5 GiB', '1.5 KiB')
>>> fmt_bytes(layout_peak_bytes("check", 1 << 24))  # 16M ranks: measured 1,207 MiB
'1.6 GiB'
>>> largest_fitting(lambda n: 100 * n, 10_000, unit=8)
96
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import envvars
from .envvars import size_bytes
from .errors import SimharnessError

MEMORY_ENV = "SIMHARNESS_MEMORY_LIMIT"
USABLE_FRACTION = 0.9  # of the available memory: headroom for the rest of the machine
MIB = 1 << 20

# ------------------------------------------------------------------ layout commands
# Peak RSS of `simharness CMD -n W` = PYTHON_BASE + bytes-per-rank * W (measured at 1M and
# 4M ranks, tp8 pp8, mcore 0.19, 23 kinds; rounded up; see the README's table).
PYTHON_BASE = 80 * MIB  # interpreter, numpy, click, simharness
LAYOUT_BYTES_PER_RANK = {  # measured (B/rank, 256K -> 1M ranks) +15-20 %
    "build": 44,        # validate + build_layout: inspect --rank (16M: 642 MiB, 36 B/rank)
    "explain": 66,      # every rule evaluated (16M ranks: 946 MiB, 55 B/rank)
    "check": 96,        # lean check (>= 1M ranks): a few world-sized arrays at a time
    "check-full": 330,  # full check (< 1M ranks): every kind's groups and inverse kept (281)
    "inspect": 190,     # table: every kind's groups built, first and last rows printed (150)
    "inspect-all": 340,  # table of every group (282)
    "inspect-grid": 110,  # node-by-GPU picture (90)
    "inspect-json": 860,  # every group as Python ints, then the text (717)
    "inspect-csv": 2250,  # a row per group, formatted in Python (1875)
    "export": 1050,     # JSON: every group as Python ints, then the text (877)
    "export-csv": 1080,  # CSV: one row per rank and kind (900)
}
LEAN_WORLD = 1 << 20  # == layout.LEAN_WORLD (kept here so this module imports nothing heavy)

# ----------------------------------------------------------------------- replays
# A replay rank is a fork of a helper that imported torch: its private memory is
# RANK_BASE plus its tensors. The overlap probe holds its reduce-scatter input and
# all-gather output (nbytes each) and gloo's staging copies: OVERLAP_FACTOR * nbytes.
# Measured: summed PSS of the helper and 8 ranks (-n 8 --tp 2): 0.9 GiB at 4M, 2.4 GiB at
# 64M, 9.0 GiB at 256M (README, "Resource limits").
HELPER_BASE = 320 * MIB  # the launcher helper: torch imported once, before the forks
RANK_BASE = 96 * MIB     # a forked rank's own pages: gloo, Python objects, copy-on-write
OVERLAP_FACTOR = 4.5     # probe tensors (2 x nbytes + shards) and gloo's staging copies
# Data-path replay (Megatron buckets), per rank: for each bucket of S*n float64 values
# (S = --shard-numel, n = its reduce-scatter group) the full parameters, gradient,
# all-gather buffer (2 S*n int64), gloo's copies, and what the allocator keeps between
# steps: (DATAPATH_FACTOR + DATAPATH_STEP_FACTOR * steps) * S*n*8 bytes per bucket
# (measured 12-23 x over S = 64K..1M, n = 2..8, 2-8 steps). The launcher's reference runs
# after the ranks have exited: every step of every (group, bucket), twice over.
VIRTUAL_ALLOWANCE = 512 * MIB  # RLIMIT_DATA above the share: thread stacks, malloc arenas
VIRTUAL_PER_KIND = 24 * MIB    # ... and per group kind (gloo threads per group)
DATAPATH_FACTOR = 14
DATAPATH_STEP_FACTOR = 1.25
DATAPATH_REF_FACTOR = 2


class ResourceError(SimharnessError):
    """A request whose estimated memory exceeds what this machine may use (exit 2)."""


@dataclass(frozen=True)
class MemoryLimit:
    """Bytes this process may use, and where the figure comes from; ``note``: said once
    when :data:`MEMORY_ENV` asked for more than the machine has and was capped."""

    available: int
    source: str
    note: str | None = None

    @property
    def usable(self) -> int:
        return int(self.available * USABLE_FRACTION)

    def describe(self) -> str:
        return (f"{fmt_bytes(self.usable)} usable ({USABLE_FRACTION:.0%} of "
                f"{fmt_bytes(self.available)} {self.source})")


def fmt_bytes(n: float) -> str:
    """``1.5 GiB``: binary units, one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def parse_size(text: str) -> int:
    """``24G`` -> bytes (see :func:`size_bytes`); raises :class:`ResourceError` naming the
    text.

    >>> parse_size("24G"), parse_size("512M"), parse_size("1000")
    (25769803776, 536870912, 1000)
    """
    n = size_bytes(text)
    if n is None:
        raise ResourceError(f"{MEMORY_ENV}={text!r} is not a size; write e.g. 24G, 512M or a "
                            f"byte count.")
    return n


def proc_kib(key: str, path: str | Path = "/proc/meminfo") -> int | None:
    """The ``KEY:   N kB`` figure of a /proc file (``/proc/meminfo``, ``/proc/self/status``)
    in KiB; None when the file or the key is missing (not Linux).

    >>> proc_kib("VmRSS", "/proc/self/status") > 0
    True
    >>> proc_kib("NoSuchKey") is None
    True
    """
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    kib = proc_kib("MemAvailable", path)
    return None if kib is None else kib * 1024


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) -> None


def _cgroup_room(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes left under this process's cgroup memory limit (v2 or v1), or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        rel = path.lstrip("/")
        if controllers == "":  # v2: "0::/path"
            names, dirs = ("memory.max", "memory.current"), (root / rel, root)
        elif "memory" in controllers.split(","):  # v1: "4:memory:/path"
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes")
            dirs = (root / "memory" / rel, root / "memory")
        else:
            continue
        for d in dirs:  # in a container the own cgroup is often mounted as the root
            limit, used = _read_int(d / names[0]), _read_int(d / names[1])
            if limit is not None and used is not None and limit < 1 << 60:
                return max(0, limit - used)
    return None


def machine_memory() -> MemoryLimit:
    """What the machine gives this process: the smaller of ``MemAvailable`` and the
    cgroup's room (``memory.max`` less ``memory.current``); a large default when neither
    can be read."""
    avail = _meminfo_available()
    room = _cgroup_room()
    if room is not None and (avail is None or room < avail):
        return MemoryLimit(room, "left under the cgroup memory limit")
    if avail is not None:
        return MemoryLimit(avail, "MemAvailable")
    return MemoryLimit(1 << 50, "(unknown: no /proc/meminfo)")  # pragma: no cover


def available_memory() -> MemoryLimit:
    """What this process may allocate: :func:`machine_memory`, or ``SIMHARNESS_MEMORY_LIMIT``
    when set and lower. A limit above the machine's is capped at it, with a note: the
    variable can lower the guard, never lift it past what the kernel will give (a bad
    value is :class:`simharness.envvars.EnvVarError`)."""
    env = envvars.read(MEMORY_ENV)
    machine = machine_memory()
    if env is None:
        return machine
    if env > machine.available:
        text = os.environ.get(MEMORY_ENV, "")
        return MemoryLimit(
            machine.available, f"{machine.source}; {MEMORY_ENV}={text} capped at it",
            note=f"{MEMORY_ENV}={text} is more than this machine gives this process "
                 f"({fmt_bytes(machine.available)} {machine.source}); capped at that.")
    return MemoryLimit(env, f"set by {MEMORY_ENV}")


def largest_fitting(estimate: Callable[[int], int], budget: int, *, unit: int = 1,
                    start: int = 1) -> int:
    """The largest multiple ``n`` of ``unit`` (>= ``start``) with ``estimate(n) <= budget``,
    or 0 when even ``unit`` does not fit (``estimate`` must not decrease)."""
    lo = max(unit, start - start % unit)
    if estimate(lo) > budget:
        return 0
    hi = lo
    while estimate(hi * 2) <= budget:
        hi *= 2
        if hi > 1 << 62:  # pragma: no cover - nothing fits that
            return hi
    hi *= 2  # estimate(hi) > budget >= estimate(lo)
    while hi - lo > unit:
        mid = (lo + hi) // 2 // unit * unit
        if mid <= lo:
            break
        lo, hi = (mid, hi) if estimate(mid) <= budget else (lo, mid)
    return lo


def require(what: str, need: int, largest: str, limit: MemoryLimit | None = None) -> None:
    """Raise :class:`ResourceError` when ``need`` bytes exceed the usable memory.

    ``what``: the request in words (``check of 2,147,483,648 ranks``); ``largest``: the
    largest input that fits, in the user's flags (``-n 1,879,048,192``).
    """
    limit = limit or available_memory()
    if need <= limit.usable:
        return
    raise ResourceError(
        f"{what} needs about {fmt_bytes(need)} of memory (estimate), more than this machine's "
        f"{limit.describe()}; the largest that fits is {largest}. Lower it, free memory, or "
        f"run it on a machine with more memory ({MEMORY_ENV} can only lower the limit).")


# ----------------------------------------------------------------- the estimates
def layout_peak_bytes(command: str, world: int, kinds: int = 23) -> int:
    """Peak RSS of a layout command (:data:`LAYOUT_BYTES_PER_RANK`) at ``world`` ranks.

    ``kinds``: the layout's group kinds; everything but the lean check grows with it.
    """
    if command == "check" and world < LEAN_WORLD:
        command = "check-full"
    per_rank = LAYOUT_BYTES_PER_RANK[command]
    if command != "check":
        per_rank = per_rank * max(kinds, 23) // 23
    return PYTHON_BASE + per_rank * world


def layout_memory_check(cfg, mcore: str, command: str, limit: MemoryLimit | None = None, *,
                        what: str | None = None, kinds: int | None = None) -> None:
    """Refuse (:class:`ResourceError`) a layout command whose estimate does not fit,
    before anything world-sized is built. ``cfg``: the fields, best not yet validated
    (:class:`simharness.fields.ParallelismFields`): validating a huge world builds its
    pipeline groups. ``kinds``: the layout's kind count when the caller has drafted its
    loops (:class:`simharness.layout.Draft`); counted here otherwise."""
    import math

    envvars.read(MEMORY_ENV)  # a bad value is refused whatever the estimate
    world = cfg.world_size
    if layout_peak_bytes(command, world) <= 256 * MIB:
        return  # small: no need to read the machine's memory
    if kinds is None:
        kinds = _kind_count(cfg, mcore)
    limit = limit or available_memory()
    need = layout_peak_bytes(command, world, kinds)
    if need <= limit.usable:
        return
    try:
        unit = math.lcm(cfg.tp * cfg.pp * cfg.cp, cfg.etp * cfg.ep * cfg.pp)
    except Exception:  # noqa: BLE001 - sizes validation will reject
        unit = 1
    fits = largest_fitting(lambda w: layout_peak_bytes(command, w, kinds), limit.usable,
                           unit=unit)
    largest = (f"-n {fits:,} (a multiple of {unit}, with these sizes)" if fits
               else "none (not even one model-parallel group)")
    words = f"{what} of {world:,} ranks" if what else f"a layout of {world:,} ranks"
    require(f"{words} ({kinds} group kinds)", need, largest, limit)


def _kind_count(cfg, mcore: str) -> int:
    """The layout's kind count without building or validating it (23 when unknown)."""
    try:
        from .plan import kind_count
        from .profiles import build_loops

        return kind_count(build_loops(cfg, mcore))
    except Exception:  # noqa: BLE001 - an invalid configuration: validation will say why
        return 23


def replay_rank_bytes(overlap_bytes: int) -> int:
    """Private memory of one replay rank (plan or megatron engine)."""
    return int(RANK_BASE + OVERLAP_FACTOR * overlap_bytes)


def datapath_rank_bytes(shard_numel: int, group_size: int, buckets: int, steps: int) -> int:
    """Private memory of one data-path rank (Megatron buckets)."""
    per_bucket = (DATAPATH_FACTOR + DATAPATH_STEP_FACTOR * steps) * shard_numel * group_size * 8
    return int(RANK_BASE + buckets * per_bucket)


def datapath_reference_bytes(shard_numel: int, group_size: int, steps: int,
                             group_buckets: int) -> int:
    """The launcher's reference: every step of every (group, bucket) pair."""
    return PYTHON_BASE + DATAPATH_REF_FACTOR * group_buckets * (steps + 1) * shard_numel \
        * group_size * 8


@dataclass(frozen=True)
class RankBudget:
    """A replay's memory plan: what one rank should need, the limit each rank gets
    (its share of the usable memory), and the machine's figure, for the report."""

    rank_estimate: int
    rank_limit: int
    available: int
    source: str

    def to_dict(self) -> dict:
        return {"rank_estimate": self.rank_estimate, "rank_limit": self.rank_limit,
                "available": self.available, "source": self.source}


def replay_budget(world: int, overlap_bytes: int, *, what: str = "replay",
                  limit: MemoryLimit | None = None) -> RankBudget:
    """Check a replay of ``world`` ranks with an ``overlap_bytes`` probe; its budget.

    Refuses (:class:`ResourceError`) naming the largest ``--overlap-bytes`` that fits, or
    the largest world when not even a probe-less replay fits.
    """
    limit = limit or available_memory()
    need = HELPER_BASE + world * replay_rank_bytes(overlap_bytes)
    if need > limit.usable:
        room = (limit.usable - HELPER_BASE) // max(world, 1) - RANK_BASE
        if room >= 0:
            largest = f"--overlap-bytes {fmt_bytes(int(room / OVERLAP_FACTOR))} at {world} ranks"
        else:
            fits = max(0, (limit.usable - HELPER_BASE) // replay_rank_bytes(0))
            largest = f"{fits} ranks without the overlap probe (--overlap-bytes 0)"
        require(f"{what} of {world} ranks with --overlap-bytes {fmt_bytes(overlap_bytes)} "
                f"({fmt_bytes(replay_rank_bytes(overlap_bytes))} per rank)", need, largest,
                limit)
    return _budget(world, replay_rank_bytes(overlap_bytes), limit)


def datapath_budget(world: int, *, shard_numel: int, group_size: int, buckets: int,
                    steps: int, group_buckets: int,
                    limit: MemoryLimit | None = None) -> RankBudget:
    """Check a data-path replay; its budget. Refuses naming the largest ``--shard-numel``
    that fits (with these steps and buckets)."""
    limit = limit or available_memory()

    def need(s: int) -> int:
        ranks = HELPER_BASE + world * datapath_rank_bytes(s, group_size, buckets, steps)
        return max(ranks, datapath_reference_bytes(s, group_size, steps, group_buckets))

    if need(shard_numel) > limit.usable:
        fits = largest_fitting(need, limit.usable)
        largest = (f"--shard-numel {fits:,} with --steps {steps}" if fits else
                   "none at this world (lower -n or the buckets)")
        rank = datapath_rank_bytes(shard_numel, group_size, buckets, steps)
        require(f"replay-data of {world} ranks, --steps {steps}, --shard-numel "
                f"{shard_numel:,} ({buckets} bucket(s) per rank on groups of {group_size}; "
                f"{fmt_bytes(rank)} per rank)", need(shard_numel), largest, limit)
    return _budget(world, datapath_rank_bytes(shard_numel, group_size, buckets, steps), limit)


def _budget(world: int, rank_estimate: int, limit: MemoryLimit) -> RankBudget:
    share = (limit.usable - HELPER_BASE) // max(world, 1)
    return RankBudget(rank_estimate, max(share, rank_estimate), limit.available, limit.source)


def rlimit_data_bytes(budget: RankBudget, kinds: int) -> int:
    """The ``RLIMIT_DATA`` head-room a rank gets above its size at fork: its share of the
    memory plus :data:`VIRTUAL_ALLOWANCE` and :data:`VIRTUAL_PER_KIND` per group kind.

    ``RLIMIT_DATA`` counts address space, not pages used: every thread gloo starts
    reserves a stack (measured: VmData +600-700 MiB over 67-76 threads while RSS grew by
    about 20 MiB, 4 and 16 ranks, 25 kinds), so the limit stops a runaway allocation
    (``--overlap-bytes 100G``) but is not a tight bound on pages used."""
    return budget.rank_limit + VIRTUAL_ALLOWANCE + VIRTUAL_PER_KIND * kinds


__all__ = ["MEMORY_ENV", "MemoryLimit", "RankBudget", "ResourceError", "available_memory",
           "datapath_budget", "datapath_rank_bytes", "datapath_reference_bytes", "fmt_bytes",
           "largest_fitting", "layout_memory_check", "layout_peak_bytes", "machine_memory",
           "parse_size", "size_bytes",
           "replay_budget", "replay_rank_bytes", "require", "rlimit_data_bytes"]
