"""Provenance for a bundle: an in-toto Statement v1 with a SLSA provenance v1 predicate, in DSSE.

The statement's subjects are the bundle itself and every file in it (name
and sha256), so a host can check any one file it unpacked. The predicate
names what the bundle was built from: the bundled lockfile (external
parameter) and each pin in it (resolved dependencies: images by digest, the
model by commit, upstreams by commit, wheel or tree digest). It carries no
time stamp, so attesting the same bundle twice gives the same bytes.

The DSSE envelope signs ``PAE(payloadType, payload)`` with the same Ed25519
key as the SSH signatures; ``keyid`` is the key's OpenSSH fingerprint, and
verification finds the key in the allowed-signers file by it. The file
``<bundle>.intoto.jsonl`` holds one envelope per line (the in-toto/SLSA
convention for attestation bundles).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit import __version__
from patchkit.core.values import LOCKFILE_NAME
from patchkit.lockfile.model import Lockfile
from patchkit.lockfile.reader import loads
from patchkit.signing.signers import AllowedSigner, Match, find
from patchkit.signing.sshsig import NAMESPACE, BadSignature, fingerprint

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from patchkit.bundle.tar import Contents

SUFFIX = ".intoto.jsonl"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:patchkit:buildtype:bundle:v1"
BUILDER_ID = "urn:patchkit:builder:bundle"


@dataclass(frozen=True)
class BundleContents:
    """A bundle's sha256, every regular file in it with its sha256, and its lockfile."""

    sha256: str
    members: dict[str, str]
    lock: Lockfile
    lock_sha256: str


@dataclass(frozen=True)
class Attested:
    """A verified attestation: who signed it and which pins it names."""

    match: Match
    dependencies: tuple[str, ...]


def attestation_path(bundle: Path) -> Path:
    return bundle.with_name(bundle.name + SUFFIX)


def read_bundle(path: Path) -> BundleContents:
    """The bundle as ``verify-bundle`` reads it (``bundle.verified``); ``BadInput`` unless it verifies.

    Provenance is written only for a bundle ``verify-bundle`` accepts: the
    archive ``patchkit bundle`` writes, its SHA256SUMS and pins holding. Its
    subjects are then exactly the files ``tar -xzf`` unpacks.
    """
    from patchkit.bundle.archive import verified

    return contents_of(path, verified(path))


def contents_of(path: Path, read: Contents) -> BundleContents:
    """What a statement names of a bundle already read and found sound (no ``problems``)."""
    lock_data = read.kept[LOCKFILE_NAME]  # a bundle that verifies holds its lockfile
    lock = loads(lock_data.decode("utf-8"), f"{path.name}:{LOCKFILE_NAME}")
    return BundleContents(read.sha256, dict(read.files), lock, hashlib.sha256(lock_data).hexdigest())


def dependencies(lock: Lockfile) -> list[dict[str, object]]:
    """SLSA resource descriptors for every pin: images, the model, upstreams."""
    out: list[dict[str, object]] = []
    for img in lock.images:
        d: dict[str, object] = {
            "name": f"images.{img.name}",
            "uri": f"docker://{img.reference}",
            "digest": {"sha256": img.digest.hex},
        }
        notes = {k: v for k, v in (("tag", img.tag), ("platform", img.platform)) if v}
        if img.platform_digest is not None:
            notes["platform_digest"] = str(img.platform_digest)
        if notes:
            d["annotations"] = notes
        out.append(d)
    if lock.model is not None:
        m = lock.model
        out.append(
            {
                "name": "model",
                "uri": f"https://huggingface.co/{m.repo}/tree/{m.revision}",
                "digest": {"gitCommit": str(m.revision)},
            }
        )
    for u in lock.upstreams:
        d = {"name": f"upstreams.{u.name}", **u.resource()}
        out.append(d)
    return out


def statement(bundle_name: str, contents: BundleContents) -> dict[str, object]:
    """The in-toto Statement v1 for a bundle (subjects sorted by name, no time stamps)."""
    subjects = [{"name": bundle_name, "digest": {"sha256": contents.sha256}}]
    subjects += [{"name": n, "digest": {"sha256": h}} for n, h in sorted(contents.members.items())]
    external: dict[str, object] = {"lockfile": {"name": LOCKFILE_NAME, "digest": {"sha256": contents.lock_sha256}}}
    if contents.lock.name:
        external["deployment"] = contents.lock.name
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": external,
                "resolvedDependencies": dependencies(contents.lock),
            },
            "runDetails": {"builder": {"id": BUILDER_ID, "version": {"patchkit": __version__}}},
        },
    }


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what the key signs, so the type cannot be swapped."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def envelope(stmt: Mapping[str, object], key: Ed25519PrivateKey) -> bytes:
    """The DSSE envelope over ``stmt``, as one JSON line (the ``.intoto.jsonl`` content)."""
    from patchkit.signing.keys import public_wire

    payload = json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode("utf-8")
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    env = {
        "payload": base64.b64encode(payload).decode("ascii"),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"keyid": fingerprint(public_wire(key)), "sig": base64.b64encode(sig).decode("ascii")}],
    }
    return (json.dumps(env, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")


def _b64(text: object, what: str) -> bytes:
    """Decode standard or URL-safe base64, padded or not (DSSE allows both alphabets)."""
    if not isinstance(text, str):
        raise BadSignature(f"{what} is not a base64 string")
    alt = b"-_" if ("-" in text or "_" in text) else None
    padded = text + "=" * (-len(text) % 4)
    try:
        return base64.b64decode(padded, altchars=alt, validate=True)
    except binascii.Error as e:
        raise BadSignature(f"{what} is not valid base64") from e


def _envelope(data: bytes) -> tuple[bytes, list[object]]:
    """The payload and signatures of the single DSSE envelope in ``data``, of the in-toto payload type."""
    lines = [line for line in data.splitlines() if line.strip()]
    if len(lines) != 1:
        raise BadSignature(f"expected one DSSE envelope, found {len(lines)} lines")
    try:
        env = json.loads(lines[0])
    except ValueError as e:
        raise BadSignature(f"not a JSON DSSE envelope ({e})") from e
    if not isinstance(env, dict) or env.get("payloadType") != PAYLOAD_TYPE:
        raise BadSignature(f"payloadType is not {PAYLOAD_TYPE!r}")
    payload = _b64(env.get("payload"), "payload")
    sigs = env.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise BadSignature("the envelope has no signatures")
    return payload, sigs


def _signer_of(
    entry: Mapping[str, object],
    payload: bytes,
    signers: tuple[AllowedSigner, ...],
    identity: str | None,
    now: datetime,
    reasons: list[str],
) -> Match | None:
    """The allowed signer whose Ed25519 key made this signature over the payload, or None.

    Each candidate key that fails says why in ``reasons``; when no allowed key is a
    candidate (and nothing failed before), that is the reason.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    sig = _b64(entry.get("sig"), "signature")
    keyid = entry.get("keyid") or None
    for s in signers:
        if s.key_type != "ssh-ed25519" or (keyid is not None and s.fingerprint != keyid):
            continue
        try:
            Ed25519PublicKey.from_public_bytes(s.key[-32:]).verify(sig, pae(PAYLOAD_TYPE, payload))
        except InvalidSignature:
            reasons.append(f"signature by {s.fingerprint} does not match the statement")
            continue
        try:
            return find(signers, s.key, NAMESPACE, identity, now)
        except BadSignature as e:
            reasons.append(str(e))
    if not reasons:
        reasons.append(f"signing key {keyid or '(no keyid)'} is not in the allowed signers")
    return None


def _signed_statement(payload: bytes) -> dict[str, object]:
    """The statement a verified payload carries: a JSON object."""
    try:
        stmt = json.loads(payload)
    except ValueError as e:
        raise BadSignature(f"the signed payload is not JSON ({e})") from e
    if not isinstance(stmt, dict):
        raise BadSignature("the signed payload is not a JSON object")
    return stmt


def open_envelope(
    data: bytes, signers: tuple[AllowedSigner, ...], identity: str | None, now: datetime
) -> tuple[dict[str, object], Match]:
    """Check the DSSE signature of the single envelope in ``data``; the statement it carries and its signer."""
    payload, sigs = _envelope(data)
    reasons: list[str] = []
    for entry in sigs:
        if not isinstance(entry, dict):
            continue
        match = _signer_of(entry, payload, signers, identity, now, reasons)
        if match is not None:
            return _signed_statement(payload), match
    raise BadSignature("; ".join(dict.fromkeys(reasons)) or "no usable signature in the envelope")


def _subjects(stmt: Mapping[str, object], problems: list[str]) -> dict[str, str]:
    """The statement's subjects, name -> sha256; one without both is a problem (a lone subject: one entry)."""
    listed: dict[str, str] = {}
    subjects = stmt.get("subject") or []
    for s in subjects if isinstance(subjects, list) else [subjects]:
        digests = s.get("digest") if isinstance(s, dict) else None
        digest = digests.get("sha256") if isinstance(digests, dict) else None
        name = s.get("name") if isinstance(s, dict) else None
        if not isinstance(digest, str) or not isinstance(name, str):
            problems.append(f"subject without a name and sha256 digest: {s!r}")
            continue
        listed[name] = digest
    return listed


def _subject_problems(listed: dict[str, str], contents: BundleContents) -> list[str]:
    """The subjects against the bundle: the bundle itself and exactly its files, each with its sha256."""
    problems: list[str] = []
    bundle_subjects = [n for n, d in listed.items() if d == contents.sha256 and n not in contents.members]
    if not bundle_subjects:
        problems.append(f"no subject is this bundle (sha256 {contents.sha256[:12]}…): the bundle changed")
    for name, digest in sorted(contents.members.items()):
        if name not in listed:
            problems.append(f"{name}: in the bundle but not a subject of the attestation")
        elif listed[name] != digest:
            problems.append(f"{name}: sha256 {digest[:12]}… differs from the attested {listed[name][:12]}…")
    problems += [
        f"{name}: attested but not in the bundle"
        for name in sorted(set(listed) - set(contents.members) - set(bundle_subjects))
    ]
    return problems


def _resolved_dependencies(stmt: Mapping[str, object], problems: list[str]) -> list[object]:
    """``predicate.buildDefinition.resolvedDependencies`` (empty, and a problem, when missing)."""
    predicate = stmt.get("predicate") if isinstance(stmt.get("predicate"), dict) else {}
    build = predicate.get("buildDefinition") if isinstance(predicate, dict) else None
    deps = build.get("resolvedDependencies") if isinstance(build, dict) else None
    if not isinstance(deps, list):
        problems.append("predicate.buildDefinition.resolvedDependencies is missing")
        return []
    return deps


def check_statement(stmt: Mapping[str, object], contents: BundleContents) -> tuple[list[str], tuple[str, ...]]:
    """Problems of a verified statement against the bundle; and the pins it names as dependencies."""
    problems: list[str] = []
    if stmt.get("_type") != STATEMENT_TYPE:
        problems.append(f"_type is not {STATEMENT_TYPE}")
    if stmt.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"predicateType is not {PREDICATE_TYPE}")
    listed = _subjects(stmt, problems)
    problems += _subject_problems(listed, contents)
    deps = _resolved_dependencies(stmt, problems)
    if deps != dependencies(contents.lock):
        problems.append("resolvedDependencies differ from the pins of the bundled lockfile")
    names = tuple(str(d.get("name")) for d in deps if isinstance(d, dict))
    return problems, names
