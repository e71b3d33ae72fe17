"""The repository's own upstream and image pins agree with the lockfile's (``upstream-pin-drift``).

A hand-kept repository states its upstream commit in files of its own: a
KEY=VALUE ``upstream.lock`` (``VLLM_COMMIT=…``, ``VLLM_TAG=…``), a JSON stack
lock (``base_commit``), a Containerfile ``ARG VLLM_COMMIT=…`` default, a
compose ``build.args``, a ``FROM …@sha256:`` base. ``import`` read them into
the lockfile (``importing/pins.py``); after ``rebase`` or ``bump`` moves the
lockfile's upstream to another commit, or its image to another digest, those
files still state the old one and the build they drive builds it. Each such
pin is reported at its file and line, with the value to write.

A pin is compared only with the upstream it names for certain: by the
repository URL stated beside it, else by the upstream's name as import named
it (the key's prefix, ``VLLM_COMMIT`` is ``vllm``, or the enclosing JSON
key). A pin whose upstream is not in the lockfile, a tag the lockfile records
no version for, a release commit (the lockfile records none) and a commit
prefix of the lockfile's commit are not drift. An image pin is compared only
when the lockfile pins that image repository at a single digest.

A JSON or TOML lock's ``images`` (``{"vllm": "repo:tag@sha256:…"}``) are image pins too; one written
by tag only beside a patch series is ``queue-image-unpinned``, as import reports it, until it is pinned.

Only a lockfile ``import`` wrote is read this way (``build_steps.imported``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.check.build_steps import imported
from patchkit.core.findings import Finding
from patchkit.oci.ref import same_repository

if TYPE_CHECKING:
    from patchkit.check.state import ImagePin, State
    from patchkit.importing.pins import Pin
    from patchkit.lockfile.model import Lockfile, Upstream

_FIX = "edit that line to the lockfile's {what} {value} (the build reads it), then patchkit lock"


def upstream_pins(state: State) -> list[Finding]:
    """Each pin of the repository's own files that names a lockfile upstream or image and states another value."""
    if not state.lock.series and not imported(state.lock):
        return []
    own = state.own_pins
    out = unpinned_lock_images(state.lock, own.unpinned_images)
    if not imported(state.lock):
        return out  # a queue whose only build file is its lock: what it pins is compared no further
    return out + drift(state.lock, own.upstreams) + image_drift(state.lock, own.images)


def unpinned_lock_images(lock: Lockfile, unpinned: list[tuple[str, str, str]]) -> list[Finding]:
    """``queue-image-unpinned`` as import reports it: an image a patch queue's top-level lock names by tag only.

    Import reads a lock's images only beside a patch series, from a lock at
    the repository's top; so does this rule (in any lockfile with a series, as
    ``series.own_locks`` reads such a lock), so it says what import said, while it holds.
    """
    if not lock.series:
        return []
    return [
        Finding(
            "queue-image-unpinned",
            rel,
            None,
            f"image {name} {ref!r} is not pinned by digest",
            f"patchkit image pin {name} {ref}",
        )
        for rel, name, ref in unpinned
        if "/" not in rel
    ]


def _url(value: str) -> str:
    from patchkit.importing.pins import git_url

    return git_url(value).lower().rstrip("/").removesuffix(".git")


def _upstream_of(pin: Pin, urls: dict[str, set[str]], lock: Lockfile) -> Upstream | None:
    """The lockfile upstream ``pin`` names: by the repository stated beside it, else by its name; None if unsure."""
    stated = urls.get(pin.name, set())
    if stated:  # the file says which repository: that one, or none of the lockfile's
        hits = [u for u in lock.upstreams if u.git is not None and _url(u.git) in stated]
        return hits[0] if len(hits) == 1 else None
    from patchkit.importing.adopt import slug  # the names import wrote: matched as import made them

    names = {slug(pin.name)}
    if pin.under not in (None, "upstreams"):
        names.add(slug(str(pin.under)))
    hits = [u for u in lock.upstreams if u.name in names]
    return hits[0] if len(hits) == 1 else None


def drift(lock: Lockfile, pins: list[Pin]) -> list[Finding]:
    """Findings for the commit and tag pins in ``pins`` that differ from the lockfile upstream they name."""
    urls: dict[str, set[str]] = {}
    for p in pins:
        if p.what == "git":
            urls.setdefault(p.name, set()).add(_url(p.value))
    out = []
    for p in pins:
        if p.what not in ("commit", "version"):
            continue  # a release commit: the lockfile records none to compare with
        up = _upstream_of(p, urls, lock)
        if up is None:
            continue
        found = _commit_drift(p, up, lock) if p.what == "commit" else _version_drift(p, up)
        if found is not None:
            out.append(found)
    return out


def _commit_drift(p: Pin, up: Upstream, lock: Lockfile) -> Finding | None:
    known = [str(c) for c in (up.commit, *(s.commit for s in lock.series if s.upstream == up.name)) if c]
    value = p.value.lower()
    if not known or any(k.lower().startswith(value) for k in known):
        return None
    want = known[0]
    return Finding(
        "upstream-pin-drift",
        p.file,
        p.line,
        f"states {up.name} commit {p.value[:12]}, but the lockfile pins upstream '{up.name}' at {want[:12]}: "
        "a build from this file builds another commit",
        _FIX.format(what="commit", value=want),
    )


def _version_drift(p: Pin, up: Upstream) -> Finding | None:
    if up.version is None or p.value.removeprefix("v") == up.version.removeprefix("v"):
        return None
    return Finding(
        "upstream-pin-drift",
        p.file,
        p.line,
        f"states {up.name} version {p.value}, but the lockfile pins upstream '{up.name}' at version {up.version}",
        _FIX.format(what="version", value=up.version),
    )


def image_drift(lock: Lockfile, images: list[ImagePin]) -> list[Finding]:
    """Findings for the digest-pinned images in ``images`` whose repository the lockfile pins at one other digest."""
    out = []
    for i in images:
        digests = {str(x.digest) for x in lock.images if same_repository(str(x.repository), i.repository)}
        if len(digests) != 1 or i.digest in digests:
            continue  # not the lockfile's image, or several digests of it: not certain which is meant
        want = digests.pop()
        out.append(
            Finding(
                "upstream-pin-drift",
                i.file,
                i.line,
                f"names {i.repository}@{i.digest[:19]}…, but the lockfile pins {i.repository} at {want[:19]}…",
                _FIX.format(what="digest", value=want),
            )
        )
    return out
