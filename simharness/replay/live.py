"""``verify_live``: compare a running job's Megatron groups with the simulated layout.

Call it on every rank right after ``initialize_model_parallel`` (and, on
megatron-core 0.18+, after ``create_all_gather_groups`` when the option is
on)::

    from megatron.core import parallel_state
    import simharness

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2, ...)
    layout = simharness.build_layout(cfg, mcore="0.16")
    report = simharness.verify_live(layout)        # rank 0 prints one report
    assert report["ok"]

Every rank compares Megatron's getters with the plan (ranks as sets: torch
sorts them; Megatron's ordered lists such as ``_PIPELINE_GLOBAL_RANKS`` in
order), runs the all-gather group checks, and optionally one all-gather per
group (``collectives=True``: it creates the NCCL communicators, which Megatron
otherwise creates lazily). The results travel to every rank with
``all_gather_object``; every rank returns the same report dict.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from ..errors import SimharnessError
from ..layout import Layout


def verify_live(layout: Layout, *, all_gather_groups: tuple[Any, Any] | None = None,
                pg_collection: Any = None, collectives: bool = False,
                print_report: bool = True, report_path: str | None = None,
                file: TextIO | None = None) -> dict[str, Any]:
    """Check this job's Megatron process groups against ``layout``; returns the report.

    ``all_gather_groups``: the ``(dp_cp_ag, expt_dp_ag)`` pair that
    megatron-core 0.18+ ``create_all_gather_groups()`` returned (or pass the
    ``pg_collection`` holding them); 0.16/0.17 keep the group in
    ``parallel_state`` and need neither. Must be called on every rank (it runs
    collectives). ``report["ok"]`` is True when everything matched.
    """
    import torch
    import torch.distributed as dist

    from .megatron_engine import import_parallel_state, installed_version, profile_for_version
    from .report import build_live_report, live_summary_lines
    from .verify import (
        all_gather_checks, all_gather_ranks, compare_getters, getter_for, is_group,
        megatron_communicators, mismatch,
    )

    if not dist.is_available() or not dist.is_initialized():
        raise SimharnessError("verify_live runs inside a job: call it after "
                              "torch.distributed.init_process_group() and Megatron's "
                              "initialize_model_parallel(), on every rank.")
    try:
        ps = import_parallel_state()
    except Exception as exc:  # noqa: BLE001
        raise SimharnessError(f"verify_live needs megatron-core: {type(exc).__name__}: "
                              f"{exc}") from None
    if not ps.model_parallel_is_initialized():
        raise SimharnessError("Megatron's parallel state is not initialised: call "
                              "parallel_state.initialize_model_parallel(...) first.")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != layout.world_size or layout.rank_offset:
        raise SimharnessError(
            f"the layout is for world {layout.world_size} (rank_offset {layout.rank_offset}), "
            f"this job has {world} ranks; build the layout with world_size={world}.")
    notes = []
    ver = installed_version()
    if ver is not None:
        try:
            profile = profile_for_version(ver)
        except SimharnessError as exc:
            profile = None
            notes.append(str(exc))
        if profile is not None and profile != layout.mcore:
            notes.append(f"megatron-core {ver} follows profile {profile}; the layout was built "
                         f"for {layout.mcore} (rebuild it with mcore={profile!r}).")
    extra: dict[str, Any] = {}
    if not hasattr(ps, "has_separate_all_gather_group"):  # 0.18+: the caller owns the AG groups
        pair = all_gather_groups
        if pair is None and pg_collection is not None:
            pair = (getattr(pg_collection, "dp_cp_ag", None),
                    getattr(pg_collection, "expt_dp_ag", None))
        if pair is not None:
            for kind, pg in zip(("dp_cp_ag", "ep_dp_ag"), pair):
                if layout.has(kind):
                    extra[kind] = pg
        elif layout.has("dp_cp_ag"):
            notes.append("megatron-core 0.18+ keeps no all-gather group in parallel_state: pass "
                         "all_gather_groups=create_all_gather_groups(...) or pg_collection=.")

    getters = compare_getters(ps, layout, rank, extra_groups=extra)
    mism = list(getters["mismatches"])

    def group_of(kind):
        if kind in extra:
            return extra[kind] if is_group(extra[kind]) else None
        get = getter_for(kind, ps, layout.mcore)
        if get is None:
            return None
        pg, _ = get()
        return pg if is_group(pg) else None

    ag = all_gather_checks(layout, rank, group_of, megatron=ps)
    n_coll = 0
    if collectives:
        seen = set()
        works = []
        for kind in layout.kinds:
            pg = group_of(kind)
            if pg is None or id(pg) in seen:
                continue
            seen.add(id(pg))
            backend = str(dist.get_backend(pg)).lower()
            device = (torch.device("cpu") if "gloo" in backend else
                      torch.device("cuda", torch.cuda.current_device()))
            work, out = all_gather_ranks(pg, rank, device)
            works.append((kind, pg, work, out))
        for kind, pg, work, out in works:
            work.wait()
            got = [int(x) for x in out.tolist()]
            want = sorted(int(r) for r in dist.get_process_group_ranks(pg))
            n_coll += 1
            if got != want:
                mism.append(mismatch("collective", rank, f"{kind}: all_gather of global ranks "
                                     f"returned {got}, expected {want}.", kind=kind,
                                     expected=want, actual=got))
    view = layout.rank(rank)
    result = {"rank": rank, "checked": getters["checked"], "no_getter": getters["no_getter"],
              "mismatches": mism, "all_gather": ag, "collectives": n_coll,
              "communicators": {"megatron": megatron_communicators(ps),
                                "plan": view.communicators}}
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, result)
    report = build_live_report(layout, gathered, megatron_version=ver, notes=notes)
    if rank == 0:
        if print_report:
            stream = file or sys.stdout
            for line in live_summary_lines(report):
                print(line, file=stream)
            stream.flush()
        if report_path:
            with open(report_path, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=2)
    return report
