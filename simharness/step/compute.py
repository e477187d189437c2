"""Compute time of every unit of every stage: given per layer, or from FLOPs at an MFU."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..topology.errors import TopologyError
from .workload import StageWork

BACKWARD_OVER_FORWARD = 2.0  # backward = input grads + weight grads, 2x the forward FLOPs
#: the most compute one microbatch may take on one pipeline stage (forward + backward): past
#: an hour per microbatch the input is a unit slip (seconds for ms), not a training step
MAX_STAGE_SECONDS = 3600.0
#: output tile of one CTA of a bf16 GEMM, rows x columns; one CTA per SM at a time. Assumed:
#: a large tile of Hopper/Ampere tensor-core GEMMs (CUTLASS's 128x256 and 256x128 shapes);
#: cuBLAS picks its kernel per shape and does not publish the choice
GEMM_TILE = (128, 256)


def gemm_ctas(rows: int, cols: int) -> int:
    """CTAs of a GEMM with a ``rows x cols`` output in :data:`GEMM_TILE` tiles (0: unknown).

    The 8192^3 matmul of pytorch#172714 is 2,048 CTAs, 15.5 waves on an H100's 132 SMs:

    >>> gemm_ctas(8192, 8192), gemm_ctas(0, 8192)
    (2048, 0)
    """
    if rows <= 0 or cols <= 0:
        return 0
    return math.ceil(rows / GEMM_TILE[0]) * math.ceil(cols / GEMM_TILE[1])


def check_number(name: str, value, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        raise TopologyError(f"--{name.replace('_', '-')} must be a number "
                            f"{'> 0' if positive else '>= 0'}, got {value!r}")


def _check_plausible(fwd: dict[tuple[int, int], float], given: str) -> None:
    """Refuse compute times that make one microbatch on one stage longer than
    :data:`MAX_STAGE_SECONDS` (forward + backward)."""
    per_stage: dict[int, float] = {}
    for (stage, _), t in fwd.items():
        per_stage[stage] = per_stage.get(stage, 0.0) + t * (1 + BACKWARD_OVER_FORWARD)
    worst = max(per_stage.values(), default=0.0)
    if worst > MAX_STAGE_SECONDS:
        raise TopologyError(
            f"{given} makes one microbatch take {worst / 3600:.3g} h of compute on one "
            f"pipeline stage (forward + backward), more than {MAX_STAGE_SECONDS / 3600:g} h; "
            f"--compute-ms is one transformer layer's backward in milliseconds (e.g. 8)")


def _is_layer(slot) -> bool:
    return slot.name.startswith("layer")


def compute_times(stages: Sequence[StageWork], spec, *, compute_ms: float | None,
                  mfu: float | None, peak_tflops: float | None
                  ) -> tuple[dict[tuple[int, int], float], str]:
    """Forward seconds of every (stage, unit) and a line saying where they come from."""
    if (compute_ms is None) == (mfu is None):
        raise TopologyError(
            "give the compute time once: --compute-ms (one layer's backward) or --mfu, not both"
            if compute_ms is not None else
            "no compute time: give --compute-ms (one layer's backward, ms) or --mfu with a "
            "model description and tokens (--micro-batch-size, --seq-length)")
    flops = [s.forward_flops for st in stages for s in st.slots if _is_layer(s)]
    known = bool(flops) and all(f > 0 for f in flops)
    if compute_ms is not None:
        check_number("compute_ms", compute_ms, positive=True)
        layer_fwd = compute_ms * 1e-3 / BACKWARD_OVER_FORWARD
        mean = sum(flops) / len(flops) if known else 0.0
        fwd = {(st.stage, k): (layer_fwd * s.forward_flops / mean if known else
                               layer_fwd if _is_layer(s) else 0.0)
               for st in stages for k, s in enumerate(st.slots)}
        _check_plausible(fwd, f"--compute-ms {compute_ms:g}")
        return fwd, (f"given: {compute_ms:g} ms backward per transformer layer, forward half "
                     "of it" + ("; embedding/output layer and other layers scaled by their "
                                "FLOPs" if known else ""))
    if isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not 0 < mfu <= 1:
        raise TopologyError(f"--mfu must be in (0, 1] (a fraction of the GPU's peak), got "
                            f"{mfu!r}")
    peak = peak_tflops if peak_tflops is not None else spec.node.peak_bf16_tflops
    if peak is None:
        raise TopologyError(f"topology {spec.name!r} gives no [node] peak_bf16_tflops; give "
                            "--peak-tflops or --compute-ms")
    check_number("peak_tflops", peak, positive=True)
    if not known:
        raise TopologyError("--mfu needs FLOPs: give a model description (--model-config or "
                            "--hidden-size ...) and --micro-batch-size with --seq-length; with "
                            "--model-bytes give --compute-ms")
    rate = peak * 1e12 * mfu
    fwd = {(st.stage, k): s.forward_flops / rate for st in stages
           for k, s in enumerate(st.slots)}
    _check_plausible(fwd, f"--mfu {mfu:g} of {peak:g} TFLOP/s")
    src = "given" if peak_tflops is not None else f"topology {spec.name!r}"
    return fwd, (f"from FLOPs at MFU {mfu:g} of {peak:g} TFLOP/s dense BF16 ({src}); "
                 f"backward {BACKWARD_OVER_FORWARD:g}x forward")
