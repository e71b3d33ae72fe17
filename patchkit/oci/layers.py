"""The layer overlay (pure): which layer of an image a path comes from, and what it is there.

An image's filesystem is its layers stacked, the top one winning, with
whiteouts (``.wh.NAME``) deleting and opaque directories (``.wh..wh..opq``)
hiding what lies below (image-spec ``layer.md``). ``LayerScan`` is what one
layer says about the requested paths (collected by
patchkit.images.streams while its tar streams by); ``decide`` and
``Overlay`` fold the scans from the top; ``follow_links`` resolves the
symbolic links met. Paths in, decisions out: no I/O.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from patchkit.errors import BadInput

#: Symbolic links followed for one requested path before giving up (Linux allows 40).
MAX_SYMLINK_HOPS = 40


def normalise_path(path: str) -> str:
    """An absolute container path in normal form (``/a//b/./c`` is ``/a/b/c``); ``BadInput`` otherwise."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise BadInput(
            f"{path!r} is not an absolute container path",
            "write container paths from the root, e.g. /usr/local/lib/python3.12/dist-packages/vllm/envs.py",
        )
    if "\x00" in path:
        raise BadInput(f"{path!r} contains a NUL character")
    norm = "/" + posixpath.normpath(path).lstrip("/")
    if norm == "/":
        raise BadInput(f"{path!r} is the root directory, not a file")
    return norm


def member_path(name: str) -> str:
    """A tar member name (``./usr/lib/x``, ``usr/lib/x/``) as an absolute normal path."""
    return "/" + posixpath.normpath("/" + name).lstrip("/")


def link_target(path: str, linkname: str) -> str:
    """Where a symlink at ``path`` points, resolved inside the image's root ('..' stops at '/')."""
    joined = linkname if linkname.startswith("/") else posixpath.join(posixpath.dirname(path), linkname)
    return member_path(joined)


def _ancestors(path: str) -> list[str]:
    """The strict ancestors of ``path``, root first: ``/a/b/c`` -> ``/``, ``/a``, ``/a/b``."""
    parts = path.split("/")[1:-1]
    return ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


@dataclass
class LayerScan:
    """What one layer says about the requested paths, collected while its tar streams by.

    ``files``: requested paths that are regular files here, with their bytes.
    ``hardlinks``/``symlinks``: requested paths (and, for symlinks, ancestors of
    requested paths) that are links here, with their targets (absolute).
    ``others``: requested paths that are directories or special files here.
    ``nondirs``: ancestors of requested paths that are files here (nothing lies below them).
    ``whiteouts``: paths this layer deletes from the layers below it.
    ``opaque``: directories whose children in the layers below are hidden.
    """

    files: dict[str, bytes] = field(default_factory=dict)
    hardlinks: dict[str, str] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    others: set[str] = field(default_factory=set)
    nondirs: set[str] = field(default_factory=set)
    whiteouts: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Found:
    """The path is a regular file in this layer, with these bytes."""

    data: bytes


@dataclass(frozen=True)
class Absent:
    """The path does not exist (deleted, hidden, never there) or is not a regular file (a directory)."""


@dataclass(frozen=True)
class SymlinkTo:
    """The path leads, through a symbolic link here, to ``target`` (looked up from the top again)."""

    target: str


@dataclass(frozen=True)
class HardlinkTo:
    """The path is a hard link to ``target``, an earlier entry of the same layer."""

    target: str


#: What one layer decides for a path.
Outcome = Found | Absent | SymlinkTo | HardlinkTo


def decide(path: str, scan: LayerScan) -> Outcome | None:
    """What a layer decides for ``path``, given nothing above it did (pure); ``None``: look lower.

    Entries in the layer come first; the layer's whiteouts and opaque
    directories hide only what lies below it (image-spec ``layer.md``).
    """
    if path in scan.files:
        return Found(scan.files[path])
    if path in scan.hardlinks:
        return HardlinkTo(scan.hardlinks[path])
    if path in scan.symlinks:
        return SymlinkTo(scan.symlinks[path])
    if path in scan.others:
        return Absent()
    for anc in _ancestors(path):
        if anc in scan.symlinks:
            return SymlinkTo(scan.symlinks[anc] + path[len(anc) :])
        if anc in scan.nondirs or anc in scan.whiteouts or anc in scan.opaque:
            return Absent()
    if path in scan.whiteouts:
        return Absent()
    return None


class Overlay:
    """The union of an image's layers for a set of requested paths, fed one layer at a time from the top (pure).

    After each layer, every requested path is either decided (found, absent,
    a link to follow) or still ``pending``; when nothing is pending, the
    layers below need not be read.
    """

    def __init__(self, paths: Iterable[str]) -> None:
        self.pending: set[str] = set(paths)
        self.results: dict[str, bytes | None] = {}
        #: requested path -> the path it names through a symbolic link (followed from the top).
        self.symlinks: dict[str, str] = {}
        #: requested path -> (layer index, target path in that same layer).
        self.hardlinks: dict[str, tuple[int, str]] = {}

    @property
    def done(self) -> bool:
        """Whether every requested path is decided."""
        return not self.pending

    def wanted(self) -> frozenset[str]:
        """The paths still undecided."""
        return frozenset(self.pending)

    def ancestors(self) -> frozenset[str]:
        """The directories above the undecided paths (a whiteout or a file there decides them)."""
        return frozenset(a for p in self.pending for a in _ancestors(p))

    def apply(self, layer: int, scan: LayerScan) -> None:
        """Decide what ``scan`` (of layer ``layer``, counting from the top) decides."""
        for path in sorted(self.pending):
            outcome = decide(path, scan)
            if outcome is None:
                continue
            self.pending.discard(path)
            if isinstance(outcome, Found):
                self.results[path] = outcome.data
            elif isinstance(outcome, Absent):
                self.results[path] = None
            elif isinstance(outcome, SymlinkTo):
                self.symlinks[path] = outcome.target
            else:
                self.hardlinks[path] = (layer, outcome.target)

    def finish(self) -> None:
        """No layer is left: whatever is undecided does not exist."""
        for path in self.pending:
            self.results[path] = None
        self.pending.clear()


class SymlinkLoop(ValueError):
    """Symbolic links that lead back to themselves, or further than ``MAX_SYMLINK_HOPS``."""


def follow_links(path: str, links: Mapping[str, str], image: str = "the image") -> str:
    """Where ``path`` leads through the symbolic links known so far (pure); ``SymlinkLoop`` on a loop or long chain."""
    seen = [path]
    while path in links:
        path = links[path]
        if path in seen:
            raise SymlinkLoop(f"{image}: symbolic link loop: {' -> '.join([*seen, path])}")
        seen.append(path)
        if len(seen) > MAX_SYMLINK_HOPS:
            raise SymlinkLoop(f"{image}: too many levels of symbolic links resolving {seen[0]}")
    return path
