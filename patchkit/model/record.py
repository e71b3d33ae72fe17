"""A record of files already verified, so an unchanged multi-GB model cache re-verifies in seconds.

Each entry maps a blob's real path to the stamp it had when it was hashed
(size, mtime, ctime, inode, device), the algorithm and the digest found. A
later verification trusts the recorded digest while the stamp is unchanged.
What that trusts: that nothing rewrote the file in place while keeping its
size, mtime and ctime (ctime cannot be set back without changing the clock,
so only a deliberate write with the clock moved, or a corruption below the
file system, such as a flipped bit on disk, goes unnoticed). ``--full``
ignores the record.

The record is a rebuildable cache: written atomically (never half), read
leniently (a damaged record counts as empty).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from patchkit.errors import WriteFailed
from patchkit.store.repo import atomic_write

FORMAT = 1


def stamp(st: os.stat_result) -> list[int]:
    """What must stay the same for a recorded digest to be trusted."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


class VerifyRecord:
    """Digests of blobs, keyed by real path and valid while the file's stamp is unchanged."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, list[object]] = {}
        self._changed = False
        try:
            doc = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return
        if isinstance(doc, dict) and doc.get("format") == FORMAT and isinstance(doc.get("files"), dict):
            self._entries = doc["files"]

    @classmethod
    def for_cache(cls, store: Path, cache_root: Path, repo_folder: str) -> VerifyRecord:
        """The record of one repository folder of one Hugging Face cache, kept under ``store``."""
        key = hashlib.sha256(str(cache_root.resolve()).encode()).hexdigest()[:16]
        return cls(store / "model-verify" / f"{key}-{repo_folder}.json")

    def known(self, real: str, st: os.stat_result, algorithm: str) -> str | None:
        """The digest recorded for ``real`` if its stamp and algorithm are unchanged."""
        entry = self._entries.get(real)
        if not isinstance(entry, list) or len(entry) != 3:
            return None
        recorded, algo, digest = entry
        if recorded != stamp(st) or algo != algorithm or not isinstance(digest, str):
            return None
        return digest

    def remember(self, real: str, st: os.stat_result, algorithm: str, digest: str) -> None:
        self._entries[real] = [stamp(st), algorithm, digest]
        self._changed = True

    def forget(self, real: str) -> None:
        if self._entries.pop(real, None) is not None:
            self._changed = True

    def save(self) -> None:
        """Write the record if it changed; a record that cannot be written only costs speed."""
        if not self._changed:
            return
        data = json.dumps({"format": FORMAT, "files": self._entries}, sort_keys=True).encode()
        with contextlib.suppress(WriteFailed, OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, data, durable=False)
