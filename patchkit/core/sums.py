"""SHA256SUMS in GNU coreutils format, exactly as ``sha256sum`` writes and reads it.

Each line is ``<64 hex>  <name>``. A name holding a backslash, newline or
carriage return is escaped (``\\\\``, ``\\n``, ``\\r``) and its line starts with
a backslash, which is how coreutils 9 marks escaped names. Works on bytes:
file names are arbitrary bytes on Linux.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from patchkit.errors import Problem

FILENAME = "SHA256SUMS"


@dataclass(frozen=True)
class SumLine:
    line: int
    sha256: str
    name: str


def _escape(name: str) -> tuple[bool, str]:
    if not any(c in name for c in "\\\n\r"):
        return False, name
    return True, name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def render(entries: Iterable[tuple[str, str]]) -> bytes:
    """SHA256SUMS bytes for (name, hex) pairs, sorted by the name's bytes."""
    lines = []
    for name, hexdigest in sorted(entries, key=lambda e: e[0].encode("utf-8", "surrogateescape")):
        escaped, text = _escape(name)
        lines.append(("\\" if escaped else "") + f"{hexdigest}  {text}\n")
    return "".join(lines).encode("utf-8", "surrogateescape")


def parse(data: bytes, filename: str = FILENAME) -> tuple[list[SumLine], list[Problem]]:
    """Parse SHA256SUMS as ``sha256sum -c --strict`` does; the lines it rejects become problems.

    Every line coreutils accepts is an entry, canonical or not (see :func:`read`
    for which ones patchkit would write differently).
    """
    got = read(data, filename)
    return got.entries, got.malformed


@dataclass(frozen=True)
class Sums:
    """A SHA256SUMS file as coreutils reads it.

    ``entries``: every line ``sha256sum -c --strict`` accepts; ``malformed``:
    the lines it rejects (so ``--strict`` fails); ``noncanonical``: accepted
    lines (and comments, blank lines) that patchkit would not write, as
    problems saying how they differ.
    """

    entries: list[SumLine]
    malformed: list[Problem]
    noncanonical: list[Problem]


_WHITE = b" \t"
_BSD_TAG = b"SHA256"
# A line as patchkit writes it: lower-case hex, two spaces, a name that needs no escape.
_CANONICAL = re.compile(rb"[0-9a-f]{64}  [^\\\r\0]+")


def read(data: bytes, filename: str = FILENAME) -> Sums:
    """Read SHA256SUMS line by line exactly as ``sha256sum -c`` of coreutils 9.1 (``digest.c``) does.

    Accepted: leading blanks, a ``\\`` before an escaped name, upper-case hex,
    the ``*`` binary marker, a tab after the hex, the BSD form ``SHA256 (name) =
    hex`` (``SHA256 () = hex`` names the empty name, which no file has), the
    single-space "BSD reversed" form, ``#`` comments in column 1, blank lines,
    a trailing CR and a last line without newline. The form is sticky, as
    ``split_3`` keeps it: the first line read as two-space (or ``*``) fixes
    it, and a later single-space line is rejected; the first single-space line
    fixes the reversed form, and a later two-space line's name then starts
    with its blank. A line rejected for a bad escape has fixed the form all the
    same. A NUL ends an unescaped name (C strings) and makes an escaped one
    invalid.
    """
    out = Sums([], [], [])
    reversed_form: bool | None = None  # coreutils' bsd_reversed: None unknown, then fixed by a line
    lines = data.split(b"\n")
    last_open = bool(lines and lines[-1])
    if not last_open:
        lines = lines[:-1]
    last = len(lines) if last_open else 0  # the line without a newline, if any
    for lineno, raw in enumerate(lines, start=1):
        if reversed_form is not True and lineno != last and _CANONICAL.fullmatch(raw):
            # The line patchkit writes (most lines): nothing to split, nothing to report.
            out.entries.append(SumLine(lineno, raw[:64].decode(), raw[66:].decode("utf-8", "surrogateescape")))
            reversed_form = False
            continue
        if raw.startswith(b"#"):
            out.noncanonical.append(Problem(filename, lineno, None, "a comment line (patchkit writes none)"))
            continue
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if not line:
            out.noncanonical.append(Problem(filename, lineno, None, "a blank line (patchkit writes none)"))
            continue
        got = _split(line, reversed_form)
        reversed_form = got.form
        if got.problem:
            out.malformed.append(
                Problem(
                    filename,
                    lineno,
                    None,
                    f"malformed line ({got.problem}), sha256sum -c --strict rejects it: {raw[:80]!r}",
                )
            )
            continue
        entry = SumLine(lineno, got.hexdigest.lower(), got.name)
        out.entries.append(entry)
        why = _noncanonical(raw, entry, last_line=last_open and lineno == len(lines))
        if why:
            out.noncanonical.append(
                Problem(filename, lineno, None, f"lists {got.name} in a form patchkit does not write ({why})")
            )
    return out


@dataclass(frozen=True)
class _Split:
    """One line as coreutils ``split_3`` leaves it: the form it fixed, and its entry or why it is rejected."""

    form: bool | None
    hexdigest: str = ""
    name: str = ""
    problem: str = ""


_NOT_GNU = "not '<64 hex>  <name>'"


def _split(line: bytes, reversed_form: bool | None) -> _Split:
    """coreutils 9.1 ``split_3`` on one line (newline and one CR removed)."""
    i = len(line) - len(line.lstrip(_WHITE))
    escaped = line[i : i + 1] == b"\\"
    i += escaped
    if line.startswith(_BSD_TAG, i):
        return _split_bsd(line, i + len(_BSD_TAG), escaped, reversed_form)
    if len(line) - i < 66 + (line[i : i + 1] == b"\\"):
        return _Split(reversed_form, problem=_NOT_GNU)
    hexdigest = line[i : i + 64]
    i += 64
    if line[i] not in _WHITE or not _is_hex(hexdigest):
        return _Split(reversed_form, problem=_NOT_GNU)
    i += 1
    form = reversed_form
    if len(line) - i == 1 or line[i] not in b" *":
        if reversed_form is False:
            return _Split(False, problem="a single space after the hex, mixed with '<hex>  <name>' lines")
        form = True
    elif reversed_form is not True:
        form = False
        i += 1
    name = _name(line[i:], escaped)
    if name is None:
        return _Split(form, problem="bad backslash escape in the file name")
    return _Split(form, hexdigest.decode(), name)


def _split_bsd(line: bytes, i: int, escaped: bool, form: bool | None) -> _Split:
    """coreutils ``bsd_split_3``: ``SHA256 (name) = hex``, the name up to the last ')'. Leaves the form as it is."""
    i += line[i : i + 1] == b" "
    if line[i : i + 1] != b"(":
        return _Split(form, problem="'SHA256' not followed by ' (name) = <hex>'")
    rest = line[i + 1 :]
    close = rest.rfind(b")")
    if close < 0:
        return _Split(form, problem="BSD form without ')'")
    name = _name(rest[:close], escaped)
    if name is None:
        return _Split(form, problem="bad backslash escape in the file name")
    tail = rest[close + 1 :].split(b"\0")[0].lstrip(_WHITE)
    if not tail.startswith(b"="):
        return _Split(form, problem="BSD form without '= <hex>'")
    hexdigest = tail[1:].lstrip(_WHITE)
    if len(hexdigest) != 64 or not _is_hex(hexdigest):
        return _Split(form, problem="BSD form whose digest is not 64 hex digits")
    return _Split(form, hexdigest.decode(), name)


def _is_hex(b: bytes) -> bool:
    return _HEX.fullmatch(b) is not None


_HEX = re.compile(rb"[0-9a-fA-F]*")
_ESCAPES = {b"\\": b"\\", b"n": b"\n", b"r": b"\r"}


def _unescape(raw: bytes) -> bytes | None:
    """coreutils ``filename_unescape``: ``\\\\``, ``\\n``, ``\\r``; None for another escape, a final ``\\`` or a NUL."""
    out = bytearray()
    i = 0
    while i < len(raw):
        c = raw[i : i + 1]
        if c == b"\0":
            return None
        if c == b"\\":
            mapped = _ESCAPES.get(raw[i + 1 : i + 2])
            if mapped is None:
                return None
            out += mapped
            i += 2
            continue
        out += c
        i += 1
    return bytes(out)


def _name(raw: bytes, escaped: bool) -> str | None:
    """The file name as coreutils opens it: unescaped, or up to the first NUL (a C string)."""
    name = _unescape(raw) if escaped else raw.split(b"\0")[0]
    return None if name is None else name.decode("utf-8", "surrogateescape")


def _separator(sep: bytes) -> list[str]:
    """How the two bytes after the hex of a GNU line differ from the two spaces patchkit writes."""
    if sep == b" *":
        return ["binary marker '*'"]
    if sep[:1] == b"\t":
        return ["a tab after the hex"]
    if sep[:1] == b" " and sep != b"  ":
        return ["one space after the hex"]
    return []


def _noncanonical(raw: bytes, entry: SumLine, *, last_line: bool) -> str:
    """How the accepted line ``raw`` differs from the line patchkit writes for it ('' when it does not)."""
    want = render([(entry.name, entry.sha256)]).rstrip(b"\n")
    if raw == want and not last_line:
        return ""
    reasons = []
    body = raw.rstrip(b"\r")
    if body[:1] in (b" ", b"\t"):
        reasons.append("leading whitespace")
    bsd = body.lstrip(_WHITE).lstrip(b"\\").startswith(_BSD_TAG)
    if bsd:
        reasons.append("BSD form 'SHA256 (name) = hex'")
    if entry.sha256.encode() not in body:
        reasons.append("upper-case hex")
    if not bsd:
        reasons += _separator(body.lstrip(_WHITE).lstrip(b"\\")[64:66])
    if b"\0" in body:
        reasons.append("a NUL byte, where the name ends")
    if raw.endswith(b"\r"):
        reasons.append("CRLF line ending")
    if last_line:
        reasons.append("no newline at the end of the file")
    if not reasons:
        reasons.append("a backslash escape patchkit would not write")
    return ", ".join(reasons)
