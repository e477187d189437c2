"""Ranks stuck in a collective because their groups diverge: found from the partial records.

A faithful capture's ranks make their ``new_group`` calls for real; when the calls differ
between ranks (a rank-dependent creation order, ``new_group`` called on some ranks only)
and the script then uses its groups, the ranks wait in a collective or a barrier for each
other forever. What they recorded so far already shows why, so the capture compares it
first, within a short grace, instead of waiting for ``--timeout``:

* a rank whose main thread has been inside ``torch.distributed`` (a collective, a barrier,
  a group connecting) without a new ``new_group`` call for :data:`STALL_S` seconds writes a
  *partial record* (``partial-NNNNN.json``: its calls so far and its stack) beside the rank
  records, and removes it once it moves on (:class:`Stall`, run by the rank's watchdog);
* once every rank has either written its record (finished) or a partial record (blocked),
  and the ranks' collective call sequences differ (:func:`calls_differ`), and this stays so
  for :data:`HOLD_S` seconds (or ``--grace``, when shorter), each blocked rank writes its
  record with status ``timeout``, error kind ``blocked``, and ends; the capture's checks
  then name the first
  differing call, the ranks and the call sites (``capture-divergence`` /
  ``capture-missing-call``, :mod:`.checks`).

Ranks whose calls agree are never stopped here: a slow collective waits for ``--timeout``
as before. Under ``--via-store`` (no shared folder) the records and partial records are
keys of the job's c10d store instead of files (a *board*: :class:`~.store_route.StoreRoute`),
and the same comparison runs on them. Pure (no torch import); the rank passes its stack
and call count in.

>>> from simharness.capture.record import GroupCall
>>> a = GroupCall((0, 1), "PAIR", None, False, None, None, ())
>>> b = GroupCall((2, 3), "PAIR", None, False, None, None, ())
>>> calls_differ({0: [a, b], 1: [a, b]}), calls_differ({0: [a, b], 2: [b, a]})
(False, True)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .record import GroupCall

#: Seconds without a new ``new_group`` call, inside ``torch.distributed``, before a rank
#: counts as blocked and writes its partial record.
STALL_S = 0.5
#: Seconds the ranks must stay so (every one finished or blocked, the calls differing, no
#: rank moving on) before the blocked ranks are stopped.
HOLD_S = 2.0
BLOCKED = "blocked"   # the error kind of a rank stopped this way
_PARTIAL = re.compile(r"^partial-(\d+)\.json$")
_RECORD = re.compile(r"^rank-(\d+)\.json$")


def partial_name(rank: int) -> str:
    return f"partial-{rank:05d}.json"


def collective_keys(calls: Sequence[GroupCall]) -> tuple:
    """What torch pairs across ranks: the collective calls' keys, in order."""
    return tuple(c.key for c in calls if c.collective)


def calls_differ(calls: Mapping[int, Sequence[GroupCall]]) -> bool:
    """Whether the ranks' collective ``new_group`` sequences are not all the same."""
    return len({collective_keys(c) for c in calls.values()}) > 1


class Board(Protocol):
    """Where the ranks post their records when there is no shared folder (the job's store)."""

    def put_partial(self, record: Mapping[str, Any]) -> None: ...

    def drop_partial(self) -> None: ...

    def posted(self) -> dict[int, bytes]:
        """Each rank's record, else its partial record, as posted (JSON)."""
        ...


class Stall:
    """One rank's view of the others while it is blocked (see the module doc); ``board``:
    the records are on it rather than in ``out_dir``."""

    def __init__(self, out_dir: str, rank: int, world: int, board: Board | None = None):
        self.out_dir, self.rank, self.world = out_dir, rank, world
        self.board = board
        self.path = os.path.join(out_dir, partial_name(rank))
        self.written = False
        self._cache: dict[str, tuple[Any, list[GroupCall]]] = {}
        self._state: tuple | None = None
        self.since = 0.0

    def write(self, record: Mapping[str, Any]) -> None:
        """This rank is blocked: its partial record (atomically)."""
        if self.board is not None:
            self.board.put_partial(record)
            self.written, self._state = True, None
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(record, fh, default=str)
        os.replace(tmp, self.path)
        self.written = True
        self._state = None

    def clear(self) -> None:
        """This rank moved on (or wrote its record): no partial record."""
        if self.written and self.board is not None:
            with contextlib.suppress(Exception):  # a store gone at the end: nothing to clear
                self.board.drop_partial()
        elif self.written:
            with contextlib.suppress(OSError):
                os.remove(self.path)
        self.written = False
        self._state = None

    def _calls(self, name: str) -> list[GroupCall] | None:
        path = os.path.join(self.out_dir, name)
        try:
            mtime = os.stat(path).st_mtime_ns
            hit = self._cache.get(name)
            if hit is not None and hit[0] == mtime:
                return hit[1]
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            calls = [GroupCall.from_dict(c) for c in data.get("calls") or ()]
        except (OSError, ValueError, TypeError, AttributeError):
            return None  # being replaced, or not a record: not yet
        self._cache[name] = (mtime, calls)
        return calls

    def _posted_calls(self) -> dict[int, list[GroupCall]] | None:
        """:meth:`everyone` from the board."""
        assert self.board is not None
        try:
            posted = self.board.posted()
        except Exception:  # noqa: BLE001 - a store not answering: not yet
            return None
        if any(r not in posted for r in range(self.world)):
            return None
        out = {}
        for r, raw in posted.items():
            hit = self._cache.get(f"board:{r}")
            if hit is None or hit[0] != raw:
                try:
                    data = json.loads(raw)
                    hit = (raw, [GroupCall.from_dict(c) for c in data.get("calls") or ()])
                except (ValueError, TypeError, AttributeError):
                    return None
                self._cache[f"board:{r}"] = hit
            out[r] = hit[1]
        return out

    def everyone(self) -> dict[int, list[GroupCall]] | None:
        """Every rank's calls when each has a record or a partial record, else None."""
        if self.board is not None:
            return self._posted_calls()
        try:
            names = os.listdir(self.out_dir)
        except OSError:
            return None
        by_rank: dict[int, str] = {}
        for name in names:
            m = _RECORD.match(name) or _PARTIAL.match(name)
            if m:   # a final record wins over a partial one
                r = int(m.group(1))
                if r not in by_rank or name.startswith("rank-"):
                    by_rank[r] = name
        if len(by_rank) < self.world or any(r not in by_rank for r in range(self.world)):
            return None
        out = {}
        for r, name in by_rank.items():
            calls = self._calls(name)
            if calls is None:
                return None
            out[r] = calls
        return out

    def diverged_for(self, now: float) -> float:
        """Seconds for which every rank has been finished or blocked with calls that differ
        (unchanged all along); 0 when that is not so now."""
        calls = self.everyone()
        if calls is None or not calls_differ(calls):
            self._state = None
            return 0.0
        state = tuple(sorted((r, len(c)) for r, c in calls.items()))
        if state != self._state:
            self._state, self.since = state, now
        return now - self.since


__all__ = ["BLOCKED", "HOLD_S", "STALL_S", "Board", "Stall", "calls_differ", "collective_keys",
           "partial_name"]
