"""The fast reader reads the quoted header keys the writer writes (``[refs."owner/repo#1"]``), as tomllib does."""

from __future__ import annotations

import tomllib

import pytest

from patchkit.lockfile import tomlfast
from patchkit.lockfile.reader import loads
from patchkit.lockfile.writer import dumps
from tests.lockfile.test_fields import every_field


def test_a_lockfile_with_refs_is_read_fast() -> None:
    text = dumps(every_field())
    assert '[refs."o/r#1"]' in text
    fast = tomlfast.loads(text)
    assert fast is not None and fast == tomllib.loads(text)
    assert dumps(loads(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        '[refs."a.b"]\nx = 1\n',
        '[refs."a]b"]\nx = 1\n',
        '[refs.""]\nx = 1\n',
        '[[a."b"]]\nx = 1\n[[a."b"]]\nx = 2\n',
        '[a."b".c]\n[a]\nx = 1\n',
        '["a".b]\nc = "d"\n',
        'a="x"\n',
        'a = "x"  \t\r\n',
    ],
)
def test_quoted_keys_and_plain_strings_read_as_tomllib_reads_them(text: str) -> None:
    assert tomlfast.loads(text) == tomllib.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        '[refs."a\\"b"]\nx = 1\n',  # an escape
        "[refs.'a']\nx = 1\n",  # a literal key
        '[refs. "a"]\nx = 1\n',  # spaces in the header
        '[refs."a"]\nx = 1\n[refs.a]\ny = 2\n',  # the same table twice, spelt two ways
        'a = "x"\na = "y"\n',  # a key twice
        '[t]\nx = "1"\n[t.x]\n',  # a string that a header makes a table
        'a = "x"\r',  # a carriage return that ends no line (tomllib refuses it)
    ],
)
def test_what_it_still_leaves_to_tomllib(text: str) -> None:
    assert tomlfast.loads(text) is None
