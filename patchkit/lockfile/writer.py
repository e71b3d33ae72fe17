"""Writing the lockfile in its canonical form.

``dumps`` writes fixed key order and fixed formatting, so the same content always
gives the same bytes and a re-lock without change is a no-op. The order and the
form of every field is its record's field table in ``lockfile.model``; the TOML
text is ``tomli_w``'s (``render`` gives it faster for the shapes a lockfile has).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeGuard

import tomli_w

from patchkit.core import sums
from patchkit.core.hashing import sha256_bytes
from patchkit.core.values import LOCKFILE_NAME
from patchkit.lockfile.model import HEADER, LOCKFILE, Lockfile

# What a TOML basic string cannot hold as it is (tomli_w escapes it): a quote, a backslash, a control character
# other than tab. A string without any is written between quotes unchanged.
_ESCAPED = re.compile(r'[\x00-\x08\x0a-\x1f\x7f"\\]')
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")

# The last lockfile rendered and its text. A rebase renders the same lockfile for its journal and then to write
# it; the model is frozen through and through, so the same object always has the same text.
_last: list[tuple[Lockfile, str]] = []


def dumps(lock: Lockfile) -> str:
    """The canonical text of a lockfile: same content, same bytes.

    Tables and keys come in their tables' order, unset optional fields are
    left out, arrays of references are written one per line so a pull request
    shows each added or dropped reference on its own line.
    """
    last = _last[:1]
    if last and last[0][0] is lock:
        return last[0][1]
    text = HEADER + "\n" + render(LOCKFILE.write(lock))
    _last[:] = [(lock, text)]
    return text


def render(doc: Mapping[str, object]) -> str:
    """``tomli_w.dumps(doc)``, the same text, without tomli_w's character-by-character loop over plain strings.

    tomli_w escapes a string one character at a time in Python: two thirds of
    the time it takes to write 1,000 patches, nearly all spent on hashes,
    paths and names that need no escape. Here tables, their headers and their
    order follow tomli_w's rules (a table's own values first, then its
    sub-tables and arrays of tables, a blank line between), a plain string
    (``_ESCAPED`` finds nothing) or an integer is written as tomli_w writes
    it, and every other value, key and the choice between an array of tables
    and an inline array is asked of tomli_w itself. A seeded test holds the
    two equal on generated documents and lockfiles full of hostile strings
    (tests/lockfile/test_canonical.py).
    """
    out: list[str] = []
    _table(doc, "", False, out, {})
    return "".join(out)


def _table(table: Mapping[str, object], name: str, in_array: bool, out: list[str], keys: dict[str, str]) -> None:
    """The text of ``table`` at header ``name`` (an entry of an array of tables when ``in_array``), onto ``out``.

    ``keys`` holds each key as written, once worked out (a lockfile has a few dozen keys, used thousands of times).
    """
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, object], bool]] = []
    for key, value in table.items():
        cls = value.__class__
        if cls is str or cls is int:
            lines.append(f"{keys.get(key) or _key(key, keys)} = {_value(value)}\n")
        elif isinstance(value, Mapping):
            tables.append((key, value, False))
        elif _is_array_of_tables(value) and not all(_fits_inline(t) for t in value):
            tables.extend((key, t, True) for t in value)
        else:
            lines.append(f"{keys.get(key) or _key(key, keys)} = {_value(value)}\n")
    written = bool(lines)
    if in_array or (name and (lines or not tables)):
        written = True
        out.append(f"[[{name}]]\n" if in_array else f"[{name}]\n")
    out += lines
    for key, sub, sub_in_array in tables:
        if written:
            out.append("\n")
        written = True
        part = keys.get(key) or _key(key, keys)
        _table(sub, f"{name}.{part}" if name else part, sub_in_array, out, keys)


def _is_array_of_tables(value: object) -> TypeGuard[list[Mapping[str, object]] | tuple[Mapping[str, object], ...]]:
    return isinstance(value, list | tuple) and bool(value) and all(isinstance(t, Mapping) for t in value)


def _fits_inline(entry: Mapping[str, object]) -> bool:
    """Whether tomli_w writes this entry of an array of tables inline (it is short): tomli_w's own answer."""
    return not tomli_w.dumps({"x": [entry]}).startswith("[[")


def _key(key: str, keys: dict[str, str]) -> str:
    """``key`` as tomli_w writes it (bare, else quoted), remembered in ``keys``."""
    bare = key.__class__ is str and _BARE_KEY.fullmatch(key)
    written = key if bare else tomli_w.dumps({key: 0})[: -len(" = 0\n")]
    keys[key] = written
    return written


def _value(value: object) -> str:
    """A value as tomli_w writes it: a plain string or an integer here, anything else by tomli_w."""
    if value.__class__ is int:
        return str(value)
    if isinstance(value, str) and value.__class__ is str and not _ESCAPED.search(value):
        return f'"{value}"'
    return tomli_w.dumps({"x": value})[len("x = ") : -1]


def expected_sums(lock: Lockfile, lock_bytes: bytes) -> bytes:
    """The SHA256SUMS patchkit generates: the lockfile itself and every file it pins."""
    entries = {str(path): str(sha) for _, path, sha in lock.files()}
    entries[LOCKFILE_NAME] = sha256_bytes(lock_bytes)
    return sums.render(entries.items())
