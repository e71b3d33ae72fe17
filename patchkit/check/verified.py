"""Rules about what the bases were verified against: a re-pinned image whose bases did not move fails offline.

An overlay is a full copy of a file of the image it is mounted over, a
series applies onto the tree the image carries: both fit the image their
base was established for (``verified`` in ``[patches.base]`` and
``[series.NAME]``, written by rebase, bump, add and ``lock
--record-verified``). When the image's pinned digest is no longer that one
(``patchkit image pin`` alone, or a hand edit), the bases were not
re-verified: ``base-unverified``, with the bump that moves them. A lockfile
written before the field existed gets one note per base (``base-unrecorded``).
"""

from __future__ import annotations

from patchkit.check.state import State
from patchkit.core.findings import Finding
from patchkit.core.values import Digest
from patchkit.lockfile.model import Lockfile, PatchKind
from patchkit.lockfile.verification import series_pin
from patchkit.lockfile.verified import Verified

FieldPath = tuple[str | int, ...]


def verified_bases(state: State) -> list[Finding]:
    """Each overlay's and series' base against the image and upstream pin it was verified for."""
    lock = state.lock
    out: list[Finding] = []
    for i, p in enumerate(lock.patches):
        if p.base is None or p.kind is not PatchKind.OVERLAY:
            continue
        what = f"'{p.name}'"
        out += _one(state, ("patches", i, "base"), what, p.base.upstream, p.base.verified)
    for s in lock.series:
        out += _one(state, ("series", s.name), f"series '{s.name}'", s.upstream, s.verified, series_pin(lock, s))
    return out


def _one(
    state: State, where: FieldPath, what: str, upstream: str, v: Verified | None, own: str | None = None
) -> list[Finding]:
    lock = state.lock
    if v is None:
        return _unrecorded(state, where, what) if lock.images else []
    image = next((i for i in lock.images if i.name == v.image), None)
    if image is None:
        return []  # the loader refuses a record naming no image
    if image.digest != v.digest:
        return [
            state.lock_finding(
                "base-unverified",
                (*where, "verified", "digest"),
                f"{what} was verified for image {v.image} at {_short(v.digest)} (against "
                f"{v.describe(upstream)}), but the lockfile now pins {v.image} at {_short(image.digest)}: "
                "the image was re-pinned without moving the base onto it",
                f"move the bases onto the pinned image: patchkit bump --image {image.repository}@{image.digest}",
            )
        ]
    return _pin_moved(state, lock, where, what, upstream, v, own)


def _pin_moved(
    state: State, lock: Lockfile, where: FieldPath, what: str, upstream: str, v: Verified, own: str | None
) -> list[Finding]:
    """A base verified against an upstream pin that is no longer the one it states (its pin edited by hand).

    ``own``: the pin a series states itself (its commit), compared instead of the upstream's.
    """
    up = lock.upstream(upstream)
    now = own or (up.exact_pin if up is not None else None)
    if v.against != "upstream" or up is None or now is None or now == v.pin:
        return []
    want = up.pinned_ref or now
    return [
        state.lock_finding(
            "base-unverified",
            (*where, "verified", "pin"),
            f"{what} was verified against {upstream} {f'at {v.pin[:12]}' if v.pin else 'with no pin'}, "
            "but the lockfile now pins "
            f"it at {now[:12]}: the pin was moved without moving the base onto it",
            up.rebase_fix(want),
        )
    ]


def _unrecorded(state: State, where: FieldPath, what: str) -> list[Finding]:
    return [
        state.lock_finding(
            "base-unrecorded",
            where,
            f"{what} does not record the image its base was verified for (a lockfile from before the "
            "'verified' field): a re-pinned image would not be noticed offline",
            "record it once the bases are known to fit the pinned image: patchkit lock --record-verified",
            "note",
        )
    ]


def _short(digest: Digest) -> str:
    return f"sha256:{digest.hex[:12]}"
