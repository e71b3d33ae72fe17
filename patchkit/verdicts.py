"""Checks remembered between runs: the keys of pure checks that passed.

Some of ``patchkit check``'s work is a pure function of bytes it has just
hashed: a diff reversed onto its overlay gives the pinned base, the lockfile
text is in the form patchkit writes. So are a rebase's semantic checks of
one produced file (``trust.semantic``). The same inputs pass or fail the same way
every time. Such a check is named by a key, the sha256 of the check's kind, of
patchkit's own code and of its inputs' digests; a key found again means the
same code passed the same bytes before, and the check need not run again.

Only passes are kept. A check that fails runs every time, so each finding is
produced fresh, with its line and message. The key covers the source of every
module of the package, so an upgrade (or a local edit) of patchkit never
reads a verdict that other code reached.

The file lives in the user cache (``<cache>/verdicts/``), one per repository
and use, and holds the keys that passed in that repository's last run, so it never
grows beyond one run's worth. The cache is the user's own, trusted as the
base cache is: whoever can write it can already change what patchkit reads.
A file that cannot be read is an empty memo; one that cannot be written only
makes the next check slower.

Beside the verdicts, ``LockfileMemo`` keeps the typed lockfile that the
lockfile's bytes parsed to, under the same kind of key (patchkit's code and
the bytes), so a check of an unchanged lockfile neither parses nor validates
it again: the records are rebuilt as they were, by an unpickler that builds
the lockfile's records and values and nothing else.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import pickle
import sys
from collections.abc import Callable
from dataclasses import is_dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from patchkit.errors import WriteFailed

if TYPE_CHECKING:
    from patchkit.lockfile.model import Lockfile
    from patchkit.lockfile.tomlfast import Layout
    from patchkit.lockfile.tomlpos import LineIndex

_KEY = 32  # bytes of one key (a sha256)


@functools.cache
def code_version() -> bytes:
    """A digest of the source of every module of the patchkit package."""
    package = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.digest()


class Verdicts:
    """The checks that passed in a repository's last run, and those passing in this one.

    ``Verdicts()`` remembers nothing and saves nowhere: what the checker uses
    where no cache is at hand.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._before = _read(path) if path is not None else frozenset()
        self._now: set[bytes] = set()
        self._code = code_version() if path is not None else b""

    def key(self, kind: str, *inputs: str) -> bytes | None:
        """The key of one check: its kind, patchkit's code and its inputs (digests, paths); None without a memo."""
        if self.path is None:
            return None
        text = "\0".join((kind, *inputs)).encode("utf-8", "surrogateescape")
        return hashlib.sha256(self._code + text).digest()

    @classmethod
    def for_repository(cls, cache: Path, root: Path, use: str = "check") -> Verdicts:
        """The memo of ``use`` (``check``, ``rebase``) for the repository at ``root``, in the cache ``cache``."""
        return cls(memo_path(cache, root, use))

    def passed(self, k: bytes | None) -> bool:
        """Whether the check ``k`` passed before; asking keeps it for the next run."""
        if k is not None and (k in self._before or k in self._now):
            self._now.add(k)
            return True
        return False

    def add(self, k: bytes | None) -> None:
        """Record that the check ``k`` passed in this run."""
        if k is not None:
            self._now.add(k)

    def save(self) -> None:
        """Keep this run's passes for the next run; unchanged or unwritable means no write."""
        if self.path is None or self._now == self._before:
            return
        from patchkit.repo import atomic_write

        with contextlib.suppress(WriteFailed, OSError):
            atomic_write(self.path, b"".join(sorted(self._now)), durable=False)


def memo_path(cache: Path, root: Path, use: str) -> Path:
    """The memo file of ``use`` for the repository at ``root``: one per repository and use, in the cache."""
    name = hashlib.sha256(str(root.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return cache / "verdicts" / f"{use}-{name}"


def _read(path: Path) -> frozenset[bytes]:
    try:
        data = path.read_bytes()
    except OSError:
        return frozenset()
    if len(data) % _KEY:
        return frozenset()  # damaged: an empty memo, rewritten by the next save
    return frozenset(data[i : i + _KEY] for i in range(0, len(data), _KEY))


# --------------------------------------------------------------------------- the typed lockfile


class Records(pickle.Unpickler):
    """An unpickler that builds the frozen records and enums of ``modules``, and refuses every other global.

    A pickle names the classes it builds; a name outside those modules (a
    function, another class, a class merely imported into one of them) is
    refused before anything is called, so a damaged or foreign memo is a
    miss, never code run. A memo of its own subclasses it with its modules.
    """

    modules: ClassVar[tuple[str, ...]] = ()

    def find_class(self, module: str, name: str) -> Any:
        found = getattr(sys.modules.get(module), name, None) if module in self.modules else None
        if isinstance(found, type) and found.__module__ == module and (is_dataclass(found) or issubclass(found, Enum)):
            return found
        raise pickle.UnpicklingError(f"{module}.{name} is not a record this memo keeps")


class _Records(Records):
    """The lockfile's records, values and enums: what make up a ``Lockfile``."""

    modules = ("patchkit.lockfile.model", "patchkit.values", "patchkit.series.model")


class _Plain(pickle.Unpickler):
    """An unpickler of plain data (dicts, tuples, strings, numbers): every global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


class LockfileMemo:
    """The typed lockfile the bytes of a repository's lockfile parsed to in its last check, kept in the cache.

    Its key covers patchkit's code, the interpreter's version and the
    lockfile's exact bytes, so a change of any parses again; only a lockfile
    that loaded without a problem is kept (a bad one raises on every run,
    with its located problems). Beside it, in a file of its own, the index of
    its lines (``line_index``). ``LockfileMemo()`` remembers nothing.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._layout: tuple[bytes, Layout] | None = None

    @classmethod
    def for_repository(cls, cache: Path, root: Path) -> LockfileMemo:
        return cls(memo_path(cache, root, "lockfile"))

    def load(self, data: bytes, parse: Callable[[], tuple[Lockfile, Layout | None]]) -> Lockfile:
        """The lockfile of ``data``: remembered when the same code parsed the same bytes before, else ``parse()``.

        ``parse`` is ``lockfile.reader.read`` of the text: what it found the
        text laid out as is kept for ``layout``.
        """
        from patchkit.lockfile.model import Lockfile

        key = _key(b"lockfile", data) if self.path is not None else b""
        lock = _remembered(self.path, key, _Records) if self.path is not None else None
        if not isinstance(lock, Lockfile):
            lock, layout = parse()
            if layout is not None:
                self._layout = (data, layout)
            if self.path is not None:
                _keep(self.path, key, lock)
        return lock

    def layout(self, data: bytes) -> Layout | None:
        """The document the text ``data`` read as, when this memo parsed it and found the writer's layout.

        ``lockfile.writer.writes_layout`` tells the canonical form from it
        without rendering the lockfile; None when the lockfile was not parsed
        (it was remembered) or has another layout.
        """
        if self._layout is not None and self._layout[0] == data:
            return self._layout[1]
        return None

    def line_index(self, data: bytes) -> LineIndex:
        """The lines of the keys of the lockfile ``data`` (what findings point at), remembered beside it.

        A deployment with findings or notes on every run (an imported one has
        a note per overlay) would otherwise scan the whole lockfile each time.
        """
        from patchkit.lockfile.tomlpos import LineIndex

        if self.path is None:
            return LineIndex(data.decode("utf-8"))
        path = self.path.with_name(self.path.name.replace("lockfile-", "lines-", 1))
        key = _key(b"lines", data)
        lines = _remembered(path, key, _Plain)
        if isinstance(lines, dict):
            return LineIndex.of(lines)
        index = LineIndex(data.decode("utf-8"))
        _keep(path, key, index.lines)
        return index


def _key(kind: bytes, data: bytes) -> bytes:
    """The key of what ``data`` gave: patchkit's code, the interpreter (tomllib and pickle come with it), the bytes."""
    return hashlib.sha256(code_version() + sys.version.encode() + b"\0" + kind + b"\0" + data).digest()


def _remembered(path: Path, key: bytes, unpickler: type[pickle.Unpickler]) -> object:
    """What is kept at ``path`` under ``key``; None for another key, or a memo missing or damaged."""
    from patchkit.lockfile.reader import collection_paused

    try:
        with path.open("rb") as f:
            if f.read(_KEY) != key:
                return None
            blob = f.read()
    except OSError:
        return None
    with collection_paused():
        try:
            return unpickler(io.BytesIO(blob)).load()
        except Exception:  # noqa: BLE001 - a damaged memo, whatever the error, is a miss
            return None


def _keep(path: Path, key: bytes, value: object) -> None:
    """Remember ``value`` for ``key``; a cache that cannot be written only makes the next run slower."""
    from patchkit.lockfile.reader import collection_paused
    from patchkit.repo import atomic_write

    with collection_paused(), contextlib.suppress(WriteFailed, OSError):
        atomic_write(path, key + pickle.dumps(value, pickle.HIGHEST_PROTOCOL), durable=False)
