"""Merges remembered between runs: the same results come back, and nothing wrong ever does."""

from __future__ import annotations

import json
from pathlib import Path

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


def _load(path: Path) -> tuple[dict[str, dict[str, object]], bytes]:
    """A memo file's JSON header and the payload after it."""
    data = path.read_bytes()
    assert data.startswith(mergememo.MAGIC)
    start = len(mergememo.MAGIC) + 8
    end = start + int.from_bytes(data[len(mergememo.MAGIC) : start], "big")
    return json.loads(data[start:end]), data[end:]


def _store(path: Path, record: object, payload: bytes) -> None:
    header = json.dumps(record).encode()
    path.write_bytes(mergememo.MAGIC + len(header).to_bytes(8, "big") + header + payload)


def test_a_damaged_entry_reads_as_missing(tmp_path: Path) -> None:
    memo = MergeMemo(tmp_path)
    results = _results()
    memo.put(results)
    (path,) = (tmp_path / "merges").glob("merges-*.memo")
    record, payload = _load(path)
    _store(path, record, payload)
    assert memo.get(list(results)) == results  # the helpers write what the memo reads
    merged = record["entries"]["k1"]["result"]["merged"]  # type: ignore[index]
    offset, length = merged["@b"]
    _store(path, record, payload[:offset] + b"X" + payload[offset + 1 :])  # other bytes than the recorded sha256
    assert memo.get(list(results)) is None
    merged["@b"] = [len(payload) - 1, 10]  # past the end of the payload
    _store(path, record, payload)
    assert memo.get(list(results)) is None
    merged["@b"] = [offset, -length]
    _store(path, record, payload)
    assert memo.get(list(results)) is None
    merged["@b"] = [offset, length]
    record["entries"]["k1"]["result"] = {"@": "NotAMergeClass"}
    _store(path, record, payload)
    assert memo.get(list(results)) is None
    del record["entries"]["k1"]
    _store(path, record, payload)
    assert memo.get(list(results)) is None
    path.write_bytes(b"{not a memo")
    assert memo.get(list(results)) is None
    path.write_bytes(mergememo.MAGIC + (10**9).to_bytes(8, "big") + b"{")  # a header longer than the file
    assert memo.get(list(results)) is None


def test_remembered_diffs_are_checked(tmp_path: Path) -> None:
    memo = MergeMemo(tmp_path)
    memo.put_diffs({"d": b"--- a\n+++ b\n", "e": b""})
    assert memo.get_diffs(["e", "d"]) == {"d": b"--- a\n+++ b\n", "e": b""}
    (path,) = (tmp_path / "merges").glob("diffs-*.memo")
    record, payload = _load(path)
    _store(path, record, payload.replace(b"+++ b", b"+++ c"))
    assert memo.get_diffs(["d", "e"]) is None
    record["entries"]["d"]["diff"] = "LS0tIGEKKysrIGMK"  # type: ignore[index]  # not a place
    _store(path, record, payload)
    assert memo.get_diffs(["d", "e"]) is None


def test_the_key_covers_every_input_and_the_merge_code() -> None:
    parts = ("merge", "b" * 64, "o" * 64, "t" * 64, "w.py")
    keys = {mergememo.key(*parts)}
    for i in range(1, len(parts)):
        keys.add(mergememo.key(*parts[:i], parts[i] + "x", *parts[i + 1 :]))
    assert len(keys) == len(parts)
    assert len(mergememo.code_version()) == 64


def test_a_value_the_encoding_does_not_know_is_not_remembered(tmp_path: Path) -> None:
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Foreign:
        x: int

    memo = MergeMemo(tmp_path)
    odd = MergeResult(Outcome.CLEAN, b"x\n", conflicts=(Foreign(1),))  # type: ignore[arg-type]
    memo.put({"k": odd})
    assert memo.get(["k"]) is None
    assert list(tmp_path.rglob("*.memo")) == []
