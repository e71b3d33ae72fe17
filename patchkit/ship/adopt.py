"""The overlays installed in an image, and the lockfile a bump onto that image sees (pure).

An overlay installed at ``<prefix>/<base path>`` of an image is read, by a
bump, at that very path in the new image, whichever upstream its base was
first taken from: ``adopt`` gives the rebase a lockfile in which the image
upstream is registered and those overlays are based on it. The rebase saves
the image upstream (``upstream_state``) so that ``rebase --continue``
commits the same bump.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from patchkit.core.values import ContainerPath, Digest
from patchkit.lockfile.model import ImageUpstream, Lockfile, Patch, PatchKind


def based_overlays(lock: Lockfile) -> list[tuple[Patch, str]]:
    """Each overlay with a pinned base whose target is ``<prefix>/<base path>``, with that prefix."""
    out = []
    for p in lock.patches:
        if p.kind is not PatchKind.OVERLAY or p.base is None:
            continue
        target, path = str(p.target), str(p.base.path)
        if target.endswith("/" + path) and len(target) > len(path) + 1:
            out.append((p, target[: -len(path) - 1]))
    return out


def in_image(lock: Lockfile, up: ImageUpstream) -> tuple[list[str], list[str]]:
    """The overlays installed below ``up``'s prefix: those a bump moves, and those without a base it cannot."""
    prefix = str(up.prefix or "").rstrip("/") + "/"
    moved, unbased = [], []
    for p in lock.patches:
        if p.kind is not PatchKind.OVERLAY or not str(p.target).startswith(prefix):
            continue
        if p.base is not None and str(p.target) == prefix + str(p.base.path):
            moved.append(p.name)
        else:
            unbased.append(p.name)
    return moved, unbased


def adopt(lock: Lockfile, up: ImageUpstream) -> Lockfile:
    """``lock`` as the bump onto ``up`` sees it: ``up`` registered, every overlay in its tree based on it.

    An overlay installed at ``<prefix>/<base path>`` is read from the image at
    that very path, whichever upstream its base was taken from (a wheel, a
    commit): after the bump its base is the new image's file, verified there.
    Only this in-memory lockfile changes; the rebase commits it with the new
    bases, or keeps the repository as it was.
    """
    moved = set(in_image(lock, up)[0])
    patches = tuple(
        dataclasses.replace(p, base=dataclasses.replace(p.base, upstream=up.name))
        if p.name in moved and p.base is not None
        else p
        for p in lock.patches
    )
    upstreams = lock.upstreams if lock.upstream(up.name) is not None else (*lock.upstreams, up)
    return dataclasses.replace(lock, patches=patches, upstreams=upstreams)


def upstream_state(up: ImageUpstream) -> dict[str, str | None]:
    """An image upstream as a rebase in progress saves it, to commit the same bump at ``--continue``."""
    return {
        "name": up.name,
        "image": up.image,
        "image_digest": str(up.image_digest) if up.image_digest else None,
        "prefix": str(up.prefix) if up.prefix else None,
        "platform": up.platform,
        "version": up.version,
        "note": up.note,
    }


def upstream_from_state(doc: Mapping[str, object]) -> ImageUpstream:
    """The image upstream ``upstream_state`` saved (``ValueError`` for a malformed one)."""
    digest, prefix = _optional(doc, "image_digest"), _optional(doc, "prefix")
    return ImageUpstream(
        name=str(doc["name"]),
        image=str(doc["image"]),
        image_digest=Digest(digest) if digest else None,
        prefix=ContainerPath(prefix) if prefix else None,
        platform=_optional(doc, "platform"),
        version=_optional(doc, "version"),
        note=_optional(doc, "note"),
    )


def _optional(doc: Mapping[str, object], key: str) -> str | None:
    """The saved field ``key``: a string or None (absent); anything else is a malformed state."""
    value = doc.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"the saved image upstream's {key} is not a string")
