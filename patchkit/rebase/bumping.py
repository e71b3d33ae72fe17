"""bump --image: move a deployment onto a new image, its overlays rebased onto the files in that image.

The overlays of this kind of deployment are installed into the image at
``<prefix>/<base path>`` (``/usr/local/lib/python3.12/dist-packages`` +
``vllm/…``), whatever upstream their bases were first taken from (a release
wheel, a commit). A bump reads each base's new version at that very path in
the new image: the image upstream (registered with ``upstream add --image``,
or derived from ``[images.NAME]`` and the overlays' targets) ``adopt``s every
overlay in its tree, and the rebase moves them onto it, so after the bump
each base is the file it was verified against, in the image that runs.

``newest_clean`` walks candidate tags newest first (by the image's
``created``), dry-running the rebase for each, and names the newest onto
which every patch moves clean.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from patchkit.core.values import ContainerPath
from patchkit.errors import BadInput
from patchkit.lockfile.model import ImageUpstream, Lockfile, Patch
from patchkit.ship.adopt import adopt, based_overlays, in_image, upstream_state
from patchkit.sources.context import Context
from patchkit.store.repo import Repo

if TYPE_CHECKING:
    from patchkit.images.registry import RegistryClient


@dataclasses.dataclass(frozen=True)
class BumpTarget:
    """What ``bump --image REF`` moves: the image upstream, the images to re-pin and the resolved image.

    ``upstream`` is the image upstream whose files the overlays are rebased
    onto: the registered one for REF's repository, or one derived from the
    ``[images]`` entry and the overlays' targets (``derived``). ``pins`` maps
    each ``[images]`` name of that repository to REF's digest; ``reference``
    is REF pinned to that digest (``repo@sha256:…``), read once, so a tag
    that moves during the bump cannot mix two images.
    """

    upstream: ImageUpstream
    derived: bool
    pins: dict[str, str]
    reference: str


#: What a derived image upstream is named after its ``[images]`` entry (``vllm`` -> ``vllm-image``).
DERIVED_SUFFIX = "-image"


def bump_plan(lock: Lockfile, text: str, client: RegistryClient, upstream: str | None = None) -> BumpTarget:
    """For ``bump --image REF``: the image upstream to rebase onto, the images to re-pin, REF's digest.

    The upstream is the image upstream of REF's repository (or ``upstream``).
    When none is registered, it is derived from the ``[images]`` entry of that
    repository and the overlays' targets (see ``derive_upstream``): a
    deployment whose overlays are based on a wheel or a git commit needs no
    registration before its first bump. Every ``[images]`` entry of that
    repository moves to REF's digest in the same transaction, so the deployed
    image and the patches' bases agree.
    """
    from patchkit.oci.ref import ImageRef

    ref = ImageRef.parse(text)
    repository = ref.display_repository
    found, derived = _image_upstream(lock, repository, upstream)
    resolved = client.resolve(ref, platform=found.platform or "linux/amd64")
    pins = {img.name: str(resolved.digest) for img in lock.images if img.repository == repository}
    return BumpTarget(found, derived, pins, f"{repository}@{resolved.digest}")


def _image_upstream(lock: Lockfile, repository: str, name: str | None) -> tuple[ImageUpstream, bool]:
    """The registered image upstream of ``repository`` (or the one named), else one derived from the lockfile."""
    images = [u for u in lock.upstreams if isinstance(u, ImageUpstream)]
    if name is not None:
        named = lock.upstream(name)
        if not isinstance(named, ImageUpstream):
            what = "not in the lockfile" if named is None else f"a {named.source} upstream, not an image"
            known = ", ".join(f"{u.name} ({u.image})" for u in images) or "none"
            raise BadInput(
                f"--upstream {name}: {what} (image upstreams: {known})",
                f"leave --upstream out: bump derives the image upstream from [images] for {repository}",
            )
        return named, False
    mine = [u for u in images if u.image == repository]
    if len(mine) == 1:
        return mine[0], False
    if len(mine) > 1:
        raise BadInput(
            f"several image upstreams read {repository}: {', '.join(u.name for u in mine)}",
            "say which: --upstream NAME",
        )
    return derive_upstream(lock, repository), True


def derive_upstream(lock: Lockfile, repository: str) -> ImageUpstream:
    """The image upstream a bump of ``repository`` reads, made from the lockfile when none is registered.

    Its image is the ``[images]`` entry of ``repository`` (pinned digest,
    platform and runtime ``version``); its prefix is the directory the
    overlays are installed in, read off their targets (a target is
    ``<prefix>/<base path>``, ``/usr/local/lib/python3.12/dist-packages`` +
    ``vllm/…``). Refused (exit 2) when the lockfile pins no image of that
    repository, when no overlay says where its upstream tree is, or when the
    overlays name several prefixes, each with the command that settles it.
    """
    image = next((i for i in lock.images if i.repository == repository), None)
    if image is None:
        pinned = ", ".join(f"{i.name} ({i.repository})" for i in lock.images) or "none"
        raise BadInput(
            f"no image of {repository} is pinned in lockfile.toml (images: {pinned})",
            f"pin it first: patchkit image pin NAME {repository}:TAG",
        )
    prefixes = sorted({prefix for _, prefix in based_overlays(lock)})
    hint = f"patchkit upstream add {image.name}{DERIVED_SUFFIX} --image {image.reference} --prefix DIR"
    if not prefixes:
        raise BadInput(
            f"no overlay says where its upstream tree is in {repository} (no overlay target ends with its base path)",
            f"re-pin the image alone (patchkit image pin {image.name} REF), or register the tree: {hint}",
        )
    if len(prefixes) > 1:
        raise BadInput(
            f"the overlays are installed under several directories ({', '.join(prefixes)}); say which one "
            f"the image upstream reads",
            hint,
        )
    return ImageUpstream(
        name=f"{image.name}{DERIVED_SUFFIX}",
        image=repository,
        image_digest=image.digest,
        prefix=ContainerPath(prefixes[0]),
        platform=image.platform if image.platform not in (None, "linux/amd64") else None,
        version=image.version,
        note=f"the files of images.{image.name}: the overlays' bases are read from the pinned image",
    )


def warm_bases(repo: Repo, lock: Lockfile, up: ImageUpstream, cache: Context, store: Any) -> None:
    """Put the old base of every overlay ``adopt`` moves onto ``up`` in the cache, read where it was taken.

    The rebase reads an old base offline first (the cache, the committed
    overlay with its diff reversed); a diff-only overlay's base otherwise
    comes from its own upstream at its own pin (the wheel, the commit), never
    from the image, whose files are not what it was based on. Each base is
    verified against its pinned sha256 on the way.
    """
    from patchkit.rebase import overlays as rb
    from patchkit.sources.factory import open_source
    from patchkit.sources.interface import UpstreamSource

    moved = set(in_image(lock, up)[0])
    groups: dict[str, list[Patch]] = {}
    for p in lock.patches:
        if p.name in moved and p.base is not None and p.base.upstream != up.name:
            groups.setdefault(p.base.upstream, []).append(p)
    for name, patches in groups.items():
        own = lock.upstream(name)
        source: UpstreamSource | None = None
        if own is not None:
            try:
                source = open_source(own, cache, repo.root)
            except BadInput:
                source = None
        rb.read_bases(repo, lock, [(p, p.base) for p in patches if p.base is not None], source, store)


def _refuse_unbased(lock: Lockfile, up: ImageUpstream) -> None:
    """Refuse (exit 1) a bump that would move the image under overlays it cannot rebase."""
    from patchkit.errors import Refused

    unbased = in_image(lock, up)[1]
    if unbased:
        raise Refused(
            f"overlays installed in {up.image} have no pinned base at their target to rebase onto the new "
            f"image ({', '.join(unbased)}); re-pinning it would leave them built for the old one",
            "pin their bases (patchkit import --normalize --fetch), or remove them, then bump again",
        )


def start(
    repo: Repo,
    lock: Lockfile,
    lock_bytes: bytes,
    target: BumpTarget,
    *,
    cache: Context,
    store: Any,
    drop: tuple[str, ...] = (),
    remembered: bool = True,
) -> Any:
    """Rebase every overlay in the image's tree onto the new image and re-pin it: ``rebase.start``'s ``Started``.

    The old bases are read where they were taken (``warm_bases``), the
    overlays adopted by the image upstream (``adopt``), then the one rebase
    transaction commits patches, diffs, bases, the image upstream, the image
    pins and SHA256SUMS, or waits for ``rebase --continue`` with nothing
    written. Refused before anything is read when an overlay in the image
    has no base to rebase.
    """
    from patchkit.rebase import driver
    from patchkit.rebase import overlays as rb

    driver.refuse_if_waiting(repo.root)  # refused before any base is downloaded
    _refuse_unbased(lock, target.upstream)
    warm_bases(repo, lock, target.upstream, cache, store)
    return rb.start(
        repo,
        adopt(lock, target.upstream),
        lock_bytes,
        onto=None,
        upstream=target.upstream.name,
        source=f"image:{target.reference}",
        cache=cache,
        store=store,
        drop=drop,
        image_pins=target.pins,
        image_upstream=upstream_state(target.upstream),
        remembered=remembered,
    )


# --------------------------------------------------------------------------- the newest clean image


@dataclasses.dataclass
class Candidate:
    """One tag tried by ``newest_clean``: the image it names and how every patch would move onto it."""

    tag: str
    digest: str | None = None
    created: str | None = None
    version: str | None = None
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    # Why the tag could not be tried (the registry refused it, no such platform), or None.
    error: str | None = None
    failure: Exception | None = dataclasses.field(default=None, repr=False)

    @property
    def clean(self) -> bool:
        """Whether every patch moves onto this image clean: no conflict, nothing broken or deleted."""
        from patchkit.rebase.overlays import BLOCKING

        blocking = {o.value for o in BLOCKING}
        return self.error is None and not blocking & set(self.outcomes.values())

    def as_dict(self) -> dict[str, Any]:
        """The candidate as ``--format json`` shows it."""
        fields = ("tag", "digest", "created", "version", "outcomes", "error")
        return {**{f: getattr(self, f) for f in fields}, "clean": self.clean}

    def line(self) -> str:
        """One line of progress: the tag, when it was built, its runtime version and what blocks."""
        when = self.created or "no creation time"
        if self.error is not None:
            return f"{self.tag}  {when}  not tried: {self.error}"
        blocked = sorted(f"{n} ({o})" for n, o in self.outcomes.items() if not _moves(o))
        what = "every patch moves clean" if not blocked else "blocked: " + ", ".join(blocked)
        return f"{self.tag}  {when}  {self.version or 'version unknown'}  {what}"


def _moves(outcome: str) -> bool:
    from patchkit.rebase.overlays import BLOCKING

    return outcome not in {o.value for o in BLOCKING}


def candidate_tags(client: RegistryClient, repository: str, given: tuple[str, ...], glob: str | None) -> list[str]:
    """The tags to try: those given, else every tag of the repository (those ``glob`` matches)."""
    import fnmatch

    from patchkit.oci.ref import ImageRef

    for tag in given:
        if not ImageRef.is_tag(tag):
            raise BadInput(f"--tag {tag!r}: not a tag", "a tag is letters, digits, '_', '.' and '-' (nightly-2026…)")
    tags = list(dict.fromkeys(given)) or client.tags(ImageRef.parse(repository))
    if glob is not None:
        tags = [t for t in tags if fnmatch.fnmatchcase(t, glob)]
    if not tags:
        raise BadInput(
            f"no tag of {repository} to try" + (f" (none matches {glob!r})" if glob else ""),
            "name the tags with --tag TAG, or widen --tags GLOB",
        )
    return tags


def order_newest_first(client: RegistryClient, repository: str, tags: list[str], platform: str) -> list[Candidate]:
    """Each tag resolved, newest image first by its config's ``created``; tags that cannot be resolved last."""
    import datetime as dt

    from patchkit.errors import PatchkitError
    from patchkit.oci.ref import ImageRef

    found: list[Candidate] = []
    for tag in tags:
        cand = Candidate(tag)
        try:
            resolved = client.resolve(ImageRef.parse(f"{repository}:{tag}"), platform=platform)
            cand.digest = str(resolved.digest)
            cand.created = client.created(resolved)
        except PatchkitError as e:
            cand.error, cand.failure = e.message, e
        found.append(cand)

    def when(c: Candidate) -> tuple[int, dt.datetime, str]:
        try:
            t = dt.datetime.fromisoformat((c.created or "").replace("Z", "+00:00"))
            t = t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
        except ValueError:
            return (0 if c.error is None else -1, dt.datetime.min.replace(tzinfo=dt.UTC), c.tag)
        return (1, t, c.tag)

    return sorted(found, key=when, reverse=True)


def newest_clean(
    repo: Repo,
    lock: Lockfile,
    repository: str,
    client: RegistryClient,
    *,
    tags: tuple[str, ...] = (),
    glob: str | None = None,
    upstream: str | None = None,
    cache: Context,
    store: Any,
    progress: Any = None,
    remembered: bool = True,
) -> tuple[list[Candidate], Candidate | None]:
    """Dry-run the bump onto each candidate tag, newest first; stop at the first onto which every patch moves clean.

    Newest is the image's ``created`` time (what the builder recorded), not
    the tag's spelling; a tag without one is tried after those with one.
    Writes nothing to the repository (the cache keeps the files read). Each
    tag tried is handed to ``progress`` as it is decided. ``remembered``:
    a conflict resolved as recorded counts as clean (off: it is a conflict).
    """
    from patchkit.errors import PatchkitError
    from patchkit.rebase.overlays import plan
    from patchkit.sources.factory import open_source
    from patchkit.sources.image import ImageSource

    up, _ = _image_upstream(lock, repository, upstream)
    _refuse_unbased(lock, up)
    warm_bases(repo, lock, up, cache, store)
    work = adopt(lock, up)
    names = candidate_tags(client, repository, tags, glob)
    order = order_newest_first(client, repository, names, up.platform or "linux/amd64")
    old_source = open_source(up, cache, repo.root)
    tried: list[Candidate] = []
    try:
        for cand in order:
            if cand.error is None:
                source = ImageSource(repository, str(up.prefix), client=client, platform=up.platform or "linux/amd64")
                try:
                    snapshot = source.snapshot(str(cand.digest))
                    result = plan(repo, work, up.name, snapshot, old_source, store, replay=remembered)
                    cand.version = result.new_pin.version
                    cand.outcomes = {r.name: r.outcome.value for r in result.results}
                except PatchkitError as e:
                    cand.error, cand.failure = e.message, e
            tried.append(cand)
            if progress is not None:
                progress(cand)
            if cand.clean:
                return tried, cand
    finally:
        if isinstance(old_source, ImageSource):
            old_source.close()
    first = tried[0].failure if tried else None
    if first is not None and all(c.failure is not None for c in tried):
        raise first  # not one image could be read: the registry's failure, not a finding
    return tried, None


def series_notes(lock: Lockfile, up: ImageUpstream, version: str | None) -> list[str]:
    """One line per patch series applied to the image's tree: a bump moves overlays, not series.

    A series is applied when the image is built, to the tree at its own
    commit; the new image was built from another one (its runtime version
    names it), so the series needs its own rebase, which the line gives.
    """
    from patchkit.sources.image import commit_prefix

    prefix = str(up.prefix or "").rstrip("/")
    onto = commit_prefix(version) or "REV"
    out = []
    for s in lock.series:
        target = str(s.target or "").rstrip("/")
        if not target or not (target == prefix or target.startswith(prefix + "/") or prefix.startswith(target + "/")):
            continue
        at = str(s.commit or s.version or "its pin")
        out.append(
            f"series {s.name} applies to {target} in the image at {at}, and the new image was built from "
            f"{version or 'an unknown version'}: move it with patchkit rebase --series {s.name} --onto {onto}"
        )
    return out


def adopted_notes(lock: Lockfile, up: ImageUpstream) -> list[str]:
    """One line per upstream whose overlays this bump moves onto the image: where their bases were taken.

    The rebase's "from" names the image upstream's old pin; on a first bump
    the bases were files of another upstream (a release wheel, a commit),
    which the reviewer should see, and that upstream is then left without
    patches.
    """
    moved = set(in_image(lock, up)[0])
    groups: dict[str, list[str]] = {}
    for p in lock.patches:
        if p.name in moved and p.base is not None and p.base.upstream != up.name:
            groups.setdefault(p.base.upstream, []).append(p.name)
    out = []
    for name, names in groups.items():
        own = lock.upstream(name)
        pin = own.pin_text if own is not None else "not in the lockfile"
        left = [p for p in lock.patches if p.base is not None and p.base.upstream == name and p.name not in moved]
        rest = "" if left else f"; no patch is based on '{name}' any more"
        out.append(
            f"the bases of {', '.join(names)} were files of upstream '{name}' ({pin}); the bump bases them on "
            f"the files at their targets in the new image{rest}"
        )
    return out
