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
import heapq
import mmap
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Generic, ParamSpec, TypeVar

WINDOW = 4 * 1024 * 1024  # bytes mapped at a time, per thread
BUFFER = 1024 * 1024  # the per-thread read buffer, for files below WINDOW
BUDGET = 32 * 1024 * 1024  # mapped and buffered bytes over all threads, at most
SERVING = 8 * 1024 * 1024  # small files a worker takes at once, in bytes: a few ms of work
SERVING_FILES = 128  # and at most this many of them, however small

Progress = Callable[[int], None]
P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", Path, str)  # how a caller names its files: its results are keyed the same way

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: fault the window in with one call


class _Remembered:
    """Digests of the byte strings hashed lately, found again by identity; what only it keeps alive is bounded.

    A rebase meets each file version several times over (its pin, its merge
    key, its semantic-check key, its journal entry), mostly as the same
    ``bytes`` object. Keyed by the object's id, and holding the object so the
    id cannot be reused while it is remembered: a lookup costs no pass over
    the bytes (keying by content would hash them all again, for the dict).
    Only ``bytes`` are kept: they are immutable, so a digest never goes
    stale.

    When the remembered bytes pass ``sweep_at`` (at first ``limit``), the
    oldest strings that only this memo keeps alive are forgotten until half
    the limit is left. A string something else still holds costs no memory
    here, and its digest is likely to be asked for again (a rebase holds
    every file version until it writes): it stays, where forgetting it made
    a rebase of 5,000 patches hash the same strings again and again. The
    next sweep then waits until the remembered bytes have doubled, so
    sweeping stays linear in what is remembered, and what the memo alone
    keeps alive stays under ``limit`` or twice what others held at the last
    sweep.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.sweep_at = limit
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
            if self.size > self.sweep_at:
                self._forget_unheld()
        return digest

    def _forget_unheld(self) -> None:
        """Forget the oldest strings only this memo holds until half the limit is left (a dict keeps their order)."""
        for key, entry in list(self.digests.items()):
            if self.size <= self.limit // 2:
                break
            if sys.getrefcount(entry[0]) <= _HELD_HERE_ONLY:
                del self.digests[key]
                self.size -= len(entry[0])
        self.sweep_at = max(self.limit, 2 * self.size)


# References to a remembered string when only the memo holds it: its entry's tuple and getrefcount's argument.
_HELD_HERE_ONLY = 2

REMEMBER = 128 * 1024 * 1024  # bytes a rebase's memo may keep alive on its own (see _Remembered)
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
) -> str:
    """One file's hex digest; a sha256 file named in ``keep`` is read whole and its bytes stored there."""
    if keep is not None and p in keep and algorithm == SHA256:
        keep[p] = data = read_whole(p)
        return sha256_bytes(data)
    return digest_file(p, algorithm, progress, stop, window)


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
    thread: the calling thread hashes everything in ``finish``.
    """

    def __init__(
        self,
        jobs: int | None = None,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
        keep: dict[F, bytes | None] | None = None,
    ) -> None:
        self.jobs = jobs or default_jobs()
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
                            p, self._algorithms[p], self._keep, self._progress, self.stop, self._window
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
) -> dict[Path, str | OSError]:
    """Hash many files on ``jobs`` threads, each with its own algorithm (``items``: path -> algorithm).

    The files whose paths are all known beforehand, handed to a ``Hasher``
    (see there for ``cancel``, ``keep`` and interrupts); each result is a
    hex digest or the OSError. ``sizes`` (from an lstat the caller already
    made) saves a second one.
    """
    known = _sizes_of(items, sizes)
    with Hasher[Path](min(jobs or default_jobs(), max(1, len(items))), progress, cancel, keep) as hasher:
        for path, algorithm in items.items():
            hasher.add(path, known[path], algorithm)
    return hasher.results


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
