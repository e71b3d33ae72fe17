"""Stopping ``digest_many``: a cancel from outside and an interrupt, on one thread and on a pool."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from patchkit.core import hashing


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as f:
        f.truncate(size)  # zeros through the page cache, nothing written to disk
    return path


def test_cancel_keeps_the_finished_files_and_stops_within_a_window(tmp_path: Path) -> None:
    huge = _sparse(tmp_path / "huge.bin", 9 * hashing.WINDOW)  # the largest: hashed first
    medium = _sparse(tmp_path / "medium.bin", 4 * hashing.WINDOW)
    small = tmp_path / "small.txt"
    small.write_bytes(b"small\n")
    stop = threading.Event()
    seen: list[int] = []

    def progress(n: int) -> None:
        seen.append(n)
        if sum(seen) > huge.stat().st_size:  # the first window of the next file
            stop.set()

    got = hashing.sha256_many([small, medium, huge], jobs=1, progress=progress, cancel=stop)
    assert got == {huge: hashlib.sha256(bytes(9 * hashing.WINDOW)).hexdigest()}
    assert seen == [hashing.WINDOW] * 10


@pytest.mark.parametrize("jobs", [1, 2])
def test_interrupt_stops_every_worker_and_propagates(tmp_path: Path, jobs: int) -> None:
    paths = [_sparse(tmp_path / f"f{i}.bin", 9 * hashing.WINDOW) for i in range(3)]
    cancel = threading.Event()

    def progress(n: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        hashing.sha256_many(paths, jobs=jobs, progress=progress, cancel=cancel)
    assert cancel.is_set()
    assert not [t for t in threading.enumerate() if t.name.startswith("digest")]


@pytest.mark.parametrize("jobs", [1, 2])
def test_files_handed_in_while_others_hash_are_all_hashed_largest_first(tmp_path: Path, jobs: int) -> None:
    sizes = [3, hashing.WINDOW + 5, 0, 2 * hashing.WINDOW, 70_000, 1]
    names = []
    for i, size in enumerate(sizes):
        (tmp_path / f"f{i}").write_bytes(bytes([i]) * size)
        names.append(str(tmp_path / f"f{i}"))
    order: list[str] = []
    real = hashing._digest_one

    def recording(p: str, *args: object) -> str:
        order.append(p)
        return real(p, *args)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hashing, "_digest_one", recording)
        with hashing.Hasher[str](jobs) as hasher:
            for name, size in zip(names, sizes, strict=True):
                hasher.add(name, size)
    assert hasher.results == {
        n: hashlib.sha256(bytes([i]) * s).hexdigest() for i, (n, s) in enumerate(zip(names, sizes, strict=True))
    }
    if jobs == 1:  # everything was handed in before the calling thread hashed: strictly largest first
        assert order == [n for _, n in sorted(zip(sizes, names, strict=True), key=lambda t: -t[0])]


def test_a_failure_in_the_block_stops_the_workers_before_it_propagates(tmp_path: Path) -> None:
    paths = [_sparse(tmp_path / f"f{i}.bin", 9 * hashing.WINDOW) for i in range(4)]
    with pytest.raises(ValueError, match="caller failed"), hashing.Hasher[Path](2) as hasher:
        for p in paths:
            hasher.add(p, p.stat().st_size)
        raise ValueError("caller failed")
    assert hasher.stop.is_set()
    assert not [t for t in threading.enumerate() if t.name.startswith("digest")]
    assert len(hasher.results) < len(paths)  # stopped, not waited out
