"""Per-rank capture records: one JSON file per rank, merged into a :class:`Capture` (pure).

A rank started by ``python -m simharness.capture.rank`` (under ``simharness capture``,
``torchrun`` or ``srun``) writes ``rank-NNNNN.json`` into a directory (a shared one across
nodes) when it finishes, fails, is stuck or is stopped. :func:`merge_records` reads a
directory of them; with ``complete=True`` (``simharness capture --merge DIR``) a missing,
duplicate or corrupt record is a :class:`CaptureError` naming it.

>>> import tempfile
>>> call = GroupCall((0, 1), "PAIR", None, False, None, "1", ("init.py:3 <module>",))
>>> with tempfile.TemporaryDirectory() as d:
...     paths = [write_record(d, rank_record(r, 2, "ok", [call])) for r in (0, 1)]
...     cap = merge_records(d, complete=True)
>>> cap.ok_ranks, len(cap.sequences)
([0, 1], 1)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .record import NOT_RUN, OK, Capture, CaptureError, GroupCall, RankRecord

RANK_SCHEMA = "simharness.capture-rank/1"
_NAME = re.compile(r"^rank-(\d+)\.json$")
STATUSES = frozenset({OK, "failed", "timeout", "stopped"})


def record_name(rank: int) -> str:
    return f"rank-{rank:05d}.json"


def rank_record(rank: int, world_size: int, status: str, calls: Sequence[GroupCall], *,
                getters: Mapping[str, Any] | None = None, init: Mapping[str, Any] | None = None,
                error: Mapping[str, Any] | None = None, **info: Any) -> dict[str, Any]:
    """One rank's record as plain data (``info``: host, pid, elapsed_s, peak_rss_kb...)."""
    return {"schema": RANK_SCHEMA, "rank": rank, "world_size": world_size, "status": status,
            "calls": [c.to_dict() for c in calls], "getters": dict(getters or {}),
            "init": dict(init or {}), "error": None if error is None else dict(error), **info}


def write_record(directory: str, record: Mapping[str, Any]) -> str:
    """Write ``record`` atomically (a reader never sees half a file); returns the path."""
    path = os.path.join(directory, record_name(int(record["rank"])))
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh, default=str)
    os.replace(tmp, path)
    return path


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise CaptureError(f"{path}: corrupt rank record ({type(exc).__name__}: {exc}); "
                           f"capture that rank again.") from None
    if not isinstance(data, dict) or data.get("schema") != RANK_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise CaptureError(f"{path}: not a rank record (schema {got!r}, expected "
                           f"{RANK_SCHEMA!r}); write them with python -m "
                           f"simharness.capture.rank.")
    try:
        int(data["rank"]), int(data["world_size"])
        if data.get("status") not in STATUSES:
            raise ValueError(f"status {data.get('status')!r}")
        data["calls"] = tuple(GroupCall.from_dict(c) for c in data.get("calls") or ())
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CaptureError(f"{path}: corrupt rank record ({exc}); capture that rank "
                           f"again.") from None
    return data


def merge_records(directory: str, *, complete: bool = False,
                  meta: Mapping[str, Any] | None = None) -> Capture:
    """The records in ``directory`` as one :class:`Capture` (ranks without a record are
    ``not-run``; with ``complete``, an error)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise CaptureError(f"--merge {directory}: cannot read the directory "
                           f"({exc.strerror or exc}).") from None
    found: dict[int, dict[str, Any]] = {}
    paths: dict[int, str] = {}
    for name in names:
        if not _NAME.match(name):
            continue
        path = os.path.join(directory, name)
        data = _load(path)
        r = int(data["rank"])
        if r in found:
            raise CaptureError(f"rank {r} has two records ({paths[r]} and {path}); keep the "
                               f"one from the run you mean and merge again.")
        found[r], paths[r] = data, path
    if not found:
        raise CaptureError(f"{directory}: no rank records (rank-NNNNN.json); run the ranks "
                           f"with python -m simharness.capture.rank --out-dir {directory}.")
    worlds = sorted({int(d["world_size"]) for d in found.values()})
    if len(worlds) > 1:
        raise CaptureError(f"{directory}: the records come from different worlds "
                           f"(world sizes {worlds}); merge one run's records at a time.")
    world = worlds[0]
    outside = sorted(r for r in found if not 0 <= r < world)
    if outside:
        raise CaptureError(f"{directory}: rank(s) {outside[:5]} are outside the world "
                           f"0..{world - 1}.")
    missing = [r for r in range(world) if r not in found]
    if complete and missing:
        raise CaptureError(f"{directory}: {len(missing)} of {world} rank records are missing "
                           f"(ranks {_few(missing)}); every rank writes one when it ends: "
                           f"check those ranks' logs.")
    sequences: list[tuple[GroupCall, ...]] = []
    index: dict[tuple[GroupCall, ...], int] = {}
    records: dict[int, RankRecord] = {}
    for r in sorted(found):
        d = found[r]
        seq = d["calls"]
        sid = index.get(seq)
        if sid is None:
            sid = index[seq] = len(sequences)
            sequences.append(seq)
        records[r] = RankRecord(r, d["status"], sid, d.get("getters") or {},
                                d.get("init") or {}, d.get("error"))
    for r in missing:
        records[r] = RankRecord(r, NOT_RUN)
    info = {k: [found[r].get(k) for r in sorted(found)] for k in ("peak_rss_kb", "host")}
    m = {"world_size": world, "records": len(found),
         "peak_rss_kb_sum": sum(int(v or 0) for v in info["peak_rss_kb"]),
         "hosts": sorted({str(h) for h in info["host"] if h})}
    m.update(meta or {})
    return Capture(world, tuple(range(world)), tuple(sequences), records, m)


def _few(ranks: Sequence[int]) -> str:
    shown = ", ".join(map(str, ranks[:8]))
    return shown + (", ..." if len(ranks) > 8 else "")
