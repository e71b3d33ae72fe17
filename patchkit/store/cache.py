"""The user cache: a content-addressed store of upstream base files.

Bases are third-party files, so they are never committed; patchkit keeps the
ones it has seen (from ``add --base``, from reconstructing a committed
overlay's base) under ``$PATCHKIT_CACHE`` or ``$XDG_CACHE_HOME/patchkit``,
named by their sha256 and checked on every read.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from patchkit.core.hashing import Blob, pin_mismatch, sha256_bytes
from patchkit.errors import WriteFailed
from patchkit.store.repo import atomic_write


def cache_dir(environ: Mapping[str, str], override: str | os.PathLike[str] | None = None) -> Path:
    """The user cache: ``override`` (--cache-dir), else $PATCHKIT_CACHE, else $XDG_CACHE_HOME/patchkit."""
    if override:
        return Path(override)
    if env := environ.get("PATCHKIT_CACHE"):
        return Path(env)
    xdg = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "patchkit"


class BlobStore:
    """Files by sha256. Reads verify the hash; a corrupt entry reads as missing."""

    def __init__(self, root: Path) -> None:
        self.cache = root  # the cache directory, for the other caches kept beside the blobs
        self.root = root / "blobs" / "sha256"

    def get(self, hexdigest: str) -> bytes | None:
        try:
            data = (self.root / hexdigest).read_bytes()
        except OSError:
            return None
        return data if pin_mismatch(data, hexdigest) is None else None  # a damaged entry is a miss

    def put(self, data: bytes | Blob) -> str:
        """Store ``data`` under its sha256 (a ``Blob``'s own); a cache that cannot be written only costs time."""
        digest = sha256_bytes(data)
        path = self.root / digest
        if not path.exists():
            with contextlib.suppress(WriteFailed):
                atomic_write(path, data.data if isinstance(data, Blob) else data, durable=False)  # rebuilt if lost
        return digest
