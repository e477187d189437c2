"""The data-path replay's synthetic values (pure: numpy only): exact in float64, tagged by
their sender, and the single-process FSDP2 reference.

Every value is a dyadic rational with few bits (:data:`VALUE_BITS` integer bits, ``lr`` a
power of two, at most :func:`max_steps` steps), so float64 sums are exact in any order and
the ranks' results are bit-identical to a reference computed in one process. The
all-gather payload is ``(parameter bits, tag)`` int64 pairs; the tag packs the sender's
global rank, its shard number, the bucket and the step:

>>> unpack_tag(pack_tag(src=8, shard=0, bucket=2, step=1))
(8, 0, 2, 1)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

MANTISSA_BITS = 53          # float64
VALUE_BITS = 6              # |parameters|, |gradient terms| < 2**VALUE_BITS (see the bound below)
TAG_BITS = (22, 13, 14, 14)  # src, shard, bucket, step: 63 bits, a non-negative int64


# --------------------------------------------------------------------- tags
def pack_tag(src: int, shard: int, bucket: int, step: int) -> int:
    """One int64 naming the sender of a shard (see the module docstring)."""
    out = 0
    for value, bits in zip((src, shard, bucket, step), TAG_BITS, strict=True):
        out = (out << bits) | (int(value) & ((1 << bits) - 1))
    return out


def unpack_tag(tag: int) -> tuple[int, int, int, int]:
    out = []
    t = int(tag)
    for bits in reversed(TAG_BITS):
        out.append(t & ((1 << bits) - 1))
        t >>= bits
    return tuple(reversed(out))  # type: ignore[return-value]


# ------------------------------------------------------------------- values
def step_lr_exponent(group_size: int) -> int:
    """``lr = 2**-e`` with ``group_size * lr <= 1/2``: the update contracts, so values stay small.

    >>> step_lr_exponent(8), step_lr_exponent(16)
    (4, 5)
    """
    return max(1, (group_size - 1).bit_length()) + 1


def max_steps(group_size: int) -> int:
    """Steps whose values stay exact in float64: each step adds ``e`` fraction bits."""
    e = step_lr_exponent(group_size)
    return (MANTISSA_BITS - VALUE_BITS - max(1, group_size.bit_length())) // e


def initial_params(partition: int, number: int, numel: int) -> np.ndarray:
    """Integers in -4..4, one pattern per (partition, bucket)."""
    k = np.arange(numel, dtype=np.int64)
    return (((partition * 7 + number * 3 + k * 5) % 9) - 4).astype(np.float64)


def grad_term(rank: int, step: int, number: int, numel: int) -> np.ndarray:
    """The rank's data-dependent gradient part: integers in -3..3."""
    k = np.arange(numel, dtype=np.int64)
    return (((rank * 5 + step * 3 + number * 11 + k * (rank % 5 + 1)) % 7) - 3).astype(np.float64)


# ------------------------------------------------------------ sent values
FULL_VALUES = 4096  # arrays up to this size travel as values; larger ones as a digest


def encode_values(values: np.ndarray) -> list[float] | dict[str, Any]:
    """What a rank sends back for one array: the values, or for large arrays (timing runs
    with big buckets) their count and the SHA-256 of their float64 bytes."""
    arr = np.ascontiguousarray(values, dtype=np.float64).ravel()
    if arr.size <= FULL_VALUES:
        return arr.tolist()
    return {"n": int(arr.size), "sha256": hashlib.sha256(arr.tobytes()).hexdigest()}


def _bits(values: Sequence[float] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).view(np.int64)


def value_difference(got: list[float] | Mapping[str, Any], want: np.ndarray) -> str | None:
    """None when ``got`` (see :func:`encode_values`) has the bits of ``want``, else what differs.

    >>> value_difference([1.0, 2.5], np.array([1.0, 2.0]))
    '1 of 2 elements differ, first element 1: got 2.5, expected 2.0'
    """
    want = np.ascontiguousarray(want, dtype=np.float64).ravel()
    if isinstance(got, Mapping):
        if got["n"] != want.size:
            return f"{got['n']} elements, expected {want.size}"
        same = got["sha256"] == hashlib.sha256(want.tobytes()).hexdigest()
        return None if same else f"the {want.size} elements differ (SHA-256 of their bits)"
    arr = np.asarray(got, dtype=np.float64).ravel()
    if arr.size != want.size:
        return f"{arr.size} elements, expected {want.size}"
    bad = np.nonzero(_bits(arr) != _bits(want))[0]
    if not bad.size:
        return None
    i = int(bad[0])
    return (f"{bad.size} of {want.size} elements differ, first element {i}: got "
            f"{float(arr[i])!r}, expected {float(want[i])!r}")


# ---------------------------------------------------------------- fsdp2 ref
FSDP_DIMS = (8, 16, 4)     # in, hidden, out of the two bias-free Linear layers
FSDP_BATCH = 4
FSDP_LR_EXP = 8


def fsdp_weights(partition: int) -> list[np.ndarray]:
    """Initial weights (integers in -2..2) of the two layers, ``(out, in)`` like ``nn.Linear``."""
    d_in, d_h, d_out = FSDP_DIMS
    out = []
    for layer, shape in enumerate(((d_h, d_in), (d_out, d_h))):
        k = np.arange(shape[0] * shape[1]).reshape(shape)
        out.append((((k * 3 + partition * 5 + layer * 7) % 5) - 2).astype(np.float64))
    return out


def fsdp_batch(rank: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """The rank's input ``x`` (batch, in) and loss weights ``c`` (batch, out): small integers."""
    d_in, _, d_out = FSDP_DIMS
    i = np.arange(FSDP_BATCH * d_in).reshape(FSDP_BATCH, d_in)
    x = (((i * (rank % 3 + 1) + step * 5 + rank) % 7) - 3).astype(np.float64)
    j = np.arange(FSDP_BATCH * d_out).reshape(FSDP_BATCH, d_out)
    c = (((j + rank * 2 + step) % 3) - 1).astype(np.float64)
    return x, c


def fsdp_reference(members: Sequence[int], partition: int, steps: int) -> list[np.ndarray]:
    """Weights after ``steps`` SGD steps of ``loss = sum(c * (x W1^T W2^T))`` summed over the
    replicas (FSDP with a gradient divide factor of 1)."""
    w1, w2 = fsdp_weights(partition)
    lr = 2.0 ** -FSDP_LR_EXP
    for t in range(steps):
        g1 = np.zeros_like(w1)
        g2 = np.zeros_like(w2)
        for r in members:
            x, c = fsdp_batch(r, t)
            g2 += c.T @ (x @ w1.T)
            g1 += (c @ w2).T @ x
        w1, w2 = w1 - lr * g1, w2 - lr * g2
    return [w1, w2]
