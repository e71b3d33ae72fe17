"""The derived image: the pinned base plus one reproducible layer holding every file that runs.

``image build`` needs no Docker engine: it reads the base's manifests and
configs through the registry client, makes one layer from the files'
pinned bytes, writes a new config and manifest per platform (and an index
when the base is one) and pushes them. The base's own layers are never
downloaded when the target repository can have them mounted or already has
them; only the new layer and the small documents are uploaded.

Reproducible by construction (the pure half of this module works on bytes):
members sorted by path, every mtime the build's ``created`` time, uid/gid 0
with no names, modes 0644 (0755 for what is executed), PAX format without
time records; gzip with no name and mtime 0; JSON written with sorted keys.
The same lockfile thus gives the same layer, config and manifest digests on
any machine, whatever its file times, umask, user or time zone. Because
another zlib could compress the same tar differently, the layer's
uncompressed digest (``diff_id``) is pinned beside its blob digest.
"""

from __future__ import annotations

import copy
import datetime as dt
import gzip
import io
import json
import tarfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from patchkit.core.values import Digest
from patchkit.errors import BadInput
from patchkit.sources.context import Context

if TYPE_CHECKING:
    from patchkit.core.outcome import Outcome
    from patchkit.images.registry import RegistryClient
    from patchkit.lockfile.model import Derived, Lockfile
    from patchkit.lockfile.series import Series
    from patchkit.oci.manifest import Descriptor
    from patchkit.oci.ref import ImageRef
    from patchkit.series.apply import Reader
    from patchkit.store.cache import BlobStore
    from patchkit.store.repo import Repo

OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
BUILT_BY = "patchkit image build"
# The OCI pre-defined annotations naming what an image was built on (image-spec annotations.md).
BASE_DIGEST_ANNOTATION = "org.opencontainers.image.base.digest"
BASE_NAME_ANNOTATION = "org.opencontainers.image.base.name"
# Index entries that describe something other than a runnable image (buildx attestations).
_NOT_IMAGES = ("unknown",)


@dataclass(frozen=True)
class LayerFile:
    """One file of the layer: its absolute container path, its bytes and whether it is executed."""

    target: str
    data: bytes
    executable: bool = False


@dataclass(frozen=True)
class Layer:
    """The built layer: the gzip blob and its two digests."""

    blob: bytes
    digest: Digest
    diff_id: Digest
    files: int

    @property
    def size(self) -> int:
        return len(self.blob)


def _sha(data: bytes) -> Digest:
    from patchkit.oci.manifest import digest_of

    return digest_of(data)


def epoch_of(created: str) -> int:
    """Seconds since 1970 of an RFC 3339 UTC time (``2026-01-01T00:00:00Z``)."""
    try:
        when = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError as e:
        raise BadInput(f"{created!r} is not an RFC 3339 time", "write e.g. 2026-01-01T00:00:00Z") from e
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp())


def rfc3339(epoch: int) -> str:
    """The RFC 3339 UTC text of ``epoch`` (whole seconds, ``Z``)."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def layer_tar(files: Iterable[LayerFile], mtime: int) -> bytes:
    """The uncompressed layer (pure): regular files only, sorted, with fixed metadata.

    Parent directories are left out on purpose: a directory entry would
    replace the base's own (its mode and owner, e.g. a 1777 ``/tmp``); an
    engine creates a missing parent itself. Two files at one target are refused.
    """
    seen: dict[str, LayerFile] = {}
    for f in files:
        name = f.target.lstrip("/")
        if not f.target.startswith("/") or not name or ".." in name.split("/"):
            raise BadInput(f"{f.target!r} is not an absolute container path")
        if name in seen:
            raise BadInput(f"two files of the layer claim {f.target}", "give each pinned file its own target")
        seen[name] = f
    _refuse_nesting(seen)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for name in sorted(seen):
            f = seen[name]
            info = tarfile.TarInfo(name)
            info.size = len(f.data)
            info.mtime = mtime
            info.mode = 0o755 if f.executable else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.type = tarfile.REGTYPE
            tar.addfile(info, io.BytesIO(f.data))
    return buf.getvalue()


def read_layer(tar: bytes) -> list[LayerFile] | None:
    """The files of an uncompressed layer this module wrote (pure); None when it is not such a layer.

    The layer is read, then written again with ``layer_tar`` from what was
    read, and must come out byte for byte the same: a pax record, a link, a
    sparse map or any other spelling that another tar reader (an engine's)
    could unpack differently makes it not patchkit's layer, whatever Python's
    tarfile made of it.
    """
    try:
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as t:
            members = t.getmembers()
            files = [_layer_file(t, m) for m in members]
            mtime = members[0].mtime if members else 0
        if any(f is None for f in files) or not isinstance(mtime, int):
            return None
        ok = [f for f in files if f is not None]
        return ok if layer_tar(ok, mtime) == tar else None
    except (tarfile.TarError, BadInput, ValueError, UnicodeError, EOFError, OverflowError):
        return None


def _layer_file(tar: tarfile.TarFile, member: tarfile.TarInfo) -> LayerFile | None:
    """A regular member as the file ``layer_tar`` would have written it from (None for any other member)."""
    f = tar.extractfile(member) if member.isreg() else None
    if f is None:
        return None
    return LayerFile("/" + member.name, f.read(), member.mode == 0o755)


def _refuse_nesting(names: Mapping[str, LayerFile]) -> None:
    """``BadInput`` for a target below another file's target, or into a ``.git`` directory (any spelling).

    ``/opt/x.sh`` and ``/opt/x.sh/y`` cannot both be files: an engine unpacks
    one over the other, so the image would not hold what the lockfile pins.
    """
    from patchkit.series.parse import into_git_dir

    for name, f in names.items():
        parts = name.split("/")
        if into_git_dir(parts):
            raise BadInput(f"{f.target}: a target inside a .git directory; refusing to build", "pin it elsewhere")
        outer = next(("/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) in names), None)
        if outer is not None:
            raise BadInput(
                f"{f.target}: a target below /{outer}, which is another file of the layer; refusing to build",
                "give each file a target that is not inside another file's",
            )


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed with a fixed header: no file name, mtime 0 (pure)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return buf.getvalue()


def make_layer(files: Iterable[LayerFile], mtime: int) -> Layer:
    """The layer of ``files`` (pure): its blob and both digests."""
    items = list(files)
    tar = layer_tar(items, mtime)
    blob = gzip_bytes(tar)
    return Layer(blob, _sha(blob), _sha(tar), len(items))


def canonical_json(doc: object) -> bytes:
    """JSON with sorted keys and no spaces: the same document, the same bytes."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def derive_config(base_config: bytes, layer: Layer, created: str) -> bytes:
    """The base's config with the layer's diff_id appended, a history entry and ``created`` (pure)."""
    doc = json.loads(base_config)
    if not isinstance(doc, dict) or not isinstance(doc.get("rootfs"), dict):
        raise BadInput("the base image's config has no rootfs")
    doc = copy.deepcopy(doc)
    doc["rootfs"]["diff_ids"] = [*doc["rootfs"].get("diff_ids", []), layer.diff_id.text]
    history = doc.get("history")
    doc["history"] = [
        *(history if isinstance(history, list) else []),
        {"created": created, "created_by": BUILT_BY, "comment": f"{layer.files} pinned files"},
    ]
    doc["created"] = created
    return canonical_json(doc)


def derive_manifest(
    base_manifest: bytes, config: bytes, layer: Layer, base_name: str, base_digest: Digest
) -> tuple[bytes, str]:
    """The base's manifest with the new config and the layer on top (pure); its bytes and media type.

    A Docker schema 2 base stays Docker (with Docker's layer type); an OCI
    one stays OCI and gets the base annotations.
    """
    from patchkit.oci.manifest import DOCKER_MANIFEST, OCI_MANIFEST

    doc = copy.deepcopy(json.loads(base_manifest))
    media_type = doc.get("mediaType") or OCI_MANIFEST
    docker = media_type == DOCKER_MANIFEST
    doc["mediaType"] = media_type
    doc["config"] = {**doc["config"], "digest": _sha(config).text, "size": len(config)}
    doc["layers"] = [
        *doc.get("layers", []),
        {"mediaType": DOCKER_LAYER if docker else OCI_LAYER, "digest": layer.digest.text, "size": layer.size},
    ]
    if not docker:
        annotations = dict(doc.get("annotations") or {})
        annotations[BASE_DIGEST_ANNOTATION] = base_digest.text
        annotations[BASE_NAME_ANNOTATION] = base_name
        doc["annotations"] = annotations
    return canonical_json(doc), media_type


def derive_index(base_index: bytes, children: Mapping[Digest, tuple[Digest, int]]) -> bytes:
    """The base's index with each image child replaced by its derived manifest (pure).

    Entries that are not images (``unknown/unknown`` attestations, which
    point at the base's children) are dropped: they would describe images
    this index no longer holds.
    """
    doc = copy.deepcopy(json.loads(base_index))
    kept = []
    for entry in doc.get("manifests", []):
        old = Digest(entry["digest"])
        if old not in children:
            continue
        digest, size = children[old]
        kept.append({**entry, "digest": digest.text, "size": size})
    doc["manifests"] = kept
    return canonical_json(doc)


def is_image_entry(entry: Mapping[str, object]) -> bool:
    """Whether an index entry is a runnable image (not an attestation or other artifact)."""
    platform = entry.get("platform")
    if not isinstance(platform, dict):
        return False
    return platform.get("os") not in _NOT_IMAGES and platform.get("architecture") not in _NOT_IMAGES


# --- pushing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Uploaded:
    """What a push sent: blob digests uploaded, mounted, already present, and bytes sent."""

    uploaded: tuple[str, ...]
    mounted: tuple[str, ...]
    present: tuple[str, ...]
    bytes_sent: int


@dataclass(frozen=True)
class Built:
    """A pushed derived image."""

    repository: str
    tag: str | None
    digest: Digest
    media_type: str
    base_digest: Digest
    layer: Layer
    created: str
    platforms: tuple[tuple[str, Digest], ...]
    upload: Uploaded


class _Tally:
    def __init__(self) -> None:
        self.uploaded: list[str] = []
        self.mounted: list[str] = []
        self.present: list[str] = []
        self.bytes = 0

    def blob(self, client: RegistryClient, target: ImageRef, data: bytes, chunk_size: int | None) -> None:
        digest = _sha(data)
        if client.has_blob(target, digest):
            self.present.append(digest.text)
            return
        client.push_blob(target, data, chunk_size=chunk_size, known_absent=True)
        self.uploaded.append(digest.text)
        self.bytes += len(data)

    def base_blob(self, client: RegistryClient, base: ImageRef, target: ImageRef, desc: Descriptor) -> None:
        how = client.copy_blob(base, target, desc)
        {"present": self.present, "mounted": self.mounted, "copied": self.uploaded}[how].append(desc.digest.text)
        if how == "copied":
            self.bytes += desc.size

    def result(self) -> Uploaded:
        return Uploaded(tuple(self.uploaded), tuple(self.mounted), tuple(self.present), self.bytes)


def build_and_push(
    client: RegistryClient,
    base: ImageRef,
    target: ImageRef,
    files: Iterable[LayerFile],
    created: str,
    *,
    chunk_size: int | None = None,
) -> Built:
    """Build the derived image of ``base`` (pinned by digest) with ``files`` and push it to ``target``.

    Every platform of a multi-platform base gets its own manifest and config
    over the same layer; children go up by digest, the top-level manifest
    under ``target``'s tag (or its digest alone when there is no tag).
    """
    from patchkit.oci.manifest import INDEX_MEDIA_TYPES

    if base.digest is None:
        raise BadInput(f"{base}: the base must be pinned by digest")
    layer = make_layer(files, epoch_of(created))
    tally = _Tally()
    tally.blob(client, target, layer.blob, chunk_size)
    top, top_type = client.manifest(base, base.digest)
    base_name = base.familiar
    platforms: list[tuple[str, Digest]] = []
    if top_type in INDEX_MEDIA_TYPES:
        children: dict[Digest, tuple[Digest, int]] = {}
        for entry in json.loads(top).get("manifests", []):
            if not is_image_entry(entry):
                continue
            child = Digest(entry["digest"])
            body, media_type = _derive_one(client, base, target, child, layer, created, base_name, tally)
            digest = client.put_manifest(target, _sha(body).text, body, media_type)
            children[child] = (digest, len(body))
            p = entry["platform"]
            platforms.append(("/".join(x for x in (p.get("os"), p.get("architecture"), p.get("variant")) if x), digest))
        if not children:
            raise BadInput(f"{base} is an index without any image for a platform")
        body, media_type = derive_index(top, children), top_type
    else:
        body, media_type = _derive_one(client, base, target, base.digest, layer, created, base_name, tally)
    digest = client.put_manifest(target, target.tag or _sha(body).text, body, media_type)
    return Built(
        target.display_repository,
        target.tag,
        digest,
        media_type,
        base.digest,
        layer,
        created,
        tuple(platforms),
        tally.result(),
    )


def _derive_one(
    client: RegistryClient,
    base: ImageRef,
    target: ImageRef,
    digest: Digest,
    layer: Layer,
    created: str,
    base_name: str,
    tally: _Tally,
) -> tuple[bytes, str]:
    """One platform: its base layers into ``target``, the new config up; the manifest's bytes and type."""
    from patchkit.oci.manifest import ImageManifest, parse_manifest

    body, _ = client.manifest(base, digest)
    manifest = parse_manifest(body)
    if not isinstance(manifest, ImageManifest):
        raise BadInput(f"{base.name}@{digest} is a nested index; patchkit builds on image manifests")
    for desc in manifest.layers:
        tally.base_blob(client, base, target, desc)
    config = derive_config(client.blob(base, manifest.config), layer, created)
    tally.blob(client, target, config, None)
    return derive_manifest(body, config, layer, base_name, digest)


# --- what goes into the layer ----------------------------------------------------------------------


def runtime_files(
    repo: Repo,
    lock: Lockfile,
    store: BlobStore,
    cache: Context,
    *,
    executables: Iterable[str] = (),
    extra: Iterable[LayerFile] = (),
) -> list[LayerFile]:
    """Every file that runs, with its pinned bytes, at its container target.

    Overlays, modules and transformers (diff-only ones rebuilt from their
    base and verified), tuning tables and artifacts with a target: what
    compose bind-mounts. ``executables`` names the artifacts the container
    executes (the entrypoint); transformers are run by it with Python.
    ``extra`` is for files other producers pin (what an applied patch
    series writes), added as given. A file that does not match its pin
    stops the build.
    """
    from patchkit.core.hashing import Blob, require_pin
    from patchkit.sources.materialize import materialize

    keep: dict[str, Blob] = {}
    bad = [m for m in materialize(repo, lock, store, cache, keep=keep) if not m.ok]
    if bad:
        raise BadInput(
            f"'{bad[0].name}': {bad[0].how}", "fix the file or re-pin it: patchkit lock; then patchkit check"
        )
    out = [LayerFile(target, blob.data) for target, blob in keep.items()]
    names = set(executables)
    for kind, items in (("tuning", lock.tuning), ("artifacts", lock.artifacts)):
        for a in items:
            if a.target is None:
                continue
            data = repo.read_pinned(str(a.file), f"{kind} '{a.name}'; refusing to build")
            require_pin(
                data,
                a.sha256.hex,
                lambda _: f"{a.file} ({kind} '{a.name}') does not match its pin",  # noqa: B023 - called at once
                "if the change is intended: patchkit lock; if not: git checkout -- " + str(a.file),
            )
            out.append(LayerFile(str(a.target), data, a.name in names))
    out.extend(extra)
    return sorted(out, key=lambda f: f.target)


def series_files(
    repo: Repo,
    lock: Lockfile,
    profile: str,
    base: str,
    ctx: Context,
    trees: Callable[[Series], Reader | str] | None = None,
) -> list[LayerFile]:
    """What the lockfile's patch series produce on the base image, at their targets, with their records.

    Each series is applied, under ``profile`` when it has that profile (else every patch), to
    the base image's own files below its ``target`` (``trees``; default: read from the
    registry with ``ctx``'s client), exactly as ``emit --containerfile`` copies them: each
    produced file at ``target/path``, and the record of what was applied at
    ``target/.patchkit/series/NAME.json``.
    """
    if not lock.series:
        return []
    from patchkit.emit.containerfile import image_tree, series_outputs

    outputs = series_outputs(repo, lock, profile, trees if trees is not None else image_tree(base, ctx))
    return [LayerFile(target, data) for out in outputs for target, data in out.placed()]


def created_time(lock: Lockfile, base_name: str, source_date_epoch: str | None = None) -> str:
    """The build's ``created`` time: ``source_date_epoch`` if given, else when the base was pinned.

    Both come from what is committed (the ``SOURCE_DATE_EPOCH`` a release
    sets, which the command line reads and passes in, or the lockfile's
    ``images.<base>.resolved_at``), never from the clock, so every machine
    builds the same digests. A base pinned without a time gives the epoch
    itself.
    """
    raw = source_date_epoch
    if raw is not None and raw != "":
        if not raw.isdigit():
            raise BadInput(f"SOURCE_DATE_EPOCH={raw!r} is not an integer number of seconds")
        return rfc3339(int(raw))
    img = next((i for i in lock.images if i.name == base_name), None)
    if img is not None and img.resolved_at:
        return rfc3339(epoch_of(img.resolved_at))
    return rfc3339(0)


def derived_pin(name: str, base_name: str, built: Built) -> Derived:
    """The lockfile pin of a pushed derived image."""
    from patchkit.lockfile.model import Derived

    return Derived(
        name=name,
        base=base_name,
        repository=built.repository,
        digest=built.digest,
        base_digest=built.base_digest,
        layer_digest=built.layer.digest,
        diff_id=built.layer.diff_id,
        created=built.created,
        tag=built.tag,
    )


# --- the command -----------------------------------------------------------------------------------


def build_image(
    repo: Repo,
    lock: Lockfile,
    store: BlobStore,
    cache: Context,
    push: str,
    *,
    client: RegistryClient,
    source_date_epoch: str | None = None,
    profile: str | None = None,
    chunk_size: int | None = None,
    extra: Iterable[LayerFile] = (),
) -> tuple[Outcome, Built]:
    """``image build --push REF``: build the profile's derived image, push it, pin it as ``derived.<profile>``.

    ``client`` talks to the registry (the base's and the target's);
    ``source_date_epoch`` (``$SOURCE_DATE_EPOCH``, read by the command line)
    fixes the image's ``created`` time (see :func:`created_time`).

    The base is deploy.toml's ``inference.image`` (pinned by digest in the
    lockfile), the entrypoint artifact, if named, is made executable; nothing
    else of deploy.toml is needed unless ``[guard]`` puts its manifest in the
    image (:func:`patchkit.emit.config.load_build_config`). Every patch
    series joins the layer as ``patchkit apply`` would write it on the
    base (:func:`series_files`); ``extra`` is for files other steps
    produce. The lockfile and SHA256SUMS are written only after the
    registry has accepted everything.
    """
    import dataclasses

    from patchkit.core.outcome import Change, Outcome
    from patchkit.emit.config import CONFIG_NAME, DEFAULT_PROFILE, load_build_config
    from patchkit.oci.ref import ImageRef
    from patchkit.store.persist import finish

    config = load_build_config(repo.root / CONFIG_NAME)
    name = config.profile(profile or DEFAULT_PROFILE)
    base_name = config.image
    img = next((i for i in lock.images if i.name == base_name), None)
    if img is None:
        raise BadInput(
            f"{CONFIG_NAME}: inference.image names '{base_name}', which lockfile.toml does not pin",
            f"patchkit image pin {base_name} REF",
        )
    target = ImageRef.parse(push)
    if target.digest is not None:
        raise BadInput(f"--push {push}: give a repository and tag, not a digest", "e.g. --push registry/team/vllm:v1")
    from patchkit.emit.manifest import image_files

    guard = image_files(lock, config.deploy) if config.deploy is not None else {}
    extra = [
        *extra,
        *series_files(repo, lock, name, img.reference, cache),
        *(LayerFile(path, data) for path, data in guard.items()),
    ]
    executables = (config.entrypoint,) if config.entrypoint is not None else ()
    files = runtime_files(repo, lock, store, cache, executables=executables, extra=extra)
    base = ImageRef.parse(f"{img.repository}@{img.digest}")
    created = created_time(lock, base_name, source_date_epoch)
    built = build_and_push(client, base, target, files, created, chunk_size=chunk_size)
    old = next((d for d in lock.derived if d.name == name), None)
    new = derived_pin(name, base_name, built)
    derived = (*(d for d in lock.derived if d.name != name), new)
    outcome = Outcome()
    if old != new:
        outcome.written = finish(repo, dataclasses.replace(lock, derived=derived))
        outcome.changes.append(Change(f"derived[{name}]", str(old.digest) if old else "unpinned", str(new.digest)))
    return outcome, built
