"""A rank's own child processes end with it: the code lives in
:mod:`simharness.launch.children` (shared by capture and ``simharness run``); this module
re-exports its names."""

from __future__ import annotations

from ..launch.children import (  # noqa: F401
    become_subreaper,
    descendants,
    end_descendants,
    end_processes,
)

__all__ = ["become_subreaper", "descendants", "end_descendants", "end_processes"]
