from __future__ import annotations

import subprocess
from pathlib import Path

from patchkit import sums
from patchkit.hashing import sha256_bytes


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


def test_parse_reports_malformed_lines() -> None:
    data = (
        f"{'a' * 64}  ok.txt\n {'b' * 64}  leading-space.txt\n{'c' * 63}  short.txt\n{'d' * 64}  crlf.txt\r\n".encode()
    )
    entries, problems = sums.parse(data)
    assert [e.name for e in entries] == ["ok.txt"]
    assert [(p.line, p.message.split(":")[0]) for p in problems] == [
        (2, "malformed line (leading space)"),
        (3, "malformed line (not '<64 hex>  <name>')"),
        (4, "malformed line (CRLF line ending)"),
    ]
