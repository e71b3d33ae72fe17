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

Most lockfiles are laid out exactly as patchkit writes them, and
:func:`written` reads that layout alone, a table at a time with one regular
expression match per table rather than Python per line: a lockfile of 5,000
patches in a tenth of the time. For a text it reads, ``tomlwrite.dumps`` of
the result gives the text back, byte for byte (see :func:`written`): the
check of the lockfile's canonical form need not render it again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from patchkit.lockfile.tomlwrite import fits_inline

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


# --------------------------------------------------------------------------- the writer's own layout

_S = r'"[^"\\\x00-\x08\x0a-\x1f\x7f]*"'  # a string tomlwrite writes as it is: nothing in it needs an escape
_NAME = r'(?:[A-Za-z0-9_-]+|"[^"\\\x00-\x08\x0a-\x1f\x7f]*")(?:\.(?:[A-Za-z0-9_-]+|"[^"\\\x00-\x08\x0a-\x1f\x7f]*"))*'
# One ``key = value`` line as tomlwrite writes it: a bare key, then a string, an integer, a boolean, an empty
# array, or an array of strings written one per line (indented, each followed by a comma).
_LINE = rf"[A-Za-z0-9_-]+ = (?:{_S}|0|-?[1-9][0-9]*|true|false|\[\]|\[\n(?:    {_S},\n)+\])\n"
# A table as tomlwrite writes it: its header (the document's own keys have none), its lines, then the blank
# line before the next table or the end of the text.
_TABLE = re.compile(rf"(?:\[\[({_NAME})\]\]\n|\[({_NAME})\]\n)?((?:{_LINE})*)(\n|\Z)")
_STRING_LINE = re.compile(r'^([A-Za-z0-9_-]+) = "([^"\\\x00-\x08\x0a-\x1f\x7f]*)"$', re.M)
_VALUE_LINE = re.compile(rf"^([A-Za-z0-9_-]+) = ({_S}|\[\n(?:    {_S},\n)+\]|[^\n]*)$", re.M)


# A document as ``written`` read it: laid out as ``tomlwrite.dumps`` writes it.
Layout = dict[str, Any]


def written(text: str) -> Layout | None:
    """The document of a text laid out exactly as ``tomlwrite.dumps`` writes it; None for any other text.

    For every text it reads, ``tomlwrite.dumps(written(text)) == text`` and
    ``tomllib.loads(text) == written(text)``. Why the first holds: the writer
    writes each table as one block (its ``[header]``, or ``[[header]]`` for
    an entry of an array of tables; then its keys with values other than
    tables, one per line) and its sub-tables after it, depth first, in the
    order of the keys, a blank line between two blocks. This reader takes
    exactly the lines the writer writes for the values it knows (strings
    needing no escape, canonical integers, booleans, arrays of such strings)
    and refuses every layout the writer would write differently: a header
    that opens a table already there, or one that is not the next table of
    a depth-first walk (its parent is not on the path of tables open at
    that point); a ``[header]`` without keys over tables of its own (the
    writer leaves out such a header); a quoted key the writer writes bare;
    an array of tables the writer would write inline, every entry fitting
    on one line. What remains is the writer's own output of the document read.
    """
    try:
        return _Layout().read(text)
    except _Unsure:
        return None


class _Layout:
    """The reading of one text in the writer's layout: the tables open on the current path, and what is kept."""

    def __init__(self) -> None:
        self.root: dict[str, Any] = {}
        # The tables from the document down to the one being read: a new header's parent must be on it.
        self.path: list[dict[str, Any]] = [self.root]
        self.arrays: list[list[dict[str, Any]]] = []  # the arrays of tables [[headers]] made
        self.array_ids: set[int] = set()
        self.keyless: set[int] = set()  # tables of a [header] with no key: they may hold no table
        self.names: dict[str, tuple[str, ...]] = {}  # each header name's parts, split once

    def read(self, text: str) -> dict[str, Any]:
        pos = 0
        while True:
            m = _TABLE.match(text, pos)
            if m is None:
                raise _Unsure
            array, name, lines, blank = m.groups()
            table = _table_of(lines)
            if array is not None or name is not None:
                self.open(self.parts(array or name), array is not None, table)
                if name is not None and not lines:
                    self.keyless.add(id(table))
            elif pos or (blank and not lines):  # a table without its header, or a blank line first
                raise _Unsure
            else:
                self.root.update(table)
            if not blank:
                break
            pos = m.end()
        if any(all(fits_inline(t) for t in entries) for entries in self.arrays):
            raise _Unsure  # the writer writes such an array inline
        return self.root

    def parts(self, name: str) -> tuple[str, ...]:
        """The keys of a header's name; a quoted one must need its quotes, as the writer quotes only those."""
        parts = self.names.get(name)
        if parts is None:
            found = _PARTS.findall(name)
            if any(quoted and _BARE.match(quoted) for _, quoted in found):
                raise _Unsure
            parts = self.names[name] = tuple(bare or quoted for bare, quoted in found)
        return parts

    def open(self, parts: tuple[str, ...], array: bool, fresh: dict[str, Any]) -> None:
        """``fresh`` as the table of a header: its parents on the open path (or new), itself new or a new entry."""
        *parents, last = parts
        chain = [self.root]
        node = self.root
        for depth, part in enumerate(parents, start=1):
            child = node.get(part)
            if child is None:
                child = self.add(node, part, {})
            else:
                if child.__class__ is list and id(child) in self.array_ids:
                    child = child[-1]
                if depth >= len(self.path) or child is not self.path[depth]:
                    raise _Unsure
            chain.append(child)
            node = child
        if array:
            self.entry(node, last, fresh, len(chain))
        else:
            if last in node:
                raise _Unsure
            self.add(node, last, fresh)
        chain.append(fresh)
        self.path = chain

    def add(self, parent: dict[str, Any], key: str, table: Any) -> Any:
        """``table`` as the new last key of ``parent`` (never of a table whose header the writer would leave out)."""
        if id(parent) in self.keyless:
            raise _Unsure
        parent[key] = table
        return table

    def entry(self, parent: dict[str, Any], key: str, fresh: dict[str, Any], depth: int) -> None:
        """``fresh`` as the new last entry of the array of tables ``key``, whose last entry is on the open path."""
        entries = parent.get(key)
        if entries is None:
            entries = self.add(parent, key, [])
            self.arrays.append(entries)
            self.array_ids.add(id(entries))
        elif id(entries) not in self.array_ids or depth >= len(self.path) or entries[-1] is not self.path[depth]:
            raise _Unsure
        entries.append(fresh)


def _table_of(lines: str) -> dict[str, Any]:
    """The table of one table's lines (already matched as the writer writes them)."""
    pairs = _STRING_LINE.findall(lines)
    if len(pairs) == lines.count("\n"):  # only strings, the most of any lockfile: read in one go
        table = dict(pairs)
        if len(table) != len(pairs):
            raise _Unsure  # a key twice
        return table
    table = {}
    for key, value in _VALUE_LINE.findall(lines):
        if key in table:
            raise _Unsure
        table[key] = _written_value(value)
    return table


def _written_value(text: str) -> Any:
    """A value of a line the writer wrote: a string, an array of strings, an integer or a boolean."""
    if text[0] == '"':
        return text[1:-1]
    if text[0] == "[":
        return _ITEM.findall(text)
    if text in ("true", "false"):
        return text == "true"
    return int(text)
