"""A fast reader for the plain TOML patchkit writes; anything else is left to ``tomllib``.

``tomllib`` is pure Python and reads a lockfile of 5,000 patches in about half
a second, most of what ``patchkit check`` costs. The lockfile patchkit writes
uses a small part of TOML: full-line comments, ``[table]`` and
``[[array.of.tables]]`` headers with bare keys or quoted ones without escapes
(``[refs."owner/repo#1"]``), and ``key = value`` lines with a bare key whose
value is a basic string without escapes, an integer, a boolean or an
array of such strings (on one line, or one string per line). :func:`loads` reads exactly that, line by
line, and returns None for any line or structure outside it (an escape, a
trailing comment, a dotted key, a table defined twice, ...): the caller then
parses with ``tomllib``, which also gives the error messages. For every text
it accepts, the result equals ``tomllib.loads``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_BARE = re.compile(r"[A-Za-z0-9_-]+\Z")
# A header's key part: bare, or a basic string without escapes (as the writer quotes ``[refs."owner/repo#1"]``).
_PART = r'(?:[A-Za-z0-9_-]+|"[^"\\\x00-\x08\x0a-\x1f\x7f]*")'
_HEADER = re.compile(rf"(\[\[?)({_PART}(?:\.{_PART})*)(\]\]?)\Z")
_PARTS = re.compile(r'([A-Za-z0-9_-]+)|"([^"\\\x00-\x08\x0a-\x1f\x7f]*)"')
_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)\Z")
# A basic string without escapes, quotes or control characters (TOML allows tab and >= 0x20 but DEL).
_STRING = re.compile(r'"([^"\\\x00-\x08\x0a-\x1f\x7f]*)"\Z')
# The line most of a lockfile is: ``key = "text"``, read with one match.
_KEY_STRING = re.compile(r'([A-Za-z0-9_-]+)[ \t]*=[ \t]*"([^"\\\x00-\x08\x0a-\x1f\x7f]*)"[ \t]*\Z')
_STRINGS = re.compile(
    r'\[[ \t]*((?:"[^"\\\x00-\x08\x0a-\x1f\x7f]*"[ \t]*,[ \t]*)*(?:"[^"\\\x00-\x08\x0a-\x1f\x7f]*"[ \t]*,?[ \t]*)?)\]\Z'
)
# What a comment may hold: anything but control characters (a tab is fine).
_COMMENT = re.compile(r"#[^\x00-\x08\x0a-\x1f\x7f]*\Z")
_ITEM = re.compile(r'"([^"]*)"')


class _Unsure(Exception):
    """The text leaves the subset this reader knows; tomllib decides."""


def loads(text: str) -> dict[str, Any] | None:
    """The document as ``tomllib.loads`` would return it, or None when the text is not plain enough to be sure."""
    if text.endswith("\r"):  # a carriage return that ends no line
        return None
    try:
        return _loads(text)
    except _Unsure:
        return None


def _loads(text: str) -> dict[str, Any]:
    root: dict[str, Any] = {}
    table = root
    defined: set[int] = set()  # tables opened by a [header] (by id), each at most once
    # Tables that exist only as the parents of other tables: they may still get a header of their own once.
    implicit: set[int] = set()
    lines = iter(text.split("\n"))
    for line in lines:
        line = line.strip(" \t").removesuffix("\r")
        if not line:
            continue
        m = _KEY_STRING.match(line)
        if m is not None:
            key, value = m.groups()
            if key in table:  # a key assigned twice, or a table's name
                raise _Unsure
            table[key] = value
        elif line[0] == "#":
            if not _COMMENT.match(line):
                raise _Unsure
        elif line[0] == "[":
            table = _open(root, line, defined, implicit)
        else:
            _assign(table, line, lines)
    return root


def _assign(table: dict[str, Any], line: str, lines: Iterator[str]) -> None:
    """A ``key = value`` line other than a plain string (an array may go on over the next lines)."""
    key, sep, value = line.partition("=")
    key = key.strip(" \t")
    if not sep or not _BARE.match(key) or key in table:
        raise _Unsure
    value = value.strip(" \t")
    table[key] = _value(_array_lines(lines) if value == "[" else value)


def _open(root: dict[str, Any], line: str, defined: set[int], implicit: set[int]) -> dict[str, Any]:
    """The table a ``[a.b]`` or ``[[a.b]]`` header opens, creating what the path needs."""
    m = _HEADER.match(line)
    if m is None or len(m.group(1)) != len(m.group(3)):
        raise _Unsure
    *parents, last = (bare or quoted for bare, quoted in _PARTS.findall(m.group(2)))
    node = root
    for part in parents:
        node = _parent(node, part, defined, implicit)
    if m.group(1) == "[[":
        return _open_array(node, last, defined)
    return _open_table(node, last, defined, implicit)


def _parent(parent: dict[str, Any], part: str, defined: set[int], implicit: set[int]) -> dict[str, Any]:
    """The table ``part`` of ``parent`` on the way to a header's table (the last entry of an array of tables)."""
    node = parent.get(part)
    if node is None:
        node = parent[part] = {}
        implicit.add(id(node))
    elif isinstance(node, list):
        if not node or not isinstance(node[-1], dict) or id(node) not in defined:
            raise _Unsure
        node = node[-1]
    elif not isinstance(node, dict):
        raise _Unsure
    return node


def _open_array(parent: dict[str, Any], last: str, defined: set[int]) -> dict[str, Any]:
    """A new entry of the array of tables ``last`` (``[[last]]``)."""
    node = parent.get(last)
    if node is None:
        node = parent[last] = []
        defined.add(id(node))
    elif not isinstance(node, list) or id(node) not in defined:
        raise _Unsure
    fresh: dict[str, Any] = {}
    node.append(fresh)
    defined.add(id(fresh))
    return fresh


def _open_table(parent: dict[str, Any], last: str, defined: set[int], implicit: set[int]) -> dict[str, Any]:
    """The table ``last`` (``[last]``): new, or one that so far existed only as a parent."""
    node = parent.get(last)
    if node is None:
        node = parent[last] = {}
    elif not isinstance(node, dict) or id(node) in defined or id(node) not in implicit:
        raise _Unsure
    implicit.discard(id(node))
    defined.add(id(node))
    return node


def _array_lines(lines: Iterator[str]) -> str:
    """An array written one string per line, up to its closing ``]``, as the one line ``_value`` reads."""
    items: list[str] = []
    for raw in lines:
        line = raw.strip(" \t").removesuffix("\r").rstrip(" \t")
        if line == "]":
            return "[" + " ".join(items) + "]"
        if line:
            if not line.startswith('"'):
                raise _Unsure
            items.append(line)
    raise _Unsure


def _value(text: str) -> Any:
    if text.startswith('"'):
        m = _STRING.match(text)
        if m is None:
            raise _Unsure
        return m.group(1)
    if text == "true":
        return True
    if text == "false":
        return False
    if text.startswith("["):
        m = _STRINGS.match(text)
        if m is None:
            raise _Unsure
        return _ITEM.findall(m.group(1))
    if _INT.match(text):
        return int(text)
    raise _Unsure
