"""NCCL's tuning constants and the names the cost model accepts.

The numbers NCCL's ``ncclTopoTuneModel`` (``src/graph/tuning.cc``) prices
with -- ``baseLat``, ``hwLat``, ``llMaxBws``, the per-channel caps,
``nvlsEfficiency``, the PAT factor, ``treeCorrectionFactor`` -- per release
where they differ (2.28 line numbers unless noted; the formulas that use them
are in :mod:`.nccl_model`), and the checks that turn a user's collective name,
message size and NCCL release into the canonical ones.

>>> collective_name("allreduce"), nccl_version("v2.23.4-1"), bus_factor("all_gather", 8)
('all_reduce', '2.23', 0.875)
"""

from __future__ import annotations

import math

from .errors import TopologyError

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce")
ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOS = ("ll", "ll128", "simple")
ARCHS = ("volta", "ampere", "hopper", "blackwell")
_ALIASES = {"allgather": "all_gather", "ag": "all_gather", "reducescatter": "reduce_scatter",
            "rs": "reduce_scatter", "allreduce": "all_reduce", "ar": "all_reduce"}
MAX_BYTES = 1 << 40  # 1 TiB: far above any nccl-tests sweep; larger is a typo
# NCCL releases modelled, one at a time (tags v2.23.4-1 and v2.28.3-1).
NCCL_VERSIONS = ("2.23", "2.28")
DEFAULT_NCCL = "2.28"

# ---------------------------------------------------------------- NCCL constants
# baseLat[algo][proto], us (tuning.cc 2.23): Tree, Ring, CollNetDirect, CollNetChain,
# NVLS, NVLSTree, PAT (PAT's 8 us base is written into its latency formula).
BASE_LAT = {
    "tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4),
    "collnet_direct": (0.0, 0.0, 0.0), "collnet_chain": (0.0, 0.0, 0.0),
    "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0), "pat": (0.0, 0.0, 0.0),
}
# hwLat[hw][algo][proto], us (tuning.cc 2.23); PAT's NVLink/PCI/net 4/4/14 from 2.23+.
HW_LAT = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4),
               "collnet_direct": (0.0, 0.0, 3.7), "collnet_chain": (0.0, 0.0, 2.8),
               "nvls": (0.0, 0.0, 25.0), "nvls_tree": (0.0, 0.0, 25.0), "pat": (0.0, 0.0, 4.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7),
            "collnet_direct": (0.0, 0.0, 3.7), "collnet_chain": (0.0, 0.0, 2.8),
            "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0), "pat": (0.0, 0.0, 4.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0),
            "collnet_direct": (0.0, 0.0, 31.0), "collnet_chain": (0.0, 0.0, 30.0),
            "nvls": (0.0, 0.0, 18.0), "nvls_tree": (0.0, 0.0, 14.0), "pat": (0.0, 0.0, 14.0)},
}
# llMaxBws: one node -> by GPU architecture; several nodes -> by CPU (x86 Intel row).
# tuning.cc:169-174 (2.28); 2.23 has no Blackwell row: SM100 takes the Hopper row there
# (v2.23.4-1 tuning.cc:146: compCapIndex stops at Hopper).
LL_MAX_BW = {"volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0),
             "hopper": (141.0, 45.0, 35.0), "blackwell": (282.0, 90.0, 70.0)}
LL_MAX_BW_INTEL = (39.0, 39.0, 20.4)
# Per-channel caps (N1/N2/N4 = 1, 2, >2 nodes), tuning.cc:175-198 (2.28).
PER_CH_MAX_RING_LL128 = {"volta": (20.0,) * 3, "ampere": (20.0,) * 3, "hopper": (36.7,) * 3,
                         "blackwell": (73.4,) * 3}
PER_CH_MAX_TREE_LL128 = {"volta": (20.0,) * 3, "ampere": (20.0,) * 3,
                         "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)}
PER_CH_MAX_TREE = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                   "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
# NVLSTree per-channel cap, new in 2.28 (tuning.cc:193-198)
PER_CH_MAX_NVLS_TREE = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                        "hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 43.1)}
# nvlsEfficiency: first in 2.28.3 (tuning.cc:133-139); 2.23 prices NVLS as
# min(bwIntra, bwInter) x 5/6 (v2.23.4-1 tuning.cc:182-183, 224).
NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
# PAT bandwidth factor: x0.85 in 2.23 (v2.23.4-1 tuning.cc:193), x0.75 from 2.24
# (tuning.cc:310 in 2.28).
PAT_FACTOR = {"2.23": 0.85, "2.28": 0.75}
# src/graph/topo.h:16-21: GB/s of one NVLink per direction as NCCL counts it.
NVLINK_BW_PER_LINK = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
TREE_CORRECTION = {  # powers of two from 64 B (index 0) to 256 MB (index 22), tuning.cc:578
    "ll": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
           1.0, 1.0, 1.0, 1.0),
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9),
}
NET_OVERHEAD_US = 1.0   # getNetOverhead: x86 Intel (AMD: 2.0); x3 for Simple
RING_PLATEAU = 1.4      # SM80+ (1.9 before), tuning.cc:593-596
# Threads per CTA NCCL gives a kernel (tuning.cc:231-243, device.h:88-109): Simple 512
# (ring: 256 when the ring moves <= PCI_BW 12 GB/s), LL 512, LL128 640.
MAX_THREADS = {"simple": 512, "ll": 512, "ll128": 640}


def collective_name(name: str) -> str:
    """Canonical collective name (``allreduce``, ``ar``, ``all-reduce`` -> ``all_reduce``)."""
    key = str(name).replace("-", "_").lower()
    key = _ALIASES.get(key.replace("_", ""), key)
    if key not in COLLECTIVES:
        raise TopologyError(f"unknown collective {name!r}; expected one of "
                            f"{', '.join(COLLECTIVES)}")
    return key


def _choice(kind: str, value, choices: tuple[str, ...]) -> str | None:
    if value is None:
        return None
    key = str(value).replace("-", "_").lower()
    if key not in choices:
        raise TopologyError(f"unknown {kind} {value!r}; expected one of {', '.join(choices)}")
    return key


def check_size(size_bytes) -> float:
    """A message size in bytes: a finite number in [0, 1 TiB]."""
    ok = (not isinstance(size_bytes, bool) and isinstance(size_bytes, (int, float))
          and math.isfinite(size_bytes) and 0 <= size_bytes <= MAX_BYTES)
    if not ok:
        raise TopologyError(f"message size {size_bytes!r} is out of range; give bytes "
                            f"between 0 and {MAX_BYTES} (1 TiB)")
    return float(size_bytes)


def nccl_version(version) -> str:
    """A supported NCCL version (``"2.28"``, ``"2.28.3"``, ``"v2.28.3-1"`` -> ``"2.28"``).

    >>> nccl_version("v2.23.4-1")
    '2.23'
    """
    text = str(version).strip().lower().removeprefix("v")
    key = ".".join(text.split("-")[0].split(".")[:2])
    if key not in NCCL_VERSIONS:
        raise TopologyError(f"unknown NCCL version {version!r}; expected one of "
                            f"{', '.join(NCCL_VERSIONS)} (give --nccl 2.23 or --nccl 2.28)")
    return key


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor: (n-1)/n, or 2(n-1)/n for all-reduce."""
    f = (n - 1) / n
    return 2 * f if collective_name(collective) == "all_reduce" else f


def _log2i(x: float) -> int:
    return int(math.floor(math.log2(x))) if x >= 1 else 0
