"""What a command hands the core about the world it runs in: the user cache, the clients, the progress display.

The command line builds one ``Context`` per run, from its options and the
environment (read there, once), and hands it down. Below ``patchkit.cli``
nothing reads the environment or builds a registry client or Docker engine
connection of its own: it takes them from the context, so a library caller, or
a test, decides all of it in one value. ``Context(cache_dir)`` alone draws no
progress and has no clients (a use of one names what is missing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.core.progress import StartProgress, no_progress
from patchkit.errors import BadInput

if TYPE_CHECKING:
    from patchkit.images.engine import DockerEngine
    from patchkit.images.registry import RegistryClient
    from patchkit.store.cache import BlobStore


@dataclass(frozen=True)
class Context:
    """The user cache, the progress display and the client factories a command hands the core."""

    cache_dir: Path
    progress: StartProgress = no_progress
    #: Whether progress is shown at all: tools that draw their own bar (pip, the Hub) follow it.
    shows_progress: bool = False
    #: Makes a registry client allowing plain HTTP to the given hosts (``--insecure-registry``).
    registry_factory: Callable[[tuple[str, ...]], RegistryClient] | None = None
    engine_factory: Callable[[], DockerEngine] | None = None
    #: The hosts this command allows plain HTTP to (loopback registries always may).
    insecure: tuple[str, ...] = ()

    @property
    def blobs(self) -> BlobStore:
        """The content-addressed store of base files under the cache."""
        from patchkit.store.cache import BlobStore

        return BlobStore(self.cache_dir)

    def registry(self) -> RegistryClient:
        """A registry client as the command configured it (plain-HTTP hosts, the Docker config)."""
        if self.registry_factory is None:
            raise BadInput("this operation reads an image from a registry, and no registry client was given")
        return self.registry_factory(self.insecure)

    def engine(self) -> DockerEngine:
        """A connection to the Docker engine the command named."""
        if self.engine_factory is None:
            raise BadInput("this operation reads an image through Docker, and no Docker engine was given")
        return self.engine_factory()
