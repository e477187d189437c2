"""Map a layout's ranks to the devices of a cluster.

Default: torchrun order -- consecutive global ranks fill a node, node by node,
so global rank ``r`` sits on device ``r`` (a layout with Megatron's
``rank_offset=16`` starts on device 16, node 2 of 8-GPU nodes). ``first_device``
moves the layout's first rank to another device. Alternatively an explicit host list names
the host of each of the layout's ranks (first rank first); a host's ranks take
its GPUs in order of appearance. Hosts named by integers are node indices;
otherwise hosts are numbered in order of first appearance.

>>> from simharness.topology import load_cluster
>>> c = load_cluster("dgx-h100-superpod", nodes=4)
>>> place(c, 16).devices[:3].tolist()
[0, 1, 2]
>>> p = place(c, 4, hosts=["b", "a", "b", "a"])
>>> p.devices.tolist(), [c.device_name(d) for d in p.devices[:2]]
([0, 8, 1, 9], ['node0/gpu0', 'node1/gpu0'])
>>> parse_hosts("n1 slots=2\\nn0\\n")
['n1', 'n1', 'n0']
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cluster import Cluster
from .errors import TopologyError


@dataclass(frozen=True, eq=False)
class Placement:
    """``devices[i]`` is the device of global rank ``first_rank + i``."""

    cluster: Cluster
    first_rank: int
    devices: np.ndarray
    how: str = "torchrun"

    @property
    def world_size(self) -> int:
        return int(self.devices.size)

    def device_of(self, ranks) -> np.ndarray:
        """Devices of global ranks (any shape); ranks outside the layout are an error."""
        r = np.asarray(ranks, dtype=np.int64) - self.first_rank
        if r.size and (r.min() < 0 or r.max() >= self.devices.size):
            bad = int((r[(r < 0) | (r >= self.devices.size)][0]) + self.first_rank)
            raise TopologyError(f"rank {bad} is outside the placed ranks {self.first_rank}.."
                                f"{self.first_rank + self.devices.size - 1}")
        return self.devices[r]


def place(cluster: Cluster, world_size: int, *, first_rank: int = 0,
          first_device: int | None = None,
          hosts: Sequence[str | int] | None = None) -> Placement:
    """Place ranks ``first_rank .. first_rank + world_size - 1`` on ``cluster``.

    Torchrun order puts rank ``first_rank + i`` on device ``first_device + i``
    (``first_device`` defaults to ``first_rank``); ``hosts`` instead names the
    host of each rank.
    """
    n_dev = cluster.n_devices
    gpn = cluster.gpus_per_node
    if hosts is None:
        lo = first_rank if first_device is None else first_device
        if isinstance(lo, bool) or not isinstance(lo, (int, np.integer)) or lo < 0:
            raise TopologyError(f"--first-device must be a whole number >= 0, got {lo!r}")
        lo = int(lo)
        hi = lo + world_size
        if hi > n_dev:
            need = -(-hi // gpn)
            raise TopologyError(
                f"ranks {first_rank}..{first_rank + world_size - 1} need devices {lo}..{hi - 1} "
                f"but "
                f"{cluster.spec.name!r} with --nodes {cluster.nodes} has {n_dev} GPUs; "
                f"use --nodes {need}" + ("" if cluster.spec.max_nodes is None or need <=
                                         cluster.spec.max_nodes else " on a larger topology"))
        return Placement(cluster, first_rank, np.arange(lo, hi, dtype=np.int64), "torchrun")
    if first_device is not None:
        raise TopologyError("pass either a host list or --first-device, not both")
    hosts = list(hosts)
    if len(hosts) != world_size:
        raise TopologyError(f"the host list names {len(hosts)} ranks but the layout has "
                            f"{world_size}; give one host per rank")
    numeric = all(isinstance(h, (int, np.integer)) or (isinstance(h, str) and h.isdigit())
                  for h in hosts)
    if numeric:
        node = np.array([int(h) for h in hosts], dtype=np.int64)
    else:
        _, first, inv = np.unique(np.array([str(h) for h in hosts]), return_index=True,
                                  return_inverse=True)
        # number hosts by first appearance, not alphabetically
        rank_of_unique = np.argsort(np.argsort(first))
        node = rank_of_unique[inv]
    if node.max() >= cluster.nodes:
        raise TopologyError(f"the host list uses {int(node.max()) + 1} hosts but "
                            f"{cluster.spec.name!r} has --nodes {cluster.nodes}; raise --nodes")
    order = np.argsort(node, kind="stable")
    slot = np.empty_like(node)
    counts = np.bincount(node, minlength=cluster.nodes)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    slot[order] = np.arange(node.size) - np.repeat(starts, counts)
    if counts.max() > gpn:
        host = hosts[int(np.flatnonzero(node == counts.argmax())[0])]
        raise TopologyError(f"host {host!r} gets {int(counts.max())} ranks but a node of "
                            f"{cluster.spec.name!r} has {gpn} GPUs")
    return Placement(cluster, first_rank, node * gpn + slot, "hosts")


def parse_hosts(text: str) -> list[str]:
    """Host list from text: one host per rank, per line or comma separated;
    ``host slots=N`` (MPI hostfile style) stands for N ranks; ``#`` comments."""
    out: list[str] = []
    for line in text.replace(",", "\n").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\S+)(?:\s+slots\s*=\s*(\d+))?", line)
        if not m:
            raise TopologyError(f"cannot read host line {line!r}; write 'host' or 'host slots=N'")
        out.extend([m.group(1)] * int(m.group(2) or 1))
    return out


def read_hosts(path_or_text: str) -> list[str]:
    """``parse_hosts`` of a file's text, or of the string itself if no such file."""
    p = Path(path_or_text)
    if p.is_file():
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise TopologyError(f"host file {path_or_text}: not a text file; write one host per "
                                f"line ('host' or 'host slots=N')") from None
        except OSError as exc:
            raise TopologyError(f"host file {path_or_text}: cannot read: {exc.strerror}") from None
        return parse_hosts(text)
    if "\n" not in path_or_text and "," not in path_or_text and not path_or_text.isdigit():
        raise TopologyError(f"host file {path_or_text!r} does not exist; pass a file with one "
                            "host per line or a comma-separated list")
    return parse_hosts(path_or_text)


def place_layout(layout, cluster: Cluster, *, first_device: int | None = None,
                 hosts=None) -> Placement:
    """:func:`place` for a layout (uses its ``world_size`` and ``rank_offset``)."""
    return place(cluster, int(layout.world_size), first_rank=int(layout.rank_offset),
                 first_device=first_device, hosts=hosts)
