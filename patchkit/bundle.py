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

``verify_bundle`` reads the archive block by block as GNU ``tar -xzf`` does
(not as Python's tarfile, which stops at a bad block where GNU tar skips it
and reads on), refusing a block that is no header, anything but zeros after
the end-of-archive block, unbounded long names and pax headers, modes and
owners other than the format's, absolute names, ``..``, links, devices,
duplicates and oversized members. It unpacks into a temporary directory,
then checks SHA256SUMS (every file listed and matching, nothing unlisted,
no directory that holds none of them) and every pin of the bundled lockfile.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from patchkit import sums
from patchkit.errors import BadInput, LockfileError
from patchkit.hashing import require_pin, sha256_bytes
from patchkit.lockfile.model import LOCKFILE_NAME, Lockfile
from patchkit.lockfile.reader import loads
from patchkit.progress import Meter
from patchkit.repo import Escape, Repo
from patchkit.sums import FILENAME as SUMS_NAME

if TYPE_CHECKING:
    from patchkit.cache import BlobStore

BUILD_DIR = "build"
DEFAULT_EPOCH = 0
COMPRESSLEVEL = 9
# Root-level deployment files bundled when present (compose.yaml is required).
DEPLOYMENT_FILES = ("entrypoint.sh", "Caddyfile.example", "guard.json")
COMPOSE = "compose.yaml"

MAX_MEMBER = 256 * 1024 * 1024
MAX_TOTAL = 1024 * 1024 * 1024
MAX_MEMBERS = 100_000
# Headers, long names and padding on top of the members' data.
_HEADER_SLACK = 16 * 1024 * 1024


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


class _Files:
    """The bundle's members as they are gathered: name -> (bytes, executable), one content per name."""

    def __init__(self, lock_bytes: bytes) -> None:
        self.files: dict[str, tuple[bytes, bool]] = {LOCKFILE_NAME: (lock_bytes, False)}

    def add(self, name: str, data: bytes, executable: bool) -> None:
        if name in self.files and self.files[name][0] != data:
            raise BadInput(f"{name}: two different files would be bundled under this name; refusing to bundle")
        self.files[name] = (data, executable)

    def pinned(self, repo: Repo, lock: Lockfile) -> None:
        """Every file the lockfile pins, at its repository path, each checked against its pin."""
        for field, rel, sha in lock.files():
            data, executable = _read_repo_file(repo, str(rel), f"pinned by {LOCKFILE_NAME} {field}")
            actual = sha256_bytes(data)
            if actual != sha.hex:
                raise BadInput(
                    f"{rel}: sha256 {actual[:12]}… is not the pinned {sha.short}… ({LOCKFILE_NAME} {field}); "
                    "refusing to bundle",
                    "run `patchkit check` and re-lock or restore the file",
                )
            self.add(str(rel), data, executable)

    def materialized(self, lock: Lockfile, files_that_run: dict[str, bytes]) -> None:
        """Each diff-only patch's given file under build/, checked against its pin.

        A file given for a committed patch must be that file; one given for no patch's target is refused.
        """
        targets = {str(p.target): p for p in lock.patches}
        for target in files_that_run:
            if target not in targets:
                raise BadInput(f"{target}: not the target of any patch in {LOCKFILE_NAME}; refusing to bundle")
        for p in lock.patches:
            target = str(p.target)
            given = files_that_run.get(target)
            if p.file is not None:
                if given is not None and given != self.files[str(p.file)][0]:
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
            self.add(build_target(target), given, given.startswith(b"#!"))

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
                text = self.files[name][0].decode("utf-8")
            except UnicodeDecodeError as e:
                raise BadInput(f"{name}: not UTF-8 ({e.reason} at byte {e.start}); refusing to bundle") from e
            for mount in compose.read(name, text).mounts:
                rel = mount.repo_source
                if rel is not None and rel not in self.files and f"{rel}.example" in self.files:
                    self.add(rel, *self.files[f"{rel}.example"])


def _bundle_files(
    repo: Repo, lock: Lockfile, lock_bytes: bytes, files_that_run: dict[str, bytes]
) -> dict[str, tuple[bytes, bool]]:
    """Every bundle member: name -> (bytes, executable), each pin verified, SHA256SUMS included."""
    gathered = _Files(lock_bytes)
    gathered.pinned(repo, lock)
    gathered.materialized(lock, files_that_run)
    gathered.deployment(repo)
    files = gathered.files
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
    epoch = bundle_epoch(source_date_epoch)
    files = _bundle_files(repo, lock, lock_bytes, files_that_run)
    entries: list[tuple[str, tuple[bytes, bool] | None]] = [(d, None) for d in _parents(list(files))]
    entries += list(files.items())
    entries.sort(key=lambda e: e[0].encode("utf-8", "surrogateescape"))

    raw = io.BytesIO()
    total = sum(len(m[0]) for _, m in entries if m is not None)
    with (
        Meter("bundle: writing the archive", total) as meter,
        tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8") as tar,
    ):
        for name, member in entries:
            if member is None:
                tar.addfile(_tarinfo(name, epoch, directory=True))
            else:
                data, executable = member
                ti = _tarinfo(name, epoch, size=len(data), executable=executable)
                tar.addfile(ti, io.BytesIO(data))
                meter.update(len(data))
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


BLOCK = 512
# A GNU long name longer than PATH_MAX names no file GNU tar could create; a
# pax header is a few records of such names and numbers.
MAX_LONG_NAME = 4096
MAX_PAX = 16 * 1024
_REGULAR = (b"0", b"\0")
_DEVICES = (b"3", b"4", b"6")
_EXTENSIONS = {b"g": "pax global header", b"K": "GNU long link name"}
# pax records GNU tar applies to the next member; the rest (times, charset) change nothing we check.
_PAX_FIELDS = {"path": "name", "linkpath": "linkname", "size": "size", "uid": "uid", "gid": "gid"}
_PAX_NAMES = {"uname": "uname", "gname": "gname"}


class _Member:
    """One tar member as GNU tar will extract it: the header fields the bundle format fixes."""

    __slots__ = ("gid", "gname", "linkname", "mode", "name", "offset", "size", "type", "uid", "uname")

    def __init__(self, header: bytes, name: bytes, offset: int) -> None:
        self.offset = offset
        self.type = header[156:157]
        self.name = name.decode("utf-8", "surrogateescape")
        self.mode = _number(header[100:108])
        self.uid = _number(header[108:116])
        self.gid = _number(header[116:124])
        self.size = _number(header[124:136])
        self.linkname = _cstr(header[157:257]).decode("utf-8", "surrogateescape")
        self.uname = _cstr(header[265:297]).decode("utf-8", "surrogateescape")
        self.gname = _cstr(header[297:329]).decode("utf-8", "surrogateescape")


class _NotTar(Exception):
    """A block that is neither a tar header, member data nor end-of-archive zeros."""


def _cstr(field: bytes) -> bytes:
    return field.split(b"\0", 1)[0]


def _number(field: bytes) -> int:
    """A numeric header field: octal digits (NUL/space padded) or GNU base-256 (high bit set)."""
    if field[:1] and field[0] & 0x80:
        value = field[0] & 0x3F
        for byte in field[1:]:
            value = value * 256 + byte
        if field[0] & 0x40:  # negative base-256: nothing in a bundle is negative
            raise _NotTar("a negative number in a header field")
        return value
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    if not all(48 <= c <= 55 for c in text):
        raise _NotTar(f"header field {field!r} is not an octal number")
    return int(text, 8)


def _is_header(block: bytes) -> bool:
    """Whether ``block``'s checksum holds (GNU tar accepts the unsigned or the signed byte sum)."""
    try:
        stored = _number(block[148:156])
    except _NotTar:
        return False
    rest = block[:148] + b" " * 8 + block[156:]
    unsigned = sum(rest)
    signed = sum(b - 256 if b > 127 else b for b in rest)
    return stored in (unsigned, signed)


class _Blocks:
    """The decompressed archive read in 512-byte blocks, with the offset of each."""

    def __init__(self, stream: io.RawIOBase) -> None:
        self.stream = stream
        self.offset = 0
        self.read_to_end = False  # every block was read, so every member was seen

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes, fewer only at the end of the archive."""
        parts = []
        left = n
        while left > 0:
            data = self.stream.read(left)
            if not data:
                break
            parts.append(data)
            left -= len(data)
        out = b"".join(parts)
        self.offset += len(out)
        return out

    def skip_padding(self, size: int) -> None:
        self.read(-size % BLOCK)


class _Stop(Exception):
    """Reading ends here: at the archive's end, or at a problem after which nothing can be trusted."""


class _TarReader:
    """GNU tar's reading of an archive, header by header.

    Holds the GNU long name or pax header that applies to the next member, and
    the problems found; a refusal records its problem and stops the reading.
    """

    def __init__(self, blocks: _Blocks, problems: list[str], max_member: int) -> None:
        self.blocks = blocks
        self.problems = problems
        self.max_member = max_member
        self.long_name: bytes | None = None
        self.pax: dict[str, str] | None = None

    def refuse(self, problem: str) -> NoReturn:
        self.problems.append(problem)
        raise _Stop

    def members(self) -> Iterator[tuple[_Member, bytes | None]]:
        """Every member with its data, the long-name and pax headers applied to the member they precede."""
        while True:
            at, header = self.header()
            kind = header[156:157]
            size = self.number(header[124:136], at)
            if kind == b"L":
                self.read_long_name(at, size)
            elif kind == b"x":
                self.read_pax(at, size)
            elif kind in _EXTENSIONS:
                self.refuse(f"byte {at}: a {_EXTENSIONS[kind]}, which the bundle format never holds; refused")
            else:
                yield from self.with_data(self.member(header, kind, at), kind, at)

    def header(self) -> tuple[int, bytes]:
        """The next header block and its offset; stops at the end-of-archive block or a cut or bad one."""
        at = self.blocks.offset
        header = self.blocks.read(BLOCK)
        if not header:
            self.blocks.read_to_end = True
            self.refuse("the archive ends without its end-of-archive blocks (cut short?)")
        if len(header) < BLOCK:
            self.refuse(f"the archive ends inside a header at byte {at} (cut short)")
        if header == bytes(BLOCK):
            _rest_is_zeros(self.blocks, self.problems)
            self.blocks.read_to_end = True
            raise _Stop
        if not _is_header(header):
            self.refuse(
                f"byte {at}: a block that is not a tar header (bad checksum); GNU tar would skip it and read "
                "the members after it; refused"
            )
        return at, header

    def number(self, field: bytes, at: int) -> int:
        try:
            return _number(field)
        except _NotTar as e:
            self.refuse(f"byte {at}: {e}; refused")

    def read_long_name(self, at: int, size: int) -> None:
        """A GNU long name for the next member, bounded before it is read."""
        if self.long_name is not None:
            self.refuse(f"byte {at}: two GNU long names in a row; refused")
        if size > MAX_LONG_NAME:
            self.refuse(f"byte {at}: a GNU long name of {size} bytes, over the {MAX_LONG_NAME}-byte limit; refused")
        data = self.blocks.read(size)
        self.blocks.skip_padding(size)
        if len(data) < size:
            self.refuse(f"byte {at}: the archive ends inside a GNU long name (cut short)")
        self.long_name = _cstr(data)

    def read_pax(self, at: int, size: int) -> None:
        """A pax header's records for the next member, bounded before they are read."""
        if self.pax is not None or size > MAX_PAX:
            what = "two pax headers in a row" if self.pax is not None else f"a pax header of {size} bytes"
            self.refuse(f"byte {at}: {what}, over the {MAX_PAX}-byte limit; refused")
        data = self.blocks.read(size)
        self.blocks.skip_padding(size)
        try:
            self.pax = _pax_records(data)
        except _NotTar as e:
            self.refuse(f"byte {at}: {e}; refused")

    def member(self, header: bytes, kind: bytes, at: int) -> _Member:
        """The member a header describes, its name from the pending long name, ustar prefix or pax record."""
        name = self.long_name if self.long_name is not None else _cstr(header[0:100])
        if self.long_name is None and header[257:263] == b"ustar\0" and header[345] != 0:
            name = _cstr(header[345:500]) + b"/" + name  # POSIX ustar prefix
        self.long_name = None
        if kind == b"5":
            name = name.removesuffix(b"/")  # a directory's name ends with "/" in the header
        try:
            member = _Member(header, name, at)
            if self.pax is not None:
                _apply_pax(member, self.pax)
        except _NotTar as e:
            self.refuse(f"byte {at}: {e}; refused")
        self.pax = None
        if len(member.name) > MAX_LONG_NAME:
            self.refuse(f"byte {at}: a name of {len(member.name)} characters; refused")
        return member

    def with_data(self, member: _Member, kind: bytes, at: int) -> Iterator[tuple[_Member, bytes | None]]:
        """The member with its data: none for links and devices, and none read past ``max_member``."""
        size = member.size
        if kind not in (*_REGULAR, b"5"):
            # Links and devices have no data GNU tar reads; anything else is refused unread too.
            yield member, None
            if size:
                self.refuse(f"byte {at}: a member without data claims {size} bytes; refused")
            return
        if kind == b"5":
            yield member, b""
            return
        if size > self.max_member:
            yield member, None
            raise _Stop
        data = self.blocks.read(size)
        self.blocks.skip_padding(size)
        yield member, data
        if len(data) < size:
            raise _Stop


def _tar_members(blocks: _Blocks, problems: list[str], max_member: int) -> Iterator[tuple[_Member, bytes | None]]:
    """Every member GNU tar would extract, in order, with its data (None when refused unread).

    Stricter than Python's tarfile where the two differ, so that what is
    verified is what ``tar -xzf`` writes: a block that is not a valid header
    is refused (GNU tar skips it and reads on, Python stops there), anything
    but zeros after the end-of-archive block is refused (GNU tar stops there,
    an attacker's next member would be invisible to one reader only), and a
    GNU long name is bounded before it is read. Problems are appended;
    iteration stops when the rest of the archive cannot be trusted.
    """
    try:
        yield from _TarReader(blocks, problems, max_member).members()
    except _Stop:
        return


def _pax_records(data: bytes) -> dict[str, str]:
    """The ``LEN key=value\\n`` records of a pax extended header."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos, pos + 12)
        length = data[pos:space]
        if (
            space < 0
            or not length.isdigit()
            or int(length) < 5
            or data[pos + int(length) - 1 : pos + int(length)] != b"\n"
        ):
            raise _NotTar("a malformed pax record")
        key, eq, value = data[space + 1 : pos + int(length) - 1].partition(b"=")
        if not eq:
            raise _NotTar("a malformed pax record")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += int(length)
    return records


def _apply_pax(member: _Member, records: dict[str, str]) -> None:
    """What GNU tar takes from a pax header over the member's own fields."""
    for key, attr in _PAX_FIELDS.items():
        if key not in records:
            continue
        value = records[key]
        if attr in ("name", "linkname"):
            setattr(member, attr, value.removesuffix("/") if member.type == b"5" and attr == "name" else value)
        elif value.isdigit() and len(value) <= 20:
            setattr(member, attr, int(value))
        else:
            raise _NotTar(f"pax record {key}={value[:40]!r} is not a number")
    for key, attr in _PAX_NAMES.items():
        if key in records:
            setattr(member, attr, records[key])


def _rest_is_zeros(blocks: _Blocks, problems: list[str]) -> None:
    """After the first end-of-archive block only zero padding may follow."""
    at = blocks.offset
    while True:
        chunk = blocks.read(1 << 16)
        if not chunk:
            return
        if chunk.count(0) != len(chunk):
            first = at + next(i for i, b in enumerate(chunk) if b)
            problems.append(
                f"byte {first}: data after the end-of-archive block; a reader that skips zero blocks "
                "(tar --ignore-zeros) would extract it; refused"
            )
            return
        at += len(chunk)


def _shown(text: str, limit: int = 200) -> str:
    """A name for a message: control characters escaped, cut to ``limit`` characters."""
    from patchkit.formats.safe import printable

    shown = printable(text)
    return shown if len(shown) <= limit else shown[:limit] + f"… ({len(text)} characters)"


def verify_bundle(
    path: Path, *, max_member: int = MAX_MEMBER, max_total: int = MAX_TOTAL, max_members: int = MAX_MEMBERS
) -> list[str]:
    """Every problem of the bundle at ``path``, each naming its member; empty when it is sound.

    Reads the archive as GNU tar extracts it (see ``_tar_members``): the
    members checked are exactly the ones ``tar -xzf`` would write.
    """
    problems: list[str] = []
    try:
        f = path.open("rb")
    except OSError as e:
        return [f"{path}: cannot read ({e.strerror})"]
    with f:
        digests: dict[str, str] = {}
        contents: dict[str, bytes] = {}
        dirs: set[str] = set()
        complete = False
        try:
            gz = gzip.GzipFile(fileobj=f, mode="rb")
            blocks = _Blocks(_Limited(gz, max_total + _HEADER_SLACK))
            members = _tar_members(blocks, problems, max_member)
            unpacked = _unpack(members, digests, contents, dirs, problems, max_member, max_total, max_members)
            complete = unpacked and blocks.read_to_end
        except _TooBig:
            problems.append(f"{path}: unpacks to more than {max_total + _HEADER_SLACK} bytes; refused")
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
            problems.append(f"{path}: not a readable .tar.gz ({e})")
        # Sums and pins are checked only over a bundle read to its end: a
        # bundle cut short would add a "missing" problem for every unread file.
        if complete:
            problems += _check_contents(digests, contents, dirs)
    return problems


def _member_problem(m: _Member) -> str | None:
    """The bundle format fixes modes and owners; GNU tar as root restores whatever a header says."""
    wanted = (0o755,) if m.type == b"5" else (0o644, 0o755)
    bad = []
    if m.mode not in wanted:
        bad.append(f"mode {m.mode:04o}")
    if m.uid or m.gid or m.uname or m.gname:
        who = f"{m.uid}:{m.gid}" + (f" ({m.uname}:{m.gname})" if m.uname or m.gname else "")
        bad.append(f"owner {_shown(who)}")
    if not bad:
        return None
    fixed = "0755" if m.type == b"5" else "0644 or 0755"
    return f"{', '.join(bad)}; the bundle format fixes mode {fixed} and owner 0:0 with no names"


def _link_problem(ti: _Member, shown: str) -> str:
    """A link member's refusal, saying whether it points outside the bundle."""
    kind = "symlink" if ti.type == b"2" else "hard link"
    target = ti.linkname
    base = ti.name.rsplit("/", 1)[0] if "/" in ti.name and ti.type == b"2" else ""
    resolved = os.path.normpath(os.path.join(base, target))
    out = target.startswith("/") or resolved == ".." or resolved.startswith("../")
    return (
        f"{shown}: {kind} to {_shown(target)}{', outside the bundle' if out else ''}; refused (a bundle holds no links)"
    )


class _Unpacker:
    """What ``tar -x`` would unpack, member by member, hashed in memory and checked against the limits."""

    def __init__(
        self,
        digests: dict[str, str],
        contents: dict[str, bytes],
        dirs: set[str],
        problems: list[str],
        max_member: int,
        max_total: int,
    ) -> None:
        self.digests, self.contents, self.dirs, self.problems = digests, contents, dirs, problems
        self.max_member, self.max_total = max_member, max_total
        self.seen: set[str] = set()
        self.layout = _Layout()
        self.total = 0

    def member(self, ti: _Member, data: bytes | None) -> bool:
        """Unpack one member; whether the members after it can still be read."""
        shown = _shown(ti.name)
        refused = self.refused(ti, shown)
        if refused is not None:
            self.problems.append(refused)
            return True
        if ti.type not in (*_REGULAR, b"5"):
            self.problems.append(f"{shown}: unsupported member type {ti.type.decode('latin-1')!r}; refused")
            return not (data is None and ti.size)
        owner = _member_problem(ti)
        if owner is not None:
            self.problems.append(f"{shown}: {owner}; refused")
        if ti.type == b"5":
            self.dirs.add(ti.name)
            self.make(ti.name, shown, directory=True)
            return True
        return self.file(ti, data, shown)

    def refused(self, ti: _Member, shown: str) -> str | None:
        """Why a member is refused outright (bad name, duplicate, link, device), or None."""
        why = _name_problem(ti.name)
        if why is not None:
            return f"{shown}: {why}; refused"
        if ti.name in self.seen:
            return f"{shown}: duplicate member; refused"
        self.seen.add(ti.name)
        if ti.type in (b"1", b"2"):
            return _link_problem(ti, shown)
        if ti.type in _DEVICES:
            return f"{shown}: device or fifo; refused"
        return None

    def make(self, name: str, shown: str, *, directory: bool) -> bool:
        """Create ``name`` in the layout; whether it could be (else the error tar would meet is recorded)."""
        error = self.layout.make(name, directory=directory)
        if error is not None:
            self.problems.append(f"{shown}: cannot unpack ({error}); refused")
        return error is None

    def file(self, ti: _Member, data: bytes | None, shown: str) -> bool:
        """A regular file, within the limits; the lockfile and SHA256SUMS are kept for the content checks."""
        if data is None:
            self.problems.append(f"{shown}: {ti.size} bytes, over the {self.max_member}-byte limit per member; refused")
            return False  # its data cannot be skipped safely; nothing after it is read
        self.total += ti.size
        if self.total > self.max_total:
            self.problems.append(f"{shown}: the bundle exceeds {self.max_total} bytes unpacked here; refused")
            return False
        if len(data) != ti.size:
            self.problems.append(f"{shown}: truncated ({len(data)} of {ti.size} bytes)")
            return False
        if self.make(ti.name, shown, directory=False):
            self.digests[ti.name] = sha256_bytes(data)
            if ti.name in (SUMS_NAME, LOCKFILE_NAME):
                self.contents[ti.name] = data
        return True


def _unpack(
    members: Iterator[tuple[_Member, bytes | None]],
    digests: dict[str, str],
    contents: dict[str, bytes],
    dirs: set[str],
    problems: list[str],
    max_member: int,
    max_total: int,
    max_members: int,
) -> bool:
    """Read every member as ``tar -x`` would unpack it, hashing the files; whether the archive was read to its end.

    Nothing is written: where tar would fail to create a member (a file where a
    directory is, a directory below a file, a name too long for a file system),
    ``_Layout`` says so with the error tar would meet.
    """
    unpacker = _Unpacker(digests, contents, dirs, problems, max_member, max_total)
    for count, (ti, data) in enumerate(members, start=1):
        if count > max_members:
            problems.append(f"more than {max_members} members; refused")
            return False
        if not unpacker.member(ti, data):
            return False
    return True


class _Layout:
    """The tree ``tar -x`` would build, in memory: which names are files and which directories."""

    # A file name component longer than this is refused by Linux file systems (NAME_MAX).
    NAME_MAX = 255

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.dirs: set[str] = set()

    def make(self, name: str, *, directory: bool) -> str | None:
        """Create ``name`` (and its parents); the error the file system would give, if any."""
        parts = name.split("/")
        if any(len(p.encode("utf-8", "surrogateescape")) > self.NAME_MAX for p in parts):
            return os.strerror(errno.ENAMETOOLONG)
        parents = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if any(p in self.files for p in parents):
            return os.strerror(errno.ENOTDIR)
        if name in self.files or (not directory and name in self.dirs):
            return os.strerror(errno.EEXIST)
        self.dirs.update(parents)
        (self.dirs if directory else self.files).add(name)
        return None


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
        f"{_shown(n)}: in the bundle but not listed in {SUMS_NAME}"
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


def _check_contents(digests: dict[str, str], contents: dict[str, bytes], dirs: set[str]) -> list[str]:
    """The members against the bundled SHA256SUMS (exactly its files) and the bundled lockfile's pins."""
    holding = set(_parents(list(digests)))
    problems = [f"{_shown(d)}: a directory that holds no file of the bundle; refused" for d in sorted(dirs - holding)]
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
