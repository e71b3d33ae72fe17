"""Model signatures in the OpenSSF model signing format (OMS), made and checked by the OpenSSF's own library.

A model signature says that someone holding a key vouches for every file of
a model directory: a Sigstore bundle whose DSSE envelope carries an in-toto
statement listing each file with its sha256. The ``model-signing`` package
is the format's reference implementation; patchkit calls it rather than
re-implementing it, so what ``patchkit model sign`` writes is what
``model_signing verify`` accepts and the reverse. Two methods, both offline:
an elliptic-curve key pair (``key``) and a certificate chain
(``certificate``). Sigstore's keyless signing needs the network and is left
to the ``model_signing`` tool.

What patchkit adds is the pin. The directory signed or verified is the
snapshot of the pinned revision in the Hugging Face cache (whose files are
links into ``blobs/``, so links are followed, as ``--allow_symlinks`` does),
and a signature is also checked against the lockfile: every file the pin
lists is in the signature, nothing else is, and each file the pin records a
sha256 for (the LFS files) has that sha256 in the signature.
"""

from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit.errors import BadInput, Refused
from patchkit.lockfile.model import ModelFile

if TYPE_CHECKING:
    from model_signing import hashing

#: What model_signing leaves out of a signature by default (git's files); left out of the comparison too.
IGNORED = (".gitattributes", ".gitignore", ".git", ".github")


@dataclass(frozen=True)
class Signer:
    """How to sign: an EC private key (PEM), and for the certificate method its certificate and chain."""

    private_key: Path
    password: str | None = None
    certificate: Path | None = None
    chain: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Verifier:
    """How to verify: the public key (PEM), or the certificate chain the signing certificate must lead to."""

    public_key: Path | None = None
    chain: tuple[Path, ...] = ()


def _hashing() -> hashing.Config:
    from model_signing import hashing

    return hashing.Config().set_allow_symlinks(True)  # type: ignore[no-untyped-call]


def sign(snapshot: Path, signer: Signer) -> bytes:
    """The OMS signature of the directory ``snapshot``; BadInput naming the key when it cannot be used."""
    from model_signing import signing

    config = signing.Config()  # type: ignore[no-untyped-call]
    try:
        if signer.certificate is not None:
            config.use_certificate_signer(
                private_key=signer.private_key, signing_certificate=signer.certificate, certificate_chain=signer.chain
            )
        else:
            config.use_elliptic_key_signer(private_key=signer.private_key, password=signer.password)
    except (ValueError, TypeError, OSError) as e:
        raise BadInput(
            f"{signer.private_key}: cannot sign with it ({e})",
            "give an elliptic-curve private key in PEM (openssl ecparam -name prime256v1 -genkey -noout -out key.pem)",
        ) from e
    config.set_hashing_config(_hashing())
    with tempfile.TemporaryDirectory(prefix="patchkit-model-sig-") as tmp:
        out = Path(tmp) / "model.sig"
        config.sign(snapshot, out)
        return out.read_bytes()


def verify(snapshot: Path, signature: Path, verifier: Verifier) -> None:
    """Check ``signature`` over the directory ``snapshot`` with model_signing; Refused saying why it fails."""
    from model_signing import verifying

    config = verifying.Config()  # type: ignore[no-untyped-call]
    try:
        if verifier.public_key is not None:
            config.use_elliptic_key_verifier(public_key=verifier.public_key)
        else:
            config.use_certificate_verifier(certificate_chain=verifier.chain)
    except (ValueError, TypeError, OSError) as e:
        raise BadInput(f"cannot verify with the key or chain given ({e})", "give a PEM public key or CA chain") from e
    config.set_hashing_config(_hashing())
    try:
        config.verify(snapshot, signature)
    except ValueError as e:
        raise Refused(f"{signature}: the model signature does not verify: {e}") from e
    except Exception as e:  # model_signing raises the verifier's own errors (cryptography's, sigstore's)
        raise Refused(f"{signature}: the model signature does not verify: {type(e).__name__}: {e}") from e


#: What an OMS v1.0 bundle declares (the OpenSSF model signing specification, v1.0).
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
_MATERIAL = ("publicKey", "certificate", "x509CertificateChain")


def signed_files(signature: bytes, name: str) -> dict[str, str]:
    """The files an OMS v1.0 bundle lists, each with its sha256; BadInput saying what is missing or wrong.

    The bundle's shape is checked as the specification requires it (a Sigstore
    bundle with its verification material and transparency-log list, a DSSE
    envelope holding an in-toto v1 statement whose predicate is a model
    signature) before any file is read; the signature itself is checked by
    model_signing in :func:`verify`.
    """
    try:
        statement = _statement(json.loads(signature))
        resources = statement["predicate"]["resources"]
        return {str(r["name"]): str(r["digest"]) for r in resources if r["algorithm"] == "sha256"}
    except (ValueError, KeyError, TypeError) as e:
        raise BadInput(f"{name}: not a model signature (OMS v1.0 bundle): {_why(e)}") from e


def _why(e: Exception) -> str:
    return f"no {e.args[0]!r}" if isinstance(e, KeyError) else str(e)


def _statement(bundle: object) -> Any:  # the statement's JSON, read by trying (KeyError, TypeError)
    if not isinstance(bundle, dict):
        raise TypeError("not a JSON object")
    if not str(bundle["mediaType"]).startswith("application/vnd.dev.sigstore.bundle"):
        raise ValueError(f"mediaType {bundle['mediaType']!r} is not a Sigstore bundle's")
    material = bundle["verificationMaterial"]
    if not isinstance(material["tlogEntries"], list) or not any(k in material for k in _MATERIAL):
        raise ValueError("verificationMaterial needs tlogEntries and a public key hint or certificate")
    envelope = bundle["dsseEnvelope"]
    if envelope["payloadType"] != PAYLOAD_TYPE or not envelope["signatures"]:
        raise ValueError(f"the envelope must carry a signed {PAYLOAD_TYPE} payload")
    statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
    if statement["_type"] != STATEMENT_TYPE or statement["predicateType"] != PREDICATE_TYPE:
        raise ValueError(f"predicateType {statement['predicateType']!r} is not {PREDICATE_TYPE}")
    return statement


def against_pin(listed: dict[str, str], files: Iterable[ModelFile]) -> list[str]:
    """Where a signature's files disagree with the pin: missing, extra, or another sha256 than pinned."""
    pinned = {f.path.path: f for f in files if not _ignored(f.path.path)}
    problems = [f"{path}: pinned, but the signature does not cover it" for path in sorted(set(pinned) - set(listed))]
    problems += [
        f"{path}: signed, but the pinned revision has no such file" for path in sorted(set(listed) - set(pinned))
    ]
    for path in sorted(set(pinned) & set(listed)):
        want = pinned[path].sha256
        if want is not None and str(want) != listed[path]:
            problems.append(f"{path}: signed with sha256 {listed[path][:12]}…, the pin says {str(want)[:12]}…")
    return problems


def _ignored(path: str) -> bool:
    return path.split("/", 1)[0] in IGNORED


def summary(problems: Sequence[str]) -> str:
    """The first problem and how many more, for one line."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{problems[0]}{more}"
