"""A recorded ``new_group`` log compared call by call with the plan's creation order.

Replay's Megatron mode (:func:`simharness.replay.megatron_engine.run_megatron`) and
capture (:mod:`simharness.capture.checks`) both record the groups a real program creates,
as :class:`LoggedGroup` entries; :func:`compare_log` lines them up with
:attr:`simharness.layout.Layout.creation_order`. Pure: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .layout import Layout


@dataclass
class LoggedGroup:
    index: int
    ranks: list[int]
    backend: str | None      # as Megatron passed it
    used: str                # backend created
    desc: str | None
    pg: Any                  # the object returned (members) or None


def compare_log(layout: Layout, log: list[LoggedGroup], rank: int) -> tuple[list[dict], bool]:
    """Megatron's ``new_group`` calls against the plan's creation order, call by call.

    Returns ``(mismatches, aligned)``; ``aligned`` is True when every call
    matched (then the plan's kinds and group numbers name Megatron's groups).
    """
    plan = layout.creation_order
    out: list[dict[str, Any]] = []
    aligned = len(plan) == len(log)
    if len(plan) != len(log):
        out.append({"check": "creation_order", "rank": rank, "kind": None, "group": None,
                    "desc": None, "expected": len(plan), "actual": len(log),
                    "message": f"Megatron made {len(log)} new_group calls, the plan "
                               f"{len(plan)}."})
    counters: dict[str, int] = {}
    for i, gc in enumerate(plan):
        g = counters.get(gc.kind, 0)
        counters[gc.kind] = g + 1
        if i >= len(log):
            break
        e = log[i]
        meg_backend = e.backend or "nccl"
        if e.desc != gc.desc or e.ranks != list(gc.ranks) or meg_backend != gc.backend:
            aligned = False
            if len(out) < 32:
                out.append({"check": "creation_order", "rank": rank, "kind": gc.kind, "group": g,
                            "index": i, "desc": gc.desc,
                            "expected": [gc.desc, list(gc.ranks), gc.backend],
                            "actual": [e.desc, e.ranks, meg_backend],
                            "message": f"new_group call {i}: the plan creates {gc.kind} group "
                                       f"{g} {gc.desc} {list(gc.ranks)} ({gc.backend}); Megatron "
                                       f"created {e.desc} {e.ranks} ({meg_backend})."})
    return out, aligned


__all__ = ["LoggedGroup", "compare_log"]
