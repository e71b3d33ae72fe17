"""What a write operation changed: the pins it moved and the files it wrote or removed.

A leaf module: every command that writes the deployment returns an ``Outcome``,
and the reports print it, without importing the operations themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Change:
    """One pin that changed: what, and its old and new value."""

    what: str
    old: str
    new: str

    def as_dict(self) -> dict[str, str]:
        return {"what": self.what, "old": self.old, "new": self.new}


@dataclass
class Outcome:
    """What an operation changed on disk."""

    changes: list[Change] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    output: bytes = b""
    # What the user should look at although the write succeeded (printed as "note: …" on stderr).
    notes: list[str] = field(default_factory=list)
