"""The user cache: a content-addressed store of upstream base files.

Bases are third-party files, so they are never committed; patchkit keeps the
ones it has seen (from ``add --base``, from reconstructing a committed
overlay's base, the new upstream files of a rebase) under ``$PATCHKIT_CACHE``
or ``$XDG_CACHE_HOME/patchkit``, named by their sha256 and checked on every
read.

A file is stored loose, ``blobs/sha256/<sha256>``, or, when many are stored
at once (a rebase's thousand new upstream files), in a pack: the files one
after another in ``blobs/packs/<id>.pack`` and where each lies in
``blobs/packs/<id>.idx``. On this kind of disk creating a file costs about
as much as writing 50 KB, so a thousand loose files cost a rebase a second
where one pack costs a few milliseconds. A pack is written whole and then
named (its index last), so a reader sees all of it or none; every read is
checked against the sha256 it is asked for, so a damaged entry, loose or
packed, is only a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from patchkit.core.hashing import Blob, pin_mismatch, sha256_bytes
from patchkit.errors import WriteFailed
from patchkit.store.repo import atomic_write

#: The first line of a pack's index; a file without it is not read.
PACK_INDEX_HEADER = b"patchkit blob pack 1\n"
#: Fewer new files than this in a batch are stored loose: a pack pays off from a handful on.
PACK_MIN = 8

# (pack file, offset, size) of a packed file
_Packed = tuple[str, int, int]


def cache_dir(environ: Mapping[str, str], override: str | os.PathLike[str] | None = None) -> Path:
    """The user cache: ``override`` (--cache-dir), else $PATCHKIT_CACHE, else $XDG_CACHE_HOME/patchkit."""
    if override:
        return Path(override)
    if env := environ.get("PATCHKIT_CACHE"):
        return Path(env)
    xdg = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "patchkit"


class BlobStore:
    """Files by sha256. Reads verify the hash; a corrupt entry reads as missing.

    ``put`` stores a file at once, loose. Inside ``with store.batch():`` the
    files put are held in memory (and read from there) and stored together
    when the block ends: in one pack when there are ``PACK_MIN`` or more.
    """

    def __init__(self, root: Path) -> None:
        self.cache = root  # the cache directory, for the other caches kept beside the blobs
        self.root = root / "blobs" / "sha256"
        self.packs = root / "blobs" / "packs"
        self._index: dict[str, _Packed] | None = None  # read on the first miss of a loose file
        self._pending: dict[str, bytes] | None = None  # files put inside a batch, not stored yet
        self._depth = 0

    def get(self, hexdigest: str) -> bytes | None:
        if self._pending is not None and (held := self._pending.get(hexdigest)) is not None:
            return held
        data: bytes | None
        try:
            data = (self.root / hexdigest).read_bytes()
        except OSError:
            data = self._read_packed(hexdigest)
        if data is None:
            return None
        return data if pin_mismatch(data, hexdigest) is None else None  # a damaged entry is a miss

    def put(self, data: bytes | Blob) -> str:
        """Store ``data`` under its sha256 (a ``Blob``'s own); a cache that cannot be written only costs time."""
        digest = sha256_bytes(data)
        raw = data.data if isinstance(data, Blob) else data
        if self._pending is not None:
            self._pending.setdefault(digest, raw)
        elif not self._has(digest):
            self._store_loose(digest, raw)
        return digest

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Hold the files put inside the block and store them when it ends (nested blocks store at the outer end).

        They are stored even when the block raises: what was verified stays
        cached for the next attempt.
        """
        if self._depth == 0:
            self._pending = {}
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                pending, self._pending = self._pending or {}, None
                self._store(pending)

    def _has(self, digest: str) -> bool:
        return (self.root / digest).exists() or digest in self._packed()

    def _store(self, files: dict[str, bytes]) -> None:
        new = {digest: data for digest, data in files.items() if not self._has(digest)}
        if len(new) < PACK_MIN:
            for digest, data in new.items():
                self._store_loose(digest, data)
            return
        with contextlib.suppress(WriteFailed):
            self._store_pack(new)

    def _store_loose(self, digest: str, data: bytes) -> None:
        with contextlib.suppress(WriteFailed):
            atomic_write(self.root / digest, data, durable=False)  # rebuilt if lost

    def _store_pack(self, files: dict[str, bytes]) -> None:
        """One pack of ``files``: the pack first, its index last, each renamed into place whole."""
        lines = [PACK_INDEX_HEADER]
        at = 0
        for digest, data in files.items():
            lines.append(b"%s %d %d\n" % (digest.encode("ascii"), at, len(data)))
            at += len(data)
        index = b"".join(lines)
        name = hashlib.sha256(index).hexdigest()
        pack = self.packs / f"{name}.pack"
        atomic_write(pack, b"".join(files.values()), durable=False)
        atomic_write(self.packs / f"{name}.idx", index, durable=False)
        if self._index is not None:
            self._index.update(_entries(index, str(pack)))

    def _packed(self) -> dict[str, _Packed]:
        """Where each packed file lies, from every pack's index (read once; a pack stored later is added)."""
        if self._index is None:
            self._index = {}
            with contextlib.suppress(OSError):
                for idx in sorted(self.packs.glob("*.idx")):
                    with contextlib.suppress(OSError):
                        self._index.update(_entries(idx.read_bytes(), str(idx.with_suffix(".pack"))))
        return self._index

    def _read_packed(self, digest: str) -> bytes | None:
        entry = self._packed().get(digest)
        if entry is None:
            return None
        pack, offset, size = entry
        try:
            with open(pack, "rb") as f:
                f.seek(offset)
                data = f.read(size)
        except OSError:
            return None
        return data if len(data) == size else None


def _entries(index: bytes, pack: str) -> Iterator[tuple[str, _Packed]]:
    """The (sha256, (pack, offset, size)) entries of a pack's index; none when it is not one."""
    if not index.startswith(PACK_INDEX_HEADER):
        return
    for line in index[len(PACK_INDEX_HEADER) :].splitlines():
        fields = line.split(b" ")
        if len(fields) == 3 and len(fields[0]) == 64 and fields[1].isdigit() and fields[2].isdigit():
            yield fields[0].decode("ascii"), (pack, int(fields[1]), int(fields[2]))
