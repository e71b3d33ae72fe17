"""Writing a changed deployment back: the lockfile, its files and the SHA256SUMS that matches them.

Every operation that changes pins computes the complete new state and hands it
to ``finish``, which writes it as one journaled transaction (``repo.write_all``),
so a failure leaves the repository as it was.
"""

from __future__ import annotations

from collections.abc import Iterable

from patchkit import sums
from patchkit.errors import BadInput
from patchkit.hashing import sha256_bytes
from patchkit.lockfile.model import LOCKFILE_NAME, Lockfile
from patchkit.lockfile.writer import dumps
from patchkit.outcome import Change
from patchkit.repo import Escape, Repo, write_all


def expected_sums(lock: Lockfile, lock_bytes: bytes) -> bytes:
    """The SHA256SUMS patchkit generates: the lockfile itself and every file it pins."""
    entries = {str(path): str(sha) for _, path, sha in lock.files()}
    entries[LOCKFILE_NAME] = sha256_bytes(lock_bytes)
    return sums.render(entries.items())


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
