"""How a patch itself changed: the old patch against the new one, as ``git range-diff`` shows commits.

After a rebase the new diff is mostly the old one at new line numbers; what a reviewer must read
is what differs between the two patches. Both diffs are cut into *change blocks* (each run of
``-``/``+`` lines of a hunk, without its context), and the two lists of blocks are aligned: a
block that is the same in both is a pure move (new line numbers, new context) and is not shown;
the rest is shown line by line, each line of either patch prefixed by `` `` (in both), ``-`` (only
in the old patch) or ``+`` (only in the new one). The hunk counts are compared: fewer hunks
means part of the patch went upstream or was lost, unless every change is still there (hunks
merged because upstream's lines between them changed), which is said too.

Pure: diff bytes in, a value out.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchkit.core.diffs import DiffError, Hunk, parse

Line = tuple[bytes, bytes]  # (tag, content) of one diff line, tag b"-" or b"+"


@dataclass(frozen=True)
class Block:
    """One run of changed lines of a hunk, and the header of the hunk it is in."""

    header: str
    lines: tuple[Line, ...]


@dataclass(frozen=True)
class Change:
    """A stretch where the two patches differ: ``old`` blocks became ``new`` blocks."""

    old: tuple[Block, ...]
    new: tuple[Block, ...]

    def rows(self) -> list[tuple[str, bytes]]:
        """The interdiff lines: (`` ``/``-``/``+``, the patch line with its own tag)."""
        a = [tag + text for b in self.old for tag, text in b.lines]
        b = [tag + text for blk in self.new for tag, text in blk.lines]
        rows: list[tuple[str, bytes]] = []
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
            if op == "equal":
                rows += [(" ", line) for line in a[i1:i2]]
                continue
            rows += [("-", line) for line in a[i1:i2]]
            rows += [("+", line) for line in b[j1:j2]]
        return rows

    @property
    def where(self) -> str:
        old = ", ".join(dict.fromkeys(b.header for b in self.old)) or "-"
        new = ", ".join(dict.fromkeys(b.header for b in self.new)) or "-"
        return f"old {old} / new {new}"


@dataclass(frozen=True)
class Interdiff:
    """The old patch against the new: the hunk counts, and every stretch that is not a pure move."""

    old_hunks: int
    new_hunks: int
    changes: tuple[Change, ...]
    all_kept: bool  # every change block of the old patch is in the new one

    @property
    def empty(self) -> bool:
        return not self.changes and self.old_hunks == self.new_hunks

    @property
    def shrank(self) -> bool:
        return self.new_hunks < self.old_hunks

    def headline(self) -> str:
        counts = f"{self.old_hunks} hunk{'s' * (self.old_hunks != 1)} -> {self.new_hunks}"
        if self.shrank and self.all_kept:
            return f"{counts} (every change kept: hunks merged)"
        if self.shrank:
            return f"{counts}: the patch shrank (part of it went upstream, or was lost)"
        if not self.changes:
            return f"{counts}: the same changes, moved"
        n = len(self.changes)
        return f"{counts}; {n} stretch{'es' * (n != 1)} changed"

    def lines(self) -> list[str]:
        """The interdiff as text: the headline, then each changed stretch with its hunk headers."""
        out = [self.headline()]
        for c in self.changes:
            out.append(f"@@ {c.where} @@")
            out += [
                f"{mark}{line.decode('utf-8', 'replace').rstrip(chr(10)).rstrip(chr(13))}" for mark, line in c.rows()
            ]
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "old_hunks": self.old_hunks,
            "new_hunks": self.new_hunks,
            "shrank": self.shrank,
            "all_kept": self.all_kept,
            "lines": self.lines(),
        }


def at_revision(root: Path, rev: str, rel: str) -> bytes | None:
    """A repository file as committed at ``rev`` (``git show REV:./FILE``); None when it was not there."""
    from patchkit.vcs import gitclient

    return gitclient.show(root, rev, rel)


def blocks(diff: bytes) -> tuple[int, list[Block]]:
    """The number of hunks of a one-file diff and its change blocks, in order."""
    if not diff.strip():
        return 0, []
    hunks = [h for f in parse(diff) for h in f.hunks]
    return len(hunks), hunk_blocks(hunks)


def hunk_blocks(hunks: Sequence[Hunk]) -> list[Block]:
    """The change blocks of these hunks, in order: each run of ``-``/``+`` lines, without context."""
    out: list[Block] = []
    for h in hunks:
        header = f"-{h.old_start},{h.old_len} +{h.new_start},{h.new_len}"
        run: list[Line] = []
        for tag, text in h.lines:
            if tag != b" ":
                run.append((tag, text))
            elif run:
                out.append(Block(header, tuple(run)))
                run = []
        if run:
            out.append(Block(header, tuple(run)))
    return out


def compare(old_diff: bytes, new_diff: bytes) -> Interdiff | None:
    """The interdiff of two diffs of one file; None when either does not parse."""
    try:
        old_hunks, old = blocks(old_diff)
        new_hunks, new = blocks(new_diff)
    except DiffError:
        return None
    return _align(old_hunks, old, new_hunks, new)


def compare_hunks(old: Sequence[Hunk], new: Sequence[Hunk]) -> Interdiff:
    """The interdiff of one file's hunks in the old patch against its hunks in the new one (parsed already)."""
    return _align(len(old), hunk_blocks(old), len(new), hunk_blocks(new))


def _align(old_hunks: int, old: list[Block], new_hunks: int, new: list[Block]) -> Interdiff:
    keys_old = [b.lines for b in old]
    keys_new = [b.lines for b in new]
    changes = []
    matcher = difflib.SequenceMatcher(None, keys_old, keys_new, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "equal":
            changes.append(Change(tuple(old[i1:i2]), tuple(new[j1:j2])))
    kept = not any(c.old for c in changes)
    return Interdiff(old_hunks, new_hunks, tuple(changes), kept)
