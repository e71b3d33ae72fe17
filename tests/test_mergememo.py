"""Merges remembered between runs: the same results come back, and nothing wrong ever does."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import ClassVar

from patchkit import mergememo
from patchkit.merge import MergeResult, Outcome, rebase_file
from patchkit.mergememo import MergeMemo
from tests.test_merge import BASE, OFFLOAD_EVENT, OFFLOAD_SYNC, RESTORE_LOG, edit, fenced


def _results() -> dict[str, MergeResult]:
    theirs = edit(BASE, RESTORE_LOG, b'logger.debug("restored %d blocks to the GPU", len(src))')
    flagged = rebase_file(BASE, fenced(BASE), theirs, path="w.py")
    assert flagged.review_flags  # the memo must carry review flags with their hunks
    clean = rebase_file(BASE, fenced(BASE), edit(BASE, OFFLOAD_SYNC, OFFLOAD_EVENT), path="w.py")
    conflict = rebase_file(b"a\nb\nc\nlast", b"a\nb\nc\nours", b"a\nb\nc\ntheirs\n", path="x.txt")
    assert conflict.outcome is Outcome.CONFLICT and conflict.conflicts
    unchanged = rebase_file(b"a\n", b"b\n", b"a\n")
    return {"k1": flagged, "k2": clean, "k3": conflict, "k4": unchanged}


def test_remembered_merges_are_the_merges(tmp_path: Path) -> None:
    results = _results()
    memo = MergeMemo(tmp_path)
    assert memo.get(list(results)) is None
    memo.put(results)
    assert memo.get(list(results)) == results
    assert MergeMemo(tmp_path).get(["k4", "k3", "k2", "k1"]) == results  # from disk, by a new reader, any order
    assert memo.get(["k1", "k2"]) is None  # another set of merges


def _load(path: Path) -> dict[str, tuple[str, object]]:
    """A memo file's entries: key -> (sha256 of its bytes, value)."""
    data = path.read_bytes()
    assert data.startswith(mergememo.MAGIC)
    entries: dict[str, tuple[str, object]] = pickle.loads(data[len(mergememo.MAGIC) :])["entries"]  # noqa: S301 - the memo the test just wrote
    return entries


def _store(path: Path, entries: object) -> None:
    path.write_bytes(mergememo.MAGIC + pickle.dumps({"entries": entries}))


class _Boom:
    """What a foreign pickle could make the reader call: recorded instead of run."""

    called: ClassVar[list[str]] = []

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (_Boom.called.append, ("ran",))


def test_a_damaged_entry_reads_as_missing(tmp_path: Path) -> None:
    memo = MergeMemo(tmp_path)
    results = _results()
    memo.put(results)
    (path,) = (tmp_path / "merges").glob("merges-*.memo")
    entries = _load(path)
    _store(path, entries)
    assert memo.get(list(results)) == results  # the helpers write what the memo reads
    digest, k1 = entries["k1"]
    assert isinstance(k1, MergeResult)
    _store(path, {**entries, "k1": (digest, dataclasses.replace(k1, merged=b"X" + k1.merged[1:]))})
    assert memo.get(list(results)) is None  # other bytes than the recorded sha256
    _store(path, {**entries, "k1": (digest, "not a merge")})
    assert memo.get(list(results)) is None
    _store(path, {**entries, "k1": (digest, _Boom())})  # a pickle naming a global outside patchkit.merge
    assert memo.get(list(results)) is None
    assert _Boom.called == []
    _store(path, {k: v for k, v in entries.items() if k != "k1"})
    assert memo.get(list(results)) is None
    path.write_bytes(mergememo.MAGIC + pickle.dumps({"entries": entries})[:-40])  # cut short
    assert memo.get(list(results)) is None
    path.write_bytes(b"{not a memo")
    assert memo.get(list(results)) is None


def test_remembered_diffs_are_checked(tmp_path: Path) -> None:
    memo = MergeMemo(tmp_path)
    memo.put_diffs({"d": b"--- a\n+++ b\n", "e": b""})
    assert memo.get_diffs(["e", "d"]) == {"d": b"--- a\n+++ b\n", "e": b""}
    (path,) = (tmp_path / "merges").glob("diffs-*.memo")
    entries = _load(path)
    digest, _ = entries["d"]
    _store(path, {**entries, "d": (digest, b"--- a\n+++ c\n")})
    assert memo.get_diffs(["d", "e"]) is None
    _store(path, {**entries, "d": (digest, "--- a\n+++ b\n")})  # text, not bytes
    assert memo.get_diffs(["d", "e"]) is None


def test_the_key_covers_every_input_and_the_merge_code() -> None:
    parts = ("merge", "b" * 64, "o" * 64, "t" * 64, "w.py")
    keys = {mergememo.key(*parts)}
    for i in range(1, len(parts)):
        keys.add(mergememo.key(*parts[:i], parts[i] + "x", *parts[i + 1 :]))
    assert len(keys) == len(parts)
    assert len(mergememo.code_version()) == 64


def test_a_value_the_memo_cannot_build_again_reads_as_a_miss(tmp_path: Path) -> None:
    @dataclasses.dataclass(frozen=True)
    class Foreign:
        x: int

    memo = MergeMemo(tmp_path)
    odd = MergeResult(Outcome.CLEAN, b"x\n", conflicts=(Foreign(1),))  # type: ignore[arg-type]
    memo.put({"k": odd})  # a class pickle cannot name: nothing is written
    assert memo.get(["k"]) is None
    assert list(tmp_path.rglob("*.memo")) == []
    memo.put({"k": MergeResult(Outcome.CLEAN, b"x\n", conflicts=(Path("x"),))})  # type: ignore[arg-type]
    assert memo.get(["k"]) is None  # written, but a class outside patchkit.merge is refused when read
