"""Reading patches: git's extended headers, renames, new and deleted files, CRLF and non-UTF-8 bytes exact."""

from __future__ import annotations

from pathlib import Path

import pytest
import unidiff

from patchkit.series.apply import Item, apply_series
from patchkit.series.parse import PatchParseError, parse_patch, pr_numbers
from tests.series.queue import commit, git


@pytest.fixture
def mixed(tmp_path: Path) -> tuple[Path, str, bytes]:
    """A repository and one format-patch that modifies a CRLF file and a Latin-1 file, deletes, adds and renames."""
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit(
        repo,
        {
            "win/config.ini": b"[a]\r\nkey=1\r\nother=2\r\n",
            "doc/café.txt": b"caf\xe9 au lait\n",
            "old/name.py": b"x = 1\n",
            "gone.txt": b"bye\n",
        },
        "base",
    )
    commit(
        repo,
        {
            "win/config.ini": b"[a]\r\nkey=2\r\nother=2\r\n",
            "doc/café.txt": b"caf\xe9 cr\xe8me\n",
            "gone.txt": None,
            "new/module.py": b"def f():\n    return 1\n",
        },
        "mixed",
    )
    git(repo, "mv", "old/name.py", "old/renamed.py")
    git(repo, "commit", "-q", "-m", "Rename the module (#4711)")
    return repo, base, _raw_patch(repo, base)


def _raw_patch(repo: Path, base: str) -> bytes:
    import subprocess

    return subprocess.run(
        ["git", "format-patch", "--stdout", "-M", f"{base}..HEAD"], cwd=repo, check=True, capture_output=True
    ).stdout


def test_every_kind_of_change_is_read_from_a_format_patch(mixed: tuple[Path, str, bytes]) -> None:
    _, _, data = mixed
    # Two mails in one file: the stat blocks, signatures and mail headers between them are not diff lines.
    parsed = parse_patch(data, "patches/x/0001-mixed.patch")
    kinds = [(f.kind, f.old_path, f.new_path) for f in parsed.files]
    assert kinds == [
        ("modify", "doc/café.txt", "doc/café.txt"),
        ("delete", "gone.txt", None),
        ("add", None, "new/module.py"),
        ("modify", "win/config.ini", "win/config.ini"),
        ("rename", "old/name.py", "old/renamed.py"),
    ]
    assert parsed.subject == "mixed"
    win = parsed.files[3].diff
    assert win is not None
    assert [line for tag, line in win.hunks[0].lines] == [b"[a]\r\n", b"key=1\r\n", b"key=2\r\n", b"other=2\r\n"]
    latin = parsed.files[0].diff
    assert latin is not None
    assert latin.hunks[0].lines == ((b"-", b"caf\xe9 au lait\n"), (b"+", b"caf\xe9 cr\xe8me\n"))


def test_applied_to_the_base_tree_gives_the_head_tree_byte_for_byte(mixed: tuple[Path, str, bytes]) -> None:
    repo, base, data = mixed
    git(repo, "checkout", "-q", "--detach", base)
    before = {
        p.relative_to(repo).as_posix(): p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts
    }
    git(repo, "checkout", "-q", "main")
    after = {
        p.relative_to(repo).as_posix(): p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts
    }

    def read(paths: object) -> dict[str, bytes | None]:
        return {p: before.get(p) for p in paths}  # type: ignore[attr-defined]

    result = apply_series([Item("mixed", "p.patch", parse_patch(data, "p.patch"))], read)
    tree = {**before, **result.files}
    assert {k: v for k, v in tree.items() if v is not None} == after
    assert result.files["win/config.ini"] == b"[a]\r\nkey=2\r\nother=2\r\n"
    assert result.files["doc/café.txt"] == b"caf\xe9 cr\xe8me\n"


def test_unidiff_alone_cannot_keep_crlf_or_latin1_so_it_only_reads_the_structure(tmp_path: Path) -> None:
    """What the design works around: unidiff's file reading drops CR, and its decoding refuses Latin-1 bytes."""
    crlf = tmp_path / "crlf.diff"
    crlf.write_bytes(b"--- a/w.ini\n+++ b/w.ini\n@@ -1,2 +1,2 @@\n-a=1\r\n+a=2\r\n b=1\r\n")
    read = [line.value for pf in unidiff.PatchSet.from_filename(str(crlf)) for h in pf for line in h]
    assert read == ["a=1\n", "a=2\n", "b=1\n"]  # the CRs are gone: applied, this would rewrite every line ending
    latin = b"--- a/t.txt\n+++ b/t.txt\n@@ -1 +1 @@\n-caf\xe9\n+caf\xe9 2\n"
    with pytest.raises(UnicodeDecodeError):
        unidiff.PatchSet(latin.splitlines(keepends=True), encoding="utf-8")
    # patchkit's reading of the same bytes keeps both exactly.
    assert parse_patch(crlf.read_bytes(), "crlf.diff").files[0].diff.hunks[0].lines[0] == (b"-", b"a=1\r\n")  # type: ignore[union-attr]
    assert parse_patch(latin, "t.diff").files[0].diff.hunks[0].lines[1] == (b"+", b"caf\xe9 2\n")  # type: ignore[union-attr]


def test_a_plain_unified_diff_with_its_hunks_and_a_no_newline_marker() -> None:
    marker = b"\\ No newline at end of file\n"
    data = b"--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n" + marker + b"+b = 3\n" + marker
    parsed = parse_patch(data, "x.patch")
    assert parsed.subject is None
    assert [(f.kind, f.old_path) for f in parsed.files] == [("modify", "x.py")]
    result = apply_series([Item("x", "x.patch", parsed)], lambda paths: dict.fromkeys(paths, b"a = 1\nb = 2"))
    assert result.files == {"x.py": b"a = 1\nb = 3"}


@pytest.mark.parametrize(
    ("data", "line", "message"),
    [
        (b"Just prose, no diff.\n", None, "holds no diff"),
        (b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n", 3, "hunk declares 2 old / 2 new lines but the diff ends"),
        (b"diff --git a/x b/x\nindex 1..2 100644\nBinary files a/x and b/x differ\n", 1, "changes the binary file 'x'"),
        (b"--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", 1, "a path outside the tree"),
    ],
)
def test_bad_patches_are_refused_at_their_line(data: bytes, line: int | None, message: str) -> None:
    with pytest.raises(PatchParseError) as e:
        parse_patch(data, "p.patch")
    assert e.value.line == line
    assert message in e.value.message


def test_pull_request_numbers_come_from_the_name_and_the_subject() -> None:
    assert pr_numbers("vllm-48303-mxfp4-flashinfer-cutlass.patch", None) == (48303,)
    assert pr_numbers("0002-fix.patch", "[Quant] fix scales (#48512)") == (48512,)
    assert pr_numbers("flashinfer-1520-jit.patch", "jit cache (#1520)") == (1520,)
    assert pr_numbers("local-tweak.patch", "no reference") == ()


def _git_apply(tmp: Path, patch: bytes, files: dict[str, bytes]) -> dict[str, bytes] | str:
    """What ``git apply`` makes of ``files`` with ``patch``: the files after it, or its error."""
    import subprocess

    work = tmp / "work"
    work.mkdir(parents=True)
    for name, data in files.items():
        (work / name).write_bytes(data)
    (tmp / "p.patch").write_bytes(patch)
    done = subprocess.run(["git", "apply", str(tmp / "p.patch")], cwd=work, capture_output=True, check=False)
    if done.returncode != 0:
        return done.stderr.decode()
    return {p.name: p.read_bytes() for p in work.iterdir()}


def test_hunks_are_read_once_in_the_section_git_reads_them_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One pass finds the files and reads their hunks: a git section's hunks need no '---'/'+++' lines.

    ``git apply`` reads the hunks after an ``index`` line as that file's; a bare
    ``diff --git`` line begins nothing, so a hunk after it has no file header.
    """
    from patchkit.core import diffs

    def no_second_reader(data: bytes) -> list[diffs.FileDiff]:
        raise AssertionError("a series patch is read once, by the header reader and its hunks")

    monkeypatch.setattr(diffs, "parse", no_second_reader)
    data = b"diff --git a/x b/x\nindex 7898192..6178079 100644\n@@ -1 +1 @@\n-a\n+b\n"
    parsed = parse_patch(data, "p.patch")
    assert [(f.kind, f.old_path, f.diff is not None and f.diff.line) for f in parsed.files] == [("modify", "x", 1)]
    result = apply_series([Item("p", "p.patch", parsed)], lambda paths: dict.fromkeys(paths, b"a\n"))
    assert _git_apply(tmp_path / "1", data, {"x": b"a\n"}) == {"x": b"b\n"} == result.files

    bare = b"diff --git a/x b/x\n@@ -1 +1 @@\n-a\n+b\n"
    assert "patch fragment without header" in str(_git_apply(tmp_path / "2", bare, {"x": b"a\n"}))
    with pytest.raises(PatchParseError) as e:
        parse_patch(bare, "p.patch")
    assert e.value.line == 2 and "hunk without a '--- '/'+++ ' file header" in e.value.detail


def test_a_hunk_line_after_the_lines_its_header_counts_is_refused_not_dropped(tmp_path: Path) -> None:
    """``git apply`` drops the line without a word; patchkit refuses the patch at the hunk's header."""
    data = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n"
    assert _git_apply(tmp_path, data, {"x": b"a\n"}) == {"x": b"b\n"}
    with pytest.raises(PatchParseError) as e:
        parse_patch(data, "p.patch")
    assert e.value.line == 3 and "line 6 continues it: its header counts too few lines" in e.value.detail


def test_when_unidiff_reads_the_patch_otherwise_it_is_refused() -> None:
    """The cross-check: unidiff calls 'Binary file y has changed' a binary change, which patchkit's reader skips."""
    data = b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\nBinary file y has changed\n"
    with pytest.raises(PatchParseError) as e:
        parse_patch(data, "p.patch")
    assert "unidiff reads a binary change" in e.value.detail
    assert e.value.hint == "regenerate the patch with git format-patch"
