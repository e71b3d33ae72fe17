"""The located TOML reader: typed fields out of parsed TOML, every problem with its line.

``FieldReader`` reads raw ``tomllib`` data into typed values and collects
``Problem``s naming the file, line and field; ``lockfile.toml`` and
``deploy.toml`` are both read with it. ``LineIndex`` finds the lines.


``tomllib`` reports lines for syntax errors only. Once a document has parsed,
this scanner maps each table header and each ``key =`` to its line, keyed by
the same path the parsed data uses (array-of-tables entries by index). It is
deliberately small: it knows headers, keys, quoted keys and multi-line values,
which is all it needs to point at the right line of a valid document.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from patchkit.errors import Problem

Path = tuple[str | int, ...]

_BARE = r"[A-Za-z0-9_-]+"
_BASIC = r'"(?:[^"\\]|\\.)*"'
_LITERAL = r"'[^']*'"
_KEYPART = rf"(?:{_BARE}|{_BASIC}|{_LITERAL})"
_DOTTED = rf"{_KEYPART}(?:\s*\.\s*{_KEYPART})*"
_HEADER = re.compile(rf"^\s*\[\s*({_DOTTED})\s*\]\s*(?:#.*)?$")
_ARRAY_HEADER = re.compile(rf"^\s*\[\[\s*({_DOTTED})\s*\]\]\s*(?:#.*)?$")
_KEYLINE = re.compile(rf"^\s*({_DOTTED})\s*=\s*(.*)$")
_PART = re.compile(_KEYPART)
_BARE_DOTTED = re.compile(rf"{_BARE}(?:\.{_BARE})*")
# The line most of a written lockfile is: a bare key and a one-line string without escapes or quotes inside.
_PLAIN_KEYLINE = re.compile(rf'({_BARE}) = "[^"\\]*"\Z')


# TOML's escapes in a basic string (tomllib has checked them): the short ones and \uXXXX, \UXXXXXXXX.
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))")
_SHORT = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def _unescape(m: re.Match[str]) -> str:
    code = m.group(1) or m.group(2)
    return chr(int(code, 16)) if code else _SHORT.get(m.group(3), m.group(0))


def _split_key(dotted: str) -> tuple[str, ...]:
    if _BARE_DOTTED.fullmatch(dotted):  # bare parts, no space around the dots: nothing to unquote
        return tuple(dotted.split("."))
    parts = []
    for m in _PART.finditer(dotted):
        raw = m.group(0)
        if raw.startswith('"'):
            parts.append(_ESCAPE.sub(_unescape, raw[1:-1]))
        elif raw.startswith("'"):
            parts.append(raw[1:-1])
        else:
            parts.append(raw)
    return tuple(parts)


class LineIndex:
    """Maps key paths of a TOML document to 1-based line numbers."""

    def __init__(self, text: str) -> None:
        self._lines: dict[Path, int] = {}
        self._scan(text)

    @property
    def lines(self) -> dict[Path, int]:
        """Every key path found and its line."""
        return self._lines

    def line_of(self, path: Path) -> int | None:
        """The line of ``path``, or of its nearest enclosing table that has one."""
        p = tuple(path)
        while p:
            if p in self._lines:
                return self._lines[p]
            p = p[:-1]
        return None

    def _scan(self, text: str) -> None:
        counters: dict[tuple[str, ...], int] = {}
        # Maps a header path written in the file (names only) to the concrete
        # path with array indices, so [patches.base] after [[patches]] lands
        # under the latest patches entry.
        current: Path = ()
        pending_close: str | None = None
        depth = 0
        # Lines end at LF (CRLF's CR stays on the line, where the patterns allow it), as tomllib counts
        # them: str.splitlines would also end one at a U+2028 or U+0085 a string or comment may hold.
        for lineno, line in enumerate(text.split("\n"), start=1):
            if pending_close is not None:
                if pending_close in line:
                    pending_close = None
                continue
            if depth > 0:
                depth += _bracket_delta(line)
                continue
            if not line:
                continue
            plain = _PLAIN_KEYLINE.match(line)
            if plain:  # (no header, no key to unquote, nothing left open: what the general way finds, in one match)
                self._lines.setdefault((*current, plain.group(1)), lineno)
                continue
            header = self._header(line, lineno, counters)
            if header is not None:
                current = header
                continue
            m = _KEYLINE.match(line)
            if m:
                self._lines.setdefault((*current, *_split_key(m.group(1))), lineno)
                pending_close, depth = _continued(m.group(2).strip())

    def _header(self, line: str, lineno: int, counters: dict[tuple[str, ...], int]) -> Path | None:
        """The path a ``[table]`` or ``[[array]]`` header line opens (recording its line), or None for another line."""
        m = _ARRAY_HEADER.match(line)
        if m:
            names = _split_key(m.group(1))
            parent = self._resolve(names[:-1], counters)
            counters[names] = counters.get(names, -1) + 1
            for inner in [k for k in counters if k[: len(names)] == names and len(k) > len(names)]:
                del counters[inner]  # an array of tables inside this one starts again under its new entry
            current = (*parent, names[-1], counters[names])
            self._lines.setdefault(current, lineno)
            self._lines.setdefault(current[:-1], lineno)
            return current
        m = _HEADER.match(line)
        if m:
            names = _split_key(m.group(1))
            current = (*self._resolve(names[:-1], counters), names[-1])
            self._lines.setdefault(current, lineno)
            return current
        return None

    @staticmethod
    def _resolve(names: tuple[str, ...], counters: dict[tuple[str, ...], int]) -> Path:
        """Insert the current index after every prefix that is an array of tables."""
        out: list[str | int] = []
        for i, name in enumerate(names):
            out.append(name)
            prefix = names[: i + 1]
            if prefix in counters:
                out.append(counters[prefix])
        return tuple(out)


def _continued(value: str) -> tuple[str | None, int]:
    """How a value goes on past its line: the multi-line string quote it leaves open, the brackets it leaves open."""
    for quote in ('"""', "'''"):
        if value.startswith(quote) and value.count(quote) == 1:
            return quote, 0
    return None, _bracket_delta(value) if value.startswith("[") else 0


def _bracket_delta(text: str) -> int:
    """Net '[' minus ']' outside strings and comments (enough for arrays of scalars)."""
    delta = 0
    quote: str | None = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            break
        elif c == "[":
            delta += 1
        elif c == "]":
            delta -= 1
        i += 1
    return delta


def parse(text: str, filename: str) -> dict[str, object] | Problem:
    """The document of the TOML ``text``, read by ``tomllib``; else the one problem that stops it, at its line.

    ``tomllib`` decides what is TOML. Besides its own errors (which name
    their line) it can fail on a valid-looking text in two ways that name
    none: an integer longer than Python converts (``ValueError``, over
    ``sys.get_int_max_str_digits()`` digits) and nesting deeper than the
    interpreter's stack (``RecursionError``). Each is reported at the line
    that holds it, so no TOML text ends in an internal error.
    """
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = _error_line(str(e), text)
        return Problem(filename, line, None, f"not valid TOML: {e}", "fix the syntax at that line")
    except RecursionError:  # tomllib recurses once per nested array or inline table
        return Problem(
            filename, _deepest_line(text), None, "nested too deeply to be read", "remove the nested arrays or tables"
        )
    except ValueError:  # int() of a literal longer than the interpreter converts
        limit = sys.get_int_max_str_digits()
        return Problem(
            filename,
            _long_integer_line(text, limit),
            None,
            f"holds an integer of more than {limit} digits, longer than TOML readers convert",
            "write a shorter number",
        )


def _error_line(message: str, text: str) -> int:
    """The line ``tomllib`` names in its message; the last line for an error "at end of document"."""
    m = re.search(r"at line (\d+)", message)
    return int(m.group(1)) if m else text.count("\n") + 1


_NESTED = 100  # opening brackets or braces a lockfile never needs on one line


def _deepest_line(text: str) -> int:
    """The first line where brackets and braces open ``_NESTED`` deep, else the deepest: where a nesting bomb is."""
    depth, deepest, at = 0, 0, 1
    for number, line in enumerate(text.split("\n"), start=1):
        for c in line:
            if c in "[{":
                depth += 1
                if depth >= _NESTED:
                    return number
                if depth > deepest:
                    deepest, at = depth, number
            elif c in "]}":
                depth -= 1
    return at


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'')
_DIGITS = re.compile(r"[0-9][0-9_]*")


def _long_integer_line(text: str, limit: int) -> int | None:
    """The first line with a run of more than ``limit`` digits outside quoted strings."""
    for number, line in enumerate(text.split("\n"), start=1):
        bare = _STRINGS.sub("", line)
        if any(len(m.group().replace("_", "")) > limit for m in _DIGITS.finditer(bare)):
            return number
    return None


T = TypeVar("T")
FieldPath = tuple[str | int, ...]


class FieldReader:
    """Reads raw TOML data into typed values, collecting located problems."""

    def __init__(self, filename: str, text: str) -> None:
        self.filename = filename
        self.text = text
        self._index: LineIndex | None = None
        self.problems: list[Problem] = []

    @property
    def index(self) -> LineIndex:
        # Built on the first problem only: a valid lockfile never pays for it.
        if self._index is None:
            self._index = LineIndex(self.text)
        return self._index

    def problem(self, path: FieldPath, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(self.filename, self.index.line_of(path), render_path(path), message, hint))

    def table(self, data: Mapping[str, object], path: FieldPath, key: str) -> dict[str, object] | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.problem((*path, key), f"must be a table, got {toml_type(value)}")
            return None
        return value

    def array_of_tables(self, data: Mapping[str, object], key: str) -> list[dict[str, object]]:
        value = data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            self.problem((key,), f"must be an array of tables ([[{key}]]), got {toml_type(value)}")
            return []
        return value

    def string(self, data: Mapping[str, object], path: FieldPath, key: str, *, required: bool = False) -> str | None:
        if key not in data:
            if required:
                self.problem(path, f"missing required field '{key}'")
            return None
        value = data[key]
        if not isinstance(value, str):
            self.problem((*path, key), f"must be a string, got {toml_type(value)}")
            return None
        return value

    def typed(
        self,
        data: Mapping[str, object],
        path: FieldPath,
        key: str,
        ctor: Callable[[str], T],
        *,
        required: bool = False,
        hint: str | None = None,
    ) -> T | None:
        text = self.string(data, path, key, required=required)
        if text is None:
            return None
        try:
            return ctor(text)
        except ValueError as e:
            self.problem((*path, key), str(e), hint)
            return None

    def known(self, data: Mapping[str, object], path: FieldPath, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        for key in data:
            if key not in allowed:
                self.problem(
                    (*path, key),
                    f"unknown field '{key}' (known: {', '.join(allowed)})",
                    "remove it or fix its spelling",
                )


def toml_type(value: object) -> str:
    return {
        str: "a string",
        int: "an integer",
        float: "a float",
        bool: "a boolean",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def render_path(path: FieldPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out
