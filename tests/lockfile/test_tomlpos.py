"""Lines of a TOML document's keys: the one-match ways for plain lines find what the general way finds."""

from __future__ import annotations

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
