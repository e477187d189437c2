"""The typed error of the topology package."""

from __future__ import annotations

from ..errors import SimharnessError


class TopologyError(SimharnessError, ValueError):
    """A topology file, node count, placement or model input that cannot be used.

    The message names the file (when there is one), the field, the value found
    and what was expected, e.g.
    ``topologies/x.toml: [scale_up] domain_gpus: expected a whole number >= 1, got 'eight'``.
    """

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        super().__init__(message)
        self.source = source
        self.field = field
