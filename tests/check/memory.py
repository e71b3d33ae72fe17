"""Check's rules over a repository held in memory: a ``View`` answering from a dict, and a ``State`` built from it.

The rules read only the ``State`` and its ``View``, so a test states the files
it means (path -> bytes) and runs one rule; no repository is built.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from patchkit.check.state import Kind, PinnedFiles, State, TreeEntry, named_files
from patchkit.core import diffs, sums
from patchkit.core.values import UpstreamPath
from patchkit.lockfile.model import Lockfile
from patchkit.lockfile.reader import loads
from patchkit.lockfile.writer import dumps, expected_sums


@dataclass
class MemoryView:
    """The repository's files by path; symlinks, ignore rules, cached bases and provenance as stated."""

    files: dict[str, bytes]
    symlinks: set[str] = field(default_factory=set)
    ignored: dict[str, str] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    provenance: set[str] = field(default_factory=set)

    def read(self, rel: str) -> bytes | None:
        return None if rel in self.symlinks else self.files.get(rel)

    def kind(self, rel: str) -> Kind:
        if rel in self.symlinks:
            return "symlink"
        if rel in self.files:
            return "file"
        return "dir" if any(k.startswith(rel + "/") for k in self.files) else "missing"

    def exists(self, rel: str) -> bool:
        return rel in self.files

    def ignored_by(self, rel: str) -> str | None:
        return self.ignored.get(rel)

    def blob(self, sha256: str) -> bytes | None:
        return self.blobs.get(sha256)

    def provenance_names(self, rel: str) -> bool:
        return rel in self.provenance


def hashed(lock: Lockfile, files: Mapping[str, bytes]) -> PinnedFiles:
    """What hashing the pinned files would find among ``files``."""
    out = PinnedFiles()
    for n in named_files(lock):
        rel = str(n.path)
        if rel in files:
            out.sha256[rel] = hashlib.sha256(files[rel]).hexdigest()
        else:
            out.missing.add(rel)
    return out


def state_of(lock_text: str, files: Mapping[str, bytes] = (), **view: Any) -> State:  # type: ignore[assignment]
    """The ``State`` of a repository holding ``lock_text`` as its lockfile and ``files``; never touches a disk."""
    lock = loads(lock_text)
    held = dict(files)
    tree = [TreeEntry(rel, "file") for rel in sorted(held) if rel.split("/", 1)[0] in ("patches", "upstream", "tuning")]
    return State(
        lock=lock,
        lock_bytes=lock_text.encode(),
        view=MemoryView(held, **view),
        files=hashed(lock, held),
        tree=tree,
        sums=held.get(sums.FILENAME),
        has_deploy_config="deploy.toml" in held,
    )


BASE = b"".join(b"line %d\n" % i for i in range(1, 21))
OVERLAY = BASE.replace(b"line 10\n", b"line 10 fixed\n")
BASE_PATH = "pkg/mod.py"
TARGET = "/usr/lib/python3/dist-packages/pkg/mod.py"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def overlay_repo(
    *, overlay: bytes = OVERLAY, diff: bytes | None = None, extra: str = "", files: Iterable[tuple[str, bytes]] = ()
) -> tuple[str, dict[str, bytes]]:
    """A canonical lockfile with one git upstream and one overlay with its diff, and the files it pins.

    The pins are those of ``OVERLAY`` and its canonical diff; ``overlay`` and
    ``diff`` replace the files' bytes (not the pins), ``extra`` is appended to
    the lockfile text before it is made canonical.
    """
    good_diff = diffs.canonical_diff(BASE, OVERLAY, UpstreamPath(BASE_PATH))
    text = (
        'schema = 1\n\n[deployment]\nname = "t"\n\n'
        '[upstreams.pkg]\ngit = "https://github.com/example/pkg"\ncommit = "' + "a" * 40 + '"\n\n'
        '[[patches]]\nname = "fix"\nkind = "overlay"\nfile = "patches/mod.py"\n'
        f'sha256 = "{sha(OVERLAY)}"\ntarget = "{TARGET}"\nreason = "a fix"\n\n'
        f'[patches.base]\nupstream = "pkg"\ncommit = "{"a" * 40}"\npath = "{BASE_PATH}"\nsha256 = "{sha(BASE)}"\n\n'
        f'[patches.diff]\nfile = "upstream/fix.diff"\nsha256 = "{sha(good_diff)}"\n' + extra
    )
    text = dumps(loads(text))
    held = {"patches/mod.py": overlay, "upstream/fix.diff": good_diff if diff is None else diff, **dict(files)}
    held["lockfile.toml"] = text.encode()
    held[sums.FILENAME] = expected_sums(loads(text), text.encode())
    return text, held
