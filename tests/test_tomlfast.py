"""The fast TOML reader: for every text it accepts, exactly what tomllib reads; for the rest, None."""

from __future__ import annotations

import random
import tomllib
from pathlib import Path

import pytest

from patchkit.lockfile import tomlfast

ROOT = Path(__file__).resolve().parent.parent

CANONICAL = """# patchkit lockfile: every pin of this deployment.

schema = 1

[deployment]
name = "vllm-mi300x"
hosts = ["a", "b"]
empty = []
strict = true
loose = false

[upstreams.vllm]
git = "https://github.com/vllm-project/vllm"
commit = "124154a88c1d0b3d2e4f5a6b7c8d9e0f1a2b3c4d"

[[patches]]
name = "kv-fence"
kind = "overlay"
sha256 = "ce9de8c7d86dafaaaf3c41ad7598e52d5fe80be3871e95ff24f4914b29bdcaa5"
reason = "fence CPU→GPU restores — in flight"
labels = [
    "vllm-project/vllm#47282",
    "vllm-project/vllm#47291",
]

[patches.base]
upstream = "vllm"
path = "vllm/worker.py"

[[patches.refs]]
ref = "vllm-project/vllm#47282"
state = "open"

[[patches]]
name = "second"
kind = "module"
size = -12

[patches.base]
upstream = "vllm"
"""


def _same(text: str) -> None:
    """tomlfast either declines, or agrees with tomllib (which must then accept the text)."""
    fast = tomlfast.loads(text)
    if fast is None:
        return
    try:
        slow = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        pytest.fail(f"tomlfast accepted what tomllib refuses ({e}):\n{text}")
    assert fast == slow, text


def test_the_canonical_form_is_read_fast_and_right() -> None:
    assert tomlfast.loads(CANONICAL) == tomllib.loads(CANONICAL)
    crlf = CANONICAL.replace("\n", "\r\n")
    assert tomlfast.loads(crlf) == tomllib.loads(crlf)


def test_the_shipped_lockfile_is_read_fast_and_right() -> None:
    text = (ROOT / "lockfile.toml").read_text(encoding="utf-8")
    fast = tomlfast.loads(text)
    assert fast is not None
    assert fast == tomllib.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        'a = "x\\ty"\n',  # an escape
        "a = 'literal'\n",
        'a = "x" # trailing comment\n',
        "a.b = 1\n",  # a dotted key
        "a = 1.5\n",
        "a = 1979-05-27\n",
        "a = { b = 1 }\n",
        'a = """\nmulti\n"""\n',
        "a = [\n  1,\n]\n",
        "a = [1, 2]\n",
        'a = [\n  "x", # why\n]\n',
        'a = [\n  "x",\n  # why\n]\n',
        "[ a ]\nb = 1\n",
        '["quoted\\tkey"]\n',  # a quoted key with an escape
        "a = 0x10\n",
        "a = 1_000\n",
    ],
)
def test_what_it_does_not_know_is_left_to_tomllib(text: str) -> None:
    assert tomlfast.loads(text) is None
    tomllib.loads(text)  # valid TOML all the same


@pytest.mark.parametrize(
    "text",
    [
        "a = 1\na = 2\n",
        "[a]\n[a]\n",
        "[a]\nb = 1\n[a.b]\n",
        "[a.b]\n[a]\nb = 1\n",
        "[[a]]\n[a]\n",
        "a = []\n[[a]]\n",
        "a = 1\n[a.b]\n",
        "a = 01\n",
        'a = "unterminated\n',
        'a = ["x" "y"]\n',
        "a = \n",
        "= 1\n",
        "a = 1\x0b\n",
        "# a comment with a \x01 in it\n",
        'a = "x\x7fy"\n',
        "a = 1\rb = 2\n",
        "[a]]\n",
        "[[a]\n",
        "[a..b]\n",
    ],
)
def test_invalid_toml_is_never_accepted(text: str) -> None:
    assert tomlfast.loads(text) is None
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(text)


def test_random_edits_of_a_lockfile_are_read_as_tomllib_reads_them() -> None:
    """Thousands of one- and two-character edits: tomlfast never disagrees with tomllib."""
    rng = random.Random(18)
    alphabet = ['"', "'", "[", "]", "=", "#", ".", ",", " ", "\t", "\n", "\r", "\\", "a", "1", "-", "\x00", "é"]
    for _ in range(4000):
        chars = list(CANONICAL)
        for _ in range(rng.randint(1, 2)):
            at = rng.randrange(len(chars))
            op = rng.random()
            if op < 0.4:
                chars[at] = rng.choice(alphabet)
            elif op < 0.7:
                chars.insert(at, rng.choice(alphabet))
            else:
                del chars[at]
        _same("".join(chars))


def test_random_line_shuffles_are_read_as_tomllib_reads_them() -> None:
    """Moved lines make duplicate tables and keys, keys in the wrong table: tomlfast never disagrees."""
    rng = random.Random(1818)
    lines = CANONICAL.splitlines(keepends=True)
    for _ in range(2000):
        shuffled = list(lines)
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        if rng.random() < 0.5:
            shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
        else:
            shuffled.insert(j, shuffled[i])
        _same("".join(shuffled))
