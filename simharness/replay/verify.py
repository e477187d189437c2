"""Moved to :mod:`simharness.live.verify`; this path re-exports it for one release."""

from ..live.verify import (  # noqa: F401
    MAX_RECORDED,
    _alias_mismatches,
    _check,
    _order_mismatches,
    all_gather_checks,
    all_gather_ranks,
    call_getter,
    compare_getters,
    getter_for,
    is_group,
    megatron_communicators,
    membership_mismatches,
    mismatch,
    torch_ranks,
)
