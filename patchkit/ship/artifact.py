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

``pull`` takes a digest only (a tag could move), reads every manifest
and blob no further than its descriptor's size and verifies it by its
digest as it arrives, refuses a referrer that is corrupt or does not name
the bundle as its subject, then checks the bundle, the signature against
the allowed signers and the attestation in a staging directory; only when
everything holds are the files moved into place. At most
``MAX_REFERRERS`` signature and attestation referrers are considered (in
digest order): their manifests are checked one by one, and their blobs
fetched one at a time, each signature tried before the next is fetched.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.bundle.tar import LIMITS
from patchkit.core.values import Digest
from patchkit.errors import BadInput, Refused

if TYPE_CHECKING:
    from collections.abc import Mapping

    from patchkit.images.registry import RegistryClient
    from patchkit.oci.manifest import Descriptor
    from patchkit.oci.ref import ImageRef
    from patchkit.signing.signatures import FileResult
    from patchkit.signing.signers import AllowedSigner

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
MAX_BUNDLE_BYTES = LIMITS.archive  # the bundle reader's own limit: a larger one could never verify
MAX_SMALL_BYTES = 4 << 20
#: Signature and attestation referrers considered per pull (in digest order); any more are not fetched.
MAX_REFERRERS = 16


def _json(doc: object) -> bytes:
    from patchkit.ship.build import canonical_json

    return canonical_json(doc)


def _desc(media_type: str, data: bytes, title: str | None = None) -> dict[str, object]:
    from patchkit.oci.manifest import digest_of

    d: dict[str, object] = {"mediaType": media_type, "digest": digest_of(data).text, "size": len(data)}
    if title is not None:
        d["annotations"] = {TITLE: title}
    return d


def artifact_manifest(
    artifact_type: str, layers: list[dict[str, object]], subject: dict[str, object] | None = None
) -> bytes:
    """An OCI image manifest used as an artifact: the empty config, ``layers``, an optional ``subject`` (pure)."""
    from patchkit.oci.manifest import OCI_MANIFEST

    doc: dict[str, object] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": _desc(EMPTY_MEDIA_TYPE, EMPTY),
        "layers": layers,
    }
    if subject is not None:
        doc["subject"] = subject
    return _json(doc)


def sums_of(bundle: bytes | Path) -> bytes:
    """The ``SHA256SUMS`` member of a bundle (.tar.gz, its bytes or its path), read by the one bundle reader.

    ``BadInput`` unless the bundle verifies as ``verify-bundle`` checks it
    (``bundle.verified``: the bytes ``patchkit bundle`` writes, within its
    limits, its sums and pins holding): what is pushed or pulled is only
    ever such a bundle.
    """
    from patchkit.bundle.archive import verified
    from patchkit.core.sums import FILENAME

    try:
        contents = verified(bundle, "the bundle")
    except BadInput as e:
        raise BadInput(
            f"the bundle is not one patchkit bundle writes or it does not verify: {e.message}",
            "build it with: patchkit bundle -o PATH; check it with: patchkit verify-bundle PATH",
        ) from e
    return contents.kept[FILENAME]


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
    from patchkit.oci.manifest import OCI_MANIFEST

    digest = client.put_manifest(target, target.tag or _digest(body).text, body, OCI_MANIFEST)
    subject: dict[str, object] = {"mediaType": OCI_MANIFEST, "digest": digest.text, "size": len(body)}
    referrers: list[dict[str, object]] = []
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
    from patchkit.oci.manifest import digest_of

    return digest_of(body)


def _referrer_entry(body: bytes, artifact_type: str) -> dict[str, object]:
    from patchkit.oci.manifest import OCI_MANIFEST

    return {**_desc(OCI_MANIFEST, body), "artifactType": artifact_type}


def _update_referrers_tag(
    client: RegistryClient, target: ImageRef, subject: Digest, new: list[dict[str, object]]
) -> None:
    """The referrers tag schema: the index at ``sha256-<hex>`` lists every referrer of ``subject``."""
    from patchkit.oci.manifest import OCI_INDEX, referrers_tag

    # Each entry a descriptor (the client checked those it read): its digest is a string.
    entries = {str(e["digest"]): e for e in client.referrers_tag(target, subject)}
    entries.update({str(e["digest"]): e for e in new})
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


def _layer(doc: Mapping[str, object], media_type: str, what: str) -> tuple[Descriptor, object]:
    """The first layer of ``media_type`` in the manifest ``doc``: its descriptor and its title (unchecked)."""
    from patchkit.oci.manifest import Malformed, parse_descriptor

    layers = doc.get("layers")
    for i, item in enumerate(layers if isinstance(layers, list) else []):
        if isinstance(item, dict) and item.get("mediaType") == media_type:
            try:
                desc = parse_descriptor(item, f"{what}: layers[{i}]")
            except Malformed as e:
                raise Refused(f"{e}; refusing it") from e
            annotations = item.get("annotations")
            return desc, annotations.get(TITLE) if isinstance(annotations, dict) else None
    raise Refused(f"{what} has no {media_type} layer; it is not what patchkit push writes")


def _safe_name(title: object, what: str, suffixes: tuple[str, ...]) -> str:
    if not isinstance(title, str) or not title or "/" in title or title in (".", "..") or title.startswith("."):
        raise Refused(f"{what}: its title {title!r} is not a plain file name; refusing it")
    if not title.endswith(suffixes):
        raise Refused(f"{what}: its title {title!r} does not end in {' or '.join(suffixes)}; refusing it")
    return title


def _manifest_doc(
    client: RegistryClient, ref: ImageRef, digest: Digest, what: str, size: int | None = None
) -> dict[str, object]:
    body, _ = client.manifest(ref, digest, size)
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
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".patchkit-pull-", dir=out.parent))
    try:
        files = _fetch(client, ref, ref.digest, staging)
        referrers = _Referrers(client, ref, ref.digest)
        return _verify_and_write(staging, files, referrers, out, allowed, identity, now)
    except RegistryError as e:
        if e.status is None and "refusing it" in e.message:
            raise Refused(f"{ref}: {e.message}", "nothing was written; the registry serves corrupt content") from e
        raise
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)


def _bundle_sums(bundle: bytes | Path, what: str) -> bytes:
    """The pulled bundle's SHA256SUMS; a bundle that does not verify refuses the pull."""
    try:
        return sums_of(bundle)
    except BadInput as e:
        raise Refused(f"{what}: {e.message}; refusing it", "nothing was written") from e


def _fetch(client: RegistryClient, ref: ImageRef, digest: Digest, staging: Path) -> tuple[str, ...]:
    """The artifact's files (bundle, SHA256SUMS) written into ``staging``; their names.

    Each is read no further than its descriptor's size and verified by its
    digest; the bundle streams to disk (it may be large), never held whole.
    """
    what = f"{ref.name}@{digest}"
    doc = _manifest_doc(client, ref, digest, what)
    if doc.get("artifactType") != BUNDLE_ARTIFACT:
        raise Refused(f"{what} is not a patchkit bundle (artifactType {doc.get('artifactType')!r})")
    bundle_desc, bundle_title = _layer(doc, BUNDLE_LAYER, what)
    name = _safe_name(bundle_title, what, (".tar.gz", ".tgz"))
    sums_desc, _ = _layer(doc, SUMS_LAYER, what)
    with (staging / name).open("xb") as f:
        client.blob_into(ref, bundle_desc, f, limit=MAX_BUNDLE_BYTES)
    sums = client.blob(ref, sums_desc, limit=MAX_SMALL_BYTES)
    if _bundle_sums(staging / name, what) != sums:
        raise Refused(f"{what}: its SHA256SUMS layer is not the bundle's own SHA256SUMS; refusing it")
    (staging / "SHA256SUMS").write_bytes(sums)
    return name, "SHA256SUMS"


@dataclass(frozen=True)
class _Referrer:
    """A signature (``.sig``) or attestation (``.intoto.jsonl``) referrer whose manifest was checked."""

    suffix: str
    desc: Descriptor  # of its one layer
    what: str


_WANTED = {SIGNATURE_ARTIFACT: (SIGNATURE_ARTIFACT, ".sig"), ATTESTATION_ARTIFACT: (DSSE_LAYER, ".intoto.jsonl")}


class _Referrers:
    """The bundle's signature and attestation referrers: at most ``MAX_REFERRERS``, in digest order.

    Their manifests are read (each bounded by its index entry's size) and
    checked one by one here: one that is corrupt or names another subject
    refuses the pull. Their blobs are fetched only when ``data`` asks, so
    a signature is tried before the next one is downloaded.
    """

    def __init__(self, client: RegistryClient, ref: ImageRef, digest: Digest) -> None:
        from patchkit.oci.manifest import OCI_MANIFEST

        self._client = client
        self._ref = ref
        what = f"{ref.name}@{digest}"
        entries, _ = client.referrers(ref, digest)
        relevant = [e for e in entries if e.get("artifactType") in _WANTED and e.get("mediaType") == OCI_MANIFEST]
        relevant.sort(key=lambda e: str(e.get("digest")))
        #: How many there are in all (only the first ``MAX_REFERRERS`` are considered).
        self.listed = len(relevant)
        self.considered = [self._check(entry, digest, what) for entry in relevant[:MAX_REFERRERS]]
        self._kept: dict[str, bytes] = {}
        if not self.of(".sig"):
            more = (
                f" among the first {MAX_REFERRERS} of its {self.listed} referrers"
                if self.listed > MAX_REFERRERS
                else ""
            )
            raise Refused(f"{what} has no signature referrer{more}", "sign the bundle and push it again: patchkit push")

    def _check(self, entry: Mapping[str, object], digest: Digest, what: str) -> _Referrer:
        """One index entry's manifest, read and checked: it names the bundle, has its type and one layer of it."""
        kind = str(entry["artifactType"])  # one of _WANTED's, as the entries were chosen
        layer_type, suffix = _WANTED[kind]
        rdigest = Digest(str(entry["digest"]))  # a descriptor's digest, as the registry client checked it
        rwhat = f"referrer {rdigest} of {what}"
        size = entry.get("size")
        rdoc = _manifest_doc(self._client, self._ref, rdigest, rwhat, size if isinstance(size, int) else None)
        subject = rdoc.get("subject")
        if not isinstance(subject, dict) or subject.get("digest") != digest.text:
            raise Refused(f"{rwhat}: its subject is not the bundle; refusing it")
        if rdoc.get("artifactType") != kind:
            raise Refused(f"{rwhat}: it says artifactType {rdoc.get('artifactType')!r}, its index entry {kind!r}")
        desc, _ = _layer(rdoc, layer_type, rwhat)
        return _Referrer(suffix, desc, rwhat)

    def of(self, suffix: str) -> list[_Referrer]:
        """The considered referrers of one kind (``.sig``, ``.intoto.jsonl``), in digest order."""
        return [r for r in self.considered if r.suffix == suffix]

    def data(self, referrer: _Referrer) -> bytes:
        """The referrer's blob, fetched now (bounded by its descriptor, verified); attestations are kept for reuse."""
        kept = self._kept.get(referrer.what)
        if kept is not None:
            return kept
        data = self._client.blob(self._ref, referrer.desc, limit=MAX_SMALL_BYTES)
        if referrer.suffix != ".sig":
            self._kept[referrer.what] = data
        return data

    def beyond(self) -> str:
        """A note that referrers past the limit were not considered ('' when none were left out)."""
        if self.listed <= MAX_REFERRERS:
            return ""
        return (
            f"; only the first {MAX_REFERRERS} of its {self.listed} signature and attestation referrers "
            "(in digest order) were checked"
        )


def _verify_and_write(
    staging: Path,
    files: tuple[str, ...],
    referrers: _Referrers,
    out: Path,
    allowed: tuple[AllowedSigner, ...],
    identity: str | None,
    now: datetime | None,
) -> Pulled:
    """Verify the bundle staged beside ``out`` with its referrers there, and move the files in only if all holds.

    Several signatures (or attestations) may be attached, by anyone who may
    push: the first, in digest order, that verifies with its companions is
    kept, and the ones after it are never downloaded. None verifying
    refuses the pull with the first one's problems.
    """
    from patchkit.signing.signatures import Outcome

    bundle = next(staging / rel for rel in files if rel.endswith((".tar.gz", ".tgz")))
    attestations: list[_Referrer | None] = [*referrers.of(".intoto.jsonl")] or [None]
    first: FileResult | None = None
    for sig in referrers.of(".sig"):
        signature = referrers.data(sig)
        for att in attestations:
            chosen = {bundle.name + ".sig": signature}
            if att is not None:
                chosen[bundle.name + ".intoto.jsonl"] = referrers.data(att)
            result = _try(staging, bundle, chosen, allowed, identity, now)
            if result.outcome is Outcome.VERIFIED:
                return _move_in(staging, out, (*files, *chosen), result)
            first = first or result
    problems = "; ".join(first.problems) if first is not None else "no signature"
    raise Refused(f"{bundle.name}: {problems}{referrers.beyond()}", "nothing was written")


def _try(
    staging: Path,
    bundle: Path,
    chosen: dict[str, bytes],
    allowed: tuple[AllowedSigner, ...],
    identity: str | None,
    now: datetime | None,
) -> FileResult:
    """Verify the staged bundle with one signature (and attestation) beside it; the ``FileResult``."""
    from patchkit.signing import signatures as signing

    for rel, data in chosen.items():
        (staging / rel).write_bytes(data)
    (result,) = signing.verify_files([bundle], allowed, identity, now)
    return result


def _move_in(staging: Path, out: Path, written: tuple[str, ...], result: FileResult) -> Pulled:
    """Move the verified files from ``staging`` into ``out``, each whole or not at all."""
    from patchkit.store.repo import move_into

    out.mkdir(exist_ok=True)
    for rel in written:
        move_into(staging / rel, out / rel)
    return Pulled(tuple(sorted(written)), result.signer, result.details)
