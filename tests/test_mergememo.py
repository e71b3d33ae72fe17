"""Merges remembered between runs: the same result comes back, and nothing wrong ever does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit import mergememo
from patchkit.merge import MergeResult, Outcome, rebase_file
from patchkit.mergememo import MergeMemo
from tests.test_merge import BASE, OFFLOAD_EVENT, OFFLOAD_SYNC, RESTORE_LOG, edit, fenced


def _results() -> list[MergeResult]:
    flagged = rebase_file(
        BASE,
        fenced(BASE),
        edit(BASE, RESTORE_LOG, b'logger.debug("restored %d blocks to the GPU", len(src))'),
        path="w.py",
    )
    assert flagged.review_flags  # the memo must carry review flags with their hunks
    clean = rebase_file(BASE, fenced(BASE), edit(BASE, OFFLOAD_SYNC, OFFLOAD_EVENT), path="w.py")
    conflict = rebase_file(b"a\nb\nc\nlast", b"a\nb\nc\nours", b"a\nb\nc\ntheirs\n", path="x.txt")
    assert conflict.outcome is Outcome.CONFLICT and conflict.conflicts
    unchanged = rebase_file(b"a\n", b"b\n", b"a\n")
    return [flagged, clean, conflict, unchanged]


@pytest.mark.parametrize("index", range(4))
def test_a_remembered_merge_is_the_merge(tmp_path: Path, index: int) -> None:
    result = _results()[index]
    memo = MergeMemo(tmp_path)
    name = mergememo.key("merge", "b" * 64, "o" * 64, "t" * 64, "w.py")
    assert memo.get(name) is None
    memo.put(name, result)
    assert memo.get(name) == result
    assert MergeMemo(tmp_path).get(name) == result  # from disk, by a new reader


def test_a_damaged_entry_reads_as_missing(tmp_path: Path) -> None:
    memo = MergeMemo(tmp_path)
    result = _results()[0]
    memo.put("k", result)
    entry = tmp_path / "merges" / "k.json"
    record = json.loads(entry.read_bytes())
    record["result"]["merged"] = {"@b": "aGVsbG8K"}  # other merged bytes than the recorded sha256
    entry.write_text(json.dumps(record))
    assert memo.get("k") is None
    record["result"] = {"@": "NotAMergeClass"}
    entry.write_text(json.dumps(record))
    assert memo.get("k") is None
    entry.write_text("{not json")
    assert memo.get("k") is None


def test_a_remembered_diff_is_checked(tmp_path: Path) -> None:
    memo = MergeMemo(tmp_path)
    memo.put_diff("d", b"--- a\n+++ b\n")
    assert memo.get_diff("d") == b"--- a\n+++ b\n"
    path = tmp_path / "merges" / "d.diff"
    path.write_bytes(path.read_bytes().replace(b"+++ b", b"+++ c"))
    assert memo.get_diff("d") is None


def test_the_key_covers_every_input_and_the_merge_code() -> None:
    parts = ("merge", "b" * 64, "o" * 64, "t" * 64, "w.py")
    keys = {mergememo.key(*parts)}
    for i in range(1, len(parts)):
        keys.add(mergememo.key(*parts[:i], parts[i] + "x", *parts[i + 1 :]))
    assert len(keys) == len(parts)
    assert len(mergememo.code_version()) == 64
