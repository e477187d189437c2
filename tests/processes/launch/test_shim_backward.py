"""The shim in one process: the backward pass runs the user's code (an autograd Function's
``backward``, a tensor hook) with CUDA devices mapped as in the forward pass, and code that
looks for CUDA-graph support finds ``torch.cuda.CUDAGraph``'s methods, each a needs-GPU stop
when called (Megatron's ``CudaRNGStatesTracker(use_cudagraphable_rng=True)`` pattern)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.paths import ROOT

SCRIPT = r"""
import json
import torch
from simharness.errors import NeedsGPU
from simharness.launch import gpu_shim

s = gpu_shim.install(0, 2)
out = []

class Gather(torch.autograd.Function):  # Megatron's mappings: a buffer on the current device
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        buf = torch.empty(g.shape, dtype=g.dtype, device=torch.cuda.current_device())
        return buf.copy_(g) * 2

x = torch.ones(3, requires_grad=True)
Gather.apply(x).sum().backward()
out.append(x.grad.tolist())
x.grad = None
torch.autograd.backward(Gather.apply(x).sum())
out.append(x.grad.tolist())
out.append(torch.autograd.grad(Gather.apply(x).sum(), x)[0].tolist())
y = torch.ones(2, requires_grad=True)
y.register_hook(lambda g: g + torch.ones(2, device="cuda"))
(y * 3).sum().backward()
out.append(y.grad.tolist())

graph = torch.cuda.CUDAGraph
out.append(all(hasattr(graph, m) for m in ("register_generator_state", "capture_begin",
                                            "replay", "pool")))
try:
    graph.register_generator_state(None, None)
    out.append("not refused")
except NeedsGPU as e:
    out.append(e.call)
s.uninstall()
try:
    torch.ones(1, device=0)
    out.append("mapped after uninstall")
except (AssertionError, RuntimeError):
    out.append("restored")
print(json.dumps(out))
"""


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_backward_maps_devices_and_cuda_graph_methods_are_named_stops():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=child_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [
        [2.0, 2.0, 2.0], [2.0, 2.0, 2.0], [2.0, 2.0, 2.0], [4.0, 4.0], True,
        "torch.cuda.CUDAGraph.register_generator_state", "restored"]
