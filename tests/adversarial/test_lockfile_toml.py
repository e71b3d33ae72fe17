"""The lockfile reader against tomllib on generated mutations: refused exactly when tomllib refuses, at a line.

Each case mutates a valid lockfile the way a hand edit, a merge or an attacker
would: a carriage return followed by blanks, integers around and past
Python's digit limit, arrays and inline tables nested 50 to 100,000 deep,
escapes TOML does and does not know, a key or a table twice, control
characters. ``tomllib`` is the reference. Where it refuses the text (any
exception: its own error, ``ValueError``, ``RecursionError``), patchkit must
refuse it with one problem at a line of the file; where it reads the same
document as before, patchkit must read the same lockfile. A sample runs
through ``patchkit check`` as a process: exit 2 and one located line, never a
traceback or exit 4. ``PATCHKIT_TOML_CASES`` sets the number of cases (a few
hundred by default, a few seconds); ``PATCHKIT_TOML_SEED`` picks other seeds.
"""

from __future__ import annotations

import os
import random
import re
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from patchkit.errors import LockfileError
from patchkit.lockfile.reader import loads
from patchkit.lockfile.writer import dumps
from tests.adversarial.conftest import patchkit
from tests.conftest import REPO_ROOT, copy_shipped
from tests.lockfile.test_canonical import lockfile

CASES = int(os.environ.get("PATCHKIT_TOML_CASES", "300"))
CLI_CASES = max(8, CASES // 25)
SEED = int(os.environ.get("PATCHKIT_TOML_SEED", "29"))
SHIPPED = (REPO_ROOT / "lockfile.toml").read_text(encoding="utf-8")
LIMIT = sys.get_int_max_str_digits()


def _line_end(rng: random.Random, lines: list[str]) -> None:
    """A carriage return then blanks at the end of a line: tomllib refuses a CR that ends no line."""
    i = rng.randrange(len(lines))
    lines[i] += "\r" + rng.choice(["", " ", "  ", "\t", " \t "])


def _crlf(rng: random.Random, lines: list[str]) -> None:
    """Windows line ends on some lines: valid TOML, the same document."""
    for i in rng.sample(range(len(lines)), max(1, len(lines) // 3)):
        lines[i] += "\r"


def _digits(rng: random.Random) -> str:
    n = rng.choice([LIMIT - 1, LIMIT, LIMIT + 1, 2 * LIMIT, 100_000])
    body = "1" + "".join(rng.choice("0123456789") for _ in range(n - 1))
    return "_".join(body[i : i + 3] for i in range(0, len(body), 3)) if rng.random() < 0.2 else body


def _big_int(rng: random.Random, lines: list[str]) -> None:
    """An integer around Python's digit limit: as a value of a known key, or of a new one."""
    numeric = [i for i, line in enumerate(lines) if line.startswith(("schema = ", "size = ", "strip = "))]
    if numeric and rng.random() < 0.5:
        i = rng.choice(numeric)
        lines[i] = lines[i].split(" = ")[0] + " = " + _digits(rng)
    else:
        lines.insert(rng.randrange(len(lines) + 1), f"x = {rng.choice(['', '-', '+'])}{_digits(rng)}")


def _nested(rng: random.Random, lines: list[str]) -> None:
    """Arrays or inline tables nested deep, on one line or over many."""
    depth = rng.choice([50, 5_000, 100_000])
    value = "[" * depth + "1" + "]" * depth if rng.random() < 0.5 else "{ a = " * depth + "1" + " }" * depth
    if rng.random() < 0.3:
        value = value.replace("[", "[\n")
    lines.insert(rng.randrange(len(lines) + 1), "x = " + value)


def _escape(rng: random.Random, lines: list[str]) -> None:
    """An escape in a string: known to TOML or not, complete or cut short, a surrogate or past U+10FFFF."""
    strings = [i for i, line in enumerate(lines) if ' = "' in line and line.endswith('"')]
    if not strings:
        return
    i = rng.choice(strings)
    esc = rng.choice(["\\t", "\\q", "\\u12", "\\u00e9", "\\uD800", "\\U0011FFFF", "\\U0001F600", "\\x41", "\\", "\\e"])
    lines[i] = lines[i][:-1] + esc + '"'


def _twice(rng: random.Random, lines: list[str]) -> None:
    """A key or a table header written twice."""
    candidates = [i for i, line in enumerate(lines) if " = " in line or (line.startswith("[") and "[[" not in line)]
    i = rng.choice(candidates)
    lines.insert(i + 1, lines[i])


def _control(rng: random.Random, lines: list[str]) -> None:
    """A control character, a lone CR or a NUL inside a line."""
    i = rng.randrange(len(lines))
    at = rng.randrange(len(lines[i]) + 1)
    lines[i] = lines[i][:at] + rng.choice(["\x00", "\x7f", "\x0b", "\r", "\x1b", "\u2028", "\ufeff"]) + lines[i][at:]


MUTATIONS: list[Callable[[random.Random, list[str]], None]] = [
    _line_end,
    _crlf,
    _big_int,
    _nested,
    _escape,
    _twice,
    _control,
]


def mutated(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    for _ in range(rng.choice([1, 1, 2])):
        rng.choice(MUTATIONS)(rng, lines)
    return "\n".join(lines)


def reference(text: str) -> dict[str, Any] | None:
    """What tomllib reads of ``text``, or None when it refuses it in any way."""
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        return None


def _bases(rng: random.Random) -> list[str]:
    return [SHIPPED, *(dumps(lockfile(rng)) for _ in range(5))]


def test_the_reader_refuses_exactly_what_tomllib_refuses() -> None:
    rng = random.Random(SEED)
    bases = _bases(rng)
    seen = {"refused": 0, "same": 0, "other": 0}
    for _ in range(CASES):
        base = rng.choice(bases)
        text = mutated(rng, base)
        want = reference(text)
        try:
            got = loads(text)
        except LockfileError as e:
            got = e
        if want is None:
            assert isinstance(got, LockfileError), f"tomllib refuses, patchkit reads:\n{text[:300]!r}"
            [problem] = got.problems
            assert problem.line is not None and 1 <= problem.line <= text.count("\n") + 1, problem.render()
            seen["refused"] += 1
        elif want == tomllib.loads(base):
            assert got == loads(base), f"tomllib reads the same document, patchkit does not:\n{text[:300]!r}"
            seen["same"] += 1
        else:  # another document: read, or refused for what it says, never as TOML it is not
            if isinstance(got, LockfileError):
                assert not any(p.message.startswith("not valid TOML") for p in got.problems), got.problems[0].render()
            seen["other"] += 1
    assert seen["refused"] > CASES // 4 and seen["same"] > CASES // 20 and seen["other"] > CASES // 20, seen


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('schema = 1\r  \n[deployment]\nname = "x"\n', 1),
        ("schema = 1\nx = " + "1" * (LIMIT + 1) + "\n", 2),
        ("schema = 1\n\nx = " + "[" * 100_000 + "]" * 100_000 + "\n", 3),
        ("schema = 1\nx = " + "{ a = " * 5_000 + "1" + " }" * 5_000 + "\n", 2),
        ('schema = 1\n[deployment]\nname = "a\\qb"\n', 3),
        ("schema = 1\nschema = 1\n", 2),
        ('schema = 1\nname = "unterminated\n', 2),
    ],
)
def test_each_kind_of_refusal_names_its_line(text: str, line: int) -> None:
    assert reference(text) is None
    with pytest.raises(LockfileError) as e:
        loads(text)
    [problem] = e.value.problems
    assert problem.line == line, problem.render()


def test_check_refuses_what_tomllib_refuses_with_exit_2_and_a_line(tmp_path: Path) -> None:
    root = copy_shipped(tmp_path / "deploy")
    rng = random.Random(SEED * 101)
    refused = 0
    for _ in range(CLI_CASES):
        text = mutated(rng, SHIPPED)
        (root / "lockfile.toml").write_text(text, encoding="utf-8", newline="")
        r = patchkit("check", cwd=root)
        assert r.returncode != 4 and "Traceback" not in r.stderr, r.stderr[-500:]
        if reference(text) is None:
            refused += 1
            assert r.returncode == 2, (r.returncode, r.stderr)
            first = r.stderr.splitlines()[0]
            assert re.match(r"patchkit: error: lockfile\.toml:\d+: ", first), first
        else:
            assert "not valid TOML" not in r.stderr, r.stderr
    assert refused >= CLI_CASES // 4
