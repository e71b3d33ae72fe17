"""Registering and listing upstreams: which source serves each, and the pin that makes it exact."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TypedDict

from patchkit.core.outcome import Change
from patchkit.core.outcome import Outcome as WriteOutcome
from patchkit.core.values import ContainerPath, Digest, Revision, Sha256, check_name
from patchkit.errors import BadInput
from patchkit.lockfile.model import (
    DirUpstream,
    GitUpstream,
    ImageUpstream,
    Lockfile,
    PatchKind,
    Upstream,
    WheelUpstream,
)
from patchkit.sources.context import Context
from patchkit.sources.interface import Pin
from patchkit.store.persist import finish
from patchkit.store.repo import Repo


def register(
    repo: Repo,
    lock: Lockfile,
    name: str,
    cache: Context,
    *,
    git: str | None = None,
    commit: str | None = None,
    wheel: str | None = None,
    directory: str | None = None,
    image: str | None = None,
    prefix: str | None = None,
    platform: str = "linux/amd64",
    note: str | None = None,
) -> WriteOutcome:
    """Resolve the source to an exact pin (fetching or downloading as needed) and record it."""
    try:
        check_name(name, "upstream name")
    except ValueError as e:
        raise BadInput(f"NAME: {e}") from e
    if lock.upstream(name) is not None:
        raise BadInput(
            f"upstream '{name}' already exists",
            f"to move it to a new pin: patchkit rebase --upstream {name} --onto REV",
        )
    chosen = [x for x in (git, wheel, directory, image) if x is not None]
    if len(chosen) != 1:
        raise BadInput("give exactly one of --git URL, --wheel PROJECT==VERSION, --dir PATH or --image REF")
    if image is not None:
        up = _image_upstream(name, image, prefix, platform, note, cache)
    elif git is not None:
        from patchkit.sources.git import GitSource

        if commit is None:
            raise BadInput("--git needs --commit (a commit, branch or tag; patchkit pins the full commit)")
        pin = GitSource(git, cache.cache_dir, progress=cache.progress).snapshot(commit).pin
        up = GitUpstream(name=name, git=git, commit=Revision(pin.commit or ""), note=note)
    elif wheel is not None:
        from patchkit.sources.wheel import WheelSource

        project, sep, version = wheel.partition("==")
        if not sep or not project or not version:
            raise BadInput(f"--wheel {wheel!r}: expected PROJECT==VERSION, e.g. vllm==0.26.0")
        pin = WheelSource(project, cache.cache_dir, shows_progress=cache.shows_progress).snapshot(version).pin
        up = _wheel_upstream(name, project, pin, note)
    else:
        from patchkit.sources.directory import DirSource

        path = Path(directory or ".")
        if not (path if path.is_absolute() else repo.root / path).is_dir():
            raise BadInput(f"--dir {directory}: not a directory")
        pin = DirSource(path if path.is_absolute() else repo.root / path).snapshot().pin
        up = DirUpstream(name=name, dir=directory, dir_sha256=Sha256(pin.sha256) if pin.sha256 else None, note=note)
    new_lock = dataclasses.replace(lock, upstreams=(*lock.upstreams, up))
    outcome = WriteOutcome(written=finish(repo, new_lock))
    outcome.changes.append(Change(f"upstreams[{name}]", "unpinned", up.pin_text))
    return outcome


def _image_upstream(
    name: str, text: str, prefix: str | None, platform: str, note: str | None, ctx: Context
) -> Upstream:
    from patchkit.oci.ref import ImageRef
    from patchkit.sources.image import ImageSource

    if prefix is None:
        raise BadInput(
            "--image needs --prefix: where the upstream tree is inside the image",
            "e.g. --prefix /usr/local/lib/python3.12/dist-packages",
        )
    if prefix.rstrip("/") == "":
        raise BadInput("--prefix /: name the directory the upstream tree is in, not the root")
    with ImageSource(ImageRef.parse(text).display_repository, prefix, platform=platform, context=ctx) as source:
        snap = source.snapshot(text)
        version = snap.version
        return ImageUpstream(
            name=name,
            image=source.repository,
            image_digest=Digest(str(snap.digest)),
            image_tag=snap.tag,
            prefix=ContainerPath(source.prefix),
            platform=None if platform == "linux/amd64" else platform,
            version=version,
            note=note,
        )


def _wheel_upstream(name: str, project: str, pin: Pin, note: str | None) -> Upstream:
    return WheelUpstream(
        name=name,
        wheel=f"{project}=={pin.version}",
        wheel_sha256=Sha256(pin.sha256) if pin.sha256 else None,
        wheel_file=pin.filename,
        version=pin.version,
        note=note,
    )


class UpstreamRow(TypedDict):
    """One upstream as ``upstream list`` shows it (its JSON form, key for key)."""

    name: str
    source: str
    location: str | None
    pin: str
    commit: str | None
    wheel_sha256: str | None
    dir_sha256: str | None
    version: str | None
    overlays: int
    patches: list[str]
    note: str | None


def listing(lock: Lockfile) -> list[UpstreamRow]:
    """Each upstream with its source, pin and the patches based on it."""
    out: list[UpstreamRow] = []
    for up in sorted(lock.upstreams, key=lambda u: u.name):
        patches = [p.name for p in lock.patches if p.base is not None and p.base.upstream == up.name]
        location = up.location
        out.append(
            {
                "name": up.name,
                "source": up.source,
                "location": location,
                "pin": up.pin_text,
                "commit": str(up.commit) if up.commit else None,
                "wheel_sha256": str(up.wheel_sha256) if up.wheel_sha256 else None,
                "dir_sha256": str(up.dir_sha256) if up.dir_sha256 else None,
                "version": up.version,
                "overlays": sum(1 for p in lock.patches if p.kind is PatchKind.OVERLAY and p.name in patches),
                "patches": patches,
                "note": up.note,
            }
        )
    return out
