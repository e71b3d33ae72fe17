"""OpenSSH allowed-signers files: which key may sign as whom, for what, and when.

One line per trusted key, as ssh-keygen(1) "ALLOWED SIGNERS" describes::

    principals [options] keytype base64-key [comment]

Read byte for byte as OpenSSH 9 reads it (``sshsig.c``
``parse_principals_key_and_options``, ``misc.c`` ``strdelimw`` and
``parse_absolute_time``, ``match.c`` ``match_pattern_list``):

- ``principals`` is one field, quotes removed where they stand (``"a b",c``
  and ``al"ice"`` are fields); it is a comma-separated pattern list matched
  case-sensitively on bytes: ``*`` and ``?`` (one byte) are the wildcards, a
  matching ``!pattern`` refuses the identity whatever else matches, and a
  subpattern of 1023 bytes or more makes the whole list match nothing.
- options (case-insensitive names): ``cert-authority``, ``namespaces="list"``
  (matched like the principals), ``valid-after="…"``/``valid-before="…"``
  (``YYYYMMDD``, ``YYYYMMDDHHMM`` or ``YYYYMMDDHHMMSS``; a ``Z`` or ``UTC``
  suffix for UTC, else local *standard* time as ``mktime`` with ``tm_isdst=0``
  reads it; a day past the month's end rolls over, as ``mktime`` does).
- the key: an exact type name, then strict base64 of a key of that type.

A line ssh-keygen cannot read is skipped, not fatal: it keeps reading the
next lines, and so does ``find``. Such a line is kept with its ``problem``
(``check`` reports it; a refusal it might explain names it).

patchkit verifies plain Ed25519 keys only: a ``cert-authority`` line trusts
certificates, which patchkit does not verify, so such lines never match (and
a refusal that only such a line could have satisfied says so).
"""

from __future__ import annotations

import base64
import binascii
import calendar
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from patchkit.errors import BadInput
from patchkit.signing.sshsig import BadSignature, fingerprint

_BLANKS = b" \t\n\r"  # what a line may start with (strspn in sshsig.c)
_DELIMS = b" \t\r\n"  # misc.c WHITESPACE: what ends the principals field
_SUBPATTERN_MAX = 1023  # match.c: a longer subpattern makes the list match nothing
ED25519 = b"ssh-ed25519"
# Names sshkey_read takes for a key (sshkey.c keyimpls); patchkit compares only ssh-ed25519 keys.
_KEY_TYPES = frozenset(
    t.encode()
    for t in (
        "ssh-ed25519",
        "ssh-ed25519-cert-v01@openssh.com",
        "sk-ssh-ed25519@openssh.com",
        "sk-ssh-ed25519-cert-v01@openssh.com",
        "ssh-rsa",
        "rsa-sha2-256",
        "rsa-sha2-512",
        "ssh-rsa-cert-v01@openssh.com",
        "rsa-sha2-256-cert-v01@openssh.com",
        "rsa-sha2-512-cert-v01@openssh.com",
        "ssh-dss",
        "ssh-dss-cert-v01@openssh.com",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "ecdsa-sha2-nistp256-cert-v01@openssh.com",
        "ecdsa-sha2-nistp384-cert-v01@openssh.com",
        "ecdsa-sha2-nistp521-cert-v01@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
        "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com",
    )
)
_B64 = re.compile(rb"[A-Za-z0-9+/]*={0,2}")
_SPACE = b" \t\n\v\f\r"  # isspace(), what strptime skips before a number
_OPTION_NAMES = "cert-authority, namespaces, valid-after, valid-before"


@dataclass(frozen=True)
class AllowedSigner:
    """One line of an allowed-signers file.

    ``principals`` and ``namespaces`` are the line's bytes (decoded with
    surrogateescape, so they encode back exactly). ``problem`` is set on a
    line ssh-keygen skips as malformed; such a line never matches.
    """

    line: int
    principals: str
    key_type: str
    key: bytes
    namespaces: str | None = None
    valid_after: datetime | None = None
    valid_before: datetime | None = None
    cert_authority: bool = False
    problem: str | None = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)


@dataclass(frozen=True)
class Match:
    """The allowed-signers line that accepted a signature, and the principal it names."""

    signer: AllowedSigner
    principal: str


def _raw(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def match_pattern(name: bytes, pattern: bytes) -> bool:
    """OpenSSH's ``match_pattern``: ``*`` any bytes, ``?`` one byte, everything else itself (case-sensitive).

    The usual two-pointer glob match, linear in practice: a hostile pattern
    cannot make it backtrack exponentially (a regex could).
    """
    n = p = 0
    star, mark = -1, 0
    while n < len(name):
        if p < len(pattern) and (pattern[p] == 63 or pattern[p] == name[n]) and pattern[p] != 42:
            n, p = n + 1, p + 1
        elif p < len(pattern) and pattern[p] == 42:
            star, mark, p = p, n, p + 1
        elif star >= 0:
            mark += 1
            n, p = mark, star + 1
        else:
            return False
    return all(c == 42 for c in pattern[p:])


def match_pattern_list(name: str | bytes, patterns: str | bytes) -> bool:
    """OpenSSH's ``match_pattern_list(name, patterns, 0) == 1``.

    Comma-separated subpatterns; a matching ``!subpattern`` refuses at once;
    a subpattern of 1023 bytes or more ends the list with no match; a
    trailing comma adds no empty subpattern. Bytes are compared: ``?`` is one
    byte, not one character.
    """
    s, pat = _raw(name).split(b"\0")[0], _raw(patterns)
    found = False
    i = 0
    while i < len(pat):
        negated = pat[i : i + 1] == b"!"
        i += negated
        end = pat.find(b",", i)
        end = len(pat) if end < 0 else end
        if end - i >= _SUBPATTERN_MAX:
            return False
        if match_pattern(s, pat[i:end]):
            if negated:
                return False
            found = True
        i = end + 1
    return found


class _Malformed(Exception):
    """Why ssh-keygen skips a line."""


def _principals_field(rest: bytes) -> tuple[bytes, bytes]:
    """misc.c ``strdelimw``: the first field (quotes removed where they stand) and what follows it."""
    at = next((i for i, c in enumerate(rest) if c in _DELIMS or c == 34), None)
    if at is None:
        raise _Malformed("expected 'principals [options] keytype base64-key'")
    if rest[at] != 34:  # a blank ends the field
        return rest[:at], rest[at + 1 :].lstrip(_DELIMS)
    unquoted = rest[:at] + rest[at + 1 :]
    close = unquoted.find(b'"', at)
    if close < 0:
        raise _Malformed("unbalanced double quote in the principals")
    return unquoted[:close], unquoted[close + 1 :].lstrip(_DELIMS)


def _b64decode(text: bytes) -> bytes | None:
    """OpenBSD ``b64_pton``: blanks skipped, padding and unused bits exact; None if not."""
    packed = bytes(c for c in text if c not in _SPACE)
    if len(packed) % 4 or not _B64.fullmatch(packed):
        return None
    try:
        out = base64.b64decode(packed, validate=True)
    except binascii.Error:
        return None
    return out if base64.b64encode(out) == packed else None


def _ed25519_blob(blob: bytes) -> bool:
    """Whether ``blob`` is exactly string("ssh-ed25519") ‖ string(32 bytes), nothing after."""
    want = len(ED25519).to_bytes(4, "big") + ED25519 + (32).to_bytes(4, "big")
    return len(blob) == len(want) + 32 and blob.startswith(want)


def _read_key(text: bytes) -> tuple[bytes, bytes] | str:
    """sshkey.c ``sshkey_read``: (type, blob) of ``keytype base64 …``, or why it is not a key."""
    space = next((i for i, c in enumerate(text) if c in b" \t"), len(text))
    name = text[:space]
    if name not in _KEY_TYPES:
        return f"expected a key type such as ssh-ed25519, found {_text(name)!r}"
    rest = text[space:].lstrip(b" \t")
    end = next((i for i, c in enumerate(rest) if c in b" \t"), len(rest))
    blob = _b64decode(rest[:end])
    if not rest or blob is None:
        return "the key is not valid base64"
    name_len = int.from_bytes(blob[:4], "big")
    if len(blob) < 4 + name_len or blob[4 : 4 + name_len] != name:
        return f"the key's encoded type does not match {_text(name)!r}"
    if name == ED25519 and not _ed25519_blob(blob):
        return "the key is not a well-formed ssh-ed25519 key"
    return name, blob


def _options_end(text: bytes) -> int:
    """sshkey.c ``sshkey_advance_past_options``: where the options field ends (blanks inside quotes kept)."""
    quoted = False
    i = 0
    while i < len(text) and (quoted or text[i] not in b" \t"):
        if text[i] == 92 and text[i + 1 : i + 2] == b'"':
            i += 1
        elif text[i] == 34:
            quoted = not quoted
        i += 1
    if i == len(text) and quoted:
        raise _Malformed("unbalanced double quote in the options")
    return i


def _dequote(opts: bytes, i: int, name: str) -> tuple[bytes, int]:
    """misc.c ``opt_dequote``: the double-quoted value at ``i`` (``\\"`` is a quote) and where it ends."""
    if opts[i : i + 1] != b'"':
        raise _Malformed(f'{name}= needs a double-quoted value ({name}="…")')
    out = bytearray()
    i += 1
    while i < len(opts) and opts[i] != 34:
        if opts[i] == 92 and opts[i + 1 : i + 2] == b'"':
            i += 1
        out.append(opts[i])
        i += 1
    if i == len(opts):
        raise _Malformed("unbalanced double quote in the options")
    return bytes(out), i + 1


# parse_absolute_time: the lengths it takes, each field's (offset, size, lowest, highest) for strptime.
_FIELDS = {
    8: ((0, 4, 0, 9999), (4, 2, 1, 12), (6, 2, 1, 31)),
    12: ((0, 4, 0, 9999), (4, 2, 1, 12), (6, 2, 1, 31), (8, 2, 0, 23), (10, 2, 0, 59)),
    14: ((0, 4, 0, 9999), (4, 2, 1, 12), (6, 2, 1, 31), (8, 2, 0, 23), (10, 2, 0, 59), (12, 2, 0, 61)),
}


def _strptime_number(chunk: bytes, low: int, high: int) -> int | None:
    """glibc strptime's ``get_number`` on one field: blanks, then digits while the value can grow."""
    text = chunk.lstrip(_SPACE)
    if not text[:1].isdigit():
        return None
    value, used = 0, 0
    for c in text:
        if not (48 <= c <= 57) or used == len(chunk) or (used and value * 10 > high):
            break
        value, used = value * 10 + c - 48, used + 1
    if used != len(text) or not low <= value <= high:
        return None  # the rest of the field would have to match the '-', 'T' or ':' after it
    return value


def parse_time(value: bytes) -> tuple[int, bool] | None:
    """misc.c ``parse_absolute_time``: (seconds since the epoch, is UTC), or None where ssh-keygen refuses.

    ``Z`` or ``UTC`` (any case) at the end means UTC; otherwise local time
    through ``mktime`` with ``tm_isdst = 0`` (standard time, even in summer).
    A time at or before the epoch is refused (OpenSSH takes 0 as "not set").
    """
    utc = False
    length = len(value)
    if length > 1 and value[-1:].lower() == b"z":
        utc, length = True, length - 1
    elif length > 3 and value[-3:].lower() == b"utc":
        utc, length = True, length - 3
    fields = _FIELDS.get(length)
    if fields is None:
        return None
    parts = [_strptime_number(value[at : at + size], low, high) for at, size, low, high in fields]
    numbers = [p for p in parts if p is not None]
    if len(numbers) != len(parts):
        return None
    year, month, day, hour, minute, second = [*numbers, 0, 0, 0][:6]
    try:
        if utc:
            seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
        else:
            seconds = int(time.mktime((year, month, day, hour, minute, second, 0, 0, 0)))
    except (OverflowError, ValueError):
        return None
    return (seconds, utc) if seconds > 0 else None


def _when(seconds: int, utc: bool) -> datetime:
    return datetime.fromtimestamp(seconds, UTC) if utc else datetime.fromtimestamp(seconds).astimezone()


@dataclass
class _Options:
    cert_authority: bool = False
    namespaces: bytes | None = None
    valid_after: tuple[int, bool] | None = None
    valid_before: tuple[int, bool] | None = None


def _option(opts: bytes, i: int, got: _Options) -> int:
    """One option at ``i`` (names case-insensitive, as ``opt_flag``/``opt_match``); where it ends."""
    head = opts[i:].lower()
    if head.startswith(b"cert-authority"):
        got.cert_authority = True
        return i + len(b"cert-authority")
    for name in (b"namespaces", b"valid-after", b"valid-before"):
        if not head.startswith(name + b"="):
            continue
        attr = name.decode().replace("-", "_")
        if getattr(got, attr) is not None:
            raise _Malformed(f"{name.decode()}= is given twice")
        value, end = _dequote(opts, i + len(name) + 1, name.decode())
        if name == b"namespaces":
            got.namespaces = value
        else:
            when = parse_time(value)
            if when is None:
                raise _Malformed(f"{name.decode()}={_text(value)!r} is not a YYYYMMDD[HHMM[SS]][Z] time after 1970")
            setattr(got, attr, when)
        return end
    return i  # not an option: the caller finds no comma here and says so


def _parse_options(opts: bytes) -> _Options:
    """sshsig.c ``sshsigopt_parse``: a leading or doubled comma is skipped, anything unknown refused."""
    got = _Options()
    i = 0
    while i < len(opts) and opts[i] not in b" \t":
        i = _option(opts, i, got)
        if i == len(opts) or opts[i] in b" \t":
            break
        if opts[i] != 44:
            raise _Malformed(f"unknown option {_text(re.split(rb'[=,]', opts[i:])[0])!r} (allowed: {_OPTION_NAMES})")
        i += 1
        if i == len(opts):
            raise _Malformed("the options end with a comma")
    if got.namespaces == b"":
        raise _Malformed('namespaces="" allows no namespace (write namespaces="patchkit")')
    if got.valid_after and got.valid_before and got.valid_before[0] <= got.valid_after[0]:
        raise _Malformed("valid-before is not after valid-after")
    return got


def _key_and_options(rest: bytes) -> tuple[bytes, bytes, _Options]:
    """The key (type, blob) and the options of what follows the principals, as ssh-keygen reads them."""
    key = _read_key(rest)
    if not isinstance(key, str):
        return *key, _Options()
    if re.split(rb"[ \t]", rest, maxsplit=1)[0] in _KEY_TYPES:
        raise _Malformed(key)  # read as options, then its blob as a key type: never a key either way
    end = _options_end(rest)
    if end == len(rest):
        raise _Malformed(f"no key ({key}); expected 'principals [options] keytype base64-key'")
    key = _read_key(rest[end + 1 :].lstrip(b" \t"))
    if isinstance(key, str):
        raise _Malformed(key)
    return *key, _parse_options(rest[:end])


def parse_line(raw: bytes, lineno: int) -> AllowedSigner | None:
    """One allowed-signers line (bytes, newline included or not); None for a blank line or a comment."""
    text = raw.split(b"\0")[0].lstrip(_BLANKS)  # a C string: a NUL ends the line
    if not text or text.startswith(b"#"):
        return None
    principals = b""
    try:
        principals, rest = _principals_field(text)
        key_type, key, opts = _key_and_options(rest)
    except _Malformed as e:
        return AllowedSigner(lineno, _text(principals), "", b"", problem=str(e))
    return AllowedSigner(
        line=lineno,
        principals=_text(principals),
        key_type=key_type.decode(),
        key=key,
        namespaces=None if opts.namespaces is None else _text(opts.namespaces),
        valid_after=None if opts.valid_after is None else _when(*opts.valid_after),
        valid_before=None if opts.valid_before is None else _when(*opts.valid_before),
        cert_authority=opts.cert_authority,
    )


def read(data: bytes) -> tuple[AllowedSigner, ...]:
    """Every line that is not blank or a comment, malformed ones with their ``problem`` (ssh-keygen skips them)."""
    lines = (parse_line(line, i) for i, line in enumerate(data.split(b"\n"), start=1))
    return tuple(s for s in lines if s is not None)


def parse(data: bytes, filename: str) -> tuple[AllowedSigner, ...]:
    """Every line of an allowed-signers file; BadInput names the first line ssh-keygen would skip."""
    found = read(data)
    for s in found:
        if s.problem is not None:
            raise BadInput(
                f"{filename}:{s.line}: {s.problem}; ssh-keygen -Y verify never uses this line",
                "see ALLOWED SIGNERS in ssh-keygen(1), or docs/signing.md",
            )
    return found


def _refusal(s: AllowedSigner, namespace: str, identity: str | None, now: int) -> str | None:
    """Why line ``s`` (holding the signature's key) does not let it sign, or None when it does."""
    where = f"allowed signers line {s.line}"
    if identity is not None and not match_pattern_list(identity, s.principals):
        return f"{where} allows this key for {s.principals!r}, not for {identity!r}"
    if s.cert_authority:
        return f"{where} is a cert-authority; patchkit verifies plain keys, not certificates"
    if s.namespaces is not None and not match_pattern_list(namespace, s.namespaces):
        return f"{where} allows this key for namespaces {s.namespaces!r}, not {namespace!r}"
    if s.valid_after is not None and now < int(s.valid_after.timestamp()):
        return f"{where}: key not valid before {s.valid_after.isoformat()}"
    if s.valid_before is not None and now > int(s.valid_before.timestamp()):
        return f"{where}: key expired at {s.valid_before.isoformat()} (valid-before)"
    return None


def find(signers: tuple[AllowedSigner, ...], key: bytes, namespace: str, identity: str | None, now: datetime) -> Match:
    """The line that lets ``key`` sign as ``identity`` (any principal when None) in ``namespace`` at ``now``.

    As ``ssh-keygen -Y verify`` decides: the first line whose principals
    match, whose key is this key (not a cert-authority), whose namespaces
    allow ``namespace`` and whose validity window holds ``now`` (whole
    seconds). Malformed lines are skipped. Raises BadSignature with the
    reason each line holding this key (or a malformed line naming the
    identity) refused it.
    """
    seconds = int(now.timestamp())
    reasons: list[str] = []
    for s in signers:
        if s.problem is not None:
            if identity is None or match_pattern_list(identity, s.principals):
                reasons.append(f"allowed signers line {s.line} is skipped: {s.problem}")
            continue
        if s.key != key:
            continue
        why = _refusal(s, namespace, identity, seconds)
        if why is None:
            return Match(s, identity if identity is not None else s.principals)
        reasons.append(why)
    if not any(s.key == key for s in signers):
        reasons.insert(0, f"signing key {fingerprint(key)} is not in the allowed signers")
    raise BadSignature("; ".join(reasons))
