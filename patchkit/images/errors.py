"""The registry's error: what every failure to talk to a registry, or to trust what it served, raises (exit 3)."""

from __future__ import annotations

from patchkit.errors import SourceError


class RegistryError(SourceError):
    """A registry could not be reached, refused us, or served something that fails verification.

    ``status`` is the HTTP status when there was one. The message is one line:
    what was asked, of which registry, and what it answered.
    """

    def __init__(self, message: str, hint: str | None = None, *, status: int | None = None) -> None:
        super().__init__(" ".join(message.split()), hint)
        self.status = status
