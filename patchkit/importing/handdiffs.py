"""Hand-kept diffs: which file each part describes, and what undoing them gives.

Hand-kept diffs name their files inconsistently (``a/<upstream path>``
against ``b/<overlay file name>``, ``b/patches/<file>``, or the upstream path
on both sides), cover several files in one diff, or are "incremental" against
an earlier version of an overlay. Both ``patchkit import`` and ``patchkit
check`` use these functions, so they agree on every diff. Pure: bytes in,
results out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath

from patchkit import diffs


@dataclass(frozen=True)
class Candidate:
    """A mounted file a diff section may describe: its key, repository path and container target."""

    key: str
    rel: str
    target: str


@dataclass(frozen=True)
class Match:
    candidate: Candidate | None
    upstream_path: str | None
    against: str  # upstream, overlay or new


class Index:
    """Candidates looked up by every name a diff header may give them, built once for many diffs."""

    def __init__(self, candidates: list[Candidate]) -> None:
        self.by_file: dict[str, Candidate] = {}
        self.by_suffix: dict[str, Candidate] = {}
        for c in candidates:
            for name in (c.rel, PurePosixPath(c.rel).name, f"patches/{c.rel}"):
                self.by_file.setdefault(name, c)
            parts = c.target.split("/")
            for k in range(1, len(parts)):
                self.by_suffix.setdefault("/".join(parts[k:]), c)


def match(fd: diffs.FileDiff, candidates: list[Candidate] | Index) -> Match:
    """The file one diff section describes, the upstream path its header states, and its old side.

    A header path names a file by its repository path, its file name or
    ``patches/<path>``; a path that ends a candidate's container target is the
    upstream path of that file.
    """
    index = candidates if isinstance(candidates, Index) else Index(candidates)
    old, new = diffs.strip_prefix(fd.old_path), diffs.strip_prefix(fd.new_path)
    found: Candidate | None = None
    upstream_path: str | None = None
    for name in (new, old):
        if name is None:
            continue
        if (c := index.by_file.get(name)) is not None:
            found = found or c
        elif (c := index.by_suffix.get(name)) is not None:
            found = found or c
            upstream_path = upstream_path or name
    if fd.old_path is None:
        against = "new"
    elif found is not None and old is not None and (old == found.rel or old.startswith("patches/")):
        against = "overlay"
    else:
        against = "upstream"
    return Match(found, upstream_path, against)


@dataclass
class Undone:
    """The result of undoing one file's diffs newest first."""

    base: bytes | None = None
    stale: tuple[str, int, str] | None = None  # (diff file, line, why)
    incremental: set[str] = field(default_factory=set)


def undo(data: bytes, sections: list[tuple[str, diffs.FileDiff]]) -> Undone:
    """Undo ``sections`` (oldest first, as (diff file, section)) on ``data``, newest first.

    When undoing the newest leaves a file that an older diff undoes, the newer
    one was written against that earlier version of the file: it is
    incremental. A section that does not undo means the file changed after
    that diff was made (stale); ``base`` is then None.
    """
    out = Undone()
    current = data
    for k in range(len(sections) - 1, -1, -1):
        rel, fd = sections[k]
        try:
            current = diffs.apply(fd.reversed(), current)
        except diffs.ApplyError as e:
            out.stale = (rel, e.line, e.message)
            return out
        if k > 0:
            out.incremental.add(rel)
    out.base = current
    return out
