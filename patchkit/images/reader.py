"""One way into an image's files, two adapters behind it: the registry API and a Docker engine (``--via``).

``ImageReader`` is what reading files out of an image needs: the bytes of
absolute container paths in one image, for one platform. ``RegistryReader``
streams the layers through the registry client (no daemon);
``EngineReader`` copies the files out of a container a Docker engine creates,
pulling the image first when the engine lacks it. A command picks one by the
``--via`` name and hands it to the core, which never asks which it got.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from patchkit.images.engine import DockerEngine
    from patchkit.images.registry import RegistryClient
    from patchkit.oci.manifest import Resolved


class ImageReader(Protocol):
    """Reads files out of images (the registry API, or a Docker engine)."""

    def read_image(self, image: str | Resolved, paths: Sequence[str], platform: str) -> dict[str, bytes | None]:
        """The bytes of each absolute container path in ``image``; None where it is absent or not a regular file.

        ``image`` is a reference, or an image the registry client resolved
        (then read at exactly its digest). ``platform`` picks the manifest
        of a multi-platform image.
        """
        ...

    def close(self) -> None:
        """Let go of the connection (a reader made for one command)."""
        ...


class RegistryReader:
    """``ImageReader`` through the OCI distribution API: the layers streamed from the top, no daemon."""

    def __init__(self, client: RegistryClient) -> None:
        self.client = client

    def read_image(self, image: str | Resolved, paths: Sequence[str], platform: str) -> dict[str, bytes | None]:
        """See ``ImageReader.read_image``; every blob is verified against its digest as it streams."""
        from patchkit.oci.ref import ImageRef

        if isinstance(image, str):
            return dict(self.client.read_files(ImageRef.parse(image), paths, platform=platform))
        return dict(self.client.read_files(image, paths))  # resolved: its platform was chosen then

    def close(self) -> None:
        """Close the client's session (if the client made it)."""
        self.client.close()


class EngineReader:
    """``ImageReader`` through a Docker engine: pulled if missing, then copied out of a container it creates."""

    def __init__(self, engine: DockerEngine) -> None:
        self.engine = engine

    def read_image(self, image: str | Resolved, paths: Sequence[str], platform: str) -> dict[str, bytes | None]:
        """See ``ImageReader.read_image``; a resolved image is pulled by its digest, the registry spelled out."""
        ref = image if isinstance(image, str) else f"{image.ref.name}@{image.digest}"
        if self.engine.image_id(ref) is None:
            self.engine.pull(ref, platform=platform)
        return dict(self.engine.read_files(ref, list(paths)))

    def close(self) -> None:
        """Close the connection to the engine."""
        self.engine.close()
