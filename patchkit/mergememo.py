"""Merges remembered between runs: a file's three-way merge result, found again by what went into it.

``merge.rebase_file`` is a pure function of base, ours, theirs and the path,
and all three versions are pinned by sha256, so its result can be kept in the
user cache and reused when the same merge comes again: the rebase run again
after ``--abort``, a bump retried, or a second deployment carrying the same
patches. The key also covers the merge code itself (the sources of
``patchkit.merge`` and ``patchkit.diffs`` and merge3's version), so a
patchkit upgrade never reads a result an older merge computed.

The cache is the user's own, trusted as their clone cache is; an entry that
does not decode (a pickle naming anything but ``patchkit.merge``'s records
is refused before it is built), or whose merged bytes do not match the
sha256 it recorded, reads as missing and the merge runs again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import merge3

from patchkit import diffs, merge
from patchkit.errors import WriteFailed
from patchkit.hashing import sha256_bytes
from patchkit.lockfile.reader import collection_paused
from patchkit.merge import MergeResult
from patchkit.repo import atomic_write
from patchkit.verdicts import Records

VERSION = 3
# A memo file: this line, then a pickle of {"entries": {key: (sha256 of the bytes, value)}}, read back
# by an unpickler that builds patchkit.merge's records and nothing else (``verdicts.Records``).
MAGIC = b"patchkit merge memo 3\n"


@functools.cache
def code_version() -> str:
    """A digest of the merge code: its sources and merge3's version (the module's own, cheaper than its metadata)."""
    h = hashlib.sha256(f"{VERSION}\0{merge3.__version__}\0".encode())
    for module in (merge, diffs):
        h.update(Path(module.__file__ or "").read_bytes())
    return h.hexdigest()


def key(*parts: str) -> str:
    """The name of one merge or diff: the code, then its inputs (sha256 of the files, the path)."""
    text = "\0".join((code_version(), *parts))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


class MergeMemo:
    """Merge results and diffs under ``<cache>/merges/``: one file for each set of merges a rebase made.

    One file per set, not per merge: creating a thousand small files costs
    more than the merges it saves on a busy file system. The file is named by
    the keys of its entries, so only the same set of merges finds it again.
    """

    def __init__(self, cache: Path) -> None:
        self.root = cache / "merges"

    def _path(self, kind: str, keys: Iterable[str]) -> Path:
        name = hashlib.sha256("\n".join(sorted(set(keys))).encode()).hexdigest()
        return self.root / f"{kind}-{name}.memo"

    def _read(self, kind: str, keys: list[str]) -> dict[str, tuple[str, Any]] | None:
        """The entries of exactly these keys, each (sha256 of its bytes, value), or None."""
        try:
            data = self._path(kind, keys).read_bytes()
        except OSError:
            return None
        if not data.startswith(MAGIC):
            return None
        with collection_paused():
            try:
                entries = _MergeRecords(io.BytesIO(memoryview(data)[len(MAGIC) :])).load()["entries"]
            except Exception:  # noqa: BLE001 - a damaged memo, whatever the error, is a miss
                return None
        if not isinstance(entries, dict) or sorted(entries) != sorted(set(keys)):
            return None
        if not all(isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], str) for e in entries.values()):
            return None
        return entries

    def _write(self, kind: str, entries: dict[str, tuple[str, Any]]) -> None:
        """Keep ``entries``; skipped when a value does not pickle or the cache cannot be written: only slower."""
        try:
            data = MAGIC + pickle.dumps({"entries": entries}, pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError):
            return
        with contextlib.suppress(WriteFailed):
            atomic_write(self._path(kind, entries), data, durable=False)

    def get(self, keys: list[str]) -> dict[str, MergeResult] | None:
        """The remembered results of exactly these merges, or None."""
        entries = self._read("merges", keys)
        if entries is None:
            return None
        out: dict[str, MergeResult] = {}
        for k, (digest, result) in entries.items():
            if not (isinstance(result, MergeResult) and _is_bytes(result.merged, digest)):
                return None
            out[k] = result
        return out

    def put(self, results: dict[str, MergeResult]) -> None:
        """Remember ``results``; what ``get`` could not build again reads as a miss there."""
        self._write("merges", {k: (sha256_bytes(r.merged), r) for k, r in results.items()})

    def get_diffs(self, keys: list[str]) -> dict[str, bytes] | None:
        """Remembered diffs (``canonical_diff`` of the new upstream file and the merged file), or None."""
        entries = self._read("diffs", keys)
        if entries is None:
            return None
        out: dict[str, bytes] = {}
        for k, (digest, diff) in entries.items():
            if not _is_bytes(diff, digest):
                return None
            out[k] = diff
        return out

    def put_diffs(self, diffs: dict[str, bytes]) -> None:
        self._write("diffs", {k: (sha256_bytes(d), d) for k, d in diffs.items()})


def _is_bytes(value: object, digest: str) -> bool:
    """Whether ``value`` is bytes with the sha256 recorded beside it."""
    return type(value) is bytes and sha256_bytes(value) == digest


class _MergeRecords(Records):
    """``patchkit.merge``'s records and enums: what make up a ``MergeResult``."""

    modules = (merge.__name__,)
