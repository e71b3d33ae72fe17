"""The runtime guard's manifest: what the container must run, written by ``patchkit emit`` as ``guard.json``.

``deploy.toml`` turns the guard on with a ``[guard]`` table (read by ``guard/config.py``)::

    [guard]
    script = "runtime-guard"                     # the lockfile module (or artifact) that is the guard script
    manifest_target = "/opt/patchkit/guard.json" # where compose mounts guard.json (the default)
    runtime_package = "vllm"                     # whose version the guard compares with the image's (the default)

``emit`` then writes ``guard.json`` beside ``compose.yaml`` (a plain JSON file, so a
derived image can carry it too), mounts it read-only at ``manifest_target``, and
gives the inference service ``PATCHKIT_GUARD_SCRIPT`` and
``PATCHKIT_GUARD_MANIFEST`` so the entrypoint finds both. ``check`` reports the
file as drift when it differs from what emit writes, like a compose file.

The manifest holds, from the lockfile: every container target (patches of every
kind, tuning tables and artifacts with a target) with its sha256, sorted by
target; the runtime version the inference image records (``images.<name>.version``)
with the package to read it from; the model snapshot path at the pinned revision
and, when the lockfile lists the model's files inline, each file's size. Pure:
``render`` takes the parsed lockfile and configuration and returns bytes.
Without that ``version`` the runtime section is left out, and
``runtime_unchecked`` says why for emit's note and check's ``guard-unversioned``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchkit.emit.config import DeployConfig
    from patchkit.errors import Problem
    from patchkit.lockfile.model import Lockfile

MANIFEST_NAME = "guard.json"
MANIFEST_SCHEMA = 1
SCRIPT_ENV = "PATCHKIT_GUARD_SCRIPT"
MANIFEST_ENV = "PATCHKIT_GUARD_MANIFEST"


def model_path(hf_cache_target: str, repo: str, revision: str) -> str:
    """The snapshot directory of ``repo`` at ``revision`` in a Hugging Face cache mounted at ``hf_cache_target``."""
    org, _, name = repo.partition("/")
    return f"{hf_cache_target}/hub/models--{org}--{name}/snapshots/{revision}"


def script_target(lock: Lockfile, config: DeployConfig) -> str | None:
    """The container path of the guard script (None when no ``[guard]``)."""
    guard = config.guard
    if guard is None:
        return None
    targets = [(p.name, p.target) for p in lock.patches] + [(a.name, a.target) for a in lock.artifacts]
    return next((str(target) for name, target in targets if name == guard.script and target is not None), None)


def problems(lock: Lockfile, config: DeployConfig) -> list[Problem]:
    """What keeps emit from writing the manifest: a ``guard.script`` the lockfile does not pin with a target."""
    if config.guard is None or script_target(lock, config) is not None:
        return []
    return [
        config.locate(
            "guard.script",
            f"names '{config.guard.script}', which lockfile.toml does not pin as a patch or artifact with a target",
            "patchkit add patches/guard.py --kind module --name runtime-guard --target /opt/patchkit/guard.py",
        )
    ]


def runtime_unchecked(lock: Lockfile, config: DeployConfig) -> tuple[str, str, str] | None:
    """The image table, why ``guard.json`` has no runtime section although ``[guard]`` is on, and the fix;
    None when it has one.

    The runtime section (the guard's VERSION check) comes from the inference
    image's ``version``; without it the manifest is still written, so emit and
    check say so instead of losing the check silently.
    """
    if config.guard is None:
        return None
    name = config.inference.image
    image = next((i for i in lock.images if i.name == name), None)
    if image is None or image.version:
        return None  # an unpinned image is emit's own error
    package = config.guard.runtime_package
    return (
        f"images.{name}",
        "has no 'version', so guard.json has no runtime section: "
        f"the guard will not compare the container's {package} version with the pinned image's",
        f'add version = "…" to [images.{name}] in lockfile.toml, the runtime version in the image '
        f"(patchkit image cat {name} …/{package}/_version.py prints it), then patchkit lock && patchkit emit",
    )


def environment(lock: Lockfile, config: DeployConfig) -> tuple[tuple[str, str], ...]:
    """The variables that tell the entrypoint where the guard and its manifest are."""
    target = script_target(lock, config)
    if config.guard is None or target is None:
        return ()
    return ((SCRIPT_ENV, target), (MANIFEST_ENV, str(config.guard.manifest_target)))


def manifest(lock: Lockfile, config: DeployConfig) -> dict[str, object]:
    """The manifest as a JSON-ready mapping (see the module docstring)."""
    files: list[dict[str, str]] = [
        {"name": p.name, "kind": p.kind.value, "target": str(p.target), "sha256": p.sha256.hex} for p in lock.patches
    ]
    files += [
        {"name": t.name, "kind": "tuning", "target": str(t.target), "sha256": t.sha256.hex}
        for t in lock.tuning
        if t.target is not None
    ]
    files += [
        {"name": a.name, "kind": "artifact", "target": str(a.target), "sha256": a.sha256.hex}
        for a in lock.artifacts
        if a.target is not None
    ]
    doc: dict[str, object] = {
        "schema": MANIFEST_SCHEMA,
        "generated": "by patchkit emit from lockfile.toml and deploy.toml; do not edit (patchkit emit)",
        "deployment": lock.name or config.name,
        "files": sorted(files, key=lambda f: f["target"]),
    }
    image = next((i for i in lock.images if i.name == config.inference.image), None)
    if image is not None and image.version and config.guard is not None:
        doc["runtime"] = {
            "image": image.name,
            "digest": str(image.digest),
            "package": config.guard.runtime_package,
            "version": image.version,
        }
    if lock.model is not None:
        model: dict[str, object] = {
            "repo": lock.model.repo,
            "revision": str(lock.model.revision),
            "path": model_path(str(config.inference.hf_cache_target), lock.model.repo, str(lock.model.revision)),
        }
        if lock.model.files:
            model["files"] = [{"path": str(f.path), "size": f.size} for f in lock.model.files]
        doc["model"] = model
    return doc


def render(lock: Lockfile, config: DeployConfig) -> bytes:
    """``guard.json``'s bytes: sorted keys, two-space indent, a final newline (byte-stable)."""
    return (json.dumps(manifest(lock, config), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def files(lock: Lockfile, config: DeployConfig) -> dict[str, str]:
    """What emit writes besides the compose files: ``{"guard.json": text}``, or nothing without ``[guard]``."""
    if config.guard is None:
        return {}
    return {MANIFEST_NAME: render(lock, config).decode()}


def image_files(lock: Lockfile, config: DeployConfig) -> dict[str, bytes]:
    """What a derived image carries besides the pinned files: ``guard.json`` at its target (nothing without
    ``[guard]``), where the entrypoint's default ``PATCHKIT_GUARD_MANIFEST`` finds it in any runtime."""
    if config.guard is None:
        return {}
    return {str(config.guard.manifest_target): render(lock, config)}
