"""The bundle's archive format in one place: the writer ``patchkit bundle`` uses, and the one reader of it.

A bundle is a GNU-format tar (no pax records, no links, no sparse files:
regular files and their parent directories, sorted by name, owner 0:0 with
no names, modes 0644/0755, one mtime) compressed as a single gzip member
with a fixed header (no name, mtime 0). ``Writer`` and ``compress`` make it.

``read`` accepts exactly what they make. Every header it reads is written
again with ``header``, the writer's own function, from the fields read (name,
size, type, mode, mtime) and must come out byte for byte the same; the data
padding, the end-of-archive blocks and the record padding must be the
writer's zeros; the members must be in the writer's order with exactly the
parent directories it writes; the gzip wrapper must carry the writer's
header, one member, a matching CRC and length, and nothing after it. A trick
that another reader (GNU tar) reads differently from this one (pax records
in any spelling, sparse maps, long links, base-256 or non-ASCII digits, a
ustar prefix, a second gzip member) therefore changes the bytes, and is
refused by construction rather than one trick at a time.

``verify-bundle``, ``attest``, ``push`` and ``pull`` all read bundles here,
with one set of limits (``LIMITS``).
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import os
import zlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, NoReturn

from patchkit.core.hashing import sha256_bytes

BLOCK = 512
RECORD = 20 * BLOCK  # tar's default blocking factor: the archive is padded to a multiple of it
COMPRESSLEVEL = 9
FILE_MODE, EXEC_MODE = 0o644, 0o755
# A GNU long name longer than PATH_MAX names no file GNU tar could create.
MAX_LONG_NAME = 4096
_NAME_LEN = 100
_GNU_MAGIC = b"ustar  \0"
_LONG_NAME = "././@LongLink"
# Headers, long names and padding on top of the members' data.
_HEADER_SLACK = 16 * 1024 * 1024
_READ = 1 << 16


@dataclass(frozen=True)
class Limits:
    """How much one bundle may hold: bytes per member, bytes in all, members."""

    member: int = 256 * 1024 * 1024
    total: int = 1024 * 1024 * 1024
    members: int = 100_000

    @property
    def stream(self) -> int:
        """The most tar bytes read: the data plus room for headers and padding."""
        return self.total + _HEADER_SLACK

    @property
    def archive(self) -> int:
        """The most bytes a ``.tar.gz`` of ``stream`` tar bytes can have: deflate's worst case and gzip's frame.

        Deflate stores what it cannot compress in blocks of at most 65,535
        bytes with 5 bytes of header each; gzip adds its header and trailer.
        A larger file is refused before it is read or sent.
        """
        return self.stream + self.stream // 8192 + 4096


LIMITS = Limits()


# --------------------------------------------------------------------------- writing


def _octal(value: int, width: int) -> bytes:
    """A header number as the writer spells it: zero-padded octal digits and a NUL."""
    if not 0 <= value < 8 ** (width - 1):
        raise ValueError(f"{value} does not fit a {width}-byte tar field")
    return b"%0*o\0" % (width - 1, value)


def _text(value: bytes, width: int) -> bytes:
    return value[:width].ljust(width, b"\0")


def _block(name: bytes, kind: bytes, *, mode: int, size: int, mtime: int) -> bytes:
    """One header block in GNU format (owner 0:0, no names, no link, no device, no prefix)."""
    parts = [
        _text(name, _NAME_LEN),
        _octal(mode, 8),
        _octal(0, 8),
        _octal(0, 8),
        _octal(size, 12),
        _octal(mtime, 12),
        b" " * 8,
        kind,
        bytes(100),
        _GNU_MAGIC,
        bytes(32 + 32 + 8 + 8 + 155),
    ]
    block = b"".join(parts).ljust(BLOCK, b"\0")
    checksum = b"%06o\0" % sum(block)
    return block[:148] + checksum + block[155:]


def encode(name: str) -> bytes:
    """A member name's bytes in the archive (UTF-8; undecodable bytes of a file name kept as they were)."""
    return name.encode("utf-8", "surrogateescape")


def header(name: str, epoch: int, *, size: int = 0, directory: bool = False, executable: bool = False) -> bytes:
    """The header of one member exactly as the bundle writes it: a GNU long-name record first when needed.

    The same bytes Python's tarfile writes for such a member in GNU format,
    so bundles made before this writer existed read the same.
    """
    raw = encode(name) + (b"/" if directory else b"")
    kind = b"5" if directory else b"0"
    mode = EXEC_MODE if directory or executable else FILE_MODE
    out = b""
    if len(raw) > _NAME_LEN:
        payload = raw + b"\0"
        out = _block(_LONG_NAME.encode(), b"L", mode=0, size=len(payload), mtime=0) + payload + padding(len(payload))
    return out + _block(raw, kind, mode=mode, size=size, mtime=epoch)


def padding(size: int) -> bytes:
    """The zeros after ``size`` bytes of data, up to the next block."""
    return bytes(-size % BLOCK)


def end(offset: int) -> bytes:
    """The end-of-archive blocks and the record padding after ``offset`` bytes of members."""
    return bytes(2 * BLOCK + (-(offset + 2 * BLOCK) % RECORD))


class Writer:
    """The uncompressed tar of a bundle, member by member; members must come in ``entry_order``."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.out = io.BytesIO()

    def directory(self, name: str) -> None:
        self.out.write(header(name, self.epoch, directory=True))

    def file(self, name: str, data: bytes, executable: bool) -> None:
        self.out.write(header(name, self.epoch, size=len(data), executable=executable))
        self.out.write(data)
        self.out.write(padding(len(data)))

    def close(self) -> bytes:
        """The whole tar, its end-of-archive blocks written."""
        self.out.write(end(self.out.tell()))
        return self.out.getvalue()


def executable(data: bytes, mode_bit: bool) -> bool:
    """Whether the bundle writes a file 0755: its owner-execute bit was set, or it starts with ``#!``."""
    return mode_bit or data.startswith(b"#!")


def parents(names: Collection[str]) -> list[str]:
    """Every directory above ``names``, sorted: the directory entries the bundle writes."""
    dirs: set[str] = set()
    for name in names:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return sorted(dirs)


def entry_order(name: str) -> bytes:
    """The sort key of the members: their names' bytes."""
    return encode(name)


def compress(tar: bytes) -> bytes:
    """The ``.tar.gz``: one gzip member at level 9, no file name, mtime 0."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0, compresslevel=COMPRESSLEVEL) as gz:
        gz.write(tar)
    return out.getvalue()


# The gzip header compress writes (magic, deflate, no flags, mtime 0, best compression, OS unknown).
GZIP_HEADER = compress(b"")[:10]


# --------------------------------------------------------------------------- reading


class NotBundle(Exception):
    """The bytes are not in the bundle format at a point after which nothing read can be trusted."""


class _BadWrapper(NotBundle):
    """The gzip wrapper is not the writer's (reported with the file's name)."""


class _Gunzip:
    """The tar bytes of the ``.tar.gz`` in ``raw``: the writer's gzip header, one member, nothing after it.

    Bounded both ways: at most ``limit`` bytes out, and no more compressed
    bytes in than that (a deflate stream of empty blocks is refused too).
    """

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self.raw = raw
        self.limit = limit
        self.whole = hashlib.sha256()
        self.read_in = 0
        self.out = 0
        self.crc = 0
        self.z = zlib.decompressobj(-zlib.MAX_WBITS)
        self.buffer = bytearray()
        self.done = False
        self._header()

    def _raw(self, n: int) -> bytes:
        data = self.raw.read(n)
        self.whole.update(data)
        self.read_in += len(data)
        if self.read_in > self.limit + _HEADER_SLACK:
            raise _BadWrapper(f"more than {self.limit + _HEADER_SLACK} compressed bytes; refused")
        return data

    def _header(self) -> None:
        """The writer's gzip header; one that differs only in its informational bytes (XFL, OS) is noted."""
        head = self._raw(len(GZIP_HEADER))
        if head[:2] != GZIP_HEADER[:2]:
            raise _BadWrapper("not a readable .tar.gz (not a gzip file)")
        self.note: str | None = None
        if head[:8] != GZIP_HEADER[:8]:
            fields = [
                what
                for what, at in (("method", slice(2, 3)), ("flags", slice(3, 4)), ("mtime", slice(4, 8)))
                if head[at] != GZIP_HEADER[at]
            ]
            raise _BadWrapper(
                f"gzip header {head.hex()} ({', '.join(fields)}) is not the one patchkit bundle writes "
                f"({GZIP_HEADER.hex()}); refused"
            )
        if head != GZIP_HEADER:
            self.note = (
                f"gzip header {head.hex()} (extra flags, OS) is not the one patchkit bundle writes "
                f"({GZIP_HEADER.hex()})"
            )

    def read(self, n: int) -> bytes:
        """Up to ``n`` tar bytes; empty only at the end, once the gzip trailer was checked."""
        while len(self.buffer) < n and not self.done:
            self._inflate()
        out = bytes(self.buffer[:n])
        del self.buffer[:n]  # O(1) at a bytearray's front
        return out

    def _inflate(self) -> None:
        chunk = self._raw(_READ)
        try:
            data = self.z.decompress(chunk)
        except zlib.error as e:
            raise _BadWrapper(f"not a readable .tar.gz ({e})") from e
        self.out += len(data)
        if self.out > self.limit:
            raise _BadWrapper(f"unpacks to more than {self.limit} bytes; refused")
        self.crc = zlib.crc32(data, self.crc)
        self.buffer += data
        if self.z.eof:
            self._trailer(self.z.unused_data)
        elif not chunk:
            raise _BadWrapper("the gzip stream ends early (cut short?)")

    def _trailer(self, rest: bytes) -> None:
        rest += self._raw(9 - len(rest)) if len(rest) < 9 else b""
        if len(rest) < 8:
            raise _BadWrapper("the gzip stream ends inside its trailer (cut short?)")
        crc, size = int.from_bytes(rest[:4], "little"), int.from_bytes(rest[4:8], "little")
        if crc != self.crc or size != self.out % (1 << 32):
            raise _BadWrapper("the gzip trailer's CRC or length does not match the data; refused")
        if len(rest) > 8:
            raise _BadWrapper(
                "bytes after the gzip stream (a second gzip member or trailing data, which gzip -d would "
                "unpack or warn about); refused"
            )
        self.done = True


class _Blocks:
    """The tar bytes read in blocks, with the offset of each."""

    def __init__(self, stream: _Gunzip) -> None:
        self.stream = stream
        self.offset = 0

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes, fewer only at the end of the archive."""
        out = self.stream.read(n)
        self.offset += len(out)
        return out

    def exactly(self, n: int, what: str) -> bytes:
        at = self.offset
        out = self.read(n)
        if len(out) < n:
            raise NotBundle(f"the archive ends inside {what} at byte {at} (cut short?)")
        return out


def _cstr(field: bytes) -> bytes:
    return field.split(b"\0", 1)[0]


def _number(field: bytes) -> int:
    """A numeric header field as GNU tar reads it: octal digits (spaces, NULs around), or base-256."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        if field[0] == 0xFF:
            raise NotBundle("a negative number in a header field")
        return value
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not text:
        return 0
    if not all(48 <= c <= 55 for c in text):
        raise NotBundle(f"header field {field!r} is not an octal number")
    return int(text, 8)


def _is_header(block: bytes) -> bool:
    """Whether ``block``'s checksum holds (GNU tar accepts the unsigned or the signed byte sum)."""
    try:
        stored = _number(block[148:156])
    except NotBundle:
        return False
    rest = block[:148] + b" " * 8 + block[156:]
    unsigned = sum(rest)
    signed = sum(b - 256 if b > 127 else b for b in rest)
    return stored in (unsigned, signed)


def shown(text: str, limit: int = 200) -> str:
    """A name for a message: control characters escaped, cut to ``limit`` characters."""
    from patchkit.core.safe import printable

    out = printable(text)
    return out if len(out) <= limit else out[:limit] + f"… ({len(text)} characters)"


# The header fields of a block, for saying which ones differ from what the bundle writes.
_FIELDS = (
    ("name", 0, 100),
    ("mode", 100, 108),
    ("uid", 108, 116),
    ("gid", 116, 124),
    ("size", 124, 136),
    ("mtime", 136, 148),
    ("type", 156, 157),
    ("linkname", 157, 257),
    ("magic", 257, 265),
    ("uname", 265, 297),
    ("gname", 297, 329),
    ("devmajor", 329, 337),
    ("devminor", 337, 345),
    ("prefix", 345, 500),
    ("padding", 500, 512),
)
_OWNER_FIELDS = {"mode", "uid", "gid", "uname", "gname"}
_KINDS = {
    b"1": "a hard link",
    b"2": "a symlink",
    b"3": "a character device",
    b"4": "a block device",
    b"6": "a fifo",
    b"\0": "an old-style regular file ('\\0')",
    b"7": "a contiguous file ('7')",
    b"x": "a pax extended header ('x')",
    b"g": "a pax global header ('g')",
    b"X": "a Solaris extended header ('X')",
    b"K": "a GNU long link name ('K')",
    b"S": "a GNU sparse file ('S')",
    b"D": "a GNU dump directory ('D')",
    b"M": "a GNU multi-volume continuation ('M')",
    b"N": "a GNU old long name ('N')",
    b"V": "a GNU volume label ('V')",
}


@dataclass
class Member:
    """One member as read: its name, whether a directory, its mode, data and offset."""

    name: str
    directory: bool
    mode: int
    data: bytes
    offset: int


class _Reader:
    """The members of a bundle's tar, each checked against the writer's bytes for it."""

    def __init__(self, blocks: _Blocks, limits: Limits, problems: list[str]) -> None:
        self.blocks = blocks
        self.limits = limits
        self.problems = problems
        self.epoch: int | None = None
        self.total = 0

    def refuse(self, problem: str) -> NoReturn:
        raise NotBundle(problem)

    def members(self) -> Iterator[Member]:
        """Every member up to the end-of-archive blocks, which are checked too."""
        while True:
            at = self.blocks.offset
            block = self.blocks.exactly(BLOCK, "a header")
            if block == bytes(BLOCK):
                self.end(at)
                return
            yield self.member(at, block)

    def header_block(self, at: int, block: bytes) -> bytes:
        if not _is_header(block):
            self.refuse(
                f"byte {at}: a block that is not a tar header (bad checksum); GNU tar would skip it and read "
                "the members after it; refused"
            )
        return block

    def long_name(self, at: int, block: bytes) -> tuple[bytes, bytes, bytes]:
        """A GNU long name (bounded before it is read): its raw bytes, the name, the header it names."""
        size = self.number(block[124:136], at)
        if size > MAX_LONG_NAME:
            self.refuse(f"byte {at}: a GNU long name of {size} bytes, over the {MAX_LONG_NAME}-byte limit; refused")
        data = self.blocks.exactly(size + len(padding(size)), "a GNU long name")
        nxt = self.header_block(self.blocks.offset, self.blocks.exactly(BLOCK, "a header"))
        if nxt[156:157] == b"L":
            self.refuse(f"byte {at}: two GNU long names in a row; refused")
        return block + data, _cstr(data[:size]), nxt

    def number(self, field: bytes, at: int) -> int:
        try:
            return _number(field)
        except NotBundle as e:
            self.refuse(f"byte {at}: {e}; refused")

    def member(self, at: int, block: bytes) -> Member:
        """The member at ``at``: the writer's header for what it says, then its data."""
        block = self.header_block(at, block)
        prefix = b""
        raw_name = _cstr(block[0:100])
        if block[156:157] == b"L":
            prefix, raw_name, block = self.long_name(at, block)
        kind = block[156:157]
        name = raw_name.decode("utf-8", "surrogateescape")
        if kind == b"5":
            name = name.removesuffix("/")
        if kind not in (b"0", b"5"):
            self.refuse(self.kind_problem(kind, name, block, at))
        size = self.number(block[124:136], at)
        mode = self.number(block[100:108], at)
        self.bounded(name, size, at)
        self.canonical(prefix + block, name, kind, size, mode, at)
        data = self.blocks.exactly(size, f"the data of {shown(name)}") if kind == b"0" else b""
        if self.blocks.exactly(len(padding(size)), "padding") != padding(size):
            self.refuse(f"byte {self.blocks.offset}: {shown(name)}: data padding that is not zeros; refused")
        return Member(name, kind == b"5", mode, data, at)

    def kind_problem(self, kind: bytes, name: str, block: bytes, at: int) -> str:
        """Why a member of another type than a file or a directory is refused."""
        if kind in (b"1", b"2"):
            return link_problem(name, kind, _cstr(block[157:257]).decode("utf-8", "surrogateescape"))
        if kind in (b"3", b"4", b"6"):
            return f"{shown(name)}: device or fifo; refused"
        what = _KINDS.get(kind, f"member type {kind!r}")
        return f"byte {at}: {shown(name)}: {what}, which patchkit bundle never writes; refused"

    def bounded(self, name: str, size: int, at: int) -> None:
        """A member's size within the limits, before any of its data is read."""
        if size > self.limits.member:
            self.refuse(f"{shown(name)}: {size} bytes, over the {self.limits.member}-byte limit per member; refused")
        self.total += size
        if self.total > self.limits.total:
            self.refuse(f"{shown(name)}: the bundle exceeds {self.limits.total} bytes unpacked here; refused")

    def canonical(self, raw: bytes, name: str, kind: bytes, size: int, mode: int, at: int) -> None:
        """The header bytes against the writer's for this member; modes and owners are reported, the rest refused."""
        if self.epoch is None:
            self.epoch = self.number(raw[-BLOCK:][136:148], at)
        try:
            wanted = header(name, self.epoch, size=size, directory=kind == b"5", executable=mode == EXEC_MODE)
        except ValueError:
            wanted = b""
        if raw == wanted:
            return
        got, want = raw[-BLOCK:], wanted[-BLOCK:] if wanted else bytes(BLOCK)
        differ = [f for f, a, b in _FIELDS if got[a:b] != want[a:b]]
        if len(raw) != len(wanted) or raw[:-BLOCK] != wanted[:-BLOCK]:
            differ.insert(0, "GNU long name record")
        owner = [f for f in differ if f in _OWNER_FIELDS]
        if owner:
            try:
                self.problems.append(f"{shown(name)}: {_owner_problem(got, kind)}; refused")
            except NotBundle as e:
                self.refuse(f"byte {at}: {shown(name)}: {e}; refused")
        rest = [f for f in differ if f not in _OWNER_FIELDS] or ([] if owner else ["checksum"])
        if rest:
            self.refuse(
                f"byte {at}: {shown(name)}: header {', '.join(rest)} not as patchkit bundle writes "
                "(a field another tar reader could read differently); refused"
            )

    def end(self, at: int) -> None:
        """The end-of-archive: zeros, exactly as many as the writer pads with, then the end of the data."""
        wanted = len(end(at))
        seen = BLOCK
        while chunk := self.blocks.read(_READ):
            if chunk.count(0) != len(chunk):
                first = self.blocks.offset - len(chunk) + next(i for i, b in enumerate(chunk) if b)
                self.refuse(
                    f"byte {first}: data after the end-of-archive block; a reader that skips zero blocks "
                    "(tar --ignore-zeros) would extract it; refused"
                )
            seen += len(chunk)
        if seen != wanted:
            self.problems.append(
                f"the archive ends with {seen} bytes of zeros after its last member, not the {wanted} patchkit "
                "bundle writes; refused"
            )


def _owner_problem(block: bytes, kind: bytes) -> str:
    """A header's mode and owner against the format's (mode 0644/0755, owner 0:0, no names)."""
    mode, uid, gid = (_number(block[a:b]) for a, b in ((100, 108), (108, 116), (116, 124)))
    uname, gname = (_cstr(block[a:b]).decode("utf-8", "surrogateescape") for a, b in ((265, 297), (297, 329)))
    bad = []
    if mode not in ((EXEC_MODE,) if kind == b"5" else (FILE_MODE, EXEC_MODE)):
        bad.append(f"mode {mode:04o}")
    if uid or gid or uname or gname:
        who = f"{uid}:{gid}" + (f" ({uname}:{gname})" if uname or gname else "")
        bad.append(f"owner {shown(who)}")
    fixed = "0755" if kind == b"5" else "0644 or 0755"
    return f"{', '.join(bad) or 'owner fields'}; the bundle format fixes mode {fixed} and owner 0:0 with no names"


def link_problem(name: str, kind: bytes, target: str) -> str:
    """A link member's refusal, saying whether it points outside the bundle."""
    what = "symlink" if kind == b"2" else "hard link"
    base = name.rsplit("/", 1)[0] if "/" in name and kind == b"2" else ""
    resolved = os.path.normpath(os.path.join(base, target))
    out = target.startswith("/") or resolved == ".." or resolved.startswith("../")
    return (
        f"{shown(name)}: {what} to {shown(target)}{', outside the bundle' if out else ''}; refused "
        "(a bundle holds no links)"
    )


def name_problem(name: str) -> str | None:
    """Why a member name is no relative path inside the bundle, or None."""
    if name.startswith("/"):
        return "absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "path traversal ('..')"
    if name == "" or any(p in ("", ".") for p in parts):
        return "not a normalised relative path"
    return None


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
        if any(len(encode(p)) > self.NAME_MAX for p in parts):
            return os.strerror(errno.ENAMETOOLONG)
        above = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if any(p in self.files for p in above):
            return os.strerror(errno.ENOTDIR)
        if name in self.files or (not directory and name in self.dirs):
            return os.strerror(errno.EEXIST)
        self.dirs.update(above)
        (self.dirs if directory else self.files).add(name)
        return None


@dataclass
class Contents:
    """What a bundle holds, as read: every file's sha256, the bytes of the files asked for, its problems.

    ``problems`` is empty only when the archive is byte for byte what the
    writer makes of these files; ``complete`` says it was read to its end (so
    a missing file is really missing).
    """

    sha256: str = ""
    files: dict[str, str] = field(default_factory=dict)
    kept: dict[str, bytes] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    complete: bool = False
    # Differences from the writer's bytes that change nothing tar unpacks (member order, a missing
    # directory entry, the gzip header's OS byte): reported only when nothing else is, so that the
    # line a user reads is the one that matters, and the bundle is refused either way.
    form: list[str] = field(default_factory=list)


class _Collector:
    """The members as ``tar -x`` would unpack them: names, layout, order, limits; files hashed in memory."""

    def __init__(self, contents: Contents, keep: Collection[str], limits: Limits) -> None:
        self.contents = contents
        self.keep = keep
        self.limits = limits
        self.seen: set[str] = set()
        self.count = 0
        self.order: list[tuple[bytes, str, bool]] = []
        self.layout = _Layout()
        self.form = contents.form

    def add(self, m: Member) -> None:
        problems = self.contents.problems
        self.count += 1
        if self.count > self.limits.members:
            raise NotBundle(f"more than {self.limits.members} members; refused")
        why = name_problem(m.name)
        if why is None and m.name in self.seen:
            why = "duplicate member"
        self.seen.add(m.name)
        if why is not None:
            problems.append(f"{shown(m.name)}: {why}; refused")
            return
        self.order.append((entry_order(m.name), m.name, m.directory))
        error = self.layout.make(m.name, directory=m.directory)
        if error is not None:
            problems.append(f"{shown(m.name)}: cannot unpack ({error}); refused")
            return
        if m.directory:
            self.contents.dirs.append(m.name)
            return
        if m.mode == FILE_MODE and executable(m.data, False):
            self.form.append(f"{shown(m.name)}: starts with #! but has mode 0644 (patchkit bundle writes 0755)")
        self.contents.files[m.name] = sha256_bytes(m.data)
        if m.name in self.keep:
            self.contents.kept[m.name] = m.data

    def finish(self) -> None:
        """The order and the directory entries against the writer's; stray directories are refused."""
        files = [n for _, n, d in self.order if not d]
        holding = parents(files)
        self.contents.problems += [
            f"{shown(d)}: a directory that holds no file of the bundle; refused"
            for d in sorted(set(self.contents.dirs) - set(holding))
        ]
        missing = sorted(set(holding) - set(self.contents.dirs))
        if missing:
            self.form.append(f"{shown(missing[0])}: a directory with no entry of its own (patchkit bundle writes one)")
        keys = [k for k, _, _ in self.order]
        for (a, name, _), b in zip(self.order[1:], keys, strict=False):
            if a <= b:
                self.form.append(f"{shown(name)}: out of order (patchkit bundle writes members sorted by name)")
                break


def read(
    raw: BinaryIO,
    name: str,
    keep: Collection[str] = (),
    limits: Limits = LIMITS,
    check: Callable[[Contents], list[str]] | None = None,
) -> Contents:
    """Read the ``.tar.gz`` in ``raw`` as the bundle format: its files and every way it differs from the format.

    Reading stops at the first difference after which the bytes could mean
    something else to another reader; differences it can read past (a mode,
    an owner, a name, a duplicate) are all reported. ``check`` adds the
    problems of the contents of an archive read to its end (sums, pins).
    ``name`` is the file's name in messages about the gzip wrapper.
    """
    contents = Contents()
    gunzip: _Gunzip | None = None
    try:
        gunzip = _Gunzip(raw, limits.stream)
        blocks = _Blocks(gunzip)
        collector = _Collector(contents, keep, limits)
        if gunzip.note is not None:
            collector.form.append(gunzip.note)
        for member in _Reader(blocks, limits, contents.problems).members():
            collector.add(member)
        collector.finish()
        contents.complete = True
    except _BadWrapper as e:
        contents.problems.append(f"{name}: {e}")
    except NotBundle as e:
        contents.problems.append(str(e))
    except OSError as e:
        contents.problems.append(f"{name}: not a readable .tar.gz ({e.strerror or e})")
    if contents.complete and gunzip is not None:
        contents.sha256 = gunzip.whole.hexdigest()  # every byte was read: the trailer is checked to the end
    if contents.complete and check is not None:
        contents.problems += check(contents)
    if not contents.problems:
        contents.problems = [f"{p}; refused" for p in contents.form]
    return contents
