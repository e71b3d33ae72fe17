"""OpenSSH signatures (SSHSIG): encode, decode, sign and verify, bytes in and bytes out.

The format is openssh-portable's ``PROTOCOL.sshsig``: what ``ssh-keygen -Y
sign`` writes and ``ssh-keygen -Y verify`` reads. A signature covers the
*raw* hash of the message inside a small preamble (magic, namespace, hash
algorithm), so the same key can never be tricked into signing across
namespaces. Only Ed25519 keys are supported; a signature by any other key
type is refused with a message that says so.

Pure: no files, no clock. Callers hash or read the message themselves
(``sign_digest``/``verify_digest`` take the message's hash so large bundles
are streamed, not held in memory).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from patchkit.errors import EXIT_FINDINGS, PatchkitError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

MAGIC = b"SSHSIG"
VERSION = 1
NAMESPACE = "patchkit"
HASHALGS = ("sha256", "sha512")
DEFAULT_HASHALG = "sha512"  # what ssh-keygen uses by default
ED25519 = "ssh-ed25519"
BEGIN = "-----BEGIN SSH SIGNATURE-----"
END = "-----END SSH SIGNATURE-----"
WRAP = 70  # ssh-keygen wraps at 70 columns; PROTOCOL.sshsig allows up to 76


class BadSignature(PatchkitError):
    """A signature that does not parse or does not verify; the message says why."""

    exit_code = EXIT_FINDINGS


@dataclass(frozen=True)
class Signature:
    """A decoded SSHSIG blob.

    ``public_key`` is the signer's key in SSH wire form (what allowed_signers
    lines hold, base64-encoded); ``sig_alg``/``sig`` the inner signature.
    """

    public_key: bytes
    namespace: str
    hashalg: str
    sig_alg: str
    sig: bytes

    @property
    def key_type(self) -> str:
        return _Reader(self.public_key).string().decode("ascii", "replace")


def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


class _Reader:
    """Reads SSH wire ``string``s and ``uint32``s, failing on anything short."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str = "field") -> bytes:
        if self.pos + n > len(self.data):
            raise BadSignature(f"truncated signature blob (in the {what})")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uint32(self, what: str = "field") -> int:
        value: int = struct.unpack(">I", self.take(4, what))[0]
        return value

    def string(self, what: str = "field") -> bytes:
        return self.take(self.uint32(what), what)

    @property
    def rest(self) -> int:
        return len(self.data) - self.pos


def ed25519_wire(raw_public: bytes) -> bytes:
    """The SSH wire form of an Ed25519 public key: string("ssh-ed25519") ‖ string(32 bytes)."""
    return _string(ED25519.encode()) + _string(raw_public)


def fingerprint(public_key_wire: bytes) -> str:
    """The key's OpenSSH fingerprint, ``SHA256:<unpadded base64>`` as ``ssh-keygen -l`` prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(public_key_wire).digest()).decode().rstrip("=")


def signed_data(namespace: str, hashalg: str, digest: bytes) -> bytes:
    """The bytes the key actually signs: magic, namespace, reserved, hash algorithm, raw hash."""
    return MAGIC + _string(namespace.encode()) + _string(b"") + _string(hashalg.encode()) + _string(digest)


def message_digest(hashalg: str, message: bytes) -> bytes:
    """The raw hash SSHSIG signs (not hex: a hex hash is a classic interop bug)."""
    check_hashalg(hashalg)
    return hashlib.new(hashalg, message).digest()


def check_hashalg(hashalg: str) -> None:
    """Refuse a hash algorithm SSHSIG does not allow (before hashing gigabytes with it)."""
    if hashalg not in HASHALGS:
        raise BadSignature(f"hash algorithm {hashalg!r} is not one SSHSIG allows ({', '.join(HASHALGS)})")


def encode(sig: Signature) -> bytes:
    """The binary SSHSIG blob."""
    inner = _string(sig.sig_alg.encode()) + _string(sig.sig)
    return (
        MAGIC
        + struct.pack(">I", VERSION)
        + _string(sig.public_key)
        + _string(sig.namespace.encode())
        + _string(b"")
        + _string(sig.hashalg.encode())
        + _string(inner)
    )


def decode(blob: bytes) -> Signature:
    """Parse a binary SSHSIG blob; refuses a wrong magic, version > 1 and trailing data."""
    r = _Reader(blob)
    if r.take(len(MAGIC), "magic") != MAGIC:
        raise BadSignature("not an SSH signature (no SSHSIG magic)")
    version = r.uint32("version")
    if version != VERSION:
        raise BadSignature(f"unsupported SSHSIG version {version} (only {VERSION})")
    public_key = r.string("public key")
    namespace = r.string("namespace")
    r.string("reserved field")
    hashalg = r.string("hash algorithm")
    inner = _Reader(r.string("signature"))
    sig_alg = inner.string("signature algorithm")
    sig = inner.string("signature")
    if inner.rest or r.rest:
        raise BadSignature(f"{inner.rest + r.rest} bytes of trailing data after the signature")
    try:
        return Signature(public_key, namespace.decode("utf-8"), hashalg.decode("ascii"), sig_alg.decode("ascii"), sig)
    except UnicodeDecodeError as e:
        raise BadSignature("namespace or algorithm name is not text") from e


def armor(blob: bytes) -> bytes:
    """The armored text form (what ``.sig`` files hold), wrapped like ssh-keygen writes it."""
    text = base64.b64encode(blob).decode("ascii")
    lines = [text[i : i + WRAP] for i in range(0, len(text), WRAP)]
    return ("\n".join([BEGIN, *lines, END]) + "\n").encode("ascii")


# What ssh-keygen's b64_pton skips between base64 characters (C isspace).
_B64_SPACE = b" \t\n\v\f\r"


def dearmor(data: bytes) -> bytes:
    """The blob inside an armored signature, accepted exactly as ``ssh-keygen -Y verify`` accepts it.

    OpenSSH's ``sshsig_dearmor``: the file must begin with the BEGIN line
    and its LF (nothing before it, no CR after it); the body runs to the first
    LF followed by the END line, and whatever follows that line is ignored;
    the body is base64 with any whitespace (spaces, tabs, CR, LF) skipped.
    """
    head = f"{BEGIN}\n".encode()
    if not data.startswith(head):
        found = data.split(b"\n", 1)[0][:80].decode("ascii", "backslashreplace")
        raise BadSignature(
            f"not an armored SSH signature: the file must begin with the line '{BEGIN}' "
            f"(found {found!r}; ssh-keygen refuses it too)"
        )
    end = data.find(f"\n{END}".encode(), len(head))
    if end < 0:
        raise BadSignature(f"truncated armor: no '{END}' line")
    body = data[len(head) : end].translate(None, _B64_SPACE)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as e:
        raise BadSignature(f"armor is not valid base64 ({e})") from e


def sign_digest(
    key: Ed25519PrivateKey, digest: bytes, namespace: str = NAMESPACE, hashalg: str = DEFAULT_HASHALG
) -> bytes:
    """An armored signature over a message whose ``hashalg`` hash is ``digest``."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    check_hashalg(hashalg)
    if not namespace:
        raise BadSignature("SSHSIG needs a non-empty namespace")
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    sig = key.sign(signed_data(namespace, hashalg, digest))
    return armor(encode(Signature(ed25519_wire(raw), namespace, hashalg, ED25519, sig)))


def sign(key: Ed25519PrivateKey, message: bytes, namespace: str = NAMESPACE, hashalg: str = DEFAULT_HASHALG) -> bytes:
    """An armored signature over ``message``; byte-identical to ``ssh-keygen -Y sign``'s (Ed25519 is deterministic)."""
    return sign_digest(key, message_digest(hashalg, message), namespace, hashalg)


def parse(armored: bytes) -> Signature:
    """Dearmor and decode; checks only the form, not the signature."""
    return decode(dearmor(armored))


def verify_digest(sig: Signature, digests: dict[str, bytes], namespace: str = NAMESPACE) -> None:
    """Check ``sig`` over the message whose hashes are ``digests`` (by algorithm); raises BadSignature.

    Proves only that the key in the signature signed the message; whether
    that key is trusted is the allowed-signers file's decision.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if sig.namespace != namespace:
        raise BadSignature(f"made for namespace {sig.namespace!r}, not {namespace!r}")
    check_hashalg(sig.hashalg)
    key = _Reader(sig.public_key)
    key_type = key.string("public key type").decode("ascii", "replace")
    if key_type != ED25519 or sig.sig_alg != ED25519:
        raise BadSignature(f"signed with a {key_type} key; patchkit verifies Ed25519 (ssh-ed25519) signatures only")
    raw = key.string("public key")
    if key.rest or len(raw) != 32:
        raise BadSignature("malformed ssh-ed25519 public key in the signature")
    if len(sig.sig) != 64:
        raise BadSignature(f"malformed Ed25519 signature ({len(sig.sig)} bytes, not 64)")
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(
            sig.sig, signed_data(namespace, sig.hashalg, digests[sig.hashalg])
        )
    except InvalidSignature as e:
        raise BadSignature("signature does not match the file (the file or the signature was changed)") from e


def verify(armored: bytes, message: bytes, namespace: str = NAMESPACE) -> Signature:
    """Parse and check an armored signature over ``message``; the decoded signature, or BadSignature."""
    sig = parse(armored)
    check_hashalg(sig.hashalg)
    verify_digest(sig, {sig.hashalg: message_digest(sig.hashalg, message)}, namespace)
    return sig
