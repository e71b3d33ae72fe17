"""The bundle as an OCI artifact: ``patchkit push`` and ``patchkit pull REF@DIGEST``.

Layout (image-spec 1.1 artifacts, as ORAS writes them, so ``oras`` and
``skopeo inspect --raw`` read it):

- the **bundle manifest**: ``artifactType`` ``application/vnd.patchkit.bundle.v1``,
  the empty config (``application/vnd.oci.empty.v1+json``, ``{}``), two
  layers titled with ``org.opencontainers.image.title``: the bundle
  (``.tar.gz``) and the ``SHA256SUMS`` inside it;
- its **signature** (the bundle's ``.sig``, SSHSIG) and its **attestation**
  (``.intoto.jsonl``, a DSSE envelope) as referrers: manifests of their own
  ``artifactType`` whose ``subject`` is the bundle manifest. A registry
  with the referrers API indexes them itself (it answers ``OCI-Subject``);
  for one without it, the referrers tag ``sha256-<hex>`` is kept as the
  specification's fallback says.

``pull`` takes a digest only (a tag could move), verifies every manifest
and blob by its digest as it arrives, refuses a referrer that is corrupt or
does not name the bundle as its subject, then checks the bundle, the
signature against the allowed signers and the attestation in a staging
directory; only when everything holds are the files moved into place.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit.errors import BadInput, Refused
from patchkit.values import Digest

if TYPE_CHECKING:
    from patchkit.images.ref import ImageRef
    from patchkit.images.registry import RegistryClient

BUNDLE_ARTIFACT = "application/vnd.patchkit.bundle.v1"
BUNDLE_LAYER = "application/vnd.patchkit.bundle.v1.tar+gzip"
SUMS_LAYER = "application/vnd.patchkit.sha256sums.v1"
SIGNATURE_ARTIFACT = "application/vnd.patchkit.signature.v1+sshsig"
ATTESTATION_ARTIFACT = "application/vnd.in-toto+json"
DSSE_LAYER = "application/vnd.dsse.envelope.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
TITLE = "org.opencontainers.image.title"
# A bundle holds patches and tables, never a model; anything larger is refused before it is read.
MAX_BUNDLE_BYTES = 2 << 30
MAX_SMALL_BYTES = 4 << 20


def _json(doc: Any) -> bytes:
    from patchkit.images.build import canonical_json

    return canonical_json(doc)


def _desc(media_type: str, data: bytes, title: str | None = None) -> dict[str, Any]:
    from patchkit.images.oci import digest_of

    d: dict[str, Any] = {"mediaType": media_type, "digest": digest_of(data).text, "size": len(data)}
    if title is not None:
        d["annotations"] = {TITLE: title}
    return d


def artifact_manifest(artifact_type: str, layers: list[dict[str, Any]], subject: dict[str, Any] | None = None) -> bytes:
    """An OCI image manifest used as an artifact: the empty config, ``layers``, an optional ``subject`` (pure)."""
    from patchkit.images.oci import OCI_MANIFEST

    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": _desc(EMPTY_MEDIA_TYPE, EMPTY),
        "layers": layers,
    }
    if subject is not None:
        doc["subject"] = subject
    return _json(doc)


def sums_of(bundle: bytes) -> bytes:
    """The ``SHA256SUMS`` member of a bundle (.tar.gz), read by the one bundle reader.

    ``BadInput`` unless the bundle verifies as ``verify-bundle`` checks it
    (the bytes ``patchkit bundle`` writes, its sums and pins holding): what
    is pushed or pulled is only ever such a bundle.
    """
    from patchkit.bundle import check_contents
    from patchkit.bundletar import read

    contents = read(io.BytesIO(bundle), "the bundle", ("SHA256SUMS", "lockfile.toml"), check=check_contents)
    if contents.problems:
        more = f" (and {len(contents.problems) - 1} more)" if len(contents.problems) > 1 else ""
        raise BadInput(
            f"the bundle is not one patchkit bundle writes or it does not verify: {contents.problems[0]}{more}",
            "build it with: patchkit bundle -o PATH; check it with: patchkit verify-bundle PATH",
        )
    return contents.kept["SHA256SUMS"]


@dataclass(frozen=True)
class Pushed:
    """Where the bundle and its referrers went."""

    reference: str
    digest: Digest
    signature: Digest
    attestation: Digest | None
    referrers_api: bool


def push(client: RegistryClient, bundle: Path, target: ImageRef) -> Pushed:
    """Publish ``bundle`` with its ``.sig`` (required) and ``.intoto.jsonl`` (if present) to ``target``."""
    from patchkit.signing import attest
    from patchkit.signing import signatures as signing

    data = _read(bundle, MAX_BUNDLE_BYTES, "the bundle")
    sig_path = signing.signature_path(bundle)
    if not sig_path.is_file():
        raise BadInput(f"{sig_path}: the bundle is not signed", f"sign it first: patchkit sign --key KEY {bundle}")
    signature = _read(sig_path, MAX_SMALL_BYTES, "the signature")
    att_path = attest.attestation_path(bundle)
    attestation = _read(att_path, MAX_SMALL_BYTES, "the attestation") if att_path.is_file() else None
    sums = sums_of(data)

    for blob in (EMPTY, data, sums, signature, *([attestation] if attestation is not None else [])):
        client.push_blob(target, blob)
    layers = [_desc(BUNDLE_LAYER, data, bundle.name), _desc(SUMS_LAYER, sums, "SHA256SUMS")]
    body = artifact_manifest(BUNDLE_ARTIFACT, layers)
    from patchkit.images.oci import OCI_MANIFEST

    digest = client.put_manifest(target, target.tag or _digest(body).text, body, OCI_MANIFEST)
    subject = {"mediaType": OCI_MANIFEST, "digest": digest.text, "size": len(body)}
    referrers: list[dict[str, Any]] = []
    sig_body = artifact_manifest(SIGNATURE_ARTIFACT, [_desc(SIGNATURE_ARTIFACT, signature, sig_path.name)], subject)
    sig_digest, api = client.put_referrer(target, sig_body)
    referrers.append(_referrer_entry(sig_body, SIGNATURE_ARTIFACT))
    att_digest = None
    if attestation is not None:
        att_body = artifact_manifest(ATTESTATION_ARTIFACT, [_desc(DSSE_LAYER, attestation, att_path.name)], subject)
        att_digest, att_api = client.put_referrer(target, att_body)
        api = api and att_api
        referrers.append(_referrer_entry(att_body, ATTESTATION_ARTIFACT))
    if not api:
        _update_referrers_tag(client, target, digest, referrers)
    return Pushed(f"{target.display_repository}@{digest}", digest, sig_digest, att_digest, api)


def _digest(body: bytes) -> Digest:
    from patchkit.images.oci import digest_of

    return digest_of(body)


def _referrer_entry(body: bytes, artifact_type: str) -> dict[str, Any]:
    from patchkit.images.oci import OCI_MANIFEST

    return {**_desc(OCI_MANIFEST, body), "artifactType": artifact_type}


def _update_referrers_tag(client: RegistryClient, target: ImageRef, subject: Digest, new: list[dict[str, Any]]) -> None:
    """The referrers tag schema: the index at ``sha256-<hex>`` lists every referrer of ``subject``."""
    from patchkit.images.oci import OCI_INDEX, referrers_tag

    entries = {e["digest"]: e for e in client.referrers_tag(target, subject)}
    entries.update({e["digest"]: e for e in new})
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entries[k] for k in sorted(entries)]}
    client.put_manifest(target, referrers_tag(subject), _json(index), OCI_INDEX)


def _read(path: Path, limit: int, what: str) -> bytes:
    try:
        size = path.stat().st_size
        if size > limit:
            raise BadInput(f"{path}: {what} is {size} bytes, over the {limit >> 20} MiB patchkit pushes")
        return path.read_bytes()
    except OSError as e:
        raise BadInput(f"{path}: cannot read {what} ({e.strerror})") from e


# --- pull --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pulled:
    """What ``pull`` wrote, and who signed it."""

    written: tuple[str, ...]
    signer: str | None
    details: tuple[str, ...]


def _layer(doc: dict[str, Any], media_type: str, what: str) -> Any:
    from patchkit.images.oci import Malformed, parse_descriptor

    for i, item in enumerate(doc.get("layers") or []):
        if isinstance(item, dict) and item.get("mediaType") == media_type:
            try:
                desc = parse_descriptor(item, f"{what}: layers[{i}]")
            except Malformed as e:
                raise Refused(f"{e}; refusing it") from e
            title = (item.get("annotations") or {}).get(TITLE)
            return desc, title
    raise Refused(f"{what} has no {media_type} layer; it is not what patchkit push writes")


def _safe_name(title: object, what: str, suffixes: tuple[str, ...]) -> str:
    if not isinstance(title, str) or not title or "/" in title or title in (".", "..") or title.startswith("."):
        raise Refused(f"{what}: its title {title!r} is not a plain file name; refusing it")
    if not title.endswith(suffixes):
        raise Refused(f"{what}: its title {title!r} does not end in {' or '.join(suffixes)}; refusing it")
    return title


def _manifest_doc(client: RegistryClient, ref: ImageRef, digest: Digest, what: str) -> dict[str, Any]:
    body, _ = client.manifest(ref, digest)
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise Refused(f"{what} is not a JSON object")
    return doc


def pull(
    client: RegistryClient,
    ref: ImageRef,
    out: Path,
    allowed_signers: Path,
    identity: str | None = None,
    now: datetime | None = None,
) -> Pulled:
    """Fetch the bundle ``ref`` (pinned by digest) and its referrers, verify all of it, then write it to ``out``."""
    from patchkit.images.errors import RegistryError
    from patchkit.signing import signatures as signing

    if ref.digest is None:
        raise BadInput(
            f"{ref}: pull takes REF@sha256:<digest>", "a tag can move; give the digest patchkit push printed"
        )
    allowed = signing.load_signers(allowed_signers)
    try:
        files, referrers = _fetch(client, ref, ref.digest)
    except RegistryError as e:
        if e.status is None and "refusing it" in e.message:
            raise Refused(f"{ref}: {e.message}", "nothing was written; the registry serves corrupt content") from e
        raise
    return _verify_and_write(files, referrers, out, allowed, identity, now)


def _bundle_sums(bundle: bytes, what: str) -> bytes:
    """The pulled bundle's SHA256SUMS; a bundle that does not verify refuses the pull."""
    try:
        return sums_of(bundle)
    except BadInput as e:
        raise Refused(f"{what}: {e.message}; refusing it", "nothing was written") from e


def _fetch(client: RegistryClient, ref: ImageRef, digest: Digest) -> tuple[dict[str, bytes], dict[str, list[bytes]]]:
    """The artifact's files by name (bundle, SHA256SUMS) and its referrers' by suffix (``.sig``, ``.intoto.jsonl``).

    Every blob is verified by digest, every referrer of a known type
    fetched: one that is corrupt or names another subject refuses the pull.
    """
    from patchkit.images.oci import OCI_MANIFEST

    what = f"{ref.name}@{digest}"
    doc = _manifest_doc(client, ref, digest, what)
    if doc.get("artifactType") != BUNDLE_ARTIFACT:
        raise Refused(f"{what} is not a patchkit bundle (artifactType {doc.get('artifactType')!r})")
    bundle_desc, bundle_title = _layer(doc, BUNDLE_LAYER, what)
    name = _safe_name(bundle_title, what, (".tar.gz", ".tgz"))
    sums_desc, _ = _layer(doc, SUMS_LAYER, what)
    files = {
        name: client.blob(ref, bundle_desc, limit=MAX_BUNDLE_BYTES),
        "SHA256SUMS": client.blob(ref, sums_desc, limit=MAX_SMALL_BYTES),
    }
    if _bundle_sums(files[name], what) != files["SHA256SUMS"]:
        raise Refused(f"{what}: its SHA256SUMS layer is not the bundle's own SHA256SUMS; refusing it")
    entries, _ = client.referrers(ref, digest)
    referrers: dict[str, list[bytes]] = {}
    wanted = {SIGNATURE_ARTIFACT: (SIGNATURE_ARTIFACT, ".sig"), ATTESTATION_ARTIFACT: (DSSE_LAYER, ".intoto.jsonl")}
    for entry in sorted(entries, key=lambda e: str(e.get("digest"))):
        kind = entry.get("artifactType")
        if kind not in wanted or entry.get("mediaType") != OCI_MANIFEST:
            continue
        layer_type, suffix = wanted[kind]
        rdigest = Digest(entry["digest"])
        rwhat = f"referrer {rdigest} of {what}"
        rdoc = _manifest_doc(client, ref, rdigest, rwhat)
        subject = rdoc.get("subject")
        if not isinstance(subject, dict) or subject.get("digest") != digest.text:
            raise Refused(f"{rwhat}: its subject is not the bundle; refusing it")
        if rdoc.get("artifactType") != kind:
            raise Refused(f"{rwhat}: it says artifactType {rdoc.get('artifactType')!r}, its index entry {kind!r}")
        desc, _ = _layer(rdoc, layer_type, rwhat)
        data = client.blob(ref, desc, limit=MAX_SMALL_BYTES)
        referrers.setdefault(suffix, []).append(data)
    if not referrers.get(".sig"):
        raise Refused(f"{what} has no signature referrer", "sign the bundle and push it again: patchkit push")
    return files, referrers


def _verify_and_write(
    files: dict[str, bytes],
    referrers: dict[str, list[bytes]],
    out: Path,
    allowed: Any,
    identity: str | None,
    now: datetime | None,
) -> Pulled:
    """Stage the files beside ``out``, verify the bundle there, and move them in only if everything holds.

    Several signatures (or attestations) may be attached, by anyone who may
    push: the first, in digest order, that verifies with its companions is
    kept. None verifying refuses the pull with the first one's problems.
    """
    from patchkit.signing import signatures as signing

    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".patchkit-pull-", dir=out.parent))
    try:
        for rel, data in files.items():
            (staging / rel).write_bytes(data)
        bundle = next(staging / rel for rel in files if rel.endswith((".tar.gz", ".tgz")))
        attestations: list[bytes | None] = [*referrers.get(".intoto.jsonl", [])] or [None]
        first: signing.FileResult | None = None
        for sig in referrers[".sig"]:
            for att in attestations:
                chosen = {bundle.name + ".sig": sig, **({bundle.name + ".intoto.jsonl": att} if att else {})}
                for rel, data in chosen.items():
                    (staging / rel).write_bytes(data)
                (result,) = signing.verify_files([bundle], allowed, identity, now)
                if result.outcome is signing.Outcome.VERIFIED:
                    out.mkdir(exist_ok=True)
                    written = {**files, **chosen}
                    for rel in written:
                        os.replace(staging / rel, out / rel)
                    return Pulled(tuple(sorted(written)), result.signer, result.details)
                first = first or result
        problems = "; ".join(first.problems) if first is not None else "no signature"
        raise Refused(f"{bundle.name}: {problems}", "nothing was written")
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
