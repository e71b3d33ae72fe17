"""The repository's own pins of a patch's sha256 that a rewrite left behind.

A series rebase rewrites its patch files (canonical form, new index lines), so
their sha256 moves; the lockfile and SHA256SUMS move with it, but a repository
may also pin each patch in files of its own (a JSON stack lock, a KEY=VALUE
lock, a Containerfile's ``sha256sum -c`` line). Those are read, not rewritten:
every line of a text file of the repository that still holds an old sha256 is
reported with the new one, so the drift is never silent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from patchkit.core.outcome import Change

#: Files read for old pins: larger ones are not a lock or a build file.
MAX_BYTES = 1 << 20
# Patchkit's own records: updated with the rewrite, or pinning the old bytes on purpose (recorded audits).
_SKIP_FILES = {"lockfile.toml", "audits.toml", "SHA256SUMS"}
_SKIP_DIRS = {".git", ".patchkit", "resolutions", "node_modules", "__pycache__"}


@dataclass(frozen=True)
class StalePin:
    """A line of a repository file that still holds a rewritten patch's old sha256."""

    file: str
    line: int
    what: str  # the pin that moved, as the rebase names it
    old: str
    new: str

    def message(self) -> str:
        return (
            f"{self.file}:{self.line} still pins sha256 {self.old} ({self.what}); "
            f"the file's sha256 is now {self.new}: update it"
        )

    def as_dict(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "what": self.what, "old": self.old, "new": self.new}


def stale_pins(root: Path, changes: list[Change]) -> list[StalePin]:
    """Every line of the repository's text files that holds the old sha256 of a ``.sha256`` change."""
    moved = {c.old.lower(): c for c in changes if c.what.endswith(".sha256") and len(c.old) == 64 and c.old != c.new}
    if not moved:
        return []
    out: list[StalePin] = []
    for rel in _text_files(root):
        try:
            text = (root / rel).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        # Only the pins the file holds at all are looked for line by line: one search of the whole
        # text each, where every line used to be searched for every pin that moved.
        whole = text.lower()
        held = {old: c for old, c in moved.items() if old in whole}
        if not held:
            continue
        for n, line in enumerate(text.splitlines(), start=1):
            low = line.lower()
            out += [StalePin(rel, n, c.what, old, c.new) for old, c in held.items() if old in low]
    return out


def _text_files(root: Path) -> list[str]:
    """The repository's files that may pin a patch: regular, small, not patchkit's own records; sorted."""
    out = []
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in files:
            path = Path(here) / name
            rel = path.relative_to(root).as_posix()
            if rel in _SKIP_FILES or path.is_symlink():
                continue
            try:
                if path.stat().st_size > MAX_BYTES:
                    continue
            except OSError:
                continue
            out.append(rel)
    return sorted(out)
