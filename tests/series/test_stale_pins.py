"""The repository's own pins of a rewritten patch: every line that still holds an old sha256, and no other."""

from __future__ import annotations

import random
from pathlib import Path

from patchkit.core.outcome import Change
from patchkit.series.stalepins import StalePin, stale_pins


def _each_line(root: Path, changes: list[Change]) -> list[StalePin]:
    """The rule stated plainly: every line of every file, searched for every pin that moved."""
    moved = {c.old.lower(): c for c in changes if c.what.endswith(".sha256") and len(c.old) == 64 and c.old != c.new}
    out: list[StalePin] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), start=1):
            out += [StalePin(rel, n, c.what, old, c.new) for old, c in moved.items() if old in line.lower()]
    return out


def test_stale_pins_are_every_line_holding_an_old_sha256(tmp_path: Path) -> None:
    """Seeded: mixed case, pins inside longer hex runs, several on a line, every line break splitlines knows."""
    rng = random.Random(5)
    hexes = ["".join(rng.choice("0123456789abcdef") for _ in range(64)) for _ in range(40)]
    changes = [
        Change(f"patch p{i}.sha256", h if i % 3 else h.upper(), hexes[(i + 1) % 40]) for i, h in enumerate(hexes)
    ]
    changes.append(Change("patch same.sha256", hexes[0], hexes[0]))  # unchanged: never reported
    pieces = ["x", " ", "=", '"', "İ", "Σ", "\u212a", "é", "\r", "\x0c", "\u2028", "\r\n", "\n", "ff", "0"]
    for k in range(60):
        parts = []
        for _ in range(rng.randrange(0, 40)):
            if rng.random() < 0.15:
                h = rng.choice(hexes)
                parts.append(h.upper() if rng.random() < 0.3 else h)
            else:
                parts.append(rng.choice(pieces))
        (tmp_path / f"f{k}.lock").write_text("".join(parts), encoding="utf-8", newline="")
    (tmp_path / "binary").write_bytes(b"\xff\xfe" + hexes[1].encode())
    found = stale_pins(tmp_path, changes)
    assert found == _each_line(tmp_path, changes)
    assert len(found) > 50 and {p.old for p in found} <= set(hexes)
