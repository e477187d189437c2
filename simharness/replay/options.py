"""Replay options, exit codes and fault injection (pure: no torch import)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import SimharnessError, whole_number_problem
from ..resources import size_bytes

REPORT_SCHEMA = "simharness.replay/1"
BACKENDS = ("gloo", "nccl")
ENGINES = ("plan", "megatron")

# Exit codes of `simharness replay` and of the torchrun worker.
EXIT_OK = 0            # every check matched
EXIT_MISMATCH = 1      # the replay ran; something did not match (groups, AG checks, plan vs config)
EXIT_USAGE = 2         # bad input, refused before any process started
EXIT_FAILED = 3        # the replay did not complete: a rank died, a collective timed out
EXIT_INTERRUPTED = 130  # Ctrl-C

OOM_FAULT_CAP = 8 << 30  # the ``oom`` fault gives up after this many bytes

# gloo ranks per CPU core the launcher accepts without --force.
GLOO_RANKS_PER_CORE = 32

FAULT_ACTIONS = ("exit", "hang", "raise", "kill", "oom")
FAULT_PHASES = ("init", "create", "verify", "probe", "gather")


class ReplayError(SimharnessError):
    """A replay request that cannot run (refused before any process starts)."""


def parse_bytes(text: str | int) -> int:
    """A byte count: ``1048576``, ``512K``, ``4M``, ``4MiB``, ``1G`` (powers of 1024; read
    by :func:`simharness.resources.size_bytes`, as every size is).

    >>> parse_bytes("64K"), parse_bytes("4MiB"), parse_bytes(7)
    (65536, 4194304, 7)
    """
    n = size_bytes(text)
    if n is None:
        if isinstance(text, int) and not isinstance(text, bool):
            raise ReplayError("the byte count must be >= 0.")
        raise ReplayError(f"{text!r} is not a byte count; write e.g. 4M, 512K or 1048576.")
    return n


@dataclass(frozen=True)
class Fault:
    """A deliberate fault for tests: rank ``rank`` does ``action`` at the start of ``phase``.

    ``exit``: the process exits at once with code 17, writing nothing;
    ``hang``: it sleeps (its peers' collectives time out);
    ``raise``: it raises ``RuntimeError``;
    ``kill``: it sends itself SIGKILL (what the kernel's OOM killer does);
    ``oom``: it allocates until its memory limit stops it (``MemoryError``; at most
    :data:`OOM_FAULT_CAP` bytes, then ``RuntimeError``: no limit in force).

    >>> Fault.parse("3:exit@verify")
    Fault(rank=3, action='exit', phase='verify')
    """

    rank: int
    action: str
    phase: str

    EXIT_CODE = 17

    @classmethod
    def parse(cls, text: str) -> Fault:
        try:
            rank_s, rest = str(text).split(":", 1)
            action, _, phase = rest.partition("@")
            fault = cls(int(rank_s), action.strip(), (phase or "verify").strip())
        except ValueError:
            raise ReplayError(f"fault {text!r} must look like RANK:ACTION@PHASE, e.g. "
                              f"3:exit@verify.") from None
        if fault.action not in FAULT_ACTIONS or fault.phase not in FAULT_PHASES:
            raise ReplayError(f"fault {text!r}: action must be one of {', '.join(FAULT_ACTIONS)} "
                              f"and phase one of {', '.join(FAULT_PHASES)}.")
        return fault

    def __str__(self) -> str:
        return f"{self.rank}:{self.action}@{self.phase}"


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay a layout.

    ``backend``: ``gloo`` (CPU; every group, NCCL ones included, is created
    as gloo) or ``nccl`` (one GPU per rank; the Gloo twins stay gloo).
    ``engine``: ``plan`` creates every group of the plan with ``new_group``;
    ``megatron`` runs the installed megatron-core's ``initialize_model_parallel``
    and compares what it built with the plan.
    ``timeout``: seconds a collective (or a group creation) may take.
    ``overlap_bytes``/``iters``: the overlap probe (0 turns it off).
    """

    backend: str = "gloo"
    engine: str = "plan"
    timeout: float = 60.0
    overlap_bytes: int = 4 << 20
    iters: int = 10
    force: bool = False
    fault: str | None = None

    def validate(self) -> ReplayOptions:
        if self.backend not in BACKENDS:
            raise ReplayError(f"backend {self.backend!r} is not supported; use "
                              f"{' or '.join(BACKENDS)}.")
        if self.engine not in ENGINES:
            raise ReplayError(f"engine {self.engine!r} is not supported; use "
                              f"{' or '.join(ENGINES)}.")
        if not (isinstance(self.timeout, (int, float)) and math.isfinite(self.timeout)
                and self.timeout > 0):
            raise ReplayError(f"timeout must be a positive number of seconds, got "
                              f"{self.timeout!r}.")
        for name in ("overlap_bytes", "iters"):
            if problem := whole_number_problem(name, getattr(self, name), 0):
                raise ReplayError(problem + ".")
        if self.fault is not None:
            Fault.parse(self.fault)
        return self

    @property
    def fault_spec(self) -> Fault | None:
        return Fault.parse(self.fault) if self.fault else None

    @property
    def probe_enabled(self) -> bool:
        return self.overlap_bytes > 0 and self.iters > 0

    def backend_map(self) -> dict[str, str]:
        """Plan backend -> backend the replay creates."""
        if self.backend == "gloo":
            return {"nccl": "gloo", "ucc": "gloo", "gloo": "gloo"}
        return {"nccl": "nccl", "ucc": "nccl", "gloo": "gloo"}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplayOptions:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def max_local_gloo_ranks(cores: int | None = None) -> int:
    return GLOO_RANKS_PER_CORE * (cores or cpu_count())
