"""Unified diffs on bytes: parse strictly, apply exactly, generate stably.

Everything here works on bytes, so CRLF line endings and non-UTF-8 content
survive untouched: a line is everything up to and including ``\\n``. Parsing
checks every hunk's line counts against its header and reports the diff's
line number. Applying never fuzzes: ``apply`` puts a hunk at the line its
header names or fails; ``apply_shifted`` (for diffs stacked on other diffs)
also accepts an exact match some lines away, as ``patch`` does for offsets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from patchkit.values import UpstreamPath

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
            i += 2
            hunks: list[Hunk] = []
            while i < n and lines[i].startswith(b"@@"):
                hunk, i = _parse_hunk(lines, i)
                hunks.append(hunk)
            if not hunks:
                raise DiffError(header_line, "file header without any hunk")
            files.append(FileDiff(old_path, new_path, tuple(hunks), header_line))
            continue
        if line.startswith(b"@@"):
            raise DiffError(i + 1, "hunk without a '--- '/'+++ ' file header before it")
        if files and line[:1] in (b"+", b"-", b" ") and not line.startswith((b"--- ", b"+++ ")):
            last = files[-1].hunks[-1]
            raise DiffError(
                last.line,
                f"hunk declares {last.old_len} old / {last.new_len} new lines but line {i + 1} "
                "continues it: its header counts too few lines",
            )
        # Anything else (diff --git, index, mode lines, prose) is a header line.
        i += 1
    if not files:
        raise DiffError(1, "no file diff found (expected '--- a/…', '+++ b/…' and '@@' hunks)")
    return files


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
    """Apply ``diff`` to ``old`` exactly: every hunk at its stated line, no fuzz, no offset.

    ``reverse`` undoes it (its new side back to its old one): what applying
    ``diff.reversed()`` does, without building the reversed diff.
    """
    return _apply(diff, old, shift=False, reverse=reverse)[0]


def apply_shifted(diff: FileDiff, old: bytes) -> tuple[bytes, int]:
    """Apply ``diff`` to ``old`` with every line of every hunk exact, each hunk where it matches nearest.

    What ``patch`` calls an offset, never fuzz: a hunk whose context and
    removed lines all match, a number of lines away from where its header
    says, because the diff was made on a file that had more or fewer lines
    above it (a diff stacked on another). Later hunks start from the shift the
    earlier ones needed. Returns the result and the largest shift used (0 when
    every hunk was at its line); raises ``ApplyError`` when a hunk matches
    nowhere.
    """
    return _apply(diff, old, shift=True)


def _apply(diff: FileDiff, old: bytes, *, shift: bool, reverse: bool = False) -> tuple[bytes, int]:
    src = split_lines(old)
    out: list[bytes] = []
    pos = 0  # index in src of the next line not yet copied
    delta = largest = 0
    for hunk in diff.hunks:
        h = _Sides.of(hunk, reverse)
        expected = h.old_lines
        # For a pure insertion (old_len 0) the header names the line after which to insert.
        stated = h.old_start if h.old_len == 0 else h.old_start - 1
        start = stated + delta
        if shift and expected and src[start : start + len(expected)] != expected:
            found = _nearest(src, expected, start, pos)
            if found is not None:
                start = found
        if start < pos:
            raise ApplyError(h.line, "hunk overlaps the previous one")
        if start + len(expected) > len(src):
            raise ApplyError(
                h.line,
                f"hunk expects lines {start + 1}-{start + len(expected)} but the file has {len(src)}",
            )
        actual = src[start : start + len(expected)]
        if actual != expected:
            for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
                if a != e:
                    raise ApplyError(
                        h.line,
                        f"line {start + k + 1} of the file does not match the hunk "
                        f"(expected {e[:60]!r}, found {a[:60]!r})",
                    )
        delta = start - stated
        largest = max(largest, abs(delta))
        out.extend(src[pos:start])
        # The other side's start is checked too: reversed onto the patch,
        # a hunk whose old start is wrong would otherwise pass unseen. A
        # hunk found at an offset moved both sides by it.
        new_at = (h.new_start if h.new_len == 0 else h.new_start - 1) + delta
        if new_at != len(out):
            raise ApplyError(
                h.line,
                f"hunk header says the new side starts at line {h.new_start}, but it starts at line "
                f"{len(out) + (h.new_len != 0)}",
            )
        out.extend(h.new_lines)
        pos = start + len(expected)
    out.extend(src[pos:])
    return b"".join(out), largest


class _Sides(NamedTuple):
    """A hunk as applied: the side it expects and the side it leaves, swapped when it is undone."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    old_lines: list[bytes]
    new_lines: list[bytes]
    line: int

    @classmethod
    def of(cls, h: Hunk, reverse: bool) -> _Sides:
        if reverse:
            return cls(h.new_start, h.new_len, h.old_start, h.old_len, h.new_lines(), h.old_lines(), h.line)
        return cls(h.old_start, h.old_len, h.new_start, h.new_len, h.old_lines(), h.new_lines(), h.line)


def _nearest(src: list[bytes], expected: list[bytes], start: int, floor: int) -> int | None:
    """The index nearest ``start`` (not before ``floor``) where ``expected`` matches exactly."""
    n = len(expected)
    for d in range(max(start - floor, len(src) - start) + 1):
        for at in (start - d, start + d) if d else (start,):
            if floor <= at <= len(src) - n and src[at : at + n] == expected:
                return at
    return None


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
