"""The upstream-source boundary: "give me the bytes of these paths at this pin".

An ``UpstreamSource`` knows where an upstream's files come from (a git
repository, a Python wheel, a plain directory). ``snapshot(ref)`` resolves a
reference (a commit or branch for git, a version for a wheel, a path for a
directory) to an exact, pinned ``Snapshot``; the snapshot reads many files
at once. Every adapter wraps its foreign errors (git, pip, OS) into
``SourceError`` (exit 3: an external tool or service failed) or ``BadInput``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from patchkit.core.values import UpstreamPath
from patchkit.errors import BadInput


def check_path(path: str) -> None:
    """Refuse a path that cannot name a file inside an upstream tree (the caller's mistake)."""
    try:
        UpstreamPath(path)
    except ValueError as e:
        raise BadInput(str(e), "upstream paths are relative and '/'-separated, without '.', '..' or '//'") from e


@dataclass(frozen=True)
class Pin:
    """What makes a snapshot exact, as recorded in the lockfile's [upstreams.NAME].

    ``kind`` is ``git``, ``wheel`` or ``dir``. For git, ``commit`` is the full
    commit id and ``path`` the repository's URL. For a wheel, ``version`` is the project version, ``sha256`` the
    wheel file's hash and ``filename`` the wheel's file name. For a directory,
    ``path`` is where it is and ``sha256`` a digest of its listing and contents.
    """

    kind: str
    commit: str | None = None
    version: str | None = None
    sha256: str | None = None
    filename: str | None = None
    path: str | None = None

    @property
    def exact(self) -> str:
        """The pin as one exact reference: the commit, the wheel version, the image digest or the path."""
        if self.kind == "wheel":
            return str(self.version)
        if self.kind == "image":
            return f"sha256:{self.sha256}"
        return str(self.commit or self.path or "")

    def describe(self) -> str:
        if self.kind == "git":
            return self.commit[:12] if self.commit else "?"
        if self.kind == "image":
            where = (self.path or "?").split("@", 1)[0]
            return f"{where}@sha256:{(self.sha256 or '?')[:12]}" + (f" ({self.version})" if self.version else "")
        if self.kind == "wheel":
            project = (self.filename or "?").split("-", 1)[0]
            return f"{project}=={self.version} ({(self.sha256 or '?')[:12]})"
        return f"dir {self.path}"


class Snapshot(ABC):
    """The files of one upstream at one exact pin."""

    @property
    @abstractmethod
    def pin(self) -> Pin:
        """The pin that makes this snapshot exact."""

    @abstractmethod
    def read(self, paths: Iterable[str]) -> dict[str, bytes | None]:
        """The bytes of each upstream path; ``None`` where the path does not exist.

        Paths are relative, '/'-separated, inside the upstream tree. Reading
        many paths costs about as much as reading one (batched).
        """

    def renames(self, other: Snapshot, paths: Iterable[str]) -> Mapping[str, str]:
        """For paths of this snapshot that ``other`` has under a new name: old -> new.

        Only sources that can see history (git) detect renames; the default is none.
        """
        del other, paths
        return {}


class UpstreamSource(ABC):
    """Where an upstream's files come from."""

    kind: str

    @abstractmethod
    def snapshot(self, ref: str) -> Snapshot:
        """Resolve ``ref`` to an exact snapshot (fetching or downloading what is missing)."""
