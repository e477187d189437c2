"""Communicator memory as a function of NCCL's buffers."""

from __future__ import annotations

import pytest

from simharness.topology import TopologyError
from simharness.topology.comm_memory import MIB, CommMemoryInputs, comm_memory


def test_buffers_per_protocol_follow_nccl_defaults():
    """4 MiB + 512 KiB + 4.6875 MiB (+ header) rounds up to 10 MiB at the receiver, the
    sender's 2 MiB block; one channel's three structures are 3 x 2 MiB."""
    m = comm_memory(CommMemoryInputs(algos=("ring",), channels=1, fixed_mb=0))
    assert m.parts["ring"] == 10 * MIB + 2 * MIB
    assert m.parts["channels"] == 6 * MIB
    simple_only = comm_memory(CommMemoryInputs(algos=("ring",), channels=1,
                                               protocols=("simple",)))
    assert simple_only.parts["ring"] == 6 * MIB + 2 * MIB   # 4 MiB + header -> 6 MiB


def test_eager_a100_communicator_falls_in_the_reported_range():
    """NCCL < 2.22 connected ring and tree at init; NVIDIA/nccl#964 reports 544-688 MB
    per communicator on A100. A check of the function, not a fit: 16 channels is the
    default of the inputs, used everywhere."""
    m = comm_memory(CommMemoryInputs(lazy_connect=False))
    assert 544 <= m.total_mb <= 688


def test_lazy_connection_and_split_sharing_shrink_it():
    eager = comm_memory(CommMemoryInputs(lazy_connect=False), nvls_capable=True)
    lazy = comm_memory(CommMemoryInputs(algos=("ring",)))
    shared = comm_memory(CommMemoryInputs(algos=("ring",), split_share=True))
    assert "nvls" in eager.parts and set(lazy.parts) == {"channels", "ring"}
    assert shared.total_mb == pytest.approx(shared.inputs.fixed_mb) and not shared.parts
    assert shared.total_mb < lazy.total_mb < eager.total_mb
    assert any("splitShare" in line for line in shared.lines())


@pytest.mark.parametrize("kw, words", [(dict(algos=("bogus",)), "unknown algorithm 'bogus'"),
                                       (dict(protocols=("ll64",)), "unknown protocol 'll64'"),
                                       (dict(channels=-1), "channels must be a whole number")])
def test_bad_inputs(kw, words):
    with pytest.raises(TopologyError, match=words):
        CommMemoryInputs(**kw)


def test_published_memory_reports_load_and_keep_their_order():
    """nccl_memory.toml: held-out reports only; a group of 4 costs more than a group of 2
    (NVIDIA/nccl#964: 688 vs 544 MB) because its tree chain is longer."""
    from simharness.topology.calibration import evaluate_memory, load_memory_reports

    reports = {r.id: r for r in load_memory_reports()}
    assert reports and all(r.split == "heldout" for r in reports.values())
    two, _ = evaluate_memory(reports["a100x4-nvlink-2gpu-group"])
    four, lines = evaluate_memory(reports["a100x4-nvlink-4gpu-group"])
    assert 0 < two < four and any(line.startswith("tree:") for line in lines)
