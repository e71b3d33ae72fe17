"""OCI image documents, parsed (pure): platforms, descriptors, manifests, indexes, image configs.

Bytes in, frozen values out: ``parse_manifest`` (a schema 2 / OCI manifest or
index), ``parse_config`` (an image config's platform and ``diff_ids``),
``parse_descriptor``, ``select_platform`` (an index's entry for a platform),
``digest_of`` (the registry form of a sha256), and the media types the
distribution API and the image spec name. Nothing here does I/O; the registry
client (patchkit.images.registry) fetches the bytes and verifies them with
these. A document that does not have its specification's shape is
``Malformed`` (a ``ValueError``); a bad platform string is ``BadInput``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from patchkit.core.values import Digest
from patchkit.errors import BadInput
from patchkit.oci.ref import ImageRef

DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


OCI_INDEX = "application/vnd.oci.image.index.v1+json"


#: Sent in ``Accept`` on every manifest request, HEAD too: without the index
#: types a registry answers with the linux/amd64 manifest, or 404.
MANIFEST_MEDIA_TYPES = (DOCKER_MANIFEST_LIST, DOCKER_MANIFEST, OCI_MANIFEST, OCI_INDEX)


INDEX_MEDIA_TYPES = frozenset({DOCKER_MANIFEST_LIST, OCI_INDEX})


GZIP_LAYERS = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
    }
)


TAR_LAYERS = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
    }
)


ZSTD_LAYERS = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar+zstd",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
    }
)


_PLATFORM_PART = re.compile(r"[a-z0-9][a-z0-9._-]*")


@dataclass(frozen=True)
class Platform:
    """An image platform, ``os/architecture[/variant]`` (``linux/amd64``, ``linux/arm64/v8``)."""

    os: str
    architecture: str
    variant: str | None = None

    @classmethod
    def parse(cls, text: str) -> Platform:
        """Parse ``os/architecture[/variant]``; ``BadInput`` for anything else."""
        parts = text.split("/") if isinstance(text, str) else []
        if not 2 <= len(parts) <= 3 or not all(_PLATFORM_PART.fullmatch(p) for p in parts):
            raise BadInput(
                f"{text!r} is not a platform", "write os/architecture[/variant], e.g. linux/amd64 or linux/arm64/v8"
            )
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else None)

    def matches(self, other: Platform) -> bool:
        """Whether an image built for ``other`` serves this requested platform.

        The variant only matters when this platform names one; ``arm64`` with no
        variant is ``arm64/v8``, as Docker normalises it.
        """
        if (self.os, self.architecture) != (other.os, other.architecture):
            return False
        return self.variant is None or _variant(self) == _variant(other)

    def __str__(self) -> str:
        return f"{self.os}/{self.architecture}" + (f"/{self.variant}" if self.variant else "")


def _variant(p: Platform) -> str | None:
    if p.architecture == "arm64" and p.variant is None:
        return "v8"
    return p.variant


@dataclass(frozen=True)
class Descriptor:
    """A pointer to content: media type, digest and size (and the platform, in an index)."""

    media_type: str
    digest: Digest
    size: int
    platform: Platform | None = None


@dataclass(frozen=True)
class ImageManifest:
    """One platform's image: its config blob and its layers, bottom first."""

    media_type: str
    config: Descriptor
    layers: tuple[Descriptor, ...]


@dataclass(frozen=True)
class ImageIndex:
    """A multi-platform index (OCI) or manifest list (Docker): one manifest per platform."""

    media_type: str
    manifests: tuple[Descriptor, ...]


@dataclass(frozen=True)
class ImageConfig:
    """What patchkit needs of an image config: its platform, the uncompressed layer digests, when it was built."""

    platform: Platform | None
    diff_ids: tuple[Digest, ...]
    # The config's ``created`` (RFC 3339, as the builder wrote it), or None: what orders nightly tags.
    created: str | None = None


def digest_of(data: bytes) -> Digest:
    """The sha256 digest of ``data`` in the registry form (``sha256:<hex>``)."""
    return Digest("sha256:" + hashlib.sha256(data).hexdigest())


class Malformed(ValueError):
    """A manifest, index, config or token answer that does not have the shape its specification gives."""


def json_object(body: bytes, what: str) -> dict[str, object]:
    """``body`` as a JSON object, its values unchecked; ``Malformed`` when it is not one."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError) as e:
        raise Malformed(f"{what} is not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise Malformed(f"{what} is not a JSON object")
    return doc


def _descriptor(item: object, what: str) -> Descriptor:
    if not isinstance(item, dict):
        raise Malformed(f"{what} is not an object")
    media_type, digest, size = item.get("mediaType"), item.get("digest"), item.get("size")
    if not isinstance(media_type, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise Malformed(f"{what} lacks a mediaType or a size")
    try:
        d = Digest(digest) if isinstance(digest, str) else None
    except ValueError as e:
        raise Malformed(f"{what}: {e}") from e
    if d is None:
        raise Malformed(f"{what} has no digest")
    platform = None
    p = item.get("platform")
    if isinstance(p, dict) and isinstance(p.get("os"), str) and isinstance(p.get("architecture"), str):
        variant = p.get("variant")
        platform = Platform(p["os"], p["architecture"], variant if isinstance(variant, str) and variant else None)
    return Descriptor(media_type, d, size, platform)


def parse_descriptor(item: object, what: str) -> Descriptor:
    """One descriptor of a manifest or index (pure); ``Malformed`` if it is not one."""
    return _descriptor(item, what)


def parse_manifest(body: bytes, content_type: str | None = None) -> ImageManifest | ImageIndex:
    """Parse a manifest or an index from its bytes (pure).

    The kind comes from the body's ``mediaType``, else the response's
    ``Content-Type``, else the shape. Raises ``Malformed`` (a ``ValueError``) for anything that
    is not a schema 2 / OCI manifest or index.
    """
    doc = json_object(body, "the manifest")
    header = (content_type or "").split(";")[0].strip()
    declared = doc.get("mediaType")
    media_type = declared if isinstance(declared, str) and declared else header
    if doc.get("schemaVersion") == 1 or media_type.startswith("application/vnd.docker.distribution.manifest.v1"):
        raise Malformed("it is a Docker schema 1 manifest, which is deprecated and not supported")
    if media_type not in MANIFEST_MEDIA_TYPES:
        if "manifests" in doc:
            media_type = OCI_INDEX
        elif "layers" in doc:
            media_type = OCI_MANIFEST
        else:
            raise Malformed(f"unknown manifest media type {media_type or '(none)'!r}")
    if media_type in INDEX_MEDIA_TYPES:
        items = doc.get("manifests")
        if not isinstance(items, list):
            raise Malformed("the index has no manifests list")
        return ImageIndex(media_type, tuple(_descriptor(m, f"manifests[{i}]") for i, m in enumerate(items)))
    layers = doc.get("layers")
    if not isinstance(layers, list):
        raise Malformed("the manifest has no layers list")
    config = _descriptor(doc.get("config"), "config")
    return ImageManifest(media_type, config, tuple(_descriptor(x, f"layers[{i}]") for i, x in enumerate(layers)))


def parse_config(body: bytes) -> ImageConfig:
    """Parse an image config's platform and ``rootfs.diff_ids`` (pure); ``Malformed`` if it is not one."""
    doc = json_object(body, "the image config")
    rootfs = doc.get("rootfs")
    ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise Malformed("the image config has no rootfs.diff_ids list")
    try:
        diff_ids = tuple(Digest(i) for i in ids)
    except ValueError as e:
        raise Malformed(f"rootfs.diff_ids: {e}") from e
    os_, arch, variant = doc.get("os"), doc.get("architecture"), doc.get("variant")
    platform = None
    if isinstance(os_, str) and os_ and isinstance(arch, str) and arch:
        platform = Platform(os_, arch, variant if isinstance(variant, str) and variant else None)
    created = doc.get("created")
    return ImageConfig(platform, diff_ids, created if isinstance(created, str) and created else None)


def select_platform(index: ImageIndex, want: Platform) -> Descriptor | None:
    """The index entry for ``want`` (pure); ``None`` when the index has none.

    Without a requested variant, an entry without one (or the architecture's
    default, ``v8`` for arm64) is preferred over other variants.
    """
    candidates = [
        d
        for d in index.manifests
        if d.platform is not None and d.media_type not in INDEX_MEDIA_TYPES and want.matches(d.platform)
    ]
    if not candidates:
        return None
    if want.variant is None:
        plain = [d for d in candidates if d.platform is not None and _variant(d.platform) in (None, "v8")]
        if plain:
            return plain[0]
    return candidates[0]


@dataclass(frozen=True)
class Resolved:
    """A reference resolved against its registry, every digest checked by hashing what was served.

    ``digest`` is the top-level one (the index of a multi-platform image, or the
    manifest): what compose pins. ``platform_digest`` is the manifest chosen
    for ``platform``, what files are read from; for a single-platform image the
    two are equal.
    """

    ref: ImageRef
    digest: Digest
    media_type: str
    platform: str
    platform_digest: Digest

    @property
    def is_index(self) -> bool:
        """Whether the top-level digest is a multi-platform index."""
        return self.media_type in INDEX_MEDIA_TYPES

    @property
    def pinned(self) -> ImageRef:
        """The reference pinned to the top-level digest (tag kept)."""
        return self.ref.with_digest(self.digest)


def referrers_tag(digest: Digest) -> str:
    """The tag of the referrers tag schema for ``digest`` (``sha256-<hex>``; distribution-spec 1.1)."""
    return f"sha256-{digest.hex}"
