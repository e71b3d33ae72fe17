"""A rebase's semantic checks remembered: a file that passed is skipped on the same bytes; a problem is always found."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.merge import rebase_file
from patchkit.trust import semantic
from patchkit.verdicts import Verdicts
from tests.trust.test_screen import CLASS


def produced(ours: bytes, theirs: bytes) -> semantic.Produced:
    return semantic.Produced(
        "w", "vllm/w.py", rebase_file(CLASS, ours, theirs, path="w.py").merged, ours, theirs, CLASS
    )


def test_a_clean_file_is_checked_once_for_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = CLASS.replace(b"        count = 0\n", b"        count = 0\n        self.stream.synchronize()\n")
    theirs = CLASS.replace(b"        return count + total\n", b"        return count + total + 1\n")
    memo = Verdicts(tmp_path / "rebase")
    assert semantic.check([produced(ours, theirs)], None, verdicts=memo) == {}
    memo.save()
    monkeypatch.setattr(semantic, "_check_one", lambda *a, **k: pytest.fail("checked again"))
    assert semantic.check([produced(ours, theirs)], None, verdicts=Verdicts(tmp_path / "rebase")) == {}
    other = theirs.replace(b"+ 1\n", b"+ 2\n")  # any other byte: checked again
    with pytest.raises(pytest.fail.Exception):
        semantic.check([produced(ours, other)], None, verdicts=Verdicts(tmp_path / "rebase"))


def test_a_file_with_a_problem_is_never_remembered(tmp_path: Path) -> None:
    ours = CLASS.replace(b'        self.note("summed")\n', b"        self.note(total)\n")
    gone = CLASS.replace(b"        total = sum(blocks)\n", b"").replace(b"return count + total", b"return count")
    for _ in range(2):
        memo = Verdicts(tmp_path / "rebase")
        found = semantic.check([produced(ours, gone)], None, verdicts=memo)
        assert [(p.kind, p.name) for p in found["w"]] == [("undefined-name", "total")]
        memo.save()
    assert not (tmp_path / "rebase").exists()
