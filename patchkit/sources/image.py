"""Image upstreams: the Python files installed inside a container image, pinned by the image's digest.

``ImageSource(repository, prefix)`` serves upstream paths (``vllm/envs.py``)
from ``<prefix>/<path>`` inside an image of ``repository``, where ``prefix``
is the absolute container directory the project is installed in
(``/usr/local/lib/python3.12/dist-packages``). ``snapshot(ref)`` resolves a
tag, a digest or a full reference with the registry client, which hashes
every manifest itself; the snapshot is that exact image.

The pin (``Pin(kind="image")``):

- ``sha256``: the hex of the *top-level* digest, the one ``docker pull
  repo@sha256:…`` and compose pin. For a multi-platform image that is the
  index digest, which together with the platform (kept by the caller beside
  the pin, ``ImageSource.platform``) names exactly one platform manifest; the
  platform manifest's digest is ``ImageSnapshot.platform_digest``, for
  information. The hex form is what every other ``Pin.sha256`` holds.
- ``path``: ``repository@sha256:<hex>``, a pullable reference (the repository
  as compose writes it: Docker Hub names short, others with their host).
- ``version``: the runtime version found in the image (``runtime_version``),
  or None.

Reading: each ``read`` is one ``RegistryClient.read_files`` call, one walk
down the layers that stops as soon as every path is decided, whatever the
number of paths. Files already read are kept by the snapshot (an image at a
digest never changes), and the version file rides along with the first read,
so taking a snapshot's pin after reading costs no more requests. With
``via="docker"`` the files are copied out of a container created by a Docker
engine instead (the image is pulled by digest first when the engine lacks
it); the digest is still resolved, and verified, through the registry.

``runtime_version`` reads the setuptools-scm version file vLLM ships
(``vllm/_version.py``); ``commit_prefix`` takes the git commit out of such a
version (``0.26.1rc1.dev229+g124154a88`` -> ``124154a88``). A wheel's
``*.dist-info/METADATA`` cannot be found in an image without listing the
directory, because its name carries the very version being looked for, so a
``METADATA`` is only used when the caller hands one in.
"""

from __future__ import annotations

import ast
import email.parser
import email.policy
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.core.values import Digest
from patchkit.errors import BadInput
from patchkit.images.reader import EngineReader, ImageReader, RegistryReader
from patchkit.oci.manifest import Platform, Resolved
from patchkit.oci.ref import ImageRef
from patchkit.sources.context import Context
from patchkit.sources.interface import Pin, Snapshot, UpstreamSource, check_path

if TYPE_CHECKING:
    from patchkit.images.engine import DockerEngine
    from patchkit.images.registry import RegistryClient

#: Upstream paths of the runtime version file, tried in order (setuptools-scm's ``write_to``).
VERSION_FILES = ("vllm/_version.py",)
#: The project whose ``*.dist-info/METADATA`` may stand in for the version file.
VERSION_PROJECT = "vllm"


def _via_registry(source: ImageSource) -> ImageReader:
    return RegistryReader(source.client)


def _via_docker(source: ImageSource) -> ImageReader:
    return EngineReader(source.engine)


#: How files are read out of the image (``via``): the ``ImageReader`` over the source's client or engine.
_READERS: dict[str, Callable[[ImageSource], ImageReader]] = {"registry": _via_registry, "docker": _via_docker}
VIA = tuple(_READERS)

# A version file bigger than this is not setuptools-scm's (which is a few hundred bytes).
_MAX_VERSION_FILE = 64 << 10
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,127}")
_VERSION_NAMES = ("__version__", "version")
_VERSION_LINE = re.compile(
    rb"^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:\w+\s*=\s*)*(['\"])([^'\"\n]+)\1\s*(?:#.*)?$", re.MULTILINE
)
# The local version segment setuptools-scm writes for a git node: 'g' and the abbreviated commit id.
_GIT_NODE = re.compile(r"g([0-9a-f]{7,40})")
_REF_HINT = "give a tag (nightly), a digest (sha256:<64 hex>) or a full reference of the same repository"


class ImageSource(UpstreamSource):
    """An upstream whose files are installed in a container image, below ``prefix``.

    ``repository`` is the image repository alone (``vllm/vllm-openai-rocm``,
    ``ghcr.io/org/app``, ``127.0.0.1:5000/team/app``): no tag, no digest.
    ``prefix`` is an absolute container path; upstream path ``p`` is read at
    ``<prefix>/<p>``. ``platform`` picks the manifest of a multi-platform
    image. ``client`` is the registry client to use (when none is given, one
    is made on first use by ``context``, the command's); ``via="docker"``
    reads files through ``engine`` (likewise, the context's engine) instead of
    the registry. Raises ``BadInput`` for a malformed repository, prefix,
    platform or ``via``.
    """

    kind = "image"

    def __init__(
        self,
        repository: str,
        prefix: str,
        *,
        client: RegistryClient | None = None,
        platform: str = "linux/amd64",
        via: str = "registry",
        engine: DockerEngine | None = None,
        context: Context | None = None,
    ) -> None:
        self._context = context if context is not None else Context(Path())
        self._image = _repository_ref(repository)
        #: The repository as compose writes it (``vllm/vllm-openai``, ``ghcr.io/o/r``).
        self.repository = self._image.display_repository
        #: The absolute container directory upstream paths start in, normalised (no trailing '/').
        self.prefix = _check_prefix(prefix)
        #: ``os/architecture[/variant]``, normalised.
        self.platform = str(Platform.parse(platform))
        if via not in VIA:
            raise BadInput(f"via {via!r}: expected one of {', '.join(VIA)}")
        self.via = via
        self._client = client
        self._own_client = client is None
        self._engine = engine
        self._own_engine = engine is None

    def __repr__(self) -> str:
        return f"ImageSource({self.repository!r}, {self.prefix!r}, platform={self.platform!r}, via={self.via!r})"

    @property
    def client(self) -> RegistryClient:
        """The registry client (made on first use when none was given)."""
        if self._client is None:
            self._client = self._context.registry()
        return self._client

    @property
    def engine(self) -> DockerEngine:
        """The Docker engine (connected on first use when none was given); only for ``via="docker"``."""
        if self._engine is None:
            self._engine = self._context.engine()
        return self._engine

    def close(self) -> None:
        """Close the registry client and the engine connection this source made (not those handed in)."""
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None
        if self._own_engine and self._engine is not None:
            self._engine.close()
            self._engine = None

    def __enter__(self) -> ImageSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def container_path(self, path: str) -> str:
        """Where upstream path ``path`` is inside the image (``BadInput`` for an unclean path)."""
        check_path(path)
        return posixpath.join(self.prefix, path)

    def reference(self, ref: str) -> ImageRef:
        """``ref`` as a reference into this repository.

        ``sha256:<hex>`` is a digest and anything that is a valid tag is a tag
        (``nightly``, ``v0.26.1``). Anything else must be a full reference
        (``repo:tag``, ``repo@sha256:…``, ``registry/repo:tag@sha256:…``) of this
        same repository; a digest in it wins over its tag. ``BadInput`` otherwise.
        """
        if not isinstance(ref, str) or not ref:
            raise BadInput(f"{self.repository}: empty image reference", _REF_HINT)
        if ref.startswith("sha256:"):
            try:
                return replace(self._image, tag=None, digest=Digest(ref))
            except ValueError as e:
                raise BadInput(f"{ref!r}: {e}", _REF_HINT) from e
        if ImageRef.is_tag(ref):
            return replace(self._image, tag=ref, digest=None)
        parsed = ImageRef.parse(ref)
        if (parsed.registry, parsed.repository) != (self._image.registry, self._image.repository):
            raise BadInput(
                f"{ref!r} is an image of {parsed.display_repository}, not of {self.repository}",
                "an image upstream reads one repository; change the upstream's image to switch repositories",
            )
        return parsed

    def snapshot(self, ref: str) -> ImageSnapshot:
        """Resolve ``ref`` (a tag, a digest or a full reference, see ``reference``) to the exact image.

        The manifest (and, for a multi-platform index, the platform's manifest)
        is fetched and hashed by the registry client; a digest must hash to
        itself. Raises ``BadInput`` for a malformed reference or an image
        without this platform, ``RegistryError`` (a ``SourceError``) when the
        registry cannot be reached, refuses, or has no such tag or digest.
        """
        image = self.reference(ref)
        return ImageSnapshot(self, self.client.resolve(image, self.platform))

    def _read(self, snapshot: ImageSnapshot, paths: list[str]) -> dict[str, bytes | None]:
        """Upstream paths -> bytes in one read of the image (the registry's layers, or one container)."""
        container = {self.container_path(p): p for p in paths}
        found = _READERS[self.via](self).read_image(snapshot.resolved, list(container), self.platform)
        return {container[c]: found[c] for c in container}


class ImageSnapshot(Snapshot):
    """One image, resolved to its digest: the upstream files installed in it."""

    def __init__(self, source: ImageSource, resolved: Resolved) -> None:
        self.source = source
        #: What the registry client resolved (both digests, the media type, the platform).
        self.resolved = resolved
        self._files: dict[str, bytes | None] = {}
        self._version: str | None = None
        self._version_known = False

    def __repr__(self) -> str:
        return f"ImageSnapshot({self.reference!r}, platform={self.platform!r})"

    @property
    def digest(self) -> Digest:
        """The top-level digest: the index of a multi-platform image, else the manifest (what the pin holds)."""
        return self.resolved.digest

    @property
    def platform_digest(self) -> Digest:
        """The digest of the platform's manifest, which the files are read from (= ``digest`` for one platform)."""
        return self.resolved.platform_digest

    @property
    def platform(self) -> str:
        """The platform of the manifest read (``linux/amd64``)."""
        return self.resolved.platform

    @property
    def tag(self) -> str | None:
        """The tag the snapshot was resolved from; None when it was taken by digest."""
        return self.resolved.ref.tag

    @property
    def reference(self) -> str:
        """``repository@sha256:…``: the pinned, pullable reference (the pin's ``path``)."""
        return f"{self.source.repository}@{self.digest}"

    @property
    def engine_reference(self) -> str:
        """The pinned reference with the registry spelled out, as a Docker engine pulls it."""
        return f"{self.resolved.ref.name}@{self.digest}"

    @property
    def version(self) -> str | None:
        """The runtime version installed in the image (see ``runtime_version``); read on first use."""
        if not self._version_known:
            self.read(())
        return self._version

    @property
    def pin(self) -> Pin:
        """``Pin(kind="image", sha256=<top-level digest hex>, version=<runtime version>, path=<repo@digest>)``.

        Reads the version file on first use unless a ``read`` already did.
        """
        return Pin(kind="image", sha256=self.digest.hex, version=self.version, path=self.reference)

    def read(self, paths: Iterable[str]) -> dict[str, bytes | None]:
        """The bytes of each upstream path in the image; None where it is missing or not a regular file.

        All paths not read before (and, the first time, the version file) are
        read in one ``read_files`` call: one walk down the layers, or one
        container. A symbolic link is followed inside the image. A path that
        is not a clean relative path raises ``BadInput``; a file over the
        client's size limit too. Registry and engine failures are
        ``SourceError``s.
        """
        wanted = list(dict.fromkeys(paths))
        for p in wanted:
            check_path(p)
        todo = [p for p in wanted if p not in self._files]
        if not self._version_known:
            todo += [p for p in VERSION_FILES if p not in self._files and p not in todo]
        if todo:
            self._files.update(self.source._read(self, todo))
        if not self._version_known:
            self._version = runtime_version({p: self._files.get(p) for p in VERSION_FILES})
            self._version_known = True
        return {p: self._files[p] for p in wanted}


# --- runtime versions ------------------------------------------------------------------------------


def runtime_version(snapshot_or_files: Snapshot | Mapping[str, bytes | None]) -> str | None:
    """The runtime version of vLLM in a snapshot, or in files already read; None when there is none.

    A snapshot (of an image, a wheel, any source) is asked for
    ``VERSION_FILES`` (an ``ImageSnapshot`` has read them already). A mapping
    is upstream path -> bytes (or None), as ``Snapshot.read`` returns: the
    first of ``VERSION_FILES`` that holds a version wins; otherwise a
    ``vllm-*.dist-info/METADATA`` in the mapping, if one was handed in, gives
    its ``Version:``. Nothing is executed: the version file is parsed.
    """
    if isinstance(snapshot_or_files, ImageSnapshot):
        return snapshot_or_files.version
    if isinstance(snapshot_or_files, Snapshot):
        files: Mapping[str, bytes | None] = snapshot_or_files.read(VERSION_FILES)
    else:
        files = snapshot_or_files
    for path in VERSION_FILES:
        data = files.get(path)
        if data is not None and (found := parse_version_file(data)):
            return found
    for path, data in sorted(files.items()):
        if data is not None and _is_project_metadata(path) and (found := parse_metadata_version(data)):
            return found
    return None


def parse_version_file(data: bytes) -> str | None:
    """The version a setuptools-scm version file assigns, without running it; None if it assigns none.

    Accepts ``__version__ = version = '…'``, ``version = '…'``, annotated
    assignments (``__version__: str = '…'``) and files whose other lines a
    different Python would parse (a line-by-line reading then). A value that
    does not look like a version is refused (None).
    """
    if len(data) > _MAX_VERSION_FILE:
        return None
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        m = _VERSION_LINE.search(data)
        return _clean_version(m.group(2).decode("utf-8", "replace")) if m else None
    for node in tree.body:
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in _VERSION_NAMES for t in node.targets
        ):
            value = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            value = node.value if node.target.id in _VERSION_NAMES else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return _clean_version(value.value)
    return None


def parse_metadata_version(data: bytes) -> str | None:
    """The ``Version:`` of a core metadata file (``METADATA``, ``PKG-INFO``); None if it has none."""
    if len(data) > 4 * _MAX_VERSION_FILE:
        data = data[: 4 * _MAX_VERSION_FILE]  # the headers come first; the description can be long
    headers = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(data)
    value = headers.get("Version")
    return _clean_version(str(value)) if value is not None else None


def commit_prefix(version: str | None) -> str | None:
    """The abbreviated git commit in a setuptools-scm version's local part, lowercase; None if there is none.

    ``0.26.1rc1.dev229+g124154a88`` -> ``124154a88``, also with more local
    segments after it (``+g124154a88.rocm723``, ``+g124154a88.d20261130``,
    the date a dirty tree adds). A release (``0.26.1``) or a local part
    without a ``g<hex>`` segment (``+cu128``, ``+rocm723``) has none.
    """
    if not version:
        return None
    _, plus, local = version.strip().partition("+")
    if not plus:
        return None
    for segment in re.split(r"[._-]", local.lower()):
        if m := _GIT_NODE.fullmatch(segment):
            return m.group(1)
    return None


def _clean_version(text: str) -> str | None:
    text = text.strip()
    return text if _VERSION.fullmatch(text) else None


def _is_project_metadata(path: str) -> bool:
    """``vllm-0.26.1.dist-info/METADATA`` (at the top of the tree, project name normalised)."""
    directory, _, name = path.rpartition("/")
    if name != "METADATA" or "/" in directory or not directory.endswith(".dist-info"):
        return False
    project = directory.removesuffix(".dist-info").split("-", 1)[0]
    return re.sub(r"[-_.]+", "-", project).lower() == VERSION_PROJECT


# --- references and prefixes -----------------------------------------------------------------------


def _repository_ref(repository: str) -> ImageRef:
    """The repository alone, parsed; a tag or a digest in it is refused (the snapshot's ref names those)."""
    if not isinstance(repository, str) or not repository:
        raise BadInput("empty image repository", "write the repository alone, e.g. vllm/vllm-openai-rocm")
    if "@" in repository or ":" in repository.rsplit("/", 1)[-1]:
        raise BadInput(
            f"{repository!r} must be the image repository alone, without a tag or digest",
            "give the tag or digest to the snapshot (upstream add --image REPO:TAG stores them apart)",
        )
    return replace(ImageRef.parse(repository), tag=None, digest=None)


def _check_prefix(prefix: str) -> str:
    """An absolute container directory, normalised (``/usr//lib/./x/`` is ``/usr/lib/x``; ``/`` stays ``/``)."""
    hint = "write the directory the project is installed in, e.g. /usr/local/lib/python3.12/dist-packages"
    if not isinstance(prefix, str) or not prefix.startswith("/"):
        raise BadInput(f"prefix {prefix!r} is not an absolute container path", hint)
    if any(c in prefix for c in "\x00\n\r"):
        raise BadInput(f"prefix {prefix!r} contains a control character", hint)
    if ".." in prefix.split("/"):
        raise BadInput(f"prefix {prefix!r} contains '..'", hint)
    return "/" + posixpath.normpath(prefix).lstrip("/")
