"""``patchkit check --online``: what only the network can tell.

:func:`online_findings` asks each service in turn (the registries, the
model hub, the issue tracker). A service that cannot be reached is reported
as one ``unknown`` finding naming it and the reason, and the other services
are still asked: one unreachable host never hides what the others say. Each
registry is such a service of its own: one that cannot be asked leaves the
images on the others checked in full (:func:`image_findings`).

Each pinned image's digest must still resolve in its registry (a failure);
a recorded tag that now points elsewhere is worth knowing (a note: the pin
is what runs). With ``--image-bases``, each overlay whose target exists in a
pinned image is compared with the recorded base: a difference means the
overlay would silently revert what that image contains.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from patchkit.core.findings import Finding
from patchkit.core.hashing import pin_mismatch
from patchkit.core.values import LOCKFILE_NAME
from patchkit.errors import ExternalFailure
from patchkit.lockfile.model import Image, Lockfile, Patch, PatchKind
from patchkit.sources.context import Context

if TYPE_CHECKING:
    from patchkit.images.registry import RegistryClient
    from patchkit.net.github import IssueTracker
    from patchkit.net.hub import Hub
    from patchkit.oci.ref import ImageRef

Locate = Callable[[tuple[str | int, ...]], int | None]


def online_findings(
    lock: Lockfile,
    locate: Locate,
    cache: Context,
    *,
    registry: Callable[[], RegistryClient],
    hub: Callable[[], Hub],
    tracker: Callable[[], IssueTracker],
    image_bases: bool = False,
    added: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Every ``--online`` finding: registries, then the model hub, then the issue tracker.

    The clients come from the caller (the command line builds them from its
    options and the environment), each only when its service is asked.
    ``added`` is what ``image build`` puts in a derived layer besides the
    pins (see :func:`image_findings`).

    A service that fails (unreachable, 5xx, rate limit used up) gives one
    finding of severity ``unknown`` with its message and hint; the check goes
    on with the next service.
    """
    from patchkit.tracking.refs import ref_findings

    def images() -> list[Finding]:
        return image_findings(lock, locate, registry(), image_bases=image_bases, added=added)

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
    lock: Lockfile,
    locate: Locate,
    client: RegistryClient,
    *,
    image_bases: bool = False,
    added: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Findings about the lockfile's images from their registries, asked through ``client``.

    Each image (and each derived image) is asked on its own: a registry that
    cannot be asked gives one ``unknown`` finding naming it and what was not
    checked, and every image on another registry still gets all its findings.
    A registry that did not answer at all (no connection, a timeout, a TLS
    failure, a 5xx or 429) is not asked again in this run. ``added`` is what
    ``image build`` puts in a derived layer besides the pins
    (:func:`patchkit.ship.verify.build_adds`).
    """
    from patchkit.oci.ref import ImageRef

    asker = _Asker()
    refs = {img.name: ImageRef.parse(f"{img.repository}@{img.digest}") for img in lock.images}
    for img in lock.images:
        line = locate(("images", img.name, "digest"))
        asker.ask(f"images.{img.name}", line, (refs[img.name],), partial(_pinned_image, img, line, client))
    if image_bases:
        gone = {f.field for f in asker.out if f.code == "image-gone"}
        overlays = [(i, p) for i, p in enumerate(lock.patches) if p.kind is PatchKind.OVERLAY and p.base is not None]
        for img in (i for i in lock.images if f"images.{i.name}.digest" not in gone):
            line = locate(("images", img.name, "digest"))
            ask = partial(_image_bases, img, overlays, locate, client)
            asker.ask(f"images.{img.name}", line, (refs[img.name],), ask)
    if lock.derived:
        from patchkit.ship.verify import one_derived, stale_findings

        asker.out.extend(stale_findings(lock, locate))
        for d in lock.derived:
            line = locate(("derived", d.name, "digest"))
            where = (ImageRef.parse(f"{d.repository}@{d.digest}"), *([refs[d.base]] if d.base in refs else []))
            asker.ask(f"derived.{d.name}", line, where, partial(one_derived, lock, d, locate, client, added or {}))
    return asker.findings()


class _Asker:
    """Asks each image's registry on its own; remembers the registries that did not answer, and what failed."""

    def __init__(self) -> None:
        self.out: list[Finding] = []
        self.down: dict[str, _Down] = {}
        self.failed: set[str] = set()  # subjects already reported as not checked

    def ask(self, subject: str, line: int | None, refs: tuple[ImageRef, ...], ask: Callable[[], list[Finding]]) -> None:
        """``ask()``'s findings, or ``subject`` recorded as not checked when its registry cannot be asked.

        ``refs`` are the images ``ask`` reads, its own first: a registry
        already down is not asked again, and a registry that stops answering
        now is taken to be the first one's (the message quotes the request
        that failed). A subject already reported is not asked again either.
        """
        if subject in self.failed:
            return
        hosts = [r.display_registry for r in refs]
        known = next((self.down[h] for h in hosts if h in self.down), None)
        if known is not None:
            if subject not in known.subjects:
                known.subjects.append(subject)
            return
        try:
            self.out.extend(ask())
        except ExternalFailure as e:
            if _unreachable(e):
                self.down[hosts[0]] = _Down(e, subject, line, [subject])
            else:
                self.failed.add(subject)
                self.out.append(_not_checked(hosts[0], e, subject, line, [subject]))

    def findings(self) -> list[Finding]:
        """Every finding, then one ``unknown`` line per registry that could not be asked."""
        down = [_not_checked(host, d.error, d.field, d.line, d.subjects) for host, d in self.down.items()]
        return [*self.out, *down]


@dataclass
class _Down:
    """A registry that did not answer: the first failure, where it was, and every subject left unchecked."""

    error: ExternalFailure
    field: str
    line: int | None
    subjects: list[str]


def _unreachable(e: ExternalFailure) -> bool:
    """Whether ``e`` says the registry as a whole did not answer (not: this image is refused or forged)."""
    from patchkit.images.errors import RegistryError
    from patchkit.net.transport import HttpError, TooLong

    if not isinstance(e, RegistryError):
        return False
    if e.status is not None:
        return e.status >= 500 or e.status == 429
    cause = e.__cause__
    return isinstance(cause, HttpError) and not isinstance(cause, TooLong)


def _not_checked(host: str, e: ExternalFailure, field: str, line: int | None, subjects: list[str]) -> Finding:
    what = "this was" if subjects == [field] else f"{', '.join(subjects)} were"
    return Finding(
        "online-unavailable",
        LOCKFILE_NAME,
        line,
        f"registry {host} could not be asked, so {what} not checked: {e.message}",
        e.hint or f"retry when {host} is reachable",
        field=field,
        severity="unknown",
    )


def _pinned_image(img: Image, line: int | None, client: RegistryClient) -> list[Finding]:
    """The pinned digest still resolves (a failure when not); a recorded tag that moved is a note."""
    from patchkit.oci.ref import ImageRef

    pinned = ImageRef.parse(f"{img.repository}@{img.digest}")
    if not client.exists(pinned):
        return [
            Finding(
                "image-gone",
                LOCKFILE_NAME,
                line,
                f"images.{img.name}: {img.repository}@{img.digest} no longer resolves in its registry",
                f"pin an image that exists: patchkit image pin {img.name} {img.repository}:<tag>",
                field=f"images.{img.name}.digest",
            )
        ]
    if not img.tag:
        return []
    now = client.resolve(ImageRef.parse(f"{img.repository}:{img.tag}"))
    if str(now.digest) == str(img.digest):
        return []
    return [
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
    ]


def _image_bases(
    img: Image, overlays: list[tuple[int, Patch]], locate: Locate, client: RegistryClient
) -> list[Finding]:
    """Each overlay whose target ``img`` has, compared with its recorded base."""
    from patchkit.oci.ref import ImageRef

    found = client.read_files(ImageRef.parse(f"{img.repository}@{img.digest}"), [str(p.target) for _, p in overlays])
    out: list[Finding] = []
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
