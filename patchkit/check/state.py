"""What ``patchkit check`` knows about a repository, gathered once, and the view its rules read through.

``gather`` does the repository's I/O up front: it hashes every pinned file on
all cores, walks the managed directories and notes what is pending (an
interrupted write, a rebase). The rules then work on the ``State`` alone; what
they read beyond it (a diff's bytes, a compose file, a cached base) they ask of
``state.view``, a ``View``: ``RepoView`` answers from the repository, a test
hands in one that answers from a dict, so each rule is tested without building
a repository.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol

from patchkit.core.findings import Finding
from patchkit.core.hashing import sha256_many
from patchkit.core.values import LOCKFILE_NAME, RepoPath
from patchkit.errors import BadInput, Refused
from patchkit.lockfile.model import Lockfile
from patchkit.lockfile.series import Series, series_pins
from patchkit.lockfile.tomlpos import FieldPath, LineIndex
from patchkit.rebase.state import OVERLAYS, SERIES
from patchkit.store.repo import JOURNAL as REPO_JOURNAL
from patchkit.store.repo import (
    MANAGED_DIRS,
    TMP_PREFIX,
    Dirs,
    Escape,
    Repo,
    foreign_journal,
    gitignored,
    pending_journal,
    staging_pid,
)

if TYPE_CHECKING:
    from patchkit.importing import compose, patchers, pins, provenance, shell
    from patchkit.series.apply import Reader
    from patchkit.store.cache import BlobStore

REBASE_STATE = OVERLAYS.state_file
JOURNAL = REPO_JOURNAL  # where an interrupted write of several files is recorded
DEPLOY_CONFIG = "deploy.toml"

Kind = Literal["missing", "file", "dir", "symlink", "special"]


class View(Protocol):
    """What a rule may ask of the repository beyond the gathered state: read-only questions."""

    def read(self, rel: str) -> bytes | None:
        """The bytes of the regular file ``rel`` inside the repository; None when absent, unsafe or unreadable."""

    def kind(self, rel: str) -> Kind:
        """What ``rel`` is, without following a symlink."""

    def ignored_by(self, rel: str) -> str | None:
        """The ``.gitignore`` rule (``.gitignore:3``) that names ``rel``, if any."""

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` exists, following symlinks."""

    def blob(self, sha256: str) -> bytes | None:
        """An upstream base file from the local cache, by its sha256."""

    def provenance_names(self, rel: str) -> bool:
        """Whether a provenance table of the repository names the file ``rel``."""


class RepoView:
    """The ``View`` of a repository on disk (and its base cache, when there is one)."""

    def __init__(self, repo: Repo, store: BlobStore | None = None) -> None:
        self.repo = repo
        self.store = store

    def read(self, rel: str) -> bytes | None:
        try:
            return self.repo.read(rel)
        except (OSError, Escape, BadInput):
            return None

    def kind(self, rel: str) -> Kind:
        try:
            mode = (self.repo.root / rel).lstat().st_mode
        except OSError:
            return "missing"
        if stat.S_ISLNK(mode):
            return "symlink"
        if stat.S_ISREG(mode):
            return "file"
        return "dir" if stat.S_ISDIR(mode) else "special"

    def ignored_by(self, rel: str) -> str | None:
        return gitignored(self.repo.root, [rel]).get(rel)

    def exists(self, rel: str) -> bool:
        return (self.repo.root / rel).exists()

    def blob(self, sha256: str) -> bytes | None:
        return self.store.get(sha256) if self.store is not None else None

    def provenance_names(self, rel: str) -> bool:
        from patchkit.importing import provenance

        return bool(provenance.rows_naming(self.repo.root, rel))

    def links_below(self, rel: str) -> list[str]:
        """The symlinks below the directory ``rel`` (directories and files, in walk order), not followed."""
        root = self.repo.root
        out = []
        for dirpath, dirnames, filenames in os.walk(root / rel):
            dirnames.sort()
            here = Path(dirpath)
            out += [(here / n).relative_to(root).as_posix() for n in dirnames if (here / n).is_symlink()]
            out += [(here / n).relative_to(root).as_posix() for n in sorted(filenames) if (here / n).is_symlink()]
        return out

    def files_below(self, rel: str) -> list[str]:
        """The regular files below the directory ``rel`` (not through a symlink), in walk order."""
        root = self.repo.root
        out = []
        for dirpath, dirnames, filenames in os.walk(root / rel):
            dirnames.sort()
            here = Path(dirpath)
            regular = [n for n in sorted(filenames) if not (here / n).is_symlink() and (here / n).is_file()]
            out += [(here / n).relative_to(root).as_posix() for n in regular]
        return out

    def link_to(self, rel: str) -> tuple[str, bool]:
        """Where the symlink ``rel`` points, and whether that resolves inside the repository."""
        path = self.repo.root / rel
        try:
            return os.readlink(path), path.resolve().is_relative_to(self.repo.root.resolve())
        except (OSError, RuntimeError):
            return "?", False

    @cached_property
    def build_reading(self) -> shell.Reading | str:
        """The repository's Containerfiles and build scripts read statically, as import reads them; read once.

        When one of them cannot be read safely (a symlink out of the
        repository, unreadable), why: nothing of the build is read then.
        """
        from patchkit.importing import queue

        try:
            return queue.read_build(self.repo.root)[1]
        except BadInput as e:
            return e.message
        except OSError as e:
            return f"{e.filename}: {e.strerror}" if e.filename else str(e)

    @cached_property
    def provenance_rows(self) -> list[provenance.Row]:
        """Every row of the repository's provenance tables, as import reads them; read once. A document that
        is not a regular file inside the repository names nothing; bytes that are not UTF-8 read as U+FFFD."""
        from patchkit.importing import provenance

        top = self.repo.root.resolve()
        out: list[provenance.Row] = []
        for doc in provenance.DOCUMENTS:
            path = self.repo.root / doc
            try:
                if path.is_file() and path.resolve().is_relative_to(top):
                    out += provenance.tables(doc, path.read_bytes().decode("utf-8", "replace"))
            except OSError:
                continue  # unreadable: it names nothing
        return out

    @cached_property
    def build_patchers(self) -> list[patchers.Run]:
        """The patcher scripts the build runs, read as import reads them; read once. None are read when the
        build is not (``build_reading`` says why) or a script it runs cannot be read (the file rules say it)."""
        from patchkit.importing import patchers

        reading = self.build_reading
        if isinstance(reading, str):
            return []
        try:
            return patchers.run_by_build(self.repo.root, reading)
        except (BadInput, OSError):
            return []


class Named(NamedTuple):
    """A file the lockfile pins: the field holding its sha256, its path, the pin and who owns it.

    A tuple: one is made per pinned file, thousands per check.
    """

    field: FieldPath
    path: RepoPath
    sha256: str
    owner: str


class TreeEntry(NamedTuple):
    """One entry below a managed directory, as its directory listing (``lstat`` for a special file) saw it.

    A tuple: one is made per file of the managed directories.
    """

    rel: str
    kind: Kind
    mode: int = 0  # a special file's st_mode; the type bits alone for the others
    link: str | None = None  # a symlink's target
    link_inside: bool = False  # whether that target resolves inside the repository
    staged: bool = False  # a file patchkit staged for a write


@dataclass
class PinnedFiles:
    """What hashing the pinned files found, by repository path."""

    sha256: dict[str, str] = field(default_factory=dict)  # readable files: their content's sha256
    paths: dict[str, str] = field(default_factory=dict)  # where they were found (checked inside)
    missing: set[str] = field(default_factory=set)
    unsafe: dict[str, str] = field(default_factory=dict)  # the reason (Escape) by path
    unreadable: dict[str, str] = field(default_factory=dict)  # the OS error by path
    content: dict[str, bytes] = field(default_factory=dict)  # the bytes that hashed, of the small files


@dataclass
class State:
    """Everything check's rules read about one repository, gathered once.

    ``files`` is ``None`` until the pinned files are hashed (``gather`` does it);
    ``tree`` lists the managed directories' entries, ``symlinked_dirs`` those that
    are symlinks themselves. ``sums`` is SHA256SUMS's bytes (None: missing) or the
    reason it is unsafe.
    """

    lock: Lockfile
    lock_bytes: bytes
    view: View
    files: PinnedFiles = field(default_factory=PinnedFiles)
    tree: list[TreeEntry] = field(default_factory=list)
    symlinked_dirs: list[str] = field(default_factory=list)
    journal_pending: bool = False
    # The pending journal lies in a git work tree, where patchkit never writes one (a clone can carry one).
    journal_foreign: bool = False
    rebase_pending: bool = False
    lockfile_unsafe: str | None = None
    sums: bytes | str | None = None
    has_deploy_config: bool = False
    # Each patch series' upstream tree at its pin, read offline, or why it cannot be (patchkit.series.source).
    series_tree: Callable[[Series], Reader | str] | None = None
    series_rebase_pending: bool = False

    @cached_property
    def index(self) -> LineIndex:
        """Lines of the lockfile's keys: scanned for the first finding only."""
        return LineIndex(self.lock_bytes.decode("utf-8"))

    def lock_finding(
        self, code: str, path: FieldPath, message: str, fix: str | None, severity: str = "error"
    ) -> Finding:
        """A finding about a lockfile field, located at its line."""
        return Finding(
            code=code,
            file=LOCKFILE_NAME,
            line=self.index.line_of(path),
            field=field_name(path, self.lock),
            message=message,
            fix=fix,
            severity=severity,
        )

    def named(self) -> list[Named]:
        """Every file the lockfile pins, with the field that pins it (listed once per state)."""
        return self._named

    @cached_property
    def _named(self) -> list[Named]:
        return list(named_files(self.lock))

    @cached_property
    def own_pins(self) -> OwnPins:
        """The upstream and image pins the repository's own files state, read as import reads them; read once."""
        return read_own_pins(self)

    @cached_property
    def hand_composes(self) -> list[compose.ComposeFile]:
        """The hand-kept compose files the lockfile pins (import pins them with the note ``compose``), parsed
        as import parses them; read once. One missing, changed or malformed is left out: the file rules and
        ``compose.mounts`` report it."""
        from patchkit.importing import compose

        out = []
        for a in self.lock.artifacts:
            if a.note != "compose" and not compose.COMPOSE_NAMES.fullmatch(a.file.pure.name):
                continue
            data = self.readable(str(a.file))
            try:
                if data is not None:
                    out.append(compose.read(str(a.file), data.decode("utf-8")))
            except (UnicodeDecodeError, BadInput):
                continue
        return out

    def readable(self, rel: str) -> bytes | None:
        """The bytes of a pinned file that hashed (it exists, is safe and readable); else None.

        A small file's bytes are those that hashed, kept by ``hash_pinned``; a
        larger one is read again through the view (never through a link). One
        that is gone or changed by then was changed while check ran: a
        refusal naming it (exit 1), never a rule passed on bytes it did not read.
        """
        if rel not in self.files.sha256:
            return None
        if (data := self.files.content.get(rel)) is not None:
            return data
        data = self.view.read(rel)
        if data is None or hashlib.sha256(data).hexdigest() != self.files.sha256[rel]:
            raise Refused(
                f"{rel}: changed while check read it (after it was hashed); nothing was concluded",
                "run check again when nothing else writes the repository",
            )
        return data


def named_files(lock: Lockfile) -> Iterator[Named]:
    """Every file ``lock`` pins, with the field that pins it."""
    for i, p in enumerate(lock.patches):
        if p.file is not None:
            yield Named(("patches", i, "sha256"), p.file, p.sha256.hex, f"patch '{p.name}'")
        if p.diff is not None:
            yield Named(("patches", i, "diff", "sha256"), p.diff.file, p.diff.sha256.hex, f"diff of '{p.name}'")
    for key, items in (("tuning", lock.tuning), ("artifacts", lock.artifacts)):
        for i, a in enumerate(items):
            yield Named((key, i, "sha256"), a.file, a.sha256.hex, f"{key} '{a.name}'")
    for i, d in enumerate(lock.diffs):
        yield Named(("diffs", i, "sha256"), d.file, d.sha256.hex, "hand-kept diff")
    for path, file, sha, owner in series_pins(lock.series):
        yield Named(path, file, sha.hex, owner)


def field_name(path: FieldPath, lock: Lockfile) -> str:
    """``patches[kv-fence].base.sha256``: indices shown as the entry's name where it has one."""
    out = ""
    collection: tuple[object, ...] | None = None
    for part in path:
        if isinstance(part, int):
            item = collection[part] if collection is not None and part < len(collection) else None
            label = getattr(item, "name", None)
            out += f"[{label}]" if label else f"[{part}]"
            collection = None
        else:
            out += ("." if out else "") + part
            collection = getattr(lock, part, None) if out == part else None
            if not isinstance(collection, tuple):
                collection = None
    return out


def hash_pinned(repo: Repo, lock: Lockfile, named: Iterable[Named] | None = None) -> PinnedFiles:
    """Containment and the sha256 of every pinned file (``named``: ``named_files(lock)``).

    A small regular file (one ``lstat``, then opened without following a
    symlink) is read and hashed in this thread, as plain strings: its bytes
    are kept for the rules that read them next (within ``KEEP_AT_MOST``).
    Everything else (a large file, a missing, unsafe or unreadable one)
    takes the general way: the containment check names what is wrong, and
    large files hash on all cores.
    """
    out = PinnedFiles()
    root = str(repo.root)
    rest: list[str] = []
    kept = 0
    for rel in dict.fromkeys(n.path.path for n in (named if named is not None else named_files(lock))):
        data = _small_file(repo.dirs, rel)
        if data is None:
            rest.append(rel)
            continue
        # hashlib itself: each file is hashed once, and sha256_bytes's memo would hold every file's bytes.
        out.sha256[rel] = hashlib.sha256(data).hexdigest()
        out.paths[rel] = f"{root}/{rel}"
        if kept + len(data) <= KEEP_AT_MOST:
            out.content[rel] = data
            kept += len(data)
    if rest:
        _hash_checked(repo, rest, out)
    return out


KEEP_BELOW = 256 * 1024  # a pinned file smaller than this is read whole, hashed and kept for the rules
KEEP_AT_MOST = 32 * 1024 * 1024  # bytes kept over all files
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # never a link, never waiting on a FIFO


def _small_file(dirs: Dirs, rel: str) -> bytes | None:
    """The bytes of ``rel`` when it is a small regular file below real directories of the repository; else None.

    None says only "not this way": the caller checks such a file the general
    way, which tells a missing, unsafe, unreadable or changing file apart. The
    path resolves through ``dirs`` (no symlink followed on the way or at the
    end), and the file is opened only after its ``stat`` says it is regular.
    """
    try:
        directory, name = dirs.at(rel)
        st = os.stat(name, dir_fd=directory, follow_symlinks=False)  # a device or a FIFO is never opened
        if not stat.S_ISREG(st.st_mode) or st.st_size >= KEEP_BELOW:
            return None
        fd = os.open(name, _OPEN_FLAGS, dir_fd=directory)
    except (OSError, BadInput):
        return None
    try:
        data = os.read(fd, st.st_size + 1)
        after = os.fstat(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) != st.st_size or (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
        return None  # changed since the stat: the general way reads it again and says so if it still changes
    return data


def _hash_checked(repo: Repo, rels: list[str], out: PinnedFiles) -> None:
    """The general way: ``Repo.check_inside_stat`` says why a file is missing or unsafe; the rest hash on all cores."""
    paths: dict[str, Path] = {}
    sizes: dict[Path, int] = {}
    for rel in rels:
        try:
            paths[rel], st = repo.check_inside_stat(rel)
            sizes[paths[rel]] = st.st_size
        except FileNotFoundError:
            out.missing.add(rel)
        except Escape as e:
            out.unsafe[rel] = str(e)
    hashes = sha256_many(paths.values(), sizes=sizes, opener=repo.dirs.open_regular)
    for rel, path in paths.items():
        got = hashes[path]
        if isinstance(got, OSError):
            out.unreadable[rel] = got.strerror or str(got)
        else:
            out.sha256[rel] = got
            out.paths[rel] = str(path)


def walk_managed(repo: Repo) -> tuple[list[TreeEntry], list[str]]:
    """Every entry below the managed directories (each directory's names sorted, then its subdirectories), and
    those managed directories that are symlinks.

    Plain strings and ``os.scandir``: the listing says each entry's type, so a
    file costs no ``stat`` of its own.
    """
    entries: list[TreeEntry] = []
    symlinked: list[str] = []
    root = str(repo.root)
    for top in MANAGED_DIRS:
        base = repo.root / top
        if base.is_symlink():
            symlinked.append(top)
        elif base.is_dir():
            _walk(root, f"{root}/{top}", top, entries)
    return entries, symlinked


def _walk(root: str, path: str, rel: str, entries: list[TreeEntry]) -> None:
    """The entries of the directory ``path`` (``rel`` in the repository), then those of its real subdirectories."""
    try:
        with os.scandir(path) as listing:
            found = sorted(listing, key=_name)
    except OSError:
        return  # unreadable: as os.walk, nothing below it is listed
    entries += [_entry(root, e, f"{rel}/{e.name}") for e in found]
    for e in found:
        if e.is_dir(follow_symlinks=False):
            _walk(root, e.path, f"{rel}/{e.name}", entries)


def _name(e: os.DirEntry[str]) -> str:
    return e.name


def _entry(root: str, e: os.DirEntry[str], rel: str) -> TreeEntry:
    if e.is_symlink():
        inside = Path(e.path).resolve().is_relative_to(root)
        return TreeEntry(rel, "symlink", stat.S_IFLNK, os.readlink(e.path), inside)
    if e.is_file(follow_symlinks=False):
        return TreeEntry(
            rel, "file", stat.S_IFREG, staged=e.name.startswith(TMP_PREFIX) and staging_pid(e.name) is not None
        )
    if e.is_dir(follow_symlinks=False):
        return TreeEntry(rel, "dir", stat.S_IFDIR)
    return TreeEntry(rel, "special", e.stat(follow_symlinks=False).st_mode)


def _sums_bytes(repo: Repo) -> bytes | str | None:
    from patchkit.core import sums

    try:
        return repo.read(sums.FILENAME)
    except FileNotFoundError:
        return None
    except Escape as e:
        return str(e)


def _lockfile_unsafe(repo: Repo) -> str | None:
    try:
        repo.check_inside(LOCKFILE_NAME)
    except Escape as e:
        return str(e)
    except FileNotFoundError:
        pass
    return None


@dataclass(frozen=True)
class ImagePin:
    """An image a repository file names by digest: a Dockerfile's ``FROM`` or a compose service's ``image:``."""

    file: str
    line: int
    repository: str
    digest: str


@dataclass
class OwnPins:
    """What the repository's own lock, build and compose files pin, each pin with its file and line."""

    upstreams: list[pins.Pin] = field(default_factory=list)
    images: list[ImagePin] = field(default_factory=list)
    # A lock's ``images`` written without a digest: (the lock, the key, the reference), as import reads them.
    unpinned_images: list[tuple[str, str, str]] = field(default_factory=list)


_LOCK_SUFFIXES = (".json", ".toml")


def read_own_pins(state: State) -> OwnPins:
    """The pins of the lock files, Dockerfiles and compose files the lockfile pins, read from the bytes that hashed.

    A file that is missing, changed, unsafe (a symlink, outside the
    repository) or does not parse states nothing here: the file rules and
    ``check.build`` report it.
    """
    from patchkit.importing import pins

    out = OwnPins()
    for a in state.lock.artifacts:
        rel = str(a.file)
        name = a.file.pure.name.lower()
        if a.note != "lock" and not ("lock" in name and name.endswith(_LOCK_SUFFIXES)):
            continue
        data = state.readable(rel)
        if data is None:
            continue
        text = data.decode("utf-8", "replace")
        try:
            if name.endswith(_LOCK_SUFFIXES) or text.lstrip().startswith("{"):
                doc = pins.document(rel, data)
                out.upstreams += pins.document_pins(rel, text, doc)
                out.images += _lock_images(rel, text, doc)
                out.unpinned_images += _lock_unpinned(rel, doc)
            else:
                out.upstreams += pins.key_values(rel, text)
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue  # a lock that does not parse: pin-unreadable (check.build)
    if isinstance(state.view, RepoView):
        _build_pins(state, state.view.repo.root, out)
    return out


_DIGEST_REF = re.compile(r"(?P<repo>[^@\s]+?)(?::[\w.-]+)?@(?P<digest>sha256:[0-9a-f]{64})")


def _lock_images(rel: str, text: str, doc: object) -> list[ImagePin]:
    """The images a JSON or TOML lock pins by digest under ``images`` (``{"vllm": "repo:tag@sha256:…"}``)."""
    images = doc.get("images") if isinstance(doc, dict) else None
    out = []
    lines = text.splitlines()
    for value in images.values() if isinstance(images, dict) else ():
        ref = value.get("image") if isinstance(value, dict) else value
        if isinstance(ref, str) and (m := _DIGEST_REF.fullmatch(ref)) is not None:
            out.append(ImagePin(rel, _line_with(lines, ref, 1), m["repo"], m["digest"]))
    return out


def _lock_unpinned(rel: str, doc: object) -> list[tuple[str, str, str]]:
    """The images a JSON or TOML lock names under ``images`` by tag only: each build may get another image."""
    images = doc.get("images") if isinstance(doc, dict) else None
    out = []
    for key, value in images.items() if isinstance(images, dict) else ():
        ref = value.get("image") if isinstance(value, dict) else value
        if isinstance(ref, str) and _DIGEST_REF.fullmatch(ref) is None:
            out.append((rel, str(key), ref))
    return out


def _build_pins(state: State, root: Path, out: OwnPins) -> None:
    """The pins of the pinned Dockerfiles (with the compose ``build.args`` they are built with) and compose files."""
    from patchkit.importing import compose, dockerfile, pins

    uses: dict[str, compose.BuildUse] = {}
    for a in state.lock.artifacts:
        data = state.readable(str(a.file)) if compose.COMPOSE_NAMES.fullmatch(a.file.pure.name) else None
        try:
            c = compose.read(str(a.file), data.decode("utf-8")) if data is not None else None
        except (UnicodeDecodeError, BadInput):
            continue
        if c is None:
            continue
        out.images += [ImagePin(u.compose, u.line, u.repository, u.digest) for u in c.images if u.digest]
        for u in c.builds:
            uses.setdefault(compose.built_file(u, lambda rel: state.view.kind(rel) == "file"), u)
    files = [str(a.file) for a in state.lock.artifacts if a.file.pure.name.startswith(("Containerfile", "Dockerfile"))]
    files += [str(a.file) for a in state.lock.artifacts if a.note == "image build"]
    files += [str(p.build) for p in state.lock.patches if p.build is not None]
    for rel in dict.fromkeys(files):
        if (data := state.readable(rel)) is None:
            continue
        use, text = uses.get(rel), data.decode("utf-8", "replace")
        try:
            b = (
                dockerfile.read(root, rel, text, use.context, dict(use.args), use.target)
                if use is not None
                else dockerfile.read(root, rel, text)
            )
        except (BadInput, OSError, ValueError, RecursionError):
            continue  # reported where the build is read (check.build)
        out.upstreams += pins.from_build(b, use.stated_at() if use is not None else None)
        lines = text.splitlines()
        for x in b.bases:
            if x.digest is not None:  # stated on the FROM, or by the ARG default it names
                line = x.line if x.digest in x.written else _line_with(lines, x.digest, x.line)
                out.images.append(ImagePin(x.file, line, x.repository, x.digest))


def _line_with(lines: list[str], needle: str, default: int) -> int:
    return next((n for n, text in enumerate(lines, 1) if needle in text), default)


def gather(
    repo: Repo,
    lock: Lockfile,
    lock_bytes: bytes,
    store: BlobStore | None = None,
) -> State:
    """Read what every rule needs from ``repo``, once; never writes."""
    tree, symlinked = walk_managed(repo)
    state = State(
        lock=lock,
        lock_bytes=lock_bytes,
        view=RepoView(repo, store),
        tree=tree,
        symlinked_dirs=symlinked,
        journal_pending=pending_journal(repo.root),
        journal_foreign=foreign_journal(repo.root),
        rebase_pending=(repo.root / REBASE_STATE).exists(),
        lockfile_unsafe=_lockfile_unsafe(repo),
        sums=_sums_bytes(repo),
        has_deploy_config=(repo.root / DEPLOY_CONFIG).exists(),
        series_tree=_series_tree(repo, lock, store),
        series_rebase_pending=(repo.root / SERIES_REBASE_STATE).exists(),
    )
    state.files = hash_pinned(repo, lock, state.named())
    return state


SERIES_REBASE_STATE = SERIES.state_file


def _series_tree(repo: Repo, lock: Lockfile, store: BlobStore | None) -> Callable[[Series], Reader | str] | None:
    """The offline reader of each series' upstream (opened lazily, per series), when there are series and a cache."""
    if not lock.series or store is None:
        return None
    from patchkit.series.source import offline_tree

    return offline_tree(lock, store.cache, repo.root)  # the user cache the store is kept in
