"""The GPU the shim says each local rank has: a named model from :data:`GPUS` (H100 by
default; ``simharness run --gpu NAME`` or ``SIMHARNESS_GPU=NAME`` in a rank's environment).

``torch.cuda.get_device_properties`` / ``get_device_capability`` / ``get_device_name`` /
``mem_get_info`` answer from the chosen row, so module-level hardware probes (Megatron-LM's
``megatron/core/ssm/ops/gdp/common.py`` calls ``torch.cuda.get_device_capability()`` at import;
Transformer Engine, flash-attn and ``fla.utils`` probe the same way) take their GPU branch.

Each row's figures and their sources (``source``): the streaming multiprocessor count,
memory and compute capability from NVIDIA's datasheet or architecture whitepaper for that
part; the name string as ``torch.cuda.get_device_name()`` returns it (the CUDA driver's
``cuDeviceGetName``, which is also ``nvidia-smi --query-gpu=name``). ``total_memory`` is the
datasheet capacity in decimal gigabytes (a real device reports a little less, the driver's
reservation). The per-SM limits (threads, registers, warp size) are those of the compute
capability, from the CUDA C++ Programming Guide's table "Technical Specifications per Compute
Capability".

>>> gpu_spec("H100").name, gpu_spec("h100").capability, gpu_spec("b200").sm_count
('NVIDIA H100 80GB HBM3', (9, 0), 148)
>>> gpu_spec(None).key
'h100'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import SimharnessError

#: The rank environment variable naming the GPU (``simharness run --gpu`` sets it).
ENV_GPU = "SIMHARNESS_GPU"
#: The GPU a rank reports when none is named.
DEFAULT_GPU = "h100"

_GB = 10**9


class UnknownGPU(SimharnessError, ValueError):
    """A GPU name (``--gpu`` or ``SIMHARNESS_GPU``) that is not in :data:`GPUS`."""


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model as torch reports it (``torch.cuda.get_device_properties``)."""

    key: str
    name: str
    capability: tuple[int, int]
    sm_count: int
    memory_gb: int
    source: str

    @property
    def total_memory(self) -> int:
        return self.memory_gb * _GB


#: Per compute capability: (max threads per SM, shared memory per SM in KiB), from the CUDA
#: C++ Programming Guide, "Technical Specifications per Compute Capability".
_PER_SM = {(7, 0): (2048, 96), (8, 0): (2048, 164), (8, 9): (1536, 100), (9, 0): (2048, 228),
           (10, 0): (2048, 228)}

GPUS: dict[str, GpuSpec] = {g.key: g for g in (
    GpuSpec("v100", "Tesla V100-SXM2-32GB", (7, 0), 80, 32,
            "NVIDIA Tesla V100 datasheet (32 GB HBM2); Volta architecture whitepaper "
            "(80 SMs in Tesla V100)"),
    GpuSpec("a100-40gb", "NVIDIA A100-SXM4-40GB", (8, 0), 108, 40,
            "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM); Ampere GA100 "
            "whitepaper (108 SMs in A100)"),
    GpuSpec("a100", "NVIDIA A100-SXM4-80GB", (8, 0), 108, 80,
            "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM); Ampere GA100 "
            "whitepaper (108 SMs in A100)"),
    GpuSpec("l40s", "NVIDIA L40S", (8, 9), 142, 48,
            "NVIDIA L40S datasheet (48 GB GDDR6); Ada Lovelace whitepaper (AD102)"),
    GpuSpec("h100-pcie", "NVIDIA H100 PCIe", (9, 0), 114, 80,
            "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe 80 GB); Hopper architecture "
            "whitepaper (114 SMs in H100 PCIe)"),
    GpuSpec("h100", "NVIDIA H100 80GB HBM3", (9, 0), 132, 80,
            "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM 80 GB HBM3); Hopper "
            "architecture whitepaper (132 SMs in H100 SXM5)"),
    GpuSpec("h200", "NVIDIA H200", (9, 0), 132, 141,
            "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM 141 GB HBM3e; the H100 SXM's "
            "GH100 with 132 SMs)"),
    GpuSpec("b200", "NVIDIA B200", (10, 0), 148, 180,
            "NVIDIA DGX B200 datasheet (1,440 GB HBM3e over 8 GPUs: 180 GB each); Blackwell "
            "B200 (148 SMs, compute capability 10.0, CUDA C++ Programming Guide)"),
)}


def gpu_spec(name: str | None) -> GpuSpec:
    """The :class:`GpuSpec` named ``name`` (case-insensitive; None or empty: the default).

    >>> gpu_spec("tpu")
    Traceback (most recent call last):
    ...
    simharness.launch.gpu_shim.identity.UnknownGPU: GPU 'tpu' is not one the shim knows; \
give one of a100, a100-40gb, b200, h100, h100-pcie, h200, l40s, v100 (--gpu NAME or \
SIMHARNESS_GPU=NAME)
    """
    if name is None or not str(name).strip():
        return GPUS[DEFAULT_GPU]
    key = str(name).strip().lower()
    if key not in GPUS:
        raise UnknownGPU(f"GPU {name!r} is not one the shim knows; give one of "
                         f"{', '.join(sorted(GPUS))} (--gpu NAME or {ENV_GPU}=NAME)")
    return GPUS[key]


def gpu_for_description(text: str) -> GpuSpec | None:
    """The row a cluster file's GPU description (``[node] gpu`` of ``topologies/*.toml``)
    names, or None when it names none or a part the table lacks.

    A row matches when its model (``H100``, ``A100``, ``L40S``, ...) is a word of the text;
    ``PCIe`` in the text picks the PCIe part, and a memory size in the text (``80GB``,
    ``141 GB``) must be the row's. A longer part name that merely ends in the model
    (``GB200``, ``GH200``) is another part.

    >>> gpu_for_description("H100 SXM5 80GB").key, gpu_for_description("H200 141GB HBM3e").key
    ('h100', 'h200')
    >>> gpu_for_description("A100 PCIe 40GB") is None, gpu_for_description("H800 SXM5 80GB")
    (True, None)
    >>> gpu_for_description("B200 (GB200 superchip)") is None
    True
    """
    words = re.findall(r"[A-Z0-9]+", text.upper())
    sizes = {int(m) for m in re.findall(r"(\d+)\s*GB\b", text.upper())}
    pcie = "PCIE" in words
    found = []
    for spec in GPUS.values():
        model = spec.key.split("-")[0].upper()
        if model not in words or any(w != model and w.endswith(model) for w in words):
            continue
        if pcie != spec.key.endswith("-pcie") or (sizes and spec.memory_gb not in sizes):
            continue
        found.append(spec)
    return found[0] if len(found) == 1 else None


class DeviceProperties:
    """What ``torch.cuda.get_device_properties`` returns for a :class:`GpuSpec`: the fields
    of torch's ``_CudaDeviceProperties`` that a datasheet or the compute capability gives.

    >>> p = DeviceProperties(gpu_spec("a100"))
    >>> p.major, p.minor, p.multi_processor_count, p.total_memory
    (8, 0, 108, 80000000000)
    >>> p
    _CudaDeviceProperties(name='NVIDIA A100-SXM4-80GB', major=8, minor=0, \
total_memory=76293MB, multi_processor_count=108)
    """

    def __init__(self, spec: GpuSpec):
        threads, smem_kib = _PER_SM[spec.capability]
        self.name = spec.name
        self.major, self.minor = spec.capability
        self.total_memory = spec.total_memory
        self.multi_processor_count = spec.sm_count
        self.max_threads_per_multi_processor = threads
        self.shared_memory_per_multiprocessor = smem_kib * 1024
        self.warp_size = 32
        self.regs_per_multiprocessor = 65536
        self.is_integrated = 0
        self.is_multi_gpu_board = 0
        # an AMD architecture name; a CPU build of torch (torch.version.cuda None) reads it
        # where a CUDA build reads ``name`` (torch/_inductor/codecache.py, get_system)
        self.gcnArchName = ""  # noqa: N815  (torch's attribute name)

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name={self.name!r}, major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 2**20}MB, "
                f"multi_processor_count={self.multi_processor_count})")
