"""The registry client: resolve image references to digests and read files out of images, without a daemon.

``RegistryClient`` speaks the OCI distribution API over HTTPS (plain HTTP only
for loopback registries and those named insecure, as Docker allows) with
requests: the anonymous Bearer token flow, Basic credentials from the Docker
config's ``auths`` or its credential helpers and store (run through docker's
own credential code), retries with backoff for server errors and dropped
connections (urllib3's ``Retry``), bounded sizes and times.

Nothing a registry says is trusted without a hash: a manifest's digest is the
sha256 of the body received (never the ``Docker-Content-Digest`` header), a
blob is hashed while it streams and refused if it does not match its
descriptor, and a layer's uncompressed tar must match the config's
``diff_id``.

The pure parts live beside it: ``images/ref.py`` (the reference),
``images/oci.py`` (manifests, indexes, configs, platforms) and
``images/layers.py`` (the overlay that decides which layer a path comes
from); ``images/streams.py`` reads a layer as it streams,
``images/credentials.py`` finds the credentials, and ``patchkit.net.transport``
bounds every request. This module does the I/O around them. Every failure to
talk to a registry is a ``RegistryError`` (exit 3, ``images/errors.py``); a
bad reference, path or platform is ``BadInput`` (exit 2).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import tarfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast
from urllib.parse import urlencode, urljoin, urlsplit

import requests
import urllib3

from patchkit.core.progress import StartProgress, no_progress
from patchkit.core.values import Digest, host_only, is_loopback
from patchkit.errors import BadInput
from patchkit.images.credentials import (
    Challenge,
    DockerCredentials,
    auth_host,
    basic,
    default_docker_config,
    parse_challenge,
)
from patchkit.images.errors import RegistryError
from patchkit.images.streams import CHUNK, BadLayer, BlobReader, Interrupted, TarStream, scan_tar, verified_chunks
from patchkit.net.transport import Allowance, Bounds, Http, HttpError, TooLong, network_hint, one_line, origin
from patchkit.oci.layers import MAX_SYMLINK_HOPS, LayerScan, Overlay, SymlinkLoop, follow_links, normalise_path
from patchkit.oci.manifest import (
    GZIP_LAYERS,
    MANIFEST_MEDIA_TYPES,
    OCI_INDEX,
    OCI_MANIFEST,
    TAR_LAYERS,
    ZSTD_LAYERS,
    Descriptor,
    ImageConfig,
    ImageIndex,
    ImageManifest,
    Malformed,
    Platform,
    Resolved,
    digest_of,
    json_object,
    parse_config,
    parse_descriptor,
    parse_manifest,
    referrers_tag,
    select_platform,
)
from patchkit.oci.ref import ImageRef

_ACCEPT = ", ".join(MANIFEST_MEDIA_TYPES)


#: A manifest, index, image config or token answer bigger than this is refused.
MAX_DOCUMENT_BYTES = 4 << 20


#: A file read out of an image bigger than this is refused (per file).
MAX_FILE_BYTES = 256 << 20


#: A blob's total deadline grows by a second for every this many bytes that arrive (not that the registry
#: declares): the slowest average rate a blob may come at once the first deadline has passed.
MIN_BLOB_RATE = 1 << 20


#: However fast it comes, one request for a blob ends after this many seconds (whatever its declared size).
MAX_BLOB_SECONDS = 3600.0


_ERROR_BODY_BYTES = 64 << 10


_USER_AGENT = "patchkit (registry client)"


@dataclass
class _Token:
    value: str
    expires_at: float


def _now() -> float:
    """The clock tokens expire by (monotonic; tests replace it)."""
    return time.monotonic()


@dataclass(frozen=True)
class _Layer:
    descriptor: Descriptor
    diff_id: Digest


class RegistryClient:
    """A client of OCI distribution registries: resolve references, read files out of images.

    ``insecure`` names registries (``host[:port]`` or ``host``) that may be
    spoken to over plain HTTP; loopback registries always may. ``timeout``
    bounds every connect and read; ``deadline`` bounds each request as a
    whole (connect, headers and body together, retries included; a blob earns
    one more second per MiB that arrives, up to ``max_blob_seconds`` in all),
    so a server that drips bytes, or declares a huge blob, cannot hold a
    command forever;
    ``retries`` is how many times a request is repeated (through
    ``patchkit.net.transport``: urllib3's ``Retry``) after a connection failure,
    and for GET and HEAD after a 5xx, a timeout or a dropped connection, with
    exponential backoff from ``backoff`` seconds; a layer whose body breaks
    off mid-stream is fetched again as often.
    Credentials come from ``docker_config`` (default ``~/.docker/config.json``;
    the command line passes the one ``$DOCKER_CONFIG`` names). ``progress``
    shows each layer streamed. ``session`` lets a caller hand in its own
    requests session (adapters, proxies, counting in tests). A file read out of
    an image larger than ``max_file_size`` bytes is refused.
    Credentials (a Bearer token, Basic) go only to the registry's own origin
    (scheme, host and port): never to an upload location or a redirect
    elsewhere, and a challenge is taken only from the registry itself.

    Manifests and configs are kept by digest for the client's lifetime (they
    are verified and immutable), tokens until they expire.
    """

    def __init__(
        self,
        *,
        insecure: Iterable[str] = (),
        timeout: float = 30.0,
        deadline: float = 120.0,
        retries: int = 3,
        docker_config: Path | None = None,
        session: requests.Session | None = None,
        backoff: float = 0.5,
        max_file_size: int = MAX_FILE_BYTES,
        max_blob_seconds: float = MAX_BLOB_SECONDS,
        progress: StartProgress = no_progress,
    ) -> None:
        self._insecure = frozenset(auth_host(h) for h in insecure)
        self._timeout = timeout
        self._retries = max(0, retries)
        self._backoff = backoff
        self._max_file = max_file_size
        self._progress = progress  # each layer streamed is one bar
        self._blob_allowance = Allowance(MIN_BLOB_RATE, max(deadline, max_blob_seconds))
        self._creds = DockerCredentials(docker_config if docker_config is not None else default_docker_config({}))
        self._http = Http(Bounds(timeout, deadline, self._retries, backoff), session)
        self._challenges: dict[str, Challenge] = {}
        self._tokens: dict[tuple[str, str], _Token] = {}
        self._manifests: dict[tuple[str, str, Digest], bytes] = {}
        self._configs: dict[tuple[str, Digest], ImageConfig] = {}

    def close(self) -> None:
        """Close the session if this client made it."""
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public API -------------------------------------------------------------------------------

    def resolve(self, ref: ImageRef | str, platform: str | Platform = "linux/amd64") -> Resolved:
        """Resolve ``ref`` to its top-level digest and the manifest digest for ``platform``.

        GETs the manifest (all four media types accepted), hashes the body
        (a reference with a digest must hash to it), and for an index picks
        and verifies the platform's manifest. A single-platform image must be
        built for ``platform`` (``BadInput`` otherwise, as for an index
        without it).
        """
        image = ref if isinstance(ref, ImageRef) else ImageRef.parse(ref)
        want = platform if isinstance(platform, Platform) else Platform.parse(platform)
        body, content_type = self._get_manifest(image, image.reference)
        digest = digest_of(body)
        if image.digest is not None and digest != image.digest:
            raise RegistryError(
                f"{image}: the manifest served hashes to {digest}, not to the digest asked for; refusing it"
            )
        top = self._parse_manifest(image, body, content_type, digest)
        self._manifests[(image.registry, image.repository, digest)] = body
        if isinstance(top, ImageIndex):
            entry = select_platform(top, want)
            if entry is None:
                have = sorted({str(d.platform) for d in top.manifests if d.platform is not None})
                raise BadInput(
                    f"{image} has no {want} image (it has {', '.join(have) or 'no platforms listed'})",
                    "choose one of its platforms with --platform",
                )
            self._image_manifest(image, entry.digest, entry.size)
            return Resolved(image, digest, top.media_type, str(entry.platform), entry.digest)
        config = self._config(image, top)
        if config.platform is not None and not want.matches(config.platform):
            raise BadInput(
                f"{image} is a single-platform {config.platform} image, not {want}",
                f"pass --platform {config.platform} if that is what you want",
            )
        return Resolved(image, digest, top.media_type, str(config.platform or want), digest)

    def tags(self, ref: ImageRef | str) -> list[str]:
        """Every tag of ``ref``'s repository (the distribution tags list, followed across its pages).

        The registry returns them in its own order (lexical, for
        distribution); ``created`` is what says which image is newer.
        """
        image = ref if isinstance(ref, ImageRef) else ImageRef.parse(ref)
        out: list[str] = []
        url: str | None = None
        what = f"the tags of {image.name}"
        for _ in range(_MAX_TAG_PAGES):
            resp = self._request("GET", image, f"tags/list?n={_TAG_PAGE}", what=what, url=url)
            body = self._read_small(resp, MAX_DOCUMENT_BYTES, what)
            found = _tag_list(body, what)
            out += found
            link = resp.headers.get("Link", "")
            nxt = re.match(r"\s*<([^>]+)>\s*;\s*rel=\"?next\"?", link)
            if nxt is None or not found:
                return list(dict.fromkeys(out))
            url = urljoin(f"{self._base(image.registry)}/", nxt.group(1))
        raise RegistryError(f"{what}: more than {_MAX_TAG_PAGES} pages; refusing to list further")

    def created(self, resolved: Resolved) -> str | None:
        """When the platform image ``resolved`` names was built: its config's ``created``, or None."""
        manifest = self._image_manifest(resolved.ref, resolved.platform_digest, None)
        return self._config(resolved.ref, manifest).created

    def exists(self, ref: ImageRef | str) -> bool:
        """Whether the registry still serves ``ref`` (a HEAD request: it does not count as a pull).

        Nothing is hashed, so this says only that the registry answers for the
        tag or digest; ``resolve`` verifies content.
        """
        image = ref if isinstance(ref, ImageRef) else ImageRef.parse(ref)
        try:
            resp = self._request("HEAD", image, f"manifests/{image.reference}", accept=_ACCEPT, what=str(image))
        except RegistryError as e:
            if e.status == 404:
                return False
            raise
        resp.close()
        return True

    def read_files(
        self,
        image: ImageRef | Resolved | str,
        paths: Iterable[str],
        platform: str | Platform = "linux/amd64",
    ) -> dict[str, bytes | None]:
        """The bytes of absolute container paths in an image; ``None`` where a path is absent or a directory.

        Streams the platform manifest's layers from the top, verifying each
        blob digest and diff_id, honouring whiteouts and opaque directories,
        and stops downloading once every path is decided. Symbolic links are
        followed through the image; a hard link is read from its own layer.
        Memory stays bounded by the files asked for, whatever the layer size.
        The result is keyed by the paths as given. With a ``Resolved``,
        ``platform`` is ignored (it was chosen when resolving).
        """
        wanted = {p: normalise_path(p) for p in paths}
        resolved = image if isinstance(image, Resolved) else self.resolve(image, platform)
        if not wanted:
            return {}
        ref = resolved.ref
        manifest = self._image_manifest(ref, resolved.platform_digest, None)
        config = self._config(ref, manifest)
        if len(config.diff_ids) != len(manifest.layers):
            raise RegistryError(
                f"{ref.name}@{resolved.platform_digest}: the manifest has {len(manifest.layers)} layers "
                f"but its config lists {len(config.diff_ids)} diff_ids"
            )
        layers = [_Layer(d, i) for d, i in zip(manifest.layers, config.diff_ids, strict=True)][::-1]
        found = self._read_paths(ref, layers, set(wanted.values()))
        return {given: found[norm] for given, norm in wanted.items()}

    def manifest(self, ref: ImageRef, digest: Digest, size: int | None = None) -> tuple[bytes, str]:
        """The bytes and media type of the manifest or index ``digest`` in ``ref``'s repository, verified.

        ``size`` (its descriptor's) bounds the read: a longer answer is refused.
        """
        image = ref.with_digest(digest)
        key = (image.registry, image.repository, digest)
        body = self._manifests.get(key)
        if body is None:
            body, _ = self._get_manifest(image, digest.text, size)
            got = digest_of(body)
            if got != digest:
                raise RegistryError(
                    f"{image.name}@{digest}: the manifest served hashes to {got}, not to its digest; refusing it"
                )
            self._manifests[key] = body
        parsed = self._parse_manifest(image, body, None, digest)
        return body, parsed.media_type

    def blob(self, ref: ImageRef, desc: Descriptor, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
        """A small blob (a config, a signature) read whole and refused unless it hashes to its descriptor.

        Never more than the descriptor's size is read (a registry that sends
        more is refused at that point), and that size must be within ``limit``.
        """
        what = f"blob {desc.digest} of {ref.name}"
        if desc.size > limit:
            raise RegistryError(f"{what} is {desc.size} bytes, over the {limit >> 20} MiB limit")
        resp = self._request("GET", ref, f"blobs/{desc.digest}", what=what, blob=self._blob_allowance)
        body = self._read_blob(resp, desc.size, what)
        got = digest_of(body)
        if got != desc.digest or len(body) != desc.size:
            raise RegistryError(
                f"{what}: the content ({len(body)} bytes) hashes to {got}, not to its descriptor; refusing it",
                "the registry or something between it and you corrupted the blob; try again or report it",
            )
        return body

    def blob_into(self, ref: ImageRef, desc: Descriptor, dest: IO[bytes], limit: int) -> None:
        """Write blob ``desc`` to ``dest`` as it streams; refused unless it hashes to its descriptor.

        For a blob too large to hold in memory (a bundle): one chunk is held
        at a time, never more than the descriptor's size is read, and that
        size must be within ``limit``. ``dest`` holds unverified bytes until
        this returns.
        """
        what = f"blob {desc.digest} of {ref.name}"
        if desc.size > limit:
            raise RegistryError(f"{what} is {desc.size} bytes, over the {limit >> 20} MiB limit")
        resp = self._request("GET", ref, f"blobs/{desc.digest}", what=what, blob=self._blob_allowance)
        reader = BlobReader(resp.raw, desc.size, what, progress=lambda n: self._http.received(resp, n))
        try:
            while chunk := reader.read(CHUNK):
                dest.write(chunk)
        except Interrupted as e:
            self._raise_if_late(resp, what, blob=True)
            raise RegistryError(f"{what}: {e}") from e
        finally:
            resp.close()
        if reader.hash.hexdigest() != desc.digest.hex:
            raise RegistryError(
                f"{what}: the content hashes to sha256:{reader.hash.hexdigest()}, not to its descriptor; refusing it",
                "the registry or something between it and you corrupted the blob; try again or report it",
            )

    # -- writing ----------------------------------------------------------------------------------

    def has_blob(self, ref: ImageRef, digest: Digest) -> bool:
        """Whether ``ref``'s repository already holds blob ``digest`` (a HEAD: nothing is downloaded)."""
        try:
            resp = self._request("HEAD", ref, f"blobs/{digest}", what=f"blob {digest} in {ref.name}", push=True)
        except RegistryError as e:
            if e.status == 404:
                return False
            raise
        resp.close()
        return True

    def mount_blob(self, ref: ImageRef, digest: Digest, source: ImageRef) -> bool:
        """Ask the registry to link blob ``digest`` of ``source``'s repository into ``ref``'s (no bytes sent).

        True when it did (201). A registry that cannot mount answers 202 with
        an upload session instead, which is cancelled; then the blob must be
        copied. Repositories on different registries are never mounted.
        """
        if source.registry != ref.registry:
            return False
        query = urlencode({"mount": digest.text, "from": source.repository})
        resp = self._request(
            "POST",
            ref,
            f"blobs/uploads/?{query}",
            what=f"mounting {digest} into {ref.name}",
            push=True,
            mount_from=source,
        )
        resp.close()
        if resp.status_code == 201:
            return True
        location = resp.headers.get("Location")
        if location:
            with contextlib.suppress(RegistryError):
                cancel = self._upload_url(ref, location)
                self._request(
                    "DELETE", ref, "", what="cancelling an upload", push=True, url=cancel, mount_from=source
                ).close()
        return False

    def push_blob(
        self, ref: ImageRef, data: bytes, *, chunk_size: int | None = None, known_absent: bool = False
    ) -> Descriptor:
        """Upload ``data`` as a blob of ``ref``'s repository: monolithic, or in ``chunk_size`` PATCHes.

        The registry must confirm the digest patchkit computed; a blob already
        there is not sent again (``known_absent``: the caller has just asked).
        Returns its descriptor (media type left empty).
        """
        digest = digest_of(data)
        if known_absent or not self.has_blob(ref, digest):
            if chunk_size is None:
                location = self._start_upload(ref, digest)
                self._finish_upload(ref, location, digest, data)
            else:
                self._push_chunks(ref, digest, (data[i : i + chunk_size] for i in range(0, len(data), chunk_size)))
        return Descriptor("", digest, len(data))

    def copy_blob(self, source: ImageRef, ref: ImageRef, desc: Descriptor, *, chunk_size: int = 16 << 20) -> str:
        """Put blob ``desc`` of ``source`` into ``ref``'s repository: skipped, mounted or streamed across.

        Returns how: ``"present"``, ``"mounted"`` or ``"copied"``. A copied blob
        is hashed while it streams and the upload is not completed unless it
        matches its digest.
        """
        if self.has_blob(ref, desc.digest):
            return "present"
        if self.mount_blob(ref, desc.digest, source):
            return "mounted"
        what = f"blob {desc.digest} of {source.name}"
        resp = self._request("GET", source, f"blobs/{desc.digest}", what=what, blob=self._blob_allowance)
        try:
            chunks = verified_chunks(resp, desc, chunk_size, what, lambda n: self._http.received(resp, n))
            self._push_chunks(ref, desc.digest, chunks)
        finally:
            resp.close()
        return "copied"

    def put_manifest(self, ref: ImageRef, reference: str, body: bytes, media_type: str) -> Digest:
        """PUT a manifest or index under ``reference`` (a tag, or its own digest); its digest.

        The digest is the sha256 of ``body`` (what any client will verify);
        the registry's answer must agree when it gives one.
        """
        return self._put_manifest(ref, reference, body, media_type)[0]

    def put_referrer(self, ref: ImageRef, body: bytes) -> tuple[Digest, bool]:
        """PUT an OCI manifest with a ``subject`` by its digest; and whether the registry indexed the subject.

        A registry with the referrers API says so with an ``OCI-Subject``
        header (distribution-spec 1.1); without it the caller must maintain
        the referrers tag itself.
        """
        digest, headers = self._put_manifest(ref, digest_of(body).text, body, OCI_MANIFEST)
        return digest, bool(headers.get("OCI-Subject"))

    def _put_manifest(
        self, ref: ImageRef, reference: str, body: bytes, media_type: str
    ) -> tuple[Digest, Mapping[str, str]]:
        digest = digest_of(body)
        what = f"putting manifest {digest} to {ref.name}:{reference}"
        resp = self._request(
            "PUT", ref, f"manifests/{reference}", what=what, data=body, headers={"Content-Type": media_type}, push=True
        )
        resp.close()
        said = resp.headers.get("Docker-Content-Digest")
        if said and said != digest.text:
            raise RegistryError(f"{what}: the registry stored it as {said}, not as {digest}")
        self._manifests[(ref.registry, ref.repository, digest)] = body
        return digest, resp.headers

    def referrers(self, ref: ImageRef, digest: Digest) -> tuple[list[dict[str, object]], bool]:
        """The referrers of ``digest`` (raw descriptors with ``artifactType``), and whether the API answered.

        Asks the referrers API (distribution-spec 1.1); a registry without it
        (404) is read through the referrers tag schema (``sha256-<hex>``, an
        index), as the specification's fallback says. No referrers: ``[]``.
        """
        what = f"referrers of {ref.name}@{digest}"
        try:
            resp = self._request("GET", ref, f"referrers/{digest}", what=what, accept=OCI_INDEX)
        except RegistryError as e:
            if e.status != 404:
                raise
        else:
            body = self._read_small(resp, MAX_DOCUMENT_BYTES, what)
            if resp.headers.get("Content-Type", "").split(";")[0].strip() == OCI_INDEX:
                return _referrer_list(body, what), True
        return self.referrers_tag(ref, digest), False

    def referrers_tag(self, ref: ImageRef, digest: Digest) -> list[dict[str, object]]:
        """The referrers recorded in the fallback tag ``sha256-<hex>`` of ``digest``; ``[]`` without one."""
        what = f"referrers tag of {ref.name}@{digest}"
        try:
            body, _ = self._get_manifest(ref, referrers_tag(digest))
        except RegistryError as e:
            if e.status == 404:
                return []
            raise
        return _referrer_list(body, what)

    def _upload_url(self, ref: ImageRef, location: str) -> str:
        return urljoin(self._base(ref.registry) + "/", location)

    def _start_upload(self, ref: ImageRef, digest: Digest) -> str:
        resp = self._request("POST", ref, "blobs/uploads/", what=f"starting the upload of {digest}", push=True)
        resp.close()
        location = resp.headers.get("Location")
        if resp.status_code != 202 or not location:
            raise RegistryError(f"{ref.name}: the registry answered {resp.status_code} without an upload location")
        return self._upload_url(ref, location)

    def _finish_upload(self, ref: ImageRef, location: str, digest: Digest, data: bytes = b"") -> None:
        url = location + ("&" if "?" in location else "?") + urlencode({"digest": digest.text})
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))}
        what = f"uploading blob {digest} to {ref.name}"
        resp = self._request("PUT", ref, "", what=what, data=data, headers=headers, push=True, url=url)
        resp.close()
        said = resp.headers.get("Docker-Content-Digest")
        if said and said != digest.text:
            raise RegistryError(f"{what}: the registry stored it as {said}")

    def _push_chunks(self, ref: ImageRef, digest: Digest, chunks: Iterable[bytes]) -> None:
        """A chunked upload: one PATCH per chunk (``Content-Range``), then the closing PUT."""
        location = self._start_upload(ref, digest)
        offset = 0
        for chunk in chunks:
            if not chunk:
                continue
            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Range": f"{offset}-{offset + len(chunk) - 1}",
                "Content-Length": str(len(chunk)),
            }
            what = f"uploading bytes {offset}-{offset + len(chunk) - 1} of {digest} to {ref.name}"
            resp = self._request("PATCH", ref, "", what=what, data=chunk, headers=headers, push=True, url=location)
            resp.close()
            location = self._upload_url(ref, resp.headers.get("Location") or location)
            offset += len(chunk)
        self._finish_upload(ref, location, digest)

    # -- reading layers ---------------------------------------------------------------------------

    def _read_paths(self, ref: ImageRef, layers: list[_Layer], paths: set[str]) -> dict[str, bytes | None]:
        """Read ``paths`` through the layers, following symbolic links through the whole image.

        Each pass reads what is still unknown from the top; a link's target is
        read in the next pass (it may lie in any layer, above or below the link).
        Values and links found are remembered, so a loop is seen as soon as it
        closes and costs no more passes than its length.
        """
        values: dict[str, bytes | None] = {}
        links: dict[str, str] = {}
        for _ in range(MAX_SYMLINK_HOPS + 1):
            unknown = {final for final in (_follow(p, links, ref) for p in paths) if final not in values}
            if not unknown:
                return {p: values[_follow(p, links, ref)] for p in paths}
            found, new_links = self._read_pass(ref, layers, unknown)
            values.update(found)
            links.update(new_links)
        loops = ", ".join(sorted(paths))
        raise RegistryError(f"{ref.name}: too many levels of symbolic links resolving {loops}")

    def _read_pass(
        self, ref: ImageRef, layers: list[_Layer], paths: set[str]
    ) -> tuple[dict[str, bytes | None], dict[str, str]]:
        """One walk down the layers for ``paths``: their values, and the symbolic links met instead."""
        overlay = Overlay(paths)
        for index, layer in enumerate(layers):
            if overlay.done:
                break
            overlay.apply(index, self._scan_layer(ref, layer, overlay.wanted(), overlay.ancestors()))
        overlay.finish()
        results = overlay.results
        by_layer: dict[int, dict[str, str]] = {}
        for path, (index, target) in overlay.hardlinks.items():
            by_layer.setdefault(index, {})[path] = target
        for index, hardlinks in sorted(by_layer.items()):
            layer = layers[index]
            scan = self._scan_layer(ref, layer, frozenset(hardlinks.values()), frozenset())
            for path, target in hardlinks.items():
                if target not in scan.files:
                    raise RegistryError(
                        f"{ref.name}: {path} is a hard link to {target}, which is not a regular file "
                        f"in the same layer ({layer.descriptor.digest}); cannot read it"
                    )
                results[path] = scan.files[target]
        return results, overlay.symlinks

    def _scan_layer(self, ref: ImageRef, layer: _Layer, wanted: frozenset[str], ancestors: frozenset[str]) -> LayerScan:
        desc = layer.descriptor
        what = f"layer {desc.digest} of {ref.name}"
        if desc.media_type in ZSTD_LAYERS:
            raise RegistryError(
                f"{what} is {desc.media_type}; reading zstd layers needs a zstd decoder "
                "(the 'zstandard' package), which patchkit does not have",
                "read the file through a Docker engine (--via docker), or use an image with gzip layers",
            )
        if desc.media_type not in GZIP_LAYERS and desc.media_type not in TAR_LAYERS:
            raise RegistryError(f"{what} has media type {desc.media_type!r}, which is not a layer patchkit can read")
        # A body that breaks off after its headers arrived is past urllib3's Retry (it has handed the answer
        # over): the layer is fetched again here, each time under a deadline of its own, whose cap is what
        # is left of the first one's (a retry still gets the first deadline, the retries are few).
        attempt = 0
        ends = time.monotonic() + self._blob_allowance.cap
        while True:
            allowance = Allowance(self._blob_allowance.rate, ends - time.monotonic())
            resp = self._request("GET", ref, f"blobs/{desc.digest}", what=what, blob=allowance)
            try:
                return self._scan_stream(resp, layer, wanted, ancestors, what)
            except Interrupted as e:
                self._raise_if_late(resp, what, blob=True)
                if attempt >= self._retries:
                    raise RegistryError(f"{what}: {e}" + (f" (tried {attempt + 1} times)" if attempt else "")) from e
                self._sleep(attempt)
                attempt += 1
            finally:
                resp.close()

    def _scan_stream(
        self,
        resp: requests.Response,
        layer: _Layer,
        wanted: frozenset[str],
        ancestors: frozenset[str],
        what: str,
    ) -> LayerScan:
        desc = layer.descriptor
        meter = self._progress(f"streaming {what.replace(desc.digest.text, desc.digest.text[:19] + '…')}", desc.size)
        blob = BlobReader(resp.raw, desc.size, what, meter, lambda n: self._http.received(resp, n))
        stream = TarStream(blob, gzip=desc.media_type in GZIP_LAYERS)
        bad: str | None = None
        scan = LayerScan()
        try:
            with meter:
                with tarfile.open(fileobj=cast(IO[bytes], stream), mode="r|", bufsize=CHUNK) as tar:
                    scan = scan_tar(tar, wanted, ancestors, self._max_file, what)
                stream.drain()
        except (tarfile.TarError, BadLayer, EOFError) as e:
            if not (isinstance(e, tarfile.ReadError) and stream.size == 0 and blob.eof):
                bad = str(e) or type(e).__name__  # an empty blob is an empty layer, as Docker reads it
            blob.drain()
        if blob.hash.hexdigest() != desc.digest.hex:
            raise RegistryError(
                f"{what}: the blob's content hashes to sha256:{blob.hash.hexdigest()}, not to its digest; refusing it",
                "the registry or something between it and you corrupted the blob; try again or report it",
            )
        if bad is not None:
            raise RegistryError(f"{what} ({desc.media_type}) cannot be read as a tar archive: {bad}")
        if stream.hash.hexdigest() != layer.diff_id.hex:
            raise RegistryError(
                f"{what}: the uncompressed layer hashes to sha256:{stream.hash.hexdigest()}, "
                f"but the image config's diff_id is {layer.diff_id}; refusing it"
            )
        return scan

    # -- manifests, configs ------------------------------------------------------------------------

    def _parse_manifest(
        self, image: ImageRef, body: bytes, content_type: str | None, digest: Digest
    ) -> ImageManifest | ImageIndex:
        try:
            return parse_manifest(body, content_type)
        except ValueError as e:
            raise RegistryError(f"{image.name}@{digest}: {e}") from e

    def _image_manifest(self, image: ImageRef, digest: Digest, size: int | None) -> ImageManifest:
        """The platform manifest ``digest``, from the cache or the registry, verified and parsed."""
        key = (image.registry, image.repository, digest)
        body = self._manifests.get(key)
        content_type = None
        if body is None:
            body, content_type = self._get_manifest(image, digest.text, size)
            got = digest_of(body)
            if got != digest:
                raise RegistryError(
                    f"{image.name}@{digest}: the manifest served hashes to {got}, not to its digest; refusing it"
                )
            if size is not None and len(body) != size:  # shorter (a longer one was refused while read)
                raise RegistryError(
                    f"{image.name}@{digest}: the manifest is {len(body)} bytes, its descriptor says {size}"
                )
            self._manifests[key] = body
        parsed = self._parse_manifest(image, body, content_type, digest)
        if not isinstance(parsed, ImageManifest):
            raise RegistryError(f"{image.name}@{digest}: expected a platform manifest, got a nested index")
        return parsed

    def _config(self, image: ImageRef, manifest: ImageManifest) -> ImageConfig:
        desc = manifest.config
        cached = self._configs.get((image.registry, desc.digest))
        if cached is not None:
            return cached
        what = f"config {desc.digest} of {image.name}"
        if desc.size > MAX_DOCUMENT_BYTES:
            raise RegistryError(f"{what} is {desc.size} bytes, over the {MAX_DOCUMENT_BYTES >> 20} MiB limit")
        resp = self._request("GET", image, f"blobs/{desc.digest}", what=what)
        body = self._read_blob(resp, desc.size, what, within=self._timeout)
        got = digest_of(body)
        if got != desc.digest or len(body) != desc.size:
            raise RegistryError(f"{what}: the blob's content hashes to {got}, not to its digest; refusing it")
        try:
            config = parse_config(body)
        except ValueError as e:
            raise RegistryError(f"{what}: {e}") from e
        self._configs[(image.registry, desc.digest)] = config
        return config

    def _get_manifest(self, image: ImageRef, reference: str, size: int | None = None) -> tuple[bytes, str | None]:
        """A manifest's body and content type, refused past ``size`` bytes (its descriptor's) or the document cap."""
        what = f"{image.name}:{reference}" if not reference.startswith("sha256:") else f"{image.name}@{reference}"
        resp = self._request("GET", image, f"manifests/{reference}", accept=_ACCEPT, what=what)
        if size is not None and size <= MAX_DOCUMENT_BYTES:
            return self._read_blob(resp, size, what, within=self._timeout), resp.headers.get("Content-Type")
        return self._read_small(resp, MAX_DOCUMENT_BYTES, what), resp.headers.get("Content-Type")

    def _read_small(self, resp: requests.Response, limit: int, what: str) -> bytes:
        """A whole (small) body, refused past ``limit`` bytes or ``timeout`` seconds."""
        try:
            return self._http.read(resp, limit, within=self._timeout)
        except HttpError as e:
            if e.late is not None:
                raise _late(what, e.late) from e
            raise RegistryError(f"{what}: {e.reason}") from e

    def _read_blob(self, resp: requests.Response, size: int, what: str, within: float | None = None) -> bytes:
        """A body that its descriptor says is ``size`` bytes: read no further than that, refused if longer.

        A blob's time is bounded by its request's deadline and allowance
        (``within`` adds a bound of its own, for documents).
        """
        try:
            return self._http.read(resp, size, within=within)
        except TooLong as e:
            raise RegistryError(
                f"{what}: the registry sends more than its descriptor's {size} bytes; refusing it",
                "the registry or something between it and you serves other content than the digest names",
            ) from e
        except HttpError as e:
            if e.late is not None:
                raise _late(what, e.late, self._blob_allowance if within is None else None) from e
            raise RegistryError(f"{what}: {e.reason}") from e

    def _raise_if_late(self, resp: requests.Response, what: str, *, blob: bool = False) -> None:
        late = self._http.late(resp)
        if late is not None:
            raise _late(what, late, self._blob_allowance if blob else None)

    # -- HTTP ------------------------------------------------------------------------------------

    def _plain_http_ok(self, host: str) -> bool:
        host = host.lower()
        return is_loopback(host) or host in self._insecure or host_only(host) in self._insecure

    def _base(self, registry: str) -> str:
        return f"{'http' if self._plain_http_ok(registry) else 'https'}://{registry}"

    def _sleep(self, attempt: int) -> None:
        if self._backoff > 0:
            time.sleep(self._backoff * (2**attempt))

    def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        what: str,
        auth: tuple[str, str] | None = None,
        blob: Allowance | None = None,
        data: bytes | None = None,
    ) -> tuple[requests.Response, int]:
        """One request, retried by the bounded-HTTP helper (connect errors; 5xx and timeouts of GET and HEAD).

        Every attempt and the body read after it share one total deadline;
        a ``blob``'s grows with the bytes that arrive by that allowance, up
        to its cap (the reader reports them). Returns the last response and
        how many times the request was sent.
        """
        try:
            return self._http.request(method, url, headers=headers, auth=auth, data=data, allowance=blob)
        except HttpError as e:
            if e.late is not None:
                raise _late(what, e.late, self._blob_allowance if blob else None) from e
            tries = f" (tried {e.attempts} times)" if e.attempts > 1 else ""
            hint = network_hint(e.cause, url, service="the registry", plain_http="--insecure-registry")
            raise RegistryError(f"{what}: {e.reason}{tries}", hint) from e

    def _request(
        self,
        method: str,
        image: ImageRef,
        path: str,
        *,
        what: str,
        accept: str | None = None,
        blob: Allowance | None = None,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        push: bool = False,
        url: str | None = None,
        mount_from: ImageRef | None = None,
    ) -> requests.Response:
        """A registry API request for ``image`` with authentication; any non-2xx answer is a ``RegistryError``.

        ``push`` asks for a token that may also write (and, with
        ``mount_from``, read that repository, so a blob can be mounted from
        it); ``url`` (an upload location the registry gave) replaces
        ``path``; ``data`` is the body; ``blob``: the answer is a blob, whose
        deadline grows as it arrives by this allowance.

        Credentials are sent only when ``url`` is on the registry's own
        origin, and a 401's challenge is taken only from that origin: an
        upload location or a redirect elsewhere never sees them.
        """
        scope = _scope(image, push, mount_from)
        home = origin(self._base(image.registry))
        url = url or f"{self._base(image.registry)}/v2/{image.repository}/{path}"
        retried_auth = False
        while True:
            sent = {"User-Agent": _USER_AGENT, **(headers or {})}
            if accept:
                sent["Accept"] = accept
            authorization = self._authorization(image, scope) if origin(url) == home else None
            if authorization:
                sent["Authorization"] = authorization
            resp, attempts = self._send(method, url, sent, what, blob=blob, data=data)
            if 200 <= resp.status_code < 300:
                return resp
            challenge = parse_challenge(resp.headers.get("WWW-Authenticate", ""))
            if origin(resp.url or url) != home:
                challenge = None  # only the registry says how to authenticate to it
            if resp.status_code == 401 and not retried_auth and challenge is not None:
                self._challenges[image.registry] = challenge
                self._tokens.pop((image.registry, scope), None)
                try:
                    again = challenge.scheme == "bearer" or (
                        challenge.scheme == "basic" and self._creds.get(image.registry) is not None
                    )
                except BaseException:
                    resp.close()  # a bad Docker config: the answer is not read further
                    raise
                if again:
                    resp.close()
                    retried_auth = True
                    continue
            raise self._status_error(resp, image, what, challenge, attempts)

    def _authorization(self, image: ImageRef, scope: str) -> str | None:
        challenge = self._challenges.get(image.registry)
        if challenge is None:
            return None
        creds = self._creds.get(image.registry)
        if challenge.scheme == "basic":
            return basic(creds) if creds else None
        if challenge.scheme != "bearer":
            return None
        key = (image.registry, scope)
        token = self._tokens.get(key)
        if token is None or _now() >= token.expires_at:
            token = self._fetch_token(image, challenge, creds, scope)
            self._tokens[key] = token
        return f"Bearer {token.value}"

    def _fetch_token(self, image: ImageRef, challenge: Challenge, creds: tuple[str, str] | None, scope: str) -> _Token:
        """The anonymous (or credentialed) Bearer token flow of the distribution auth spec."""
        realm = challenge.params.get("realm", "")
        parts = urlsplit(realm)
        what = f"token for {image.name} from {realm or '(no realm)'}"
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RegistryError(f"{image.registry} asked for a Bearer token without a usable realm ({realm!r})")
        if parts.scheme == "http" and not self._plain_http_ok(parts.netloc):
            raise RegistryError(f"{image.registry} sends its token realm over plain HTTP ({realm}); refusing it")
        query: dict[str, str | list[str]] = {"scope": scope.split(" ")}
        if "service" in challenge.params:
            query["service"] = challenge.params["service"]
        if creds:
            query["account"] = creds[0]
        url = requests.Request("GET", realm, params=query).prepare().url or realm
        resp, _ = self._send("GET", url, {"User-Agent": _USER_AGENT}, what, auth=creds)
        if resp.status_code != 200:
            detail = _error_detail(resp)
            who = f"the credentials for {image.display_registry} in {self._creds.path}" if creds else "anonymous"
            raise RegistryError(
                f"{what}: {resp.status_code} {detail} ({who} access)",
                _login_hint(image) if resp.status_code in (401, 403) else None,
                status=resp.status_code,
            )
        body = self._read_small(resp, MAX_DOCUMENT_BYTES, what)
        try:
            doc = json_object(body, "the token answer")
        except ValueError as e:
            raise RegistryError(f"{what}: {e}") from e
        value = doc.get("token") or doc.get("access_token")
        if not isinstance(value, str) or not value:
            raise RegistryError(f"{what}: the answer has neither 'token' nor 'access_token'")
        expires_in = doc.get("expires_in")
        lifetime = expires_in if isinstance(expires_in, int | float) and expires_in > 0 else 60
        # Refresh a little early so a token does not expire between check and use.
        return _Token(value, _now() + max(lifetime - min(10.0, lifetime / 10), 1.0))

    def _status_error(
        self, resp: requests.Response, image: ImageRef, what: str, challenge: Challenge | None, attempts: int
    ) -> RegistryError:
        status = resp.status_code
        limits = {
            h: resp.headers[h]
            for h in ("ratelimit-limit", "ratelimit-remaining", "docker-ratelimit-source", "retry-after")
            if h in resp.headers
        }
        detail = _error_detail(resp)
        if status == 401:
            why = self._creds.refused(image)
            if challenge is not None and challenge.params.get("error"):
                why += f"; the registry says {challenge.params['error']}"
            return RegistryError(
                f"{what}: 401 authentication required ({detail}); {why}", _login_hint(image), status=status
            )
        if status == 429:
            shown = ", ".join(f"{k}: {v}" for k, v in limits.items()) or "no rate-limit headers"
            return RegistryError(
                f"{what}: 429 too many requests, {image.display_registry} rate limit reached ({shown}): {detail}",
                "wait for the window to pass, or log in (docker login) for a higher limit",
                status=status,
            )
        if status == 404:
            return RegistryError(
                f"{what}: 404 not found ({detail})",
                f"check the repository and tag: skopeo list-tags docker://{image.name}",
                status=status,
            )
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return RegistryError(f"{what}: {status} {resp.reason or ''}{tries} ({detail})", status=status)


#: Tags asked for per page, and how many pages are read before the list is refused rather than read for ever.
_TAG_PAGE = 1000
_MAX_TAG_PAGES = 100


def _tag_list(body: bytes, what: str) -> list[str]:
    """The ``tags`` of a tags list answer (``null`` for a repository without any); ``RegistryError`` otherwise."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise RegistryError(f"{what}: the answer is not JSON ({e})") from e
    tags = doc.get("tags") if isinstance(doc, dict) else None
    if tags is None and isinstance(doc, dict):
        return []
    if not isinstance(tags, list) or not all(isinstance(t, str) and ImageRef.is_tag(t) for t in tags):
        raise RegistryError(f"{what}: the answer has no list of tags")
    return list(tags)


def _referrer_list(body: bytes, what: str) -> list[dict[str, object]]:
    """The ``manifests`` of a referrers index, each checked to be a descriptor."""
    try:
        doc = json_object(body, what)
        items = doc.get("manifests")
        if not isinstance(items, list):
            raise Malformed(f"{what} has no manifests list")
        for i, item in enumerate(items):
            parse_descriptor(item, f"{what}: manifests[{i}]")
    except ValueError as e:
        raise RegistryError(str(e)) from e
    return [dict(item) for item in items]


def _follow(path: str, links: Mapping[str, str], ref: ImageRef) -> str:
    """``follow_links`` for an image of ``ref``; a loop is the registry's (the image is broken), exit 3."""
    try:
        return follow_links(path, links, ref.name)
    except SymlinkLoop as e:
        raise RegistryError(str(e)) from e


def _late(what: str, seconds: float, allowance: Allowance | None = None) -> RegistryError:
    hint = "try again later; the registry or the network between you is not answering in time"
    if allowance is None:
        return RegistryError(
            f"{what}: no complete answer within {seconds:g} s (connect, headers and body together); "
            "the registry is too slow or stalled",
            hint,
        )
    return RegistryError(
        f"{what}: not complete within {round(seconds, 1):g} s (a blob has the first deadline plus 1 s for every "
        f"{allowance.rate / (1 << 20):g} MiB that arrives, {allowance.cap:g} s at most, whatever size it declares); "
        "the registry is too slow or stalled",
        hint,
    )


def _scope(image: ImageRef, push: bool = False, mount_from: ImageRef | None = None) -> str:
    """The token scopes a request needs, space-separated (each is one ``scope`` parameter of the token request)."""
    own = f"repository:{image.repository}:{'pull,push' if push else 'pull'}"
    if mount_from is None or mount_from.repository == image.repository:
        return own
    return f"{own} repository:{mount_from.repository}:pull"


def _error_detail(resp: requests.Response) -> str:
    """The registry's own words for an error (``CODE: message``), from a bounded read of the body."""
    try:
        raw = resp.raw.read(_ERROR_BODY_BYTES, decode_content=True) if resp.raw is not None else b""
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError):
        raw = b""
    finally:
        resp.close()
    text = ""
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("errors"), list):
        parts = []
        for err in doc["errors"][:3]:
            if isinstance(err, dict):
                code, message = err.get("code"), err.get("message")
                parts.append(": ".join(str(x) for x in (code, message) if x))
        text = "; ".join(p for p in parts if p)
    elif isinstance(doc, dict) and isinstance(doc.get("details") or doc.get("error"), str):
        text = str(doc.get("details") or doc.get("error"))
    elif raw:
        text = raw[:200].decode("utf-8", "replace")
    text = one_line(text)
    return text or (resp.reason or "no message")


def _login_hint(image: ImageRef) -> str:
    return (
        f"log in with `docker login {image.display_registry}` "
        "(patchkit reads ~/.docker/config.json: its auths and credential helpers)"
    )
