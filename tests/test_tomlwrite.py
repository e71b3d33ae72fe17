"""The fast TOML writer writes byte for byte what tomli_w writes."""

from __future__ import annotations

import random
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from patchkit.lockfile import tomlwrite

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_lockfile_is_written_as_tomli_w_writes_it() -> None:
    doc = tomllib.loads((ROOT / "lockfile.toml").read_text(encoding="utf-8"))
    assert tomlwrite.dumps(doc) == tomli_w.dumps(doc)


def _string(rng: random.Random) -> str:
    alphabet = ["a", "Z", "0", "-", "_", " ", "\t", '"', "\\", "\n", "\r", "\b", "\f", "\x00", "\x1f", "\x7f", "é", "→"]
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def _value(rng: random.Random, depth: int) -> Any:
    kind = rng.random()
    if kind < 0.35:
        return _string(rng)
    if kind < 0.45:
        return rng.randint(-(10**12), 10**12)
    if kind < 0.5:
        return rng.random() < 0.5
    if kind < 0.65 or depth > 2:
        return [_string(rng) for _ in range(rng.randint(0, 3))]
    if kind < 0.85:
        return _table(rng, depth + 1)
    # An array of tables: short ones tomli_w writes inline, long ones as [[tables]].
    return [_table(rng, depth + 1) for _ in range(rng.randint(1, 3))]


def _table(rng: random.Random, depth: int) -> dict[str, Any]:
    keys = ["name", "sha256", "a b", "", "é", "kind-1", "x_y", '"q"']
    return {rng.choice(keys) + str(i): _value(rng, depth) for i in range(rng.randint(0, 4))}


def test_random_documents_are_written_as_tomli_w_writes_them() -> None:
    rng = random.Random(18)
    for _ in range(3000):
        doc = _table(rng, 0)
        assert tomlwrite.dumps(doc) == tomli_w.dumps(doc), doc


@pytest.mark.parametrize("value", [1.5, float("nan")])
def test_what_it_does_not_write_is_refused_for_tomli_w(value: float) -> None:
    with pytest.raises(TypeError):
        tomlwrite.dumps({"a": value})
