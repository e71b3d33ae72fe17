"""Merges remembered between runs: a file's three-way merge result, found again by what went into it.

``merge.rebase_file`` is a pure function of base, ours, theirs and the path,
and all three versions are pinned by sha256, so its result can be kept in the
user cache and reused when the same merge comes again: the rebase run again
after ``--abort``, a bump retried, or a second deployment carrying the same
patches. The key also covers the merge code itself (the sources of
``patchkit.merge`` and ``patchkit.diffs`` and merge3's version), so a
patchkit upgrade never reads a result an older merge computed.

The cache is the user's own, trusted as their clone cache is; an entry that
does not decode, or whose merged bytes do not match the sha256 it recorded,
reads as missing and the merge runs again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import merge3

from patchkit import diffs, merge
from patchkit.errors import WriteFailed
from patchkit.hashing import sha256_bytes
from patchkit.merge import MergeResult
from patchkit.repo import atomic_write

VERSION = 2
# A memo file: this line, the length of its JSON header (8 bytes, big-endian), the header, then
# every byte string the entries hold, back to back (the header names each by offset and length).
MAGIC = b"patchkit merge memo 2\n"


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

    def _read(self, kind: str, keys: list[str]) -> tuple[dict[str, Any], memoryview] | None:
        """The entries of exactly these keys and the bytes they refer to, or None."""
        try:
            data = self._path(kind, keys).read_bytes()
        except OSError:
            return None
        start = len(MAGIC) + 8
        if not data.startswith(MAGIC) or len(data) < start:
            return None
        end = start + int.from_bytes(data[len(MAGIC) : start], "big")
        try:
            entries = json.loads(data[start:end])["entries"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(entries, dict) or sorted(entries) != sorted(set(keys)):
            return None
        return entries, memoryview(data)[end:]  # a view: the payload is not copied

    def _write(self, kind: str, entries: dict[str, Any], payload: bytearray) -> None:
        header = json.dumps({"entries": entries}, separators=(",", ":")).encode()
        data = b"".join((MAGIC, len(header).to_bytes(8, "big"), header, payload))
        with contextlib.suppress(WriteFailed):
            atomic_write(self._path(kind, entries), data, durable=False)

    def get(self, keys: list[str]) -> dict[str, MergeResult] | None:
        """The remembered results of exactly these merges, or None."""
        found = self._read("merges", keys)
        if found is None:
            return None
        entries, payload = found
        out: dict[str, MergeResult] = {}
        for k, record in entries.items():
            try:
                result = _decode(record["result"], payload)
            except (ValueError, KeyError, TypeError, AttributeError):
                return None
            if not isinstance(result, MergeResult) or sha256_bytes(result.merged) != record.get("merged"):
                return None
            out[k] = result
        return out

    def put(self, results: dict[str, MergeResult]) -> None:
        """Remember ``results``; skipped for a value this encoding does not know, or a cache that cannot be written."""
        payload = bytearray()
        try:
            entries = {k: {"merged": sha256_bytes(r.merged), "result": _encode(r, payload)} for k, r in results.items()}
        except TypeError:
            return
        self._write("merges", entries, payload)

    def get_diffs(self, keys: list[str]) -> dict[str, bytes] | None:
        """Remembered diffs (``canonical_diff`` of the new upstream file and the merged file), or None."""
        found = self._read("diffs", keys)
        if found is None:
            return None
        entries, payload = found
        out: dict[str, bytes] = {}
        for k, record in entries.items():
            try:
                diff = _slice(payload, record["diff"])
            except (ValueError, KeyError, TypeError):
                return None
            if sha256_bytes(diff) != record.get("sha256"):
                return None
            out[k] = diff
        return out

    def put_diffs(self, diffs: dict[str, bytes]) -> None:
        payload = bytearray()
        entries = {k: {"sha256": sha256_bytes(d), "diff": _place(d, payload)} for k, d in diffs.items()}
        self._write("diffs", entries, payload)


def _place(data: bytes, payload: bytearray) -> list[int]:
    """Append ``data`` to the payload; where it lies there: [offset, length]."""
    where = [len(payload), len(data)]
    payload += data
    return where


def _slice(payload: bytes | memoryview, where: object) -> bytes:
    """The bytes at [offset, length] of the payload; ValueError for a place outside it."""
    if not (isinstance(where, list) and len(where) == 2 and all(type(n) is int and n >= 0 for n in where)):
        raise ValueError("not a place in the payload")
    offset, length = where
    if offset + length > len(payload):
        raise ValueError("past the end of the payload")
    return bytes(payload[offset : offset + length])


@functools.cache
def _types() -> dict[str, type]:
    """The classes an entry may name: the dataclasses and enums of ``patchkit.merge``, nothing else."""
    return {
        name: value
        for name, value in vars(merge).items()
        if isinstance(value, type)
        and (dataclasses.is_dataclass(value) or issubclass(value, enum.Enum))
        and value.__module__ == merge.__name__
    }


def _encode(value: Any, payload: bytearray) -> Any:
    kind: type[object] = type(value)
    if kind is bytes:
        return {"@b": _place(value, payload)}
    if kind is tuple or kind is list:
        return [_encode(v, payload) for v in value]
    if value is None or kind in (str, int, float, bool):
        return value
    if isinstance(value, enum.Enum):
        return {"@enum": kind.__name__, "v": value.value}
    fields = {name: _encode(getattr(value, name), payload) for name in _fields_of(kind)}
    return {"@": kind.__name__, **fields}


_FIELDS: dict[type[object], tuple[str, ...]] = {}


def _fields_of(kind: type[object]) -> tuple[str, ...]:
    """The field names of one of ``patchkit.merge``'s dataclasses; TypeError for any other type."""
    found = _FIELDS.get(kind)
    if found is None:
        if not dataclasses.is_dataclass(kind) or kind.__module__ != merge.__name__:
            raise TypeError(kind.__name__)
        found = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(kind))
    return found


def _decode(value: Any, payload: memoryview) -> Any:
    kind = type(value)
    if kind is list:
        return tuple([_decode(v, payload) for v in value])
    if kind is not dict:
        return value
    if "@b" in value:
        return _slice(payload, value["@b"])
    types = _types()
    if "@enum" in value:
        return types[value["@enum"]](value["v"])
    return types[value["@"]](**{k: _decode(v, payload) for k, v in value.items() if k != "@"})
