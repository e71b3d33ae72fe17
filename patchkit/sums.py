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

_LINE = re.compile(rb"(\\?)([0-9a-fA-F]{64}) ([ *])(.+)")


@dataclass(frozen=True)
class SumLine:
    line: int
    sha256: str
    name: str


def _escape(name: str) -> tuple[bool, str]:
    if not any(c in name for c in "\\\n\r"):
        return False, name
    return True, name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _unescape(text: str) -> str | None:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            nxt = text[i + 1 : i + 2]
            if nxt == "\\":
                out.append("\\")
            elif nxt == "n":
                out.append("\n")
            elif nxt == "r":
                out.append("\r")
            else:
                return None
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def render(entries: Iterable[tuple[str, str]]) -> bytes:
    """SHA256SUMS bytes for (name, hex) pairs, sorted by the name's bytes."""
    lines = []
    for name, hexdigest in sorted(entries, key=lambda e: e[0].encode("utf-8", "surrogateescape")):
        escaped, text = _escape(name)
        lines.append(("\\" if escaped else "") + f"{hexdigest}  {text}\n")
    return "".join(lines).encode("utf-8", "surrogateescape")


def parse(data: bytes, filename: str = FILENAME) -> tuple[list[SumLine], list[Problem]]:
    """Parse SHA256SUMS; malformed lines become problems with their line number."""
    entries: list[SumLine] = []
    problems: list[Problem] = []
    if data and not data.endswith(b"\n"):
        problems.append(Problem(filename, data.count(b"\n") + 1, None, "last line has no newline"))
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if raw == b"" and lineno == data.count(b"\n") + 1:
            break
        m = None if raw.endswith(b"\r") else _LINE.fullmatch(raw)
        if m is None:
            what = "leading space" if raw[:1] in (b" ", b"\t") else "not '<64 hex>  <name>'"
            if raw.endswith(b"\r"):
                what = "CRLF line ending"
            problems.append(Problem(filename, lineno, None, f"malformed line ({what}): {raw[:80]!r}"))
            continue
        escaped, hexdigest, mode, name_b = m.groups()
        name = name_b.decode("utf-8", "surrogateescape")
        if escaped:
            unescaped = _unescape(name)
            if unescaped is None:
                problems.append(Problem(filename, lineno, None, "bad backslash escape in file name"))
                continue
            name = unescaped
        if hexdigest != hexdigest.lower():
            problems.append(Problem(filename, lineno, None, "uppercase hex (patchkit writes lowercase)"))
        if mode == b"*":
            problems.append(Problem(filename, lineno, None, "binary-mode marker '*' (patchkit writes two spaces)"))
        entries.append(SumLine(lineno, hexdigest.decode().lower(), name))
    return entries, problems
