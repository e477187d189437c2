"""What a capture records (pure: no torch import).

A capture runs the user's initialisation code once per rank and records every
``torch.distributed.new_group`` call as a :class:`GroupCall`. Ranks whose
calls are identical share one recorded sequence (:attr:`Capture.sequences`),
so a 1024-rank world whose ranks agree stores one sequence, not 1024.

>>> call = GroupCall((0, 2), "DATA_PARALLEL_GROUP", None, False, None, "3",
...                  ("init.py:12 build",))
>>> call.key, call.collective, call.site
(((0, 2), 'DATA_PARALLEL_GROUP', None, False), True, 'init.py:12 build')
>>> parse_rank_spec("0-3,8", 16)
(0, 1, 2, 3, 8)
>>> spec = GetterSpec.parse("megatron.core.parallel_state:get_data_parallel_group("
...                         "with_context_parallel=True)")
>>> spec.module, spec.path, spec.call
('megatron.core.parallel_state', ('get_data_parallel_group',), True)
>>> spec.kwargs
(('with_context_parallel', True),)
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

from ..errors import SimharnessError

CAPTURE_SCHEMA = "simharness.capture/1"

# Status of one rank's run. STOPPED: stopped from outside (another rank failed, or the
# capture was interrupted) before it finished; its calls are partial but it did not fail.
OK, FAILED, TIMEOUT, NOT_RUN, STOPPED = "ok", "failed", "timeout", "not-run", "stopped"


class CaptureError(SimharnessError):
    """A capture that cannot run or did not complete (bad script, a rank that failed)."""


class GroupCall(NamedTuple):
    """One ``new_group`` call as the rank made it.

    ``ranks`` as passed (``None``: every rank), ``desc`` the ``group_desc``,
    ``backend`` as passed (``None``: the default backend), ``local_sync`` the
    ``use_local_synchronization`` flag, ``pg_options`` the options' type name,
    ``group_name`` the name torch gives the group, ``stack`` up to three frames
    outside torch (``"file:line function"``, innermost first), ``ordered``
    whether the code passed ``sort_ranks=False``. The group torch builds
    (:attr:`group`, what :attr:`key` and :meth:`members` use) has the ranks
    sorted unless ``ordered``: ``[1, 0]`` and ``[0, 1]`` are one communicator.

    >>> GroupCall((3, 1), None, None, False, None, None, ()).key[0]
    (1, 3)
    """

    ranks: tuple[int, ...] | None
    desc: str | None
    backend: str | None
    local_sync: bool
    pg_options: str | None
    group_name: str | None
    stack: tuple[str, ...]
    ordered: bool = False

    @property
    def group(self) -> tuple[int, ...] | None:
        """The group's ranks as torch builds it (sorted unless ``ordered``)."""
        return self.ranks if self.ordered or self.ranks is None else _sorted(self.ranks)

    @property
    def key(self) -> tuple:
        """What torch pairs across ranks: the group, desc, backend and synchronisation."""
        return (self.group, self.desc, self.backend, self.local_sync)

    @property
    def collective(self) -> bool:
        """Every rank of the world must make this call (``use_local_synchronization`` off)."""
        return not self.local_sync

    @property
    def site(self) -> str:
        return self.stack[0] if self.stack else "?"

    def members(self, world_size: int) -> tuple[int, ...]:
        """The group's ranks in torch's order (:attr:`group`; every rank for ``None``)."""
        group = self.group
        return tuple(range(world_size)) if group is None else group

    def label(self) -> str:
        """``DESC [ranks]`` for messages (long rank lists shortened)."""
        ranks = "all ranks" if self.ranks is None else _short(self.ranks)
        return f"{self.desc or '(no group_desc)'} {ranks}"

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": None if self.ranks is None else list(self.ranks), "desc": self.desc,
                "backend": self.backend, "use_local_synchronization": self.local_sync,
                "pg_options": self.pg_options, "group_name": self.group_name,
                "stack": list(self.stack), "sort_ranks": not self.ordered}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GroupCall:
        ranks = d.get("ranks")
        return cls(None if ranks is None else tuple(int(r) for r in ranks), d.get("desc"),
                   d.get("backend"), bool(d.get("use_local_synchronization", False)),
                   d.get("pg_options"), d.get("group_name"), tuple(d.get("stack") or ()),
                   d.get("sort_ranks", True) is False)


@lru_cache(maxsize=65536)
def _sorted(ranks: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(ranks))


def _short(ranks: Iterable[int], limit: int = 8) -> str:
    r = list(ranks)
    if len(r) <= limit:
        return str(r)
    return f"[{', '.join(map(str, r[:limit - 2]))}, ..., {r[-1]}] ({len(r)} ranks)"


@dataclass(frozen=True)
class RankRecord:
    """One rank's run: the sequence it made (index into :attr:`Capture.sequences`),
    its status, the getters' values and, when it failed, the error.

    ``error`` is a dict with ``kind`` (``exception``, ``no-init``, ``gpu-only``,
    ``exit``, ``timeout``, ``died``), ``message`` and ``where`` (frames).
    """

    rank: int
    status: str
    sequence: int | None = None
    getters: Mapping[str, Any] = field(default_factory=dict)
    init: Mapping[str, Any] = field(default_factory=dict)
    error: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "status": self.status, "sequence": self.sequence,
                "getters": dict(self.getters), "init": dict(self.init),
                "error": None if self.error is None else dict(self.error)}


@dataclass(frozen=True)
class Capture:
    """Every rank's ``new_group`` calls, getters and status.

    ``ranks`` are the ranks asked for (all, or ``--ranks``); ``records`` holds
    one :class:`RankRecord` per rank that started (ranks never started are
    ``not-run``); ``meta`` says what ran (command, versions, timing).
    """

    world_size: int
    ranks: tuple[int, ...]
    sequences: tuple[tuple[GroupCall, ...], ...]
    records: Mapping[int, RankRecord]
    meta: Mapping[str, Any] = field(default_factory=dict)

    # ---------------------------------------------------------------- views
    def calls(self, rank: int) -> tuple[GroupCall, ...]:
        rec = self.records.get(rank)
        if rec is None or rec.sequence is None:
            return ()
        return self.sequences[rec.sequence]

    @property
    def ok_ranks(self) -> list[int]:
        return sorted(r for r, rec in self.records.items() if rec.status == OK)

    @property
    def failed(self) -> list[RankRecord]:
        return [self.records[r] for r in sorted(self.records)
                if self.records[r].status in (FAILED, TIMEOUT)]

    @property
    def complete(self) -> bool:
        return len(self.ok_ranks) == len(self.ranks)

    def ranks_by_sequence(self) -> dict[int, list[int]]:
        """Sequence index -> the ranks (status ok) that made it, ascending."""
        out: dict[int, list[int]] = {}
        for r in self.ok_ranks:
            sid = self.records[r].sequence
            if sid is not None:
                out.setdefault(sid, []).append(r)
        return out

    def groups(self) -> list[GroupCall]:
        """Every distinct group created: the collective calls of the most common sequence,
        then the locally synchronised calls of every rank (each group once)."""
        by_seq = self.ranks_by_sequence()
        if not by_seq:
            return []
        ref = reference_sequence(by_seq)
        out = [c for c in self.sequences[ref] if c.collective]
        seen = set()
        for s in by_seq:
            for c in self.sequences[s]:
                if c.local_sync and c.key not in seen:
                    seen.add(c.key)
                    out.append(c)
        return out

    # --------------------------------------------------------------- export
    def to_dict(self) -> dict[str, Any]:
        return {"schema": CAPTURE_SCHEMA, "world_size": self.world_size,
                "ranks": list(self.ranks), "meta": dict(self.meta),
                "sequences": [[c.to_dict() for c in seq] for seq in self.sequences],
                "records": [self.records[r].to_dict() for r in sorted(self.records)]}

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), default=str, **kw)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Capture:
        if not isinstance(data, Mapping) or data.get("schema") != CAPTURE_SCHEMA:
            got = data.get("schema") if isinstance(data, Mapping) else type(data).__name__
            raise CaptureError(f"not a capture file: schema {got!r}, expected "
                               f"{CAPTURE_SCHEMA!r}; write one with `simharness capture`.")
        try:
            seqs = tuple(tuple(GroupCall.from_dict(c) for c in s) for s in data["sequences"])
            recs = {int(d["rank"]): RankRecord(int(d["rank"]), d["status"], d.get("sequence"),
                                               d.get("getters") or {}, d.get("init") or {},
                                               d.get("error"))
                    for d in data["records"]}
            return cls(int(data["world_size"]), tuple(int(r) for r in data["ranks"]), seqs,
                       recs, data.get("meta") or {})
        except (KeyError, TypeError, ValueError) as exc:
            raise CaptureError(f"capture file is damaged: {exc!r}; capture again.") from None


def reference_sequence(by_seq: Mapping[int, list[int]]) -> int:
    """The sequence most ranks made (ties: the one rank 0, else the lowest rank, made)."""
    return min(by_seq, key=lambda s: (-len(by_seq[s]), by_seq[s][0]))


# ----------------------------------------------------------------- inputs
def parse_rank_spec(spec: str | None, world_size: int) -> tuple[int, ...]:
    """``all`` (or None) or a list such as ``0-7,12`` -> the ranks, ascending."""
    if spec is None or str(spec).strip().lower() in ("", "all"):
        return tuple(range(world_size))
    out: set[int] = set()
    for part in str(spec).replace(" ", "").split(","):
        if not part:
            continue
        try:
            lo, sep, hi = part.partition("-")
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise CaptureError(f"--ranks {spec!r}: {part!r} is not a rank or a range such "
                               f"as 0-7; write e.g. --ranks 0-7,12 or --ranks all.") from None
        if a > b or a < 0 or b >= world_size:
            raise CaptureError(f"--ranks {spec!r}: {part!r} is outside the world 0.."
                               f"{world_size - 1}; pick ranks in that range.")
        out.update(range(a, b + 1))
    if not out:
        raise CaptureError(f"--ranks {spec!r} names no rank; write e.g. 0-7 or all.")
    return tuple(sorted(out))


@dataclass(frozen=True)
class GetterSpec:
    """A collective-free getter to read on every rank after the code ran:
    ``module:attr.attr`` (a value, or a function called without arguments) or
    ``module:function(literal args)``. ``__main__`` is the script's namespace."""

    text: str
    module: str
    path: tuple[str, ...]
    call: bool
    args: tuple = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, text: str) -> GetterSpec:
        hint = ("write MODULE:NAME or MODULE:NAME(literal arguments), e.g. "
                "megatron.core.parallel_state:get_data_parallel_group(with_context_parallel=True)")
        module, sep, rest = str(text).partition(":")
        if not sep or not module.strip() or not rest.strip():
            raise CaptureError(f"--getter {text!r}: {hint}.")
        try:
            node = ast.parse(rest.strip(), mode="eval").body
        except SyntaxError:
            raise CaptureError(f"--getter {text!r}: {rest!r} does not parse; {hint}.") from None
        call = isinstance(node, ast.Call)
        target, arg_nodes, kw_nodes = ((node.func, node.args, node.keywords)
                                       if isinstance(node, ast.Call) else (node, [], []))
        path = []
        while isinstance(target, ast.Attribute):
            path.append(target.attr)
            target = target.value
        if not isinstance(target, ast.Name):
            raise CaptureError(f"--getter {text!r}: {rest!r} is not a name; {hint}.")
        path.append(target.id)
        try:
            args = tuple(ast.literal_eval(a) for a in arg_nodes)
            kwargs = tuple((k.arg, ast.literal_eval(k.value)) for k in kw_nodes)
        except ValueError:
            raise CaptureError(f"--getter {text!r}: arguments must be literals (numbers, "
                               f"strings, True/False/None, lists); {hint}.") from None
        if any(k is None for k, _ in kwargs):
            raise CaptureError(f"--getter {text!r}: **kwargs are not supported; {hint}.")
        return cls(str(text), module.strip(), tuple(reversed(path)), call, args,
                   kwargs)  # type: ignore[arg-type]  # None names were refused above
