from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from patchkit import hashing


@pytest.mark.parametrize("size", [0, 1, hashing.SMALL - 1, hashing.SMALL, hashing.SMALL + 12345, 3 * hashing.CHUNK + 7])
def test_sha256_file_matches_hashlib(tmp_path: Path, size: int) -> None:
    data = (os.urandom(4096) * (size // 4096 + 1))[:size]
    p = tmp_path / "f"
    p.write_bytes(data)
    seen: list[int] = []
    assert hashing.sha256_file(p, seen.append) == hashlib.sha256(data).hexdigest()
    assert sum(seen) == size


def test_sha256_many_parallel_with_errors(tmp_path: Path) -> None:
    paths = []
    for i in range(20):
        p = tmp_path / f"f{i}"
        p.write_bytes(os.urandom(i * 100_000))
        paths.append(p)
    missing = tmp_path / "missing"
    result = hashing.sha256_many([*paths, missing], jobs=2)
    for p in paths:
        assert result[p] == hashlib.sha256(p.read_bytes()).hexdigest()
    assert isinstance(result[missing], FileNotFoundError)


def test_does_not_follow_a_final_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):
        hashing.sha256_file(tmp_path / "link")
