"""``diffs.split_lines``: lines end at ``\\n`` only, whatever other line breaks the bytes hold."""

from __future__ import annotations

from patchkit.core.diffs import split_lines


def test_split_lines_ends_lines_at_newlines_only() -> None:
    assert split_lines(b"a\x0bb\x0cc\x1cd\x85e\nf") == [b"a\x0bb\x0cc\x1cd\x85e\n", b"f"]
    assert split_lines(b"a\r\nb\rc\n\n") == [b"a\r\n", b"b\rc\n", b"\n"]
    assert split_lines(b"x\n") == [b"x\n"]
    assert split_lines(b"") == []
