"""The Context a command hands the core: the cache, the clients it makes (with the command's plain-HTTP hosts)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from patchkit.core.progress import no_progress
from patchkit.errors import BadInput
from patchkit.sources.context import Context


def test_a_bare_context_has_no_clients_and_shows_nothing(tmp_path: Path) -> None:
    ctx = Context(tmp_path)
    assert ctx.progress is no_progress and not ctx.shows_progress
    assert ctx.blobs.root == tmp_path / "blobs" / "sha256"
    with pytest.raises(BadInput, match="no registry client was given"):
        ctx.registry()
    with pytest.raises(BadInput, match="no Docker engine was given"):
        ctx.engine()


def test_the_registry_client_gets_the_commands_plain_http_hosts(tmp_path: Path) -> None:
    asked: list[tuple[str, ...]] = []

    def factory(insecure: tuple[str, ...]) -> object:
        asked.append(insecure)
        return object()

    ctx = Context(tmp_path, registry_factory=factory)  # type: ignore[arg-type]  # a stand-in client
    ctx.registry()
    dataclasses.replace(ctx, insecure=("registry.internal:5000",)).registry()
    assert asked == [(), ("registry.internal:5000",)]
