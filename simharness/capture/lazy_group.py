"""Moved to :mod:`simharness.launch.lazy_group` (capture and the GPU shim of ``simharness run``
both use it); this path re-exports it for one release."""

from ..launch.lazy_group import (  # noqa: F401
    _REAL_GLOO,
    COLLECTIVES,
    LazyGlooGroup,
    _delegate,
    census,
    lazy_gloo_subgroups,
)
