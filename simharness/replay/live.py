"""Moved to :mod:`simharness.live.job`; this path re-exports it for one release."""

from ..live.job import _emit, verify_live  # noqa: F401

__all__ = ["verify_live"]
