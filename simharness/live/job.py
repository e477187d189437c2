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
from collections.abc import Callable
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
    import torch.distributed as dist

    from .report import build_live_report
    from .verify import all_gather_checks, compare_getters, megatron_communicators

    ps, rank, world = _job_state(layout)
    ver, notes = _version_notes(layout)
    extra, note = _all_gather_groups(ps, layout, all_gather_groups, pg_collection)
    notes.extend(note)

    getters = compare_getters(ps, layout, rank, extra_groups=extra)
    mism = list(getters["mismatches"])
    group_of = _group_of(ps, layout, extra)
    ag = all_gather_checks(layout, rank, group_of, megatron=ps)
    n_coll = 0
    if collectives:
        n_coll, bad = _one_all_gather_per_group(layout, rank, group_of)
        mism.extend(bad)
    view = layout.rank(rank)
    result = {"rank": rank, "checked": getters["checked"], "no_getter": getters["no_getter"],
              "mismatches": mism, "all_gather": ag, "collectives": n_coll,
              "communicators": {"megatron": megatron_communicators(ps),
                                "plan": view.communicators}}
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, result)
    report = build_live_report(layout, gathered, megatron_version=ver, notes=notes)
    if rank == 0:
        _emit(report, print_report=print_report, report_path=report_path, file=file)
    return report


def _job_state(layout: Layout) -> tuple[Any, int, int]:
    """``(parallel_state, rank, world)`` of the running job; a :class:`SimharnessError` when
    torch.distributed or Megatron is not initialised or the world differs from ``layout``."""
    import torch.distributed as dist

    from ..mcore import import_parallel_state

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
    return ps, rank, world


def _version_notes(layout: Layout) -> tuple[str | None, list[str]]:
    """The installed megatron-core version and a note when its profile is not the layout's."""
    from ..mcore import installed_version, profile_for_version

    notes: list[str] = []
    ver = installed_version()
    if ver is None:
        return None, notes
    try:
        profile = profile_for_version(ver)
    except SimharnessError as exc:
        return ver, [str(exc)]
    if profile != layout.mcore:
        notes.append(f"megatron-core {ver} follows profile {profile}; the layout was built "
                     f"for {layout.mcore} (rebuild it with mcore={profile!r}).")
    return ver, notes


def _all_gather_groups(ps: Any, layout: Layout, pair: tuple[Any, Any] | None,
                       pg_collection: Any) -> tuple[dict[str, Any], list[str]]:
    """Kind -> the caller's all-gather group (0.18+, where ``parallel_state`` keeps none),
    and a note when the layout has one but the caller passed neither source."""
    if hasattr(ps, "has_separate_all_gather_group"):  # 0.16/0.17: parallel_state has it
        return {}, []
    if pair is None and pg_collection is not None:
        pair = (getattr(pg_collection, "dp_cp_ag", None),
                getattr(pg_collection, "expt_dp_ag", None))
    if pair is not None:
        kinds = ("dp_cp_ag", "ep_dp_ag")
        return {k: pg for k, pg in zip(kinds, pair, strict=True) if layout.has(k)}, []
    if layout.has("dp_cp_ag"):
        return {}, ["megatron-core 0.18+ keeps no all-gather group in parallel_state: pass "
                    "all_gather_groups=create_all_gather_groups(...) or pg_collection=."]
    return {}, []


def _group_of(ps: Any, layout: Layout, extra: dict[str, Any]) -> Callable[[str], Any]:
    """``group_of(kind)``: the caller's all-gather group, else Megatron's getter's group;
    None when this rank has no such group (or no getter returns it)."""
    from .verify import getter_for, is_group

    def group_of(kind: str) -> Any:
        if kind in extra:
            return extra[kind] if is_group(extra[kind]) else None
        get = getter_for(kind, ps, layout.mcore)
        if get is None:
            return None
        pg, _ = get()
        return pg if is_group(pg) else None

    return group_of


def _one_all_gather_per_group(layout: Layout, rank: int, group_of: Callable[[str], Any]
                              ) -> tuple[int, list[dict]]:
    """One all-gather of the global ranks on each distinct group this rank is in (issued
    together, then waited for): ``(collectives run, mismatches)``."""
    import torch
    import torch.distributed as dist

    from .verify import all_gather_ranks, mismatch

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
    mism = []
    for kind, pg, work, out in works:
        work.wait()
        got = [int(x) for x in out.tolist()]
        want = sorted(int(r) for r in dist.get_process_group_ranks(pg))
        if got != want:
            mism.append(mismatch("collective", rank, f"{kind}: all_gather of global ranks "
                                 f"returned {got}, expected {want}.", kind=kind,
                                 expected=want, actual=got))
    return len(works), mism


def _emit(report: dict[str, Any], *, print_report: bool, report_path: str | None,
          file: TextIO | None) -> None:
    """Rank 0: the summary on ``file`` (default stdout) and the JSON report at ``report_path``."""
    from .report import live_summary_lines

    if print_report:
        stream = file or sys.stdout
        for line in live_summary_lines(report):
            print(line, file=stream)
        stream.flush()
    if report_path:
        with open(report_path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
