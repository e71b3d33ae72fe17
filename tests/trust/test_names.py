"""The screen before pyflakes: a word's binding is looked for on the lines that hold it, as on the whole file."""

from __future__ import annotations

import os
import random
import re
import sysconfig
from pathlib import Path

import pytest

from patchkit.trust import names


def _bound_in_whole_file(data: bytes, word: bytes) -> bool:
    """The same forms searched over the whole file: what the search of the word's lines alone must equal."""
    return re.search(names.binding_pattern(word), data) is not None


EDGES = [
    (b"x = 1", b"x"),  # the first line, no final newline
    (b"a\nb\nfor x in y: pass", b"x"),  # the last line, no final newline
    (b"import os\r\nos.path\r\n", b"os"),  # CRLF
    (b"foo_bar = 1\nfoo(2)\n", b"foo"),  # the word inside a longer name only
    (b"x == 1\nx != 2\nx <= 3\n", b"x"),  # comparisons bind nothing
    (b"f(x)\nx\n=1\n", b"x"),  # an '=' on the next line
    (b"def g(\n    x,\n):\n", b"x"),  # a parameter on its own line
    (b"class  K :\n", b"K"),
    (b"", b"x"),
    (b"\n\n\n", b"x"),
    (b"y = x\n", b"x"),  # used right of '=': the form matches 'x' before an '=' only
    (b"async def h(): pass\n", b"h"),
    (b"from a import (b,\n c as d)\n", b"d"),
    (b"x\0= 1\n", b"x"),
]


@pytest.mark.parametrize(("data", "word"), EDGES)
def test_edge_cases_agree_with_the_whole_file_search(data: bytes, word: bytes) -> None:
    assert names._bound(data, word) == _bound_in_whole_file(data, word)


def test_every_word_of_real_modules_agrees_with_the_whole_file_search() -> None:
    """Seeded: Python's own library, every word of sampled lines, as a merge's added lines would be."""
    rng = random.Random(int(os.environ.get("PATCHKIT_NAMES_SEED", "41")))
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    sample = rng.sample(files, min(len(files), int(os.environ.get("PATCHKIT_NAMES_FILES", "25"))))
    compared = 0
    for path in sample:
        data = path.read_bytes()
        lines = data.split(b"\n")
        for _ in range(10):
            at = rng.randrange(len(lines))
            for word in set(names._WORD.findall(names._code(lines[at]))) | {b"self", b"_"}:
                assert names._bound(data, word) == _bound_in_whole_file(data, word), (path.name, word)
                compared += 1
    assert compared > 200
