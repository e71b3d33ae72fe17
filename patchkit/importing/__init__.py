"""Adopting hand-kept deployment repositories: ``patchkit import``, and ``upstream find-base`` (``findbase``)."""

from __future__ import annotations

from pathlib import Path


def read_inside(root: Path, rel: str, what: str) -> bytes:
    """The bytes of the repository file ``rel`` that import pins or reads, never through a symlink.

    ``Repo.check_inside`` refuses a link at the file or at any directory on
    the way (as ``check`` does for every pinned file): a link to
    ``/etc/passwd`` would otherwise be read and pinned at the host file's
    sha256. Raises ``BadInput`` naming the file and ``what`` it is.
    """
    from patchkit.store.repo import Repo

    return Repo(root).read_pinned(rel, f"{what}; refusing to import it")
