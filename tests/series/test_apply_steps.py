"""What a file change applies to, and the canonical form a rebased patch is written in."""

from __future__ import annotations

import pytest

from patchkit.core import diffs
from patchkit.rebase.series import _file_diff
from patchkit.series.apply import Applied, Item, SeriesApplyError, _current, apply_series
from patchkit.series.parse import FileChange, parse_patch


def _fail(path: str, message: str, line: int | None = None) -> SeriesApplyError:
    return SeriesApplyError("p", "series/p.patch", line or 3, path, message)


@pytest.mark.parametrize(
    ("change", "state", "message"),
    [
        (
            FileChange(None, "new.py", None, 3),
            {"new.py": b"x"},
            "new.py: the patch creates it, but the tree already has it",
        ),
        (FileChange("a.py", "a.py", None, 3), {}, "a.py: the tree does not have it"),
        (FileChange("a.py", "a.py", None, 3), {"a.py": None}, "a.py: the tree does not have it"),
        (
            FileChange("a.py", "b.py", None, 3),
            {"a.py": b"x", "b.py": b"y"},
            "b.py: the patch renames a.py to it, but the tree already has it",
        ),
        (
            FileChange("a.py", "b.py", None, 3, copy=True),
            {"a.py": b"x", "b.py": b"y"},
            "b.py: the patch copys a.py to it",
        ),
    ],
)
def test_a_change_needs_its_file_and_a_free_destination(
    change: FileChange, state: dict[str, bytes | None], message: str
) -> None:
    with pytest.raises(SeriesApplyError) as e:
        _current(change, state, _fail)
    assert e.value.message.startswith(f"series/p.patch:3: patch 'p' does not apply to {message}")


def test_what_a_change_applies_to() -> None:
    assert _current(FileChange(None, "new.py", None, 3), {"new.py": None}, _fail) == b""
    assert _current(FileChange("a.py", "b.py", None, 3), {"a.py": b"x"}, _fail) == b"x"
    assert _current(FileChange("a.py", None, None, 3), {"a.py": b"x"}, _fail) == b"x"


def test_file_diff_headers_as_git_writes_them() -> None:
    empty, one = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", "d00491fd7e5bb6fa28c517a0bb32b8b506539d4d"
    zero = "0" * 40
    added = _file_diff(FileChange(None, "n.py", None, 1, new_mode="100755"), None, b"1\n")
    assert added.startswith(
        f"diff --git a/n.py b/n.py\nnew file mode 100755\nindex {zero}..{one}\n--- /dev/null\n+++ b/n.py\n".encode()
    )
    deleted = _file_diff(FileChange("d.py", None, None, 1), b"1\n", None)
    assert deleted.startswith(
        f"diff --git a/d.py b/d.py\ndeleted file mode 100644\nindex {one}..{zero}\n--- a/d.py\n+++ /dev/null\n".encode()
    )
    renamed = _file_diff(FileChange("a.py", "b.py", None, 1), b"", b"")
    assert (
        renamed
        == f"diff --git a/a.py b/b.py\nrename from a.py\nrename to b.py\nindex {empty}..{empty} 100644\n".encode()
    )
    copied = _file_diff(FileChange("a.py", "c.py", None, 1, copy=True), b"1\n", b"1\n")
    assert copied.startswith(b"diff --git a/a.py b/c.py\ncopy from a.py\ncopy to c.py\n")
    modified = _file_diff(FileChange("m.py", "m.py", None, 1), b"1\n", b"2\n")
    assert modified.endswith(diffs.make(b"1\n", b"2\n", "a/m.py", "b/m.py"))


def _series_of(patch: bytes, tree: dict[str, bytes | None]) -> Applied:
    item = Item("p", "series/p.patch", parse_patch(patch, "series/p.patch"))
    return apply_series([item], lambda paths: {p: tree.get(p) for p in paths})


def test_a_series_hunk_applies_as_git_apply_does_and_a_wrong_header_is_reported() -> None:
    """An offset and a wrong new-side start both apply (git takes them) and are reported; a join is refused."""
    old = b"".join(b"line %d\n" % i for i in range(1, 21))
    hunk = b"@@ -5,3 +9,3 @@\n line 5\n-line 6\n+six\n line 7\n"  # the new side really starts at 5
    patch = b"diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n" + hunk
    done = _series_of(patch, {"f.py": old})
    assert done.files == {"f.py": old.replace(b"line 6\n", b"six\n")}
    (offset,) = done.offsets
    assert (offset.lines, offset.detail) == (
        0,
        "series/p.patch:4: hunk header says the new side starts at line 9, but it starts at line 5",
    )
    joins = (
        b"diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -6 +6 @@\n-line 6\n+six\n\\ No newline at end of file\n"
    )
    with pytest.raises(SeriesApplyError, match="would join two lines"):
        _series_of(joins, {"f.py": old})
