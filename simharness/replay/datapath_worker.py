"""One rank of the data-path replay (torch): Megatron's distributed-optimizer collectives.

Run by the forked replay ranks (``entry`` of :func:`simharness.replay.controller.run_local`)
for :func:`simharness.replay.datapath.replay_data`. Per variant (see
:func:`~simharness.replay.datapath.variants`) and step:

1. backward, buckets in reverse: ``grad = grad_term(rank) + params``, and an
   asynchronous reduce-scatter of it on the bucket's reduce-scatter group;
2. as each reduce-scatter completes: SGD on this rank's shard, then an
   asynchronous all-gather of ``(parameter bits, tag)`` pairs on the
   all-gather group, while the remaining reduce-scatters are still in flight;
3. forward order: wait for each all-gather, read which rank's shard landed in
   each slot (the tags), and take the gathered parameters.

What each rank saw (tags, reduced shards, final parameters, step times) goes
to rank 0 through ``all_gather_object``; the parent compares it with the
single-process reference.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..layout import Layout
from ..live.verify import torch_ranks
from .datapath import (
    Bucket,
    DataPathOptions,
    buckets_of,
    encode_values,
    grad_term,
    initial_params,
    pack_tag,
    reference_layout,
    step_lr_exponent,
    unpack_tag,
    variants,
)
from .options import ReplayOptions
from .worker import Progress, ReplayFault, _fault, _short, gather_results, init_rank

TWIN_DESC = "SIMHARNESS_DATAPATH_AG_TWIN"


def _wait(work, rank: int, progress: Progress, index: int, what: dict[str, Any]) -> None:
    """``work.wait()``; a failure names the collective, its group and the ranks missing."""
    try:
        work.wait()
    except Exception as exc:  # noqa: BLE001
        missing = progress.not_arrived(what["ranks"], "verify", index)
        raise ReplayFault(f"{what['op']} on {what['kind']} {what['ranks']} ({what['where']}) "
                          f"did not complete on rank {rank}: {_short(exc)}",
                          {"phase": "verify", "index": index, "missing_ranks": missing,
                           **what}) from exc


def create_groups(layout: Layout, kinds: set[str], twins: set[str], rank: int,
                  timeout: float, backend_map: dict[str, str], progress: Progress
                  ) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The plan's groups of ``kinds`` (creation order) and twins of ``twins``.

    Every rank calls ``new_group`` for every group, as torch requires.
    Returns ``(kind -> this rank's group, rs kind -> this rank's twin, calls)``.
    """
    own: dict[str, Any] = {}
    twin: dict[str, Any] = {}
    calls = 0
    td = timedelta(seconds=timeout)
    todo = [(gc.kind, list(gc.ranks), backend_map.get(gc.backend, "gloo"), gc.desc, own)
            for gc in layout.creation_order if gc.kind in kinds]
    for kind in sorted(twins):
        todo += [(kind, row, backend_map["nccl"], TWIN_DESC, twin)
                 for row in layout.groups(kind).tolist()]
    for kind, ranks, backend, desc, into in todo:
        progress.set("create", calls)
        try:
            pg = dist.new_group(ranks=ranks, backend=backend, timeout=td, group_desc=desc)
        except Exception as exc:  # noqa: BLE001
            raise ReplayFault(
                f"creating {kind} group {ranks} ({desc}) failed on rank {rank}: {_short(exc)}",
                {"phase": "create", "index": calls, "kind": kind, "ranks": ranks, "desc": desc,
                 "op": "new_group", "missing_ranks": progress.not_arrived(
                     range(layout.world_size), "create", calls)}) from exc
        calls += 1
        if rank in ranks:
            into[kind] = pg
    return own, twin, calls


def _slot_tags(tags: np.ndarray) -> list[list[int]]:
    """Per slot: ``[src, shard, bucket, step, mixed]`` of its first element; ``mixed`` 1
    when the slot's elements do not all carry the same tag."""
    out = []
    for row in tags:
        mixed = int(bool((row != row[0]).any()))
        out.append([*unpack_tag(int(row[0])), mixed])
    return out


def run_variant(buckets: list[Bucket], groups: dict[str, dict[int, Any]], opts: DataPathOptions,
                rank: int, device: torch.device, progress: Progress,
                index0: int) -> dict[str, Any]:
    """Several optimizer steps of synthetic buckets; what this rank saw."""
    S = opts.shard_numel
    f64 = torch.float64
    state = []
    for b in buckets:
        rs_pg, (ag_pg, ag_label) = groups["rs"][b.number], groups["ag"][b.number]
        n = len(b.rs_ranks)
        j = b.shard_of(rank)
        full = torch.from_numpy(initial_params(b.partition, b.number, S * n)).to(device)
        state.append({"b": b, "rs": rs_pg, "ag": ag_pg, "ag_label": ag_label, "n": n, "j": j,
                      "full": full, "main": full[j * S:(j + 1) * S].clone(),
                      "lr": 2.0 ** -step_lr_exponent(n),
                      "n_ag": dist.get_world_size(ag_pg), "ag_ranks": torch_ranks(ag_pg),
                      "tags": [], "reduced": []})
    step_s = []
    world = list(range(dist.get_world_size()))
    for t in range(opts.steps):
        index = index0 + t
        progress.set("verify", index)
        _wait(dist.barrier(async_op=True), rank, progress, index,  # align the timed steps
              {"op": "barrier", "kind": "world", "ranks": world, "where": f"before step {t}"})
        t0 = time.perf_counter()
        rs_work = []
        for st in reversed(state):  # backward: last bucket first
            b = st["b"]
            g = torch.from_numpy(grad_term(rank, t, b.number, S * st["n"])).to(device)
            g += st["full"]
            out = torch.empty(S, dtype=f64, device=device)
            w = dist.reduce_scatter_tensor(out, g, group=st["rs"], async_op=True)
            rs_work.append((st, w, out))
        ag_work = []
        for st, w, out in rs_work:
            b = st["b"]
            _wait(w, rank, progress, index, {"op": "reduce_scatter", "kind": b.rs_kind,
                                             "ranks": list(b.rs_ranks),
                                             "where": f"{b.side} bucket {b.index}, step {t}"})
            st["reduced"].append(encode_values(out.cpu().numpy()))
            st["main"] -= st["lr"] * out
            tag = torch.full((S,), pack_tag(rank, st["j"], b.number, t), dtype=torch.int64,
                             device=device)
            payload = torch.stack([st["main"].view(torch.int64), tag], dim=1).reshape(-1)
            buf = torch.empty(st["n_ag"] * S * 2, dtype=torch.int64, device=device)
            w2 = dist.all_gather_into_tensor(buf, payload, group=st["ag"], async_op=True)
            ag_work.append((st, w2, buf))
        for st, w2, buf in sorted(ag_work, key=lambda x: x[0]["b"].number):  # forward order
            b = st["b"]
            _wait(w2, rank, progress, index, {"op": "all_gather", "kind": st["ag_label"],
                                              "ranks": st["ag_ranks"],
                                              "where": f"{b.side} bucket {b.index}, step {t}"})
            pairs = buf.view(st["n_ag"], S, 2)
            st["tags"].append(_slot_tags(pairs[:, :, 1].cpu().numpy()))
            st["full"] = pairs[:, :, 0].reshape(-1).view(f64).clone()
        step_s.append(time.perf_counter() - t0)
    return {"step_s": step_s,
            "buckets": [{"tags": st["tags"], "reduced": st["reduced"],
                         "final": encode_values(st["full"].cpu().numpy()),
                         "ag_ranks": st["ag_ranks"]} for st in state]}


def run_datapath_rank(layout: Layout, ropts: ReplayOptions, *, rank: int, world_size: int,
                      init: Callable[[], None], store: Any = None,
                      extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The Megatron data-path replay on this rank; every rank's result (on every rank)."""
    return run_with(megatron_body, layout, ropts, rank=rank, world_size=world_size, init=init,
                    store=store, extra=extra)


def run_with(body: Callable[..., dict[str, Any]], layout: Layout, ropts: ReplayOptions, *,
             rank: int, world_size: int, init: Callable[[], None], store: Any = None,
             extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Initialise, run ``body(layout, opts, ropts, rank, device, progress)``, gather the
    results of every rank (faults injected at ``init``/``create``/``verify``/``gather``)."""
    opts = DataPathOptions.from_dict((extra or {})["datapath"])
    t_start = time.time()
    progress = init_rank(ropts, rank, world_size, init, store)
    device = (torch.device("cuda", torch.cuda.current_device()) if ropts.backend == "nccl"
              else torch.device("cpu"))
    progress.set("create", 0)
    _fault(ropts.fault_spec, rank, "create")
    t_init = time.time()
    result: dict[str, Any] = {"rank": rank}
    result.update(body(layout, opts, ropts, rank, device, progress))
    result["phase_s"] = {"init": round(t_init - t_start, 3),
                         "body": round(time.time() - t_init, 3)}
    return gather_results(result, ropts, rank, world_size, progress)


def megatron_body(layout: Layout, opts: DataPathOptions, ropts: ReplayOptions, rank: int,
                  device: torch.device, progress: Progress) -> dict[str, Any]:
    """Megatron's buckets under both variants (groups created first)."""
    refl = reference_layout(layout)
    buckets = buckets_of(layout, rank, opts, refl)
    vars_ = variants(layout)
    kinds, twins = set(), set()
    for v in vars_:
        for b in buckets:
            kinds.add(b.rs_kind)
            if v.ag[b.side] == "plan":
                kinds.add(b.ag_kind)
            elif v.ag[b.side] == "twin":
                twins.add(b.rs_kind)
    own, twin, calls = create_groups(layout, kinds, twins, rank, ropts.timeout,
                                     ropts.backend_map(), progress)
    progress.set("verify", 0)
    _fault(ropts.fault_spec, rank, "verify")
    out: dict[str, Any] = {"variants": {}, "groups_created": calls}
    for vi, v in enumerate(vars_):
        groups: dict[str, dict[int, Any]] = {"rs": {}, "ag": {}}
        for b in buckets:
            groups["rs"][b.number] = own[b.rs_kind]
            how = v.ag[b.side]
            groups["ag"][b.number] = {"rs": (own[b.rs_kind], b.rs_kind),
                                      "plan": (own.get(b.ag_kind), b.ag_kind),
                                      "twin": (twin.get(b.rs_kind), f"twin of {b.rs_kind}")}[how]
        out["variants"][v.name] = run_variant(buckets, groups, opts, rank, device, progress,
                                              1 + vi * opts.steps)
    return out
