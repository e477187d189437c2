"""The result type of every check: layout checks and topology checks alike."""

from __future__ import annotations

from dataclasses import dataclass, field

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One named result of a check.

    ``code`` is a stable identifier (``ag-mismatch``, ``partition``...),
    ``severity`` one of ``error``, ``warning``, ``info``; ``ranks`` the global
    ranks concerned (possibly truncated for huge worlds, see ``n_ranks``).

    >>> Finding("partition", "error", "dp: rank 3 in 2 groups", (3,)).severity
    'error'
    """

    code: str
    severity: str
    message: str
    ranks: tuple[int, ...] = ()
    groups: tuple[str, ...] = field(default=())

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "ranks": list(self.ranks),
            "groups": list(self.groups),
        }
