"""Adopting hand-kept deployment repositories: ``patchkit import``."""

from __future__ import annotations

from pathlib import Path


def read_inside(root: Path, rel: str, what: str) -> bytes:
    """The bytes of the repository file ``rel`` that import pins or reads, never through a symlink.

    ``Repo.check_inside`` refuses a link at the file or at any directory on
    the way (as ``check`` does for every pinned file): a link to
    ``/etc/passwd`` would otherwise be read and pinned at the host file's
    sha256. Raises ``BadInput`` naming the file and ``what`` it is.
    """
    from patchkit.errors import BadInput
    from patchkit.repo import Escape, Repo

    try:
        return Repo(root).read(rel)
    except Escape as e:
        raise BadInput(
            f"{rel}: {e} ({what}); refusing to import it", "commit the file itself in place of the link"
        ) from e
    except OSError as e:
        raise BadInput(f"{rel}: cannot read ({e.strerror or e}) ({what})") from e
