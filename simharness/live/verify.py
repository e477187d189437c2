"""Torch-level comparisons shared by the replay workers and :func:`verify_live`.

Everything here runs inside a rank of an initialised ``torch.distributed`` job:
membership of one group object against the plan, the all-gather group checks,
and Megatron's getters against the plan. Results are plain dicts
(``{"check", "kind", "group", "rank", "expected", "actual", "message"}``) so they
travel through ``all_gather_object`` and into the JSON report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from ..getters import Getter, getter, megatron_getters, ordered_rank_globals
from ..layout import Layout, RankView

# 0.16/0.17 only: the AG group has a getter; from 0.18 the caller owns the groups.
AG_GETTER_016 = megatron_getters("0.16")["dp_cp_ag"]

MAX_RECORDED = 64  # mismatches kept per rank


def is_group(pg: Any) -> bool:
    return pg is not None and pg is not dist.GroupMember.NON_GROUP_MEMBER


def torch_ranks(pg: Any) -> list[int]:
    """Global ranks of ``pg`` in group-rank order (torch sorts them)."""
    return [int(r) for r in dist.get_process_group_ranks(pg)]


def mismatch(check: str, rank: int, message: str, *, kind: str | None = None,
             group: int | None = None, desc: str | None = None, expected: Any = None,
             actual: Any = None) -> dict[str, Any]:
    return {"check": check, "rank": rank, "kind": kind, "group": group, "desc": desc,
            "expected": expected, "actual": actual, "message": message}


def membership_mismatches(rank: int, kind: str, group: int, desc: str, plan_ranks,
                          pg: Any) -> list[dict[str, Any]]:
    """``pg`` (this rank's group) against the plan's ranks: set, torch's order, group rank."""
    plan = [int(r) for r in plan_ranks]
    where = f"{kind} group {group} ({desc})"
    if not is_group(pg):
        return [mismatch("membership", rank, f"{where}: this rank is in the plan's group "
                         f"{plan} but torch made it a non-member.", kind=kind, group=group,
                         desc=desc, expected=plan, actual=None)]
    actual = torch_ranks(pg)
    out = []
    if sorted(actual) != sorted(plan):
        extra = sorted(set(actual) - set(plan))
        missing = sorted(set(plan) - set(actual))
        out.append(mismatch("membership", rank, f"{where}: torch's group has ranks {actual}, "
                            f"the plan {plan} (extra {extra}, missing {missing}).", kind=kind,
                            group=group, desc=desc, expected=plan, actual=actual))
        return out
    if actual != sorted(plan):
        out.append(mismatch("rank_order", rank, f"{where}: torch orders the group {actual}, "
                            f"expected the sorted ranks {sorted(plan)}.", kind=kind,
                            group=group, desc=desc, expected=sorted(plan), actual=actual))
    want = sorted(plan).index(rank)
    got = dist.get_rank(pg)
    if got != want:
        out.append(mismatch("group_rank", rank, f"{where}: this rank has group rank {got}, "
                            f"expected {want}.", kind=kind, group=group, desc=desc,
                            expected=want, actual=got))
    return out


def all_gather_ranks(pg: Any, rank: int, device: torch.device, async_op: bool = True):
    """Issue an all-gather of ``rank`` on ``pg``; returns ``(work, output tensor)``."""
    n = dist.get_world_size(pg)
    out = torch.empty(n, dtype=torch.int64, device=device)
    inp = torch.tensor([rank], dtype=torch.int64, device=device)
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(out, inp, group=pg, async_op=async_op), out


# ---------------------------------------------------------------- all-gather
def _check(checks: list, mism: list, rank: int, name: str, ok: bool, message: str,
           **kw) -> None:
    checks.append({"name": name, "ok": bool(ok)})
    if not ok:
        mism.append(mismatch(name, rank, message, **kw))


def all_gather_checks(layout: Layout, rank: int, group_of: Callable[[str], Any],
                      megatron: Any = None) -> dict[str, Any]:
    """The all-gather group checks of one rank.

    Option on: the AG group is a distinct group object (and communicator)
    from the DP-with-CP group, with identical ranks, and the all-gather
    resolves to it. Option off: the all-gather resolves to the reduce-scatter
    group object itself. ``group_of(kind)`` returns this rank's group object
    of a kind (plan replay: the object created; Megatron: the getter's).
    ``megatron`` (the ``parallel_state`` module) adds the 0.16/0.17 getter
    checks: ``has_separate_all_gather_group()`` and the AssertionError the
    AG getter raises when the option is off.
    """
    checks: list[dict[str, Any]] = []
    mism: list[dict[str, Any]] = []
    col = layout.resolve_collectives(rank)
    out: dict[str, Any] = {"option": bool(layout.config.create_all_gather_group),
                           "dense_all_gather": col.dense_all_gather.kind,
                           "dense_reduce_scatter": col.dense_reduce_scatter.kind,
                           "expert_all_gather": col.expert_all_gather.kind,
                           "expert_reduce_scatter": col.expert_reduce_scatter.kind}
    for side, base, ag_kind in (("dense", "dp_cp", "dp_cp_ag"), ("expert", "ep_dp", "ep_dp_ag")):
        rs_kind = getattr(col, f"{side}_reduce_scatter").kind
        resolved_kind = getattr(col, f"{side}_all_gather").kind
        if layout.has(ag_kind):
            ag, grp = group_of(ag_kind), group_of(base)
            where = f"{ag_kind} ({layout.desc(ag_kind)})"
            _check(checks, mism, rank, "ag_exists", is_group(ag),
                   f"{where}: this rank has no all-gather group.", kind=ag_kind)
            if not (is_group(ag) and is_group(grp)):
                continue
            distinct = ag is not grp and getattr(ag, "group_name", 1) != getattr(grp, "group_name",
                                                                                 2)
            _check(checks, mism, rank, "ag_distinct", distinct,
                   f"{where}: the all-gather group is the same object/communicator as {base}.",
                   kind=ag_kind)
            a, b = torch_ranks(ag), torch_ranks(grp)
            note = ""
            if sorted(a) != sorted(b) and layout.profile.ag_after_init:
                note = (" (megatron-core >= 0.18 create_all_gather_groups() rebuilds the groups "
                        "with the hard-coded order tp-cp-ep-dp-pp; upstream issue #4261)")
            _check(checks, mism, rank, "ag_same_ranks", sorted(a) == sorted(b),
                   f"{where} has ranks {a} but this rank's {base} group has {b}{note}.",
                   kind=ag_kind, expected=b, actual=a)
            _check(checks, mism, rank, "ag_resolution",
                   resolved_kind == ag_kind and group_of(resolved_kind) is ag,
                   f"the {side} all-gather resolves to {resolved_kind}, not {ag_kind}.",
                   kind=ag_kind)
        else:
            rs = group_of(rs_kind)
            resolved = group_of(resolved_kind)
            if rs is None and resolved is None:
                continue  # e.g. no expert groups on this rank
            _check(checks, mism, rank, "ag_resolution",
                   resolved_kind == rs_kind and resolved is rs and is_group(rs),
                   f"option off: the {side} all-gather resolves to {resolved_kind} but the "
                   f"reduce-scatter runs on {rs_kind}; expected the same group object.",
                   kind=rs_kind)
    if megatron is not None and hasattr(megatron, "has_separate_all_gather_group"):
        # megatron-core 0.16/0.17 (PR #2663).
        on = layout.has("dp_cp_ag")
        _check(checks, mism, rank, "megatron_has_separate_ag",
               bool(megatron.has_separate_all_gather_group()) == on,
               f"has_separate_all_gather_group() is {not on}, expected {on}.")
        pg, err = call_getter(megatron, AG_GETTER_016)
        if on:
            _check(checks, mism, rank, "megatron_ag_getter", pg is group_of("dp_cp_ag"),
                   f"{AG_GETTER_016.label} does not return the AG group ({err}).",
                   kind="dp_cp_ag")
        else:
            _check(checks, mism, rank, "megatron_ag_getter_raises",
                   err is not None and err.startswith("AssertionError"),
                   f"option off: {AG_GETTER_016.label} should raise AssertionError as in "
                   f"Megatron, got {'a group' if pg is not None else err}.")
    out["checks"] = checks
    out["mismatches"] = mism
    out["ok"] = not mism
    return out


# ------------------------------------------------------------------ getters
def call_getter(ps: Any, get: Getter) -> tuple[Any, str | None]:
    """``(group, None)`` from Megatron's getter, or ``(None, "<Error>: reason")``."""
    fn = getattr(ps, get.function, None)
    if fn is None:
        return None, f"AttributeError: parallel_state has no {get.function}()"
    try:
        out = fn(**dict(get.kwargs))
    except AssertionError as exc:
        return None, f"AssertionError: {exc}"
    except TypeError as exc:
        return None, f"TypeError: {exc}"
    if get.index is not None:
        if out is None or get.index >= len(out):
            return None, f"{get.label}: no such group"
        out = out[get.index]
    return out, None


def getter_for(kind: str, ps: Any, mcore: str) -> Callable[[], tuple[Any, str | None]] | None:
    """A zero-argument callable returning ``(group, error)`` for ``kind``, or None."""
    get = getter(kind, mcore)
    return None if get is None else (lambda: call_getter(ps, get))


def compare_getters(ps: Any, layout: Layout, rank: int,
                    expected_objects: Mapping[str, Any] | None = None,
                    extra_groups: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Megatron's getters on this rank against the plan.

    For every kind with a getter: the getter's group has the plan's ranks
    (as sets: torch sorts) or is None where the plan has no group for this
    rank; with ``expected_objects`` (kind -> the object ``new_group`` returned
    for this rank's group) it must be that very object. ``extra_groups`` are
    groups that Megatron does not store (the 0.18+ all-gather groups).
    Megatron's ordered rank lists (``_PIPELINE_GLOBAL_RANKS``...) are compared
    in order. Returns ``{"checked", "no_getter", "mismatches", "groups"}``;
    ``groups`` maps kind -> torch's ranks of the getter's group.
    """
    view = layout.rank(rank)
    mism: list[dict[str, Any]] = []
    checked, no_getter = [], []
    groups: dict[str, Any] = {}
    for kind in layout.kinds:
        m = view.groups.get(kind)
        if extra_groups is not None and kind in extra_groups:
            pg, err = extra_groups[kind], None
            label = f"{kind} (passed in)"
        else:
            get = getter(kind, layout.mcore)
            if get is None:
                no_getter.append(kind)
                continue
            pg, err = call_getter(ps, get)
            label = get.label
        if isinstance(pg, list):  # a rank in several pipeline groups (not in stock layouts)
            pg = pg[0] if pg else None
        checked.append(kind)
        desc = layout.desc(kind)
        if m is None:
            if is_group(pg):
                got = torch_ranks(pg)
                groups[kind] = got
                mism.append(mismatch("getter", rank, f"{label}: the plan has no {kind} group for "
                                     f"this rank, but the getter returns {got}.", kind=kind,
                                     desc=desc, expected=None, actual=got))
            continue
        plan = [int(x) for x in m.ranks]
        if not is_group(pg):
            mism.append(mismatch("getter", rank, f"{label} returns no group ({err or 'None'}); "
                                 f"the plan has {kind} group {m.group} {plan}.", kind=kind,
                                 group=m.group, desc=desc, expected=plan, actual=None))
            continue
        got = torch_ranks(pg)
        groups[kind] = got
        if sorted(got) != sorted(plan):
            mism.append(mismatch("getter", rank, f"{label} returns ranks {got}; the plan's {kind} "
                                 f"group {m.group} is {plan}.", kind=kind, group=m.group,
                                 desc=desc, expected=plan, actual=got))
        elif expected_objects is not None and kind in expected_objects \
                and pg is not expected_objects[kind]:
            mism.append(mismatch("getter_object", rank, f"{label} returns a different group object "
                                 f"from the one created for {kind} group {m.group}.",
                                 kind=kind, group=m.group, desc=desc))
    mism.extend(_order_mismatches(ps, layout, view, rank))
    mism.extend(_alias_mismatches(ps, layout, view, rank))
    return {"checked": checked, "no_getter": no_getter, "mismatches": mism[:MAX_RECORDED],
            "n_mismatches": len(mism), "groups": groups}


def _order_mismatches(ps: Any, layout: Layout, view: RankView, rank: int
                      ) -> list[dict[str, Any]]:
    """Megatron's ordered rank lists (``_PIPELINE_GLOBAL_RANKS``...) against the plan's
    groups of this rank, in order."""
    mism: list[dict[str, Any]] = []
    for kind, name in ordered_rank_globals(layout.mcore).items():
        m = view.groups.get(kind)
        value = getattr(ps, name, None)
        if m is None or value is None:
            continue
        if value and isinstance(value[0], list):
            value = value[0]
        plan = [int(x) for x in m.ranks]
        if [int(x) for x in value] != plan:
            mism.append(mismatch("megatron_order", rank, f"parallel_state.{name} is "
                                 f"{list(value)}, the plan's {kind} group {m.group} in Megatron's "
                                 f"order is {plan}.", kind=kind, group=m.group,
                                 desc=layout.desc(kind), expected=plan, actual=list(value)))
    return mism


def _alias_mismatches(ps: Any, layout: Layout, view: RankView, rank: int
                      ) -> list[dict[str, Any]]:
    """Kinds not built here whose getter must return another kind's group object (reference
    section 7: one optimizer instance aliases the partial groups; 0.19 with GTP 1 aliases
    the GTP-merged DP groups)."""
    table = megatron_getters(layout.mcore)
    mism: list[dict[str, Any]] = []
    for kind, get in table.items():
        if kind in layout.kinds or get.alias is None or get.alias not in view.groups:
            continue
        pg, _ = call_getter(ps, get)
        target, _ = call_getter(ps, table[get.alias])
        if pg is not target:
            mism.append(mismatch("alias", rank, f"{get.label} should return the {get.alias} "
                                 f"group object itself (the plan builds no {kind} group).",
                                 kind=get.alias))
    return mism


def megatron_communicators(ps: Any) -> int | None:
    """Groups this rank belongs to, as Megatron tracks them (``_global_process_group_list``)."""
    lst = getattr(ps, "_global_process_group_list", None)
    if lst is None:
        return None
    return sum(1 for g in lst if g is not None)
