"""One rank of the FSDP2 data-path replay (torch): ``fully_shard`` on the DP-with-CP group.

A two-layer bias-free float64 model (:data:`~simharness.replay.datapath.FSDP_DIMS`)
with integer weights is sharded with ``fully_shard`` over this rank's
``dp_cp`` group (``DeviceMesh.from_group``) and trained for a few SGD steps
twice in one launch:

* ``shared``: FSDP2's default, the gradient reduce-scatter on the shard
  group that also runs the parameter all-gathers (one communicator);
* ``separate``: after ``set_separate_reduce_scatter_group()`` (torch 2.13),
  the reduce-scatter on a group FSDP2 creates from the shard group's ranks.

FSDP2 builds that group itself from the mesh (``new_group(shard ranks,
use_local_synchronization=True)``), so no plan can misorder it: the replay
checks that it is a distinct group with the shard group's ranks, and that the
weights are bit-identical to the single-process reference either way.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - fully_shard imports it lazily: once in the helper, not per rank
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

from ..layout import Layout
from ..live.verify import torch_ranks
from .datapath import (
    FSDP_DIMS,
    FSDP_LR_EXP,
    SEPARATE,
    SHARED,
    DataPathOptions,
    encode_values,
    fsdp_batch,
    fsdp_weights,
    reference_layout,
    replicas_of,
)
from .datapath_worker import run_with
from .options import ReplayOptions
from .worker import Progress, ReplayFault, _fault, _short


def run_fsdp_datapath_rank(layout: Layout, ropts: ReplayOptions, *, rank: int, world_size: int,
                           init, store: Any = None,
                           extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The FSDP2 data-path replay on this rank (the launcher's entry)."""
    return run_with(fsdp_body, layout, ropts, rank=rank, world_size=world_size, init=init,
                    store=store, extra=extra)


def _model(partition: int, device: torch.device) -> nn.Sequential:
    """The two float64 layers with the reference's integer weights."""
    d_in, d_h, d_out = FSDP_DIMS
    layers = [nn.Linear(d_in, d_h, bias=False), nn.Linear(d_h, d_out, bias=False)]
    for layer, w in zip(layers, fsdp_weights(partition), strict=True):
        layer.weight = nn.Parameter(torch.from_numpy(w))
    return nn.Sequential(*layers).to(device)


def _rs_group_info(model: nn.Module) -> dict[str, Any]:
    """The reduce-scatter and shard groups FSDP2 uses (its private state; torch 2.13)."""
    group = model._get_fsdp_state()._fsdp_param_group  # type: ignore[operator]
    rs = group._reduce_scatter_process_group
    shard = group.mesh_info.shard_process_group
    return {"separate": rs is not shard, "ranks": torch_ranks(rs),
            "shard_ranks": torch_ranks(shard)}


def fsdp_body(layout: Layout, opts: DataPathOptions, ropts: ReplayOptions, rank: int,
              device: torch.device, progress: Progress) -> dict[str, Any]:
    """Both variants of FSDP2 on this rank's ``dp_cp`` group."""
    refl = reference_layout(layout)
    partition = replicas_of(refl, "dp_cp", rank).group
    mine: Any = None
    timeout = timedelta(seconds=ropts.timeout)
    backend = ropts.backend_map()["nccl"]
    for i, gc in enumerate(gc for gc in layout.creation_order if gc.kind == "dp_cp"):
        progress.set("create", i)
        pg = dist.new_group(ranks=list(gc.ranks), backend=backend, timeout=timeout,
                            group_desc=gc.desc)
        if rank in gc.ranks:
            mine = pg
    members = torch_ranks(mine)
    progress.set("verify", 0)
    _fault(ropts.fault_spec, rank, "verify")
    mesh = DeviceMesh.from_group(mine, device.type)
    out: dict[str, Any] = {"variants": {}, "groups_created": i + 1}
    for vi, name in enumerate((SHARED, SEPARATE)):
        model: Any = _model(partition, device)  # an FSDPModule once sharded
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        for layer in model:  # per FSDP module (not recursive): sum, as the reference does
            layer.set_gradient_divide_factor(1.0)
        if name == SEPARATE:
            model.set_separate_reduce_scatter_group(True)
        opt = torch.optim.SGD(model.parameters(), lr=2.0 ** -FSDP_LR_EXP)
        step_s = []
        for t in range(opts.steps):
            index = 1 + vi * opts.steps + t
            progress.set("verify", index)
            x, c = (torch.from_numpy(a).to(device) for a in fsdp_batch(rank, t))
            try:
                dist.barrier(group=mine)
                t0 = time.perf_counter()
                loss = (model(x) * c).sum()
                loss.backward()
                opt.step()
                opt.zero_grad()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            except Exception as exc:  # noqa: BLE001
                raise ReplayFault(
                    f"FSDP2 step {t} ({name}) on dp_cp {members} did not complete on rank "
                    f"{rank}: {_short(exc)}",
                    {"phase": "verify", "index": index, "kind": "dp_cp", "ranks": members,
                     "op": f"fully_shard step ({name})",
                     "missing_ranks": progress.not_arrived(members, "verify", index)}) from exc
            step_s.append(time.perf_counter() - t0)
        weights = [encode_values(p.full_tensor().detach().cpu().numpy())
                   for p in model.parameters()]
        out["variants"][name] = {"step_s": step_s, "weights": weights,
                                 "rs_group": _rs_group_info(model[0])}
    return out
