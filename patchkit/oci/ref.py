"""Image references: one parser, as Docker reads ``[registry/]repository[:tag][@sha256:…]``.

``ImageRef.parse`` is the only place patchkit reads an image reference: the
registry client, the Docker engine adapter, ``patchkit import`` (compose files)
and emit's rules all use it, so an image is accepted, refused and explained the
same way everywhere. Pure: text in, a frozen value out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from patchkit.core.values import Digest
from patchkit.errors import BadInput

#: Docker Hub: where its API lives, and how people write it.
DOCKER_HUB = "registry-1.docker.io"
DOCKER_HUB_DISPLAY = "docker.io"
HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?")
# Docker's tag grammar, ASCII only (``\w`` alone would take any letter of Unicode).
_TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
REF_HINT = "write [registry/]repository[:tag][@sha256:<64 hex>], e.g. vllm/vllm-openai-rocm:nightly"


@dataclass(frozen=True)
class ImageRef:
    """An image reference with Docker's defaults made explicit.

    ``registry`` is the host[:port] the API is served from (``registry-1.docker.io``
    for Docker Hub), ``repository`` the full path (``library/ubuntu``), ``tag``
    the tag (``None`` only when a digest is given without one) and ``digest``
    the manifest digest. When both are given the digest wins; the tag is kept
    for information.
    """

    registry: str
    repository: str
    tag: str | None = "latest"
    digest: Digest | None = None
    # The name as it was written (``ubuntu``, ``docker.io/library/caddy``), for an engine that finds images by it.
    written: str = field(default="", compare=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """Parse ``repo[:tag]``, ``registry/repo[:tag]``, ``repo@sha256:…`` or ``repo:tag@sha256:…`` as Docker does.

        The first path component is a registry when it contains a dot or a
        port, is ``localhost`` or has uppercase letters; otherwise the image is
        on Docker Hub, where a one-component name gets the ``library/`` prefix.
        Raises ``BadInput`` for anything Docker would refuse.
        """
        if not isinstance(text, str) or not text:
            raise BadInput("empty image reference", REF_HINT)
        shown = repr(text) if len(text) <= 200 else repr(text[:197] + "...")
        if any(c.isspace() for c in text) or len(text) > 512:
            raise BadInput(f"{shown} is not an image reference (no whitespace, at most 512 characters)", REF_HINT)
        rest, at, digest_text = text.partition("@")
        digest = _digest(digest_text, shown) if at else None
        name, tag = _split_tag(rest, shown)
        registry, repository = _split_registry(name, shown)
        _check_repository(repository, shown)
        if tag is None and digest is None:
            tag = "latest"
        return cls(registry, repository, tag, digest, written=name)

    @staticmethod
    def is_tag(text: str) -> bool:
        """Whether ``text`` alone is a tag (``nightly``, ``v0.26.1``): what may follow ``:`` in a reference."""
        return isinstance(text, str) and _TAG.fullmatch(text) is not None

    @property
    def display_registry(self) -> str:
        """The registry as people write it (``docker.io`` for Docker Hub)."""
        return DOCKER_HUB_DISPLAY if self.registry == DOCKER_HUB else self.registry

    @property
    def display_repository(self) -> str:
        """The repository as compose and Docker write it: Docker Hub names short, others with their host."""
        if self.display_registry == DOCKER_HUB_DISPLAY:
            return self.repository.removeprefix("library/")
        return f"{self.display_registry}/{self.repository}"

    @property
    def name(self) -> str:
        """``registry/repository``, canonical (``docker.io/library/ubuntu``)."""
        return f"{self.display_registry}/{self.repository}"

    @property
    def familiar(self) -> str:
        """The short form Docker prints: ``ubuntu:22.04`` rather than ``docker.io/library/ubuntu:22.04``."""
        name = self.name.removeprefix(f"{DOCKER_HUB_DISPLAY}/")
        if self.registry == DOCKER_HUB:
            name = name.removeprefix("library/")
        return name + self._suffix()

    @property
    def written_name(self) -> str:
        """The name as written when parsed, else the canonical one."""
        return self.written or self.name

    @property
    def reference(self) -> str:
        """What goes after ``/manifests/``: the digest when there is one, else the tag."""
        if self.digest is not None:
            return self.digest.text
        return self.tag or "latest"

    def with_digest(self, digest: Digest) -> ImageRef:
        """The same reference pinned to ``digest`` (the tag is kept for information)."""
        return replace(self, digest=digest)

    def _suffix(self) -> str:
        return (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    def __str__(self) -> str:
        return self.name + self._suffix()


def repository_key(text: str) -> str | None:
    """The repository a written image name is, as Docker resolves it (``registry/repository``, tag and digest
    aside): ``python``, ``library/python``, ``docker.io/library/python`` and ``index.docker.io/library/python``
    are all ``docker.io/library/python``. None when ``text`` is no image reference."""
    try:
        return ImageRef.parse(text).name
    except BadInput:
        return None


def familiar_repository(text: str) -> str:
    """A written image name (tag and digest aside) as patchkit records it: Docker Hub's short, others with
    their host (``docker.io/library/python`` is ``python``, ``index.docker.io/rocm/vllm`` is ``rocm/vllm``),
    so that one repository is one string in the lockfile and in every check; as written if it does not parse."""
    try:
        return ImageRef.parse(text).display_repository
    except BadInput:
        return text


def same_repository(a: str, b: str) -> bool:
    """Whether two written image names are one repository (see :func:`repository_key`); what does not parse
    is compared as written."""
    ka, kb = repository_key(a), repository_key(b)
    return a == b if ka is None or kb is None else ka == kb


def _digest(text: str, shown: str) -> Digest:
    try:
        return Digest(text)
    except ValueError as e:
        raise BadInput(f"{shown} is not an image reference: {e}", REF_HINT) from e


def _split_tag(rest: str, shown: str) -> tuple[str, str | None]:
    """``name[:tag]`` -> (name, tag); a colon before the last '/' is a registry's port, not a tag."""
    colon = rest.rfind(":")
    if colon <= rest.rfind("/"):
        return rest, None
    tag = rest[colon + 1 :]
    if not _TAG.fullmatch(tag):
        raise BadInput(
            f"{shown} is not an image reference: bad tag {tag!r} "
            "(letters, digits, '_', '.', '-'; at most 128, not starting with '.' or '-')",
            REF_HINT,
        )
    return rest[:colon], tag


def _split_registry(name: str, shown: str) -> tuple[str, str]:
    """(registry, repository) as Docker tells them apart, Docker Hub's aliases and ``library/`` made explicit."""
    first, slash, remainder = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.lower() != first):
        registry, repository = first, remainder
        if not _DOMAIN.fullmatch(registry):
            raise BadInput(f"{shown} is not an image reference: bad registry host {registry!r}", REF_HINT)
    else:
        registry, repository = DOCKER_HUB, name
    if registry in HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in repository:
            repository = f"library/{repository}"
    return registry, repository


def _check_repository(repository: str, shown: str) -> None:
    if not repository or not _REPOSITORY.fullmatch(repository) or len(repository) > 255:
        why = (
            "repository names are lowercase"
            if repository.lower() != repository
            else "bad repository name (components of lowercase letters and digits, joined by '.', '_', '__' or '-')"
        )
        raise BadInput(f"{shown} is not an image reference: {why}", REF_HINT)
