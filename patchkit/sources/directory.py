"""Directory upstreams: a plain tree on disk, such as an unpacked wheel or an extracted image filesystem.

``DirSource(root, prefix)`` reads ``root/prefix/<path>``. ``root`` is the
boundary: symlinks are resolved the way the container that owns the tree
would see them, inside ``root`` (an absolute target starts at ``root``, and
``..`` stops at it), so no read ever leaves the tree, whatever its links
say. A tree is not immutable; its pin (a digest of every regular file) is
computed when first asked for, and reads are of the tree as it is then.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from patchkit.core.hashing import sha256_many
from patchkit.core.values import UpstreamPath
from patchkit.errors import BadInput, SourceError
from patchkit.sources.interface import Pin, Snapshot, UpstreamSource, check_path

# As many symlinks as Linux follows in one path lookup before giving up (ELOOP).
_MAX_LINKS = 40


class DirSource(UpstreamSource):
    """An upstream that is a directory tree; ``prefix`` is where the upstream's paths start in it.

    ``prefix`` is a relative path inside ``root`` (``""`` for ``root`` itself),
    e.g. ``usr/local/lib/python3.12/dist-packages`` for an image filesystem.
    """

    kind = "dir"

    def __init__(self, root: Path, prefix: str = "") -> None:
        self.root = root
        self.prefix = _check_prefix(prefix)

    def __repr__(self) -> str:
        return f"DirSource({str(self.root)!r}, prefix={self.prefix!r})"

    def snapshot(self, ref: str = "") -> DirSnapshot:
        """The tree at ``root/prefix``. ``ref`` is ignored: a tree has no versions.

        (Callers pass the directory they built the source from, or nothing;
        another tree is another ``DirSource``.) Raises ``BadInput`` when
        ``root/prefix`` is not a directory.
        """
        del ref
        snap = DirSnapshot(self.root, self.prefix)
        resolved = _resolve_in_root(os.path.abspath(self.root), self.prefix)
        if resolved is None or not stat.S_ISDIR(resolved[1].st_mode):
            raise BadInput(
                f"{snap.tree}: not a directory",
                "give the directory that holds the upstream tree (an unpacked wheel, an extracted image)",
            )
        return snap


class DirSnapshot(Snapshot):
    """A directory tree as it is on disk; its pin is a digest of every regular file under it."""

    def __init__(self, root: Path, prefix: str = "") -> None:
        self.root = root
        self.prefix = prefix
        self._pin: Pin | None = None

    def __repr__(self) -> str:
        return f"DirSnapshot({str(self.tree)!r})"

    @property
    def tree(self) -> Path:
        """``root/prefix``: where the upstream's paths start."""
        return self.root / self.prefix if self.prefix else self.root

    @property
    def pin(self) -> Pin:
        """``kind="dir"``, ``path`` = ``root/prefix``, ``sha256`` = its ``tree_digest``; computed on first use."""
        if self._pin is None:
            self._pin = Pin(kind="dir", path=str(self.tree), sha256=self.tree_digest())
        return self._pin

    def tree_digest(self) -> str:
        """SHA-256 over the tree's listing: for each regular file, sorted by its relative path's bytes,
        ``<relative path> NUL <hex sha256 of its content> LF``.

        Symlinks, directories and special files are not part of it; the
        files are hashed on all cores.
        """
        base = self._resolved_tree()
        files: dict[bytes, Path] = {}
        stack: list[str] = [base]
        try:
            while stack:
                current = stack.pop()
                with os.scandir(current) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            rel = os.path.relpath(entry.path, base).replace(os.sep, "/")
                            files[os.fsencode(rel)] = Path(entry.path)
        except OSError as e:
            raise SourceError(f"{e.filename}: cannot list the upstream tree ({e.strerror})") from e
        digests = sha256_many(files.values())
        h = hashlib.sha256()
        for name in sorted(files):
            digest = digests[files[name]]
            if isinstance(digest, OSError):
                raise SourceError(f"{files[name]}: cannot read the upstream tree ({digest.strerror})") from digest
            h.update(name + b"\0" + digest.encode("ascii") + b"\n")
        return h.hexdigest()

    def read(self, paths: Iterable[str]) -> dict[str, bytes | None]:
        """The bytes of each regular file at ``root/prefix/<path>``; None for anything else.

        A path that is missing, a directory, a special file, or reached
        through a symlink that leads nowhere inside ``root`` reads as None.
        A path that is not a clean relative path (``..``, absolute) raises
        ``BadInput``.
        """
        root = os.path.abspath(self.root)
        out: dict[str, bytes | None] = {}
        for p in paths:
            check_path(p)
            rel = f"{self.prefix}/{p}" if self.prefix else p
            resolved = _resolve_in_root(root, rel)
            if resolved is None or not stat.S_ISREG(resolved[1].st_mode):
                out[p] = None
                continue
            out[p] = _read_regular(resolved[0])
        return out

    def _resolved_tree(self) -> str:
        resolved = _resolve_in_root(os.path.abspath(self.root), self.prefix)
        if resolved is None or not stat.S_ISDIR(resolved[1].st_mode):
            raise BadInput(f"{self.tree}: not a directory (any more)")
        return resolved[0]


def _check_prefix(prefix: str) -> str:
    """A prefix is an upstream path (relative, no '..'); a trailing '/' is allowed."""
    prefix = prefix.rstrip("/")
    if prefix in ("", "."):
        return ""
    try:
        UpstreamPath(prefix)
    except ValueError as e:
        raise BadInput(f"directory prefix {e}") from e
    return prefix


def _resolve_in_root(root: str, rel: str) -> tuple[str, os.stat_result] | None:
    """Follow ``rel`` from ``root`` component by component, keeping every step inside ``root``.

    Symlinks are followed as if ``root`` were ``/`` (``chroot`` semantics, what
    a container sees): an absolute target restarts at ``root`` and ``..``
    never climbs above it. Returns the real path and its lstat, or None when
    any step is missing, not a directory, or there are too many links.
    """
    try:
        st = os.stat(root)
    except OSError:
        return None
    walk = _ChrootWalk(root, rel, st)
    while walk.pending:
        part = walk.pending.pop()
        if part in ("", "."):
            continue
        if not walk.step(part):
            return None
    if not walk.done:
        walk.st = os.stat(root)  # every step led back to root itself
    return os.path.join(root, *walk.done), walk.st


class _ChrootWalk:
    """A path being followed from ``root`` as a chroot would: the components left, those taken, links seen.

    ``st`` is the lstat of the last component looked at.
    """

    def __init__(self, root: str, rel: str, st: os.stat_result) -> None:
        self.root = root
        self.pending = [part for part in reversed(rel.split("/")) if part]
        self.done: list[str] = []
        self.links = 0
        self.st = st

    def step(self, part: str) -> bool:
        """Take one component (``..`` never climbs above root); False when the path cannot resolve."""
        if part == "..":
            if self.done:
                self.done.pop()
            return True
        path = os.path.join(self.root, *self.done, part)
        try:
            self.st = os.lstat(path)
        except OSError:  # missing, or a parent is not a directory
            return False
        if stat.S_ISLNK(self.st.st_mode):
            return self.follow(path)
        if self.pending and not stat.S_ISDIR(self.st.st_mode):
            return False
        self.done.append(part)
        return True

    def follow(self, path: str) -> bool:
        """Put a symlink's target in its place (an absolute one restarts at root); False past ``_MAX_LINKS``."""
        self.links += 1
        if self.links > _MAX_LINKS:
            return False
        try:
            target = os.readlink(path)
        except OSError:
            return False
        if target.startswith("/"):
            self.done = []
        self.pending.extend(reversed(target.split("/")))
        return True


def _read_regular(path: str) -> bytes | None:
    """Read a file that was a regular file when resolved; None if it changed into something else since."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SourceError(f"{path}: cannot read the upstream file ({e.strerror})") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError as e:
        raise SourceError(f"{path}: cannot read the upstream file ({e.strerror})") from e
    finally:
        os.close(fd)
