"""The step model's sharing engine against what was published about concurrent collectives.

Each case feeds :func:`simharness.step.engine.run_units` the collectives, sizes and hardware
of a published measurement (single-collective times from the NCCL model on the shipped
topology, link shares from its max-min fair sharing) and compares the engine's figure with
the published one within ``TOL``: 15 %, the target the project holds the NCCL model to
(busbw +-15 %, ``bench/bench_cost.py``). Where the model cannot meet a figure, a strict
xfail pins the miss with its reason (docs/topology.md says why). No constant here is fitted:
the one model change these cases brought (:func:`~simharness.step.engine.wave_speed`, the
tail effect of a kernel whose CTAs fill the SMs) has no free parameter; the matmul time of
pytorch#172714 is the published sequential figure less the model's all-gather, as the
source gives no matmul time alone.

Sources (the figures are in each test):
NVIDIA/nccl#1094, NVIDIA/nccl#204, pytorch/pytorch#172714, the NVIDIA developer forum
thread "Compute-communication overlap causes severe GEMM performance degradation because
of tail effect", and NCCL's maintainers on rings using both directions of every link.
"""

from __future__ import annotations

import numpy as np
import pytest

from simharness.step.compute import gemm_ctas
from simharness.step.engine import Coll, OpCost, Unit, run_units, simulate_ops
from simharness.step.report import OverlapReport, Scenario, StageRow
from simharness.topology import load_cluster
from simharness.topology.cost import build_rings, predict

TOL = 0.15
MB = 2**20


def within(model: float, published: float) -> bool:
    return abs(model / published - 1.0) <= TOL


def coll(est, group: str, size: float, role: str = "ag") -> Coll:
    """An engine collective from an NCCL-model estimate (latency + fill, then bytes)."""
    return Coll(role, group, (est.latency_us + est.ramp_us) * 1e-6, size,
                est.algbw_gb_per_s * 1e9, int(est.n_channels))


def two_on_same_gpus(topology: str, devices: list[int], collective: str, size: float):
    """Two communicators over the same GPUs: alone, together (each on its own queue,
    sharing links max-min fairly) and back to back (one queue)."""
    cluster = load_cluster(topology, 1)
    est = predict(cluster, devices, collective, size)
    rings = build_rings(cluster, [devices, devices])
    keep_shared = float(rings.concurrent_gb_per_s()[0] / rings.alone_gb_per_s[0])
    a, b = coll(est, "a", size), coll(est, "b", size)

    def keep(group: str, moving: frozenset[str]) -> float:
        return keep_shared if len(moving) > 1 else 1.0

    units = [Unit(0.0, (), (a, b))]
    together = run_units(units, {"a": "a", "b": "b"}, keep)
    in_sequence = run_units(units, {"a": "one", "b": "one"}, keep)
    return a.alone_s(), together.step_s, in_sequence.step_s


# ------------------------------------------------ A1: NVIDIA/nccl#1094, 4 x A100, NVLink
# 256 MB all-reduce, two all_reduce_perf processes on the same 4 GPUs (NCCL 2.18.3):
# 1.8 ms alone, 4.2 ms each concurrent (slower together than 2 x 1.8 = 3.6 ms back to back).
A100_4 = [0, 1, 2, 3]


def test_nccl1094_256mb_all_reduce_alone():
    alone, _, _ = two_on_same_gpus("dgx-a100", A100_4, "all_reduce", 256 * MB)
    assert within(alone, 1.8e-3), alone


def test_nccl1094_model_conserves_bandwidth_together_equals_back_to_back():
    """What the model does: two rings over the same links share them max-min fairly, so
    together they end when back to back would, less the latency they overlap."""
    alone, together, seq = two_on_same_gpus("dgx-a100", A100_4, "all_reduce", 256 * MB)
    assert together <= seq
    assert together == pytest.approx(seq, rel=0.02)
    assert together == pytest.approx(2 * alone, rel=0.02)


@pytest.mark.xfail(strict=True, reason=(
    "known miss: the model shares link bandwidth and conserves it (3.4 ms each vs 4.2 "
    "published); nccl#1094 ran two processes, whose CUDA contexts the GPU time-slices "
    "without MPS, so the 17% lost to back to back is most likely context switching, which "
    "the model (communicators of one process) does not have"))
def test_nccl1094_256mb_concurrent_time():
    _, together, _ = two_on_same_gpus("dgx-a100", A100_4, "all_reduce", 256 * MB)
    assert within(together, 4.2e-3), together


@pytest.mark.xfail(strict=True, reason=(
    "known miss: together slower than back to back (4.2 vs 3.6 ms) needs a loss the "
    "bandwidth-conserving model does not have (two processes time-sliced, see above)"))
def test_nccl1094_together_slower_than_back_to_back():
    _, together, seq = two_on_same_gpus("dgx-a100", A100_4, "all_reduce", 256 * MB)
    assert together > seq


@pytest.mark.xfail(strict=True, reason=(
    "known miss: 256 KB went from 30 us alone to 4-5 ms concurrent (model: 19 us), time "
    "slices of two processes' contexts, not bandwidth (NCCL_MAX_NCHANNELS=2 did not help); "
    "the model has no time-slicing"))
def test_nccl1094_256kb_concurrent_time():
    _, together, _ = two_on_same_gpus("dgx-a100", A100_4, "all_reduce", 256 * 2**10)
    assert together >= 4e-3, together


# ------------------------------------------------ A2: NVIDIA/nccl#204, 2 x V100 on one PCIe switch
PCIE_PAIR = """\
schema = 1
name = "pcie-pair"
description = "2 x V100 PCIe on one PCIe switch (NVIDIA/nccl#204)"
default_nodes = 1
max_nodes = 1
references = ["NVIDIA/nccl#204: p2pBandwidthLatencyTest 13 GB/s one way, 25 GB/s both"]

[node]
gpus = 2
gpus_per_board = 2
gpu = "V100 PCIe"

[scale_up]
technology = "PCIe switch, P2P"
domain_gpus = 2
bandwidth_gb_per_s = 13
efficiency = 1.0
latency_us = 2

[collective]
base_latency_us = 10
"""


def test_nccl204_two_broadcasts_on_a_pcie_pair_each_at_half_speed(tmp_path):
    """Two broadcast_perf runs (roots 0 and 1) at once: each ~6 GB/s against 12+ GB/s
    alone, the sum at one direction's bandwidth. The model runs a collective of a pair as
    a ring through both GPUs' ports, so a second communicator gets half of each. The
    figure is met, but the runs were two processes, which the GPU time-slices without MPS
    (half the time each would give the same figure): it does not tell the two causes
    apart. Broadcast is not in the NCCL model, so only the link shares are compared."""
    path = tmp_path / "pcie-pair.toml"
    path.write_text(PCIE_PAIR)
    cluster = load_cluster(path, 1)
    rings = build_rings(cluster, [[0, 1], [0, 1]])
    alone = float(rings.alone_gb_per_s[0])
    each = rings.concurrent_gb_per_s()
    assert within(float(each[0]) / alone, 6.0 / 12.0)
    assert within(float(each.sum()), 12.0)


# ------------------------------------------------ NCCL maintainers: rings use both directions
def test_a_ring_already_uses_both_directions_of_every_link():
    """A ring over 4 A100s sends and receives on every member's NVLink port, so a second
    communicator over the same GPUs adds no bandwidth: each gets half, together the same."""
    cluster = load_cluster("dgx-a100", 1)
    one = build_rings(cluster, [A100_4])
    off = cluster.link_offsets
    used = set(map(int, one.link))
    assert used == {off["nvl_up"] + d for d in A100_4} | {off["nvl_down"] + d for d in A100_4}
    two = build_rings(cluster, [A100_4, A100_4])
    rates = two.concurrent_gb_per_s()
    assert np.allclose(rates, one.alone_gb_per_s[0] / 2)


# ------------------------------------------------ B3: pytorch/pytorch#172714, 8 x H100
# 8192^3 fp16 matmul beside an all-gather of 64 MiB per rank (--ag-mb is the input size:
# 512 MiB out on 8 GPUs): 2.96 ms in sequence, 2.02 ms overlapped.
def test_pytorch172714_matmul_beside_all_gather_on_8_h100():
    cluster = load_cluster("dgx-h100", 1)
    size = 8 * 64 * MB
    ag = coll(predict(cluster, list(range(8)), "all_gather", size), "ag", size)
    matmul = 2.96e-3 - ag.alone_s()    # the source gives no matmul time alone
    assert 1.1e-3 < matmul < 2.2e-3     # 500-1000 TFLOP/s of 2 x 8192^3: a sane matmul
    sms = cluster.spec.node.sms

    def keep(group: str, moving: frozenset[str]) -> float:
        return 1.0
    overlapped = run_units([Unit(0.0, (), (ag,)), Unit(matmul)], {"ag": "ag"}, keep,
                           sm_per_cta=1.0 / sms)
    sequential = run_units([Unit(matmul, (), (ag,))], {"ag": "ag"}, keep)
    assert sequential.step_s == pytest.approx(2.96e-3, rel=1e-9)
    assert within(overlapped.step_s, 2.02e-3), overlapped.step_s
    # slower than the ideal max(matmul, all-gather): the all-gather's CTAs take SMs
    assert overlapped.step_s > max(matmul, ag.alone_s()) * 1.02


def test_pytorch172714_through_simulates_own_cta_estimates():
    """The same case with the CTAs ``simulate`` itself gives: the all-gather's from NCCL's
    channels (:meth:`~simharness.step.pricing.Pricer.coll`), the matmul's from its output
    tiles (:func:`~simharness.step.compute.gemm_ctas`: 2,048 CTAs, 15.5 waves on 132 SMs),
    run in waves over the SMs the all-gather leaves."""
    cluster = load_cluster("dgx-h100", 1)
    size = 8 * 64 * MB
    ag = coll(predict(cluster, list(range(8)), "all_gather", size), "ag", size)
    matmul = 2.96e-3 - ag.alone_s()
    ctas = gemm_ctas(8192, 8192)
    assert ctas == 2048 and ag.ctas > 0

    def keep(group: str, moving: frozenset[str]) -> float:
        return 1.0
    units = [Unit(0.0, (), (ag,)), Unit(matmul, ctas=ctas)]
    waves = run_units(units, {"ag": "ag"}, keep, sm_per_cta=1.0 / cluster.spec.node.sms)
    fluid = run_units(units, {"ag": "ag"}, keep, sm_per_cta=1.0 / cluster.spec.node.sms,
                      waves=False)
    assert within(waves.step_s, 2.02e-3), waves.step_s
    assert waves.step_s != fluid.step_s   # the CTA count is used


# ------------------------------------------------ B1: NVIDIA developer forum, H100 tail effect
def test_forum_132_cta_gemm_twice_as_slow_beside_a_24_cta_all_gather():
    """A one-wave GEMM (132 CTAs on 132 SMs) beside a 24-CTA all-gather that runs the whole
    time: the GEMM needs a second wave for its last 24 CTAs, ~2x (MFU 80% -> 47%). The post
    gives the CTA count, not the GEMM's shape, so ``simulate``'s own estimate from a layer's
    shape (:func:`~simharness.step.compute.gemm_ctas`) cannot be checked on it."""
    sms = load_cluster("dgx-h100", 1).spec.node.sms
    gemm = 1e-3
    ag = Coll("ag", "ag", 0.0, 1e12, 1e12 / (10 * gemm), 24)   # outlasts the GEMM

    def keep(group: str, moving: frozenset[str]) -> float:
        return 1.0

    def gemm_time(unit: Unit, beside: tuple[Coll, ...]) -> float:
        return run_units([Unit(0.0, (), beside), unit], {"ag": "ag"}, keep,
                         sm_per_cta=1.0 / sms).compute_end_s

    alone = gemm_time(Unit(gemm, ctas=132), ())
    beside = gemm_time(Unit(gemm, ctas=132), (ag,))
    assert alone == pytest.approx(gemm)
    assert within(beside / alone, 2.0), beside / alone
    # without the CTA count the SMs are shared as a fluid: 1/(1 - 24/132) = 1.22x, a miss
    fluid = gemm_time(Unit(gemm), (ag,))
    assert not within(fluid / alone, 2.0)
    assert fluid / alone == pytest.approx(132 / 108)


# ------------------------------------------------ the verdict can say "hurts"
def test_separate_communicators_can_be_slower_and_the_verdict_says_hurts():
    """Two communicators over the same links: the reduce-scatter takes half the bandwidth
    from the all-gather the next layer waits for, so the separate all-gather
    communicator is slower than one queue that runs the all-gather alone first."""
    ag = OpCost(alpha_s=0.0, volume_bytes=2e6, rate_alone=1e9, rate_shared=5e8)
    rs = OpCost(alpha_s=0.0, volume_bytes=1e6, rate_alone=1e9, rate_shared=5e8)
    r = simulate_ops(layers=2, compute_s=1e-3, rs=rs, ag=ag)
    assert r.separate.step_s > 1.1 * r.one.step_s
    row = StageRow(0, (8,), 0, 0.0, 0.0, 0.0, 0.0, r.one, r.separate)
    rep = OverlapReport(schedule="fsdp", nccl="2.28", compute_how="given", groups={},
                        stages=(row,), worst_stage=0, collectives=(),
                        scenarios=(Scenario("links shared", r.one.step_s, r.separate.step_s),),
                        comm_memories=(("dp_cp_ag", 100.0),), cost_classes=1)
    assert rep.verdict.startswith("hurts:"), rep.verdict
