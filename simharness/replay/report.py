"""The replay report: every rank's results merged, and its text summary (pure, no torch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..layout import Layout
from ..live.report import (  # noqa: F401 - LIVE_SCHEMA and the live report re-exported
    LIVE_SCHEMA,
    _ranks,
    build_live_report,
    live_summary_lines,
    merge_mismatches,
)
from .options import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_MISMATCH,
    EXIT_OK,
    REPORT_SCHEMA,
    ReplayOptions,
)
from .plan_checks import compare_with_config, partition_mismatches

PROBE_MODES = ("rs_only", "ag_only", "same", "separate")  # see probe.py
PHASE_KEYS = (("startup_s", "start", "init"), ("group_creation_s", "init", "create"),
              ("verification_s", "create", "verify"), ("overlap_probe_s", "verify", "probe"))


def plan_section(layout: Layout) -> dict[str, Any]:
    vs = compare_with_config(layout)
    return {"partition": partition_mismatches(layout), "vs_config": vs,
            "ok": not vs["mismatches"] and not partition_mismatches(layout)}


def _timings(ranks: Sequence[dict[str, Any]], launch_t0: float | None,
             t_end: float | None) -> dict[str, Any]:
    T = [r["timings"] for r in ranks]
    t0 = launch_t0 if launch_t0 is not None else min(t["start"] for t in T)
    ends = {p: max(t[p] for t in T) for p in ("init", "create", "verify", "probe")}
    ends["start"] = t0
    out = {}
    for name, a, b in PHASE_KEYS:
        out[name] = round(max(0.0, ends[b] - ends[a]), 4)
    if t_end is not None:
        out["results_s"] = round(max(0.0, t_end - ends["probe"]), 4)
        out["total_s"] = round(t_end - t0, 4)
    return out


def build_report(layout: Layout, opts: ReplayOptions, gathered: Sequence[dict] | None, *,
                 failure: dict[str, Any] | None = None, launch_t0: float | None = None,
                 t_end: float | None = None, interrupted: bool = False,
                 plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON report. ``gathered``: every rank's result (None when the replay failed)."""
    cfg = layout.config
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "engine": opts.engine, "backend": opts.backend, "backend_map": opts.backend_map(),
        "world_size": layout.world_size, "mcore": layout.mcore,
        "config": layout.summary(),
        "options": opts.to_dict(),
        "plan_checks": plan if plan is not None else plan_section(layout),
    }
    if gathered:
        ranks = sorted(gathered, key=lambda r: r["rank"])
        mism = merge_mismatches(r["mismatches"] for r in ranks)
        by_kind: dict[str, dict[str, Any]] = {}
        for r in ranks:
            for kind, (n, ok) in r["by_kind"].items():
                e = by_kind.setdefault(kind, {"memberships": 0, "verified": 0})
                e["memberships"] += n
                e["verified"] += ok
        for kind, e in by_kind.items():
            if layout.has(kind):
                e.update(desc=layout.desc(kind), backend=layout.backend(kind),
                         groups=layout.source(kind).n_groups,
                         group_size=layout.source(kind).group_size)
        comm = [{"rank": r["rank"], **r["communicators"]} for r in ranks]
        totals = [c["total"] for c in comm]
        ag_ranks = [r["all_gather"] for r in ranks]
        ag_fail = merge_mismatches(a["mismatches"] for a in ag_ranks)
        checks: dict[str, list[int]] = {}
        for a in ag_ranks:
            for c in a["checks"]:
                s = checks.setdefault(c["name"], [0, 0])
                s[0] += 1
                s[1] += bool(c["ok"])
        report.update({
            "groups": {
                "new_group_calls": ranks[0]["new_group_calls"],
                "memberships": sum(r["memberships"] for r in ranks),
                "verified": sum(r["verified"] for r in ranks),
                "collectives": sum(r["collectives"] for r in ranks),
                "by_kind": by_kind,
            },
            "mismatches": mism + ag_fail,
            "n_mismatches": sum(r["n_mismatches"] + len(r["all_gather"]["mismatches"])
                                for r in ranks),
            "all_gather": {
                "option": bool(cfg.create_all_gather_group),
                "dense": {"reduce_scatter": ag_ranks[0]["dense_reduce_scatter"],
                          "all_gather": ag_ranks[0]["dense_all_gather"]},
                "expert": {"reduce_scatter": ag_ranks[0]["expert_reduce_scatter"],
                           "all_gather": ag_ranks[0]["expert_all_gather"]},
                "checks": {k: {"ranks": v[0], "ok": v[1]} for k, v in checks.items()},
                "ok": not ag_fail,
            },
            "communicators_per_rank": {
                "min": min(totals), "max": max(totals),
                "plan_nccl_max": max(c["plan_nccl"] for c in comm),
                "plan_gloo_max": max(c["plan_gloo"] for c in comm),
                "by_rank": comm,
            },
            "overlap": aggregate_probe([r.get("overlap") for r in ranks]),
            "timings": _timings(ranks, launch_t0, t_end),
            "ranks": [{k: r.get(k) for k in ("rank", "host", "pid", "memberships", "verified",
                                             "n_mismatches")} for r in ranks],
        })
        meg = [m for r in ranks if (m := r.get("megatron"))]
        if meg:
            report["megatron"] = {
                "version": meg[0].get("version"), "kwargs": meg[0].get("kwargs"),
                "ag_call": meg[0].get("ag_call"),
                "creation_order_matches": all(m.get("aligned") for m in meg),
                "getters_checked_per_rank": meg[0].get("getters_checked"),
                "kinds_without_getter": meg[0].get("no_getter"),
                "communicators_per_rank": sorted({m.get("communicators") for m in meg},
                                                 key=lambda x: -1 if x is None else x),
                "verify_live_ok": all(m.get("verify_live_ok") for m in meg),
            }
    report["failure"] = failure
    if interrupted:
        status, code = "interrupted", EXIT_INTERRUPTED
    elif failure is not None or not gathered:
        status, code = "failed", EXIT_FAILED
    elif report["mismatches"] or not report["plan_checks"]["ok"]:
        status, code = "mismatch", EXIT_MISMATCH
    else:
        status, code = "matched", EXIT_OK
    report["ok"] = code == EXIT_OK
    report["status"] = status
    report["exit_code"] = code
    return report


def aggregate_probe(per_rank: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Rank 0's view: per mode, the slowest rank's median; the separate/same ratio."""
    runs = [p for p in per_rank if p and "median_s" in p]
    if not runs:
        skipped = [p for p in per_rank if p and "skipped" in p]
        return {"skipped": skipped[0]["skipped"]} if skipped else None
    med = {m: max(p["median_s"][m] for p in runs) for m in PROBE_MODES}
    out = {"ranks": len(runs), "group_size": runs[0]["group_size"], "bytes": runs[0]["bytes"],
           "iters": runs[0]["iters"], "ag_group": runs[0]["ag_group"],
           "seconds": med,
           "ratio_separate_over_same": med["separate"] / med["same"] if med["same"] else None,
           "serial_s": med["rs_only"] + med["ag_only"],
           "ideal_overlap_s": max(med["rs_only"], med["ag_only"]),
           "values_ok": all(p["values_ok"] for p in runs)}
    return out


# ------------------------------------------------------------------- summary
def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:.2f} ms"


def summary_lines(report: dict[str, Any], *, max_items: int = 12) -> list[str]:
    """The text summary printed by ``simharness replay`` (and rank 0 under torchrun)."""
    cfg = report["config"]
    lines = []
    mapping = ""
    if report["backend"] == "gloo":
        mapping = " (nccl groups created as gloo)"
    lines.append(
        f"replay: world {report['world_size']}, engine {report['engine']}, backend "
        f"{report['backend']}{mapping}, mcore {report['mcore']}, tp {cfg['tp']} pp {cfg['pp']} "
        f"cp {cfg['cp']} dp {cfg['dp']} ep {cfg['ep']} etp {cfg['etp']}, "
        f"create_all_gather_group {'on' if cfg['create_all_gather_group'] else 'off'}")
    if "megatron" in report:
        m = report["megatron"]
        order = "matches" if m["creation_order_matches"] else "DIFFERS from"
        lines.append(f"megatron-core {m['version']}: initialize_model_parallel"
                     + (f" + {m['ag_call']}" if m.get("ag_call") else "")
                     + f"; creation order {order} the plan; {m['getters_checked_per_rank']} "
                       f"getters checked per rank; verify_live "
                       f"{'ok' if m.get('verify_live_ok') else 'FAILED'}")
    g = report.get("groups")
    if g:
        lines.append(f"groups: {g['new_group_calls']} new_group calls; {g['verified']}/"
                     f"{g['memberships']} memberships verified on {report['world_size']} ranks "
                     f"(ranks, group rank and one all_gather each)")
        ag = report["all_gather"]
        d = ag["dense"]
        if ag["option"]:
            state = "distinct communicator, identical ranks" if ag["ok"] else "CHECKS FAILED"
            lines.append(f"all-gather: dense {d['all_gather']} vs reduce-scatter "
                         f"{d['reduce_scatter']}: {state}")
        else:
            state = ("resolves to the reduce-scatter group object itself" if ag["ok"]
                     else "CHECKS FAILED")
            lines.append(f"all-gather: option off, dense all-gather {state} "
                         f"({d['reduce_scatter']})")
        c = report["communicators_per_rank"]
        span = f"{c['min']}" if c["min"] == c["max"] else f"{c['min']}-{c['max']}"
        lines.append(f"communicators per rank: {span} (plan: up to {c['plan_nccl_max']} nccl + "
                     f"{c['plan_gloo_max']} gloo)")
        ov = report.get("overlap")
        if ov and "seconds" in ov:
            s = ov["seconds"]
            ratio = ov["ratio_separate_over_same"]
            lines.append(
                f"overlap probe ({report['backend']}, {ov['bytes'] / 2**20:.2f} MiB, "
                f"{ov['iters']} iters, group of {ov['group_size']}; slowest rank's median): "
                f"RS+AG on one group {_ms(s['same'])}, AG on {ov['ag_group']} "
                f"{_ms(s['separate'])}, ratio {ratio:.2f}; RS alone {_ms(s['rs_only'])}, AG "
                f"alone {_ms(s['ag_only'])}")
        elif ov and "skipped" in ov:
            lines.append(f"overlap probe: skipped ({ov['skipped']})")
        t = report["timings"]
        parts = [f"start-up {t['startup_s']:.2f} s", f"group creation "
                 f"{t['group_creation_s']:.2f} s", f"verification {t['verification_s']:.2f} s",
                 f"overlap probe {t['overlap_probe_s']:.2f} s"]
        if "total_s" in t:
            parts.append(f"total {t['total_s']:.2f} s")
        lines.append("timings: " + ", ".join(parts))
        mism = report["mismatches"]
        if mism:
            lines.append(f"mismatches: {len(mism)} distinct ({report['n_mismatches']} on all "
                         f"ranks)")
            for m in mism[:max_items]:
                lines.append(f"  [{m['check']}] {m['message']} (ranks {_ranks(m['ranks'])})")
            if len(mism) > max_items:
                lines.append(f"  ... {len(mism) - max_items} more in the JSON report")
    pc = report["plan_checks"]
    vs = pc["vs_config"]
    problems = pc["partition"] + vs.get("mismatches", [])
    if problems:
        lines.append(f"plan vs config: {len(problems)} difference(s) between the plan and what "
                     f"its config builds (mcore {report['mcore']})")
        for p in problems[:max_items]:
            lines.append(f"  [{p['check']}] {p['message']}")
    else:
        lines.append("plan vs config: the plan's groups equal what its config builds")
    f = report.get("failure")
    if f:
        lines.append(f"FAILED: {f['message']}")
    verdict = {"matched": "MATCHED", "mismatch": "MISMATCH", "failed": "FAILED",
               "interrupted": "INTERRUPTED"}[report["status"]]
    lines.append(f"result: {verdict} (exit {report['exit_code']})")
    return lines


