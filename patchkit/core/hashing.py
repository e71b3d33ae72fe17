"""SHA-256 over files at the machine's limit: all cores, in bounded memory.

hashlib releases the GIL while it hashes a buffer, so threads scale across
cores. A file is read in chunks of ``WINDOW`` bytes (128 KiB, see there for
why) into a buffer per thread that is reused from file to file, so the
resident memory stays at one buffer per thread whatever the file sizes.
The kernel is asked to read ahead a large file (``POSIX_FADV_SEQUENTIAL``).

Files are read, never mapped: a file truncated under a map kills the process
with SIGBUS when the map is touched past the new end, and no check of the
size before each window closes that race. A read past the end just returns
fewer bytes.

A file that changed while it was read (its size, mtime or ctime differ
between the start and the end, or it read shorter or longer than its size)
is not hashed: ``Changed`` (an ``OSError``) names it, and the callers report
it as they report an unreadable file. Its bytes were a mix of two versions,
which no pin describes.
"""

from __future__ import annotations

import errno
import hashlib
import heapq
import mmap
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

# Bytes read at a time, per thread: the size of its buffer. With the buffer page-aligned (see _buffer),
# 64 KiB to 1 MiB cost the same CPU per byte (1.26-1.28 GB per CPU second on an EPYC, OpenSSL's own
# rate 1.55); the third more once measured above 128 KiB was most likely a buffer that malloc had placed
# 16 bytes past a page. Small enough that a cancel is seen within a fraction of a millisecond.
WINDOW = 128 * 1024
BUFFER = 64 * 1024  # the smallest buffer, on very many cores (see window_for)
BUDGET = 32 * 1024 * 1024  # buffered bytes over all threads, at most
SERVING = 8 * 1024 * 1024  # small files a worker takes at once, in bytes: a few ms of work
SERVING_FILES = 128  # and at most this many of them, however small

Progress = Callable[[int], None]
F = TypeVar("F", Path, str)  # how a caller names its files: its results are keyed the same way

_GRAIN = 64 * 1024  # buffer sizes are a multiple of this


class Changed(OSError):
    """A file changed while it was read: its digest would be of no version of it."""

    def __init__(self, path: Path | str, what: str) -> None:
        super().__init__(
            errno.EAGAIN, f"changed while it was read ({what}); read it again once it is written", str(path)
        )


class Blob:
    """Bytes and their SHA-256, hashed at most once, on the first ask.

    A value that carries its digest: code that needs the digest of the same
    bytes in several places (a pin check, then a SHA256SUMS line, then a
    statement) hands the ``Blob`` along instead of the bytes, and the bytes
    are hashed once. ``data`` is ``bytes``, which cannot change, so the
    digest never goes stale.
    """

    __slots__ = ("_sha256", "data")

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data) if type(data) is not bytes else data
        self._sha256: str | None = None

    @property
    def sha256(self) -> str:
        """The hex SHA-256 of ``data``, computed on the first ask only."""
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self.data).hexdigest()
        return self._sha256

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return f"Blob({len(self.data)} bytes)"


def sha256_bytes(data: bytes | Blob) -> str:
    """The hex SHA-256 of ``data``; a ``Blob`` gives the digest it carries (hashed once, on the first ask)."""
    if isinstance(data, Blob):
        return data.sha256
    return hashlib.sha256(data).hexdigest()


_local = threading.local()


def _buffer(size: int) -> memoryview:
    """This thread's read buffer of ``size`` bytes, reused for every file it hashes.

    Anonymous memory from ``mmap``, so it starts on a page boundary. A
    ``bytearray`` of 128 KiB lands wherever malloc puts it, which depends on
    what the process allocated and freed before: when malloc maps it on its
    own, its bytes start 16 bytes past a page, and the kernel's copy out of
    the page cache into it costs three times the CPU (hashing 40% more in
    all, measured on an EPYC).
    """
    buf: memoryview | None = getattr(_local, "buf", None)
    if buf is None or len(buf) != size:
        buf = _local.buf = memoryview(mmap.mmap(-1, size))
    return buf


def window_for(jobs: int) -> int:
    """The read buffer for each of ``jobs`` threads: ``WINDOW``, smaller on many cores to stay near ``BUDGET``.

    Never below ``BUFFER``: smaller reads would cost more calls than they save memory.
    """
    per_thread = BUDGET // max(1, jobs)
    return max(BUFFER, min(WINDOW, per_thread - per_thread % _GRAIN))


def sha256_file(path: Path | str, progress: Progress | None = None, opener: Callable[[Any], int] | None = None) -> str:
    """The hex SHA-256 of a file's bytes (``opener``: see ``digest_file``); does not follow a final symlink."""
    return digest_file(path, SHA256, progress, opener=opener or open_plain)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def sha256_many(
    paths: Iterable[Path],
    jobs: int | None = None,
    progress: Progress | None = None,
    sizes: dict[Path, int] | None = None,
    cancel: threading.Event | None = None,
    keep: dict[Path, bytes | None] | None = None,
    opener: Callable[[Any], int] | None = None,
) -> dict[Path, str | OSError]:
    """Hash many files on ``jobs`` threads; each result is a hex digest or the OSError (``Changed`` among them).

    ``sizes`` (from an lstat the caller already made) saves a second one.
    Setting ``cancel`` stops the work within one window of each file in
    progress; the result then lacks the files not hashed. The files named
    in ``keep`` are read whole and their bytes stored there: the bytes that
    hashed, for a caller that reads them next.
    """
    return digest_many(dict.fromkeys(paths, SHA256), jobs, progress, sizes, cancel, keep, opener)


def open_plain(path: Path | str) -> int:
    """A descriptor to read ``path``; a final symlink is not followed (``ELOOP``). The default opener."""
    return os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))


def read_whole(path: Path | str, opener: Callable[[Any], int] = open_plain) -> bytes:
    """A file's bytes, read to its end; ``Changed`` when it changed while it was read.

    ``opener`` gives the descriptor (``open_plain``: no final symlink followed;
    ``Repo.open_file``: nothing followed, nothing outside the repository).
    """
    fd = opener(path)
    try:
        before = os.fstat(fd)
        chunks = [os.read(fd, before.st_size + 1)]
        while chunks[-1]:
            chunks.append(os.read(fd, BUFFER))
        data = b"".join(chunks)
        _unchanged(fd, path, before, len(data))
        return data
    finally:
        os.close(fd)


def _unchanged(fd: int, path: Path | str, before: os.stat_result, read: int) -> None:
    """Raise ``Changed`` unless the file still has the size, mtime and ctime it had, and ``read`` was its size."""
    after = os.fstat(fd)
    if read != before.st_size or after.st_size != before.st_size:
        raise Changed(path, f"{before.st_size} bytes at the start, {read} read, {after.st_size} at the end")
    if (after.st_mtime_ns, after.st_ctime_ns) != (before.st_mtime_ns, before.st_ctime_ns):
        raise Changed(path, "modified during the read")


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
    opener: Callable[[Any], int] = open_plain,
) -> str:
    """The hex digest of a file: ``sha256`` of its bytes, or ``git-sha1`` (git's blob id).

    The git blob id is SHA-1 over ``b"blob <size>\\0"`` and the bytes: what a
    Hugging Face repository names its small (non-LFS) files by. Reads the
    file in chunks of ``window`` bytes (see the module docstring), opened by
    ``opener`` (``open_plain``: a final symlink is not followed), checks
    ``cancel`` between chunks so an interrupt does not wait for a multi-GB
    file, and raises ``Changed`` when the file changed while it was read.
    """
    fd = opener(path)
    try:
        before = os.fstat(fd)
        if algorithm == SHA256:
            h = hashlib.sha256()
        elif algorithm == GIT_SHA1:
            h = hashlib.sha1(usedforsecurity=False)
            h.update(b"blob %d\0" % before.st_size)
        else:
            raise ValueError(f"unknown digest algorithm {algorithm!r}")
        if before.st_size >= window and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # a cold disk kept busy reading ahead
        read = _hash_read(fd, h, window, progress, cancel, path)
        _unchanged(fd, path, before, read)
        return h.hexdigest()
    finally:
        os.close(fd)


def _hash_read(
    fd: int,
    h: hashlib._Hash,
    window: int,
    progress: Progress | None,
    cancel: threading.Event | None,
    path: Path | str,
) -> int:
    """Hash the file to its end through the thread's buffer of ``window`` bytes; return the bytes read."""
    buf = _buffer(window)
    read = 0
    while n := os.readv(fd, [buf]):
        h.update(buf if n == len(buf) else buf[:n])
        read += n
        if progress:
            progress(n)
        if cancel is not None and cancel.is_set():
            raise Cancelled(str(path))
    return read


def _sizes_of(items: Iterable[Path], sizes: dict[Path, int] | None) -> dict[Path, int]:
    """Each file's size, to order the work by: from ``sizes`` when given, else its ``lstat`` (0 when that fails)."""
    known = dict(sizes or {})
    for p in items:
        if p not in known:
            try:
                known[p] = p.lstat().st_size
            except OSError:
                known[p] = 0
    return known


def _digest_one(
    p: F,
    algorithm: str,
    keep: dict[F, bytes | None] | None,
    progress: Progress | None,
    stop: threading.Event,
    window: int,
    opener: Callable[[Any], int],
) -> str:
    """One file's hex digest; a sha256 file named in ``keep`` is read whole and its bytes stored there."""
    if keep is not None and p in keep and algorithm == SHA256:
        keep[p] = data = read_whole(p, opener)
        return sha256_bytes(data)
    return digest_file(p, algorithm, progress, stop, window, opener)


class _Queue(Generic[F]):
    """Files waiting to be hashed, the largest first; filled while the workers take from it."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, F]] = []
        self._added = 0
        self._open = True
        self._ready = threading.Condition(threading.Lock())

    def put(self, path: F, size: int) -> None:
        with self._ready:
            heapq.heappush(self._heap, (-size, self._added, path))
            self._added += 1
            self._ready.notify()

    def close(self) -> None:
        """No more files will come: a worker that finds the queue empty then ends."""
        with self._ready:
            self._open = False
            self._ready.notify_all()

    def take(self) -> list[F]:
        """The largest files waiting, up to ``SERVING`` bytes or ``SERVING_FILES`` files (at least one); none: done.

        Waits for a file while the queue is open. Small files come several
        at a time, so a thread hashes them in a loop of its own instead of
        trading the interpreter lock with the others at every file.
        """
        with self._ready:
            while not self._heap and self._open:
                self._ready.wait()
            taken: list[F] = []
            load = 0
            while self._heap and load < SERVING and len(taken) < SERVING_FILES:
                minus_size, _, path = heapq.heappop(self._heap)
                taken.append(path)
                load -= minus_size
            return taken


class Hasher(Generic[F]):
    """Files hashed on ``jobs`` threads as they are handed in, the largest waiting first.

    ``add`` hands in a file with its size (from an lstat the caller made
    while proving the path), so hashing starts with the first file instead
    of after the last one is proven; ``finish`` (or leaving the ``with``
    block) waits for the rest. ``results`` then holds each file's hex
    digest or the OSError that stopped it. Taking the largest file waiting
    keeps every core busy to the end, as sorting the whole list would.

    Setting ``cancel`` stops the work within one window of each file in
    progress; the results then lack the files not hashed. An interrupt (or
    any exception in the calling thread) inside the ``with`` block sets it,
    so the workers end before it propagates. A sha256 file named in ``keep``
    is read whole and its bytes stored there. With one job there is no
    thread: the calling thread hashes everything in ``finish``. ``opener``
    opens each file (see ``digest_file``).
    """

    def __init__(
        self,
        jobs: int | None = None,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        keep: dict[F, bytes | None] | None = None,
        opener: Callable[[Any], int] | None = None,
    ) -> None:
        self.jobs = jobs or default_jobs()
        self._opener: Callable[[Any], int] = opener or open_plain
        self.stop = cancel if cancel is not None else threading.Event()
        self.results: dict[F, str | OSError] = {}
        self._progress = progress
        self._keep: dict[F, bytes | None] | None = keep
        self._window = window_for(self.jobs)
        self._algorithms: dict[F, str] = {}
        self._queue: _Queue[F] = _Queue()
        self._threads: list[threading.Thread] = []
        self._failure: BaseException | None = None

    def __enter__(self) -> Hasher[F]:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.finish()
        else:
            self._abandon()

    def add(self, path: F, size: int, algorithm: str = SHA256) -> None:
        """Hash ``path`` (``size`` bytes, to order the work by) with ``algorithm``, on the next free worker."""
        self._algorithms[path] = algorithm
        self._queue.put(path, size)
        if self.jobs > 1 and len(self._threads) < self.jobs:
            worker = threading.Thread(target=self._work, name=f"digest-{len(self._threads)}", daemon=True)
            self._threads.append(worker)
            worker.start()

    def finish(self) -> dict[F, str | OSError]:
        """Wait for every file handed in; re-raise what stopped a worker (an interrupt in a progress callback)."""
        self._queue.close()
        try:
            if not self._threads:
                self._work()
            for worker in self._threads:
                worker.join()
        except BaseException:
            self._abandon()
            raise
        if self._failure is not None:
            raise self._failure
        return self.results

    def _abandon(self) -> None:
        """Stop the workers within one window and wait for them; what they had not hashed is not reported."""
        self.stop.set()
        self._queue.close()
        for worker in self._threads:
            worker.join()

    def _work(self) -> None:
        """Hash files from the queue until it is empty and closed, or ``stop`` is set."""
        try:
            while not self.stop.is_set() and (taken := self._queue.take()):
                for p in taken:
                    if self.stop.is_set():
                        return
                    try:
                        self.results[p] = _digest_one(
                            p, self._algorithms[p], self._keep, self._progress, self.stop, self._window, self._opener
                        )
                    except Cancelled:
                        return
                    except OSError as e:
                        self.results[p] = e
        except BaseException as e:
            if not self._threads:  # the calling thread itself: let it propagate
                raise
            self._failure = self._failure or e
            self.stop.set()
            self._queue.close()


def digest_many(
    items: dict[Path, str],
    jobs: int | None = None,
    progress: Progress | None = None,
    sizes: dict[Path, int] | None = None,
    cancel: threading.Event | None = None,
    keep: dict[Path, bytes | None] | None = None,
    opener: Callable[[Any], int] | None = None,
) -> dict[Path, str | OSError]:
    """Hash many files on ``jobs`` threads, each with its own algorithm (``items``: path -> algorithm).

    The files whose paths are all known beforehand, handed to a ``Hasher``
    (see there for ``cancel``, ``keep`` and interrupts); each result is a
    hex digest or the OSError. ``sizes`` (from an lstat the caller already
    made) saves a second one.
    """
    known = _sizes_of(items, sizes)
    workers = min(jobs or default_jobs(), max(1, len(items)))
    with Hasher[Path](workers, progress, cancel, keep, opener) as hasher:
        for path, algorithm in items.items():
            hasher.add(path, known[path], algorithm)
    return hasher.results


def pin_mismatch(data: bytes | Blob, pinned: str) -> str | None:
    """The sha256 of ``data`` when it is not the pinned hex digest ``pinned``; None when the bytes match the pin.

    The one comparison of bytes with their pin: every place that verifies
    what it read (a base from an upstream, a materialized file, a manifest,
    a cached blob) asks it, and reports a mismatch as a ``PinMismatch``
    (``require_pin``) or, in a check, as a finding.
    """
    got = sha256_bytes(data)
    return None if got == pinned else got


def require_pin(data: bytes | Blob, pinned: str, message: Callable[[str], str], hint: str | None = None) -> None:
    """Raise ``PinMismatch`` (``message`` given the sha256 found) unless ``data`` matches the pinned digest."""
    from patchkit.errors import PinMismatch

    got = pin_mismatch(data, pinned)
    if got is not None:
        raise PinMismatch(message(got), hint)
