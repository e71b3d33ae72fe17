"""SHA-256 over files at the machine's limit: all cores, memory-mapped, large chunks.

hashlib releases the GIL while it hashes a buffer, so threads scale across
cores. Files are memory-mapped and hashed in slices of a memoryview, so no
byte is copied into Python; small files are read in one call instead, where a
mapping costs more than it saves.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHUNK = 64 * 1024 * 1024
SMALL = 1024 * 1024

Progress = Callable[[int], None]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path | str, progress: Progress | None = None) -> str:
    """The hex SHA-256 of a file's bytes; does not follow a final symlink."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        size = os.fstat(fd).st_size
        h = hashlib.sha256()
        if size < SMALL:
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read()
            h.update(data)
            if progress:
                progress(len(data))
            return h.hexdigest()
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
            if hasattr(mm, "madvise"):
                mm.madvise(mmap.MADV_SEQUENTIAL)
            view = memoryview(mm)
            try:
                for start in range(0, size, CHUNK):
                    piece = view[start : start + CHUNK]
                    h.update(piece)
                    if progress:
                        progress(len(piece))
                    piece.release()
            finally:
                view.release()
        return h.hexdigest()
    finally:
        os.close(fd)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def sha256_many(
    paths: Iterable[Path], jobs: int | None = None, progress: Progress | None = None
) -> dict[Path, str | OSError]:
    """Hash many files on ``jobs`` threads; each result is a hex digest or the OSError."""
    items = list(dict.fromkeys(paths))
    sizes: dict[Path, int] = {}
    for p in items:
        try:
            sizes[p] = p.lstat().st_size
        except OSError:
            sizes[p] = 0
    # Largest first, so one big file does not start last and leave a core idle.
    items.sort(key=lambda p: -sizes[p])

    def one(p: Path) -> str | OSError:
        try:
            return sha256_file(p, progress)
        except OSError as e:
            return e

    workers = jobs or default_jobs()
    if workers == 1 or len(items) <= 1:
        return {p: one(p) for p in items}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sha256") as pool:
        return dict(zip(items, pool.map(one, items), strict=True))
