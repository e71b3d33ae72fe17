"""The production bundle: one reproducible ``.tar.gz`` holding everything a host needs to run.

Layout (flat: no top-level directory; unpack with ``tar -xzf B -C DIR``)::

    SHA256SUMS                 every other file of the bundle (GNU format)
    lockfile.toml              the lockfile, byte for byte
    compose.yaml               and every compose.*.yaml profile beside it
    entrypoint.sh              when present at the repository root
    Caddyfile.example          when present at the repository root
    <repo path>                every file the lockfile pins, at its repository
                               path: committed patches (patches/...), diffs
                               (upstream/...), tuning tables, artifacts
    build/<container target>   each diff-only patch, materialized, where
                               compose.yaml mounts it (./build/<target>)

Reproducible: the bytes depend only on the files' contents and the epoch.
Entries are sorted by name, every parent directory has its own entry,
owner 0:0 with empty names, modes 0644 (0755 for directories and for files
that start with ``#!`` or whose owner-execute bit is set), mtime the
epoch (``source_date_epoch``, else ``$SOURCE_DATE_EPOCH``, else 0), GNU tar
format (integer times, no pax records), gzip at level 9 with no file name and
mtime 0. Everything the lockfile pins is checked against its pin first.

``verify_bundle`` unpacks into a temporary directory, refusing absolute
names, ``..``, links, devices, duplicates and oversized members, then checks
SHA256SUMS (every file listed and matching, nothing unlisted) and every pin of
the bundled lockfile.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit import sums
from patchkit.errors import BadInput, LockfileError
from patchkit.hashing import sha256_bytes
from patchkit.lockfile import LOCKFILE_NAME, Lockfile, loads
from patchkit.repo import Escape, Repo
from patchkit.sums import FILENAME as SUMS_NAME

if TYPE_CHECKING:
    from patchkit.cache import BlobStore

BUILD_DIR = "build"
DEFAULT_EPOCH = 0
COMPRESSLEVEL = 9
# Root-level deployment files bundled when present (compose.yaml is required).
DEPLOYMENT_FILES = ("entrypoint.sh", "Caddyfile.example")
COMPOSE = "compose.yaml"

MAX_MEMBER = 256 * 1024 * 1024
MAX_TOTAL = 1024 * 1024 * 1024
MAX_MEMBERS = 100_000
# Headers, long names and padding on top of the members' data.
_HEADER_SLACK = 16 * 1024 * 1024


def build_target(target: str) -> str:
    """The bundle path of a materialized diff-only patch: ``build/<target>``."""
    return f"{BUILD_DIR}/{target.lstrip('/')}"


def epoch_from_env(value: int | None = None) -> int:
    """The bundle's mtime: ``value``, else ``$SOURCE_DATE_EPOCH``, else ``DEFAULT_EPOCH``."""
    if value is None:
        env = os.environ.get("SOURCE_DATE_EPOCH")
        if env is None or env == "":
            return DEFAULT_EPOCH
        if not env.isdigit():
            raise BadInput(
                f"SOURCE_DATE_EPOCH={env!r}: not a non-negative integer of seconds",
                "set it to integer seconds since 1970 (UTC), e.g. $(git log -1 --format=%ct)",
            )
        value = int(env)
    if value < 0 or value >= 8**11:
        raise BadInput(f"SOURCE_DATE_EPOCH {value}: out of range for a tar header (0 .. {8**11 - 1})")
    return value


def _read_repo_file(repo: Repo, rel: str, what: str) -> tuple[bytes, bool]:
    try:
        path, st = repo.check_inside_stat(rel)
    except FileNotFoundError as e:
        raise BadInput(f"{rel}: missing ({what}); refusing to bundle") from e
    except Escape as e:
        raise BadInput(f"{rel}: {e} ({what}); refusing to bundle") from e
    try:
        data = path.read_bytes()
    except OSError as e:
        raise BadInput(f"{rel}: cannot read ({e.strerror}); refusing to bundle") from e
    return data, bool(st.st_mode & stat.S_IXUSR)


def _bundle_files(
    repo: Repo, lock: Lockfile, lock_bytes: bytes, files_that_run: dict[str, bytes]
) -> dict[str, tuple[bytes, bool]]:
    """Every bundle member: name -> (bytes, executable), each pin verified, SHA256SUMS included."""
    files: dict[str, tuple[bytes, bool]] = {LOCKFILE_NAME: (lock_bytes, False)}

    def add(name: str, data: bytes, executable: bool) -> None:
        if name in files and files[name][0] != data:
            raise BadInput(f"{name}: two different files would be bundled under this name; refusing to bundle")
        files[name] = (data, executable)

    for field, rel, sha in lock.files():
        data, executable = _read_repo_file(repo, str(rel), f"pinned by {LOCKFILE_NAME} {field}")
        actual = sha256_bytes(data)
        if actual != sha.hex:
            raise BadInput(
                f"{rel}: sha256 {actual[:12]}… is not the pinned {sha.short}… ({LOCKFILE_NAME} {field}); "
                "refusing to bundle",
                "run `patchkit check` and re-lock or restore the file",
            )
        add(str(rel), data, executable)

    targets = {str(p.target): p for p in lock.patches}
    for target in files_that_run:
        if target not in targets:
            raise BadInput(f"{target}: not the target of any patch in {LOCKFILE_NAME}; refusing to bundle")
    for p in lock.patches:
        target = str(p.target)
        given = files_that_run.get(target)
        if p.file is not None:
            if given is not None and given != files[str(p.file)][0]:
                raise BadInput(f"{target}: the file given for '{p.name}' is not the committed {p.file}")
            continue
        if given is None:
            raise BadInput(
                f"'{p.name}' is diff-only and its materialized file ({target}) was not given; refusing to bundle",
                "run `patchkit materialize` to rebuild it",
            )
        actual = sha256_bytes(given)
        if actual != p.sha256.hex:
            raise BadInput(
                f"{target}: materialized '{p.name}' has sha256 {actual[:12]}…, not the pinned {p.sha256.short}…; "
                "refusing to bundle"
            )
        add(build_target(target), given, given.startswith(b"#!"))

    names = sorted(e.name for e in repo.root.iterdir() if e.name.startswith("compose.") and e.name.endswith(".yaml"))
    if COMPOSE not in names:
        raise BadInput(f"{COMPOSE}: missing; refusing to bundle", "run `patchkit emit` first")
    for name in [*names, *DEPLOYMENT_FILES]:
        if name in files:
            continue
        if name in DEPLOYMENT_FILES and not os.path.lexists(repo.path(name)):
            continue
        data, executable = _read_repo_file(repo, name, "deployment file")
        add(name, data, executable)

    if SUMS_NAME in files:
        raise BadInput(f"{SUMS_NAME}: generated by the bundle, it cannot also be a bundled file")
    out = {n: (d, x or d.startswith(b"#!")) for n, (d, x) in files.items()}
    out[SUMS_NAME] = (sums.render((n, sha256_bytes(d)) for n, (d, _) in files.items()), False)
    return out


def _parents(names: list[str]) -> list[str]:
    dirs: set[str] = set()
    for name in names:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return sorted(dirs)


def _tarinfo(
    name: str, epoch: int, *, size: int = 0, directory: bool = False, executable: bool = False
) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    ti.size = size
    ti.mode = 0o755 if directory or executable else 0o644
    ti.mtime = epoch
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def build_bundle(
    repo: Repo,
    lock: Lockfile,
    lock_bytes: bytes,
    files_that_run: dict[str, bytes],
    *,
    source_date_epoch: int | None = None,
) -> bytes:
    """The bundle's ``.tar.gz`` bytes; raises ``BadInput`` naming the file when a pin does not hold.

    ``files_that_run`` maps a patch's container target to the file that runs
    there. Every diff-only patch needs its entry (see ``collect_files_that_run``);
    committed patches are read from the repository, and an entry given for one
    must equal the committed file.
    """
    epoch = epoch_from_env(source_date_epoch)
    files = _bundle_files(repo, lock, lock_bytes, files_that_run)
    entries: list[tuple[str, tuple[bytes, bool] | None]] = [(d, None) for d in _parents(list(files))]
    entries += list(files.items())
    entries.sort(key=lambda e: e[0].encode("utf-8", "surrogateescape"))

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8") as tar:
        for name, member in entries:
            if member is None:
                tar.addfile(_tarinfo(name, epoch, directory=True))
            else:
                data, executable = member
                ti = _tarinfo(name, epoch, size=len(data), executable=executable)
                tar.addfile(ti, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0, compresslevel=COMPRESSLEVEL) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def collect_files_that_run(repo: Repo, lock: Lockfile, store: BlobStore, cache: Path) -> dict[str, bytes]:
    """Every diff-only patch materialized and verified: container target -> bytes."""
    from patchkit.materialize import materialize

    # Only the diff-only patches, in memory: committed ones are read (and
    # checked against their pins) by build_bundle itself.
    files: dict[str, bytes] = {}
    results = materialize(repo, lock, store, cache, diff_only=True, keep=files)
    bad = [r for r in results if not r.ok]
    if bad:
        raise BadInput(f"'{bad[0].name}' ({bad[0].target}): {bad[0].how}; refusing to bundle")
    return files


# --------------------------------------------------------------------------- verifying


class _TooBig(Exception):
    pass


class _Limited(io.RawIOBase):
    """A read-only stream that fails once more than ``limit`` bytes were read (zip-bomb guard)."""

    def __init__(self, inner: io.BufferedIOBase, limit: int) -> None:
        self.inner = inner
        self.limit = limit
        self.count = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            size = self.limit + 1 - self.count
        data = self.inner.read(min(size, self.limit + 1 - self.count))
        self.count += len(data)
        if self.count > self.limit:
            raise _TooBig
        return data


def _name_problem(name: str) -> str | None:
    if name.startswith("/"):
        return "absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "path traversal ('..')"
    if name == "" or any(p in ("", ".") for p in parts):
        return "not a normalised relative path"
    return None


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while True:
        ti = tar.next()
        if ti is None:
            return
        yield ti


def verify_bundle(
    path: Path, *, max_member: int = MAX_MEMBER, max_total: int = MAX_TOTAL, max_members: int = MAX_MEMBERS
) -> list[str]:
    """Every problem of the bundle at ``path``, each naming its member; empty when it is sound."""
    problems: list[str] = []
    try:
        f = path.open("rb")
    except OSError as e:
        return [f"{path}: cannot read ({e.strerror})"]
    with f, tempfile.TemporaryDirectory(prefix="patchkit-verify-") as tmp:
        root = Path(tmp)
        digests: dict[str, str] = {}
        contents: dict[str, bytes] = {}
        complete = False
        try:
            gz = gzip.GzipFile(fileobj=f, mode="rb")
            stream = _Limited(gz, max_total + _HEADER_SLACK)
            with tarfile.open(fileobj=stream, mode="r|", encoding="utf-8", errors="surrogateescape") as tar:
                found, complete = _unpack(tar, root, digests, contents, max_member, max_total, max_members)
                problems += found
        except _TooBig:
            problems.append(f"{path}: unpacks to more than {max_total + _HEADER_SLACK} bytes; refused")
        except (OSError, EOFError, tarfile.TarError, gzip.BadGzipFile) as e:
            problems.append(f"{path}: not a readable .tar.gz ({e})")
        # Sums and pins are checked only over a bundle read to its end: a
        # bundle cut short would add a "missing" problem for every unread file.
        if complete:
            problems += _check_contents(digests, contents)
    return problems


def _unpack(
    tar: tarfile.TarFile,
    root: Path,
    digests: dict[str, str],
    contents: dict[str, bytes],
    max_member: int,
    max_total: int,
    max_members: int,
) -> tuple[list[str], bool]:
    """Unpack every safe member under ``root``; the problems, and whether the archive was read to its end."""
    problems: list[str] = []
    seen: set[str] = set()
    total = 0
    for count, ti in enumerate(_members(tar), start=1):
        name = ti.name
        if count > max_members:
            problems.append(f"more than {max_members} members; refused")
            return problems, False
        why = _name_problem(name)
        if why is not None:
            problems.append(f"{name}: {why}; refused")
            continue
        if name in seen:
            problems.append(f"{name}: duplicate member; refused")
            continue
        seen.add(name)
        if ti.issym() or ti.islnk():
            kind = "symlink" if ti.issym() else "hard link"
            target = ti.linkname
            base = name.rsplit("/", 1)[0] if "/" in name and ti.issym() else ""
            resolved = os.path.normpath(os.path.join(base, target))
            out = target.startswith("/") or resolved == ".." or resolved.startswith("../")
            problems.append(
                f"{name}: {kind} to {target}{', outside the bundle' if out else ''}; refused (a bundle holds no links)"
            )
            continue
        if ti.isdev():
            problems.append(f"{name}: device or fifo; refused")
            continue
        if ti.isdir():
            try:
                (root / name).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                problems.append(f"{name}: cannot unpack ({e.strerror}); refused")
            continue
        if not ti.isreg():
            problems.append(f"{name}: unsupported member type {ti.type!r}; refused")
            continue
        if ti.size > max_member:
            problems.append(f"{name}: {ti.size} bytes, over the {max_member}-byte limit per member; refused")
            return problems, False  # its data cannot be skipped safely; nothing after it is read
        total += ti.size
        if total > max_total:
            problems.append(f"{name}: the bundle exceeds {max_total} bytes unpacked here; refused")
            return problems, False
        src = tar.extractfile(ti)
        data = src.read() if src is not None else b""
        if len(data) != ti.size:
            problems.append(f"{name}: truncated ({len(data)} of {ti.size} bytes)")
            continue
        dest = root / name
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out_f:
                out_f.write(data)
        except OSError as e:
            problems.append(f"{name}: cannot unpack ({e.strerror}); refused")
            continue
        digests[name] = sha256_bytes(data)
        if name in (SUMS_NAME, LOCKFILE_NAME):
            contents[name] = data
    return problems, True


def _check_contents(digests: dict[str, str], contents: dict[str, bytes]) -> list[str]:
    problems: list[str] = []
    sums_data = contents.get(SUMS_NAME)
    if sums_data is None:
        problems.append(f"{SUMS_NAME}: missing from the bundle")
    else:
        entries, bad = sums.parse(sums_data)
        problems += [p.render() for p in bad]
        listed: set[str] = set()
        for e in entries:
            listed.add(e.name)
            actual = digests.get(e.name)
            if actual is None:
                problems.append(f"{e.name}: listed in {SUMS_NAME} (line {e.line}) but not in the bundle")
            elif actual != e.sha256:
                problems.append(
                    f"{e.name}: sha256 {actual[:12]}… does not match {SUMS_NAME} line {e.line} ({e.sha256[:12]}…)"
                )
        problems += [
            f"{n}: in the bundle but not listed in {SUMS_NAME}"
            for n in sorted(digests)
            if n not in listed and n != SUMS_NAME
        ]
    lock_data = contents.get(LOCKFILE_NAME)
    if lock_data is None:
        problems.append(f"{LOCKFILE_NAME}: missing from the bundle")
        return problems
    try:
        lock = loads(lock_data.decode("utf-8"), LOCKFILE_NAME)
    except UnicodeDecodeError:
        return [*problems, f"{LOCKFILE_NAME}: not UTF-8"]
    except LockfileError as e:
        return [*problems, *(p.render() for p in e.problems)]
    pins = [(f"{LOCKFILE_NAME} {field}", str(rel), sha.hex) for field, rel, sha in lock.files()]
    pins += [
        (f"{LOCKFILE_NAME} patch '{p.name}'", build_target(str(p.target)), p.sha256.hex)
        for p in lock.patches
        if p.file is None
    ]
    for what, name, pinned in pins:
        actual = digests.get(name)
        if actual is None:
            problems.append(f"{name}: pinned by {what} but not in the bundle")
        elif actual != pinned:
            problems.append(f"{name}: sha256 {actual[:12]}… is not the pin {pinned[:12]}… of {what}")
    return problems
