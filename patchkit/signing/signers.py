"""OpenSSH allowed-signers files: which key may sign as whom, for what, and when.

One line per trusted key, as ssh-keygen(1) "ALLOWED SIGNERS" describes::

    principals [options] keytype base64-key [comment]

``principals`` is a comma-separated pattern list (``*``, ``?``, ``!negation``);
options are ``namespaces="pattern,list"``, ``valid-after="…"``/``valid-before="…"``
(double-quoted, as ssh-keygen requires; ``YYYYMMDD[HHMM[SS]]``, local time, or UTC with a trailing ``Z``) and
``cert-authority``. Matching follows ``ssh-keygen -Y verify``: a line applies
when its key is the signature's key, its principals match the identity, the
namespace is allowed and the time is inside the validity window.

patchkit verifies plain Ed25519 keys only: a ``cert-authority`` line trusts
certificates, which patchkit does not verify, so such lines never match (and
a refusal that only such a line could have satisfied says so).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from patchkit.errors import BadInput
from patchkit.signing.sshsig import BadSignature, fingerprint

_KEY_TYPE = re.compile(r"(ssh-|ecdsa-sha2-|sk-ssh-|sk-ecdsa-sha2-|rsa-sha2-)[A-Za-z0-9@.-]+")
_TIME = re.compile(r"(\d{8})(\d{4})?(\d{2})?(Z)?")
_OPTIONS = ("cert-authority", "namespaces", "valid-after", "valid-before")


@dataclass(frozen=True)
class AllowedSigner:
    """One line of an allowed-signers file."""

    line: int
    principals: str
    key_type: str
    key: bytes
    namespaces: str | None = None
    valid_after: datetime | None = None
    valid_before: datetime | None = None
    cert_authority: bool = False

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)


@dataclass(frozen=True)
class Match:
    """The allowed-signers line that accepted a signature, and the principal it names."""

    signer: AllowedSigner
    principal: str


def match_pattern_list(name: str, patterns: str) -> bool:
    """OpenSSH's ``match_pattern_list``: comma-separated ``*``/``?`` globs, a ``!`` match vetoes."""
    found = False
    for raw in patterns.split(","):
        negated = raw.startswith("!")
        pattern = raw[1:] if negated else raw
        regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
        if re.fullmatch(regex, name, re.DOTALL):
            if negated:
                return False
            found = True
    return found


def _parse_time(text: str, where: str, name: str) -> datetime:
    m = _TIME.fullmatch(text)
    if m is None:
        raise BadInput(f"{where}: {name}={text!r} is not YYYYMMDD[HHMM[SS]][Z]", "e.g. valid-before=20270101")
    digits = m.group(1) + (m.group(2) or "0000") + (m.group(3) or "00")
    try:
        naive = datetime.strptime(digits, "%Y%m%d%H%M%S")
    except ValueError as e:
        raise BadInput(f"{where}: {name}={text!r} is not a valid date ({e})") from e
    # Without Z the time is local, as ssh-keygen reads it.
    return naive.replace(tzinfo=UTC) if m.group(4) else naive.astimezone()


def _parse_options(text: str, where: str) -> dict[str, str | None]:
    # Comma-separated; a double-quoted value may hold commas.
    parts = re.findall(r'(?:[^,"]|"[^"]*")+', text)
    if ",".join(parts) != text:
        raise BadInput(f"{where}: cannot read the options {text!r}", 'e.g. namespaces="patchkit",valid-before=20270101')
    out: dict[str, str | None] = {}
    for part in parts:
        name, eq, value = part.partition("=")
        name = name.lower()
        if name not in _OPTIONS:
            raise BadInput(f"{where}: unknown option {name!r}", f"allowed: {', '.join(_OPTIONS)}")
        if eq and not (len(value) >= 2 and value[0] == value[-1] == '"'):
            # ssh-keygen refuses unquoted values ("missing start quote"); so do we.
            raise BadInput(f"{where}: {name}= needs a double-quoted value", f'write {name}="{value}"')
        if not eq and name != "cert-authority":
            raise BadInput(f"{where}: {name} needs a value", f'write {name}="…"')
        out[name] = value[1:-1] if eq else None
    return out


def parse_line(text: str, lineno: int, filename: str) -> AllowedSigner | None:
    """One allowed-signers line; None for a blank line or a comment."""
    where = f"{filename}:{lineno}"
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return None
    if stripped.count('"') % 2:
        raise BadInput(f"{where}: unbalanced double quote", "close every quoted value")
    # Whitespace separates fields, except inside double quotes (kept, for the options).
    fields = re.findall(r'(?:[^\s"]|"[^"]*")+', stripped)
    if len(fields) < 3:
        raise BadInput(f"{where}: expected 'principals [options] keytype base64-key'", "see docs/signing.md")
    principals, rest = fields[0].replace('"', ""), fields[1:]
    options: dict[str, str | None] = {}
    if not _KEY_TYPE.fullmatch(rest[0]):
        options = _parse_options(rest[0], where)
        rest = rest[1:]
    if len(rest) < 2 or not _KEY_TYPE.fullmatch(rest[0]):
        raise BadInput(f"{where}: no key (expected 'keytype base64-key' after the principals and options)")
    key_type, key_text = rest[0], rest[1]
    try:
        key = base64.b64decode(key_text, validate=True)
    except binascii.Error as e:
        raise BadInput(f"{where}: the key is not valid base64") from e
    if key[4 : 4 + len(key_type)] != key_type.encode() or int.from_bytes(key[:4], "big") != len(key_type):
        raise BadInput(f"{where}: the key's encoded type does not match {key_type!r}")
    if "namespaces" in options and not options["namespaces"]:
        raise BadInput(f"{where}: namespaces= is empty", 'write namespaces="patchkit"')
    after = options.get("valid-after")
    before = options.get("valid-before")
    return AllowedSigner(
        line=lineno,
        principals=principals,
        key_type=key_type,
        key=key,
        namespaces=options.get("namespaces"),
        valid_after=_parse_time(after, where, "valid-after") if after else None,
        valid_before=_parse_time(before, where, "valid-before") if before else None,
        cert_authority="cert-authority" in options,
    )


def parse(data: bytes, filename: str) -> tuple[AllowedSigner, ...]:
    """Every line of an allowed-signers file; BadInput names the first bad line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{filename}: not UTF-8 text") from e
    lines = (parse_line(line, i, filename) for i, line in enumerate(text.splitlines(), start=1))
    return tuple(s for s in lines if s is not None)


def find(signers: tuple[AllowedSigner, ...], key: bytes, namespace: str, identity: str | None, now: datetime) -> Match:
    """The line that lets ``key`` sign as ``identity`` (any principal when None) in ``namespace`` at ``now``.

    Raises BadSignature with the reason the closest line refused it: the key
    is unknown, allowed for other principals, another namespace, or outside
    its validity window.
    """
    reasons: list[str] = []
    for s in signers:
        if s.key != key:
            continue
        where = f"allowed signers line {s.line}"
        if s.cert_authority:
            reasons.append(f"{where} is a cert-authority; patchkit verifies plain keys, not certificates")
            continue
        if identity is not None and not match_pattern_list(identity, s.principals):
            reasons.append(f"{where} allows this key for {s.principals!r}, not for {identity!r}")
            continue
        if s.namespaces is not None and not match_pattern_list(namespace, s.namespaces):
            reasons.append(f"{where} allows this key for namespaces {s.namespaces!r}, not {namespace!r}")
            continue
        if s.valid_after is not None and now < s.valid_after:
            reasons.append(f"{where}: key not valid before {s.valid_after.isoformat()}")
            continue
        if s.valid_before is not None and now > s.valid_before:
            reasons.append(f"{where}: key expired at {s.valid_before.isoformat()} (valid-before)")
            continue
        return Match(s, identity if identity is not None else s.principals)
    if not reasons:
        raise BadSignature(f"signing key {fingerprint(key)} is not in the allowed signers")
    raise BadSignature("; ".join(reasons))
