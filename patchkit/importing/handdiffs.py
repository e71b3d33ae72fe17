"""Hand-kept diffs: which file each part describes, and what undoing them gives.

Hand-kept diffs name their files inconsistently (``a/<upstream path>``
against ``b/<overlay file name>``, ``b/patches/<file>``, or the upstream path
on both sides), cover several files in one diff, or are "incremental" against
an earlier version of an overlay. Both ``patchkit import`` and ``patchkit
check`` use these functions, so they agree on every diff. Pure: bytes in,
results out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from patchkit.core import diffs
from patchkit.lockfile.model import HandDiff, Lockfile, PatchKind


@dataclass(frozen=True)
class Candidate:
    """A mounted file a diff section may describe: its key, repository path and container target."""

    key: str
    rel: str
    target: str
    upstream_path: str | None = None  # as the provenance states it, for a file vendored from another project


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
            if c.upstream_path:
                # A vendored file's upstream path need not end its target (triton's python/… in vllm/third_party/).
                self.by_suffix.setdefault(c.upstream_path, c)


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
    """The result of undoing one file's diffs newest first.

    ``stale``: every diff that did not undo, as (diff file, line, why), each on
    its own; ``shifted``: diffs that undid only some lines away from their
    headers (stacked on another diff); ``base`` is None when any is stale.
    """

    base: bytes | None = None
    stale: list[tuple[str, int, str]] = field(default_factory=list)
    incremental: set[str] = field(default_factory=set)
    shifted: set[str] = field(default_factory=set)


def undo(data: bytes, sections: list[tuple[str, diffs.FileDiff]]) -> Undone:
    """Undo ``sections`` (oldest first, as (diff file, section)) on ``data``, newest first.

    When undoing the newest leaves a file that an older diff undoes, the newer
    one was written against that earlier version of the file: it is
    incremental. A diff stacked on another may state line numbers of a file
    with more or fewer lines above its hunks: its hunks may undo some lines
    away, every line exact (an offset, never fuzz). A section that does not
    undo at all means the file changed after that diff was made (stale); it is
    left done, the older ones are still tried, so each stale diff is found.
    """
    out = Undone()
    current = data
    for k in range(len(sections) - 1, -1, -1):
        rel, fd = sections[k]
        reverse = fd.reversed()
        try:
            current = diffs.apply(reverse, current)
        except diffs.ApplyError as e:
            try:
                current, _ = diffs.apply_shifted(reverse, current)
            except diffs.ApplyError:
                out.stale.append((rel, e.line, e.message))
                continue
            out.shifted.add(rel)
        if k > 0:
            out.incremental.add(rel)
    out.stale.reverse()  # oldest first, as the sections
    out.base = None if out.stale else current
    return out


def whole_file_stale(data: bytes, fd: diffs.FileDiff) -> str | None:
    """Why a part that adds a file whole (``--- /dev/null``) no longer gives ``data``, or None when it does.

    Such a part of a multi-file diff is easily left behind when the file
    moves on: its body is the file as it was, so it is stale like any other.
    """
    body = b"".join(c for h in fd.hunks for t, c in h.lines if t == b"+")
    if body == data:
        return None
    have, want = diffs.split_lines(body), diffs.split_lines(data)
    first = next((k for k, (a, b) in enumerate(zip(have, want, strict=False)) if a != b), min(len(have), len(want)))
    return (
        f"it adds a file of {len(have)} lines, but the file has {len(want)} lines (they differ from line {first + 1})"
    )


@dataclass
class Chains:
    """A lockfile's ``[[diffs]]`` read and sorted by patch.

    ``parts``: each patch's diff parts against upstream or an earlier overlay,
    oldest first, as (diff file, part); ``adds_whole_file``: patches a part
    creates from nothing, with ``new_file_parts`` where each such part is (diff
    file, line); ``strict``: every bad hunk of each diff that does not
    parse strictly (hand-edited hunk counts), each with its line; ``first_line``: each diff's first file header;
    ``unreadable``: patch name -> why one of its diffs could not be read;
    ``leftover``: diffs with a part that is not a change to one of its patches
    (a whole new file, or a file none of them is), which a canonical diff of
    its patches does not replace; ``whole_modules``: for each such diff, the
    modules and transformers whose whole file it holds.
    """

    parts: dict[str, list[tuple[str, diffs.FileDiff]]] = field(default_factory=dict)
    adds_whole_file: set[str] = field(default_factory=set)
    new_file_parts: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    whole_parts: dict[str, list[tuple[str, diffs.FileDiff]]] = field(default_factory=dict)  # the parts themselves
    strict: dict[str, list[diffs.DiffError]] = field(default_factory=dict)
    first_line: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    leftover: set[str] = field(default_factory=set)
    unmatched: set[str] = field(default_factory=set)  # diffs with a part that matches none of its patches
    whole_modules: dict[str, set[str]] = field(default_factory=dict)  # diff -> patches not overlays it adds whole


def chains(lock: Lockfile, read: Callable[[HandDiff], bytes | None]) -> Chains:
    """Read every hand-kept diff (``read`` gives its bytes, None to skip it) and match its parts.

    Parts are matched only against the patches the entry names, the way
    ``patchkit import`` matched them. An ``OSError`` from ``read`` or a diff
    with no file diff at all makes its patches ``unreadable``.
    """
    out = Chains()
    by_name = {p.name: p for p in lock.patches}
    for d in lock.diffs:
        rel = str(d.file)
        try:
            data = read(d)
            if data is None:
                continue
            sections, repairs = diffs.parse_lenient(data)
        except (OSError, diffs.DiffError) as e:
            for n in d.patches:
                out.unreadable[n] = f"{rel} cannot be read as a diff ({e})"
            continue
        if repairs:
            out.strict[rel] = repairs
        out.first_line[rel] = sections[0].line
        candidates = Index(
            [
                Candidate(
                    p.name, str(p.file), str(p.target), str(p.origin.path) if p.origin and p.origin.path else None
                )
                for n in d.patches
                if (p := by_name.get(n)) is not None and p.file is not None
            ]
        )
        for fd in sections:
            m = match(fd, candidates)
            if m.candidate is None:
                out.leftover.add(rel)
                out.unmatched.add(rel)
                continue
            if m.against == "new":
                if (p := by_name.get(m.candidate.key)) is None or p.kind is not PatchKind.OVERLAY:
                    out.leftover.add(rel)  # a new module's whole file: no canonical diff replaces it
                    out.whole_modules.setdefault(rel, set()).add(m.candidate.key)
                out.adds_whole_file.add(m.candidate.key)
                out.new_file_parts.setdefault(m.candidate.key, []).append((rel, fd.line))
                out.whole_parts.setdefault(m.candidate.key, []).append((rel, fd))
            else:
                out.parts.setdefault(m.candidate.key, []).append((rel, fd))
    return out
