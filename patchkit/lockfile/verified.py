"""What a base was last verified against: the ``verified`` table of ``[patches.base]`` and ``[series.NAME]``.

An overlay replaces a file of the image it is mounted over, and a series
applies onto the tree the image carries; both are only right for the image
their base was established for. ``verified`` records that image (its name in
``[images]`` and its digest then) and how the base was established: read from
that image (``against = "image"``), or taken from the upstream at ``pin`` (its
commit, wheel sha256, dir sha256 or image digest) without reading the image
(``against = "upstream"``; no ``pin`` when the upstream pinned none).
``patchkit check`` compares the digest with the image's pin offline
(``base-unverified``), so a re-pinned image whose bases were not moved with
it never passes. See docs/lockfile.md. This module is lockfile vocabulary:
the record and its field table, imported by the lockfile's and the series'
models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from patchkit.core.values import Digest
from patchkit.lockfile.fields import Entry, Record, text


class _Upstream(Protocol):
    """What the pin rule asks of an upstream (``lockfile.model.Upstream``, which imports this module)."""

    name: str
    source: str

    def pin_form(self, pin: str) -> None: ...


VERIFIED_AGAINST = ("image", "upstream")


@dataclass(frozen=True)
class Verified:
    """The image a base was established for (``image`` at ``digest``) and how (``against``, ``pin``)."""

    image: str
    digest: Digest
    against: str
    pin: str | None = None

    @property
    def text(self) -> str:
        """The record in one phrase, as a change shows it: ``vllm@sha256:e68d18b2ba50 (upstream adb1e4c9b46d)``."""
        how = f"upstream {self.pin[:12]}" if self.pin else self.against
        return f"{self.image}@sha256:{self.digest.hex[:12]} ({how})"

    def describe(self, upstream: str) -> str:
        """What the base was verified against, in a phrase for a message."""
        if self.against == "image":
            return f"the files of image {self.image} at {self.digest.hex[:12]}"
        at = f" at {self.pin[:12]}" if self.pin else ""
        return f"{upstream}{at} (not the image's files)"


def _against(value: str) -> str:
    if value not in VERIFIED_AGAINST:
        raise ValueError(f"unknown value '{value}' (image or upstream)")
    return value


def _image_pinned(e: Entry) -> None:
    image = e.values["image"]
    if image is not None and image not in e.ctx.names("images"):
        e.problem(("image",), f"names image '{image}', which [images] does not pin", "name an [images.NAME] table")


def _pin_with_upstream(e: Entry) -> None:
    if e.values["against"] == "image" and "pin" in e.t:
        e.problem(("pin",), "only with against = 'upstream': a base read from the image has no upstream pin")


VERIFIED = Record(
    Verified,
    (
        text("image", required=True),
        text("digest", Digest, required=True, hint="the image's digest when the base was verified"),
        text("against", _against, required=True, keep=True),
        text("pin"),
    ),
    rules=(_image_pinned, _pin_with_upstream),
)


def check_pin(e: Entry, upstream: str | None) -> None:
    """The rule of a record holding ``verified``: its ``pin`` has the form of ``upstream``'s pin.

    ``e`` is the base's (or series') entry; the upstreams are read before it.
    A git upstream is pinned by a commit, a wheel or directory by a sha256,
    an image by a digest (each upstream kind's ``pin_form``).
    """
    verified = e.values.get("verified")
    if not isinstance(verified, Verified) or verified.pin is None or upstream is None:
        return
    found: _Upstream | None = next((u for u in e.ctx.doc.get("upstreams", ()) if u.name == upstream), None)
    if found is None:
        return
    try:
        found.pin_form(verified.pin)
    except ValueError as err:
        e.problem(("verified", "pin"), f"{err} (the pin of {found.source} upstream '{upstream}')")
