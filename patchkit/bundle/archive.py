"""The production bundle: one reproducible ``.tar.gz`` holding everything a host needs to run.

Layout (flat: no top-level directory; unpack with ``tar -xzf B -C DIR``)::

    SHA256SUMS                 every other file of the bundle (GNU format)
    lockfile.toml              the lockfile, byte for byte
    compose.yaml               and every compose.*.yaml profile beside it
    entrypoint.sh              when present at the repository root
    Caddyfile.example          when present at the repository root
    Caddyfile                  a template NAME.example again under NAME, when a
                               compose file mounts ./NAME and the repository
                               keeps only the template (the site's Caddyfile)
    guard.json                 the runtime guard's manifest, when present (patchkit emit)
    <repo path>                every file the lockfile pins, at its repository
                               path: committed patches (patches/...), diffs
                               (upstream/...), tuning tables, artifacts
    build/<container target>   each diff-only patch, materialized, where
                               compose.yaml mounts it (./build/<target>)

Reproducible: the bytes depend only on the files' contents and the epoch.
Entries are sorted by name, every parent directory has its own entry,
owner 0:0 with empty names, modes 0644 (0755 for directories and for files
that start with ``#!`` or whose owner-execute bit is set), mtime the
epoch (``source_date_epoch``, the ``$SOURCE_DATE_EPOCH`` the command line
reads, else 0), GNU tar
format (integer times, no pax records), gzip at level 9 with no file name and
mtime 0. Everything the lockfile pins is checked against its pin first.

``verify_bundle`` reads the archive with ``bundletar.read``, the one reader
of bundles (``attest``, ``push`` and ``pull`` use it too), which accepts
exactly the bytes its writer (used by ``build_bundle``) makes of the files it read: any other
archive (pax records, sparse or link members, other spellings of a header
field, another gzip wrapper) is refused, so what is verified is what
``tar -xzf`` writes. It unpacks nothing to disk, then checks SHA256SUMS
(every file listed and matching, nothing unlisted) and every pin of the
bundled lockfile.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.bundle import tar as bundletar
from patchkit.core import sums
from patchkit.core.hashing import Blob, require_pin
from patchkit.core.progress import StartProgress, no_progress
from patchkit.core.sums import FILENAME as SUMS_NAME
from patchkit.core.values import LOCKFILE_NAME
from patchkit.errors import BadInput, LockfileError
from patchkit.lockfile.model import Lockfile
from patchkit.lockfile.reader import loads
from patchkit.sources.context import Context
from patchkit.store.repo import Escape, Repo

if TYPE_CHECKING:
    from patchkit.store.cache import BlobStore

BUILD_DIR = "build"
DEFAULT_EPOCH = 0
COMPRESSLEVEL = bundletar.COMPRESSLEVEL
# Root-level deployment files bundled when present (compose.yaml is required).
DEPLOYMENT_FILES = ("entrypoint.sh", "Caddyfile.example", "guard.json")
COMPOSE = "compose.yaml"

MAX_MEMBER = bundletar.LIMITS.member
MAX_TOTAL = bundletar.LIMITS.total
MAX_MEMBERS = bundletar.LIMITS.members


def build_target(target: str) -> str:
    """The bundle path of a materialized diff-only patch: ``build/<target>``."""
    return f"{BUILD_DIR}/{target.lstrip('/')}"


def parse_epoch(text: str | None) -> int | None:
    """``$SOURCE_DATE_EPOCH`` as the command line read it, in seconds; None when unset or empty."""
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise BadInput(
            f"SOURCE_DATE_EPOCH={text!r}: not a non-negative integer of seconds",
            "set it to integer seconds since 1970 (UTC), e.g. $(git log -1 --format=%ct)",
        )
    return int(text)


def bundle_epoch(value: int | None = None) -> int:
    """The bundle's mtime: ``value``, else ``DEFAULT_EPOCH``; ``BadInput`` if it does not fit a tar header."""
    if value is None:
        return DEFAULT_EPOCH
    if value < 0 or value >= 8**11:
        raise BadInput(f"SOURCE_DATE_EPOCH {value}: out of range for a tar header (0 .. {8**11 - 1})")
    return value


def _blob(data: bytes | Blob | None) -> Blob | None:
    """``data`` as a ``Blob`` (a caller may hand plain bytes)."""
    return data if data is None or isinstance(data, Blob) else Blob(data)


def _read_repo_file(repo: Repo, rel: str, what: str) -> tuple[Blob, bool]:
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
    return Blob(data), bool(st.st_mode & stat.S_IXUSR)


class _Files:
    """The bundle's members as they are gathered: name -> (bytes and digest, executable), one content per name.

    Each member's digest is computed once, where its pin is checked, and
    reused for SHA256SUMS.
    """

    def __init__(self, lock_bytes: bytes) -> None:
        self.files: dict[str, tuple[Blob, bool]] = {LOCKFILE_NAME: (Blob(lock_bytes), False)}

    def add(self, name: str, data: Blob, executable: bool) -> None:
        if name in self.files and self.files[name][0].data != data.data:
            raise BadInput(f"{name}: two different files would be bundled under this name; refusing to bundle")
        self.files[name] = (data, executable)

    def pinned(self, repo: Repo, lock: Lockfile) -> None:
        """Every file the lockfile pins, at its repository path, each checked against its pin."""
        for field, rel, sha in lock.files():
            blob, executable = _read_repo_file(repo, str(rel), f"pinned by {LOCKFILE_NAME} {field}")
            require_pin(
                blob,
                sha.hex,
                lambda actual: (  # called at once, in this iteration
                    f"{rel}: sha256 {actual[:12]}… is not the pinned {sha.short}… "  # noqa: B023
                    f"({LOCKFILE_NAME} {field}); refusing to bundle"  # noqa: B023
                ),
                "run `patchkit check` and re-lock or restore the file",
            )
            self.add(str(rel), blob, executable)

    def materialized(self, lock: Lockfile, files_that_run: Mapping[str, bytes | Blob]) -> None:
        """Each diff-only patch's given file under build/, checked against its pin.

        A file given for a committed patch must be that file; one given for no patch's target is refused.
        """
        targets = {str(p.target): p for p in lock.patches}
        for target in files_that_run:
            if target not in targets:
                raise BadInput(f"{target}: not the target of any patch in {LOCKFILE_NAME}; refusing to bundle")
        for p in lock.patches:
            target = str(p.target)
            given = _blob(files_that_run.get(target))
            if p.file is not None:
                if given is not None and given.data != self.files[str(p.file)][0].data:
                    raise BadInput(f"{target}: the file given for '{p.name}' is not the committed {p.file}")
                continue
            if given is None:
                raise BadInput(
                    f"'{p.name}' is diff-only and its materialized file ({target}) was not given; refusing to bundle",
                    "run `patchkit materialize` to rebuild it",
                )
            require_pin(
                given,
                p.sha256.hex,
                lambda actual: (  # called at once, in this iteration
                    f"{target}: materialized '{p.name}' has sha256 {actual[:12]}…, "  # noqa: B023
                    f"not the pinned {p.sha256.short}…; refusing to bundle"  # noqa: B023
                ),
            )
            self.add(build_target(target), given, given.data.startswith(b"#!"))

    def deployment(self, repo: Repo) -> None:
        """Every compose profile (compose.yaml required) and the root deployment files that exist."""
        names = sorted(
            e.name for e in repo.root.iterdir() if e.name.startswith("compose.") and e.name.endswith(".yaml")
        )
        if COMPOSE not in names:
            raise BadInput(f"{COMPOSE}: missing; refusing to bundle", "run `patchkit emit` first")
        for name in [*names, *DEPLOYMENT_FILES]:
            if name in self.files:
                continue
            if name in DEPLOYMENT_FILES and not os.path.lexists(repo.path(name)):
                continue
            data, executable = _read_repo_file(repo, name, "deployment file")
            self.add(name, data, executable)
        self.templates(names)

    def templates(self, composes: list[str]) -> None:
        """A file the compose files mount that the repository keeps only as ``NAME.example`` ships under NAME too.

        The Caddyfile holds a site's domain and allowlist, so the repository
        pins the template (``Caddyfile.example``) and each host keeps its own
        ``./Caddyfile``, which compose mounts. Shipped under the mounted name,
        the bundle deploys as it is: the template's allowlist admits no real
        client, so the proxy refuses every request until the site's Caddyfile
        takes its place.
        """
        from patchkit.importing import compose

        for name in composes:
            try:
                text = self.files[name][0].data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BadInput(f"{name}: not UTF-8 ({e.reason} at byte {e.start}); refusing to bundle") from e
            for mount in compose.read(name, text).mounts:
                rel = mount.repo_source
                if rel is not None and rel not in self.files and f"{rel}.example" in self.files:
                    self.add(rel, *self.files[f"{rel}.example"])


def _bundle_files(
    repo: Repo, lock: Lockfile, lock_bytes: bytes, files_that_run: Mapping[str, bytes | Blob]
) -> dict[str, tuple[bytes, bool]]:
    """Every bundle member: name -> (bytes, executable), each pin verified, SHA256SUMS included."""
    gathered = _Files(lock_bytes)
    gathered.pinned(repo, lock)
    gathered.materialized(lock, files_that_run)
    gathered.deployment(repo)
    files = gathered.files
    if SUMS_NAME in files:
        raise BadInput(f"{SUMS_NAME}: generated by the bundle, it cannot also be a bundled file")
    out = {n: (b.data, bundletar.executable(b.data, x)) for n, (b, x) in files.items()}
    out[SUMS_NAME] = (sums.render((n, b.sha256) for n, (b, _) in files.items()), False)
    return out


def build_bundle(
    repo: Repo,
    lock: Lockfile,
    lock_bytes: bytes,
    files_that_run: Mapping[str, bytes | Blob],
    *,
    source_date_epoch: int | None = None,
    progress: StartProgress = no_progress,
) -> bytes:
    """The bundle's ``.tar.gz`` bytes; raises ``BadInput`` naming the file when a pin does not hold.

    ``progress`` is told the bytes archived.

    ``files_that_run`` maps a patch's container target to the file that runs
    there. Every diff-only patch needs its entry (see ``collect_files_that_run``);
    committed patches are read from the repository, and an entry given for one
    must equal the committed file. The archive is written by ``bundletar``,
    whose reader accepts exactly what it writes.
    """
    epoch = bundle_epoch(source_date_epoch)
    files = _bundle_files(repo, lock, lock_bytes, files_that_run)
    entries: list[tuple[str, tuple[bytes, bool] | None]] = [(d, None) for d in bundletar.parents(list(files))]
    entries += list(files.items())
    entries.sort(key=lambda e: bundletar.entry_order(e[0]))

    writer = bundletar.Writer(epoch)
    total = sum(len(m[0]) for _, m in entries if m is not None)
    with progress("bundle: writing the archive", total) as meter:
        for name, member in entries:
            if member is None:
                writer.directory(name)
            else:
                data, executable = member
                writer.file(name, data, executable)
                meter.update(len(data))
    return bundletar.compress(writer.close())


def collect_files_that_run(repo: Repo, lock: Lockfile, store: BlobStore, cache: Context) -> dict[str, Blob]:
    """Every diff-only patch materialized and verified: container target -> bytes."""
    from patchkit.sources.materialize import materialize

    # Only the diff-only patches, in memory: committed ones are read (and
    # checked against their pins) by build_bundle itself.
    files: dict[str, Blob] = {}
    results = materialize(repo, lock, store, cache, diff_only=True, keep=files)
    bad = [r for r in results if not r.ok]
    if bad:
        raise BadInput(f"'{bad[0].name}' ({bad[0].target}): {bad[0].how}; refusing to bundle")
    return files


# --------------------------------------------------------------------------- verifying


def read_bundle(
    source: Path | bytes,
    *,
    name: str | None = None,
    max_member: int = MAX_MEMBER,
    max_total: int = MAX_TOTAL,
    max_members: int = MAX_MEMBERS,
) -> bundletar.Contents:
    """The bundle read once: its files, its SHA256SUMS and lockfile bytes, and every problem.

    The one reading of a bundle, for ``verify-bundle``, ``attest``, ``push``
    and ``pull``, with one set of limits (``bundletar.LIMITS``: bytes per
    member, in all, members, and so the archive's own size). ``source`` is
    the archive's path or, for a bundle already in memory, its bytes
    (``name`` then names it in messages). ``problems`` holds the format's
    (``bundletar.read``: anything but the bytes ``patchkit bundle`` writes,
    which also refuses every link member, an absolute or ``..`` path, a
    duplicate) and, for a bundle read to its end, the contents' (SHA256SUMS
    and every pin of the bundled lockfile). Nothing is unpacked to disk.
    """
    limits = bundletar.Limits(max_member, max_total, max_members)
    shown = name or str(source if isinstance(source, Path) else "the bundle")
    size = len(source) if isinstance(source, bytes) else _size(source)
    if isinstance(size, str):
        return bundletar.Contents(problems=[f"{shown}: {size}"])
    if size > limits.archive:
        return bundletar.Contents(problems=[f"{shown}: {size} bytes, over the {limits.archive} a bundle may have"])
    # Sums and pins are checked only over a bundle read to its end: a
    # bundle cut short would add a "missing" problem for every unread file.
    if isinstance(source, bytes):
        return bundletar.read(io.BytesIO(source), shown, (SUMS_NAME, LOCKFILE_NAME), limits, check_contents)
    try:
        f = source.open("rb")
    except OSError as e:
        return bundletar.Contents(problems=[f"{shown}: cannot read ({e.strerror})"])
    with f:
        return bundletar.read(f, shown, (SUMS_NAME, LOCKFILE_NAME), limits, check_contents)


def _size(path: Path) -> int | str:
    """The file's size, or why it cannot be read."""
    try:
        return path.stat().st_size
    except OSError as e:
        return f"cannot read ({e.strerror})"


def verified(source: Path | bytes, name: str | None = None) -> bundletar.Contents:
    """The bundle read by ``read_bundle``; ``BadInput`` naming its first problem unless ``verify-bundle`` accepts it.

    What ``attest``, ``push`` and ``pull`` take: a bundle with any problem
    ``verify_bundle`` reports is refused by them too.
    """
    read = read_bundle(source, name=name)
    if read.problems:
        first = read.problems[0]
        more = f" (and {len(read.problems) - 1} more)" if len(read.problems) > 1 else ""
        if not isinstance(source, Path):  # the caller says where the bytes came from
            raise BadInput(f"{first}{more}", "build it with: patchkit bundle -o PATH")
        shown = name or str(source)
        line = first if first.startswith(f"{shown}:") else f"{shown}: {first}"
        raise BadInput(f"{line}{more}", f"see every problem: patchkit verify-bundle {source}")
    return read


def verify_bundle(
    path: Path, *, max_member: int = MAX_MEMBER, max_total: int = MAX_TOTAL, max_members: int = MAX_MEMBERS
) -> list[str]:
    """Every problem of the bundle at ``path``, each naming its member; empty when it is sound.

    Sound means: byte for byte the archive ``patchkit bundle`` writes for
    the files it holds (so GNU tar unpacks exactly the files checked), with
    SHA256SUMS listing exactly those files and every pin of the bundled
    lockfile holding.
    """
    return read_bundle(path, max_member=max_member, max_total=max_total, max_members=max_members).problems


def _sums_problems(digests: dict[str, str], sums_data: bytes) -> list[str]:
    """The members against the bundled SHA256SUMS: every listed file present and matching, nothing unlisted."""
    entries, bad = sums.parse(sums_data)
    problems = [p.render() for p in bad]
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
        f"{bundletar.shown(n)}: in the bundle but not listed in {SUMS_NAME}"
        for n in sorted(digests)
        if n not in listed and n != SUMS_NAME
    ]
    return problems


def _pin_problems(digests: dict[str, str], lock_data: bytes) -> list[str]:
    """The members against every pin of the bundled lockfile (diff-only patches at build/<target>)."""
    try:
        lock = loads(lock_data.decode("utf-8"), LOCKFILE_NAME)
    except UnicodeDecodeError:
        return [f"{LOCKFILE_NAME}: not UTF-8"]
    except LockfileError as e:
        return [p.render() for p in e.problems]
    pins = [(f"{LOCKFILE_NAME} {field}", str(rel), sha.hex) for field, rel, sha in lock.files()]
    pins += [
        (f"{LOCKFILE_NAME} patch '{p.name}'", build_target(str(p.target)), p.sha256.hex)
        for p in lock.patches
        if p.file is None
    ]
    problems: list[str] = []
    for what, name, pinned in pins:
        actual = digests.get(name)
        if actual is None:
            problems.append(f"{name}: pinned by {what} but not in the bundle")
        elif actual != pinned:
            problems.append(f"{name}: sha256 {actual[:12]}… is not the pin {pinned[:12]}… of {what}")
    return problems


def check_contents(read: bundletar.Contents) -> list[str]:
    """The members against the bundled SHA256SUMS (exactly its files) and the bundled lockfile's pins."""
    digests, contents = read.files, read.kept
    problems: list[str] = []
    sums_data = contents.get(SUMS_NAME)
    if sums_data is None:
        problems.append(f"{SUMS_NAME}: missing from the bundle")
    else:
        problems += _sums_problems(digests, sums_data)
    lock_data = contents.get(LOCKFILE_NAME)
    if lock_data is None:
        problems.append(f"{LOCKFILE_NAME}: missing from the bundle")
        return problems
    return problems + _pin_problems(digests, lock_data)
