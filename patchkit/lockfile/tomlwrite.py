"""The lockfile's TOML text, byte for byte what ``tomli_w.dumps`` writes, without its per-character loop.

``tomli_w`` escapes strings one character at a time in Python: rendering a
lockfile of 5,000 patches takes a quarter of a second, paid by every write
and by ``patchkit check``'s canonical-form comparison. This writer follows
``tomli_w``'s layout rules exactly (tables, arrays of tables unless every
table fits on one line as an inline table, arrays one item per line with a
trailing comma) and escapes a string only when it has a character that needs
it. Values other than strings, integers, booleans, arrays and tables raise
``TypeError``; the caller then uses ``tomli_w``.
"""

from __future__ import annotations

import marshal
import re
from collections.abc import Mapping
from typing import Any

INDENT = "    "
MAX_LINE_LENGTH = 100  # tomli_w's limit for an array of tables written inline
_BARE = re.compile(r"[A-Za-z0-9_-]+\Z")
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x08\x0a-\x1f\x7f]')
_ESCAPES = {"\b": "\\b", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def dumps(doc: Mapping[str, Any]) -> str:
    out: list[str] = []
    _table(doc, "", False, out)
    return "".join(out)


def _table(table: Mapping[str, Any], name: str, inside_aot: bool, out: list[str]) -> None:
    literals: list[tuple[str, Any]] = []
    tables: list[tuple[str, Mapping[str, Any], bool]] = []
    for k, v in table.items():
        if v.__class__ is str:  # most values: spare the Mapping check (an ABC's, slow) and the array checks
            literals.append((k, v))
        elif _is_table(v):
            tables.append((k, v, False))
        elif _is_aot(v) and not all(fits_inline(t) for t in v):
            tables.extend((k, t, True) for t in v)
        else:
            literals.append((k, v))
    written = False
    if inside_aot or (name and (literals or not tables)):
        written = True
        out.append(f"[[{name}]]\n" if inside_aot else f"[{name}]\n")
    if literals:
        written = True
        out.extend(f"{_key(k)} = {_literal(v, 0)}\n" for k, v in literals)
    for k, v, in_aot in tables:
        if written:
            out.append("\n")
        written = True
        key = _key(k)
        _table(v, f"{name}.{key}" if name else key, in_aot, out)


def _is_table(value: Any) -> bool:
    return value.__class__ is dict or isinstance(value, Mapping)


def _is_aot(value: Any) -> bool:
    return isinstance(value, list | tuple) and bool(value) and all(_is_table(v) for v in value)


def fits_inline(table: Mapping[str, Any]) -> bool:
    """Whether ``table``, an entry of an array of tables, fits on one line; written inline when every entry does."""
    rendered = f"{INDENT}{_inline_table(table)},"
    return len(rendered) <= MAX_LINE_LENGTH and "\n" not in rendered


def _literal(value: Any, level: int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        inner = INDENT * (level + 1)
        return "[\n" + ",\n".join(inner + _literal(v, level + 1) for v in value) + f",\n{INDENT * level}]"
    if _is_table(value):
        return _inline_table(value)
    raise TypeError(f"{type(value).__qualname__} is left to tomli_w")


def _inline_table(table: Mapping[str, Any]) -> str:
    if not table:
        return "{}"
    return "{ " + ", ".join(f"{_key(k)} = {_literal(v, 0)}" for k, v in table.items()) + " }"


def _key(part: str) -> str:
    if part.__class__ is str and (known := _KEYS.get(part)) is not None:
        return known
    if not isinstance(part, str):
        raise TypeError("a key that is not a string is left to tomli_w")
    written = part if _BARE.match(part) else _string(part)
    if len(_KEYS) < 4096:  # the field names, written thousands of times (a table's own keys may be anything)
        _KEYS[part] = written
    return written


_KEYS: dict[str, str] = {}


def _string(s: str) -> str:
    if _NEEDS_ESCAPE.search(s) is None:
        return f'"{s}"'
    return '"' + _NEEDS_ESCAPE.sub(_escape, s) + '"'


def _escape(m: re.Match[str]) -> str:
    char = m.group()
    return _ESCAPES.get(char) or "\\u" + f"{ord(char):04x}"


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether ``a`` and ``b`` are one document, which :func:`dumps` then writes alike; told in C.

    ``marshal`` at version 0 (no shared references, no interned strings)
    writes each built-in value with its exact type (so ``True`` is not
    ``1``), the keys of each table in their order (which ``==`` ignores and
    the text shows), and refuses every other type: equal serialisations are
    the same tree of the same values.
    """
    try:
        return marshal.dumps(a, 0) == marshal.dumps(b, 0)
    except ValueError:  # a value marshal does not write (not a plain document)
        return False
