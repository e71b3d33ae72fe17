"""The Docker-engine path for images: local digests, pulls, and files copied out of a container.

A thin adapter over the docker SDK (docker-py), imported only by the commands
that read images ``--via docker``. ``DockerEngine`` talks to the engine named by
``base_url`` or by the environment (``DOCKER_HOST``, as the docker CLI does)
and wraps every SDK, HTTP and tar error into ``EngineUnavailable`` (no engine
answers) or ``SourceError`` (the engine answered with a failure), both exit 3.

Reading files never starts anything: a container is *created* from the image
(which needs no runtime, only the storage driver), each path is copied out
with the archive endpoint (``GET /containers/{id}/archive``), and the
container is removed again, also when the read fails.

The SDK is untyped; the few parts of it used here are described by the
``_Client`` protocols below and cast once, where the client is made.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import socket
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, cast

import docker  # type: ignore[import-untyped]  # docker-py ships no type information
import requests

from patchkit.errors import BadInput, PatchkitError, SourceError
from patchkit.oci.layers import normalise_path  # the same path rule for both ways in
from patchkit.oci.ref import ImageRef

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

#: Where the SDK and the docker CLI look when neither ``base_url`` nor ``DOCKER_HOST`` is set.
DEFAULT_HOST = "unix:///var/run/docker.sock"

#: The largest single file ``read_files`` returns; a larger one is refused rather than held in memory.
MAX_FILE_SIZE = 256 * 1024 * 1024

# Bytes per chunk of an archive stream: bounds what is in flight besides the file being read.
_CHUNK = 1024 * 1024

# Go's os.FileMode type bits, as the engine reports them in the archive stat header.
_MODE_DIR = 1 << 31
_MODE_SYMLINK = 1 << 27
_MODE_TYPE = _MODE_DIR | _MODE_SYMLINK | 1 << 26 | 1 << 25 | 1 << 24 | 1 << 21 | 1 << 19

# The engine resolves a symlink's whole chain in one answer; more hops than this means a loop.
_MAX_LINK_HOPS = 8

# Created containers are never started: the entrypoint only has to be non-empty so an image
# without Entrypoint/Cmd can be created at all ("No command specified").
_NEVER_STARTED = ["/nonexistent/patchkit-never-started"]
_LABEL = {"org.patchkit.purpose": "read-files"}

# What the engine takes as an image id (or a unique prefix of one) rather than a reference.
_IMAGE_ID = re.compile(r"(?:sha256:)?[0-9a-f]{12,64}")

_HINT = "start one, set DOCKER_HOST, or use --via registry"


class EngineUnavailable(SourceError):
    """No Docker engine answers at the address patchkit was given (exit 3)."""


class _Image(Protocol):
    id: str
    attrs: Mapping[str, object]  # the engine's JSON about the image


class _Images(Protocol):
    def get(self, name: str) -> _Image: ...


class _Container(Protocol):
    id: str

    def remove(self, *, v: bool = ..., force: bool = ...) -> None: ...


class _Containers(Protocol):
    def create(
        self, image: str, *, entrypoint: list[str], network_disabled: bool, labels: dict[str, str]
    ) -> _Container: ...


class _LowLevelApi(Protocol):
    base_url: str
    api_version: str

    def version(self, api_version: bool = ...) -> Mapping[str, object]: ...

    def get(self, url: str, **kwargs: Any) -> requests.Response: ...

    def pull(
        self, repository: str, tag: str, *, stream: bool, decode: bool, platform: str | None
    ) -> Iterator[Mapping[str, object]]: ...


class _Client(Protocol):
    images: _Images
    containers: _Containers
    api: _LowLevelApi

    def close(self) -> None: ...


def local_name(ref: ImageRef) -> str:
    """The name the engine finds a pulled image under: ``name@digest`` or ``name:tag``, the name as written.

    With a digest the tag is informational only: Docker pulls and finds the
    image by the digest alone.
    """
    name = ref.written_name
    return f"{name}@{ref.digest}" if ref.digest else f"{name}:{ref.tag or 'latest'}"


def _canonical(entry: str) -> str | None:
    """The canonical repository of a ``RepoDigests`` entry (``name@sha256:…``); None if it does not parse."""
    try:
        return ImageRef.parse(entry).name
    except BadInput:
        return None


def docker_host(environ: Mapping[str, str]) -> str:
    """The engine the environment names, as for the docker CLI: ``$DOCKER_HOST``, else the local socket."""
    return environ.get("DOCKER_HOST") or DEFAULT_HOST


class DockerEngine:
    """A connection to a Docker engine, for finding, pulling and reading images.

    ``base_url`` is an engine address (``unix:///run/docker.sock``,
    ``tcp://host:2375``); without it the environment decides (``DOCKER_HOST``,
    ``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``), as for the docker CLI.
    ``timeout`` bounds each request to the engine in seconds, except a pull,
    which the SDK lets run as long as the engine keeps it going. Connecting
    asks the engine for its API version, so an unreachable engine is reported
    here, as ``EngineUnavailable``.
    """

    def __init__(self, base_url: str | None = None, timeout: float = 60, max_file_size: int = MAX_FILE_SIZE) -> None:
        self.url = base_url or DEFAULT_HOST  # the command line passes $DOCKER_HOST (docker_host)
        self.timeout = timeout
        self.max_file_size = max_file_size
        # The SDK's own version detection leaks its sockets when the engine is unreachable, so a
        # probe pinned to the oldest API asks first (and is closed), then the client speaks the
        # engine's version, as ``version="auto"`` would.
        self._check_socket()
        probe = self._connect(base_url, docker.constants.MINIMUM_DOCKER_API_VERSION)
        try:
            api_version = str(probe.api.version(api_version=False)["ApiVersion"])
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            raise self._unavailable(e) from e
        finally:
            probe.close()
        client = self._connect(base_url, api_version)
        self._client = client

    def _check_socket(self) -> None:
        """For a unix socket address, connect once ourselves: the SDK leaks the socket of a failed connect."""
        scheme, sep, path = self.url.partition("://")
        if not sep or scheme not in ("unix", "http+unix") or not path:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(self.timeout)
                s.connect(path)
        except OSError as e:
            raise self._unavailable(e) from e

    def _connect(self, base_url: str | None, version: str) -> _Client:
        """An SDK client for ``version`` of the engine API (which makes no request yet)."""
        try:
            if base_url is None:
                client = docker.from_env(version=version, timeout=self.timeout)
            else:
                client = docker.DockerClient(base_url=base_url, version=version, timeout=self.timeout)
        except docker.errors.DockerException as e:
            raise self._unavailable(e) from e
        return cast(_Client, client)

    def __repr__(self) -> str:
        return f"DockerEngine({self.url!r})"

    def close(self) -> None:
        """Close the connections to the engine."""
        self._client.close()

    def __enter__(self) -> DockerEngine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def image_id(self, ref: str) -> str | None:
        """The id (``sha256:`` of the config) of the local image ``ref`` names; None if it is not present."""
        image = self._get_image(ImageRef.parse(ref))
        return None if image is None else str(image.id)

    def local_digest(self, ref: str) -> str | None:
        """The registry digest Docker recorded for ``ref``, as ``repo@sha256:…``; None if there is none.

        This is the ``RepoDigests`` entry of the reference's repository: the
        digest the image was pulled by, which for a multi-platform image is the
        index digest, not the platform manifest's. None when the image is not
        present locally, or when it never came from that repository (built or
        loaded locally, or only tagged with that name). For a tag whose image
        carries several digests of the repository, Docker cannot tell which
        one the tag came from, and this refuses to guess.
        """
        parsed = ImageRef.parse(ref)
        image = self._get_image(parsed)
        if image is None:
            return None
        entries = image.attrs.get("RepoDigests") or []
        wanted = parsed.name
        matching = []
        for entry in entries if isinstance(entries, list) else []:
            _, sep, digest = str(entry).rpartition("@")
            if sep and _canonical(str(entry)) == wanted:
                if parsed.digest is not None and digest == str(parsed.digest):
                    return str(entry)
                matching.append(str(entry))
        if parsed.digest is not None or not matching:
            return None
        if len(matching) > 1:
            raise BadInput(
                f"{ref}: the local image carries {len(matching)} digests of {parsed.written_name} "
                f"({', '.join(sorted(matching))}); Docker does not record which one the tag came from",
                "name the image by digest (repo@sha256:…), or resolve the tag with --via registry",
            )
        return matching[0]

    def pull(self, ref: str, platform: str | None = None) -> str:
        """Pull ``ref`` (by its digest if it has one, else by its tag) and return the image id.

        Only that one tag or digest is pulled, never the repository's other
        tags. ``platform`` (``linux/amd64``) picks the manifest of a
        multi-platform image; the default is the engine's own platform.
        Registry credentials come from the docker config (``~/.docker/config.json``).
        """
        parsed = ImageRef.parse(ref)
        with self._errors(f"docker pull {ref}"):
            events = self._client.api.pull(
                parsed.written_name, parsed.reference, stream=True, decode=True, platform=platform
            )
            for event in events:
                # The engine answers 200 and reports a failed pull inside the progress stream.
                if event.get("error") or event.get("errorDetail"):
                    detail = event.get("errorDetail")
                    message = (
                        event.get("error") or (detail.get("message") if isinstance(detail, dict) else None) or "failed"
                    )
                    raise SourceError(f"docker pull {ref}: {_one_line(str(message))}")
        image = self._get_image(parsed)
        if image is None:
            raise SourceError(f"docker pull {ref} finished, but the engine has no image {local_name(parsed)}")
        return str(image.id)

    def read_files(self, image: str, paths: Iterable[str]) -> dict[str, bytes | None]:
        """The bytes of each absolute container path in ``image`` (a reference or an image id).

        Paths are absolute and normalised as the registry path does
        (``/a//b/./c`` is ``/a/b/c``); the result is keyed by the paths as
        given. A path that does not exist, or is not a regular file (a
        directory, a device), maps to None; a symlink is followed inside the
        image. A file over ``max_file_size`` is refused (``BadInput``). The
        image must be present locally (see ``pull``). One container is
        created for the whole call, never started, and always removed.
        """
        # A bad reference is the caller's mistake, not the engine's; with a digest the tag is ignored.
        name = image if _IMAGE_ID.fullmatch(image) else local_name(ImageRef.parse(image))
        wanted = {p: normalise_path(p) for p in paths}
        if not wanted:
            return {}
        with self._errors(f"creating a container from {image}"):
            try:
                container = self._client.containers.create(
                    name, entrypoint=_NEVER_STARTED, network_disabled=True, labels=_LABEL
                )
            except docker.errors.ImageNotFound as e:
                raise SourceError(
                    f"image {image} is not in the Docker engine at {self.url}",
                    "pull it first (docker pull), or use --via registry",
                ) from e
        try:
            found = {norm: self._read_one(container, norm, image) for norm in dict.fromkeys(wanted.values())}
        except BaseException:
            self._remove(container, quiet=True)
            raise
        self._remove(container, quiet=False)
        return {given: found[norm] for given, norm in wanted.items()}

    def _read_one(self, container: _Container, path: str, image: str) -> bytes | None:
        """One path out of the created container, following symlinks as the engine resolves them."""
        for _ in range(_MAX_LINK_HOPS):
            with self._errors(f"reading {path} from {image}"):
                archive = self._archive(container, path, image)
                if archive is None:
                    return None
                response, stat = archive
                stream = response.iter_content(_CHUNK)
                try:
                    mode = int(stat.get("mode", 0))
                    if mode & _MODE_SYMLINK:
                        # The engine resolves the whole chain within the container's root.
                        target = str(stat.get("linkTarget") or "")
                        if not target.startswith("/"):
                            return None
                        path = target
                        continue
                    if mode & _MODE_TYPE:
                        return None
                    size = int(stat.get("size", 0))
                    self._check_size(path, image, size)
                    return self._extract(stream, path, image)
                finally:
                    # Closes the connection, read or not: an archive nobody reads would keep
                    # the engine writing into it, holding the container until it gives up.
                    response.close()
        raise SourceError(f"{path} in {image}: more than {_MAX_LINK_HOPS} symlinks in a row")

    def _archive(self, container: _Container, path: str, image: str) -> tuple[requests.Response, dict[str, Any]] | None:
        """``GET /containers/{id}/archive``: the open streaming response and the path's stat; None for no such path.

        The SDK's ``get_archive`` hides the response inside a generator that
        cannot close it before it is started (a refusal by size never starts
        it), so the request is made here, on the SDK's own session.
        """
        api = self._client.api
        response = api.get(
            f"{api.base_url}/v{api.api_version}/containers/{container.id}/archive",
            params={"path": path},
            headers={"Accept-Encoding": "identity"},
            stream=True,
            timeout=self.timeout,
        )
        if response.status_code == 404:
            response.close()
            return None
        if response.status_code >= 400:
            try:
                why = _one_line(response.json().get("message", "") or response.text)
            except ValueError:
                why = _one_line(response.text)
            response.close()
            raise SourceError(f"reading {path} from {image}: the engine answered {response.status_code}: {why}")
        encoded = response.headers.get("X-Docker-Container-Path-Stat")
        try:
            stat = docker.utils.decode_json_header(encoded) if encoded else {}
        except ValueError as e:
            response.close()
            raise SourceError(f"reading {path} from {image}: the engine sent an unreadable path stat") from e
        return response, stat if isinstance(stat, dict) else {}

    def _check_size(self, path: str, image: str, size: int) -> None:
        if size > self.max_file_size:
            limit = self.max_file_size
            shown = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit}-byte"
            raise BadInput(
                f"{path} in {image} is {size} bytes, over the {shown} limit for a file read from an image",
                "patchkit reads source files and tables; leave large files out of the paths",
            )

    def _extract(self, stream: Iterator[bytes], path: str, image: str) -> bytes | None:
        """The one regular file in the archive stream, read incrementally (never the whole archive)."""
        raw = io.BufferedReader(_IterReader(stream), buffer_size=_CHUNK)
        try:
            with tarfile.open(fileobj=raw, mode="r|") as tar:
                member = tar.next()
                if member is None:
                    raise SourceError(f"{path} in {image}: the engine sent an empty archive")
                if not member.isreg():
                    return None
                self._check_size(path, image, member.size)
                f = tar.extractfile(member)
                if f is None:
                    return None
                # Chunk by chunk into one growing buffer: about the file's size in memory, not twice it.
                out = io.BytesIO()
                shutil.copyfileobj(f, out, _CHUNK)
                data = out.getvalue()
        except tarfile.TarError as e:
            raise SourceError(f"{path} in {image}: unreadable archive from the engine ({e})") from e
        if len(data) != member.size:
            raise SourceError(f"{path} in {image}: the archive ended after {len(data)} of {member.size} bytes")
        return data

    def _remove(self, container: _Container, *, quiet: bool) -> None:
        """Remove the container and its anonymous volumes; ``quiet`` when another error is on its way."""
        try:
            with self._errors(f"removing container {container.id[:12]}"):
                container.remove(v=True, force=True)
        except PatchkitError as e:
            if quiet:
                return
            e.hint = f"remove it by hand: docker rm -f {container.id}"
            raise

    def _get_image(self, parsed: ImageRef) -> _Image | None:
        with self._errors(f"looking up {local_name(parsed)}"):
            try:
                return self._client.images.get(local_name(parsed))
            except docker.errors.ImageNotFound:
                return None

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Turn what the SDK, requests and the engine raise into patchkit errors with one-line messages."""
        try:
            yield
        except PatchkitError:
            raise
        except requests.exceptions.Timeout as e:
            raise EngineUnavailable(
                f"the Docker engine at {self.url} did not answer within {self.timeout:g} s ({action})",
                "check the engine (docker info), or use --via registry",
            ) from e
        except requests.exceptions.ConnectionError as e:
            raise self._unavailable(e) from e
        except docker.errors.APIError as e:
            raise SourceError(f"{action}: {_one_line(str(e.explanation or e))}") from e
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            raise SourceError(f"{action}: {_one_line(str(e))}") from e

    def _unavailable(self, e: BaseException) -> EngineUnavailable:
        return EngineUnavailable(f"no Docker engine at {self.url}: {_reason(e)}", _hint_for(e))


class _IterReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks, holding at most one chunk."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        target = memoryview(buffer).cast("B")
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        n = min(len(target), len(self._pending))
        target[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _causes(e: BaseException) -> Iterator[BaseException]:
    """``e`` and every exception inside it (causes, contexts, exceptions passed as arguments)."""
    seen: set[int] = set()
    todo = [e]
    while todo and len(seen) < 32:
        cur = todo.pop(0)
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        todo.extend(a for a in cur.args if isinstance(a, BaseException))
        todo.extend(x for x in (cur.__cause__, cur.__context__) if x is not None)


def _reason(e: BaseException) -> str:
    """Why the engine could not be reached, in a few words ("Connection refused")."""
    for cur in _causes(e):
        if isinstance(cur, OSError) and cur.strerror:
            return str(cur.strerror)
    innermost = list(_causes(e))[-1]
    return _one_line(str(innermost) or type(innermost).__name__)


def _hint_for(e: BaseException) -> str:
    if any(isinstance(cur, PermissionError) for cur in _causes(e)):
        return "join the docker group (or run as root), set DOCKER_HOST, or use --via registry"
    return _HINT
