"""Tar smuggling: verify-bundle says ok only for an archive GNU tar unpacks into exactly the pinned files.

The attacks are generated from a real bundle made by ``patchkit bundle``:
every pax key GNU tar knows (and unknown ones), in a pax extended or global
header, with each value spelled in every digit form (ASCII, Arabic-Indic,
superscript, fullwidth, a leading ``+``, blanks, a NUL, signs, hex, a
fraction) and every record framing (two blanks after the length, the length
itself in other digits, off by one); every header field of a member in
octal, base-256 and odd spellings, and seeded single-byte flips; every member type (regular ``0`` and
``\\0``, links, devices, directory, fifo, contiguous, GNU ``L``/``K``/``S``/
``D``/``M``/``N``/``V``, pax ``x``/``g``) swapped in or added; GNU sparse
members (old ``S``, PAX 0.0, 0.1 and 1.0) whose maps pad or reorder the
pinned bytes; garbage and data after the end; and the gzip wrapper's
variations. Archives are unpacked by the real GNU tar (as root, as a host
installs a bundle) and verified by patchkit's library; the reported attacks
and a seeded sample also through the command line.

Every archive is verified; GNU tar unpacks each one patchkit verifies ok and,
in CI, a seeded sample of the rest (``PATCHKIT_TAR_ATTACKS=all``: every one).
"""

from __future__ import annotations

import functools
import gzip
import io
import os
import random
import stat
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchkit.bundle.archive import verify_bundle
from tests.adversarial.conftest import patchkit
from tests.conftest import Invoke

SEED = 29
TAR_SAMPLE = 200  # archives GNU tar unpacks in CI besides every one verified ok; PATCHKIT_TAR_ATTACKS=all: every one
TARGET = "compose.yaml"
EVIL = b"services:\n  vllm:\n    image: evil@sha256:" + b"66" * 32 + b"\n"

Attack = tuple[str, bytes]  # (what it is, the .tar.gz bytes)


# --------------------------------------------------------------------------- the bundle as chunks


def _gz(raw: bytes) -> bytes:
    """Compressed as patchkit bundle compresses (level 9, no name, mtime 0): only the tar is hostile."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    return out.getvalue()


class Bundle:
    """A sound bundle's tar cut into members: (name, header blocks, data with padding), then its end."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.members: list[tuple[str, bytes, bytes]] = []
        last = 0
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            for ti in tar:
                stop = ti.offset_data + ti.size + (-ti.size % 512)
                self.members.append((ti.name, raw[ti.offset : ti.offset_data], raw[ti.offset_data : stop]))
                last = stop
        self.end = raw[last:]
        self.at = next(i for i, (name, _, _) in enumerate(self.members) if name == TARGET)
        self.data = self.members[self.at][2][: len(self.members[self.at][2].rstrip(b"\0"))]

    def tar(
        self, at: int | None = None, before: bytes = b"", header: bytes | None = None, data: bytes | None = None
    ) -> bytes:
        """The archive with the member at ``at`` (default: compose.yaml) changed: ``before`` it, its blocks."""
        at = self.at if at is None else at
        out = []
        for i, (_, head, body) in enumerate(self.members):
            if i == at:
                out += [before, head if header is None else header, body if data is None else data]
            else:
                out += [head, body]
        return b"".join(out) + self.end

    def appended(self, extra: bytes) -> bytes:
        """The archive with ``extra`` members after the last one, before the end-of-archive blocks."""
        return b"".join(h + b for _, h, b in self.members) + extra + self.end


def _checksum(block: bytes, signed: bool = False) -> bytes:
    rest = block[:148] + b" " * 8 + block[156:]
    total = sum(b - 256 if signed and b > 127 else b for b in rest)
    return rest[:148] + b"%06o\0 " % (total & 0o777777) + rest[156:]


def _set(block: bytes, start: int, value: bytes, width: int) -> bytes:
    return _checksum(block[:start] + value[:width].ljust(width, b"\0") + block[start + width :])


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def _header(name: str, kind: bytes, size: int = 0, linkname: str = "", mode: int = 0o644) -> bytes:
    ti = tarfile.TarInfo(name)
    ti.type, ti.size, ti.linkname, ti.mode = kind, size, linkname, mode
    return ti.tobuf(tarfile.USTAR_FORMAT if kind in (b"x", b"g") else tarfile.GNU_FORMAT)[-512:]


def _pax(payload: bytes, kind: bytes = b"x") -> bytes:
    return _header("././@PaxHeader", kind, len(payload)) + _padded(payload)


# --------------------------------------------------------------------------- spellings

_DIGITS = {
    "arabic-indic": "٠١٢٣٤٥٦٧٨٩",
    "extended-arabic": "۰۱۲۳۴۵۶۷۸۹",
    "superscript": "⁰¹²³⁴⁵⁶⁷⁸⁹",
    "fullwidth": "".join(chr(0xFF10 + i) for i in range(10)),
    "devanagari": "०१२३४५६७८९",
}


def spellings(n: int) -> dict[str, str]:
    """``n`` written every way a number can be mistaken for one."""
    text = str(n)
    out = {name: text.translate(str.maketrans("0123456789", digits)) for name, digits in _DIGITS.items()}
    out.update(
        {
            "ascii": text,
            "plus": "+" + text,
            "minus": "-" + text,
            "leading-blank": " " + text,
            "trailing-blank": text + " ",
            "leading-zeros": "000" + text,
            "nul": text + "\0",
            "hex": hex(n),
            "fraction": text + ".5",
            "exponent": text + "e0",
            "underscore": "1_0" if n else "0_0",
            "huge": "9" * 40,
            "empty": "",
        }
    )
    return out


def record(key: str, value: str, blanks: int = 1, length: str = "ascii", delta: int = 0) -> bytes:
    """One pax record ``LEN key=value\\n``: ``blanks`` after the length, spelled ``length``, off by ``delta``."""
    rest = b" " * blanks + f"{key}={value}".encode("utf-8", "surrogateescape") + b"\n"
    size = next(len(rest) + d for d in range(1, 10) if len(str(len(rest) + d)) == d)
    return spellings(size + delta)[length].encode() + rest


# Every pax key GNU tar 1.34 reads (xheader.c), the ones it ignores, and unknown ones.
_NUMERIC_KEYS = {
    "size": 0,
    "uid": 1000,
    "gid": 1000,
    "mtime": 1700000000,
    "atime": 1700000000,
    "ctime": 1700000000,
    "GNU.sparse.size": 4096,
    "GNU.sparse.realsize": 4096,
    "GNU.sparse.numblocks": 1,
    "GNU.sparse.offset": 8,
    "GNU.sparse.numbytes": 8,
    "GNU.sparse.major": 1,
    "GNU.sparse.minor": 0,
    "SCHILY.devmajor": 1,
    "SCHILY.devminor": 3,
    "SCHILY.dev": 1,
    "SCHILY.ino": 1,
    "SCHILY.nlink": 2,
    "SCHILY.realsize": 4096,
}
_TEXT_KEYS = {
    "path": ["evil.yaml", "tuning/moe.csv", "../escape.yaml", "/abs.yaml", "", TARGET],
    "linkpath": ["tuning/moe.csv", "/etc/passwd"],
    "GNU.sparse.name": ["evil.yaml", "tuning/moe.csv", TARGET],
    "GNU.sparse.map": ["0,8,16,8", "8,8,0,8"],
    "uname": ["root", "nobody"],
    "gname": ["root", "nobody"],
    "comment": ["hello"],
    "charset": ["ISO-IR 10646 2000 UTF-8", "BINARY"],
    "hdrcharset": ["BINARY", "ISO-IR 10646 2000 UTF-8"],
    "SCHILY.xattr.user.patchkit": ["1"],
    "SCHILY.xattr.security.capability": ["\x01\x00\x00\x02"],
    "SCHILY.acl.access": ["user::rwx,group::rwx,other::rwx"],
    "SCHILY.acl.default": ["user::rwx"],
    "SCHILY.fflags": ["nodump"],
    "SCHILY.filetype": ["symlink"],
    "LIBARCHIVE.xattr.user.patchkit": ["MQ=="],
    "LIBARCHIVE.creationtime": ["1700000000"],
    "LIBARCHIVE.symlinktype": ["dir"],
    "RHT.security.selinux": ["system_u:object_r:bin_t:s0"],
    "PATCHKIT.unknown": ["1"],
    "VENDOR.path": ["evil.yaml"],
}


def _pax_keys(b: Bundle) -> Iterator[Attack]:
    """Every key GNU tar knows (and unknown ones), in an extended header before compose.yaml."""
    for key, n in _NUMERIC_KEYS.items():
        for form, value in spellings(n).items():
            yield f"pax x {key}={form}", _gz(b.tar(before=_pax(record(key, value))))
        for form in ("ascii", "arabic-indic", "superscript"):
            yield f"pax g {key}={form}", _gz(b.tar(before=_pax(record(key, spellings(n)[form]), b"g")))
        yield f"pax x {key}=actual-size", _gz(b.tar(before=_pax(record(key, str(len(b.data))))))
    for key, values in _TEXT_KEYS.items():
        for value in values:
            yield f"pax x {key}={value!r}", _gz(b.tar(before=_pax(record(key, value))))
            yield f"pax g {key}={value!r}", _gz(b.tar(before=_pax(record(key, value), b"g")))


def _pax_framing(b: Bundle) -> Iterator[Attack]:
    """The records' framing: blanks, the length's digits and value, terminators, repeats."""
    for key, value in (("path", "evil.yaml"), ("size", "0"), ("uid", "1000")):
        for blanks in (0, 2, 3):
            yield f"pax {key} with {blanks} blanks", _gz(b.tar(before=_pax(record(key, value, blanks=blanks))))
        for form in ("arabic-indic", "superscript", "fullwidth", "plus", "leading-zeros", "leading-blank"):
            yield f"pax {key} length {form}", _gz(b.tar(before=_pax(record(key, value, length=form))))
        for delta in (-1, 1, 100):
            yield f"pax {key} length off by {delta}", _gz(b.tar(before=_pax(record(key, value, delta=delta))))
        rec = record(key, value)
        variants = {
            "tab": rec.replace(b" ", b"\t", 1),
            "crlf": rec[:-1] + b"\r\n",
            "no newline": rec[:-1],
            "nul after": rec + b"\0" + record("path", "evil2.yaml"),
            "twice": rec + record(key, value + "0" if value.isdigit() else "other.yaml"),
            "empty then set": record(key, "") + rec,
            "two headers": rec,
        }
        for what, payload in variants.items():
            before = _pax(payload) + (_pax(record("path", TARGET)) if what == "two headers" else b"")
            yield f"pax {key} {what}", _gz(b.tar(before=before))


# The numeric fields of a ustar header: (name, offset, width, an evil value).
_FIELDS = (
    ("mode", 100, 8, 0o4777),
    ("uid", 108, 8, 1000),
    ("gid", 116, 8, 1000),
    ("size", 124, 12, 0),
    ("mtime", 136, 12, 1700000000),
    ("devmajor", 329, 8, 1),
    ("devminor", 337, 8, 3),
)


def _octal_forms(value: int, width: int) -> dict[str, bytes]:
    digits = b"%o" % value
    arabic = "".join(_DIGITS["arabic-indic"][int(c)] for c in digits.decode()).encode()
    return {
        "octal": digits.rjust(width - 1, b"0") + b"\0",
        "space-terminated": digits.rjust(width - 1, b"0") + b" ",
        "no-terminator": digits.rjust(width, b"0"),
        "leading-blanks": digits.rjust(width - 1, b" ") + b"\0",
        "trailing-blanks": digits.ljust(width, b" "),
        "plus": b"+" + digits.rjust(width - 2, b"0") + b"\0",
        "base-256": b"\x80" + value.to_bytes(width - 1, "big"),
        "base-256-negative": b"\xff" * width,
        "arabic-indic": arabic,
        "all-nul": bytes(width),
        "all-blank": b" " * width,
        "decimal": str(value).encode().rjust(width - 1, b"0") + b"\0",
    }


def _header_fields(b: Bundle) -> Iterator[Attack]:
    """compose.yaml's numeric fields in every spelling, of its own value and of another."""
    _, head, _ = b.members[b.at]
    block = head[-512:]
    for field, start, width, evil in _FIELDS:
        own = tarfile.nti(block[start : start + width]) if block[start : start + width].strip(b"\0") else 0
        for which, value in (("same", own), ("other", evil)):
            for form, spelled in _octal_forms(value, width).items():
                changed = _set(block, start, spelled, width)
                data = b"" if field == "size" and which == "other" else None
                yield f"header {field} {which} {form}", _gz(b.tar(header=head[:-512] + changed, data=data))
    texts = {
        "name-tail": (0, b"compose.yaml\0evil", 100),
        "name-blank": (0, b"compose.yaml ", 100),
        "prefix": (345, b"evil", 155),
        "linkname": (157, b"tuning/moe.csv", 100),
        "uname": (265, b"root", 32),
        "gname": (297, b"root", 32),
        "padding": (500, b"\xff" * 12, 12),
    }
    for what, (start, value, width) in texts.items():
        yield f"header {what}", _gz(b.tar(header=head[:-512] + _set(block, start, value, width)))
    for magic in (b"ustar\x0000", b"ustar\0\0\0", bytes(8), b"ustar  x"):
        changed = _set(block, 257, magic, 8)
        yield f"header magic {magic!r}", _gz(b.tar(header=head[:-512] + changed))
        posix = _set(changed, 345, b"evil", 155)
        yield f"header magic {magic!r} with prefix", _gz(b.tar(header=head[:-512] + posix))
    high = _set(block, 500, b"\xff", 12)
    yield "header signed checksum", _gz(b.tar(header=head[:-512] + _checksum(high, signed=True)))
    yield "header bad checksum", _gz(b.tar(header=head[:-512] + block[:148] + b"0000000\0" + block[156:]))


_TYPES = {
    b"0": "regular",
    b"\0": "old regular",
    b"1": "hard link",
    b"2": "symlink",
    b"3": "char device",
    b"4": "block device",
    b"5": "directory",
    b"6": "fifo",
    b"7": "contiguous",
    b"L": "GNU long name",
    b"K": "GNU long link",
    b"S": "GNU sparse",
    b"D": "GNU dumpdir",
    b"M": "GNU multi-volume",
    b"N": "GNU old long names",
    b"V": "GNU volume label",
    b"x": "pax extended",
    b"g": "pax global",
    b"X": "Solaris extended",
    b"A": "Solaris ACL",
    b"E": "Solaris extended attribute",
    b"I": "inode metadata",
    b"Z": "unknown",
}


def _member_types(b: Bundle) -> Iterator[Attack]:
    """Every member type: compose.yaml's type swapped for it, and a new member of it added."""
    head = b.members[b.at][1]
    for kind, what in _TYPES.items():
        changed = _set(head[-512:], 156, kind, 1)
        yield f"type of {TARGET} -> {what}", _gz(b.tar(header=head[:-512] + changed))
        link = "tuning/moe.csv" if kind in (b"1", b"2") else ""
        data = EVIL if kind not in (b"1", b"2", b"3", b"4", b"5", b"6") else b""
        for name in (TARGET, "evil.yaml"):
            extra = _header(name, kind, len(data), link) + _padded(data)
            yield f"added {what} {name}", _gz(b.appended(extra))
            yield f"{what} {name} before {TARGET}", _gz(b.tar(before=extra))
    long_name = _header("././@LongLink", b"L", 10) + _padded(b"evil.yaml\0")
    yield "GNU long name renames compose.yaml", _gz(b.tar(before=long_name))
    yield "GNU long name, NUL-less", _gz(b.tar(before=_header("././@LongLink", b"L", 9) + _padded(b"evil.yaml")))
    long_link = _header("././@LongLink", b"K", 15) + _padded(b"tuning/moe.csv\0")
    yield "GNU long link before compose.yaml", _gz(b.tar(before=long_link))
    yield "volume label first", _gz(_header("label", b"V") + b.raw)


def _old_sparse(name: str, chunks: list[tuple[int, int]], realsize: int, data: bytes) -> bytes:
    block = _header(name, b"S", len(data))
    for i, (offset, size) in enumerate(chunks[:4]):
        block = _set(block, 386 + 24 * i, b"%011o\0" % offset, 12)
        block = _set(block, 398 + 24 * i, b"%011o\0" % size, 12)
    return _set(block, 483, b"%011o\0" % realsize, 12) + _padded(data)


def _sparse(b: Bundle) -> Iterator[Attack]:
    """GNU sparse members of compose.yaml's bytes whose map pads, reorders or cuts them."""
    data = b.data
    half = len(data) // 2
    maps = {
        "identity": ([(0, len(data))], len(data)),
        "padded": ([(64, len(data))], len(data) + 64),
        "reordered": ([(len(data) - half, half), (0, len(data) - half)], len(data)),
        "cut": ([(0, half)], half),
        "hole-between": ([(0, half), (half + 16, len(data) - half)], len(data) + 16),
    }
    for what, (chunks, real) in maps.items():
        yield f"GNU old sparse {what}", _gz(b.tar(header=b"", data=_old_sparse(TARGET, chunks, real, data)))
        pairs = b"".join(record("GNU.sparse.offset", str(o)) + record("GNU.sparse.numbytes", str(n)) for o, n in chunks)
        pax00 = record("GNU.sparse.size", str(real)) + record("GNU.sparse.numblocks", str(len(chunks))) + pairs
        yield f"PAX 0.0 sparse {what}", _gz(b.tar(before=_pax(pax00)))
        flat = ",".join(f"{o},{n}" for o, n in chunks)
        pax01 = b"".join(
            record(k, v)
            for k, v in (
                ("GNU.sparse.size", str(real)),
                ("GNU.sparse.numblocks", str(len(chunks))),
                ("GNU.sparse.map", flat),
            )
        )
        yield f"PAX 0.1 sparse {what}", _gz(b.tar(before=_pax(pax01)))
        sparse_map = _padded(("\n".join([str(len(chunks)), *(f"{o}\n{n}" for o, n in chunks)]) + "\n").encode())
        stored = sparse_map + data
        pax10 = b"".join(
            record(k, v)
            for k, v in (
                ("GNU.sparse.major", "1"),
                ("GNU.sparse.minor", "0"),
                ("GNU.sparse.name", TARGET),
                ("GNU.sparse.realsize", str(real)),
            )
        )
        member = _pax(pax10) + _header("GNUSparseFile.0/" + TARGET, b"0", len(stored)) + _padded(stored)
        yield f"PAX 1.0 sparse {what}", _gz(b.tar(header=b"", data=member))


def _structure(b: Bundle) -> Iterator[Attack]:
    """Garbage, data after the end, duplicates and cuts."""
    evil = _header(TARGET, b"0", len(EVIL)) + _padded(EVIL)
    body = b.raw[: len(b.raw) - len(b.end)]
    yield "garbage block then evil", _gz(body + b"\xde\xad\xbe\xef" * 128 + evil + b.end)
    yield "evil after the end", _gz(b.raw + evil + bytes(1024))
    yield "evil after one zero block", _gz(body + bytes(512) + evil + b.end)
    yield "duplicate compose.yaml last", _gz(b.appended(evil))
    yield "extra zero record", _gz(b.raw + bytes(10240))
    yield "no end blocks", _gz(body)
    yield "cut inside compose.yaml", _gz(b.tar()[: len(body) // 2])
    yield "nonzero data padding", _gz(b.tar(data=b.data + b"\x01" * (len(b.members[b.at][2]) - len(b.data))))


def _wrapper(b: Bundle) -> Iterator[Attack]:
    """The gzip wrapper: header fields, extra members, trailing bytes, a bad trailer."""
    good = _gz(b.raw)
    evil_tar = _header(TARGET, b"0", len(EVIL)) + _padded(EVIL) + bytes(10240 - 512 - len(_padded(EVIL)))
    yield "second gzip member", good + _gz(evil_tar)
    yield "second member after stripped end", _gz(b.raw[: len(b.raw) - len(b.end)]) + _gz(evil_tar)
    yield "trailing garbage", good + b"garbage"
    yield "trailing zeros", good + bytes(512)
    yield "bad crc", good[:-8] + bytes(4) + good[-4:]
    yield "cut", good[: len(good) // 2]
    yield "zlib os byte", gzip.compress(b.raw, mtime=0)
    yield "mtime", good[:4] + b"\x01\0\0\0" + good[8:]
    yield "fname", good[:3] + b"\x08" + good[4:10] + b"evil.tar\0" + good[10:]
    yield "fcomment", good[:3] + b"\x10" + good[4:10] + b"comment\0" + good[10:]
    yield "fextra", good[:3] + b"\x04" + good[4:10] + b"\x04\0abcd" + good[10:]
    yield "not gzip", b.raw


def _flips(b: Bundle) -> Iterator[Attack]:
    """Seeded single-byte changes: in the headers (where a reader decides what to unpack) and anywhere."""
    rng = random.Random(SEED)
    headers = [i for i in range(0, len(b.raw), 512) if b.raw[i : i + 512] != bytes(512) and _is_block_header(b, i)]
    for _ in range(150):
        at = rng.choice(headers) + rng.randrange(512)
        yield (
            f"header byte {at} flipped",
            _gz(b.raw[:at] + bytes([b.raw[at] ^ rng.randrange(1, 256)]) + b.raw[at + 1 :]),
        )
    for _ in range(50):
        at = rng.randrange(len(b.raw))
        yield f"byte {at} flipped", _gz(b.raw[:at] + bytes([b.raw[at] ^ rng.randrange(1, 256)]) + b.raw[at + 1 :])


def _is_block_header(b: Bundle, at: int) -> bool:
    starts, pos = set(), 0
    for _, head, body in b.members:
        starts.update(range(pos, pos + len(head), 512))
        pos += len(head) + len(body)
    return at in starts


def attacks(b: Bundle) -> list[Attack]:
    """Every generated attack, once each; none is the sound bundle itself (made once per bundle)."""
    return _attacks_of(b.raw)


@functools.cache
def _attacks_of(raw: bytes) -> list[Attack]:
    b = Bundle(raw)
    seen: set[bytes] = {_gz(b.raw)}
    out = []
    families = (_pax_keys, _pax_framing, _header_fields, _member_types, _sparse, _structure, _wrapper, _flips)
    for family in families:
        for label, data in family(b):
            if data not in seen:
                seen.add(data)
                out.append((label, data))
    return out


# --------------------------------------------------------------------------- what GNU tar unpacks


def unpacked(archive: Path, into: Path) -> tuple[int, dict[str, tuple[object, ...]]]:
    """GNU tar's exit status unpacking ``archive`` into ``into``, and every entry it made: kind, mode, owner, bytes."""
    into.mkdir()
    done = subprocess.run(["tar", "-xzf", str(archive), "-C", str(into)], capture_output=True, timeout=60, check=False)
    tree: dict[str, tuple[object, ...]] = {}
    for root, dirs, files in os.walk(into):
        for name in dirs + files:
            path = Path(root) / name
            st = path.lstat()
            content: object = None
            if stat.S_ISREG(st.st_mode):
                content = path.read_bytes()
            elif stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            kind = stat.S_IFMT(st.st_mode)
            tree[str(path.relative_to(into))] = (kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, content)
    return done.returncode, tree


def _clear(problem: str) -> bool:
    return "\n" not in problem and 0 < len(problem) < 500 and "Traceback" not in problem


@pytest.fixture
def bundle(deploy: Path, invoke: Invoke, tmp_path: Path) -> Bundle:
    """A real bundle of the ``deploy`` fixture, with a name long enough for a GNU long-name record."""
    deep = "tuning/" + "/".join(["d" * 60] * 2) + "/t.csv"
    (deploy / deep).parent.mkdir(parents=True)
    (deploy / deep).write_bytes(b"1\n")
    assert invoke("add", str(deploy / deep), "--target", "/opt/deep.csv", repo=deploy).exit_code == 0
    (deploy / TARGET).write_text("services:\n  vllm:\n    image: vllm/vllm-openai@sha256:" + "ab" * 32 + "\n")
    out = tmp_path / "good.tar.gz"
    r = invoke("bundle", "-o", str(out), repo=deploy)
    assert r.exit_code == 0, r.stderr
    return Bundle(gzip.decompress(out.read_bytes()))


def _unpacked_by_tar(generated: list[Attack]) -> set[int]:
    """Which archives GNU tar unpacks in this run: a seeded sample in CI, all with PATCHKIT_TAR_ATTACKS=all."""
    if os.environ.get("PATCHKIT_TAR_ATTACKS") == "all" or len(generated) <= TAR_SAMPLE:
        return set(range(len(generated)))
    return set(random.Random(SEED).sample(range(len(generated)), TAR_SAMPLE))


def test_no_generated_archive_verifies_unless_gnu_tar_unpacks_exactly_the_pinned_files(
    bundle: Bundle, tmp_path: Path
) -> None:
    """Every archive is verified; GNU tar unpacks each one verified ok (none) and a sample of the rest."""
    good = tmp_path / "good.tar.gz"
    good.write_bytes(_gz(bundle.raw))
    assert verify_bundle(good) == []
    code, pinned = unpacked(good, tmp_path / "pinned")
    assert code == 0 and TARGET in pinned and len(pinned) > 10
    generated = attacks(bundle)
    assert len(generated) > 800  # every key, form, type and field above
    sample = _unpacked_by_tar(generated)
    smuggled, unclear, refused, unpacked_n, real = [], [], 0, 0, 0
    for i, (label, data) in enumerate(generated):
        path = tmp_path / "attack.tar.gz"
        path.write_bytes(data)
        problems = verify_bundle(path)  # raises nothing, whatever the archive
        refused += bool(problems)
        unclear += [f"{label}: {p!r}" for p in problems if not _clear(p)]
        if problems and i not in sample:
            continue
        code, tree = unpacked(path, tmp_path / f"u{i}")
        unpacked_n += 1
        differs = code != 0 or tree != pinned
        real += differs
        if not problems and differs:
            smuggled.append(label)
    print(
        f"{len(generated)} generated, {refused} refused, {len(smuggled)} smuggled; GNU tar unpacked {unpacked_n}, "
        f"{real} of them differently from the pinned files"
    )
    assert smuggled == []
    assert refused == len(generated)  # each one differs from what patchkit bundle writes
    assert unclear == []
    assert real > unpacked_n // 3  # the attacks are real: GNU tar unpacks something else


# The reported attacks, each through the command line as a user runs it.
_REPORTED = (
    "pax path with 2 blanks",
    "pax x size=arabic-indic",
    "pax x uid=arabic-indic",
    "pax x GNU.sparse.name='evil.yaml'",
    "PAX 1.0 sparse padded",
    "PAX 0.0 sparse padded",
    "PAX 0.1 sparse padded",
    "GNU old sparse reordered",
    "pax x size=superscript",
)


def test_the_command_line_refuses_with_clear_lines_and_never_exit_4(bundle: Bundle, tmp_path: Path) -> None:
    generated = dict(attacks(bundle))
    sample = [*_REPORTED, *random.Random(SEED).sample(sorted(generated), 6)]
    _, pinned = unpacked(_write(tmp_path / "good.tar.gz", _gz(bundle.raw)), tmp_path / "pinned")
    for i, label in enumerate(sample):
        path = tmp_path / f"c{i}.tar.gz"
        path.write_bytes(generated[label])
        done = patchkit("verify-bundle", str(path), cwd=tmp_path)
        lines = done.stdout.splitlines()
        assert done.returncode == 1, (label, done.stdout, done.stderr)
        assert done.stderr == "", label
        assert lines[-1] == f"verify-bundle: FAILED: {len(lines) - 1} problem(s)", label
        assert all(_clear(line) for line in lines), label
        if label in _REPORTED:  # each was reported because GNU tar unpacks it differently
            code, tree = unpacked(path, tmp_path / f"u{i}")
            assert code != 0 or tree != pinned, label


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_attest_push_and_pull_refuse_what_verify_bundle_refuses(bundle: Bundle, tmp_path: Path) -> None:
    """One reader for every command that reads a bundle: none of them takes a smuggled one."""
    from patchkit.errors import BadInput, Refused
    from patchkit.ship import artifact
    from patchkit.signing import attest

    good = _write(tmp_path / "good.tar.gz", _gz(bundle.raw))
    files = {name for name, head, _ in bundle.members if head[-512:][156:157] == b"0"}
    assert set(attest.read_bundle(good).members) == files
    assert b"  lockfile.toml\n" in artifact.sums_of(good.read_bytes())
    generated = dict(attacks(bundle))
    for label in _REPORTED:
        path = _write(tmp_path / "hostile.tar.gz", generated[label])
        with pytest.raises(BadInput) as refused:
            attest.read_bundle(path)
        assert _clear(str(refused.value)) and str(refused.value).startswith(f"{path}: "), label
        with pytest.raises(BadInput):
            artifact.sums_of(generated[label])
        with pytest.raises(Refused):
            artifact._bundle_sums(generated[label], "registry.example/deploy@sha256:…")


def test_the_attest_command_refuses_a_link_or_an_escaping_path_as_verify_bundle_does(
    bundle: Bundle, tmp_path: Path
) -> None:
    """attest reads a bundle as verify-bundle does: a symlink member or a path out of the tree gets no provenance."""
    key = tmp_path / "id_ed25519"
    made = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], capture_output=True, check=False
    )
    assert made.returncode == 0, made.stderr
    good = _write(tmp_path / "good.tar.gz", _gz(bundle.raw))
    assert patchkit("attest", str(good), "--key", str(key), cwd=tmp_path).returncode == 0  # the control
    hostile = {
        "symlink": ("evil.yaml", _header("evil.yaml", b"2", 0, "/etc/passwd")),
        "escape": ("../escape.yaml", _header("../escape.yaml", b"0", len(EVIL)) + _padded(EVIL)),
    }
    for what, (member, extra) in hostile.items():
        path = _write(tmp_path / f"{what}.tar.gz", _gz(bundle.appended(extra)))
        verified = patchkit("verify-bundle", str(path), cwd=tmp_path)
        assert verified.returncode == 1 and member in verified.stdout, (what, verified.stdout)
        attested = patchkit("attest", str(path), "--key", str(key), cwd=tmp_path)
        assert attested.returncode == 2, (what, attested.stdout, attested.stderr)
        assert attested.stdout == ""
        line = attested.stderr.splitlines()[0]
        assert line.startswith(f"patchkit: error: {path}: {member}: ") and _clear(line), (what, attested.stderr)
        assert f"patchkit verify-bundle {path}" in attested.stderr
        assert not Path(f"{path}.intoto.jsonl").exists()
