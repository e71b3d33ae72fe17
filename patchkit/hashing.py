"""SHA-256 over files at the machine's limit: all cores, in bounded memory.

hashlib releases the GIL while it hashes a buffer, so threads scale across
cores. A large file is hashed through a sliding memory map: one window of
``WINDOW`` bytes at a time is mapped (populated in one call), hashed and
unmapped, so the bytes go from the page cache to SHA-256 without a copy, and
the resident memory stays at one window per thread whatever the file sizes
(a whole-file map would count every page of a multi-GB file as resident).
Small files, and what is left of a file that shrank while it was hashed, are
read into a buffer per thread that is reused from file to file.

Before each window the file's size is checked again: a file truncated while
it is hashed is then read, not touched through a map past its end (which
would kill the process with SIGBUS), and it hashes to what was read, as
``sha256sum`` would say.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import mmap
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ParamSpec, TypeVar

WINDOW = 4 * 1024 * 1024  # bytes mapped at a time, per thread
BUFFER = 1024 * 1024  # the per-thread read buffer, for files below WINDOW
BUDGET = 32 * 1024 * 1024  # mapped and buffered bytes over all threads, at most
BATCH = 32 * 1024 * 1024

Progress = Callable[[int], None]
P = ParamSpec("P")
R = TypeVar("R")

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: fault the window in with one call


class _Remembered:
    """Digests of the byte strings hashed lately, up to ``limit`` bytes of them, found again by identity.

    A rebase meets each file version several times over (its pin, its merge
    key, its semantic-check key, its journal entry), mostly as the same
    ``bytes`` object. Keyed by the object's id, and holding the object so the
    id cannot be reused while it is remembered: a lookup costs no pass over
    the bytes (keying by content would hash them all again, for the dict).
    Only ``bytes`` are kept: they are immutable, so a digest never goes
    stale. Past ``limit`` the oldest half is forgotten.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.digests: dict[int, tuple[bytes, str]] = {}
        self.lock = threading.Lock()

    def sha256(self, data: bytes) -> str:
        found = self.digests.get(id(data))
        if found is not None and found[0] is data:
            return found[1]
        digest = hashlib.sha256(data).hexdigest()
        with self.lock:
            self.digests[id(data)] = (data, digest)
            self.size += len(data)
            if self.size > self.limit:
                self._forget_oldest()
        return digest

    def _forget_oldest(self) -> None:
        """Drop the oldest entries until half the limit is left (a dict keeps the order they came in)."""
        for key in list(self.digests):
            if self.size <= self.limit // 2:
                break
            self.size -= len(self.digests.pop(key)[0])


REMEMBER = 128 * 1024 * 1024  # bytes whose digests a rebase keeps (it holds them all while it runs anyway)
_SMALL = 4096  # shorter strings are hashed again: cheaper than remembering them
# The memo of the innermost ``remembering`` block of this thread (or task), if any.
_memo: contextvars.ContextVar[_Remembered | None] = contextvars.ContextVar("patchkit_digests", default=None)


@contextlib.contextmanager
def remembering(limit: int = REMEMBER) -> Iterator[None]:
    """Within the block, ``sha256_bytes`` remembers the digests it computes (see ``_Remembered``).

    Scoped to the commands that ask for the same digests many times over (a
    rebase): elsewhere nothing is kept, so no command holds bytes longer than
    it would.
    """
    token = _memo.set(_Remembered(limit))
    try:
        yield
    finally:
        _memo.reset(token)


def remembers_digests(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` inside ``remembering()``."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with remembering():
            return fn(*args, **kwargs)

    return run


def sha256_bytes(data: bytes) -> str:
    """The hex SHA-256 of ``data``; inside ``remembering``, the same bytes are not hashed twice."""
    memo = _memo.get()
    if memo is None or len(data) < _SMALL or type(data) is not bytes:
        return hashlib.sha256(data).hexdigest()
    return memo.sha256(data)


_local = threading.local()


def _buffer() -> memoryview:
    """A read buffer per thread, reused for every small file it hashes."""
    buf: memoryview | None = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = memoryview(bytearray(BUFFER))
    return buf


def window_for(jobs: int) -> int:
    """The map window for ``jobs`` threads: ``WINDOW``, smaller on many cores to stay near ``BUDGET``.

    Never below ``BUFFER``: smaller windows would cost more calls than they save memory.
    """
    per_thread = BUDGET // max(1, jobs) - BUFFER
    return max(BUFFER, min(WINDOW, per_thread - per_thread % mmap.ALLOCATIONGRANULARITY))


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
    keep: dict[Path, bytes | None] | None = None,
) -> dict[Path, str | OSError]:
    """Hash many files on ``jobs`` threads; each result is a hex digest or the OSError.

    ``sizes`` (from an lstat the caller already made) saves a second one.
    Setting ``cancel`` stops the work within one window of each file in
    progress; the result then lacks the files not hashed. The files named
    in ``keep`` are read whole and their bytes stored there: the bytes that
    hashed, for a caller that reads them next.
    """
    return digest_many(dict.fromkeys(paths, SHA256), jobs, progress, sizes, cancel, keep)


def read_whole(path: Path | str) -> bytes:
    """A file's bytes, read to its end as ``sha256sum`` reads it; does not follow a final symlink."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        chunks = [os.read(fd, os.fstat(fd).st_size + 1)]
        while chunks[-1]:
            chunks.append(os.read(fd, BUFFER))
        return b"".join(chunks)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- digests of model files

SHA256 = "sha256"
GIT_SHA1 = "git-sha1"


class Cancelled(Exception):
    """Hashing stopped because its ``cancel`` event was set (an interrupt)."""


def digest_file(
    path: Path | str,
    algorithm: str,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    window: int = WINDOW,
) -> str:
    """The hex digest of a file: ``sha256`` of its bytes, or ``git-sha1`` (git's blob id).

    The git blob id is SHA-1 over ``b"blob <size>\\0"`` and the bytes: what a
    Hugging Face repository names its small (non-LFS) files by. Reads to the
    end of the file as ``sha256sum`` does (a file of ``window`` bytes or more
    through a sliding map, see the module docstring), does not follow a final
    symlink, and checks ``cancel`` between windows so an interrupt does not
    wait for a multi-GB file.
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
        done = _hash_mapped(fd, size, h, window, progress, cancel, path) if size >= window else 0
        _hash_read(fd, done, h, progress, cancel, path)
        return h.hexdigest()
    finally:
        os.close(fd)


def _hash_mapped(
    fd: int,
    size: int,
    h: hashlib._Hash,
    window: int,
    progress: Progress | None,
    cancel: threading.Event | None,
    path: Path | str,
) -> int:
    """Hash whole windows of the file through a map, one at a time; return the bytes hashed.

    Asks the kernel to read ahead the next window while this one hashes
    (``POSIX_FADV_WILLNEED``), which keeps a cold disk busy. Stops before
    a window that the file, looked at again, no longer fills.
    """
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        advise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    offset = 0
    while offset + window <= size:
        if cancel is not None and cancel.is_set():
            raise Cancelled(str(path))
        if advise is not None and offset + window < size:
            advise(fd, offset + window, window, os.POSIX_FADV_WILLNEED)
        with mmap.mmap(fd, window, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ, offset=offset) as mm:
            h.update(mm)
        offset += window
        if progress:
            progress(window)
        size = os.fstat(fd).st_size
    return offset


def _hash_read(
    fd: int,
    offset: int,
    h: hashlib._Hash,
    progress: Progress | None,
    cancel: threading.Event | None,
    path: Path | str,
) -> None:
    """Hash the file from ``offset`` to its end through the thread's read buffer."""
    buf = _buffer()
    if offset:
        os.lseek(fd, offset, os.SEEK_SET)
    while n := os.readv(fd, [buf]):
        h.update(buf if n == len(buf) else buf[:n])
        if progress:
            progress(n)
        if cancel is not None and cancel.is_set():
            raise Cancelled(str(path))


_Result = tuple[Path, str | OSError]
_Batch = Callable[[list[Path]], list[_Result]]


def _sizes_of(items: Iterable[Path], sizes: dict[Path, int] | None) -> dict[Path, int]:
    """Each file's size, to batch by: from ``sizes`` when given, else its ``lstat`` (0 when that fails)."""
    known = dict(sizes or {})
    for p in items:
        if p not in known:
            try:
                known[p] = p.lstat().st_size
            except OSError:
                known[p] = 0
    return known


def _digest_one(
    p: Path,
    algorithm: str,
    keep: dict[Path, bytes | None] | None,
    progress: Progress | None,
    stop: threading.Event,
    window: int,
) -> str:
    """One file's hex digest; a sha256 file named in ``keep`` is read whole and its bytes stored there."""
    if keep is not None and p in keep and algorithm == SHA256:
        keep[p] = data = read_whole(p)
        return sha256_bytes(data)
    return digest_file(p, algorithm, progress, stop, window)


def _digest_batch(
    batch: list[Path],
    items: dict[Path, str],
    keep: dict[Path, bytes | None] | None,
    progress: Progress | None,
    stop: threading.Event,
    window: int,
) -> list[_Result]:
    """Hash one batch in order, a digest or the OSError per file; stops early once ``stop`` is set.

    A file cut short by ``stop`` has no entry: the caller is being
    interrupted and reports nothing.
    """
    out: list[_Result] = []
    for p in batch:
        if stop.is_set():
            break
        try:
            out.append((p, _digest_one(p, items[p], keep, progress, stop, window)))
        except Cancelled:
            break
        except OSError as e:
            out.append((p, e))
    return out


def _run_here(run: _Batch, batches: list[list[Path]], stop: threading.Event) -> dict[Path, str | OSError]:
    """Every batch in the calling thread (one worker: no pool to start); an interrupt sets ``stop``."""
    results: dict[Path, str | OSError] = {}
    try:
        for batch in batches:
            results.update(run(batch))
    except BaseException:
        stop.set()
        raise
    return results


def _run_pool(run: _Batch, batches: list[list[Path]], workers: int, stop: threading.Event) -> dict[Path, str | OSError]:
    """Every batch on ``workers`` threads; an interrupt sets ``stop`` so they end within one window."""
    results: dict[Path, str | OSError] = {}
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


def digest_many(
    items: dict[Path, str],
    jobs: int | None = None,
    progress: Progress | None = None,
    sizes: dict[Path, int] | None = None,
    cancel: threading.Event | None = None,
    keep: dict[Path, bytes | None] | None = None,
) -> dict[Path, str | OSError]:
    """Hash many files on ``jobs`` threads, each with its own algorithm (``items``: path -> algorithm).

    The sha256 files named in ``keep`` are read whole instead, and their
    bytes stored there (see ``sha256_many``).

    Batches small files together and gives large ones a batch each, so both
    cores stay busy; each result is a hex digest or the OSError.

    An interrupt (KeyboardInterrupt in the calling thread) sets ``cancel`` so
    the worker threads stop within one window, then propagates; the caller
    has written nothing yet, so nothing is left behind.
    """
    stop = cancel if cancel is not None else threading.Event()
    known = _sizes_of(items, sizes)
    paths = list(items)
    workers = min(jobs or default_jobs(), max(1, len(paths)))
    run = functools.partial(
        _digest_batch, items=items, keep=keep, progress=progress, stop=stop, window=window_for(workers)
    )
    batches = _batches(paths, known)
    if workers == 1:
        return _run_here(run, batches, stop)
    return _run_pool(run, batches, workers, stop)


def pin_mismatch(data: bytes, pinned: str) -> str | None:
    """The sha256 of ``data`` when it is not the pinned hex digest ``pinned``; None when the bytes match the pin.

    The one comparison of bytes with their pin: every place that verifies
    what it read (a base from an upstream, a materialized file, a manifest,
    a cached blob) asks it, and reports a mismatch as a ``PinMismatch``
    (``require_pin``) or, in a check, as a finding.
    """
    got = sha256_bytes(data)
    return None if got == pinned else got


def require_pin(data: bytes, pinned: str, message: Callable[[str], str], hint: str | None = None) -> None:
    """Raise ``PinMismatch`` (``message`` given the sha256 found) unless ``data`` matches the pinned digest."""
    from patchkit.errors import PinMismatch

    got = pin_mismatch(data, pinned)
    if got is not None:
        raise PinMismatch(message(got), hint)
