"""Container images: ``image resolve/pin/cat/files``."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cli.common import (
    FORMAT,
    INSECURE,
    PLATFORM,
    SubGroup,
    blob_store,
    docker_engine,
    open_repo,
    pinned_or_given,
    print_changes,
    registry_client,
    run_context,
    source_date_epoch,
)
from patchkit.errors import EXIT_FINDINGS, EXIT_OK

if TYPE_CHECKING:
    from patchkit.images.reader import ImageReader


def _via_registry(insecure: tuple[str, ...]) -> ImageReader:
    from patchkit.images.reader import RegistryReader

    return RegistryReader(registry_client(insecure))


def _via_docker(insecure: tuple[str, ...]) -> ImageReader:
    from patchkit.images.reader import EngineReader

    del insecure  # the engine has its own registry settings
    return EngineReader(docker_engine())


#: ``--via``: the ``ImageReader`` adapter each name opens (the first is the default).
READERS: dict[str, Callable[[tuple[str, ...]], ImageReader]] = {"registry": _via_registry, "docker": _via_docker}
VIA = click.option("--via", type=click.Choice(list(READERS)), default="registry", show_default=True)


@click.group(cls=SubGroup)
def image() -> None:
    """Resolve image references to digests, pin them, read files out of images."""


@image.command("resolve")
@click.argument("ref")
@PLATFORM
@INSECURE
@FORMAT
def image_resolve(ref: str, platform: str, insecure: tuple[str, ...], fmt: str) -> None:
    """Resolve REF (repo:tag, registry/repo:tag, repo@sha256:…) to its digests, without a daemon.

    The digest is the top-level one (a multi-platform index, or the manifest):
    what compose pins. The platform digest is the manifest chosen for
    --platform: what the files are read from.
    """
    from patchkit.ship.operations import resolve

    with registry_client(insecure) as client:
        found = resolve(client, ref, platform)
    from patchkit.formats import images

    click.echo(images.resolved(found, fmt), nl=False)


@image.command("pin")
@click.argument("name")
@click.argument("ref")
@PLATFORM
@INSECURE
@FORMAT
@click.pass_context
def image_pin(ctx: click.Context, name: str, ref: str, platform: str, insecure: tuple[str, ...], fmt: str) -> None:
    """Resolve REF and pin it as images.NAME: digest, tag, time, and the platform digest."""
    from patchkit.ship.operations import pin

    repo, lockf, _ = open_repo(ctx, writes=True)
    with registry_client(insecure) as client:
        outcome = pin(repo, lockf, name, ref, client, platform)
    print_changes(outcome, fmt, "nothing changed")


@image.command("cat")
@click.argument("image_ref", metavar="IMAGE")
@click.argument("path")
@VIA
@PLATFORM
@INSECURE
@click.pass_context
def image_cat(
    ctx: click.Context, image_ref: str, path: str, via: str, platform: str, insecure: tuple[str, ...]
) -> None:
    """Print the file PATH of IMAGE (a reference, or the name of a pinned image)."""
    from patchkit.errors import BadInput
    from patchkit.ship.operations import image_reference, read

    text = pinned_or_given(ctx, image_ref, image_reference)
    data = read(functools.partial(READERS[via], insecure), text, [path], platform=platform).get(path)
    if data is None:
        raise BadInput(f"{path}: no such file in {text}")
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@image.command("files")
@click.argument("image_ref", metavar="IMAGE")
@click.argument("paths", nargs=-1, required=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Directory to write into.")
@VIA
@PLATFORM
@INSECURE
@click.pass_context
def image_files(
    ctx: click.Context,
    image_ref: str,
    paths: tuple[str, ...],
    out: Path,
    via: str,
    platform: str,
    insecure: tuple[str, ...],
) -> None:
    """Copy PATHs out of IMAGE into --out, each at its container path; exit 1 if any is missing."""
    from patchkit.ship.operations import image_reference, read, write_files

    text = pinned_or_given(ctx, image_ref, image_reference)
    found = read(functools.partial(READERS[via], insecure), text, list(paths), platform=platform)
    for path in write_files(found, out):
        click.echo(f"wrote {out / path.lstrip('/')}")
    missing = [p for p, data in found.items() if data is None]
    for p in missing:
        click.echo(f"missing {p}", err=True)
    ctx.exit(EXIT_FINDINGS if missing else EXIT_OK)


@image.command("build")
@click.option("--push", "push", required=True, metavar="REGISTRY/REPO[:TAG]", help="Where to push the derived image.")
@click.option("--profile", default=None, help="The deploy.toml profile to build for (default: single).")
@click.option(
    "--chunk-size", type=click.IntRange(min=1), default=None, metavar="BYTES", help="Upload the layer in chunks."
)
@INSECURE
@FORMAT
@click.pass_context
def image_build(
    ctx: click.Context, push: str, profile: str | None, chunk_size: int | None, insecure: tuple[str, ...], fmt: str
) -> None:
    """Build the derived image (the pinned base plus one reproducible layer of every file that runs) and push it.

    No Docker engine: the base's layers stay in the registry (mounted or
    already there), only the new layer, configs and manifests are uploaded.
    The digests are pinned as derived.PROFILE in the lockfile.
    """
    from patchkit.ship.build import build_image

    repo, lockf, _ = open_repo(ctx, writes=True)
    with registry_client(insecure) as client:
        outcome, built = build_image(
            repo,
            lockf,
            blob_store(),
            run_context(insecure),
            push,
            client=client,
            source_date_epoch=source_date_epoch(),
            profile=profile,
            chunk_size=chunk_size,
        )
    from patchkit.formats import changes, images

    click.echo(changes.notes(outcome, fmt), err=True, nl=False)
    click.echo(images.built(built, outcome, fmt), nl=False)


# The top-level commands of this family; `patchkit.cli.app` registers them on the root group.
COMMANDS: tuple[click.Command, ...] = (image,)
