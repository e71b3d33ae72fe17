"""Recording what the bases were verified against (``verified`` of ``[patches.base]`` and ``[series.NAME]``).

Every command that establishes that bases fit the deployed image (a rebase's
commit, a series bump, ``bump --image``, ``add`` of an overlay, ``lock
--record-verified`` for a lockfile written before the field existed) calls
:func:`record_verified` on the lockfile it is about to write: each named base
then records the image it is mounted over, at the digest that lockfile pins,
and how the base was established. ``patchkit check`` compares the two offline
(``check.verified``). See docs/lockfile.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from patchkit.errors import BadInput, Problem
from patchkit.lockfile.model import Base, GitUpstream, Image, ImageUpstream, Lockfile, Patch, PatchKind, Upstream
from patchkit.lockfile.series import Series
from patchkit.lockfile.tomlpos import parse as parse_toml
from patchkit.lockfile.verified import Verified

DEPLOY_CONFIG = "deploy.toml"


def deployed_image(lock: Lockfile, root: Path | None = None, upstream: Upstream | None = None) -> Image | None:
    """The ``[images]`` entry the overlays are mounted over, or None when the lockfile does not say.

    In order: the image an image upstream reads (same repository), deploy.toml's
    ``inference.image`` (when ``root`` holds a deploy.toml that names one), the
    lockfile's only image. Several images and no deploy.toml: None, as a guess
    between them could record the proxy's image for a vLLM overlay.
    """
    return _deployed(lock, _deploy_inference_image(root) if root is not None else None, upstream)


def _deployed(lock: Lockfile, named: str | None, upstream: Upstream | None) -> Image | None:
    """:func:`deployed_image` with deploy.toml's ``inference.image`` already read (``named``)."""
    if isinstance(upstream, ImageUpstream):
        same = [i for i in lock.images if i.repository == upstream.image]
        if len(same) == 1:
            return same[0]
    found = next((i for i in lock.images if i.name == named), None)
    if found is None and len(lock.images) == 1:
        found = lock.images[0]
    return found


def _deploy_inference_image(root: Path) -> str | None:
    """deploy.toml's ``inference.image``, read alone (a starter deploy.toml without an entrypoint says it too).

    None when there is no such file or it does not say; ``check`` reports a bad deploy.toml.
    """
    path = root / DEPLOY_CONFIG
    if not path.is_file() or path.is_symlink():
        return None
    try:
        doc = parse_toml(path.read_bytes().decode("utf-8"), DEPLOY_CONFIG)  # any TOML it cannot read: a Problem
    except (OSError, UnicodeDecodeError):
        return None
    if isinstance(doc, Problem):
        return None
    inference = doc.get("inference")
    image = inference.get("image") if isinstance(inference, dict) else None
    return image if isinstance(image, str) else None


def verified_for(image: Image, upstream: Upstream | None) -> Verified:
    """The record of a base established for ``image`` as pinned now, from ``upstream`` at its pin.

    A base of an image upstream reading that image was read from the image
    itself (``against = "image"``); any other was taken from its upstream's
    exact pin (``against = "upstream"``, with no ``pin`` when the upstream
    pins none, as a git upstream without ``commit``), and the image's files
    were not read.
    """
    if isinstance(upstream, ImageUpstream) and upstream.image == image.repository:
        return Verified(image.name, image.digest, "image")
    return Verified(image.name, image.digest, "upstream", upstream.exact_pin if upstream is not None else None)


def record_verified(
    lock: Lockfile,
    patches: Iterable[str] = (),
    series: Iterable[str] = (),
    *,
    image: str | None = None,
    root: Path | None = None,
    against_image: bool = False,
) -> Lockfile:
    """``lock`` with the bases of ``patches`` and ``series`` (by name) recording what they were verified against.

    Call it on the lockfile about to be written, with the image digests and
    upstream pins it holds: each base records ``images[image]`` (else the
    image :func:`deployed_image` finds) at that digest, and its upstream's
    exact pin. ``against_image``: the bases were compared with that image's
    own files (``check --online --image-bases`` semantics), so no pin is
    recorded. A lockfile with no image to name is returned as it is.
    """
    wanted, wanted_series = set(patches), set(series)
    # deploy.toml read once for every base, not once per base (a rebase records a thousand).
    named = _deploy_inference_image(root) if root is not None else None
    new_patches = tuple(
        _recorded(lock, p, image, named, against_image) if p.name in wanted else p for p in lock.patches
    )
    new_series = tuple(
        _recorded_series(lock, s, image, named, against_image) if s.name in wanted_series else s for s in lock.series
    )
    return dataclasses.replace(lock, patches=new_patches, series=new_series)


def _image(lock: Lockfile, name: str | None, named: str | None, upstream: Upstream | None) -> Image | None:
    if name is not None:
        found = next((i for i in lock.images if i.name == name), None)
        if found is None:
            raise BadInput(f"no image named '{name}' in the lockfile", "patchkit image pin NAME REF")
        return found
    return _deployed(lock, named, upstream)


def _verified(
    lock: Lockfile, upstream_name: str, old: Verified | None, name: str | None, named: str | None, against: bool
) -> Verified | None:
    upstream = lock.upstream(upstream_name)
    found = _image(lock, name or (old.image if old is not None else None), named, upstream)
    if found is None:
        return None
    if against:
        return Verified(found.name, found.digest, "image")
    return verified_for(found, upstream)


def _recorded(lock: Lockfile, p: Patch, image: str | None, named: str | None, against: bool) -> Patch:
    if p.base is None or p.kind is PatchKind.MODULE:
        return p
    verified = _verified(lock, p.base.upstream, p.base.verified, image, named, against)
    base: Base = dataclasses.replace(p.base, verified=verified)
    return dataclasses.replace(p, base=base)


def _recorded_series(lock: Lockfile, s: Series, image: str | None, named: str | None, against: bool) -> Series:
    verified = _verified(lock, s.upstream, s.verified, image, named, against)
    own = series_pin(lock, s)
    if verified is not None and verified.against == "upstream" and own is not None:
        verified = dataclasses.replace(verified, pin=own)  # a series states its own commit
    return dataclasses.replace(s, verified=verified)


def series_pin(lock: Lockfile, s: Series) -> str | None:
    """The exact pin a series applies onto when it states its own: its ``commit``, for a git upstream."""
    up = lock.upstream(s.upstream)
    return str(s.commit) if isinstance(up, GitUpstream) and s.commit is not None else None


def at_pin(lock: Lockfile, p: Patch) -> bool:
    """Whether overlay ``p``'s base states its upstream's pin (or states none to compare): recordable as such."""
    up = lock.upstream(p.base.upstream) if p.base is not None else None
    compared = up.compared(p.base) if up is not None and p.base is not None else None
    return compared is None or compared[1] == compared[2]


def record_new_bases(lock: Lockfile, old: Lockfile, root: Path | None) -> Lockfile:
    """``lock`` with each overlay base that ``old`` did not have, and that is at its upstream's pin, recorded.

    For the commands that pin bases (``add``, ``import --normalize``): a base
    taken at its upstream's pin is established for the image as pinned now.
    """
    before = {p.name: p.base for p in old.patches}
    new = [
        p.name
        for p in lock.patches
        if p.kind is PatchKind.OVERLAY and p.base is not None and before.get(p.name) != p.base and at_pin(lock, p)
    ]
    return record_verified(lock, new, root=root) if new else lock


def recordable(lock: Lockfile) -> tuple[list[str], list[str], list[str]]:
    """The overlays and series that record nothing they were verified against, and those of them not at their pin.

    A base whose ``commit`` or ``version`` is not its upstream's pin
    (``base-outdated``) was not taken from that pin: recording it as
    verified against it would be false.
    """
    patches: list[str] = []
    series: list[str] = []
    left: list[str] = []
    for p in lock.patches:
        if p.kind is not PatchKind.OVERLAY or p.base is None or p.base.verified is not None:
            continue
        (patches if at_pin(lock, p) else left).append(p.name)
    for s in lock.series:
        if s.verified is None:
            series.append(s.name)
    return patches, series, left


def left_behind(lock: Lockfile, image: str) -> list[str]:
    """The overlays and series whose base was verified for ``images[image]`` at another digest than pinned now."""
    found = next((i for i in lock.images if i.name == image), None)
    if found is None:
        return []
    records = [(p.name, p.base.verified) for p in lock.patches if p.base is not None]
    records += [(f"series {s.name}", s.verified) for s in lock.series]
    return [name for name, v in records if v is not None and v.image == image and v.digest != found.digest]


def left_behind_note(lock: Lockfile, image: str) -> str | None:
    """What ``image pin`` says when it leaves bases verified for the old digest: check fails until they move."""
    names = left_behind(lock, image)
    found = next((i for i in lock.images if i.name == image), None)
    if not names or found is None:
        return None
    return (
        f"{', '.join(names)}: verified for the previous images.{image} digest; patchkit check fails until the "
        f"bases are moved onto the new one: patchkit bump --image {found.repository}@{found.digest}"
    )
