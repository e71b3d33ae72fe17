"""Signing what is shipped and verifying it: files, their contents, bundles and their provenance.

``sign_files`` writes an armored SSH signature (``<file>.sig``, namespace
``patchkit``) beside each file; ``ssh-keygen -Y verify`` accepts them.
``verify_files`` checks a signature first (against an allowed-signers file),
then, only once the signer is trusted, what the file vouches for: every hash
a ``SHA256SUMS`` lists, every file a ``lockfile.toml`` pins, a bundle's own
sums and pins and its provenance attestation. ``signature_findings`` is the
part ``patchkit check`` runs when the lockfile has a ``[signing]`` table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import BadInput, PatchkitError
from patchkit.signing import sshsig
from patchkit.signing.signers import AllowedSigner, find
from patchkit.signing.sshsig import NAMESPACE, BadSignature

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from patchkit.core.findings import Finding
    from patchkit.lockfile.model import Lockfile
    from patchkit.store.repo import Repo

SIG_SUFFIX = ".sig"
_READ = 8 * 1024 * 1024
BUNDLE_SUFFIXES = (".tar.gz", ".tgz")


class Outcome(Enum):
    """The verdict on one file."""

    VERIFIED = "verified"
    FAILED = "failed"


@dataclass(frozen=True)
class FileResult:
    """What ``verify`` found for one file: the signer, and every problem or checked fact."""

    file: str
    outcome: Outcome
    signer: str | None = None
    key: str | None = None
    problems: tuple[str, ...] = ()
    details: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "outcome": self.outcome.value,
            "signer": self.signer,
            "key": self.key,
            "problems": list(self.problems),
            "details": list(self.details),
        }


def signature_path(path: Path) -> Path:
    return path.with_name(path.name + SIG_SUFFIX)


def _digest(path: Path, hashalg: str) -> bytes:
    """The raw ``hashalg`` hash of a file, streamed (a bundle can be a gigabyte)."""
    h = hashlib.new(hashalg)
    try:
        with path.open("rb") as f:
            while chunk := f.read(_READ):
                h.update(chunk)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from e
    return h.digest()


def sign_files(paths: Sequence[Path], key: Ed25519PrivateKey) -> list[Path]:
    """Sign each file; write every ``<file>.sig`` (atomically) only after all were signed."""
    from patchkit.store.repo import atomic_write

    signed = [(signature_path(p), sshsig.sign_digest(key, _digest(p, sshsig.DEFAULT_HASHALG))) for p in paths]
    for sig_path, armored in signed:
        atomic_write(sig_path, armored)
    return [s for s, _ in signed]


def attest_bundle(bundle: Path, key: Ed25519PrivateKey) -> Path:
    """Write ``<bundle>.intoto.jsonl``: the signed provenance of the bundle and every file in it."""
    from patchkit.signing import attest
    from patchkit.store.repo import atomic_write

    contents = attest.read_bundle(bundle)
    out = attest.attestation_path(bundle)
    atomic_write(out, attest.envelope(attest.statement(bundle.name, contents), key))
    return out


def load_signers(path: Path, shown: str | None = None, *, strict: bool = False) -> tuple[AllowedSigner, ...]:
    """Parse an allowed-signers file; BadInput when it is missing, unreadable or has no line ssh-keygen can use.

    A malformed line is skipped, as ``ssh-keygen -Y verify`` skips it (a
    refusal it might explain names it); ``strict`` (``check``) refuses it.
    """
    from patchkit.signing import signers

    name = shown or str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError as e:
        raise BadInput(
            f"{name}: allowed-signers file not found",
            'create it with one line per key: PRINCIPAL namespaces="patchkit" ssh-ed25519 AAAA…',
        ) from e
    except OSError as e:
        raise BadInput(f"{name}: cannot read: {e.strerror}") from e
    found = signers.parse(data, name) if strict else signers.read(data)
    if not any(s.problem is None for s in found):
        if found:
            signers.parse(data, name)  # raises, naming the first line ssh-keygen cannot read
        raise BadInput(f"{name}: no allowed signers in it", "add a line: patchkit keygen prints it")
    return found


def check_signature(path: Path, allowed: tuple[AllowedSigner, ...], identity: str | None, now: datetime) -> FileResult:
    """Only the signature of ``path``: present, well-formed, by a key allowed for ``identity`` now."""
    sig_path = signature_path(path)
    try:
        armored = sig_path.read_bytes()
    except FileNotFoundError:
        return FileResult(str(path), Outcome.FAILED, problems=(f"no signature: {sig_path} does not exist",))
    except OSError as e:
        return FileResult(str(path), Outcome.FAILED, problems=(f"{sig_path}: cannot read: {e.strerror}",))
    try:
        sig = sshsig.parse(armored)
        sshsig.check_hashalg(sig.hashalg)
        sshsig.verify_digest(sig, {sig.hashalg: _digest(path, sig.hashalg)}, NAMESPACE)
        match = find(allowed, sig.public_key, NAMESPACE, identity, now)
    except BadSignature as e:
        return FileResult(str(path), Outcome.FAILED, problems=(f"{sig_path.name}: {e}",))
    return FileResult(str(path), Outcome.VERIFIED, signer=match.principal, key=match.signer.fingerprint)


def _hash_listed(base: Path, names: Sequence[tuple[str, str]]) -> tuple[list[str], int]:
    """Hash files named relative to ``base`` against their expected sha256; (problems, files verified)."""
    from patchkit.core.hashing import sha256_many
    from patchkit.store.repo import Escape, Repo

    repo = Repo(base.resolve())
    paths: dict[str, Path] = {}
    problems: list[str] = []
    for name, _ in names:
        try:
            paths[name] = repo.check_inside(name)
        except FileNotFoundError:
            problems.append(f"{name}: listed but missing")
        except Escape as e:
            problems.append(f"{name}: {e}; refused")
    hashes = sha256_many(paths.values())
    ok = 0
    for name, want in names:
        if name not in paths:
            continue
        got = hashes[paths[name]]
        if isinstance(got, OSError):
            problems.append(f"{name}: cannot read: {got.strerror}")
        elif got != want:
            problems.append(f"{name}: sha256 {got[:12]}… does not match the signed {want[:12]}…")
        else:
            ok += 1
    return problems, ok


def _check_sums(path: Path) -> tuple[list[str], list[str]]:
    from patchkit.core import sums

    entries, bad = sums.parse(path.read_bytes(), path.name)
    problems = [p.render() for p in bad]
    found, ok = _hash_listed(path.parent, [(e.name, e.sha256) for e in entries])
    return problems + found, [f"{ok} of {len(entries)} listed files match"]


def _check_lockfile(path: Path) -> tuple[list[str], list[str]]:
    from patchkit.lockfile.reader import loads

    try:
        lock = loads(path.read_bytes().decode("utf-8"), path.name)
    except UnicodeDecodeError:
        return [f"{path.name}: not UTF-8"], []
    except PatchkitError as e:
        return [str(e)], []
    pins = [(str(rel), sha.hex) for _, rel, sha in lock.files()]
    found, ok = _hash_listed(path.parent, pins)
    return found, [f"{ok} of {len(pins)} pinned files match"]


def _check_bundle(
    path: Path, allowed: tuple[AllowedSigner, ...], identity: str | None, now: datetime
) -> tuple[list[str], list[str]]:
    from patchkit.bundle.archive import read_bundle
    from patchkit.signing import attest

    read = read_bundle(path)  # the one reading of the bundle: format, sums, pins
    problems = list(read.problems)
    details = ["bundle sums and pins checked"]
    att = attest.attestation_path(path)
    if not att.exists():
        return problems, [*details, f"no attestation ({att.name}); make one: patchkit attest {path}"]
    if problems:
        return problems, [*details, f"{att.name}: not checked, the bundle itself is refused"]
    try:
        contents = attest.contents_of(path, read)
        stmt, match = attest.open_envelope(att.read_bytes(), allowed, identity, now)
    except (BadSignature, BadInput) as e:
        return [*problems, f"{att.name}: {e}"], details
    found, deps = attest.check_statement(stmt, contents)
    problems += [f"{att.name}: {p}" for p in found]
    if not found:
        details.append(
            f"{att.name}: provenance signed by {match.principal}, {len(contents.members)} files attested, "
            f"dependencies: {', '.join(deps) or 'none'}"
        )
    return problems, details


def verify_files(
    paths: Sequence[Path], allowed: tuple[AllowedSigner, ...], identity: str | None, now: datetime | None = None
) -> list[FileResult]:
    """Signature first, then contents: a SHA256SUMS's hashes, a lockfile's pins, a bundle and its attestation.

    Contents are checked only once the signature is trusted: an untrusted
    file's claims are not worth hashing gigabytes for.
    """
    when = now or datetime.now(UTC)
    results: list[FileResult] = []
    for path in paths:
        result = check_signature(path, allowed, identity, when)
        if result.outcome is Outcome.FAILED:
            results.append(result)
            continue
        if path.name.endswith(BUNDLE_SUFFIXES):
            problems, details = _check_bundle(path, allowed, identity, when)
        elif path.name == "SHA256SUMS":
            problems, details = _check_sums(path)
        elif path.name == "lockfile.toml":
            problems, details = _check_lockfile(path)
        else:
            problems, details = [], []
        outcome = Outcome.FAILED if problems else Outcome.VERIFIED
        results.append(FileResult(result.file, outcome, result.signer, result.key, tuple(problems), tuple(details)))
    return results


def signature_findings(repo: Repo, lock: Lockfile, now: datetime | None = None) -> list[Finding]:
    """``check``'s signature findings: each file ``[signing]`` lists has a valid ``.sig`` by an allowed signer.

    Hashes are not re-checked here: ``check`` verifies every pin itself.
    """
    from patchkit.core.findings import Finding
    from patchkit.store.repo import Escape

    if lock.signing is None:
        return []
    cfg = lock.signing
    fix_key = "patchkit sign --key KEY"
    try:
        allowed = load_signers(repo.check_inside(cfg.allowed_signers), str(cfg.allowed_signers), strict=True)
    except FileNotFoundError:
        return [
            Finding(
                "signers-missing",
                str(cfg.allowed_signers),
                None,
                "the allowed-signers file [signing] names does not exist",
                "add it (one line per key; patchkit keygen prints it), or fix signing.allowed_signers",
                field="signing.allowed_signers",
            )
        ]
    except Escape as e:
        return [Finding("signers-invalid", str(cfg.allowed_signers), None, str(e), field="signing.allowed_signers")]
    except BadInput as e:
        return [Finding("signers-invalid", str(cfg.allowed_signers), None, e.message, e.hint)]
    when = now or datetime.now(UTC)
    out: list[Finding] = []
    for rel in cfg.files:
        try:
            path = repo.check_inside(rel)
        except (FileNotFoundError, Escape):
            continue  # check reports missing or unsafe files itself
        result = check_signature(path, allowed, cfg.identity, when)
        if result.outcome is Outcome.VERIFIED:
            continue
        missing = not signature_path(path).exists()
        out.append(
            Finding(
                "signature-missing" if missing else "signature-invalid",
                f"{rel}{SIG_SUFFIX}",
                None,
                f"{rel}: no signature" if missing else f"{rel}: {result.problems[0]}",
                f"{fix_key} {rel}",
            )
        )
    return out
