"""Pure work over many items spread across the machine's cores: forked worker processes.

A rebase merges a thousand files with pure-Python diff3; threads would share
one interpreter lock, so the work goes to forked processes instead. Fork makes
the inputs reach the workers without pickling them (each worker reads them
from the memory it inherited) and costs milliseconds, where a fresh
interpreter would pay for the imports again. Only the results travel back.

A worker dies with the process that forked it: on Linux the kernel sends it
SIGKILL when its parent ends (``PR_SET_PDEATHSIG``), however the parent
ends, ``kill -9`` included; a worker whose parent is already gone when it
starts exits at once. It never holds the repository's lock: the lock's
descriptor is closed in every forked child (``repo.lock_repository``), so
a worker left running could not keep the repository locked either.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# What the forked workers read: set just before the pool starts, cleared after.
_WORK: list[tuple[Callable[[Any], Any], Sequence[Any]]] = []


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether forking is safe here: on a platform with fork, from a process with a single thread.

    A thread holding a lock at the moment of the fork (a logging handler, an
    open reader) would leave that lock held forever in the child.
    """
    return hasattr(os, "fork") and threading.active_count() == 1


def map_items(fn: Callable[[T], R], items: Sequence[T], *, min_items: int = 64) -> list[R]:
    """``[fn(x) for x in items]``, on every core when there are at least ``min_items`` and forking is safe.

    ``fn`` must be pure (no I/O the parent relies on, no shared state) and
    its results picklable. An exception in a worker is raised here as the
    serial loop would raise it: the failing item is run again in this process.
    """
    workers = min(cores(), max(1, len(items) // max(min_items // 2, 1)))
    if len(items) < min_items or workers < 2 or not can_fork():
        return [fn(x) for x in items]
    # Imported here: multiprocessing costs tens of milliseconds, paid only when there is work to spread.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    _WORK.append((fn, items))
    try:
        # A few chunks per worker evens out files of different sizes.
        step = max(1, -(-len(items) // (workers * 4)))
        spans = [(start, min(start + step, len(items))) for start in range(0, len(items), step)]
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=die_with, initargs=(os.getpid(),)) as pool:
            chunks = list(pool.map(_run_span, spans))
    finally:
        _WORK.clear()
    out: list[R] = []
    for (start, _), chunk in zip(spans, chunks, strict=True):
        for offset, (ok, value) in enumerate(chunk):
            out.append(value if ok else fn(items[start + offset]))
    return out


def _run_span(span: tuple[int, int]) -> list[tuple[bool, Any]]:
    """In a worker: the results of items ``span``, each (True, result) or (False, None) when it raised."""
    fn, items = _WORK[-1]
    out: list[tuple[bool, Any]] = []
    for i in range(*span):
        try:
            out.append((True, fn(items[i])))
        except Exception:  # noqa: BLE001 - re-raised by the parent, which runs the item again
            out.append((False, None))
    return out


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with(parent: int) -> None:
    """In a forked worker: be killed when ``parent`` ends; exit now if it has ended already.

    ``PR_SET_PDEATHSIG`` on Linux (the signal comes when the thread that forked
    this process ends: ``map_items`` forks from the thread that calls it and
    waits for the workers there). Elsewhere only the check at start is made.
    Checked after setting the signal, so a parent that died in between is
    still seen: the worker was then handed to another process.
    """
    if sys.platform.startswith("linux"):
        # The C library the interpreter is linked with (no ``find_library``: it would run ldconfig per worker).
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
