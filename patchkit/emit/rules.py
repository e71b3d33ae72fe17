"""The security rules every emitted compose file keeps, over its parsed structure.

- only the proxy is published on a non-loopback address;
- every image is ``repository@sha256:<digest>``, with no tag (compose ignores a
  tag beside a digest) and no ``$`` variable (Renovate skips those);
- every mount of a repository file (``./…``: patches, materialized diff-only
  patches, tuning tables, artifacts) is read-only, and no extra mount shadows a
  pinned target.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from patchkit.core.values import is_loopback
from patchkit.errors import BadInput, Problem
from patchkit.oci.ref import ImageRef

# --------------------------------------------------------------------------- rules and validation


def _port_host(entry: object) -> str | None:
    """The host address a port entry binds to; ``None`` means every address."""
    if isinstance(entry, dict):
        host = entry.get("host_ip")
        return str(host) if host else None
    text = str(entry)
    if text.startswith("["):
        return text[: text.index("]") + 1] if "]" in text else None
    parts = text.split(":")
    return parts[0] if len(parts) >= 3 and parts[0] else None


def _volume_rw_repo_file(entry: object) -> str | None:
    """The source of a writable bind mount of a repository file, else ``None``."""
    if isinstance(entry, dict):
        src = str(entry.get("source", ""))
        if src.startswith(("./", "../")) and not entry.get("read_only"):
            return src
        return None
    parts = str(entry).split(":")
    if parts[0].startswith(("./", "../")) and (len(parts) < 3 or "ro" not in parts[2].split(",")):
        return parts[0]
    return None


def _image_problem(name: str, image: str) -> tuple[str, str] | None:
    """Why a service's image breaks the digest rule (message, hint), or None: pinned by digest alone."""
    ref = _image_ref(image)
    if ref is None or ref.digest is None or "$" in image:
        return (
            f"service '{name}': image '{image}' is not pinned by digest (repository@sha256:...)",
            "pin it: patchkit image pin NAME REF",
        )
    if ref.tag is not None:
        return (
            f"service '{name}': image '{image}' has a tag beside its digest; compose ignores the tag",
            "pin only the digest: repository@sha256:...",
        )
    return None


def _entries(svc: Mapping[object, object], key: str) -> Iterable[object]:
    """A service's list field (``ports``, ``volumes``) to go through; nothing when absent or not a collection."""
    value = svc.get(key) or []
    return value if isinstance(value, Iterable) else []


def _port_problems(name: str, svc: Mapping[object, object]) -> Iterator[tuple[str, str]]:
    """A non-public service published on anything but loopback, once per such port."""
    for entry in _entries(svc, "ports"):
        host = _port_host(entry)
        if host is None or not is_loopback(host):
            yield (
                f"service '{name}' would be published on {host or 'every address (0.0.0.0)'}: "
                "only the proxy may be public",
                "publish the inference service on 127.0.0.1 and reach it through the proxy",
            )


def _volume_problems(name: str, svc: Mapping[object, object], pinned: set[str]) -> Iterator[tuple[str, str]]:
    """Repository files mounted writable, and writable mounts over a pinned target."""
    for entry in _entries(svc, "volumes"):
        src = _volume_rw_repo_file(entry)
        if src is not None:
            yield (
                f"service '{name}': repository file {src} is mounted writable; patches, tuning tables "
                "and artifacts are mounted read-only",
                "append ':ro' to the mount",
            )
        parts = str(entry).split(":") if not isinstance(entry, dict) else ["", str(entry.get("target", ""))]
        if len(parts) >= 2 and parts[1] in pinned and not (len(parts) >= 3 and parts[2] == "ro"):
            yield (
                f"service '{name}': a writable mount shadows the pinned target {parts[1]}",
                "remove the extra mount; the pinned file is mounted by emit",
            )


def security_problems(
    doc: object, public: set[str], pinned: set[str], origin: Callable[[str, str], Problem]
) -> list[Problem]:
    """Every broken security rule in a parsed compose document, located by ``origin(service, key)``."""
    out: list[Problem] = []

    def refuse(service: str, key: str, found: Iterable[tuple[str, str]]) -> None:
        where = origin(service, key)
        out.extend(Problem(where.file, where.line, where.field, message, hint) for message, hint in found)

    services = doc.get("services") if isinstance(doc, dict) else None
    for name, svc in sorted((services or {}).items()):
        if not isinstance(svc, dict):
            continue
        image = _image_problem(name, str(svc.get("image", "")))
        refuse(name, "image", [image] if image else [])
        if name not in public:
            refuse(name, "ports", _port_problems(name, svc))
        refuse(name, "volumes", _volume_problems(name, svc, pinned))
    return out


def _image_ref(text: str) -> ImageRef | None:
    """The image reference ``text`` is, or None when it is none."""
    try:
        return ImageRef.parse(text)
    except BadInput:
        return None
