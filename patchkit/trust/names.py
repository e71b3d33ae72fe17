"""Names a deployment file leaves undefined that its upstream file defines: a NameError when the line runs.

A rebase refuses such a merge as broken unless it is accepted (``--accept-broken``);
accepted, it is committed as it is, and nothing else remembers it. ``check``
(offline, against the pinned base) and ``check --deep`` (against the pinned
upstream's file) say it again, as a note, until the file is fixed. A module
has no upstream file: every name it leaves undefined is said.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re

from patchkit.core.findings import Finding
from patchkit.trust.pycheck import parse, undefined_names

CODE = "undefined-name"


def new_undefined(patch: str, shown: str, data: bytes, upstream: bytes | None) -> list[Finding]:
    """A note for each name ``data`` leaves undefined that ``upstream`` (its upstream file, if any) does not.

    ``shown`` is the repository file the note names. A file that does not
    parse is the offline check's or the rebase's finding, not one of these.
    """
    tree = parse(data)
    if not isinstance(tree, ast.Module):
        return []
    names = undefined_names(tree, shown)
    if upstream is not None:
        theirs = parse(upstream)
        if isinstance(theirs, ast.Module):
            names = {n: line for n, line in names.items() if n not in undefined_names(theirs, shown)}
    where = "its upstream file defines it" if upstream is not None else "nothing in the module defines it"
    return [
        Finding(
            CODE,
            shown,
            line,
            f"name '{name}' is undefined ({where}): a NameError when line {line} runs (patch '{patch}')",
            fix="define or import the name (a merge committed with --accept-broken is reported until it is fixed)",
            field=f"patches[{patch}]",
            severity="note",
        )
        for name, line in sorted(names.items(), key=lambda item: (item[1], item[0]))
    ]


_WORD = re.compile(rb"(?<![.\w])([A-Za-z_]\w*)\b(?!\s*=[^=])")
_IGNORED = frozenset(w.encode() for w in (*keyword.kwlist, *keyword.softkwlist, *dir(builtins), "self", "cls"))


def may_leave_undefined(data: bytes, added: list[bytes]) -> bool:
    """A cheap screen before pyflakes: does an ``added`` line use a word ``data`` binds nowhere visibly?

    pyflakes costs some 20 ms a file; a check of thousands of overlays runs it only where a word
    of a changed line (not an attribute, keyword or builtin) has no binding-looking occurrence
    in the file (``def``/``class``, an import, ``as``, an assignment, a ``for`` target or a
    parameter). It errs on the side of checking: any such word sends the file to pyflakes.
    """
    words = {w for line in added for w in _WORD.findall(_code(line))} - _IGNORED
    return any(not _bound(data, w) for w in words)


def _code(line: bytes) -> bytes:
    """The line without its comment and its string literals (roughly: what names it uses)."""
    line = re.sub(rb"(\"\"\"|'''|\"[^\"\n]*\"|'[^'\n]*')", b"", line)
    return line.split(b"#", 1)[0]


def _bound(data: bytes, word: bytes) -> bool:
    """Whether ``word`` has a binding-looking occurrence in ``data``: searched only on the lines holding it.

    Every form below lies within one line, so the lines that hold the word
    decide alone; searching them, not the whole file, is what keeps the
    screen cheap on large files (about 2.5 ms a word on a 100 KB file before).
    """
    return re.search(binding_pattern(word), _lines_with(data, word)) is not None


def binding_pattern(word: bytes) -> bytes:
    """The forms that bind ``word``, each within one line: ``def``/``class``, an import, ``as``, an assignment,
    a ``for`` target, a parameter."""
    w = re.escape(word)
    return (
        rb"(?m)(?:^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+" + w + rb"\b"
        rb"|\bimport\b[^\n]*\b" + w + rb"\b"
        rb"|\bas[ \t]+" + w + rb"\b"
        rb"|\b" + w + rb"\b[^\n=]*(?<![=!<>])=(?!=)"
        rb"|\bfor\b[^\n]*\b" + w + rb"\b[^\n]*\bin\b"
        rb"|[(,][ \t]*\*{0,2}" + w + rb"[ \t]*[,:)=])"
    )


def _lines_with(data: bytes, word: bytes) -> bytes:
    """The lines of ``data`` that hold ``word`` anywhere (in a longer name too), joined by newlines."""
    out = []
    at = data.find(word)
    while at != -1:
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end == -1 else end
        out.append(data[start:end])
        at = data.find(word, end)
    return b"\n".join(out)
