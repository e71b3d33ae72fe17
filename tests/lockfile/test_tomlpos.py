"""Lines of a TOML document's keys: the one-match ways find what the general way finds, and tomllib's every key.

``PATCHKIT_TOML_CASES`` sets how many generated documents, ``PATCHKIT_TOML_SEED`` another seed.
"""

from __future__ import annotations

import os
import random
import tomllib
from typing import Any

from patchkit.lockfile.tomlpos import LineIndex

TEXT = """\
# a comment = "not a key"
schema = 1

[deployment]
name = "prod"

[[patches]]
name = "one"
reason = "a \\"quoted\\" word"
note = \"\"\"
name = "inside a multi-line string"
\"\"\"
refs = [
    "o/r#1",
]
drop_when = "x" # a trailing comment
  indented = "y"
"quoted key" = "z"
dotted . key = "w"
empty = ""

[patches.base]
path = "a/b.py"

[[patches]]
name = "two"
\t
[patches.base]
path = "c.py"

[refs."owner/repo#1"]
state = "open"
"""


def test_every_kind_of_line_is_found_at_its_line() -> None:
    index = LineIndex(TEXT)
    lines = TEXT.split("\n")

    def line(text: str, start: int = 0) -> int:
        return lines.index(text, start) + 1

    assert index.line_of(("schema",)) == line("schema = 1")
    assert index.line_of(("deployment", "name")) == line('name = "prod"')
    assert index.line_of(("patches", 0)) == line("[[patches]]")
    assert index.line_of(("patches", 0, "reason")) == line('reason = "a \\"quoted\\" word"')
    assert index.line_of(("patches", 0, "note")) == line('note = """')
    assert index.line_of(("patches", 0, "refs")) == line("refs = [")
    assert index.line_of(("patches", 0, "drop_when")) == line('drop_when = "x" # a trailing comment')
    assert index.line_of(("patches", 0, "indented")) == line('  indented = "y"')
    assert index.line_of(("patches", 0, "quoted key")) == line('"quoted key" = "z"')
    assert index.line_of(("patches", 0, "dotted", "key")) == line('dotted . key = "w"')
    assert index.line_of(("patches", 0, "empty")) == line('empty = ""')
    assert index.line_of(("patches", 0, "base", "path")) == line('path = "a/b.py"')
    assert index.line_of(("patches", 1, "name")) == line('name = "two"')
    assert index.line_of(("patches", 1, "base", "path")) == line('path = "c.py"')
    assert index.line_of(("refs", "owner/repo#1", "state")) == line('state = "open"')
    # Inside the multi-line string and the comment nothing is a key of its own.
    assert index.line_of(("patches", 0, "name")) == line('name = "one"')
    assert index.line_of(("a comment",)) is None


# --- Against tomllib: generated documents, every key found at the line it is written on ----------------------------

CASES = int(os.environ.get("PATCHKIT_TOML_CASES", "300"))
SEED = int(os.environ.get("PATCHKIT_TOML_SEED", "29")) + 3272  # 3301 by default

# Names as keys and table names, the plain and the odd: quotes, escapes, dots, brackets, non-ASCII, line separators.
NAMES = ["name", "a-b", "x_1", "42", "with space", "dot.ted", "hash#", "eq=", "br[ack]et", 'quo"te', "back\\slash",
         "é", "日本", "😀", "tab\tin", "nl\nin", "line\u2028sep", "nel\x85", "", "'single'", "ctl\x01"]  # fmt: skip
# Free text for string values and comments, with what the index must not take for a key, a header or a bracket.
TEXTS = ["v", "a = b", "[t]", "[[t]]", "]", "[", "#", '"', "\\", "\u2028", "\x85", "é", "'", '"""', "x\ty"]


def _basic(rng: random.Random, s: str) -> str:
    out = []
    for c in s:
        if c in '"\\' or ord(c) < 0x20 or c == "\x7f":
            out.append({"\t": "\\t", "\n": "\\n", '"': '\\"', "\\": "\\\\"}.get(c, f"\\u{ord(c):04x}"))
        elif rng.random() < 0.1:  # any character may be written as an escape
            out.append(rng.choice([f"\\u{ord(c):04X}", f"\\U{ord(c):08x}"]) if ord(c) < 0x10000 else f"\\U{ord(c):08X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _key(rng: random.Random, name: str) -> str:
    if name and all(c.isascii() and (c.isalnum() or c in "-_") for c in name) and rng.random() < 0.7:
        return name
    if "'" not in name and all(c == "\t" or (ord(c) >= 0x20 and c != "\x7f") for c in name) and rng.random() < 0.3:
        return f"'{name}'"
    return _basic(rng, name)


def _dotted(rng: random.Random, names: tuple[str, ...]) -> str:
    dot = rng.choice([".", ".", " . ", ".\t"])
    return dot.join(_key(rng, n) for n in names)


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 4)))


def _value(rng: random.Random) -> list[str]:
    """A value's lines: scalars on the key's line, arrays and multi-line strings over several."""
    kind = rng.randrange(6)
    if kind == 0:
        return [rng.choice(["1", "-7", "1_000", "0x1F", "true", "1.5", "1979-05-27"])]
    if kind == 1:
        text = _text(rng).replace("\n", "")
        literal = "'" not in text and all(ord(c) >= 0x20 or c == "\t" for c in text) and rng.random() < 0.3
        return [f"'{text}'" if literal else _basic(rng, text)]
    if kind == 2:  # an array one element a line, comments after some
        items = [f"    {_basic(rng, _text(rng))},{rng.choice(['', '  # ' + _text(rng).replace(chr(10), '')])}"]
        return ["[", *items * rng.randint(0, 3), "]"]
    if kind == 3:
        return ['"""', rng.choice(["name = 1", '"q" = 2', "[in.a.string]", "x = [", "]"]), '"""']
    if kind == 4:
        return ["'''", "[[also.in.a.string]]", "x = 2'''"]
    return [f"{{ {_key(rng, rng.choice(NAMES))} = 1, b = [1, [2]] }}"]


class _Doc:
    """A generated document: its lines, and the line each key path was written on."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[str] = []
        self.want: dict[tuple[str | int, ...], int] = {}
        self.used: set[tuple[str | int, ...]] = set()

    def line(self, text: str, path: tuple[str | int, ...] | None = None) -> None:
        noise = self.rng.random()
        if noise < 0.1:
            self.lines.append("# " + _text(self.rng).replace("\n", ""))
        elif noise < 0.15:
            self.lines.append(self.rng.choice(["", " ", "\t"]))
        self.lines.append(self.rng.choice(["", "", "  ", "\t"]) + text)
        if path is not None:
            self.want[path] = len(self.lines)

    def keys(self, table: tuple[str | int, ...]) -> None:
        for _ in range(self.rng.randint(0, 4)):
            names = tuple(self.rng.sample(NAMES, self.rng.choice([1, 1, 1, 2])))
            path = (*table, *names)
            if any(path[: i + 1] in self.used for i in range(len(table), len(path))):
                continue  # a key twice, or a key that is also a dotted key's table
            self.used.update(path[: i + 1] for i in range(len(table), len(path)))
            first, *rest = _value(self.rng)
            comment = self.rng.choice(["", "", " # " + _text(self.rng).replace("\n", "")])
            self.line(f"{_dotted(self.rng, names)} = {first}{comment if not rest else ''}", path)
            self.lines.extend(rest)


def document(rng: random.Random) -> _Doc:
    """Top-level keys, tables, arrays of tables with sub-tables and nested arrays: a lockfile's shapes and more."""
    doc = _Doc(rng)
    doc.keys(())
    for t, name in enumerate(rng.sample(NAMES, rng.randint(1, 4))):
        table = (f"t{t}", name)
        doc.line(f"[{_dotted(rng, table)}]{rng.choice(['', ' # [x]'])}", table)
        doc.keys(table)
    for i in range(rng.randint(0, 3)):
        doc.line(f"[[{_dotted(rng, ('patches',))}]]", ("patches", i))
        doc.keys(("patches", i))
        for name in rng.sample(NAMES, rng.randint(0, 2)):
            if ("patches", i, name) in doc.used:
                continue
            doc.line(f"[{_dotted(rng, ('patches', name))}]", ("patches", i, name))
            doc.keys(("patches", i, name))
        for j in range(rng.randint(0, 2) if ("patches", i, "files") not in doc.used else 0):
            # A nested array of tables: counted anew under each entry.
            doc.line(f"[[{_dotted(rng, ('patches', 'files'))}]]", ("patches", i, "files", j))
            doc.keys(("patches", i, "files", j))
    return doc


def _at(data: Any, path: tuple[str | int, ...]) -> bool:
    """Whether the parsed ``data`` holds ``path``."""
    for part in path:
        found = (
            part < len(data)
            if isinstance(data, list) and isinstance(part, int)
            else isinstance(data, dict) and part in data
        )
        if not found:
            return False
        data = data[part]
    return True


def test_every_key_tomllib_reads_is_found_on_its_line() -> None:
    rng = random.Random(SEED)
    for _ in range(CASES):
        doc = document(rng)
        end = rng.choice(["\n", "\n", "\r\n"])
        text = end.join(doc.lines) + end
        data = tomllib.loads(text)  # the generator writes valid TOML: a failure here is the generator's
        assert all(_at(data, path) for path in doc.want), text
        found = LineIndex(text)
        wrong = {p: (want, found.line_of(p)) for p, want in doc.want.items() if found.line_of(p) != want}
        assert not wrong, (wrong, text)
