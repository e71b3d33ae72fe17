"""The registry client: resolve image references to digests and read files out of images, without a daemon.

``RegistryClient`` speaks the OCI distribution API over HTTPS (plain HTTP only
for loopback registries and those named insecure, as Docker allows) with
requests: the anonymous Bearer token flow, Basic credentials from the Docker
config's ``auths`` or its credential helpers and store (run through docker's
own credential code), retries with backoff for server errors and dropped
connections, bounded sizes and times.

Nothing a registry says is trusted without a hash: a manifest's digest is the
sha256 of the body received (never the ``Docker-Content-Digest`` header), a
blob is hashed while it streams and refused if it does not match its
descriptor, and a layer's uncompressed tar must match the config's
``diff_id``.

The pure parts (``ImageRef.parse``, ``Platform``, ``parse_manifest``,
``parse_config``, ``select_platform``, ``parse_challenge`` and the layer
overlay that decides which layer a path comes from) work on bytes and parsed
values; the client does the I/O around them. Every failure to talk to a
registry is a ``RegistryError`` (exit 3); a bad reference, path or platform is
``BadInput`` (exit 2).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import http.client
import json
import os
import posixpath
import re
import shutil
import socket
import tarfile
import threading
import time
import weakref
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import urlencode, urljoin, urlsplit

import requests
import urllib3

from patchkit.errors import BadInput
from patchkit.images.ref import DOCKER_HUB, HUB_ALIASES, ImageRef
from patchkit.progress import Meter
from patchkit.sources.interface import SourceError
from patchkit.values import Digest, host_only, is_loopback

DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
#: Sent in ``Accept`` on every manifest request, HEAD too: without the index
#: types a registry answers with the linux/amd64 manifest, or 404.
MANIFEST_MEDIA_TYPES = (DOCKER_MANIFEST_LIST, DOCKER_MANIFEST, OCI_MANIFEST, OCI_INDEX)
INDEX_MEDIA_TYPES = frozenset({DOCKER_MANIFEST_LIST, OCI_INDEX})
_ACCEPT = ", ".join(MANIFEST_MEDIA_TYPES)

_GZIP_LAYERS = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
    }
)
_TAR_LAYERS = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
    }
)
_ZSTD_LAYERS = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar+zstd",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
    }
)

#: A manifest, index, image config or token answer bigger than this is refused.
MAX_DOCUMENT_BYTES = 4 << 20
#: A file read out of an image bigger than this is refused (per file).
MAX_FILE_BYTES = 256 << 20
#: Symbolic links followed for one requested path before giving up (Linux allows 40).
MAX_SYMLINK_HOPS = 40
#: Read and decompress in chunks this big: small enough to stay in the CPU cache
#: (measured twice as fast as 1 MiB), large enough to keep call overhead low.
_CHUNK = 64 << 10
# A blob's total deadline grows with its size at this rate (on top of the timeout).
MIN_BLOB_RATE = 1 << 20
_ERROR_BODY_BYTES = 64 << 10
_USER_AGENT = "patchkit (registry client)"

_PLATFORM_PART = re.compile(r"[a-z0-9][a-z0-9._-]*")


class RegistryError(SourceError):
    """A registry could not be reached, refused us, or served something that fails verification.

    ``status`` is the HTTP status when there was one. The message is one line:
    what was asked, of which registry, and what it answered.
    """

    def __init__(self, message: str, hint: str | None = None, *, status: int | None = None) -> None:
        super().__init__(_one_line(message), hint)
        self.status = status


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- platforms ---------------------------------------------------------------------------------------


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


# --- manifests --------------------------------------------------------------------------------------


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
    """What patchkit needs of an image config: its platform and the uncompressed layer digests."""

    platform: Platform | None
    diff_ids: tuple[Digest, ...]


def digest_of(data: bytes) -> Digest:
    """The sha256 digest of ``data`` in the registry form (``sha256:<hex>``)."""
    return Digest("sha256:" + hashlib.sha256(data).hexdigest())


class Malformed(ValueError):
    """A manifest, index, config or token answer that does not have the shape its specification gives."""


def _json_object(body: bytes, what: str) -> dict[str, Any]:
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
    doc = _json_object(body, "the manifest")
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
    doc = _json_object(body, "the image config")
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
    return ImageConfig(platform, diff_ids)


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


# --- authentication ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Challenge:
    """A ``WWW-Authenticate`` challenge: the scheme (lowercase) and its parameters."""

    scheme: str
    params: Mapping[str, str]


_CHALLENGE = re.compile(r"\s*([A-Za-z][\w-]*)\s*(.*)", re.DOTALL)
_PARAM = re.compile(r'([\w-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))')


def parse_challenge(header: str) -> Challenge | None:
    """Parse ``Bearer realm="…",service="…",scope="…"`` or ``Basic realm="…"`` (pure); ``None`` if empty."""
    m = _CHALLENGE.match(header or "")
    if not m:
        return None
    params = {
        k.lower(): (re.sub(r"\\(.)", r"\1", quoted) if quoted or not bare else bare)
        for k, quoted, bare in _PARAM.findall(m.group(2))
    }
    return Challenge(m.group(1).lower(), params)


@dataclass
class _Token:
    value: str
    expires_at: float


def _now() -> float:
    """The clock tokens expire by (monotonic; tests replace it)."""
    return time.monotonic()


def _default_docker_config() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


@dataclass(frozen=True)
class _Helper:
    """A Docker config's ``credHelpers`` entry or ``credsStore``: the program that holds a registry's credentials."""

    kind: str  # "credential helper" or "credential store"
    name: str  # docker-credential-NAME

    def __str__(self) -> str:
        return f"the {self.kind} {self.name!r}"


def _run_helper(registry: str, helper: _Helper) -> tuple[str, str] | str:
    """Run ``docker-credential-NAME get`` for ``registry`` with docker's own credential code.

    Returns (user, secret), or a note saying why there are none: no entry, the
    helper is not installed, it failed, or it gave an identity token (an OAuth
    refresh token, which the distribution token flow patchkit speaks does not take).
    """
    from docker import credentials  # type: ignore[import-untyped]  # docker-py ships no type information

    program = f"docker-credential-{helper.name}"
    if shutil.which(program) is None:  # checked first: docker's Store only warns, then fails at run
        return f"{program} is not installed or not on PATH"
    server = "https://index.docker.io/v1/" if registry == DOCKER_HUB else registry
    try:
        data = credentials.Store(helper.name).get(server)
    except credentials.CredentialsNotFound:
        return f"no entry for {server}"
    except credentials.StoreError as e:
        return str(e).strip() or type(e).__name__
    user, secret = data.get("Username"), data.get("Secret")
    if user == "<token>":
        return "an identity token, which patchkit cannot use; store a user name and password or token instead"
    if not isinstance(user, str) or not isinstance(secret, str):
        return "an answer without Username and Secret"
    return user, secret


def _auth_host(key: str) -> str:
    """The registry an ``auths`` key names: ``https://index.docker.io/v1/`` is Docker Hub."""
    host = key.split("://", 1)[-1].split("/", 1)[0].strip().lower()
    return DOCKER_HUB if host in HUB_ALIASES else host


# --- the layer overlay (pure) ----------------------------------------------------------------------


def normalise_path(path: str) -> str:
    """An absolute container path in normal form (``/a//b/./c`` is ``/a/b/c``); ``BadInput`` otherwise."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise BadInput(
            f"{path!r} is not an absolute container path",
            "write container paths from the root, e.g. /usr/local/lib/python3.12/dist-packages/vllm/envs.py",
        )
    if "\x00" in path:
        raise BadInput(f"{path!r} contains a NUL character")
    norm = "/" + posixpath.normpath(path).lstrip("/")
    if norm == "/":
        raise BadInput(f"{path!r} is the root directory, not a file")
    return norm


def _member_path(name: str) -> str:
    """A tar member name (``./usr/lib/x``, ``usr/lib/x/``) as an absolute normal path."""
    return "/" + posixpath.normpath("/" + name).lstrip("/")


def _link_target(path: str, linkname: str) -> str:
    """Where a symlink at ``path`` points, resolved inside the image's root ('..' stops at '/')."""
    joined = linkname if linkname.startswith("/") else posixpath.join(posixpath.dirname(path), linkname)
    return _member_path(joined)


def _ancestors(path: str) -> list[str]:
    """The strict ancestors of ``path``, root first: ``/a/b/c`` -> ``/``, ``/a``, ``/a/b``."""
    parts = path.split("/")[1:-1]
    return ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


@dataclass
class LayerScan:
    """What one layer says about the requested paths, collected while its tar streams by.

    ``files``: requested paths that are regular files here, with their bytes.
    ``hardlinks``/``symlinks``: requested paths (and, for symlinks, ancestors of
    requested paths) that are links here, with their targets (absolute).
    ``others``: requested paths that are directories or special files here.
    ``nondirs``: ancestors of requested paths that are files here (nothing lies below them).
    ``whiteouts``: paths this layer deletes from the layers below it.
    ``opaque``: directories whose children in the layers below are hidden.
    """

    files: dict[str, bytes] = field(default_factory=dict)
    hardlinks: dict[str, str] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    others: set[str] = field(default_factory=set)
    nondirs: set[str] = field(default_factory=set)
    whiteouts: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Found:
    """The path is a regular file in this layer, with these bytes."""

    data: bytes


@dataclass(frozen=True)
class Absent:
    """The path does not exist (deleted, hidden, never there) or is not a regular file (a directory)."""


@dataclass(frozen=True)
class SymlinkTo:
    """The path leads, through a symbolic link here, to ``target`` (looked up from the top again)."""

    target: str


@dataclass(frozen=True)
class HardlinkTo:
    """The path is a hard link to ``target``, an earlier entry of the same layer."""

    target: str


#: What one layer decides for a path.
Outcome = Found | Absent | SymlinkTo | HardlinkTo


def decide(path: str, scan: LayerScan) -> Outcome | None:
    """What a layer decides for ``path``, given nothing above it did (pure); ``None``: look lower.

    Entries in the layer come first; the layer's whiteouts and opaque
    directories hide only what lies below it (image-spec ``layer.md``).
    """
    if path in scan.files:
        return Found(scan.files[path])
    if path in scan.hardlinks:
        return HardlinkTo(scan.hardlinks[path])
    if path in scan.symlinks:
        return SymlinkTo(scan.symlinks[path])
    if path in scan.others:
        return Absent()
    for anc in _ancestors(path):
        if anc in scan.symlinks:
            return SymlinkTo(scan.symlinks[anc] + path[len(anc) :])
        if anc in scan.nondirs or anc in scan.whiteouts or anc in scan.opaque:
            return Absent()
    if path in scan.whiteouts:
        return Absent()
    return None


class Overlay:
    """The union of an image's layers for a set of requested paths, fed one layer at a time from the top (pure).

    After each layer, every requested path is either decided (found, absent,
    a link to follow) or still ``pending``; when nothing is pending, the
    layers below need not be read.
    """

    def __init__(self, paths: Iterable[str]) -> None:
        self.pending: set[str] = set(paths)
        self.results: dict[str, bytes | None] = {}
        #: requested path -> the path it names through a symbolic link (followed from the top).
        self.symlinks: dict[str, str] = {}
        #: requested path -> (layer index, target path in that same layer).
        self.hardlinks: dict[str, tuple[int, str]] = {}

    @property
    def done(self) -> bool:
        """Whether every requested path is decided."""
        return not self.pending

    def wanted(self) -> frozenset[str]:
        """The paths still undecided."""
        return frozenset(self.pending)

    def ancestors(self) -> frozenset[str]:
        """The directories above the undecided paths (a whiteout or a file there decides them)."""
        return frozenset(a for p in self.pending for a in _ancestors(p))

    def apply(self, layer: int, scan: LayerScan) -> None:
        """Decide what ``scan`` (of layer ``layer``, counting from the top) decides."""
        for path in sorted(self.pending):
            outcome = decide(path, scan)
            if outcome is None:
                continue
            self.pending.discard(path)
            if isinstance(outcome, Found):
                self.results[path] = outcome.data
            elif isinstance(outcome, Absent):
                self.results[path] = None
            elif isinstance(outcome, SymlinkTo):
                self.symlinks[path] = outcome.target
            else:
                self.hardlinks[path] = (layer, outcome.target)

    def finish(self) -> None:
        """No layer is left: whatever is undecided does not exist."""
        for path in self.pending:
            self.results[path] = None
        self.pending.clear()


def follow_links(path: str, links: Mapping[str, str], image: str = "the image") -> str:
    """Where ``path`` leads through the symbolic links known so far (pure); raises on a loop or a long chain."""
    seen = [path]
    while path in links:
        path = links[path]
        if path in seen:
            raise RegistryError(f"{image}: symbolic link loop: {' -> '.join([*seen, path])}")
        seen.append(path)
        if len(seen) > MAX_SYMLINK_HOPS:
            raise RegistryError(f"{image}: too many levels of symbolic links resolving {seen[0]}")
    return path


# --- streaming a layer -----------------------------------------------------------------------------


class _Interrupted(Exception):
    """A blob download stopped early (connection dropped, timeout, short body): worth a retry."""


class _BadLayer(Exception):
    """A layer's bytes are not a gzip stream or a tar archive (reported once the blob digest is checked)."""


class _BlobReader:
    """A blob's bytes as they arrive, hashed and counted; never more than its descriptor's size."""

    def __init__(self, raw: Any, size: int, what: str, meter: Meter | None = None) -> None:
        self._raw = raw
        self._size = size
        self._what = what
        self._meter = meter
        self.count = 0
        self.hash = hashlib.sha256()
        self.eof = False

    def read(self, n: int) -> bytes:
        """Up to ``n`` more bytes; ``b""`` at the end, which must be exactly the declared size."""
        if self.eof:
            return b""
        # One byte past the declared size is enough to tell a blob that is too big.
        want = min(n, self._size + 1 - self.count)
        try:
            data: bytes = self._raw.read(want, decode_content=False)
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as e:
            raise _Interrupted(f"the download broke off after {self.count} of {self._size} bytes ({e})") from e
        if not data:
            if self.count < self._size:
                raise _Interrupted(f"truncated: the body ended after {self.count} of {self._size} bytes")
            self.eof = True
            return b""
        self.count += len(data)
        if self.count > self._size:
            raise RegistryError(f"{self._what} is longer than its descriptor's {self._size} bytes; refusing it")
        self.hash.update(data)
        if self._meter is not None:
            self._meter.update(len(data))
        return data

    def drain(self) -> None:
        """Read (and hash) the rest of the blob."""
        while self.read(_CHUNK):
            pass


class _TarStream:
    """The uncompressed tar of a layer, decompressed from its blob as needed, hashed as it passes (the diff_id).

    tarfile's stream mode (``r|``) reads it with ``read(n)`` only, so nothing
    is ever seeked or held beyond one chunk.
    """

    def __init__(self, blob: _BlobReader, gzip: bool) -> None:
        self._blob = blob
        self._z: Any = zlib.decompressobj(31) if gzip else None
        self._input = b""
        self._started = False
        self.hash = hashlib.sha256()
        self.size = 0

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes of the tar; ``b""`` at its end."""
        if self._z is None:
            out = self._blob.read(n)
        else:
            try:
                out = self._inflate(n)
            except zlib.error as e:
                raise _BadLayer(f"not a valid gzip stream ({e})") from e
        self.hash.update(out)
        self.size += len(out)
        return out

    def _inflate(self, n: int) -> bytes:
        # Output is bounded by n per call, whatever the compression ratio.
        while True:
            if self._z.eof:
                rest = self._z.unused_data
                self._z = zlib.decompressobj(31)
                self._input, self._started = rest, False
            if not self._input:
                self._input = self._blob.read(_CHUNK)
                if not self._input:
                    if not self._started:
                        return b""
                    tail: bytes = self._z.flush()
                    if tail:
                        return tail
                    raise _BadLayer("the gzip stream ends early")
            self._started = True
            out: bytes = self._z.decompress(self._input, n)
            self._input = b"" if self._z.eof else self._z.unconsumed_tail
            if out:
                return out

    def drain(self) -> None:
        """Read (and hash) the rest of the tar: the padding after the end-of-archive blocks."""
        while self.read(_CHUNK):
            pass


def _scan_tar(  # noqa: C901 (over the ceiling already)
    tar: tarfile.TarFile, wanted: frozenset[str], ancestors: frozenset[str], max_file: int, what: str
) -> LayerScan:
    """Walk one layer's tar once, keeping only what bears on the wanted paths."""
    scan = LayerScan()
    while (member := tar.next()) is not None:
        # tarfile keeps every member it has read (about 500 bytes each; a layer can list 100k
        # files) and none is needed again. ``members`` is not in typeshed, hence getattr; if
        # tarfile ever drops the list this is a no-op.
        seen = getattr(tar, "members", None)
        if isinstance(seen, list):
            seen.clear()
        path = _member_path(member.name)
        parent, base = posixpath.split(path)
        if base.startswith(".wh."):
            if base == ".wh..wh..opq":
                if parent in ancestors:
                    scan.opaque.add(parent)
            elif not base.startswith(".wh..wh."):  # other .wh..wh. names are AUFS bookkeeping
                target = posixpath.join(parent, base[len(".wh.") :])
                if target in wanted or target in ancestors:
                    scan.whiteouts.add(target)
            continue
        if path in wanted:
            if member.isreg():
                if member.size > max_file:
                    raise BadInput(
                        f"{path} in {what} is {member.size} bytes, over the {max_file >> 20} MiB limit "
                        "for a file read from an image"
                    )
                f = tar.extractfile(member)
                scan.files[path] = f.read() if f is not None else b""
            elif member.islnk():
                scan.hardlinks[path] = _member_path(member.linkname)
            elif member.issym():
                scan.symlinks[path] = _link_target(path, member.linkname)
            else:
                scan.others.add(path)
        if path in ancestors:
            if member.issym():
                scan.symlinks[path] = _link_target(path, member.linkname)
            elif not member.isdir():
                scan.nondirs.add(path)
    return scan


@dataclass(frozen=True)
class _Layer:
    descriptor: Descriptor
    diff_id: Digest


# --- total deadlines ---------------------------------------------------------------------------------

# Per-read timeouts do not bound a request: a server that sends one byte of its
# headers every two seconds never lets a read time out. Each request therefore
# has a total deadline; when it passes, a watchdog shuts down the sockets the
# request uses, which ends any blocked read at once.

_active = threading.local()


class _Deadline:
    """The total time one request may take (connect, headers and body, retries included)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.expired = False
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        return max(0.05, self.at - time.monotonic())

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            if self.expired:
                _shut(sock)
            else:
                self._sockets.add(sock)

    def forget(self) -> None:
        """The response is closed: its sockets may go back to the pool, never to be shut by this deadline."""
        with self._lock:
            self._sockets.clear()

    def cancel(self) -> None:
        self._timer.cancel()
        self.forget()

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in list(self._sockets):
                _shut(sock)
            self._sockets.clear()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def _watch_current(sock: socket.socket | None) -> None:
    deadline = getattr(_active, "deadline", None)
    if deadline is not None:
        deadline.watch(sock)


class _WatchedHTTPConnection(urllib3.connection.HTTPConnection):
    """A connection that hands its socket to the deadline of the request using it."""

    def connect(self) -> None:
        super().connect()
        _watch_current(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch_current(self.sock)  # a kept-alive connection, reused
        super().request(*args, **kwargs)


class _WatchedHTTPSConnection(urllib3.connection.HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _watch_current(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch_current(self.sock)
        super().request(*args, **kwargs)


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


def _watch_session(session: requests.Session) -> None:
    """Make every connection ``session`` opens report its socket to the current request's deadline."""
    for prefix in ("http://", "https://"):
        adapter = session.get_adapter(prefix)
        if isinstance(adapter, requests.adapters.HTTPAdapter):
            manager = adapter.poolmanager
            if manager.pool_classes_by_scheme.get("http") is _WatchedHTTPPool:
                continue  # already watched (a session shared by several clients)
            manager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}
            manager.clear()  # pools opened before (idle ones) are rebuilt watched


# --- the client --------------------------------------------------------------------------------------


class RegistryClient:
    """A client of OCI distribution registries: resolve references, read files out of images.

    ``insecure`` names registries (``host[:port]`` or ``host``) that may be
    spoken to over plain HTTP; loopback registries always may. ``timeout``
    bounds every connect and read; ``deadline`` bounds each request as a
    whole (connect, headers and body together, retries included; a blob gets
    one more second per MiB of its size), so a server that drips bytes
    cannot hold a command forever;
    ``retries`` is how many times a request is repeated after a 5xx, a timeout
    or a dropped connection, waiting ``backoff`` seconds, doubling each time.
    Credentials come from ``docker_config`` (default ``$DOCKER_CONFIG/config.json``
    or ``~/.docker/config.json``). ``session`` lets a caller hand in its own
    requests session (adapters, proxies, counting in tests). A file read out of
    an image larger than ``max_file_size`` bytes is refused.

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
    ) -> None:
        self._insecure = frozenset(_auth_host(h) for h in insecure)
        self._timeout = timeout
        self._deadline = deadline
        self._retries = max(0, retries)
        self._backoff = backoff
        self._max_file = max_file_size
        self._docker_config = docker_config if docker_config is not None else _default_docker_config()
        self._config_doc: dict[str, Any] | None = None
        self._helped: dict[str, tuple[str, str] | str] = {}
        self._own_session = session is None
        self._session = session if session is not None else requests.Session()
        _watch_session(self._session)
        self._deadlines: weakref.WeakKeyDictionary[requests.Response, _Deadline] = weakref.WeakKeyDictionary()
        self._challenges: dict[str, Challenge] = {}
        self._tokens: dict[tuple[str, str], _Token] = {}
        self._manifests: dict[tuple[str, str, Digest], bytes] = {}
        self._configs: dict[tuple[str, Digest], ImageConfig] = {}

    def close(self) -> None:
        """Close the session if this client made it."""
        if self._own_session:
            self._session.close()

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

    def manifest(self, ref: ImageRef, digest: Digest) -> tuple[bytes, str]:
        """The bytes and media type of the manifest or index ``digest`` in ``ref``'s repository, verified."""
        image = ref.with_digest(digest)
        key = (image.registry, image.repository, digest)
        body = self._manifests.get(key)
        if body is None:
            body, _ = self._get_manifest(image, digest.text)
            got = digest_of(body)
            if got != digest:
                raise RegistryError(
                    f"{image.name}@{digest}: the manifest served hashes to {got}, not to its digest; refusing it"
                )
            self._manifests[key] = body
        parsed = self._parse_manifest(image, body, None, digest)
        return body, parsed.media_type

    def blob(self, ref: ImageRef, desc: Descriptor, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
        """A small blob (a config, a signature) read whole and refused unless it hashes to its descriptor."""
        what = f"blob {desc.digest} of {ref.name}"
        if desc.size > limit:
            raise RegistryError(f"{what} is {desc.size} bytes, over the {limit >> 20} MiB limit")
        resp = self._request("GET", ref, f"blobs/{desc.digest}", what=what, size=desc.size)
        body = self._read_small(resp, limit, what)
        got = digest_of(body)
        if got != desc.digest or len(body) != desc.size:
            raise RegistryError(
                f"{what}: the content ({len(body)} bytes) hashes to {got}, not to its descriptor; refusing it",
                "the registry or something between it and you corrupted the blob; try again or report it",
            )
        return body

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
        resp = self._request("GET", source, f"blobs/{desc.digest}", what=what, size=desc.size)
        try:
            self._push_chunks(ref, desc.digest, _verified_chunks(resp, desc, chunk_size, what))
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

    def referrers(self, ref: ImageRef, digest: Digest) -> tuple[list[dict[str, Any]], bool]:
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

    def referrers_tag(self, ref: ImageRef, digest: Digest) -> list[dict[str, Any]]:
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
            unknown = {final for final in (follow_links(p, links, ref.name) for p in paths) if final not in values}
            if not unknown:
                return {p: values[follow_links(p, links, ref.name)] for p in paths}
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
        if desc.media_type in _ZSTD_LAYERS:
            raise RegistryError(
                f"{what} is {desc.media_type}; reading zstd layers needs a zstd decoder "
                "(the 'zstandard' package), which patchkit does not have",
                "read the file through a Docker engine (--via docker), or use an image with gzip layers",
            )
        if desc.media_type not in _GZIP_LAYERS and desc.media_type not in _TAR_LAYERS:
            raise RegistryError(f"{what} has media type {desc.media_type!r}, which is not a layer patchkit can read")
        attempt = 0
        while True:
            resp = self._request("GET", ref, f"blobs/{desc.digest}", what=what, size=desc.size)
            try:
                return self._scan_stream(resp, layer, wanted, ancestors, what)
            except _Interrupted as e:
                self._raise_if_late(resp, what)
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
        meter = Meter(f"streaming {what.replace(desc.digest.text, desc.digest.text[:19] + '…')}", desc.size)
        blob = _BlobReader(resp.raw, desc.size, what, meter)
        stream = _TarStream(blob, gzip=desc.media_type in _GZIP_LAYERS)
        bad: str | None = None
        scan = LayerScan()
        try:
            with meter:
                with tarfile.open(fileobj=cast(IO[bytes], stream), mode="r|", bufsize=_CHUNK) as tar:
                    scan = _scan_tar(tar, wanted, ancestors, self._max_file, what)
                stream.drain()
        except (tarfile.TarError, _BadLayer, EOFError) as e:
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
            body, content_type = self._get_manifest(image, digest.text)
            got = digest_of(body)
            if got != digest:
                raise RegistryError(
                    f"{image.name}@{digest}: the manifest served hashes to {got}, not to its digest; refusing it"
                )
            if size is not None and len(body) != size:
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
        body = self._read_small(resp, MAX_DOCUMENT_BYTES, what)
        got = digest_of(body)
        if got != desc.digest:
            raise RegistryError(f"{what}: the blob's content hashes to {got}, not to its digest; refusing it")
        try:
            config = parse_config(body)
        except ValueError as e:
            raise RegistryError(f"{what}: {e}") from e
        self._configs[(image.registry, desc.digest)] = config
        return config

    def _get_manifest(self, image: ImageRef, reference: str) -> tuple[bytes, str | None]:
        what = f"{image.name}:{reference}" if not reference.startswith("sha256:") else f"{image.name}@{reference}"
        resp = self._request("GET", image, f"manifests/{reference}", accept=_ACCEPT, what=what)
        return self._read_small(resp, MAX_DOCUMENT_BYTES, what), resp.headers.get("Content-Type")

    def _read_small(self, resp: requests.Response, limit: int, what: str) -> bytes:
        """A whole (small) body, refused past ``limit`` bytes or ``timeout`` seconds."""
        try:
            declared = int(resp.headers.get("Content-Length", "0"))
        except ValueError:
            declared = 0
        if declared > limit:
            resp.close()
            raise RegistryError(f"{what}: {declared} bytes is over the {limit >> 20} MiB limit; refusing it")
        deadline = time.monotonic() + self._timeout
        chunks: list[bytes] = []
        total = 0
        try:
            for chunk in resp.iter_content(64 << 10):
                total += len(chunk)
                if total > limit:
                    raise RegistryError(f"{what}: over the {limit >> 20} MiB limit; refusing it")
                if time.monotonic() > deadline:
                    raise RegistryError(f"{what}: the body took longer than {self._timeout:g} s")
                chunks.append(chunk)
        except requests.RequestException as e:
            self._raise_if_late(resp, what)
            raise RegistryError(f"{what}: the response broke off ({_describe(e)})") from e
        finally:
            resp.close()
        self._raise_if_late(resp, what)
        return b"".join(chunks)

    def _raise_if_late(self, resp: requests.Response, what: str) -> None:
        deadline = self._deadlines.get(resp)
        if deadline is not None and deadline.expired:
            raise _late(what, deadline)

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
        size: int | None = None,
        data: bytes | None = None,
    ) -> tuple[requests.Response, int]:
        """One request, repeated with backoff after a 5xx, a timeout or a connection failure.

        Every attempt and the body read after it share one total deadline
        (``size``: a blob's declared size, which extends it). Returns the last
        response and how many times the request was sent.
        """
        deadline = _Deadline(self._deadline + (size or 0) / MIN_BLOB_RATE)
        attempt = 0
        while True:
            try:
                _active.deadline = deadline
                try:
                    resp = self._session.request(
                        method,
                        url,
                        headers=headers,
                        auth=auth,
                        data=data,
                        timeout=min(self._timeout, deadline.remaining()),
                        stream=True,
                    )
                finally:
                    _active.deadline = None
            except (requests.Timeout, requests.ConnectionError) as e:
                if deadline.expired:
                    deadline.cancel()
                    raise _late(what, deadline) from e
                if attempt < self._retries:
                    self._sleep(attempt)
                    attempt += 1
                    continue
                deadline.cancel()
                tries = f" (tried {attempt + 1} times)" if attempt else ""
                raise RegistryError(f"{what}: {_describe(e)}{tries}", _network_hint(e, url)) from e
            except requests.RequestException as e:
                deadline.cancel()
                if deadline.expired:
                    raise _late(what, deadline) from e
                raise RegistryError(f"{what}: {_describe(e)}", _network_hint(e, url)) from e
            if resp.status_code >= 500 and attempt < self._retries:
                resp.close()
                deadline.forget()
                self._sleep(attempt)
                attempt += 1
                continue
            self._deadlines[resp] = deadline
            _cancel_on_close(resp, deadline)
            return resp, attempt + 1

    def _request(
        self,
        method: str,
        image: ImageRef,
        path: str,
        *,
        what: str,
        accept: str | None = None,
        size: int | None = None,
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
        ``path``; ``data`` is the body.
        """
        scope = _scope(image, push, mount_from)
        url = url or f"{self._base(image.registry)}/v2/{image.repository}/{path}"
        retried_auth = False
        while True:
            sent = {"User-Agent": _USER_AGENT, **(headers or {})}
            if accept:
                sent["Accept"] = accept
            authorization = self._authorization(image, scope)
            if authorization:
                sent["Authorization"] = authorization
            resp, attempts = self._send(method, url, sent, what, size=size, data=data)
            if 200 <= resp.status_code < 300:
                return resp
            challenge = parse_challenge(resp.headers.get("WWW-Authenticate", ""))
            if resp.status_code == 401 and not retried_auth and challenge is not None:
                self._challenges[image.registry] = challenge
                self._tokens.pop((image.registry, scope), None)
                try:
                    again = challenge.scheme == "bearer" or (
                        challenge.scheme == "basic" and self._credentials(image) is not None
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
        creds = self._credentials(image)
        if challenge.scheme == "basic":
            return _basic(creds) if creds else None
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
            who = f"the credentials for {image.display_registry} in {self._docker_config}" if creds else "anonymous"
            raise RegistryError(
                f"{what}: {resp.status_code} {detail} ({who} access)",
                _login_hint(image) if resp.status_code in (401, 403) else None,
                status=resp.status_code,
            )
        body = self._read_small(resp, MAX_DOCUMENT_BYTES, what)
        try:
            doc = _json_object(body, "the token answer")
        except ValueError as e:
            raise RegistryError(f"{what}: {e}") from e
        value = doc.get("token") or doc.get("access_token")
        if not isinstance(value, str) or not value:
            raise RegistryError(f"{what}: the answer has neither 'token' nor 'access_token'")
        expires_in = doc.get("expires_in")
        lifetime = expires_in if isinstance(expires_in, int | float) and expires_in > 0 else 60
        # Refresh a little early so a token does not expire between check and use.
        return _Token(value, _now() + max(lifetime - min(10.0, lifetime / 10), 1.0))

    def _credentials(self, image: ImageRef) -> tuple[str, str] | None:
        """(user, password) for the image's registry: inline ``auths``, else its credential helper or store."""
        entry = self._auths().get(image.registry)
        found = self._from_helper(image.registry, entry) if isinstance(entry, _Helper) else entry
        return found if isinstance(found, tuple) else None

    def _auths(self) -> dict[str, tuple[str, str] | _Helper]:
        """Registry -> (user, password) from the Docker config's ``auths``, or the helper that holds them."""
        doc = self._load_docker_config()
        found: dict[str, tuple[str, str] | _Helper] = {}
        helpers = doc.get("credHelpers")
        store = doc.get("credsStore")
        if isinstance(helpers, dict):
            for key, helper in helpers.items():
                found[_auth_host(str(key))] = _Helper("credential helper", str(helper))
        auths = doc.get("auths")
        for key, entry in (auths if isinstance(auths, dict) else {}).items():
            host = _auth_host(str(key))
            creds = _decode_auth(entry)
            if creds is not None:
                found[host] = creds
            elif host not in found and isinstance(store, str):
                found[host] = _Helper("credential store", store)
        return found

    def _from_helper(self, registry: str, helper: _Helper) -> tuple[str, str] | str:
        """Ask ``docker-credential-NAME`` through docker's own credential code; a note on why not, otherwise."""
        if registry not in self._helped:
            self._helped[registry] = _run_helper(registry, helper)
        return self._helped[registry]

    def _load_docker_config(self) -> dict[str, Any]:
        if self._config_doc is None:
            path = self._docker_config
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                raw = b"{}"
            except OSError as e:
                raise BadInput(f"{path}: cannot read the Docker config ({e.strerror})") from e
            try:
                self._config_doc = _json_object(raw, str(path))
            except ValueError as e:
                raise BadInput(f"{path}: {e}", "fix or remove the Docker config file") from e
        return self._config_doc

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
            entry = self._auths().get(image.registry)
            helped = self._from_helper(image.registry, entry) if isinstance(entry, _Helper) else None
            if isinstance(entry, tuple):
                why = f"the credentials for {image.display_registry} in {self._docker_config} were refused"
            elif isinstance(entry, _Helper) and isinstance(helped, tuple):
                why = f"the credentials {entry} gave for {image.display_registry} were refused"
            elif isinstance(entry, _Helper):
                why = f"{entry} gave none: {helped}"
            else:
                why = f"no credentials for {image.display_registry} in {self._docker_config}"
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


def referrers_tag(digest: Digest) -> str:
    """The tag of the referrers tag schema for ``digest`` (``sha256-<hex>``; distribution-spec 1.1)."""
    return f"sha256-{digest.hex}"


def _referrer_list(body: bytes, what: str) -> list[dict[str, Any]]:
    """The ``manifests`` of a referrers index, each checked to be a descriptor."""
    try:
        doc = _json_object(body, what)
        items = doc.get("manifests")
        if not isinstance(items, list):
            raise Malformed(f"{what} has no manifests list")
        for i, item in enumerate(items):
            _descriptor(item, f"{what}: manifests[{i}]")
    except ValueError as e:
        raise RegistryError(str(e)) from e
    return [dict(item) for item in items]


def _verified_chunks(resp: requests.Response, desc: Descriptor, size: int, what: str) -> Iterable[bytes]:
    """``resp``'s body in chunks of ``size``; the last one is held back until the whole body hashes to ``desc``,
    so a corrupt blob never completes an upload."""
    h = hashlib.sha256()
    total = 0
    pending = b""
    held: bytes | None = None
    try:
        for piece in resp.iter_content(1 << 20):
            h.update(piece)
            total += len(piece)
            if total > desc.size:
                raise RegistryError(f"{what}: more bytes than its descriptor's {desc.size}; refusing it")
            pending += piece
            while len(pending) >= size:
                if held is not None:
                    yield held
                held, pending = pending[:size], pending[size:]
    except requests.RequestException as e:
        raise RegistryError(f"{what}: the download broke off ({_describe(e)})") from e
    if h.hexdigest() != desc.digest.hex or total != desc.size:
        raise RegistryError(f"{what}: the content hashes to sha256:{h.hexdigest()}, not to its digest; refusing it")
    yield (held or b"") + pending


def _cancel_on_close(resp: requests.Response, deadline: _Deadline) -> None:
    """End ``deadline`` when ``resp`` is closed (or dropped): its socket may then serve another request."""
    ref = weakref.ref(resp)

    def closed() -> None:
        deadline.cancel()
        alive = ref()
        if alive is not None:
            requests.Response.close(alive)

    resp.close = closed  # type: ignore[method-assign]
    weakref.finalize(resp, deadline.cancel)


def _late(what: str, deadline: _Deadline) -> RegistryError:
    return RegistryError(
        f"{what}: no complete answer within {deadline.seconds:g} s (connect, headers and body together); "
        "the registry is too slow or stalled",
        "try again later; the registry or the network between you is not answering in time",
    )


def _scope(image: ImageRef, push: bool = False, mount_from: ImageRef | None = None) -> str:
    """The token scopes a request needs, space-separated (each is one ``scope`` parameter of the token request)."""
    own = f"repository:{image.repository}:{'pull,push' if push else 'pull'}"
    if mount_from is None or mount_from.repository == image.repository:
        return own
    return f"{own} repository:{mount_from.repository}:pull"


def _basic(creds: tuple[str, str]) -> str:
    return "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode("ascii")


def _decode_auth(entry: object) -> tuple[str, str] | None:
    """``{"auth": base64("user:password")}`` (or ``username``/``password``) -> (user, password)."""
    if not isinstance(entry, dict):
        return None
    auth = entry.get("auth")
    if isinstance(auth, str) and auth:
        try:
            name, sep, secret = base64.b64decode(auth, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return (name, secret) if sep and name else None
    user, password = entry.get("username"), entry.get("password")
    if isinstance(user, str) and user and isinstance(password, str):
        return (user, password)
    return None


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
    text = _one_line(text)
    return text or (resp.reason or "no message")


def _describe(e: BaseException) -> str:
    if isinstance(e, requests.Timeout):
        return "timed out"
    if isinstance(e, requests.exceptions.SSLError):
        return f"TLS failed ({_innermost(e)})"
    if isinstance(e, requests.ConnectionError):
        return f"cannot connect ({_innermost(e)})"
    return _innermost(e)


def _innermost(e: BaseException) -> str:
    seen = e
    while True:
        nxt = seen.__cause__ or seen.__context__
        if nxt is None or nxt is seen:
            break
        seen = nxt
    reason = getattr(seen, "reason", None)
    return _one_line(str(reason or seen) or type(seen).__name__)[:300]


def _network_hint(e: BaseException, url: str) -> str:
    host = urlsplit(url).netloc
    if isinstance(e, requests.exceptions.SSLError):
        return f"if {host} speaks plain HTTP, allow it with --insecure-registry {host}"
    if isinstance(e, requests.Timeout):
        return "the registry is slow or unreachable; try again later"
    return f"check that {host} is the registry's address and is reachable"


def _login_hint(image: ImageRef) -> str:
    return (
        f"log in with `docker login {image.display_registry}` "
        "(patchkit reads ~/.docker/config.json: its auths and credential helpers)"
    )
