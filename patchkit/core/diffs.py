"""Unified diffs on bytes: parse strictly, apply exactly, generate stably.

Everything here works on bytes, so CRLF line endings and non-UTF-8 content
survive untouched: a line is everything up to and including ``\\n``. Parsing
checks every hunk's line counts against its header and reports the diff's
line number. Applying is ``git apply``'s, never fuzz: ``apply_shifted`` gives
exactly what ``git apply`` gives (an exact match some lines away is an
offset); ``apply`` gives the same bytes and also refuses a hunk that is not
at the line its header names.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from patchkit.core.values import UpstreamPath

NO_NEWLINE = b"\\ No newline at end of file"
_HUNK = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)")


class DiffError(ValueError):
    """A diff that does not parse; ``line`` is 1-based in the diff file."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


class ApplyError(ValueError):
    """A diff that does not apply exactly; ``line`` is the hunk header's line in the diff."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    # (tag, content) where tag is b" ", b"-" or b"+"; content keeps its line
    # ending, and has none when the file ends without a newline there.
    lines: tuple[tuple[bytes, bytes], ...]
    line: int = 0

    def old_lines(self) -> list[bytes]:
        return [c for t, c in self.lines if t != b"+"]

    def new_lines(self) -> list[bytes]:
        return [c for t, c in self.lines if t != b"-"]


@dataclass(frozen=True)
class FileDiff:
    old_path: str | None  # None for /dev/null
    new_path: str | None
    hunks: tuple[Hunk, ...]
    line: int = 0

    def reversed(self) -> FileDiff:
        swap = {b"-": b"+", b"+": b"-", b" ": b" "}
        return FileDiff(
            old_path=self.new_path,
            new_path=self.old_path,
            hunks=tuple(
                Hunk(
                    h.new_start,
                    h.new_len,
                    h.old_start,
                    h.old_len,
                    tuple((swap[t], c) for t, c in h.lines),
                    h.line,
                )
                for h in self.hunks
            ),
            line=self.line,
        )

    @property
    def added(self) -> int:
        return sum(1 for h in self.hunks for t, _ in h.lines if t == b"+")

    @property
    def removed(self) -> int:
        return sum(1 for h in self.hunks for t, _ in h.lines if t == b"-")


def split_lines(data: bytes) -> list[bytes]:
    """Split on ``\\n`` only, keeping it: ``\\r`` and other bytes stay part of the line."""
    if not data:
        return []
    if b"\r" not in data:
        # bytes.splitlines ends lines at \n, \r\n and \r only: without a \r it is this split, in C.
        return data.splitlines(keepends=True)
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


# The escapes git writes in a quoted name (quote.c), as byte -> value.
_C_ESCAPES = {ord(k): v for k, v in zip('abtnvfr"\\', (7, 8, 9, 10, 11, 12, 13, 34, 92), strict=True)}


def _unquote(text: bytes, line: int) -> bytes:
    """git's C-style quoted name (``"a/caf\\303\\251.py"``): the escapes git writes, and nothing else."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != 0x5C:  # backslash
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1 : i + 2]
        if nxt and nxt[0] in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt[0]])
            i += 2
        elif len(text[i + 1 : i + 4]) == 3 and all(48 <= b <= 55 for b in text[i + 1 : i + 4]):
            value = int(text[i + 1 : i + 4], 8)
            if value > 255:
                raise DiffError(line, f"the quoted file name has an escape \\{text[i + 1 : i + 4].decode()} over 255")
            out.append(value)
            i += 4
        else:
            shown = text[i : i + 6].decode("ascii", "backslashreplace")
            raise DiffError(
                line,
                f"the quoted file name has an escape git never writes ({shown!r}); "
                'only \\a \\b \\t \\n \\v \\f \\r \\" \\\\ and three octal digits',
            )
    return bytes(out)


def _header_name(text: bytes) -> bytes:
    """The file name of a header's text, where GNU ``patch`` ends it.

    ``--- a/foo.py\t2024-01-01 …`` and ``+++ b/foo.py (at 77469c9)`` both name
    ``foo.py``: the name ends at a tab, or at the first space when no tab
    follows (a name with spaces is kept whole only when a tab ends it, as
    ``diff`` and ``git diff`` write it); a quoted name ends at its quote.
    """
    text = text.lstrip(b" ")
    if text.startswith(b'"'):
        end = re.search(rb'(?<!\\)(?:\\\\)*"', text[1:])
        return text[: end.end() + 1] if end else text
    if b"\t" in text:
        return text.split(b"\t", 1)[0]
    return text.split(b" ", 1)[0]


def _path(header: bytes, line: int = 0) -> str | None:
    """The file name of a ``---``/``+++`` header; one that leaves the tree (``a/../../etc/passwd``) is refused.

    ``patch`` and ``git apply`` refuse such names too: a diff is of a file
    inside the upstream tree, never of an absolute path or one above it.
    """
    text = _header_name(header[4:].rstrip(b"\r\n"))
    if text.startswith(b'"') and text.endswith(b'"') and len(text) >= 2:
        text = _unquote(text[1:-1], line)
    name = text.decode("utf-8", "surrogateescape").rstrip(" ")
    if name == "/dev/null":
        return None
    stripped = strip_prefix(name) or ""
    if stripped.startswith("/") or ".." in stripped.split("/"):
        raise DiffError(line, f"the header names {name[:200]!r}, a path outside the tree; a diff covers a file in it")
    return name


def strip_prefix(path: str | None) -> str | None:
    """Drop a leading ``a/`` or ``b/`` as ``patch -p1`` does."""
    if path is None:
        return None
    if path.startswith(("a/", "b/")):
        return path[2:]
    return path


def parse(data: bytes) -> list[FileDiff]:
    """Parse a unified diff of one or more files; raise ``DiffError`` on any inconsistency."""
    lines = split_lines(data)
    files: list[FileDiff] = []
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if line.startswith(b"--- ") and i + 1 < n and lines[i + 1].startswith(b"+++ "):
            header_line = i + 1
            old_path, new_path = _path(line, i + 1), _path(lines[i + 1], i + 2)
            hunks, i = read_hunks(lines, i + 2)
            if not hunks:
                raise DiffError(header_line, "file header without any hunk")
            files.append(FileDiff(old_path, new_path, hunks, header_line))
            continue
        # Anything else (diff --git, index, mode lines, prose) is a header line, unless it belongs to a hunk.
        refuse_stray(lines, i, files[-1].hunks[-1] if files else None)
        i += 1
    if not files:
        raise DiffError(1, "no file diff found (expected '--- a/…', '+++ b/…' and '@@' hunks)")
    return files


def read_hunks(lines: list[bytes], i: int) -> tuple[tuple[Hunk, ...], int]:
    """The hunks starting at line ``i`` (0-based) of ``lines``, each read strictly; and the index after them.

    Every hunk holds exactly the lines its header counts, as ``git apply``
    reads it; a wrong count raises ``DiffError`` with the diff's 1-based line.
    """
    hunks: list[Hunk] = []
    while i < len(lines) and lines[i].startswith(b"@@"):
        hunk, i = _parse_hunk(lines, i)
        hunks.append(hunk)
    return tuple(hunks), i


def refuse_stray(lines: list[bytes], i: int, last: Hunk | None) -> None:
    """Raise ``DiffError`` when line ``i``, outside every file's hunks, is a hunk's line.

    A hunk header with no file header before it, or a ``+``/``-``/`` `` line
    after the hunks of a file (``last`` the hunk before it): its header counts
    too few lines, and ``git apply`` would drop the rest without a word.
    """
    line = lines[i]
    if line.startswith(b"@@"):
        raise DiffError(i + 1, "hunk without a '--- '/'+++ ' file header before it")
    if last is not None and line[:1] in (b"+", b"-", b" ") and not line.startswith((b"--- ", b"+++ ")):
        raise DiffError(
            last.line,
            f"hunk declares {last.old_len} old / {last.new_len} new lines but line {i + 1} "
            "continues it: its header counts too few lines",
        )


def parse_lenient(data: bytes) -> tuple[list[FileDiff], list[DiffError]]:
    """Parse a hand-kept diff the way ``patch`` reads it: hunk sizes from their bodies.

    Returns the file diffs with corrected hunk headers (counts taken from the
    body, new-side starts recomputed from the old side) and every repair made,
    as errors with the diff's line numbers. A diff that parses strictly comes
    back unchanged with no errors. Raises ``DiffError`` only when no file diff
    is found at all.
    """
    try:
        return parse(data), []
    except DiffError as e:
        strict = e
    problems: list[DiffError] = []
    lines = split_lines(data)
    files: list[FileDiff] = []
    i, n = 0, len(lines)
    while i < n:
        if not (lines[i].startswith(b"--- ") and i + 1 < n and lines[i + 1].startswith(b"+++ ")):
            i += 1
            continue
        header_line = i + 1
        old_path, new_path = _path(lines[i], i + 1), _path(lines[i + 1], i + 2)
        i += 2
        hunks: list[Hunk] = []
        delta = 0
        while i < n and lines[i].startswith(b"@@"):
            m = _HUNK.match(lines[i].rstrip(b"\r\n"))
            if m is None:
                problems.append(DiffError(i + 1, f"malformed hunk header {lines[i].rstrip()!r}"))
                i += 1
                break
            hunk, i = _lenient_hunk(lines, i, m, delta, problems)
            delta += hunk.new_len - hunk.old_len
            hunks.append(hunk)
        if hunks:
            files.append(FileDiff(old_path, new_path, tuple(hunks), header_line))
    if not files:
        raise DiffError(1, "no file diff found (expected '--- a/…', '+++ b/…' and '@@' hunks)")
    return files, problems or [strict]


def _lenient_hunk(
    lines: list[bytes], i: int, m: re.Match[bytes], delta: int, problems: list[DiffError]
) -> tuple[Hunk, int]:
    header_line = i + 1
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_len = 1 if m.group(2) is None else int(m.group(2))
    new_len = 1 if m.group(4) is None else int(m.group(4))
    i += 1
    body: list[tuple[bytes, bytes]] = []
    # Where the declared counts are met: used when only prose follows there.
    declared_end: tuple[int, int] | None = None
    old_seen = new_seen = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"@@") or (
            line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ ")
        ):
            break
        if line in (b"\n", b"\r\n"):
            tag, content = b" ", line
        elif line[:1] in (b" ", b"-", b"+"):
            tag, content = line[:1], line[1:]
        elif line.startswith(NO_NEWLINE[:2]) and body:
            _strip_newline(body)
            i += 1
            continue
        else:
            break
        body.append((tag, content))
        old_seen += tag != b"+"
        new_seen += tag != b"-"
        i += 1
        if declared_end is None and (old_seen, new_seen) == (old_len, new_len):
            declared_end = (len(body), i)
    if declared_end is not None and all(
        c.strip() == b"" or (t == b"-" and c.startswith(b"- ")) for t, c in body[declared_end[0] :]
    ):
        # The rest is blank lines or a format-patch signature ("-- "): the header was right.
        body, i = body[: declared_end[0]], declared_end[1]
    old = sum(1 for t, _ in body if t != b"+")
    new = sum(1 for t, _ in body if t != b"-")
    fixed_new_start = old_start + delta if old else new_start
    if (old, new) != (old_len, new_len):
        problems.append(
            DiffError(header_line, f"hunk header says -{old_len} +{new_len} lines, its body has -{old} +{new}")
        )
    if old and new and fixed_new_start != new_start:
        problems.append(
            DiffError(
                header_line,
                f"hunk header starts the new side at {new_start}; the earlier hunks put it at {fixed_new_start}",
            )
        )
    return Hunk(old_start, old, fixed_new_start if old else new_start, new, tuple(body), header_line), i


def _hunk_header(line: bytes, header_line: int) -> tuple[int, int, int, int]:
    """``@@ -a,b +c,d @@``: old start, old length, new start, new length (a length left out is 1)."""
    m = _HUNK.match(line.rstrip(b"\r\n"))
    if m is None:
        raise DiffError(header_line, f"malformed hunk header {line.rstrip()!r}")
    old_len = 1 if m.group(2) is None else int(m.group(2))
    new_len = 1 if m.group(4) is None else int(m.group(4))
    return int(m.group(1)), old_len, int(m.group(3)), new_len


def _body_line(line: bytes) -> tuple[bytes, bytes] | None:
    """A hunk line's tag and content, or None when it is no body line."""
    if line in (b"\n", b"\r\n"):
        return b" ", line  # a blank context line whose space was stripped
    if line[:1] in (b" ", b"-", b"+"):
        return line[:1], line[1:]
    return None


def _hunk_body(
    lines: list[bytes], i: int, header_line: int, old_len: int, new_len: int
) -> tuple[list[tuple[bytes, bytes]], int]:
    """Exactly the body lines the header declares, from line ``i``; and the index after them."""
    body: list[tuple[bytes, bytes]] = []
    old_seen = new_seen = 0
    while old_seen < old_len or new_seen < new_len:
        if i >= len(lines):
            raise DiffError(
                header_line,
                f"hunk declares {old_len} old / {new_len} new lines but the diff ends after "
                f"{old_seen} old / {new_seen} new",
            )
        parsed = _body_line(lines[i])
        if parsed is None and lines[i].startswith(NO_NEWLINE[:2]) and body:
            _strip_newline(body)
            i += 1
            continue
        if parsed is None:
            raise DiffError(
                header_line,
                f"hunk declares {old_len} old / {new_len} new lines but has "
                f"{old_seen} old / {new_seen} new before line {i + 1}",
            )
        old_seen += parsed[0] != b"+"  # context and removed lines are on the old side
        new_seen += parsed[0] != b"-"  # context and added lines on the new side
        if old_seen > old_len or new_seen > new_len:
            raise DiffError(
                header_line,
                f"hunk declares {old_len} old / {new_len} new lines but line {i + 1} exceeds that",
            )
        body.append(parsed)
        i += 1
    return body, i


def _parse_hunk(lines: list[bytes], i: int) -> tuple[Hunk, int]:
    """The hunk whose header is line ``i``, read strictly; and the index after it."""
    header_line = i + 1
    old_start, old_len, new_start, new_len = _hunk_header(lines[i], header_line)
    body, i = _hunk_body(lines, i + 1, header_line, old_len, new_len)
    if i < len(lines) and lines[i].startswith(NO_NEWLINE[:2]):
        _strip_newline(body)
        i += 1
    hunk = Hunk(old_start, old_len, new_start, new_len, tuple(body), header_line)
    if (old_len == 0 and old_start < 0) or (new_len == 0 and new_start < 0):
        raise DiffError(header_line, "negative line number in hunk header")
    return hunk, i


def _strip_newline(body: list[tuple[bytes, bytes]]) -> None:
    # Only the "\n" goes: a "\r" before it was part of the line's bytes.
    tag, content = body[-1]
    if content.endswith(b"\n"):
        body[-1] = (tag, content[:-1])


def apply(diff: FileDiff, old: bytes, *, reverse: bool = False) -> bytes:
    """Apply ``diff`` to ``old`` as ``git apply`` does, and refuse a hunk that is not at its stated line.

    The bytes are ``git apply``'s (see :func:`apply_shifted`); on top of that
    every hunk must sit where its header says, on both sides: the stricter
    reading for diffs patchkit wrote itself or verifies (``check``), where a
    hunk some lines away means the diff and the file no longer belong
    together. ``reverse`` undoes the diff (``git apply -R``): what applying
    ``diff.reversed()`` does, without building the reversed diff.
    """
    data, placed = _apply(diff, old, reverse=reverse)
    for p in placed:
        if p.problem is not None:
            raise ApplyError(p.line, p.problem)
    return data


def apply_shifted(diff: FileDiff, old: bytes) -> tuple[bytes, int]:
    """Apply ``diff`` to ``old`` exactly as ``git apply`` does; the result and the largest offset.

    Every line of every hunk matches byte for byte (no fuzz, no whitespace
    leniency); a hunk whose lines are some lines away from where its header
    says applies there (an offset), the nearest match first and, of two
    equally near, the one below; a line an earlier hunk wrote never matches.
    A hunk whose header says line 1 (or 0) must match at the start of the
    file and one with no trailing context at its end; a diff with no context
    line at all is read as ``git diff -U0`` output (``git apply --unidiff-zero``:
    its hunks anchored only at line 0). Raises ``ApplyError`` where ``git apply``
    refuses, and also where it would join two lines (a hunk ending with
    ``\\ No newline at end of file`` where the file goes on), as ``patch`` does.
    The offset returned is the largest distance, in lines, between where a
    hunk's header puts it and where it applied (0 when every hunk was at its
    line).
    """
    data, placed = _apply(diff, old)
    return data, max((abs(p.offset) for p in placed), default=0)


def apply_placed(diff: FileDiff, old: bytes, *, reverse: bool = False) -> tuple[bytes, list[Placed]]:
    """``git apply`` of ``diff`` onto ``old`` (``-R`` when ``reverse``), and where each hunk went.

    The bytes are :func:`apply_shifted`'s; each :class:`Placed` says how far
    its hunk was from its header's line and what the strict reading of
    :func:`apply` finds wrong with it, so a caller can report that and still
    give ``git apply``'s result.
    """
    return _apply(diff, old, reverse=reverse)


class Placed(NamedTuple):
    """Where one hunk applied, and what patchkit's stricter reading finds wrong with its header."""

    line: int  # the hunk header's line in the diff
    offset: int  # lines between where the header puts the hunk and where it applied
    problem: str | None  # why the header does not describe where the hunk went, or None


def _apply(diff: FileDiff, old: bytes, *, reverse: bool = False, joins: bool = False) -> tuple[bytes, list[Placed]]:
    """``git apply`` (``-R`` when ``reverse``) of ``diff`` onto ``old``: the bytes and each hunk's place.

    ``joins`` also gives the result where git joins two lines (a hunk side
    ending without a newline, in the middle of the file), which patchkit
    refuses: the differential test uses it to show the rest is git's.
    """
    img = _Image(split_lines(old))
    placed: list[Placed] = []
    delta = 0  # lines the hunks so far added (or removed, negative)
    end = 0  # where the last hunk's new side ends in the image
    news: list[list[bytes]] = []
    # A diff with no context line at all is ``git diff -U0`` output, applied as ``--unidiff-zero`` does;
    # one context-less hunk among hunks with context is anchored as git anchors any other.
    zero = all(t != b" " for hunk in diff.hunks for t, _ in hunk.lines)
    for hunk in diff.hunks:
        h = _Sides.of(hunk, reverse, zero)
        at = img.place(h)
        # Where the header puts the hunk: after the earlier hunks, at its old side's line.
        stated = (h.old_start if h.old_len == 0 else h.old_start - 1) + delta
        placed.append(Placed(h.line, at - stated, _header_problem(h, at, stated, end)))
        news.append(h.new_lines)
        delta += len(h.new_lines) - len(h.old_lines)
        end = at + len(h.new_lines)
    # Only a side or a file ending without a newline can leave one in the middle.
    open_end = (bool(old) and not old.endswith(b"\n")) or any(n and not n[-1].endswith(b"\n") for n in news)
    joined = img.joined() if open_end and not joins else None
    if joined is not None:
        raise joined
    return b"".join(img.lines), placed


def _header_problem(h: _Sides, at: int, stated: int, end: int) -> str | None:
    """What patchkit's strict reading finds wrong with the place of a hunk ``git apply`` put at ``at``."""
    if at < end:
        return f"hunk applies at line {at + 1}, above the end of the hunk before it (line {end}): hunks out of order"
    if at != stated:
        return (
            f"hunk header says line {stated + 1} (after the hunks before it), but its lines are at line {at + 1}: "
            f"an offset of {at - stated:+d}"
        )
    new_at = h.new_start if h.new_len == 0 else h.new_start - 1
    if new_at != at:
        return (
            f"hunk header says the new side starts at line {h.new_start}, but it starts at line {at + (h.new_len != 0)}"
        )
    return None


class _Sides(NamedTuple):
    """A hunk as applied: the side it expects and the side it leaves, swapped when it is undone."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    old_lines: list[bytes]
    new_lines: list[bytes]
    line: int
    leading: int  # context lines before the first change
    trailing: int  # context lines after the last change
    zero_context: bool  # the diff has no context line at all: ``git diff -U0`` output (``git apply --unidiff-zero``)

    @classmethod
    def of(cls, h: Hunk, reverse: bool, zero: bool) -> _Sides:
        lines = h.lines
        n = len(lines)
        leading = trailing = 0
        while leading < n and lines[leading][0] == b" ":
            leading += 1
        while trailing < n - leading and lines[n - 1 - trailing][0] == b" ":
            trailing += 1
        olds, news = [c for t, c in lines if t != b"+"], [c for t, c in lines if t != b"-"]
        if reverse:
            return cls(h.new_start, h.new_len, h.old_start, h.old_len, news, olds, h.line, leading, trailing, zero)
        return cls(h.old_start, h.old_len, h.new_start, h.new_len, olds, news, h.line, leading, trailing, zero)


def _open(lines: list[bytes]) -> bool:
    """The last of ``lines`` has no newline."""
    return bool(lines) and not lines[-1].endswith(b"\n")


def _outward(pos: int, nr: int) -> Iterator[int]:
    """apply.c ``find_pos``'s order after ``pos``: one below, one above, two below, two above... within 0..nr."""
    for d in range(1, max(pos, nr - pos) + 1):
        if pos + d <= nr:
            yield pos + d
        if pos - d >= 0:
            yield pos - d


def _git_hash(line: bytes) -> int:
    """git apply's line hash (apply.c ``hash_line``, 24 bits): blind to spaces, tabs, CR and LF."""
    h = 0
    for c in line:
        if c not in b" \t\n\r":
            h = (h * 3 + c) & 0xFFFFFF
    return h


class _Image:
    """The file being patched as ``git apply`` holds it: its lines, and which of them a hunk wrote.

    A line a hunk wrote never matches a later hunk (apply.c ``LINE_PATCHED``).
    A hunk ending without a newline leaves a line without one in the middle
    of the image when the file goes on; it stays one entry, as in git.
    """

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines
        self.written = [0] * len(lines)  # the diff line of the hunk that wrote each line, 0 for none
        self.inside = False  # whether a line before the last may lack its newline

    def place(self, h: _Sides) -> int:
        """Apply one hunk where ``git apply`` puts it; its index. Raise ``ApplyError`` where git refuses."""
        # apply.c apply_one_fragment: a hunk at line 0, or at line 1 with context, belongs at the start;
        # one without trailing context at the end; a -U0 hunk (no context at all) is anchored only at 0.
        zero = h.zero_context
        begin = h.old_start == 0 or (h.old_start == 1 and not zero)
        end = not zero and h.trailing == 0
        pos = h.new_start - 1 if h.new_start else 0
        at = self.find(h.old_lines, pos, begin, end)
        if at is None:
            raise ApplyError(h.line, self.refusal(h, pos, begin, end))
        n = len(h.old_lines)
        # A line without a newline can now be inside the image: the exact-lines shortcut no longer holds.
        self.inside = self.inside or _open(self.lines) or _open(h.new_lines)
        self.lines[at : at + n] = h.new_lines
        self.written[at : at + n] = [h.line] * len(h.new_lines)
        return at

    def joined(self) -> ApplyError | None:
        """A line without a newline before the file's end: two lines joined into one, and the hunk to blame.

        A hunk side ending with ``\\ No newline at end of file`` is the end
        of the file; put where the file goes on, ``git apply`` joins its last
        line with the next (``y`` + ``z\\n``). ``patch`` refuses, and so does patchkit.
        """
        for k, line in enumerate(self.lines[:-1]):
            if not line.endswith(b"\n"):
                hunk = self.written[k] or self.written[k + 1]
                return ApplyError(
                    hunk,
                    f"the hunk leaves line {k + 1} without a newline ('\\ No newline at end of file') where the file "
                    "goes on: applying it would join two lines (git apply would; patch refuses, and so does patchkit)",
                )
        return None

    def find(self, pre: list[bytes], pos: int, begin: bool, end: bool) -> int | None:
        """apply.c ``find_pos``: from ``pos``, the nearest line where ``pre`` matches; the one below first."""
        nr = len(self.lines)
        if begin:
            pos = 0
        elif end:
            pos = nr - len(pre)
        if not 0 <= pos <= nr:
            pos = nr
        n = len(pre)
        whole = not self.inside and not _open(pre)
        for k in itertools.chain((pos,), _outward(pos, nr)):
            if self._fits(k, n, begin, end) and (self._same(k, pre) if whole else self._matches_bytes(k, pre, end)):
                return k
        return None

    def _fits(self, k: int, n: int, begin: bool, end: bool) -> bool:
        """The hunk's ``n`` old lines fit at line ``k``: inside the file, and at its start or end when anchored."""
        nr = len(self.lines)
        return k + n <= nr and not (end and k + n != nr) and not (begin and k)

    def _same(self, k: int, pre: list[bytes]) -> bool:
        """Whole lines on both sides: the bytes match when the lines do (and no hunk wrote them)."""
        n = len(pre)
        return (not n or self.lines[k] == pre[0]) and self.lines[k : k + n] == pre and not any(self.written[k : k + n])

    def _matches_bytes(self, k: int, pre: list[bytes], end: bool) -> bool:
        # A line without its newline (the hunk's last old line, or one an earlier hunk left): git
        # compares line hashes, then the hunk's bytes against the image's from line k on.
        n = len(pre)
        window = self.lines[k : k + n]
        if not self.inside and window[:-1] != pre[:-1]:
            return False  # whole lines before the last one: they must be equal
        if any(self.written[k : k + n]) or any(_git_hash(a) != _git_hash(b) for a, b in zip(pre, window, strict=True)):
            return False
        want = b"".join(pre)
        rest = b"".join(self.lines[k:])
        return rest == want if end else rest.startswith(want)

    def refusal(self, h: _Sides, pos: int, begin: bool, end: bool) -> str:
        """Why no place fits: where the lines are but may not go, or the first differing line and whether fuzz fits."""
        pre = h.old_lines
        loose = self.find(pre, pos, False, False)
        if loose is not None:
            needs = [
                *(["start at the file's first line (its header says line 1)"] if begin else []),
                *(["end at the file's last line (it has no context below it)"] if end else []),
            ]
            return f"the hunk's lines are at line {loose + 1}, but it must {' and '.join(needs)}, as git apply requires"
        at = min(max(pos, 0), len(self.lines))
        actual = self.lines[at : at + len(pre)]
        detail = f"the hunk expects {len(pre)} lines from line {at + 1}, but the file has {len(self.lines)}"
        for k, (got, want) in enumerate(zip(actual, pre, strict=False)):
            if got != want:
                detail = (
                    f"line {at + k + 1} of the file does not match the hunk "
                    f"(expected {want[:60]!r}, found {got[:60]!r})"
                )
                break
        return detail + self.fuzz_note(h)

    def fuzz_note(self, h: _Sides) -> str:
        """``; only fuzz would apply it ...`` when dropping context lines finds a place, else nothing."""
        tags = h.leading, h.trailing
        for drop in range(1, max(tags) + 1):
            lead, trail = min(drop, h.leading), min(drop, h.trailing)
            pre = h.old_lines[lead : len(h.old_lines) - trail]
            if pre and self.find(pre, max(h.old_start - 1 + lead, 0), False, False) is not None:
                return (
                    f"; only fuzz would apply it (ignoring {lead + trail} of its context lines), "
                    "and patchkit applies as git apply does, without fuzz"
                )
        return ""


def make(old: bytes, new: bytes, old_name: str, new_name: str, context: int = 3) -> bytes:
    """A unified diff from ``old`` to ``new`` with stable headers and no timestamps.

    Empty when the two are equal. A missing final newline is marked the way
    ``diff`` and ``git`` mark it.
    """
    a, b = split_lines(old), split_lines(new)
    if a == b:
        return b""
    out = [f"--- {old_name}\n".encode(), f"+++ {new_name}\n".encode()]
    for group in line_matcher(a, b).get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@\n".encode())
        for tag, ai1, ai2, bj1, bj2 in group:
            if tag == "equal":
                out.extend(_emit(b" ", a[ai1:ai2]))
                continue
            if tag in ("replace", "delete"):
                out.extend(_emit(b"-", a[ai1:ai2]))
            if tag in ("replace", "insert"):
                out.extend(_emit(b"+", b[bj1:bj2]))
    return b"".join(out)


def line_matcher(a: Sequence[bytes], b: Sequence[bytes]) -> Any:
    """The line matcher every diff and merge of patchkit uses: patience diff.

    Patience diff anchors on lines that occur once in both files, which keeps
    hunks around the real change in code full of blank lines and brackets,
    and the Rust implementation (patiencediff) is an order of magnitude
    faster than difflib without autojunk, whose time grows with the square
    of how often a line repeats. It has difflib's interface.
    """
    import patiencediff

    return patiencediff.PatienceSequenceMatcher(None, a, b)


def _range(start: int, stop: int) -> str:
    length = stop - start
    first = start + 1
    if length == 0:
        first -= 1
    return f"{first}" if length == 1 else f"{first},{length}"


def _emit(tag: bytes, lines: list[bytes]) -> list[bytes]:
    out = []
    for line in lines:
        if line.endswith(b"\n"):
            out.append(tag + line)
        else:
            out.append(tag + line + b"\n" + NO_NEWLINE + b"\n")
    return out


def stat(diff: FileDiff) -> tuple[int, int]:
    """(lines added, lines removed)."""
    return diff.added, diff.removed


def canonical_diff(base: bytes, new: bytes, base_path: UpstreamPath) -> bytes:
    """The diff patchkit writes: ``a/<upstream path>`` and ``b/<upstream path>``, no timestamps."""
    return make(base, new, f"a/{base_path}", f"b/{base_path}")
