"""``check --online`` for derived images: the pushed image is still exactly what the lockfile pins.

For each ``[derived.<profile>]`` pin, every platform of the pushed image must
be its base's image plus the one pinned layer: the same base layers in the
same order (and the same ``diff_ids``), the config the base's plus the
layer, and a top layer whose blob and tar hash to the pinned digests and
hold exactly the pinned files (regular files at their targets with their
pinned sha256, nothing else: no extra file, no whiteout, no link), in
exactly the bytes ``image build`` writes for them (``build.read_layer``), so
that an engine's tar reader cannot unpack anything else. Every
byte read is hashed; a blob the registry serves that does not hash to its
digest (a tampered layer) is a finding, not an accident.

The expectation comes from the lockfile (``pinned_targets``) and, for the
files ``image build`` writes itself (``guard.json`` with a ``[guard]``
table), from deploy.toml (``build_adds``), so this runs in CI without the
repository's other files or any base cache.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from patchkit.core.findings import Finding
from patchkit.core.hashing import sha256_bytes
from patchkit.core.values import LOCKFILE_NAME, Digest
from patchkit.lockfile.model import Derived, Lockfile

if TYPE_CHECKING:
    from patchkit.emit.config import DeployConfig
    from patchkit.images.registry import RegistryClient
    from patchkit.oci.manifest import ImageManifest
    from patchkit.oci.ref import ImageRef

Locate = Callable[[tuple[str | int, ...]], int | None]
# The largest top layer read whole to verify it (it holds patches and tables, not a model).
MAX_LAYER_BYTES = 1 << 30
NOT_OUR_LAYER = (
    "the top layer is not the tar patchkit image build writes (regular files only, sorted, fixed metadata, "
    "no other pax record or header spelling); refused"
)


def pinned_targets(lock: Lockfile, series: Mapping[str, str] | None = None) -> dict[str, str]:
    """Container target -> pinned sha256 (hex) of every file the derived layer must hold.

    The same set ``build.runtime_files`` puts in: every patch, every tuning
    table and artifact that has a target; and ``series``, the files the
    patch series produced (:func:`series_targets`).
    """
    out = {str(p.target): p.sha256.hex for p in lock.patches}
    for a in (*lock.tuning, *lock.artifacts):
        if a.target is not None:
            out[str(a.target)] = a.sha256.hex
    out.update(series or {})
    return out


def build_adds(lock: Lockfile, config: DeployConfig | None) -> dict[str, str]:
    """Container target -> sha256 (hex) of what ``image build`` puts in the layer besides the pins.

    That is ``guard.json`` at ``guard.manifest_target`` when deploy.toml has a
    ``[guard]`` table, rendered by the same function the build calls
    (``emit.manifest.image_files``), so the check expects the bytes a build
    from this lockfile and deploy.toml writes. Nothing without a deploy.toml
    (``config`` None). Pure.
    """
    if config is None:
        return {}
    from patchkit.emit.manifest import image_files

    return {target: sha256_bytes(data) for target, data in image_files(lock, config).items()}


def series_targets(lock: Lockfile, profile: str, tar: bytes) -> tuple[dict[str, str], list[str]]:
    """The files the patch series put in the layer (target -> sha256), and where they disagree with the lockfile.

    What a series produces depends on the base image's files, so its bytes are not in the
    lockfile; the layer holds the series' record (``target/.patchkit/series/NAME.json``, what
    ``patchkit apply`` writes), which names the sha256 of each file produced and of each
    patch applied. The record is vouched for by the pinned layer digest; it must name the
    series' pinned commit and exactly the patches the lockfile pins now for ``profile`` (the
    build's rule: that profile when the series has it, else every patch), or the image was
    built from other patches and is reported. Pure.
    """
    from pathlib import PurePosixPath

    from patchkit.series.tree import record_path

    members = _regular_files(tar)
    out: dict[str, str] = {}
    problems: list[str] = []
    for s in lock.series:
        if s.target is None:
            continue
        where = PurePosixPath(str(s.target))
        target = str(where / record_path(s.name))
        data = members.get(target)
        if data is None:
            problems.append(f"{target} is missing: the record of series '{s.name}'")
            continue
        out[target] = sha256_bytes(data)
        try:
            record = json.loads(data)
            files = {str(k): v for k, v in record["files"].items()}
            applied = [(str(x["name"]), str(x["sha256"])) for x in record["patches_applied"]]
        except (ValueError, KeyError, TypeError, AttributeError):
            problems.append(f"{target} is not a series record patchkit wrote")
            continue
        chosen = profile if profile in s.profiles else None
        pinned = [(p.name, p.sha256.hex) for p in s.selected(chosen)]
        if applied != pinned or record.get("commit") != (str(s.commit) if s.commit else None):
            problems.append(
                f"{target}: built from other patches of series '{s.name}' than the lockfile pins now "
                f"({', '.join(n for n, _ in applied) or 'none'} at {str(record.get('commit'))[:12]})"
            )
        for path, digest in files.items():
            if isinstance(digest, str):
                out[str(where / path)] = digest
    return out, problems


def _regular_files(tar: bytes) -> dict[str, bytes]:
    """The regular files of an uncompressed layer by absolute path (unreadable tar: none)."""
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as t:
            for member in t:
                f = t.extractfile(member) if member.isreg() else None
                if f is not None:
                    out["/" + member.name.lstrip("./").lstrip("/")] = f.read()
    except tarfile.TarError:
        return {}
    return out


def layer_differences(tar: bytes, expected: Mapping[str, str]) -> list[str]:
    """What the uncompressed layer ``tar`` holds that differs from ``expected`` (pure), one line each."""
    problems: list[str] = []
    seen: set[str] = set()
    try:
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as t:
            for member in t:
                path = "/" + member.name.lstrip("./").lstrip("/")
                if not member.isreg():
                    problems.append(f"{path} is a {_kind(member)}, not a pinned file")
                    continue
                if path.rsplit("/", 1)[-1].startswith(".wh."):
                    problems.append(f"{path} is a whiteout: it deletes a file of the base")
                    continue
                if path not in expected:
                    problems.append(f"{path} is not pinned")
                    continue
                f = t.extractfile(member)
                got = sha256_bytes(f.read() if f is not None else b"")
                seen.add(path)
                if got != expected[path]:
                    problems.append(f"{path} has sha256 {got[:12]}…, not the pinned {expected[path][:12]}…")
                if member.mode & 0o7777 not in (0o644, 0o755):
                    problems.append(f"{path} has mode {member.mode & 0o7777:04o}, not 0644 or 0755")
    except tarfile.TarError as e:
        return [f"the layer is not a tar archive ({e})"]
    problems.extend(f"{path} is missing" for path in sorted(set(expected) - seen))
    return problems


def _kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return "directory"
    if member.issym():
        return f"symbolic link to {member.linkname}"
    if member.islnk():
        return f"hard link to {member.linkname}"
    return "special file"


def stale_findings(lock: Lockfile, locate: Locate) -> list[Finding]:
    """Offline (pure): every derived image built on another base digest than ``images.<base>`` pins now."""
    out = []
    for d in lock.derived:
        img = next((i for i in lock.images if i.name == d.base), None)
        if img is not None and img.digest != d.base_digest:
            message = f"built on {d.base_digest}, but images.{d.base} now pins {img.digest}"
            out.append(_finding(d, locate, "derived-stale", "base_digest", message))
    return out


def derived_findings(
    lock: Lockfile, locate: Locate, client: RegistryClient, added: Mapping[str, str] | None = None
) -> list[Finding]:
    """Every finding about the lockfile's derived images, from their registries (``added``: see ``one_derived``)."""
    out = stale_findings(lock, locate)
    for d in lock.derived:
        out.extend(one_derived(lock, d, locate, client, added or {}))
    return out


def _finding(d: Derived, locate: Locate, code: str, key: str, message: str) -> Finding:
    tag = f":{d.tag}" if d.tag else ":TAG"
    return Finding(
        code,
        LOCKFILE_NAME,
        locate(("derived", d.name, key)),
        f"derived.{d.name}: {message}",
        f"rebuild and re-pin it: patchkit image build --profile {d.name} --push {d.repository}{tag}",
        field=f"derived.{d.name}.{key}",
    )


def one_derived(
    lock: Lockfile, d: Derived, locate: Locate, client: RegistryClient, added: Mapping[str, str]
) -> list[Finding]:
    """The findings about derived image ``d`` from its registry (none for a stale one: ``stale_findings`` says so).

    ``added`` (target -> sha256) is what the build put in the layer besides
    the pins (:func:`build_adds`). A registry that cannot be asked raises
    ``RegistryError``; one that serves bytes not matching their digest is
    a ``derived-tampered`` finding.
    """
    from patchkit.images.errors import RegistryError
    from patchkit.oci.ref import ImageRef

    img = next((i for i in lock.images if i.name == d.base), None)
    if img is None:  # the loader refuses this; a constructed lockfile may still lack it
        return [_finding(d, locate, "derived-base", "base", f"its base image '{d.base}' is not pinned")]
    if img.digest != d.base_digest:
        return []  # stale_findings says so, offline as well
    ref = ImageRef.parse(f"{d.repository}@{d.digest}")
    base = ImageRef.parse(f"{img.repository}@{img.digest}")
    try:
        if not client.exists(ref):
            return [_finding(d, locate, "derived-gone", "digest", f"{ref} no longer resolves in its registry")]
        problems = _check_platforms(client, ref, base, d, lock, added)
    except RegistryError as e:
        if e.status is None and "refusing it" in e.message:
            return [_finding(d, locate, "derived-tampered", "digest", f"{ref}: {e.message}")]
        raise
    except _Mismatch as e:
        return [_finding(d, locate, e.code, e.key, e.message)]
    return [_finding(d, locate, code, key, message) for code, key, message in problems]


def _check_platforms(
    client: RegistryClient, ref: ImageRef, base: ImageRef, d: Derived, lock: Lockfile, added: Mapping[str, str]
) -> list[tuple[str, str, str]]:
    from patchkit.oci.manifest import INDEX_MEDIA_TYPES, ImageManifest, parse_manifest

    body, media_type = client.manifest(ref, d.digest)
    base_body, base_type = client.manifest(base, d.base_digest)
    problems: list[tuple[str, str, str]] = []
    for child, base_child in _platform_pairs(ref, body, media_type, base_body, base_type):
        derived = parse_manifest(client.manifest(ref, child)[0])
        original = parse_manifest(client.manifest(base, base_child)[0])
        if not isinstance(derived, ImageManifest) or not isinstance(original, ImageManifest):
            raise _Mismatch("derived-base", "digest", f"{ref}: {child} or {base_child} is a nested index")
        where = f" ({child})" if media_type in INDEX_MEDIA_TYPES else ""
        problems.extend(_compare(client, ref, base, d, derived, original, lock, added, where))
    return problems


def _config_changes(config: bytes, base_config: bytes) -> list[str]:
    """The top-level config fields that differ from the base's, beyond what a build sets (pure)."""
    mine, theirs = json.loads(config), json.loads(base_config)
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return ["shape"]
    ignored = {"created", "history", "rootfs"}
    return sorted(k for k in set(mine) | set(theirs) if k not in ignored and mine.get(k) != theirs.get(k))


class _Mismatch(Exception):
    def __init__(self, code: str, key: str, message: str) -> None:
        super().__init__(message)
        self.code, self.key, self.message = code, key, message


def _platform_pairs(
    ref: ImageRef, body: bytes, media_type: str, base_body: bytes, base_type: str
) -> list[tuple[Digest, Digest]]:
    """(derived child, base child) per platform; one pair of the top-level digests for single images."""
    from patchkit.oci.manifest import INDEX_MEDIA_TYPES, digest_of
    from patchkit.ship.build import is_image_entry

    if (media_type in INDEX_MEDIA_TYPES) != (base_type in INDEX_MEDIA_TYPES):
        raise _Mismatch("derived-base", "digest", f"{ref} and its base are not both indexes (or both images)")
    if media_type not in INDEX_MEDIA_TYPES:
        return [(digest_of(body), digest_of(base_body))]

    def by_platform(doc: bytes) -> dict[str, Digest]:
        entries = [e for e in json.loads(doc).get("manifests", []) if is_image_entry(e)]
        return {json.dumps(e["platform"], sort_keys=True): Digest(e["digest"]) for e in entries}

    mine, theirs = by_platform(body), by_platform(base_body)
    if set(mine) != set(theirs):
        raise _Mismatch("derived-base", "digest", f"{ref} does not have exactly its base's platforms")
    return [(mine[k], theirs[k]) for k in sorted(mine)]


def _compare(
    client: RegistryClient,
    ref: ImageRef,
    base: ImageRef,
    d: Derived,
    derived: ImageManifest,
    original: ImageManifest,
    lock: Lockfile,
    added: Mapping[str, str],
    where: str,
) -> list[tuple[str, str, str]]:
    """The problems of one platform of the derived image against its base, the pins and ``added``."""
    from patchkit.oci.manifest import parse_config

    base_layers = [x.digest for x in original.layers]
    layers = [x.digest for x in derived.layers]
    if layers[:-1] != base_layers:
        return [("derived-base-layers", "base_digest", f"{ref}{where}: its lower layers are not its base's layers")]
    top = derived.layers[-1]
    if top.digest != d.layer_digest:
        return [("derived-layer", "layer_digest", f"{ref}{where}: its top layer is {top.digest}, not the pinned one")]
    config = client.blob(ref, derived.config)
    base_config = client.blob(base, original.config)
    diff_ids = parse_config(config).diff_ids
    base_ids = parse_config(base_config).diff_ids
    if list(diff_ids[:-1]) != list(base_ids) or diff_ids[-1] != d.diff_id:
        return [("derived-config", "diff_id", f"{ref}{where}: its config's diff_ids are not the base's plus the pin")]
    changed = _config_changes(config, base_config)
    if changed:
        return [("derived-config", "digest", f"{ref}{where}: its config changes the base's {', '.join(changed)}")]
    blob = client.blob(ref, top, limit=MAX_LAYER_BYTES)
    try:
        tar = gzip.decompress(blob)
    except (OSError, EOFError, zlib.error) as e:
        return [("derived-files", "layer_digest", f"{ref}{where}: the top layer does not decompress ({e})")]
    if sha256_bytes(tar) != d.diff_id.hex:
        return [("derived-files", "diff_id", f"{ref}{where}: the top layer's tar does not hash to the pinned diff_id")]
    from patchkit.ship.build import read_layer

    if read_layer(tar) is None:
        return [("derived-files", "layer_digest", f"{ref}{where}: {NOT_OUR_LAYER}")]
    series, stale = series_targets(lock, d.name, tar)
    return [
        ("derived-files", "layer_digest", f"{ref}{where}: top layer: {problem}")
        for problem in [*stale, *layer_differences(tar, pinned_targets(lock, {**series, **added}))]
    ]
