"""What a write changed (an ``Outcome``): the pins moved and the files written or removed, as text or JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from patchkit.core.safe import json_safe, printable

if TYPE_CHECKING:
    from patchkit.core.outcome import Outcome


def render(outcome: Outcome, fmt: str, nothing: str) -> str:
    """The report of ``outcome``; ``nothing`` is the text line when it changed nothing."""
    if fmt == "json":
        doc = {
            "changes": [c.as_dict() for c in outcome.changes],
            "written": outcome.written,
            "removed": outcome.removed,
        }
        return json.dumps(json_safe(doc), indent=2, sort_keys=True) + "\n"
    lines = [printable(f"{c.what}: {c.old} -> {c.new}") for c in outcome.changes]
    lines += [f"removed {printable(rel)}" for rel in outcome.removed]
    lines += [f"wrote {printable(rel)}" for rel in outcome.written]
    return "\n".join(lines) + "\n" if lines else nothing + "\n"


def notes(outcome: Outcome, fmt: str) -> str:
    """What the user should look at although the write succeeded (for stderr; JSON reports carry none)."""
    if fmt == "json":
        return ""
    return "".join(f"note: {printable(note)}\n" for note in outcome.notes)
