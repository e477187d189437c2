"""The report of :func:`simharness.verify_live`: every rank's results merged, and its text
summary (pure, no torch). Replay's own report reuses :func:`merge_mismatches`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..layout import Layout


def _key(m: dict[str, Any]) -> str:
    return json.dumps([m.get("check"), m.get("kind"), m.get("group"), m.get("expected"),
                       m.get("actual")], sort_keys=True, default=str)


def merge_mismatches(per_rank: Iterable[Iterable[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One entry per distinct mismatch, with the ranks that saw it."""
    merged: dict[str, dict[str, Any]] = {}
    for items in per_rank:
        for m in items:
            k = _key(m)
            if k not in merged:
                entry = dict(m)
                entry["ranks"] = []
                entry.pop("rank", None)
                merged[k] = entry
            if m.get("rank") is not None and m["rank"] not in merged[k]["ranks"]:
                merged[k]["ranks"].append(m["rank"])
    out = list(merged.values())
    for e in out:
        e["ranks"].sort()
    return out


def _ranks(rs: Sequence[int], limit: int = 10) -> str:
    rs = list(rs)
    if len(rs) <= limit:
        return ", ".join(map(str, rs))
    return ", ".join(map(str, rs[:limit])) + f", ... ({len(rs)} ranks)"


LIVE_SCHEMA = "simharness.live/1"


def build_live_report(layout: Layout, gathered: Sequence[dict[str, Any]], *,
                      megatron_version: str | None = None,
                      notes: Sequence[str] = ()) -> dict[str, Any]:
    """The report of :func:`simharness.verify_live` (every rank's results merged)."""
    ranks = sorted(gathered, key=lambda r: r["rank"])
    mism = merge_mismatches(r["mismatches"] for r in ranks)
    ag_fail = merge_mismatches(r["all_gather"]["mismatches"] for r in ranks)
    comm = [{"rank": r["rank"], **r["communicators"]} for r in ranks]
    comm_bad = [c["rank"] for c in comm if c["megatron"] is not None
                and c["megatron"] != c["plan"]]
    ok = not mism and not ag_fail
    return {
        "schema": LIVE_SCHEMA, "world_size": layout.world_size, "mcore": layout.mcore,
        "megatron_core": megatron_version, "config": layout.summary(),
        "ok": ok, "status": "matched" if ok else "mismatch",
        "getters_checked_per_rank": len(ranks[0]["checked"]),
        "kinds_without_getter": ranks[0]["no_getter"],
        "collectives": sum(r["collectives"] for r in ranks),
        "mismatches": mism + ag_fail,
        "all_gather": {"option": bool(layout.config.create_all_gather_group),
                       "dense_all_gather": ranks[0]["all_gather"]["dense_all_gather"],
                       "ok": not ag_fail},
        "communicators_per_rank": {"by_rank": comm, "differs_from_plan": comm_bad},
        "notes": list(notes),
    }


def live_summary_lines(report: dict[str, Any], *, max_items: int = 12) -> list[str]:
    lines = [f"simharness verify_live: world {report['world_size']}, megatron-core "
             f"{report['megatron_core']}, profile {report['mcore']}; "
             f"{report['getters_checked_per_rank']} getters checked per rank"
             + (f", {report['collectives']} collectives" if report["collectives"] else "")]
    ag = report["all_gather"]
    lines.append(f"all-gather: option {'on' if ag['option'] else 'off'}, all-gather runs on "
                 f"{ag['dense_all_gather']}: {'ok' if ag['ok'] else 'CHECKS FAILED'}")
    c = report["communicators_per_rank"]
    counts = sorted({x["megatron"] for x in c["by_rank"] if x["megatron"] is not None})
    if counts:
        lines.append(f"communicators per rank (Megatron's list): {counts[0]}-{counts[-1]}"
                     + (f"; differ from the plan on ranks {_ranks(c['differs_from_plan'])}"
                        if c["differs_from_plan"] else ""))
    for n in report["notes"]:
        lines.append(f"note: {n}")
    for m in report["mismatches"][:max_items]:
        lines.append(f"  [{m['check']}] {m['message']} (ranks {_ranks(m['ranks'])})")
    if len(report["mismatches"]) > max_items:
        lines.append(f"  ... {len(report['mismatches']) - max_items} more in the report")
    lines.append("result: " + ("MATCHED" if report["ok"] else
                               f"MISMATCH ({len(report['mismatches'])} distinct)"))
    return lines
