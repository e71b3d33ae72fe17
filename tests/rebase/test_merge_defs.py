"""Definitions that sit in an ``except`` handler or a ``match`` case are named in hunks and review flags."""

from __future__ import annotations

from patchkit.rebase.merge import Outcome, rebase_file

# A fallback defined under ``except ImportError`` and a class defined per platform under ``match``:
# both are common in upstream code that supports optional accelerators.
BASE = b"""import sys

try:
    import fast
except ImportError:
    def load(path):
        f = open(path)
        a = 1
        b = 2
        c = 3
        d = 4
        return f.read()


match sys.platform:
    case "linux":
        class Worker:
            def run(self):
                n = 0
                a = 1
                b = 2
                c = 3
                d = 4
                return n
    case _:
        pass
"""


def test_definitions_in_handlers_and_cases_are_named() -> None:
    ours = BASE.replace(b"f = open(path)", b"f = open(path, 'rb')").replace(b"n = 0", b"n = 1")
    theirs = BASE.replace(b"return f.read()", b"return f.read(-1)").replace(b"return n", b"return n + 0")
    result = rebase_file(BASE, ours, theirs, path="w.py")
    assert result.outcome is Outcome.CLEAN
    assert [(h.header, h.definitions) for h in result.hunks_remaining] == [
        ("@@ -4,7 +4,7 @@", ("load",)),
        ("@@ -16,7 +16,7 @@", ("Worker.run",)),
    ]
    assert [(f.definition, f.hunk.header, f.upstream.header) for f in result.review_flags] == [
        ("load", "@@ -4,7 +4,7 @@", "@@ -9,7 +9,7 @@"),
        ("Worker.run", "@@ -16,7 +16,7 @@", "@@ -21,6 +21,6 @@"),
    ]
