"""Moved to :mod:`simharness.step.pp_layout`; this path re-exports it for one release."""

from ..step.pp_layout import LETTERS, expand_layout, layout_split

__all__ = ["LETTERS", "expand_layout", "layout_split"]
