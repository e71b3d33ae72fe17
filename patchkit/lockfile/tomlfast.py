"""A fast reader for the plain TOML patchkit writes; anything else is left to ``tomllib``.

``tomllib`` is pure Python and reads a lockfile of 5,000 patches in about half
a second, most of what ``patchkit check`` costs. The lockfile patchkit writes
uses a small part of TOML: full-line comments, ``[table]`` and
``[[array.of.tables]]`` headers with bare keys, and ``key = value`` lines
whose value is a basic string without escapes, an integer, a boolean or a
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
_HEADER = re.compile(r"(\[\[?)([A-Za-z0-9_.-]+)(\]\]?)\Z")
_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)\Z")
# A basic string without escapes, quotes or control characters (TOML allows tab and >= 0x20 but DEL).
_STRING = re.compile(r'"([^"\\\x00-\x08\x0a-\x1f\x7f]*)"\Z')
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
    try:
        return _loads(text)
    except _Unsure:
        return None


def _loads(text: str) -> dict[str, Any]:
    root: dict[str, Any] = {}
    table = root
    keys: set[str] = set()  # the keys assigned in the current table
    defined: set[int] = set()  # tables opened by a [header] (by id), each at most once
    # Tables that exist only as the parents of other tables: they may still get a header of their own once.
    implicit: set[int] = set()
    assigned: dict[int, set[str]] = {id(root): keys}
    lines = iter(text.split("\n"))
    for line in lines:
        line = line.strip(" \t").removesuffix("\r")
        if not line:
            continue
        if line.startswith("#"):
            if not _COMMENT.match(line):
                raise _Unsure
            continue
        if line.startswith("["):
            table = _open(root, line, defined, implicit)
            keys = assigned.setdefault(id(table), set())
            continue
        key, sep, value = line.partition("=")
        key = key.strip(" \t")
        if not sep or not _BARE.match(key) or key in keys or key in table:
            raise _Unsure
        value = value.strip(" \t")
        if value == "[":
            value = _array_lines(lines)
        table[key] = _value(value)
        keys.add(key)
    return root


def _open(root: dict[str, Any], line: str, defined: set[int], implicit: set[int]) -> dict[str, Any]:
    """The table a ``[a.b]`` or ``[[a.b]]`` header opens, creating what the path needs."""
    m = _HEADER.match(line)
    if m is None or len(m.group(1)) != len(m.group(3)):
        raise _Unsure
    parts = m.group(2).split(".")
    if not all(parts):
        raise _Unsure
    parent = root
    for part in parts[:-1]:
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
        parent = node
    last = parts[-1]
    node = parent.get(last)
    if m.group(1) == "[[":
        if node is None:
            node = parent[last] = []
            defined.add(id(node))
        elif not isinstance(node, list) or id(node) not in defined:
            raise _Unsure
        fresh: dict[str, Any] = {}
        node.append(fresh)
        defined.add(id(fresh))
        return fresh
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
