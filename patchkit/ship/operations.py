"""Images: resolve references to digests, pin them, and read files out of them.

The command line hands in what talks to the outside: the registry client
(patchkit.images.registry, no daemon) and, to read files, an ``ImageReader``
(patchkit.images.reader: the registry, or a local Docker engine), as
``--via`` chose it. Nothing here constructs a client.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from patchkit.core.outcome import Change
from patchkit.core.outcome import Outcome as WriteOutcome
from patchkit.core.values import Digest, check_name
from patchkit.errors import BadInput
from patchkit.lockfile.model import Image, Lockfile
from patchkit.store.persist import finish
from patchkit.store.repo import Repo, atomic_write

if TYPE_CHECKING:
    from patchkit.images.reader import ImageReader
    from patchkit.images.registry import RegistryClient


class Resolution(TypedDict):
    """A reference resolved, as ``image resolve`` reports it (its JSON form, key for key)."""

    reference: str
    repository: str
    tag: str | None
    digest: str
    media_type: str
    platform: str
    platform_digest: str


def resolve(client: RegistryClient, text: str, platform: str = "linux/amd64") -> Resolution:
    """Resolve a reference to its digests (index and platform manifest) with ``client``."""
    from patchkit.oci.ref import ImageRef

    ref = ImageRef.parse(text)
    r = client.resolve(ref, platform=platform)
    return {
        "reference": str(ref),
        "repository": ref.display_repository,
        "tag": ref.tag,
        "digest": str(r.digest),
        "media_type": r.media_type,
        "platform": str(r.platform),
        "platform_digest": str(r.platform_digest),
    }


def pin(
    repo: Repo, lock: Lockfile, name: str, text: str, client: RegistryClient, platform: str = "linux/amd64"
) -> WriteOutcome:
    """Resolve ``text`` with ``client`` and record its digest, tag, time and platform digest under images.NAME.

    What the registry does not tell (``version``, ``note``) is kept from the
    previous pin: the guard's VERSION check compares ``version``, and dropping
    it would silently remove that check from the next ``emit``. Kept across a
    new digest, it may be stale: ``outcome.notes`` then says so.
    """
    try:
        check_name(name, "image name")
    except ValueError as e:
        raise BadInput(f"NAME: {e}") from e
    found = resolve(client, text, platform)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    old = next((i for i in lock.images if i.name == name), None)
    new = Image(
        name=name,
        repository=found["repository"],
        digest=Digest(found["digest"]),
        tag=found["tag"],
        resolved_at=now,
        platform=found["platform"] if found["platform_digest"] != found["digest"] else None,
        platform_digest=Digest(found["platform_digest"]) if found["platform_digest"] != found["digest"] else None,
        version=old.version if old is not None else None,
        note=old.note if old is not None else None,
    )
    if old is not None and old.digest == new.digest and old.repository == new.repository:
        new = dataclasses.replace(new, resolved_at=old.resolved_at)  # unchanged: keep the lockfile as it is
    images = (*tuple(i for i in lock.images if i.name != name), new)
    new_lock = dataclasses.replace(lock, images=images)
    outcome = WriteOutcome(written=finish(repo, new_lock))
    outcome.changes.append(Change(f"images[{name}]", str(old.digest) if old else "unpinned", str(new.digest)))
    if old is not None and old.version and old.digest != new.digest:
        outcome.notes.append(kept_version_note(name, old.version))
    from patchkit.lockfile.verification import left_behind_note

    behind = left_behind_note(new_lock, name)  # a re-pin alone moves no base: say what check will say
    if behind is not None:
        outcome.notes.append(behind)
    return outcome


def kept_version_note(name: str, version: str) -> str:
    """Why a ``version`` kept across a new digest needs a look: it is what the guard compares the runtime with."""
    return (
        f"images.{name}.version {version} was kept from the previous pin; confirm it is the runtime version in the "
        f"new image (patchkit image cat {name} …/vllm/_version.py) and correct it in lockfile.toml if not: "
        "the runtime guard's VERSION check compares it"
    )


def image_reference(lock: Lockfile, text: str) -> str:
    """A lockfile image name stands for its pinned reference; anything else is a reference."""
    img = next((i for i in lock.images if i.name == text), None)
    return img.reference if img is not None else text


def read(
    open_reader: Callable[[], ImageReader], text: str, paths: list[str], *, platform: str = "linux/amd64"
) -> dict[str, bytes | None]:
    """The bytes of absolute container paths in an image, through the reader ``open_reader`` opens.

    The reader (the registry or a Docker engine, as ``--via`` chose) is
    opened only once the paths are known to be absolute, and closed after.
    """
    for p in paths:
        if not p.startswith("/"):
            raise BadInput(f"{p}: container paths are absolute (start with '/')")
    reader = open_reader()
    try:
        return reader.read_image(text, paths, platform)
    finally:
        reader.close()


def write_files(found: dict[str, bytes | None], out: Path) -> list[str]:
    """Write each found file at its container path below ``out``; returns the paths written."""
    written = []
    for path, data in sorted(found.items()):
        if data is None:
            continue
        atomic_write(out / path.lstrip("/"), data)
        written.append(path)
    return written
