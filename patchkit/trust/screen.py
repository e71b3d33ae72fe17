"""Cheap screens that say which semantic checks a merged file can fail, before anything is parsed.

Parsing a file and running pyflakes on it cost several times the merge itself, and most merged
files combine edits far apart that cannot break each other. The screens read lines and words
only, by content, and err on the side of checking:

- **syntax**: a merge can break the syntax only inside a statement where it joins lines of the
  patch with lines of the new upstream file. A *block* is a statement at column 0 or at the
  first indentation level (a function, a method, a class attribute), with what belongs to it
  (its body, ``else``/``except`` parts, closing brackets; a decorator joins the next block).
  The blocks of the merge holding lines added by both sides are the ones at risk, and only
  they are parsed (dedented); an added line found in several places counts for each.
- **undefined names**: a name becomes undefined only when one side removes the line that binds
  it while the other adds a line that uses it. The screen intersects the words that could be
  bound on the lines one side removed (a word followed by ``.``, ``(`` or ``[`` is an access or
  a call, except on ``def``/``class`` lines) with the words of the lines the other side added,
  keywords and builtins aside, and keeps a word only if that side's file has fewer statements
  that may bind it than the old upstream file had.
- **imports**: only import statements that the new upstream file does not contain need
  resolving; a merge with no new line that can belong to an import statement has none.
"""

from __future__ import annotations

import builtins
import keyword
import re
import textwrap
from dataclasses import dataclass

_WORD = re.compile(rb"\b[A-Za-z_][A-Za-z0-9_]*\b")
_BINDABLE = re.compile(rb"\b([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*[.(\[])")
_DEF_LINE = re.compile(rb"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t].*$", re.MULTILINE)
_IGNORED = frozenset(w.encode() for w in (*keyword.kwlist, *keyword.softkwlist, *dir(builtins)))
_CONTINUES = (b"else", b"elif", b"except", b"finally", b"case", b")", b"]", b"}", b"#")
_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\([^)]*\)|(?:[^\n\\]|\\\n)*)|import[ \t]+(?:[^\n\\]|\\\n)*)",
    re.MULTILINE,
)
# A line that may be part of an import statement: one with ``import``, or a name list's continuation
# (names, dots, commas and blanks, then perhaps the closing bracket and a comment). Possessive: a
# line of blanks and words that is not one is refused in one pass, however long.
_IMPORT_WORD = re.compile(rb"\bimport\b")
_NAME_LIST = re.compile(rb"[\w., \t]*+(?:\)[ \t]*+)?(?:#.*)?")
_INDENT = 4
_FOUR = b" " * _INDENT
_BLANK = (b"", b" ", b"\t")
#: Past this many places of one added line in the merge, the whole file is parsed.
_MAX_PLACES = 8


@dataclass(frozen=True)
class Sides:
    """The lines of the merge and what each side added and removed, by content (sets of lines)."""

    merged: list[bytes]
    ours_added: set[bytes]
    ours_removed: set[bytes]
    theirs_added: set[bytes]
    theirs_removed: set[bytes]
    merged_only: set[bytes]  # lines of the merge that the new upstream file does not have

    @classmethod
    def of(cls, base: bytes | None, ours: bytes, theirs: bytes, merged: bytes) -> Sides:
        m = merged.splitlines()
        o, t = set(ours.splitlines()), set(theirs.splitlines())
        fresh = set(m) - t
        if base is None:
            return cls(m, fresh, set(), set(), set(), fresh)
        b = set(base.splitlines())
        return cls(m, o - b, b - o, t - b, b - t, fresh)


def _start(lines: list[bytes], i: int) -> bool:
    """Whether line ``i`` starts a block: a statement at column 0 or the first indentation level."""
    line = lines[i]
    if line[:1] in _BLANK and not (line[:_INDENT] == _FOUR and line[_INDENT : _INDENT + 1] not in _BLANK):
        return False
    return not line.lstrip(b" ").startswith(_CONTINUES) and not (i and lines[i - 1].lstrip().startswith(b"@"))


def _block(lines: list[bytes], i: int) -> int:
    """The first line of the block holding line ``i``."""
    while i > 0 and not _start(lines, i):
        i -= 1
    return i


def _block_text(lines: list[bytes], start: int) -> bytes:
    end = start + 1
    while end < len(lines) and not _start(lines, end):
        end += 1
    return b"\n".join(lines[start:end])


def _meaningful(lines: set[bytes]) -> set[bytes]:
    return {line for line in lines if line.strip() and not line.lstrip().startswith(b"#")}


def risky_blocks(s: Sides) -> list[bytes] | None:
    """The blocks of the merge holding lines added by both sides, as text; None: the whole file is at risk."""
    ours, theirs = _meaningful(s.ours_added), _meaningful(s.theirs_added)
    if not ours or not theirs:
        return []
    wanted = ours | theirs
    places = [i for i, line in enumerate(s.merged) if line in wanted]
    if len(places) > _MAX_PLACES * len(wanted):
        return None  # added lines found all over the file: cannot tell which blocks they are in
    where: dict[int, set[bool]] = {}
    for i in places:
        line = s.merged[i]
        sides = where.setdefault(_block(s.merged, i), set())
        sides.update(side for side, added in ((True, ours), (False, theirs)) if line in added)
    return [_block_text(s.merged, start) for start, sides in sorted(where.items()) if len(sides) == 2]


def block_parses(block: bytes) -> bool:
    """Whether one block parses on its own, dedented (the caller parses the whole file to say where it fails)."""
    import ast
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(textwrap.dedent(block.decode("utf-8", "surrogateescape")))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _bindable(lines: set[bytes]) -> set[bytes]:
    text = b"\n".join(lines)
    found = set(_BINDABLE.findall(text))
    for m in _DEF_LINE.finditer(text):
        found.update(_WORD.findall(m.group(0)))
    return found - _IGNORED


def _words(lines: set[bytes]) -> set[bytes]:
    return set(_WORD.findall(b"\n".join(lines))) - _IGNORED


def _bindings(word: bytes, data: bytes) -> int:
    """How many statements may bind ``word``: assignments, ``for`` targets, imports, ``as``, ``def``, name lists.

    Generous (a keyword argument counts too) but the same for both files compared; a comprehension's
    ``for`` binds only inside it and does not count. Every match lies on one line holding the word,
    so only those lines are searched: the pattern's keyword alternatives would otherwise be tried
    at every byte of the file.
    """
    w = re.escape(word)
    pattern = re.compile(
        rb"^[ \t]*(?:async[ \t]+)?for\b[^\n]*?\b" + w + rb"\b[^\n]*?\bin\b"
        rb"|\b" + w + rb"\b[ \t]*(?::=|(?:[-+*/%&|^@]|//|\*\*|>>|<<)?=(?!=)|:(?!=))"
        rb"|\b(?:as|import|def|class|global|nonlocal|del|lambda)\b[^\n=:]*?\b" + w + rb"\b"
        rb"|^[ \t]*" + w + rb"[ \t]*,?[ \t]*\)?[ \t]*$",
        re.MULTILINE,
    )
    count = 0
    start = data.find(word)
    while start >= 0:
        first = data.rfind(b"\n", 0, start) + 1
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        count += len(pattern.findall(data, first, end))
        start = data.find(word, end + 1)
    return count


def names_at_risk(s: Sides, base: bytes, ours: bytes, theirs: bytes) -> bool:
    """Whether one side removed a binding of a word the other side's added lines use."""
    for removed, other_added, side in (
        (s.theirs_removed, s.ours_added, theirs),
        (s.ours_removed, s.theirs_added, ours),
    ):
        if not removed or not other_added:
            continue
        for word in _bindable(removed) & _words(other_added):
            if _bindings(word, side) < _bindings(word, base):
                return True
    return False


def _importish(line: bytes) -> bool:
    """Whether a line (without its end) may be part of an import statement."""
    return _IMPORT_WORD.search(line) is not None or _NAME_LIST.fullmatch(line) is not None


def _statements(data: bytes) -> set[bytes]:
    return {b" ".join(m.group(0).split()) for m in _IMPORT.finditer(data)}


def new_imports(s: Sides, merged: bytes, theirs: bytes, packages: set[str]) -> bool:
    """Whether the merge has an import statement of ``packages`` (or a relative one) that theirs has not."""
    if not any(_importish(line) for line in s.merged_only if line.strip()):
        return False
    wanted = {p.encode() for p in packages}
    for stmt in _statements(merged) - _statements(theirs):
        if stmt.startswith(b"from ."):
            return True
        names = re.split(rb"[ ,()]+", stmt)
        module = names[1] if len(names) > 1 else b""
        if module.split(b".", 1)[0] in wanted:
            return True
        if stmt.startswith(b"import") and any(w.split(b".", 1)[0] in wanted for w in names[1:]):
            return True
    return False
