from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest

from patchkit.core import sums
from patchkit.core.hashing import sha256_bytes
from patchkit.errors import Problem


def test_render_sorted_gnu_format() -> None:
    out = sums.render([("b.txt", "b" * 64), ("a.txt", "a" * 64)])
    assert out == f"{'a' * 64}  a.txt\n{'b' * 64}  b.txt\n".encode()


def test_escaped_names_accepted_by_sha256sum(tmp_path: Path) -> None:
    names = ["plain.py", "back\\slash.py", "new\nline.py", "car\rriage.py", "spa ce.py", "ünï.py"]
    entries = []
    for i, name in enumerate(names):
        data = f"content {i}\n".encode()
        (tmp_path / name).write_bytes(data)
        entries.append((name, sha256_bytes(data)))
    (tmp_path / "SHA256SUMS").write_bytes(sums.render(entries))
    r = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=tmp_path, capture_output=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    # And what sha256sum writes, we read back identically.
    gnu = subprocess.run(["sha256sum", "--", *sorted(names)], cwd=tmp_path, capture_output=True, check=True).stdout
    parsed, problems = sums.parse(gnu)
    assert not problems
    assert sorted((p.name, p.sha256) for p in parsed) == sorted(entries)


def _lines(h: str, hb: str) -> list[bytes]:
    """SHA256SUMS lines as hand-kept files hold them: every form coreutils accepts, and some it rejects."""
    up = h.upper()
    return [
        f"{h}  a.py\n",
        f"  {h}  a.py\n",  # leading spaces, as hand edits leave
        f"\t{h}  a.py\n",
        f"{h} *a.py\n",
        f"{up}  a.py\n",
        f"{h}\t a.py\n",
        f"SHA256 (a.py) = {h}\n",
        f"SHA256(a.py)= {up}\n",
        f"  SHA256 (a.py) = {h}\n",
        f"\\{hb}  back\\\\slash.py\n",
        f"  \\{hb}  back\\\\slash.py\n",
        f"\\SHA256 (back\\\\slash.py) = {hb}\n",
        f"{h}  a.py\r\n",
        f"{h} a.py\n",  # the single-space BSD-reversed form, alone in its file
        f"# a comment\n{h}  a.py\n",
        f"\n{h}  a.py\n",
        f"{h}  a.py",  # no newline at the end
        # Rejected by sha256sum -c --strict:
        f" # an indented comment\n{h}  a.py\n",
        f"   \n{h}  a.py\n",
        f"{h[:-1]}  a.py\n",
        f"{h}  a.py\n{h} a.py\n",  # reversed form mixed with the standard one
        f"\\{h}  a\\x.py\n",  # an escape coreutils does not know
        f"SHA256 (a.py) {h}\n",
        f"SHA256 (a.py) = {h} \n",
        f"{h}\n",
    ]


def test_every_line_sha256sum_accepts_is_read_and_every_line_it_rejects_is_malformed(tmp_path: Path) -> None:
    """Interop: the real ``sha256sum -c --strict`` decides, line form by line form."""
    (tmp_path / "a.py").write_bytes(b"print(1)\n")
    (tmp_path / "back\\slash.py").write_bytes(b"print(2)\n")
    h, hb = sha256_bytes(b"print(1)\n"), sha256_bytes(b"print(2)\n")
    names = {h: "a.py", hb: "back\\slash.py"}
    for data in (t.encode() for t in _lines(h, hb)):
        (tmp_path / "SHA256SUMS").write_bytes(data)
        gnu = subprocess.run(
            ["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=tmp_path, capture_output=True, check=False
        )
        got = sums.read(data)
        assert (gnu.returncode == 0) == (not got.malformed), (data, gnu.stdout + gnu.stderr)
        if gnu.returncode == 0:
            assert [(e.name, e.sha256) for e in got.entries] == [(names[e.sha256], e.sha256) for e in got.entries]
            assert got.entries, data
            # Anything but the canonical line is one note each, never a rejection.
            canonical = sums.render([(e.name, e.sha256) for e in got.entries])
            assert bool(got.noncanonical) == (data != canonical), data


def test_noncanonical_lines_say_how_they_differ() -> None:
    h = "ab" * 32
    data = f"  {h}  a.py\n{h.upper()} *b.py\nSHA256 (c.py) = {h}\n{h}  d.py\r\n# note\n{h}  e.py\n".encode()
    got = sums.read(data)
    assert not got.malformed
    assert [e.name for e in got.entries] == ["a.py", "b.py", "c.py", "d.py", "e.py"]
    assert [(p.line, p.message) for p in got.noncanonical] == [
        (1, "lists a.py in a form patchkit does not write (leading whitespace)"),
        (2, "lists b.py in a form patchkit does not write (upper-case hex, binary marker '*')"),
        (3, "lists c.py in a form patchkit does not write (BSD form 'SHA256 (name) = hex')"),
        (4, "lists d.py in a form patchkit does not write (CRLF line ending)"),
        (5, "a comment line (patchkit writes none)"),
    ]


def test_parse_reports_malformed_lines() -> None:
    data = f"{'a' * 64}  ok.txt\n {'b' * 64}  leading-space.txt\n{'c' * 63}  short.txt\n   \n".encode()
    entries, problems = sums.parse(data)
    assert [e.name for e in entries] == ["ok.txt", "leading-space.txt"]
    assert [(p.line, p.message.split(",")[0]) for p in problems] == [
        (3, "malformed line (not '<64 hex>  <name>')"),
        (4, "malformed line (not '<64 hex>  <name>')"),
    ]


@pytest.mark.parametrize(
    ("sep", "reasons"),
    [
        (b"  ", []),
        (b" *", ["binary marker '*'"]),
        (b"\t ", ["a tab after the hex"]),
        (b" x", ["one space after the hex"]),
    ],
)
def test_what_follows_the_hex_of_a_gnu_line(sep: bytes, reasons: list[str]) -> None:
    from patchkit.core.sums import _separator

    assert _separator(sep) == reasons


def test_the_fast_path_for_canonical_lines_reads_as_the_line_by_line_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files mixing every line form (canonical, hand-edited, rejected, reversed, no final newline):
    the same entries, problems and notes with the canonical-line fast path as without it."""
    h, hb = "ab" * 32, "cd" * 32
    forms = [t.encode() for t in _lines(h, hb)]
    forms += [f"{h}  name with spaces.py\n".encode(), f"{h}  *star.py\n".encode(), b"\xff" * 3 + b"\n"]
    forms += [f"{h}  \u00fcn\u00efcode.py\n".encode(), f"{h}  latin1-\xe9.py\n".encode("latin-1")]
    forms += [f"{h}  dir/sub/file-{i}.py\n".encode() for i in range(8)]
    rng = random.Random(5)
    for _ in range(2000):
        data = b"".join(rng.choice(forms) for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.3:
            data = data.rstrip(b"\n")
        fast = _seen(sums.read(data))
        with monkeypatch.context() as m:
            m.setattr(sums, "_CANONICAL", re.compile(rb"(?!)"))  # never matches: every line split
            slow = _seen(sums.read(data))
        assert fast == slow, data


def _seen(got: sums.Sums) -> tuple[object, ...]:
    """What a reader of ``Sums`` sees: the entries, and every problem's place, text and hint."""

    def problems(found: list[Problem]) -> list[tuple[object, ...]]:
        return [(p.file, p.line, p.field, p.message, p.hint) for p in found]

    return got.entries, problems(got.malformed), problems(got.noncanonical)
