from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from patchkit.core import diffs

OLD = b"a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"
NEW = b"a\nb\nC\nd\ne\nf\ng\nh\ni\nj\nk\n"


def test_make_parse_apply_round_trip() -> None:
    d = diffs.make(OLD, NEW, "a/x.py", "b/x.py")
    assert d.startswith(b"--- a/x.py\n+++ b/x.py\n@@ ")
    (fd,) = diffs.parse(d)
    assert (fd.old_path, fd.new_path) == ("a/x.py", "b/x.py")
    assert diffs.apply(fd, OLD) == NEW
    assert diffs.apply(fd.reversed(), NEW) == OLD
    assert (fd.added, fd.removed) == (2, 1)


def test_make_is_stable_and_empty_for_equal_inputs() -> None:
    assert diffs.make(OLD, NEW, "a/x", "b/x") == diffs.make(OLD, NEW, "a/x", "b/x")
    assert diffs.make(OLD, OLD, "a/x", "b/x") == b""


def test_crlf_and_non_utf8_bytes_survive() -> None:
    old = b"line one\r\n\xff\xfe binary-ish \x80\r\nlast\r\n"
    new = b"line one\r\n\xff\xfe binary-ish \x81\r\nlast\r\n"
    d = diffs.make(old, new, "a/f", "b/f")
    (fd,) = diffs.parse(d)
    assert diffs.apply(fd, old) == new
    assert diffs.apply(fd.reversed(), new) == old


def test_missing_final_newline_both_ways() -> None:
    for old, new in [(b"a\nb", b"a\nc"), (b"a\nb\n", b"a\nb"), (b"a\nb", b"a\nb\n")]:
        d = diffs.make(old, new, "a/f", "b/f")
        assert diffs.NO_NEWLINE in d
        (fd,) = diffs.parse(d)
        assert diffs.apply(fd, old) == new
        assert diffs.apply(fd.reversed(), new) == old


def test_random_round_trips() -> None:
    rng = random.Random(7)
    alphabet = [b"x\n", b"y\r\n", b"\xff\n", b"def f():\n", b"    pass\n", b"\n"]
    for _ in range(500):
        old_lines = [rng.choice(alphabet) for _ in range(rng.randint(0, 40))]
        new_lines = list(old_lines)
        for _ in range(rng.randint(1, 6)):
            k = rng.random()
            if k < 0.3 and new_lines:
                del new_lines[rng.randrange(len(new_lines))]
            elif k < 0.7:
                new_lines.insert(rng.randint(0, len(new_lines)), rng.choice(alphabet))
            elif new_lines:
                new_lines[rng.randrange(len(new_lines))] = b"changed\n"
        old, new = b"".join(old_lines), b"".join(new_lines)
        d = diffs.make(old, new, "a/f", "b/f")
        if old == new:
            assert d == b""
            continue
        (fd,) = diffs.parse(d)
        assert diffs.apply(fd, old) == new
        assert diffs.apply(fd.reversed(), new) == old


def test_wrong_hunk_counts_reported_with_line() -> None:
    d = diffs.make(OLD, NEW, "a/x", "b/x")
    # Hand edit: claim one more old line than the hunk has.
    header = next(line for line in d.split(b"\n") if line.startswith(b"@@"))
    assert header == b"@@ -1,6 +1,6 @@"
    bad = d.replace(header, b"@@ -1,8 +1,8 @@")
    with pytest.raises(diffs.DiffError) as e:
        diffs.parse(bad)
    assert e.value.line == 3
    assert "declares 8 old / 8 new lines but has 6 old / 6 new before line 11" in e.value.message


def test_hunk_longer_than_declared() -> None:
    bad = b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n c\n d\n"
    with pytest.raises(diffs.DiffError, match="line 7 continues it") as e:
        diffs.parse(bad)
    assert e.value.line == 3


def test_trailing_lines_after_last_hunk_detected() -> None:
    bad = b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n-c\n"
    with pytest.raises(diffs.DiffError, match="line 7 continues it") as e:
        diffs.parse(bad)
    assert e.value.line == 3


def test_not_a_diff() -> None:
    with pytest.raises(diffs.DiffError, match="no file diff found"):
        diffs.parse(b"Binary files a/x and b/x differ\n")


def test_apply_refuses_offsets_and_fuzz() -> None:
    d = diffs.make(OLD, NEW, "a/x", "b/x")
    (fd,) = diffs.parse(d)
    shifted = b"extra\n" + OLD  # GNU patch would apply this with an offset
    with pytest.raises(diffs.ApplyError) as e:
        diffs.apply(fd, shifted)
    assert e.value.line == 3
    # Its first hunk is at line 1: git apply anchors it to the start of the file, so no offset either.
    assert "must start at the file's first line" in e.value.message


def test_multi_file_diff_and_dev_null() -> None:
    d = diffs.make(b"", b"new\n", "/dev/null", "b/new.py") + diffs.make(OLD, NEW, "a/x", "b/x")
    files = diffs.parse(d)
    assert files[0].old_path is None and files[0].new_path == "b/new.py"
    assert diffs.apply(files[0], b"") == b"new\n"
    assert diffs.strip_prefix(files[1].old_path) == "x"


@pytest.mark.skipif(shutil.which("diff") is None, reason="GNU diff not installed")
def test_reads_gnu_diff_output(tmp_path: Path) -> None:
    old = b"".join(b"line %d\n" % i for i in range(100))
    new = old.replace(b"line 10\n", b"line ten\n").replace(b"line 80\n", b"") + b"tail"
    (tmp_path / "old").write_bytes(old)
    (tmp_path / "new").write_bytes(new)
    out = subprocess.run(["diff", "-u", "old", "new"], cwd=tmp_path, capture_output=True, check=False).stdout
    files = diffs.parse(out)
    assert diffs.apply(files[0], old) == new


def test_git_apply_accepts_our_diffs(tmp_path: Path) -> None:
    old = b"".join(b"row %d\r\n" % i for i in range(50)) + b"\xff end"
    new = old.replace(b"row 3\r\n", b"row three\r\n").replace(b"\xff end", b"\xfe end")
    (tmp_path / "f.py").write_bytes(old)
    (tmp_path / "p.diff").write_bytes(diffs.make(old, new, "a/f.py", "b/f.py"))
    subprocess.run(["git", "apply", "--unidiff-zero", "p.diff"], cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "f.py").read_bytes() == new


def test_apply_shifted_takes_an_offset_never_fuzz() -> None:
    """A diff made on a file with two lines fewer above its hunk: exact lines, some lines away."""
    base = b"".join(b"line %d\n" % i for i in range(1, 41))
    made_on = base.replace(b"line 5\n", b"line 5\nfence\n")
    diff = diffs.parse(diffs.make(made_on, made_on.replace(b"line 30\n", b"line 30 dma\n"), "a/f", "b/f"))[0]
    now = base.replace(b"line 5\n", b"line 5\nfence 1\nfence 2\nfence 3\n")
    with pytest.raises(diffs.ApplyError):
        diffs.apply(diff, now)  # at its stated line: no
    out, shift = diffs.apply_shifted(diff, now)
    assert out == now.replace(b"line 30\n", b"line 30 dma\n") and shift == 2
    # One context line differs: no match anywhere, however near. No fuzz.
    with pytest.raises(diffs.ApplyError, match="does not match the hunk"):
        diffs.apply_shifted(diff, now.replace(b"line 28\n", b"line 28 edited\n"))


def test_a_hunk_header_with_lengths_left_out_means_one_line() -> None:
    from patchkit.core.diffs import _body_line, _hunk_header

    assert _hunk_header(b"@@ -3 +4 @@ def f():\n", 7) == (3, 1, 4, 1)
    assert _hunk_header(b"@@ -0,0 +1,2 @@\r\n", 7) == (0, 0, 1, 2)
    with pytest.raises(diffs.DiffError) as e:
        _hunk_header(b"@@ -a +b @@\n", 7)
    assert (e.value.line, e.value.message) == (7, "malformed hunk header b'@@ -a +b @@'")
    assert _body_line(b"\n") == (b" ", b"\n")  # a context line whose space an editor stripped
    assert _body_line(b"-x\n") == (b"-", b"x\n")
    assert _body_line(b"\\ No newline at end of file\n") is None


def _undone(fd: diffs.FileDiff, target: bytes, *, by_reverse: bool) -> bytes | tuple[int, str]:
    """``fd`` undone onto ``target``, one way or the other: the bytes, or the error's line and message."""
    try:
        return diffs.apply(fd.reversed(), target) if by_reverse else diffs.apply(fd, target, reverse=True)
    except diffs.ApplyError as e:
        return e.line, e.message


def test_undoing_a_diff_is_applying_its_reverse() -> None:
    """``apply(reverse=True)`` gives what ``apply`` of ``reversed()`` gives, the same bytes or the same error."""
    rng = random.Random(18)
    alphabet = [b"x\n", b"y\r\n", b"\xff\n", b"def f():\n", b"    pass\n", b"\n", b"z"]
    for _ in range(500):
        old = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        new = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        d = diffs.make(old, new, "a/f", "b/f")
        if not d:
            continue
        (fd,) = diffs.parse(d)
        # The new side itself, and others the diff may or may not undo onto (a line dropped, or one added).
        lines = diffs.split_lines(new)
        at = rng.randrange(len(lines) + 1)
        for target in (new, b"".join(lines[:at] + lines[at + 1 :]), b"".join([*lines[:at], b"w\n", *lines[at:]])):
            assert _undone(fd, target, by_reverse=False) == _undone(fd, target, by_reverse=True)
        assert diffs.apply(fd, new, reverse=True) == old
