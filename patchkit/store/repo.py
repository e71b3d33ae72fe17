"""The deployment repository on disk: finding it, reading inside it safely, writing atomically."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit.core.hashing import Changed, read_whole, sha256_bytes
from patchkit.core.values import LOCKFILE_NAME, RepoPath
from patchkit.errors import BadInput, PatchkitError, Refused, WriteFailed

if TYPE_CHECKING:
    from collections.abc import Mapping

    from patchkit.lockfile.model import Lockfile


MANAGED_DIRS = ("patches", "upstream", "tuning")

WORK_DIR = ".patchkit"
TMP_PREFIX = ".patchkit-tmp-"
# Where the journal lives outside a git work tree. In one, it lives in the git directory
# (``journal_place``), where a clone cannot put a file; a journal here is then never carried out.
JOURNAL = f"{WORK_DIR}/journal.json"
# The new contents of the files a journaled write changes in place, for recovery to write again.
JOURNAL_DATA = f"{WORK_DIR}/journal.data"
JOURNAL_VERSION = 3
# A journal lists every file of one transaction; a bump of thousands of files stays far below this.
JOURNAL_MAX_BYTES = 64 << 20


def find_root(start: Path) -> Path:
    """The nearest directory at or above ``start`` that holds a lockfile."""
    start = start.resolve()
    for d in (start, *start.parents):
        if (d / LOCKFILE_NAME).is_file():
            return d
    raise BadInput(
        f"{start}: no {LOCKFILE_NAME} here or in any parent directory",
        "run `patchkit init` to start a deployment, or pass --repo DIR",
    )


class Escape(Exception):
    """A repository path that resolves outside the repository, or through a symlink."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Path components that make a path not a plain one below the repository.
_NOT_PLAIN = frozenset(("", ".", ".."))


class Dirs:
    """The directories below ``root``, each opened relative to its parent's descriptor without following a link.

    ``at`` is the one way a path under the repository is resolved for an
    operation: the directory part is opened component by component
    (``openat`` with ``O_NOFOLLOW | O_DIRECTORY``), and the operation then
    names only the last component relative to that descriptor
    (``dir_fd=``, never following a final link). A directory swapped for a
    symlink at any moment is refused (``ENOTDIR`` on Linux, ``ELOOP``
    elsewhere) instead of followed, so no
    operation reaches outside the repository. Descriptors are kept for the
    object's life (``close`` or the ``with`` block), so thousands of files
    in a few directories cost one open per directory; safe to share between
    threads.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = str(root)
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> Dirs:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        """Close every directory descriptor; a later ``at`` opens them again."""
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def at(self, rel: str, *, create: bool = False) -> tuple[int, str]:
        """(descriptor of the directory holding ``rel``, ``rel``'s last name); ``create``: make missing directories.

        Raises ``BadInput`` for a path that is not plain (absolute, empty,
        ``.`` or ``..`` components) and ``OSError`` from the opens: ``ENOTDIR``
        (or ``ELOOP``) for a symlink or a file on the way, ``ENOENT``.
        """
        parts = rel.split("/")
        if rel.startswith("/") or not _NOT_PLAIN.isdisjoint(parts):
            raise BadInput(f"{rel}: not a plain path inside the repository; refusing to use it")
        return self.directory(rel.rpartition("/")[0], create=create), parts[-1]

    def directory(self, rel_dir: str, *, create: bool = False) -> int:
        """The descriptor of the directory ``rel_dir`` ("" for the root), opened as ``at`` opens it."""
        found = self._fds.get(rel_dir)
        if found is None:
            with self._lock:
                found = self._open(rel_dir, create)
        return found

    def _open(self, rel_dir: str, create: bool) -> int:
        """The descriptor of the directory ``rel_dir`` (its parents first), opened now unless it was before."""
        found = self._fds.get(rel_dir)
        if found is not None:
            return found
        if not rel_dir:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        else:
            parent, _, name = rel_dir.rpartition("/")
            parent_fd = self._open(parent, create)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=parent_fd)
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        self._fds[rel_dir] = fd
        return fd

    def open(self, rel: str, flags: int, mode: int = 0o644, *, create: bool = False) -> int:
        """``os.open`` of ``rel`` through ``at`` (``create``: its missing directories too); a final link is refused."""
        directory, name = self.at(rel, create=create)
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory)

    def open_regular(self, path: Path | str) -> int:
        """A descriptor to read the regular file at ``path`` (absolute, below ``root``); an opener for ``hashing``.

        ``O_NONBLOCK``: a FIFO swapped in is not waited on, it is refused
        as not a regular file (``EINVAL``), as a device or socket is.
        """
        text = str(path)
        if not text.startswith(self.root + "/"):
            raise OSError(errno.EXDEV, "not below the repository", text)
        fd = self.open(text[len(self.root) + 1 :], os.O_RDONLY | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", text)
        return fd


@dataclass(frozen=True)
class Repo:
    """A deployment repository rooted at ``root`` (an absolute, resolved path)."""

    root: Path
    # The repository's directories, opened without following links (see ``Dirs``), so checking
    # and reading thousands of files costs one open of each directory and one call per file.
    _dirs: Dirs = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_dirs", Dirs(self.root))

    @property
    def dirs(self) -> Dirs:
        """Where every read of a repository file resolves its path: ``dirs.open_regular`` is the hashers' opener."""
        return self._dirs

    @property
    def lockfile_path(self) -> Path:
        return self.root / LOCKFILE_NAME

    def path(self, rel: RepoPath | str) -> Path:
        return self.root / str(rel)

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def read_lockfile(self) -> tuple[Lockfile, bytes]:
        """Load the lockfile; its exact bytes come along for hashing and no-op detection."""
        try:
            data = self.lockfile_path.read_bytes()
        except FileNotFoundError as e:
            raise BadInput(f"{self.lockfile_path}: not found", "run `patchkit init` to create a deployment") from e
        except OSError as e:
            raise BadInput(f"{self.lockfile_path}: cannot read: {e.strerror}") from e
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = data[: e.start].count(b"\n") + 1
            raise BadInput(
                f"{LOCKFILE_NAME}:{line}: not UTF-8 (byte {data[e.start]:#04x})",
                "TOML files must be UTF-8",
            ) from e
        from patchkit.lockfile.reader import loads

        return loads(text, LOCKFILE_NAME), data

    def check_inside(self, rel: RepoPath | str) -> Path:
        """Resolve ``rel`` and make sure no component is a symlink and it stays inside.

        Raises ``Escape`` with a reason; the caller reports it with its own context.
        """
        return self.check_inside_stat(rel)[0]

    def check_inside_stat(self, rel: RepoPath | str) -> tuple[Path, os.stat_result]:
        """``check_inside``, also returning the file's lstat result."""
        current, st = self.inside_stat(rel)
        return Path(current), st

    def inside_stat(self, rel: RepoPath | str) -> tuple[str, os.stat_result]:
        """``check_inside_stat`` with the path as a plain string.

        Resolved through ``dirs`` (each directory opened without following a
        link, the file itself ``lstat``-ed relative to its directory), so a
        directory swapped for a symlink is refused, never followed. For loops
        over thousands of files: building the ``Path`` costs as much as the
        stat. Read what it proved with ``read`` or ``dirs.open_regular``, which
        resolve the path the same way again.
        """
        if not isinstance(rel, RepoPath):
            try:
                rel = RepoPath(rel)
            except ValueError as e:
                raise Escape(str(e)) from e
        current = f"{self.root}/{rel.path}"
        try:
            directory, name = self._dirs.at(rel.path)
            st = os.stat(name, dir_fd=directory, follow_symlinks=False)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise  # FileNotFoundError among them: the caller reports "missing"
            if self._name_the_link(rel.path):  # a file where a directory should be, as a missing directory
                raise FileNotFoundError(errno.ENOENT, "not a directory on the way", current) from e
            raise Escape("is below a directory that was replaced (by a symlink?) while it was read") from e
        self._refuse_link(current, st)
        if not stat.S_ISREG(st.st_mode):
            raise Escape("is not a regular file")
        return current, st

    def _name_the_link(self, rel: str) -> bool:
        """Raise ``Escape`` naming the first symlink among ``rel``'s directories; True when one is a file instead."""
        parts = rel.split("/")[:-1]
        for i in range(len(parts)):
            current = f"{self.root}/{'/'.join(parts[: i + 1])}"
            try:
                st = os.lstat(current)
            except OSError:
                return False
            self._refuse_link(current, st)
            if not stat.S_ISDIR(st.st_mode):
                return True
        return False

    def read(self, rel: RepoPath | str) -> bytes:
        """The bytes of the regular file ``rel``, read through ``dirs``: ``check_inside(rel).read_bytes()``, safely.

        ``check_inside``'s errors (``Escape``, ``FileNotFoundError``) and the
        ``OSError`` of the read, as ``read_bytes`` raises them; a file that
        changed while it was read is ``BadInput`` naming it.
        """
        path, _ = self.inside_stat(rel)
        try:
            return read_whole(path, self._dirs.open_regular)
        except Changed as e:
            raise BadInput(f"{rel}: {e.strerror}") from e

    def read_pinned(self, rel: RepoPath | str, what: str) -> bytes:
        """The bytes of ``rel`` for a command that pins or ships them; ``BadInput`` naming the file and ``what``.

        ``read``, with its refusals made one line each: a link (to
        ``/etc/passwd``, say) or a path out of the repository, a missing file,
        an unreadable one, a file that changed while it was read.
        """
        try:
            return self.read(rel)
        except Escape as e:
            raise BadInput(f"{rel}: {e} ({what})", "commit the file itself in place of the link") from e
        except FileNotFoundError as e:
            raise BadInput(f"{rel}: missing ({what})", f"restore it: git checkout -- {rel}") from e
        except OSError as e:
            raise BadInput(f"{rel}: cannot read ({e.strerror or e}) ({what})") from e

    def _refuse_link(self, current: str, st: os.stat_result) -> None:
        """Raise ``Escape`` when ``current`` is a symlink, saying whether it points outside the repository."""
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(current)
            except OSError:  # replaced again since the lstat
                raise Escape("is a symlink (replaced while it was read)") from None
            try:
                outside = not Path(current).resolve().is_relative_to(self.root)
            except OSError:  # replaced again while it was resolved
                raise Escape(f"is a symlink (to {target}, replaced while it was read)") from None
            if outside:
                raise Escape(f"is a symlink to {target}, outside the repository")
            raise Escape(f"is a symlink (to {target}); store the file itself, not a link")

    def write(self, rel: RepoPath | str, data: bytes) -> bool:
        """Write a repository file atomically; False (and no write) when it already holds ``data``."""
        path = self.path(rel)
        with contextlib.suppress(OSError):
            if path.read_bytes() == data:
                return False
        atomic_write(path, data)
        return True


def contained(root: Path, rel: str) -> Path:
    """The absolute path of repository path ``rel``, proven safe to write, create or delete.

    Every directory on the way must be a real directory (not a symlink, so
    nothing resolves outside ``root``) and the file itself, when it exists,
    must not be a symlink: a write or an unlink through a link would reach
    whatever it points at. Missing directories are fine (they are created
    below a checked parent). Raises ``BadInput`` naming the component. The
    check gives the clear message; the write itself resolves the path
    through ``Dirs`` again, so a link swapped in afterwards is refused too.
    """
    with Dirs(root) as dirs:
        _prove(dirs, rel)
    return root / rel


def contained_all(root: Path, rels: Iterable[str]) -> None:
    """``contained`` for many paths at once: each directory on the way is opened once, not once per file."""
    with Dirs(root) as dirs:
        for rel in rels:
            _prove(dirs, rel)


def _prove(dirs: Dirs, rel: str) -> os.stat_result | None:
    """Raise ``BadInput`` unless ``rel`` is safe to write below ``dirs.root`` (resolved through ``dirs``).

    Returns what it found there, the ``lstat`` of a regular file, or None when nothing is there.
    """
    parts = rel.split("/")
    if rel.startswith("/") or not _NOT_PLAIN.isdisjoint(parts):
        raise BadInput(f"{rel}: not a plain path inside the repository; refusing to write it")
    try:
        directory, name = dirs.at(rel)
        st = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP):
            _name_the_component(dirs.root, rel)
        raise BadInput(f"{rel}: cannot inspect ({e.strerror})") from e
    _refuse_kind(rel, rel, st, directory=False, top=dirs.root)
    return st


def _name_the_component(top: str, rel: str) -> None:
    """Raise ``BadInput`` naming the directory of ``rel`` that is a symlink or a file (as it stands now)."""
    parts = rel.split("/")[:-1]
    for i in range(len(parts)):
        shown = "/".join(parts[: i + 1])
        try:
            st = os.lstat(f"{top}/{shown}")
        except OSError:
            break
        _refuse_kind(rel, shown, st, directory=True, top=top)
    raise BadInput(
        f"{rel}: a directory on the way was replaced while it was checked; refusing to write or delete it",
        "make sure nothing else changes the repository, then retry",
    )


def _refuse_kind(rel: str, shown: str, st: os.stat_result, *, directory: bool, top: str) -> None:
    """Raise ``BadInput`` when ``shown`` (on the way to ``rel``) is a symlink, or not the kind of file it must be."""
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(f"{top}/{shown}")
        except OSError:
            target = "somewhere"  # replaced again since
        raise BadInput(
            f"{shown} is a symlink (to {target}); refusing to write or delete {rel} through it",
            "replace the link with a real directory or file inside the repository",
        )
    if directory and not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{shown} is not a directory; cannot write {rel}")
    if not directory and not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, device or socket)"
        raise BadInput(f"{rel} is {what}; refusing to write or delete it", "replace it with a regular file")


def output_target(path: Path, repo: Repo | None = None, lock: Lockfile | None = None, *, outside: bool = False) -> Path:
    """Where a command may write an output file the user named (``bundle -o``, ``--summary``).

    Only over a regular file, or at a new name in a directory that exists
    (nothing is created on the way); never over a device, a link or a
    directory, never over a file the deployment is made of (the lockfile,
    SHA256SUMS, a pinned file, a compose file) or into patchkit's managed
    directories, and never over a hard link of a file of the repository.
    ``outside`` (the bundle): nowhere inside the repository at all, where
    any file may be one the deployment reads (``guard.json``, a Caddyfile).
    Raises ``BadInput`` saying which.
    """
    absolute = Path(os.path.abspath(path))
    try:
        st = os.lstat(absolute)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise BadInput(f"{path}: cannot inspect ({e.strerror})") from e
    hint = "name a new file in an existing directory, or pass - to write to standard output"
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = (
            "a symlink"
            if stat.S_ISLNK(st.st_mode)
            else "a directory"
            if stat.S_ISDIR(st.st_mode)
            else ("not a regular file (a device, FIFO or socket)")
        )
        raise BadInput(f"{path}: is {what}; refusing to write over it", hint)
    parent = absolute.parent
    if st is None and not parent.is_dir():
        raise BadInput(f"{path}: directory {parent} does not exist; nothing is created on the way", hint)
    if repo is not None:
        where = parent.resolve() / absolute.name
        _refuse_deployment_file(path, where, repo, lock, outside=outside)
        if st is not None and st.st_nlink > 1 and (twin := _hard_link_in(repo.root, st, str(where))) is not None:
            raise BadInput(
                f"{path}: is a hard link of {twin}, a file of the deployment; refusing to write over it",
                "name a new file outside the repository, or pass - to write to standard output",
            )
    return absolute


def _refuse_deployment_file(path: Path, where: Path, repo: Repo, lock: Lockfile | None, *, outside: bool) -> None:
    """Raise ``BadInput`` when ``where`` (``path`` resolved) is a file of the deployment, or inside it at all."""
    if not where.is_relative_to(repo.root):
        return
    rel = where.relative_to(repo.root).as_posix()
    protected = {LOCKFILE_NAME, "SHA256SUMS", "deploy.toml"}
    if lock is not None:
        protected |= {str(f) for _, f, _ in lock.files()}
    top = rel.split("/", 1)[0]
    is_compose = "/" not in rel and rel.startswith("compose") and rel.endswith((".yaml", ".yml"))
    hint = "name a new file in an existing directory, or pass - to write to standard output"
    if rel in protected or is_compose or top in (*MANAGED_DIRS, WORK_DIR, ".git"):
        raise BadInput(f"{path}: is part of the deployment ({rel}); refusing to write over it", hint)
    if outside:
        raise BadInput(
            f"{path}: is inside the deployment repository ({rel}); refusing to write there",
            f"name a file outside {repo.root}, or pass - to write to standard output",
        )


def _hard_link_in(root: Path, st: os.stat_result, itself: str) -> str | None:
    """The repository path of another name than ``itself`` of the file ``st`` (a hard link); no symlink followed."""
    pending = [(str(root), "")]
    while pending:
        directory, rel = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except OSError:
            continue
        for e in entries:
            name = f"{rel}/{e.name}" if rel else e.name
            if e.is_dir(follow_symlinks=False):
                pending.append((e.path, name))
            elif e.inode() == st.st_ino and e.path != itself and e.stat(follow_symlinks=False).st_dev == st.st_dev:
                return name
    return None


LOCK_FILE = f"{WORK_DIR}/lock"


class RepositoryBusy(PatchkitError):
    """Another patchkit process holds the repository's write lock (``--no-wait``)."""

    exit_code = 1


class RepoLock:
    """The exclusive write lock of one repository: ``flock`` on ``.patchkit/lock``.

    The kernel drops the lock when the last descriptor of its open file is
    closed, which happens when its holder exits, however it ends (even
    ``kill -9``). A forked child would share that open file, and a child
    outliving its parent would keep the repository locked: every fork closes
    the descriptor in the child (``_close_locks_in_child``), so only the
    process that took the lock holds it, and a crash never leaves a
    repository locked. The file records the holder's pid and command, for
    the message another writer prints.
    """

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        _HELD.add(fd)

    def release(self) -> None:
        """Release the lock (closing the only descriptor releases the flock); in a forked child, nothing to do."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if fd in _HELD:  # not closed already by the fork that made this process
                _HELD.discard(fd)
                os.close(fd)


# The descriptors of the repository locks this process holds.
_HELD: set[int] = set()


def _close_locks_in_child() -> None:
    """In a forked child: close the lock descriptors it inherited (closing, not unlocking: the parent keeps it)."""
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_locks_in_child)


def lock_repository(root: Path, *, wait: bool = True, on_wait: Callable[[str], None] | None = None) -> RepoLock:
    """Take the repository's exclusive write lock; every command that writes holds it to its end.

    A second writer waits (``on_wait`` is told who holds it) or, with
    ``wait=False``, fails at once with ``RepositoryBusy``.
    """
    contained(root, LOCK_FILE)
    try:
        with Dirs(root) as dirs:  # .patchkit swapped for a link meanwhile: refused, not followed
            fd = dirs.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644, create=True)
    except OSError as e:
        raise _write_failed(root / LOCK_FILE, e) from e
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            if not wait:
                raise RepositoryBusy(
                    f"{LOCK_FILE}: another patchkit is writing this repository ({holder}); nothing was changed",
                    "retry when it has finished, or drop --no-wait to wait for it",
                ) from None
            if on_wait is not None:
                on_wait(f"waiting for another patchkit writing this repository ({holder}) to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {' '.join(sys.argv[1:])[:200]}\n".encode("utf-8", "replace"), 0)
    except BaseException:
        os.close(fd)
        raise
    return RepoLock(fd)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    pid, _, command = text.partition(" ")
    if not pid.isdigit():
        return "holder unknown"
    return f"pid {pid}: patchkit {command}".rstrip()


def atomic_write(
    path: Path, data: bytes, *, durable: bool = True, mode: int | None = None, overwrite: bool = True
) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    The one atomic write: a temporary file in the same directory (created
    when missing), fsync, rename over (``move_into``), fsync the directory.
    ``durable=False`` skips the fsyncs, for caches that can be rebuilt: the
    rename still keeps readers from ever seeing half a file. ``mode``: the
    new file's permission bits (default: the old file's, else what the umask
    gives). ``overwrite=False``: the file is linked into place instead, and
    ``FileExistsError`` says something is already there (a key never
    replaces another).
    """
    tmp = _stage(path, data, sync=durable, mode=mode)
    _put(tmp, path, durable=durable, overwrite=overwrite)


def move_into(tmp: Path, path: Path, *, durable: bool = True, overwrite: bool = True) -> None:
    """Put the finished file ``tmp`` at ``path`` in one step; ``tmp`` is gone afterwards, whatever happened.

    For a file made whole by something else (a wheel pip downloaded, a
    pulled bundle verified in its staging directory, a configuration git's
    parser wrote): ``tmp`` on the same file system as ``path``, fsynced
    first when ``durable``; otherwise as ``atomic_write``, which ends here.
    """
    if durable:
        try:
            fd = os.open(tmp, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise _write_failed(path, e) from e
    _put(tmp, path, durable=durable, overwrite=overwrite)


def _put(tmp: Path, path: Path, *, durable: bool, overwrite: bool) -> None:
    """Rename (or, ``overwrite=False``, link) the staged ``tmp`` to ``path``; fsync the directory when ``durable``."""
    try:
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            tmp.unlink()
    except FileExistsError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise FileExistsError(e.errno, e.strerror, str(path)) from None
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _write_failed(path, e) from e
    if durable:
        _fsync_dir(path.parent)


def _stage(path: Path, data: bytes, sync: bool = True, mode: int | None = None) -> Path:
    """Stage ``data`` beside ``path`` (its directory created when missing); the temporary file's path."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _write_failed(path, e) from e
    with Dirs(path.parent) as dirs:
        return _stage_in(dirs, "", path.name, data, sync, mode)


def _write_failed(path: Path, e: OSError) -> WriteFailed:
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return WriteFailed(
            f"{path}: cannot write ({e.strerror}); nothing was changed",
            "make the repository writable (or run where you have write access), then retry",
        )
    return WriteFailed(f"{path}: cannot write ({e.strerror}); nothing was changed")


def write_all(
    root: Path,
    files: dict[str, bytes],
    deletes: Iterable[str] = (),
    *,
    tree: bool = False,
    executable: Iterable[str] = (),
) -> list[str]:
    """Write (and delete) several repository files as one transaction.

    Every path is first proven to stay inside the repository (``contained``:
    no symlinked directory on the way, no link at the end) and to be one
    patchkit may write (``_unwritable``: never into ``.git``), and files that
    already hold their new bytes are left alone. When more than one file
    changes, a journal makes the change one transaction: the journal first
    names the files about to be staged, then the new contents of the files
    written in place go into one data file beside it, then the journal lists
    every in-place write, rename and deletion, and only then is the
    repository touched. A crash while staging leaves the first journal, and
    ``recover`` undoes it (removes what was staged); a crash after the second
    leaves it, and ``recover`` finishes the transaction. The journal lives
    where a clone cannot put one (``journal_place``) and is bound to this
    directory and this run.

    Files in the managed directories (``patches/``, ``upstream/``,
    ``tuning/``) that exist are overwritten in place: replacing thousands of
    files through temporary files and renames costs several times more on
    common file systems. The lockfile, SHA256SUMS and every new file are still
    staged and renamed in, so the files every reader opens first are never
    seen half-written. ``tree``: ``root`` is a tree patchkit applies to
    (``apply --to``), not a deployment: any file inside it but ``.git`` may be
    written, always staged. ``executable``: paths whose new file gets the
    execute bits. Returns the paths that changed, in order.
    """
    deletes = list(deletes)
    with Dirs(root) as dirs:
        # What each path holds now, found while proving it contained: read once, not again for ``_how``.
        found = {rel: _prove(dirs, rel) for rel in (*files, *deletes)}
        for rel in found:
            why = _unwritable(rel, tree=tree)
            if why is not None:
                raise BadInput(f"{rel}: {why}; refusing to write it", "patchkit writes only its own files")
        changed = [
            (rel, data, how)
            for rel, data in files.items()
            if (how := _how(dirs, rel, data, tree, found[rel])) is not None
        ]
        removals = [rel for rel in deletes if found[rel] is not None]
    if not changed and not removals:
        return []
    if len(changed) + len(removals) <= 1:
        # One file: a rename is atomic on its own, no journal needed.
        staged = _stage_all(root, [(rel, data) for rel, data, _ in changed])
        _make_executable(staged, executable)
        _carry_out(root, [(str(tmp.relative_to(root)), rel) for rel, tmp in staged], [], removals)
        return [rel for rel, _, _ in changed] + removals
    _journaled(root, changed, removals, tree=tree, executable=executable)
    return [rel for rel, _, _ in changed] + removals


def _journaled(
    root: Path,
    changed: list[tuple[str, bytes, str]],
    removals: list[str],
    *,
    tree: bool,
    executable: Iterable[str],
) -> None:
    """The transaction of ``write_all`` under its journal: staging announced, staged, committed, carried out."""
    place = journal_place(root, tree=tree)
    place.prepare()
    bound = _binding(root, tree)
    to_stage = [(rel, data) for rel, data, how in changed if how == "stage"]
    in_place = [(rel, data) for rel, data, how in changed if how == "in-place"]
    staged: list[tuple[str, Path]] = []
    try:
        _write_record(place, {**bound, "state": "staging", "stage": [rel for rel, _ in to_stage]})
        staged = _stage_all(root, to_stage)
        _make_executable(staged, executable)
        writes = _write_journal_data(place.data, in_place)
        replace = [(str(tmp.relative_to(root)), rel) for rel, tmp in staged]
        record = {**bound, "state": "commit", "replace": replace, "write": writes, "delete": removals}
        _write_record(place, record)
    except BaseException as e:
        for _, tmp in staged:
            with contextlib.suppress(OSError):
                tmp.unlink()
        for leftover in (place.data, place.journal):
            with contextlib.suppress(OSError):
                leftover.unlink()
        if isinstance(e, OSError):
            raise _write_failed(place.data, e) from e
        raise
    _carry_out(root, replace, in_place, removals)
    place.clear()


def _write_record(place: JournalPlace, record: Mapping[str, object]) -> None:
    atomic_write(place.journal, json.dumps(record, separators=(",", ":")).encode())


def _make_executable(staged: list[tuple[str, Path]], executable: Iterable[str]) -> None:
    """Give the staged files of ``executable`` the execute bits (a patch's new mode 100755), before they go in."""
    wanted = set(executable)
    for rel, tmp in staged:
        if rel in wanted:
            os.chmod(tmp, stat.S_IMODE(os.lstat(tmp).st_mode) | 0o111)  # noqa: S103


def _unwritable(rel: str, *, tree: bool) -> str | None:
    """Why patchkit never writes (nor, recovering, renames over or deletes) ``rel``; None when it may.

    Nothing into a ``.git`` directory, in any case (``.GIT`` is the same
    directory on a case-insensitive file system). In a deployment, only the
    files patchkit generates: the lockfile, SHA256SUMS, ``.gitignore``, files
    under the managed directories and its work area, the records patchkit
    keeps in a ``.patchkit`` directory of a tree it builds (``build/series/
    NAME/.patchkit/series/NAME.json``), and visible files (the compose, guard
    and Kubernetes files, a Containerfile); never another hidden file
    (``.github/``, ``.envrc``, ``.gitattributes``).
    """
    parts = rel.split("/")
    if any(p.rstrip(". ").casefold() == ".git" for p in parts):
        return "is inside .git, which patchkit never writes"
    if tree or parts[0] in MANAGED_DIRS or rel in (LOCKFILE_NAME, "SHA256SUMS", ".gitignore"):
        return None
    if parts[0] == WORK_DIR:
        return "is patchkit's journal" if parts[-1].startswith("journal") and len(parts) == 2 else None
    if any(p.startswith(".") and p != WORK_DIR for p in parts):
        return "is a hidden file, not one patchkit generates"
    return None


def _how(dirs: Dirs, rel: str, data: bytes, tree: bool, st: os.stat_result | None) -> str | None:
    """How ``rel`` gets its new bytes: None when it holds them already, else "in-place" or "stage".

    In place only for an existing regular file of a managed directory with a
    single link (writing through a hard link would change the other name too)
    that this process may write; staged (temporary file, rename) otherwise,
    and always in a ``tree``. ``st`` is the file's ``lstat`` (None: missing). The file is opened only
    when its size says it may already hold ``data``.
    """
    if st is None or not stat.S_ISREG(st.st_mode):
        return "stage"
    if st.st_size == len(data) and _holds(dirs, rel, data):
        return None
    managed = not tree and rel.split("/", 1)[0] in MANAGED_DIRS
    if not managed or st.st_nlink != 1:
        return "stage"
    directory, name = dirs.at(rel)
    return "in-place" if os.access(name, os.W_OK, dir_fd=directory) else "stage"


def _holds(dirs: Dirs, rel: str, data: bytes) -> bool:
    """Whether the regular file ``rel`` (resolved through ``dirs``, never a link) holds exactly ``data``."""
    try:
        fd = dirs.open(rel, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(data) + 1) == data
    finally:
        os.close(fd)


def _stage_all(root: Path, items: list[tuple[str, bytes]]) -> list[tuple[str, Path]]:
    """Stage every file beside its target, made durable; on a failure remove what was staged and raise."""

    dirs = Dirs(root)

    def stage(item: tuple[str, bytes]) -> Path | WriteFailed:
        rel, data = item
        parent, _, name = rel.rpartition("/")
        try:
            return _stage_in(dirs, parent, name, data, sync=False)
        except WriteFailed as e:
            return e

    if len(items) > 32:
        # Creating a file costs about a millisecond on some file systems; the
        # system calls overlap well on a few threads (they release the GIL).
        from concurrent.futures import ThreadPoolExecutor  # only for a large write: sums --check starts without it

        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="stage") as pool:
            results = list(pool.map(stage, items))
    else:
        results = [stage(item) for item in items]
    staged = [(rel, tmp) for (rel, _), tmp in zip(items, results, strict=True) if isinstance(tmp, Path)]
    failed = [tmp for tmp in results if isinstance(tmp, WriteFailed)]
    with dirs:
        if failed:
            for _, tmp in staged:
                with contextlib.suppress(OSError):
                    directory, name = dirs.at(tmp.relative_to(root).as_posix())
                    os.unlink(name, dir_fd=directory)
            raise failed[0]
        _sync(dirs, [tmp.relative_to(root).as_posix() for _, tmp in staged])
    return staged


def _write_journal_data(data_file: Path, in_place: list[tuple[str, bytes]]) -> list[list[str | int]]:
    """Write the new contents of the in-place files into one durable data file; the journal's entries for them."""
    if not in_place:
        return []
    writes: list[list[str | int]] = []  # each [path, offset, length, sha256], as the journal lists it
    offset = 0
    fd = os.open(data_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        for rel, data in in_place:
            f.write(data)
            writes.append([rel, offset, len(data), sha256_bytes(data)])
            offset += len(data)
        f.flush()
        os.fsync(f.fileno())
    return writes


def _carry_out(
    root: Path,
    replace: list[tuple[str, str]],
    write: list[tuple[str, bytes]],
    delete: list[str],
) -> None:
    """Do what a journal lists: the in-place writes, the renames, the deletions; then make them durable.

    Every path is resolved through ``Dirs``: a directory swapped for a
    symlink meanwhile stops the write (``ENOTDIR``) instead of leading outside.
    """
    with Dirs(root) as dirs:
        try:
            for rel, data in write:
                _overwrite(dirs, rel, data)
            for tmp, rel in replace:
                source, tmp_name = dirs.at(tmp)
                target, name = dirs.at(rel)
                with contextlib.suppress(FileNotFoundError):  # already renamed before a crash
                    os.replace(tmp_name, name, src_dir_fd=source, dst_dir_fd=target)
            for rel in delete:
                directory, name = dirs.at(rel)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=directory)
            _sync(dirs, [rel for rel, _ in write])
            for rel_dir in {rel.rpartition("/")[0] for _, rel in replace}:
                with contextlib.suppress(OSError):
                    os.fsync(dirs.directory(rel_dir))
        except OSError as e:
            raise WriteFailed(
                f"{root / (e.filename or '')}: cannot write ({e.strerror}); the write is journaled and not finished",
                "fix the cause (a symlink where a directory was?), then run patchkit status to finish it",
            ) from e


def _overwrite(dirs: Dirs, rel: str, data: bytes) -> None:
    """Write ``data`` over the file ``rel`` (creating it, and its directory, when missing).

    It always ends with a truncation to ``data``'s length, even when the file
    was shorter when the transaction began: what it holds at the write is
    not known then, and the file must hold ``data`` and nothing after it.
    """
    try:
        # No O_TRUNC: truncating to zero first makes ext4 flush the file at close (auto_da_alloc).
        fd = dirs.open(rel, os.O_WRONLY | os.O_CREAT, 0o644, create=True)
    except OSError as e:
        e.filename = rel
        raise
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


@dataclass(frozen=True)
class JournalPlace:
    """Where the journal of the writes under one directory lives, and where an old one may wait.

    In a git work tree the journal is in the git directory (``.git/patchkit/``):
    git never checks a file out there, so a clone cannot plant a journal for
    recovery to carry out. Outside one it is ``.patchkit/journal.json``, and
    it is carried out only when bound to this very directory (its device and
    inode). ``foreign``: a journal in the work tree of a git repository, which
    patchkit never writes and never carries out.
    """

    journal: Path
    data: Path
    foreign: Path | None

    def prepare(self) -> None:
        """Create the journal's directory; refused when it is a link or not a directory."""
        directory = self.journal.parent
        try:
            directory.mkdir(exist_ok=True)
            st = os.lstat(directory)
        except OSError as e:
            raise _write_failed(self.journal, e) from e
        if not stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{directory}: not a directory; patchkit keeps its journal there")

    def clear(self) -> None:
        """Remove the journal (first: it is what makes the transaction pending), then its data file.

        In a git directory, its ``patchkit/`` directory goes too when empty:
        between transactions the git directory is as git left it.
        """
        for path in (self.journal, self.data):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if self.foreign is not None:
            with contextlib.suppress(OSError):
                self.journal.parent.rmdir()


def journal_place(root: Path, *, tree: bool = False) -> JournalPlace:
    """Where the journal of writes under ``root`` lives (see ``JournalPlace``).

    The git directory is found as git finds it, without running git (whose
    configuration is the repository's): ``.git`` in ``root`` or, for a
    deployment, in a directory above it; a ``.git`` file's ``gitdir:`` line
    (a linked worktree, a submodule) or a ``.git`` symlink when it names a
    directory with a ``HEAD``. ``tree`` (an ``apply --to`` target): ``root`` itself only.
    """
    found = _git_dir(root, walk=not tree)
    if found is None:
        return JournalPlace(root / JOURNAL, root / JOURNAL_DATA, None)
    git_dir, top = found
    key = root.relative_to(top).as_posix() if root != top else ""
    name = (
        "journal" if not key else f"journal-{hashlib.sha256(key.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}"
    )
    directory = git_dir / "patchkit"
    return JournalPlace(directory / f"{name}.json", directory / f"{name}.data", root / JOURNAL)


def _git_dir(root: Path, *, walk: bool) -> tuple[Path, Path] | None:
    """The git directory of the work tree ``root`` is in, and that work tree's top; None outside one."""
    for top in (root, *root.parents) if walk else (root,):
        dot = top / ".git"
        try:
            st = os.lstat(dot)
        except FileNotFoundError:
            continue
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return dot, top
        git_dir = _gitfile(dot) if stat.S_ISREG(st.st_mode) else _linked(dot) if stat.S_ISLNK(st.st_mode) else None
        return (git_dir, top) if git_dir is not None else None
    return None


def _linked(dot: Path) -> Path | None:
    """The git directory a ``.git`` symlink points at (a user's own setup: git refuses to check one out)."""
    git_dir = dot.resolve()
    return git_dir if git_dir.is_dir() and (git_dir / "HEAD").is_file() else None


def _gitfile(dot: Path) -> Path | None:
    """The directory a ``.git`` file names (``gitdir: PATH``), when it is a git directory."""
    try:
        fd = os.open(dot, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            text = os.read(fd, 4096).decode("utf-8", "surrogateescape")
        finally:
            os.close(fd)
    except OSError:
        return None
    line = text.split("\n", 1)[0].rstrip("\r")
    if not line.startswith("gitdir: ") or "\0" in line:
        return None
    git_dir = (dot.parent / line[len("gitdir: ") :]).resolve()
    return git_dir if (git_dir / "HEAD").is_file() else None


def pending_journal(root: Path, *, tree: bool = False) -> bool:
    """Whether an interrupted transaction waits, or a journal patchkit refuses to carry out lies in the work tree."""
    place = journal_place(root, tree=tree)
    return os.path.lexists(place.journal) or (place.foreign is not None and os.path.lexists(place.foreign))


def foreign_journal(root: Path) -> bool:
    """Whether a journal lies in the work tree of a git repository, where patchkit never writes one."""
    place = journal_place(root)
    return place.foreign is not None and os.path.lexists(place.foreign)


class JournalRefused(Refused):
    """A journal patchkit will not carry out: not its own, bound elsewhere, or naming a file it never writes."""


def recover(root: Path, *, tree: bool = False) -> str | None:
    """Finish or undo a transaction a crash interrupted: "finished", "undone", or None when there was none.

    A journal still announcing its staging is undone: the repository was not
    touched yet, and the files staged are removed. A committed one is
    finished. Without a journal, a crash came before anything was staged:
    the staged temporary files and the journal's data file left are
    removed. A journal that is not patchkit's own (in the work tree of a git
    repository, bound to another directory, naming a file patchkit never
    writes, or unreadable) is refused with ``JournalRefused`` (exit 1) and
    nothing is changed.
    """
    place = journal_place(root, tree=tree)
    if place.foreign is not None and os.path.lexists(place.foreign):
        raise JournalRefused(
            f"{JOURNAL}: a journal in the work tree, where a clone can carry one; patchkit keeps its own in "
            f"{place.journal.parent} and never carries this one out; nothing was changed",
            f"check the repository (patchkit check, git status), then delete {JOURNAL}",
        )
    record = _read_journal(place)
    if record is None:
        _remove_stale(root, place)
        return None
    try:
        how = _recover_bound(root, place, record, tree=tree)
    except (KeyError, TypeError, ValueError, OSError, BadInput) as e:
        # Not a journal patchkit wrote for this directory: carrying it out could rename, write or delete anything.
        raise JournalRefused(
            f"{place.journal}: not a journal patchkit wrote here ({e}); nothing was changed",
            f"inspect it, then delete {place.journal} and check the repository (patchkit check)",
        ) from e
    place.clear()
    _remove_stale_temporaries(root)
    return how


def _read_journal(place: JournalPlace) -> dict[str, Any] | None:
    """The journal as an object (None when there is none): read without following a link, size-capped."""
    try:
        fd = os.open(place.journal, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise JournalRefused(f"{place.journal}: cannot read ({e.strerror}); nothing was changed") from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JournalRefused(f"{place.journal}: not a regular file; nothing was changed")
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(JOURNAL_MAX_BYTES + 1)
        record = json.loads(raw) if len(raw) <= JOURNAL_MAX_BYTES else None
    except (ValueError, RecursionError) as e:
        raise JournalRefused(
            f"{place.journal}: not a journal patchkit wrote ({str(e)[:120]}); nothing was changed",
            f"inspect it, then delete {place.journal} and check the repository (patchkit check)",
        ) from e
    if not isinstance(record, dict):
        raise JournalRefused(f"{place.journal}: not a journal patchkit wrote (not an object); nothing was changed")
    return record


def _binding(root: Path, tree: bool) -> dict[str, object]:
    """What binds a journal to this directory and this run: its device and inode, the writer and a nonce."""
    st = os.stat(root)
    return {
        "version": JOURNAL_VERSION,
        "kind": "tree" if tree else "repository",
        "root": str(root),
        "dev": st.st_dev,
        "ino": st.st_ino,
        "pid": os.getpid(),
        "run": os.urandom(16).hex(),
    }


def _recover_bound(root: Path, place: JournalPlace, record: dict[str, Any], *, tree: bool) -> str:
    """Check the journal is bound to ``root``, then undo its staging or finish its commit."""
    st = os.stat(root)
    if record.get("version") != JOURNAL_VERSION or record.get("kind") != ("tree" if tree else "repository"):
        raise ValueError("another version or kind of journal")
    if record.get("dev") != st.st_dev or record.get("ino") != st.st_ino:
        raise ValueError(f"written for another directory ({str(record.get('root'))[:200]!r})")
    pid, run = record.get("pid"), record.get("run")
    if type(pid) is not int or not isinstance(run, str) or len(run) != 32:
        raise ValueError("no writer recorded")
    if tree and pid != os.getpid() and _alive(pid):
        # A tree has no write lock: its writer may still be at work.
        raise Refused(f"{root}: another patchkit (pid {pid}) is writing this tree", "retry when it has finished")
    if record.get("state") == "staging":
        _undo_staging(root, pid, [_entry(rel, tree) for rel in record["stage"]])
        return "undone"
    if record.get("state") != "commit":
        raise ValueError("neither staging nor committed")
    replace, write, delete = _journal_entries(root, place, record, pid, tree=tree)
    _carry_out(root, replace, write, delete)
    return "finished"


def _undo_staging(root: Path, pid: int, rels: list[str]) -> None:
    """Remove the files the writer ``pid`` staged for ``rels`` (``.patchkit-tmp-<pid>-<name>.<random>.tmp``)."""
    by_dir: dict[str, set[str]] = {}
    for rel in rels:
        parent, _, name = rel.rpartition("/")
        by_dir.setdefault(parent, set()).add(f"{TMP_PREFIX}{pid}-{name}.")
    for parent, prefixes in by_dir.items():
        if parent:
            contained(root, f"{parent}/x")  # every directory on the way a real directory
        try:
            entries = list(os.scandir(root / parent if parent else root))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            ours = entry.name.endswith(".tmp") and any(entry.name.startswith(p) for p in prefixes)
            if ours and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)


def _path(rel: object) -> str:
    """A path a journal names, as a string; ``ValueError`` when it is not one."""
    if not isinstance(rel, str) or "\0" in rel:
        raise ValueError(f"{str(rel)[:200]!r} is not a path")
    return str(rel)


def _entry(rel: object, tree: bool) -> str:
    """A repository path of a journal, as a string patchkit may write; ``ValueError`` otherwise."""
    path = _path(rel)
    why = _unwritable(path, tree=tree)
    if why is not None:
        raise ValueError(f"{path} {why}")
    return path


def _remove_stale(root: Path, place: JournalPlace) -> None:
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        place.data.unlink()
    _remove_stale_temporaries(root)


def _journal_entries(
    root: Path, place: JournalPlace, record: dict[str, Any], pid: int, *, tree: bool
) -> tuple[list[tuple[str, str]], list[tuple[str, bytes]], list[str]]:
    """The renames, in-place writes and deletions of a journal, each proven to stay inside the repository.

    Each names a file patchkit may write (never into ``.git``); a rename's
    source is a file the journal's writer staged beside its target. An
    in-place write's bytes come from the journal's data file and must match
    the sha256 the journal recorded for them.
    """
    replace = [(_path(p[0]), _entry(p[1], tree)) for p in record["replace"] if len(p) == 2 or _bad(p)]
    delete = [_entry(d, tree) for d in record["delete"]]
    for tmp, rel in replace:
        parent, _, name = rel.rpartition("/")
        if tmp.rpartition("/")[0] != parent or not tmp.rpartition("/")[2].startswith(f"{TMP_PREFIX}{pid}-{name}."):
            raise ValueError(f"{tmp} is not a file this journal's writer staged for {rel}")
    contained_all(root, [*(t for pair in replace for t in pair), *delete])
    entries = record.get("write", [])
    write: list[tuple[str, bytes]] = []
    if entries:
        blob = _read_data(place.data)
        for rel, offset, length, digest in entries:
            rel = _entry(rel, tree)
            if tree or rel.split("/", 1)[0] not in MANAGED_DIRS:
                raise ValueError(f"{rel} is not in a directory patchkit writes in place")
            contained(root, rel)
            data = blob[int(offset) : int(offset) + int(length)]
            if len(data) != int(length) or hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"the new bytes of {rel} in {place.data.name} are not the ones recorded")
            write.append((rel, data))
    return replace, write, delete


def _read_data(path: Path) -> bytes:
    """The journal's data file, read without following a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{path.name} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _bad(pair: object) -> bool:
    raise ValueError(f"{pair!r} is not a rename")


def _remove_stale_temporaries(root: Path) -> None:
    """Remove staged files left by crashed processes; a live process's staging is never touched."""
    with Dirs(root) as dirs:
        for tmp in stale_temporaries(root):
            with contextlib.suppress(OSError, BadInput):
                directory, name = dirs.at(tmp.relative_to(root).as_posix())
                os.unlink(name, dir_fd=directory)


def stale_temporaries(root: Path) -> list[Path]:
    """patchkit's own staged files whose writer is gone (a crash while staging), in the repository.

    Looked for at the top and below the managed directories and ``.patchkit``,
    through directory descriptors (``Dirs``): a directory that is a symlink,
    or becomes one, is not listed.
    """
    found: set[Path] = set()
    with Dirs(root) as dirs:
        for top in ("", *MANAGED_DIRS, WORK_DIR):
            with contextlib.suppress(OSError):
                _stale_below(dirs.directory(top), top, root, found)
    return sorted(found)


def _stale_below(fd: int, rel: str, root: Path, found: set[Path]) -> None:
    """Add to ``found`` the stale staged files in the directory ``fd`` (``rel``), and below it unless it is the top."""
    try:
        with os.scandir(fd) as listing:
            entries = list(listing)
    except OSError:
        return
    for e in entries:
        name = f"{rel}/{e.name}" if rel else e.name
        if rel and e.is_dir(follow_symlinks=False):
            try:
                sub = os.open(e.name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                _stale_below(sub, name, root, found)
            finally:
                os.close(sub)
        elif e.name.startswith(TMP_PREFIX) and e.name.endswith(".tmp") and e.is_file(follow_symlinks=False):
            pid = staging_pid(e.name)
            if pid is None or pid == os.getpid() or not _alive(pid):
                found.add(root / name)


def staging_pid(name: str) -> int | None:
    """The process id a staged file's name records (``.patchkit-tmp-<pid>-<name>.<random>.tmp``)."""
    if not name.startswith(TMP_PREFIX):
        return None
    head = name[len(TMP_PREFIX) :].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stage_in(dirs: Dirs, parent: str, name: str, data: bytes, sync: bool, mode: int | None = None) -> Path:
    """Write ``data`` to a new temporary file beside ``parent/name`` (below ``dirs``), made when missing.

    The directory is resolved through ``dirs`` (no symlink followed, created
    when missing), so the temporary file lands where the rename will look
    for it, never outside. Its mode is ``mode`` when given, else the
    target's when it exists, else what the umask gives a new file. Returns
    the temporary file's path.
    """
    path = Path(dirs.root, parent, name)
    # The writer's pid in the name: recovery removes only the staging of dead processes.
    tmp_name = f"{TMP_PREFIX}{os.getpid()}-{name}.{os.urandom(4).hex()}.tmp"
    tmp_rel = f"{parent}/{tmp_name}" if parent else tmp_name
    try:
        directory, _ = dirs.at(tmp_rel, create=True)
        fd = dirs.open(tmp_rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise _write_failed(path, e) from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
            os.fchmod(f.fileno(), _new_mode(directory, name) if mode is None else mode)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name, dir_fd=directory)
        raise _write_failed(path, e) from e
    return path.parent / tmp_name


def _new_mode(directory: int, name: str) -> int:
    """The mode a file written over ``name`` gets: the old file's, else what the umask gives a new file."""
    umask = os.umask(0)
    os.umask(umask)
    mode = 0o666 & ~umask
    with contextlib.suppress(FileNotFoundError):
        mode = stat.S_IMODE(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    return mode


def _sync(dirs: Dirs, rels: list[str]) -> None:
    """Make written files durable: one fsync each, or one sync for many.

    A bump of a thousand patches stages thousands of files; a thousand fsyncs
    cost about a second where one sync(2) costs a fraction of it.
    """
    if len(rels) > 16:
        os.sync()
        return
    for rel in rels:
        fd = dirs.open(rel, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def gitignored(root: Path, rels: Iterable[str]) -> dict[str, str]:
    """Which of the repository paths ``rels`` ``.gitignore`` names, each with the rule (``.gitignore:3``).

    Read by git itself (``git check-ignore --no-index``), so nested ignore
    files, negations and directory rules mean what they mean to git. Outside a
    git work tree (or without git), the top-level ``.gitignore`` is read for
    its plain patterns. A path that does not exist is asked about too: that is
    the point, since an ignored mount source is one meant to be absent.
    """
    from patchkit.vcs import gitclient

    wanted = list(dict.fromkeys(rels))
    if not wanted:
        return {}
    # Also as a directory ("run/"): a "run/" rule names a directory compose creates.
    asked = b"".join(r.encode("utf-8", "surrogateescape") + s for r in wanted for s in (b"\0", b"/\0"))
    try:
        status, answer, _ = gitclient.run(
            root, ["-C", str(root), "check-ignore", "--no-index", "-v", "-z", "--stdin"], stdin=asked, timeout=60
        )
    except gitclient.GitMissing:
        status = -1
    if status in (0, 1):
        fields = answer.split(b"\0")
        out: dict[str, str] = {}
        for k in range(0, len(fields) - 3, 4):
            source, line, pattern, path = (f.decode("utf-8", "surrogateescape") for f in fields[k : k + 4])
            if source and not pattern.startswith("!"):
                out.setdefault(path.rstrip("/"), f"{source}:{line}")
        return out
    return _plain_gitignore(root, wanted)


def _plain_gitignore(root: Path, rels: list[str]) -> dict[str, str]:
    """The top-level ``.gitignore``'s plain patterns (no negation), for a repository that is not a git work tree."""
    import fnmatch

    try:
        lines = (root / ".gitignore").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for rel in rels:
        parts = rel.split("/")
        for n, raw in enumerate(lines, start=1):
            pattern = raw.strip()
            if not pattern or pattern.startswith(("#", "!")):
                continue
            pattern = pattern.rstrip("/")
            if "/" in pattern:  # anchored: the path or one of its parent directories
                pattern = pattern.lstrip("/")
                hit = any(fnmatch.fnmatchcase("/".join(parts[: k + 1]), pattern) for k in range(len(parts)))
            else:
                hit = any(fnmatch.fnmatchcase(part, pattern) for part in parts)
            if hit:
                out[rel] = f".gitignore:{n}"
    return out
