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
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHUNK = 64 * 1024 * 1024
SMALL = 1024 * 1024
BATCH = 32 * 1024 * 1024

Progress = Callable[[int], None]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_local = threading.local()


def _buffer() -> memoryview:
    """A read buffer per thread, reused for every small file it hashes."""
    buf: memoryview | None = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = memoryview(bytearray(SMALL))
    return buf


def sha256_file(path: Path | str, progress: Progress | None = None) -> str:
    """The hex SHA-256 of a file's bytes; does not follow a final symlink."""
    return digest_file(path, SHA256, progress)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _batches(items: list[Path], sizes: dict[Path, int]) -> list[list[Path]]:
    """Large files alone, small files grouped, largest work first.

    One pool task per small file makes the threads trade the interpreter lock
    thousands of times; groups of about BATCH bytes keep each thread in its
    own loop while still sharing the work evenly.
    """
    batches: list[list[Path]] = []
    group: list[Path] = []
    group_bytes = 0
    for p in sorted(items, key=lambda p: -sizes.get(p, 0)):
        size = sizes.get(p, 0)
        if size >= BATCH:
            batches.append([p])
            continue
        group.append(p)
        group_bytes += size
        if group_bytes >= BATCH or len(group) >= 512:
            batches.append(group)
            group, group_bytes = [], 0
    if group:
        batches.append(group)
    return batches


def sha256_many(
    paths: Iterable[Path],
    jobs: int | None = None,
    progress: Progress | None = None,
    sizes: dict[Path, int] | None = None,
    cancel: threading.Event | None = None,
) -> dict[Path, str | OSError]:
    """Hash many files on ``jobs`` threads; each result is a hex digest or the OSError.

    ``sizes`` (from an lstat the caller already made) saves a second one.
    Setting ``cancel`` stops the work within one slice of each file in
    progress; the result then lacks the files not hashed.
    """
    return digest_many(dict.fromkeys(paths, SHA256), jobs, progress, sizes, cancel)


# --------------------------------------------------------------------------- digests of model files

SHA256 = "sha256"
GIT_SHA1 = "git-sha1"


class Cancelled(Exception):
    """Hashing stopped because its ``cancel`` event was set (an interrupt)."""


def digest_file(
    path: Path | str, algorithm: str, progress: Progress | None = None, cancel: threading.Event | None = None
) -> str:
    """The hex digest of a file: ``sha256`` of its bytes, or ``git-sha1`` (git's blob id).

    The git blob id is SHA-1 over ``b"blob <size>\\0"`` and the bytes: what a
    Hugging Face repository names its small (non-LFS) files by. Reads like
    ``sha256_file`` (one read for small files, a memory map in large slices
    otherwise), does not follow a final symlink, and checks ``cancel``
    between slices so an interrupt does not wait for a multi-GB file.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        size = os.fstat(fd).st_size
        if algorithm == SHA256:
            h = hashlib.sha256()
        elif algorithm == GIT_SHA1:
            h = hashlib.sha1(usedforsecurity=False)
            h.update(b"blob %d\0" % size)
        else:
            raise ValueError(f"unknown digest algorithm {algorithm!r}")
        if size < SMALL:
            buf = _buffer()
            while n := os.readv(fd, [buf]):
                h.update(buf[:n])
                if progress:
                    progress(n)
            return h.hexdigest()
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
            if hasattr(mm, "madvise"):
                mm.madvise(mmap.MADV_SEQUENTIAL)
            view = memoryview(mm)
            try:
                for start in range(0, size, CHUNK):
                    if cancel is not None and cancel.is_set():
                        raise Cancelled(str(path))
                    # Released even when the progress callback raises (an interrupt).
                    with view[start : start + CHUNK] as piece:
                        h.update(piece)
                        n = len(piece)
                    if progress:
                        progress(n)
            finally:
                view.release()
        return h.hexdigest()
    finally:
        os.close(fd)


def digest_many(
    items: dict[Path, str],
    jobs: int | None = None,
    progress: Progress | None = None,
    sizes: dict[Path, int] | None = None,
    cancel: threading.Event | None = None,
) -> dict[Path, str | OSError]:
    """Hash many files on ``jobs`` threads, each with its own algorithm (``items``: path -> algorithm).

    Batches small files together and gives large ones a batch each, so both
    cores stay busy; each result is a hex digest or the OSError.

    An interrupt (KeyboardInterrupt in the calling thread) sets ``cancel`` so
    the worker threads stop within one slice, then propagates; the caller
    has written nothing yet, so nothing is left behind.
    """
    stop = cancel if cancel is not None else threading.Event()
    known = dict(sizes or {})
    for p in items:
        if p not in known:
            try:
                known[p] = p.lstat().st_size
            except OSError:
                known[p] = 0

    def run(batch: list[Path]) -> list[tuple[Path, str | OSError]]:
        out: list[tuple[Path, str | OSError]] = []
        for p in batch:
            if stop.is_set():
                break
            try:
                out.append((p, digest_file(p, items[p], progress, stop)))
            except Cancelled:
                break
            except OSError as e:
                out.append((p, e))
        return out

    paths = list(items)
    workers = min(jobs or default_jobs(), max(1, len(paths)))
    results: dict[Path, str | OSError] = {}
    batches = _batches(paths, known)
    if workers == 1:
        try:
            for batch in batches:
                results.update(run(batch))
        except BaseException:
            stop.set()
            raise
        return results
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="digest")
    try:
        for done in pool.map(run, batches):
            results.update(done)
    except BaseException:
        # Stop the workers before waiting for them (a `with` block would wait first).
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return results
