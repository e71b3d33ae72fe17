"""Writing a changed deployment back: the lockfile, its files and the SHA256SUMS that matches them.

Every operation that changes pins computes the complete new state and hands it
to ``finish``, which writes it as one journaled transaction (``repo.write_all``),
so a failure leaves the repository as it was.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from patchkit.core import sums
from patchkit.core.outcome import Change
from patchkit.core.values import LOCKFILE_NAME
from patchkit.errors import BadInput
from patchkit.lockfile.model import Lockfile
from patchkit.lockfile.writer import dumps, expected_sums
from patchkit.store.repo import Escape, Repo, write_all

# patchkit's work area (write lock, journal, rebase state), as .gitignore names it: never committed.
WORK_AREA = b"# patchkit's work area (rebase in progress, journal)\n.patchkit/\n"
_IGNORES_WORK_AREA = {".patchkit", ".patchkit/", "/.patchkit", "/.patchkit/", ".patchkit/*", "/.patchkit/*"}


def ignore_work_area(root: Path) -> dict[str, bytes]:
    """``{".gitignore": bytes}`` with a ``.patchkit/`` line appended (or a new file), or ``{}`` when it has one.

    The work area must never be committed: a clone would carry one run's
    write lock, journal and rebase state into another. A top-level
    ``.gitignore`` that is not a regular file (a symlink, a directory) is left
    alone, as every write refuses to go through such a file.
    """
    path = root / ".gitignore"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        old = b""
    except OSError:
        return {}
    else:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return {}
            old = f.read()
    if any(line.rstrip(b" \r").decode("utf-8", "replace") in _IGNORES_WORK_AREA for line in old.split(b"\n")):
        return {}
    sep = b"" if not old or old.endswith(b"\n") else b"\n"
    return {".gitignore": old + sep + WORK_AREA}


def finish(repo: Repo, lock: Lockfile, extra: dict[str, bytes] | None = None, deletes: Iterable[str] = ()) -> list[str]:
    """Write ``lock``, any extra files and the matching SHA256SUMS as one transaction."""
    text = dumps(lock).encode()
    files = dict(extra or {})
    files[LOCKFILE_NAME] = text
    files[sums.FILENAME] = expected_sums(lock, text)
    return write_all(repo.root, files, deletes)


def sums_dropped(repo: Repo, lock: Lockfile) -> list[Change]:
    """The SHA256SUMS entries that writing the sums of ``lock`` would drop, one change each.

    SHA256SUMS lists exactly what the lockfile pins, so a hand-added entry for
    a file the lockfile does not pin goes when it is regenerated; every
    command that rewrites it says so.
    """
    try:
        current = repo.read(sums.FILENAME)
    except (OSError, Escape, BadInput):
        return []
    pinned = {str(path) for _, path, _ in lock.files()} | {LOCKFILE_NAME}
    return [
        Change(f"SHA256SUMS {e.name}", "listed", "dropped (the lockfile does not pin it)")
        for e in sums.read(current).entries
        if e.name not in pinned
    ]
