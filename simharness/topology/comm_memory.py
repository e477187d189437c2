"""GPU memory of one NCCL communicator, as a function of what NCCL allocates.

NCCL's big per-communicator allocation is its connection buffers: every
channel of every algorithm connects to its peers, and each connection holds
one buffer per enabled protocol (``src/init.cc``: ``DEFAULT_BUFFSIZE`` 4 MiB
for Simple, ``DEFAULT_LL_BUFFSIZE`` = 8 lines x 512 threads x 8 steps x 16 B =
512 KiB for LL, ``DEFAULT_LL128_BUFFSIZE`` = 120 x 640 x 8 x 8 B = 4.6875 MiB
for LL128). Per channel a ring rank receives from one peer, a tree rank from up
to three (parent and two children); NVLS keeps unicast and multicast buffers
per NVLS channel. Since NCCL 2.22 connections are made lazily, per algorithm,
on first use (``NCCL_RUNTIME_CONNECT=1``), so a communicator that only runs
all-gather / reduce-scatter pays for the ring (and NVLS where it is picked)
only; before 2.22 every algorithm was connected at init. A communicator made by
``ncclCommSplit`` with ``splitShare`` (``NCCL_COMM_SPLIT_SHARE_RESOURCES=1``)
reuses its parent's buffers and pays only its own fixed structures.

The channel counts and the fixed overhead are inputs (NCCL's topology search
decides the channels on the machine; the defaults are ours and shown with
every result). A check, not a fit: with 16 ring and 16 tree channels and all
three protocols connected at init (NCCL < 2.22, A100, LL128 on), the function
gives 627 MB, inside the 544-688 MB per communicator reported on A100 in
NVIDIA/nccl#964.

>>> m = comm_memory(CommMemoryInputs(algos=("ring",)))
>>> round(m.total_mb), m.lines()[0]
(164, 'ring: 16 channels x 1 peer(s) x 9.19 MiB (simple 4 MiB + ll 0.5 MiB + ll128 4.69 MiB)')
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import whole_number_problem
from .errors import TopologyError
from .nccl_model import DEFAULT_NCCL, nccl_version

MIB = 1 << 20
PROTO_BUFFER_BYTES = {"simple": 4 * MIB, "ll": 8 * 512 * 8 * 16,
                      "ll128": 120 * 640 * 8 * 8}
PEERS_PER_CHANNEL = {"ring": 1, "tree": 3, "collnet_direct": 2, "collnet_chain": 2, "pat": 1}
# NVLS: unicast + multicast buffer per NVLS channel (NCCL_NVLS_CHUNKSIZE-sized steps);
# ours: 2 x 4 MiB per channel, the Simple buffer size, as NCCL sizes NVLS buffers from it.
NVLS_BUFFERS_PER_CHANNEL = 2
DEFAULT_FIXED_MB = 10.0  # ours: device comm structs, work FIFO, proxy state (a few MB)


@dataclass(frozen=True)
class CommMemoryInputs:
    """What the memory of one communicator depends on (all shown in reports)."""

    algos: tuple[str, ...] = ("ring",)
    protocols: tuple[str, ...] = ("simple", "ll", "ll128")
    channels: int = 16
    nvls_channels: int = 16
    lazy_connect: bool = True      # NCCL >= 2.22 (NCCL_RUNTIME_CONNECT=1)
    split_share: bool = False      # ncclCommSplit with splitShare = 1
    fixed_mb: float = DEFAULT_FIXED_MB

    def __post_init__(self):
        for a in self.algos:
            if a not in PEERS_PER_CHANNEL and a not in ("nvls", "nvls_tree"):
                raise TopologyError(f"unknown algorithm {a!r} for communicator memory; "
                                    f"expected some of ring, tree, nvls, nvls_tree, "
                                    "collnet_direct, collnet_chain, pat")
        for p in self.protocols:
            if p not in PROTO_BUFFER_BYTES:
                raise TopologyError(f"unknown protocol {p!r}; expected some of "
                                    f"{', '.join(PROTO_BUFFER_BYTES)}")
        for name in ("channels", "nvls_channels"):
            if problem := whole_number_problem(name, getattr(self, name), 0):
                raise TopologyError(problem)
        if not self.fixed_mb >= 0:
            raise TopologyError(f"fixed_mb must be >= 0, got {self.fixed_mb!r}")


@dataclass(frozen=True)
class CommMemory:
    inputs: CommMemoryInputs
    parts: dict[str, float] = field(default_factory=dict)  # name -> bytes

    @property
    def total_mb(self) -> float:
        return (sum(self.parts.values()) + self.inputs.fixed_mb * 1e6) / 1e6

    def lines(self) -> list[str]:
        """One line per part: how it is computed."""
        i = self.inputs
        per = sum(PROTO_BUFFER_BYTES[p] for p in i.protocols) / MIB
        protos = " + ".join(f"{p} {PROTO_BUFFER_BYTES[p] / MIB:g} MiB" for p in i.protocols)
        out = []
        for name in self.parts:
            if name in PEERS_PER_CHANNEL:
                out.append(f"{name}: {i.channels} channels x {PEERS_PER_CHANNEL[name]} peer(s) x "
                           f"{per:.2f} MiB ({protos.replace('4.6875', '4.69')})")
            elif name == "nvls":
                out.append(f"nvls: {i.nvls_channels} channels x {NVLS_BUFFERS_PER_CHANNEL} "
                           f"buffers x {PROTO_BUFFER_BYTES['simple'] / MIB:g} MiB")
        if i.split_share:
            out.append("buffers shared with the parent communicator (ncclCommSplit, splitShare=1)")
        out.append(f"fixed: {i.fixed_mb:g} MB (assumed)")
        connect = ("lazily, per algorithm used (NCCL >= 2.22)" if i.lazy_connect
                   else "at init, every algorithm (NCCL < 2.22)")
        out.append(f"connections made {connect}")
        return out

    def to_dict(self) -> dict:
        return {"total_mb": round(self.total_mb, 1), "lines": self.lines(),
                "parts_mb": {k: round(v / 1e6, 1) for k, v in self.parts.items()}}


def comm_memory(inputs: CommMemoryInputs, *, all_algos: tuple[str, ...] = ("ring", "tree"),
                nvls_capable: bool = False, nccl: str = DEFAULT_NCCL) -> CommMemory:
    """Bytes of one communicator's buffers per part.

    With ``lazy_connect`` only ``inputs.algos`` (the algorithms the
    communicator runs) are connected; otherwise every algorithm NCCL would set
    up on this machine (``all_algos``, plus NVLS when ``nvls_capable``).
    """
    nccl_version(nccl)
    i = inputs
    algos = list(i.algos) if i.lazy_connect else list(all_algos) + (["nvls"] if nvls_capable
                                                                    else [])
    parts: dict[str, float] = {}
    if not i.split_share:
        per_conn = sum(PROTO_BUFFER_BYTES[p] for p in i.protocols)
        for a in dict.fromkeys(algos):
            if a in ("nvls", "nvls_tree"):
                parts["nvls"] = float(i.nvls_channels * NVLS_BUFFERS_PER_CHANNEL
                                      * PROTO_BUFFER_BYTES["simple"])
            else:
                parts[a] = float(i.channels * PEERS_PER_CHANNEL[a] * per_conn)
    return CommMemory(i, parts)
