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


def _entries(tmp_path: Path) -> tuple[Path, dict[str, dict[str, object]]]:
    (path,) = (tmp_path / "merges").glob("merges-*.json")
    return path, json.loads(path.read_bytes())


def test_a_damaged_entry_reads_as_missing(tmp_path: Path) -> None:
    memo = MergeMemo(tmp_path)
    results = _results()
    memo.put(results)
    path, record = _entries(tmp_path)
    record["entries"]["k1"]["result"]["merged"] = {"@b": "aGVsbG8K"}  # not the bytes of the recorded sha256
    path.write_text(json.dumps(record))
    assert memo.get(list(results)) is None
    record["entries"]["k1"]["result"] = {"@": "NotAMergeClass"}
    path.write_text(json.dumps(record))
    assert memo.get(list(results)) is None
    del record["entries"]["k1"]
    path.write_text(json.dumps(record))
    assert memo.get(list(results)) is None
    path.write_text("{not json")
    assert memo.get(list(results)) is None


def test_remembered_diffs_are_checked(tmp_path: Path) -> None:
    memo = MergeMemo(tmp_path)
    memo.put_diffs({"d": b"--- a\n+++ b\n"})
    assert memo.get_diffs(["d"]) == {"d": b"--- a\n+++ b\n"}
    (path,) = (tmp_path / "merges").glob("diffs-*.json")
    record = json.loads(path.read_bytes())
    record["entries"]["d"]["diff"] = "LS0tIGEKKysrIGMK"  # "--- a\n+++ c\n"
    path.write_text(json.dumps(record))
    assert memo.get_diffs(["d"]) is None


def test_the_key_covers_every_input_and_the_merge_code() -> None:
    parts = ("merge", "b" * 64, "o" * 64, "t" * 64, "w.py")
    keys = {mergememo.key(*parts)}
    for i in range(1, len(parts)):
        keys.add(mergememo.key(*parts[:i], parts[i] + "x", *parts[i + 1 :]))
    assert len(keys) == len(parts)
    assert len(mergememo.code_version()) == 64
