"""``patchkit check --online``: what only the network can tell.

:func:`online_findings` asks each service in turn (the registries, the
model hub, the issue tracker). A service that cannot be reached is reported
as one ``unknown`` finding naming it and the reason, and the other services
are still asked: one unreachable host never hides what the others say.

Each pinned image's digest must still resolve in its registry (a failure);
a recorded tag that now points elsewhere is worth knowing (a note: the pin
is what runs). With ``--image-bases``, each overlay whose target exists in a
pinned image is compared with the recorded base: a difference means the
overlay would silently revert what that image contains.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import ExternalFailure
from patchkit.findings import Finding
from patchkit.hashing import pin_mismatch
from patchkit.lockfile.model import LOCKFILE_NAME, Lockfile, PatchKind

if TYPE_CHECKING:
    from patchkit.github import IssueTracker
    from patchkit.images.registry import RegistryClient
    from patchkit.model.hub import Hub

Locate = Callable[[tuple[str | int, ...]], int | None]


def online_findings(
    lock: Lockfile,
    locate: Locate,
    cache: Path,
    *,
    registry: Callable[[], RegistryClient],
    hub: Callable[[], Hub],
    tracker: Callable[[], IssueTracker],
    image_bases: bool = False,
) -> list[Finding]:
    """Every ``--online`` finding: registries, then the model hub, then the issue tracker.

    The clients come from the caller (the command line builds them from its
    options and the environment), each only when its service is asked.

    A service that fails (unreachable, 5xx, rate limit used up) gives one
    finding of severity ``unknown`` with its message and hint; the check goes
    on with the next service.
    """
    from patchkit.refs import ref_findings

    def images() -> list[Finding]:
        return image_findings(lock, locate, registry(), image_bases=image_bases)

    def model() -> list[Finding]:
        from patchkit.model.findings import revision_findings

        return revision_findings(lock, locate, hub())

    def refs() -> list[Finding]:
        return ref_findings(lock, locate, cache, tracker)

    asked: list[tuple[str, str, Callable[[], list[Finding]]]] = []
    if lock.images:
        asked.append(("images", "the image registries", images))
    if lock.model is not None:
        asked.append(("model", "the model hub", model))
    asked.append(("refs", "the issue tracker", refs))
    out: list[Finding] = []
    for field, service, ask in asked:
        try:
            out.extend(ask())
        except ExternalFailure as e:
            out.append(
                Finding(
                    "online-unavailable",
                    LOCKFILE_NAME,
                    locate((field,)),
                    f"{service} could not be asked, so this was not checked: {e.message}",
                    e.hint or "retry when the service is reachable",
                    field=field,
                    severity="unknown",
                )
            )
    return out


def image_findings(
    lock: Lockfile, locate: Locate, client: RegistryClient, *, image_bases: bool = False
) -> list[Finding]:
    """Findings about the lockfile's images from their registries, asked through ``client``."""
    from patchkit.images.ref import ImageRef

    out: list[Finding] = []
    for img in lock.images:
        line = locate(("images", img.name, "digest"))
        pinned = ImageRef.parse(f"{img.repository}@{img.digest}")
        if not client.exists(pinned):
            out.append(
                Finding(
                    "image-gone",
                    LOCKFILE_NAME,
                    line,
                    f"images.{img.name}: {img.repository}@{img.digest} no longer resolves in its registry",
                    f"pin an image that exists: patchkit image pin {img.name} {img.repository}:<tag>",
                    field=f"images.{img.name}.digest",
                )
            )
            continue
        if img.tag:
            now = client.resolve(ImageRef.parse(f"{img.repository}:{img.tag}"))
            if str(now.digest) != str(img.digest):
                out.append(
                    Finding(
                        "tag-moved",
                        LOCKFILE_NAME,
                        line,
                        f"images.{img.name}: tag {img.tag} now points to {now.digest}, not the pinned {img.digest} "
                        "(the pin is what runs)",
                        f"to move to it: patchkit image pin {img.name} {img.repository}:{img.tag}",
                        field=f"images.{img.name}.tag",
                        severity="note",
                    )
                )
    if image_bases:
        out.extend(_image_bases(lock, locate, client))
    if lock.derived:
        from patchkit.images.verify import derived_findings

        out.extend(derived_findings(lock, locate, client))
    return out


def _image_bases(lock: Lockfile, locate: Locate, client: RegistryClient) -> list[Finding]:
    from patchkit.images.ref import ImageRef

    overlays = [(i, p) for i, p in enumerate(lock.patches) if p.kind is PatchKind.OVERLAY and p.base is not None]
    out: list[Finding] = []
    for img in lock.images:
        found = client.read_files(
            ImageRef.parse(f"{img.repository}@{img.digest}"), [str(p.target) for _, p in overlays]
        )
        for i, p in overlays:
            data = found.get(str(p.target))
            if data is None or p.base is None:
                continue
            got = pin_mismatch(data, p.base.sha256.hex)
            if got is not None:
                out.append(
                    Finding(
                        "image-base-mismatch",
                        LOCKFILE_NAME,
                        locate(("patches", i, "base", "sha256")),
                        f"'{p.name}': {p.target} in image {img.name} has sha256 {got[:12]}…, not the recorded base "
                        f"{p.base.sha256.short}…: the overlay would revert what the image contains",
                        f"rebase the patch onto the image's file: patchkit rebase --upstream {p.base.upstream} …",
                        field=f"patches[{p.name}].base.sha256",
                    )
                )
    return out
