"""Stopping ``digest_many``: a cancel from outside and an interrupt, on one thread and on a pool."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from patchkit import hashing


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as f:
        f.truncate(size)  # zeros through the page cache, nothing written to disk
    return path


def test_cancel_keeps_the_finished_files_and_stops_within_a_window(tmp_path: Path) -> None:
    huge = _sparse(tmp_path / "huge.bin", 9 * hashing.WINDOW)  # over BATCH: a batch of its own, hashed first
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
