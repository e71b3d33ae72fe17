"""The screens that decide which merged files need parsing: they must let every real risk through."""

from __future__ import annotations

import time

from patchkit.rebase.merge import rebase_file
from patchkit.trust import screen, semantic
from tests.trust.test_broken import NO_LOGGING, PATCHED, WORKER

CLASS = b"""import torch


class Restorer:
    def __init__(self, stream):
        self.stream = stream

    def restore(self, blocks):
        count = 0
        for b in blocks:
            self.copy(b)
            count += 1
        total = sum(blocks)
        self.note("restored")
        self.note("counted")
        self.note("summed")
        self.note("done")
        return count + total

    def copy(self, block):
        block.to("cuda", non_blocking=True)
"""


def sides(base: bytes, ours: bytes, theirs: bytes, merged: bytes) -> screen.Sides:
    return screen.Sides.of(base, ours, theirs, merged)


def test_edits_in_different_methods_need_no_parse() -> None:
    ours = CLASS.replace(b"        count = 0\n", b"        count = 0\n        self.stream.synchronize()\n")
    theirs = CLASS.replace(b"non_blocking=True)", b"non_blocking=False)")
    merged = rebase_file(CLASS, ours, theirs, path="w.py").merged
    s = sides(CLASS, ours, theirs, merged)
    assert screen.risky_blocks(s) == []
    assert not screen.names_at_risk(s, CLASS, ours, theirs)
    assert not screen.new_imports(s, merged, theirs, {"vllm"})


def test_edits_in_one_method_parse_that_method_only() -> None:
    ours = CLASS.replace(b"        count = 0\n", b"        count = 0\n        self.stream.synchronize()\n")
    theirs = CLASS.replace(b"        return count + total\n", b"        return count + total + 1\n")
    merged = rebase_file(CLASS, ours, theirs, path="w.py").merged
    (block,) = screen.risky_blocks(sides(CLASS, ours, theirs, merged)) or [b""]
    assert block.startswith(b"    def restore(self, blocks):") and b"def copy" not in block
    assert screen.block_parses(block)
    assert not screen.block_parses(block.replace(b"        count = 0\n", b"      count = 0\n"))
    # A resolved conflict has no base to screen with: it is parsed whole, and a bad line is reported.
    broken = merged.replace(b"        return count + total + 1\n", b"          return count + total + 1\n")
    found = semantic.check([semantic.Produced("w", "vllm/w.py", broken, ours, theirs)], None)
    line = broken.split(b"\n").index(b"          return count + total + 1") + 1
    assert [(p.kind, p.line) for p in found["w"]] == [("syntax", line)]


def test_a_dropped_import_still_used_is_at_risk() -> None:
    merged = rebase_file(WORKER, PATCHED, NO_LOGGING, path="w.py").merged
    assert screen.names_at_risk(sides(WORKER, PATCHED, NO_LOGGING, merged), WORKER, PATCHED, NO_LOGGING)


def test_a_rewritten_assignment_is_not_a_lost_binding() -> None:
    ours = CLASS.replace(b"        return count + total\n", b"        return count + total * 2\n")
    theirs = CLASS.replace(b"        total = sum(blocks)\n", b"        total = max(blocks)\n")
    merged = rebase_file(CLASS, ours, theirs, path="w.py").merged
    assert not screen.names_at_risk(sides(CLASS, ours, theirs, merged), CLASS, ours, theirs)
    # Upstream dropping the binding (and its own use) while the patch adds a use: at risk, and found.
    ours = CLASS.replace(b'        self.note("summed")\n', b"        self.note(total)\n")
    gone = CLASS.replace(b"        total = sum(blocks)\n", b"").replace(b"return count + total", b"return count")
    result = rebase_file(CLASS, ours, gone, path="w.py")
    assert result.outcome.value == "clean"
    assert screen.names_at_risk(sides(CLASS, ours, gone, result.merged), CLASS, ours, gone)
    found = semantic.check([semantic.Produced("w", "vllm/w.py", result.merged, ours, gone, CLASS)], None)
    assert [(p.kind, p.name) for p in found["w"]] == [("undefined-name", "total")]


def test_a_new_import_inside_a_parenthesised_list_is_seen() -> None:
    base = b"from vllm.utils import (\n    cdiv,\n    round_up,\n)\n\nX = 1\n"
    ours = base.replace(b"    round_up,\n", b"    round_up,\n    next_power_of_2,\n")
    theirs = base.replace(b"X = 1\n", b"X = 2\n")
    merged = rebase_file(base, ours, theirs, path="w.py").merged
    assert screen.new_imports(sides(base, ours, theirs, merged), merged, theirs, {"vllm"})
    assert not screen.new_imports(sides(base, ours, theirs, merged), merged, theirs, {"torch"})


def test_a_long_line_of_blanks_and_words_is_screened_in_one_pass() -> None:
    """A patched line of thousands of blanks before a call: the import screen must not backtrack over it.

    The name-list pattern had three overlapping runs of blanks, cubic in their length: 0.25 s on
    300 blanks, about 9 s on the 1,000 here, minutes on 3,000, a rebase that hangs on one odd line
    of a patch. Its verdicts, import or continuation or neither, stay those of the lines it was
    written for.
    """
    base = b"from vllm.utils import (\n    cdiv,\n)\n\nX = 1\n"
    ours = base.replace(b"X = 1\n", b"X = 1\n" + b" " * 1_000 + b"x(\n)\n")
    theirs = base.replace(b"    cdiv,\n", b"    cdiv,\n    round_up,\n")
    merged = rebase_file(base, ours, theirs, path="w.py").merged
    started = time.perf_counter()
    assert not screen.new_imports(sides(base, ours, theirs, merged), merged, theirs, {"vllm"})
    assert time.perf_counter() - started < 2
    for line in (b"from a import (", b"import os", b"    cdiv, round_up,", b"    a.b  # note", b"  )  # done", b"\t"):
        assert screen._importish(line), line
    for line in (b"    x = f(1)", b"    return f(x)", b"a)b", b"importer = 1", b"    ) + 1"):
        assert not screen._importish(line), line


def test_bindings_are_counted_on_the_lines_that_hold_the_word() -> None:
    data = (
        b"import total\n"
        b"totals = 1\n"  # another name holding the word: not a binding of it
        b"for total in xs:\n"
        b"    total += 1\n"
        b"print(total)\n"
        b"total: int\n"
        b"def f(total):\n"
        b"    total"  # a last line without its newline: a bare name, as in a name list
    )
    assert screen._bindings(b"total", data) == 6
    assert screen._bindings(b"absent", data) == 0
    assert screen._bindings(b"print", data) == 0
