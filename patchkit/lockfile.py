"""The lockfile model: every pin of a deployment, loaded strictly, saved canonically.

``loads`` turns TOML text into frozen dataclasses and reports every problem
with its file, line and field. ``dumps`` writes the canonical form: fixed key
order, fixed formatting, so the same content always gives the same bytes and a
re-lock without change is a no-op. See docs/lockfile.md for every field.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from patchkit import tomlfast
from patchkit.errors import LockfileError, Problem
from patchkit.tomlpos import LineIndex
from patchkit.values import (
    ContainerPath,
    Digest,
    Reference,
    RepoPath,
    Revision,
    Sha256,
    UpstreamPath,
    check_name,
)

SCHEMA_VERSION = 1
_HF_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# Files patchkit itself generates; pinning them would be circular.
GENERATED = ("lockfile.toml", "SHA256SUMS")
LOCKFILE_NAME = "lockfile.toml"
HEADER = (
    "# patchkit lockfile: every pin of this deployment.\n"
    "# Written by patchkit (init, add, remove, lock); hand edits are fine, then run\n"
    "# `patchkit lock` and `patchkit check`. Fields: docs/lockfile.md.\n"
)


class PatchKind(Enum):
    """What a patch is: a full-file overlay, a new module, or a source transformer."""

    OVERLAY = "overlay"
    MODULE = "module"
    TRANSFORMER = "transformer"


@dataclass(frozen=True)
class Image:
    """A container image pinned by digest."""

    name: str
    repository: str
    digest: Digest
    tag: str | None = None
    resolved_at: str | None = None
    platform: str | None = None
    platform_digest: Digest | None = None
    version: str | None = None
    note: str | None = None

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"


@dataclass(frozen=True)
class ModelFile:
    """One file of a model revision: its size and its hash (LFS sha256 or git blob id)."""

    path: UpstreamPath
    size: int
    sha256: Sha256 | None = None
    blob: str | None = None


@dataclass(frozen=True)
class FilePin:
    """A repository file pinned by its sha256 (e.g. a model manifest too large to inline)."""

    file: RepoPath
    sha256: Sha256


@dataclass(frozen=True)
class Model:
    """A Hugging Face model pinned at a full commit.

    ``ref`` is the branch or tag the revision was resolved from (the cache's
    ``refs/<ref>`` must name the revision); the file manifest is either inline
    (``files``) or in a repository file pinned by ``manifest``.
    """

    repo: str
    revision: Revision
    files: tuple[ModelFile, ...] = ()
    ref: str | None = None
    resolved_at: str | None = None
    manifest: FilePin | None = None


@dataclass(frozen=True)
class Upstream:
    """An upstream project the patches are based on, and the source that serves its files.

    ``source`` is ``git`` (``git`` URL at ``commit``), ``wheel`` (the wheel of
    ``wheel`` = "project==version", pinned by ``wheel_sha256``) or ``dir`` (a
    local directory tree, pinned by ``dir_sha256`` over its files).
    """

    name: str
    git: str | None = None
    commit: Revision | None = None
    version: str | None = None
    note: str | None = None
    source: str = "git"
    wheel: str | None = None
    wheel_sha256: Sha256 | None = None
    wheel_file: str | None = None
    dir: str | None = None
    dir_sha256: Sha256 | None = None
    image: str | None = None
    image_digest: Digest | None = None
    image_tag: str | None = None
    prefix: ContainerPath | None = None
    platform: str | None = None

    @property
    def wheel_project(self) -> str | None:
        return self.wheel.split("==", 1)[0] if self.wheel else None

    @property
    def wheel_version(self) -> str | None:
        return self.wheel.split("==", 1)[1] if self.wheel else None

    @property
    def pin_text(self) -> str:
        """The pin in one phrase: a commit, a wheel or a directory digest."""
        if self.source == "wheel":
            return f"{self.wheel} ({self.wheel_sha256.short if self.wheel_sha256 else 'unpinned'})"
        if self.source == "dir":
            return f"dir {self.dir} ({self.dir_sha256.short if self.dir_sha256 else 'unpinned'})"
        if self.source == "image":
            digest = self.image_digest.hex[:12] if self.image_digest else "unpinned"
            return f"{self.image}@sha256:{digest}" + (f" ({self.version})" if self.version else "")
        return self.commit.short if self.commit else "unpinned"


@dataclass(frozen=True)
class Base:
    """The upstream file a patch is based on, pinned by its sha256.

    ``commit`` (git upstreams) or ``version`` (wheel upstreams) says at which
    upstream pin the base was taken.
    """

    upstream: str
    path: UpstreamPath
    sha256: Sha256
    commit: Revision | None = None
    version: str | None = None


@dataclass(frozen=True)
class DiffPin:
    """The diff of a patch against its base, committed under ``upstream/``."""

    file: RepoPath
    sha256: Sha256


@dataclass(frozen=True)
class Origin:
    """What a hand-kept repository stated about an imported patch's upstream, as stated.

    ``patchkit import`` records it for an overlay whose base patchkit has not
    established yet; nothing here is verified. ``commit`` is kept as written
    (a short id stays short); ``stated_in`` lists where each fact was found.
    ``patchkit import --normalize`` turns it into a verified [base].
    """

    repository: str | None = None
    commit: str | None = None
    path: UpstreamPath | None = None
    stated_in: tuple[str, ...] = ()


@dataclass(frozen=True)
class HandDiff:
    """A hand-kept diff adopted by ``patchkit import``, pinned as it is.

    ``patches`` names the patches whose files it covers; ``against`` says what
    its old side is: ``upstream``, ``overlay`` (incremental: against an
    earlier version of the overlay) or ``new`` (it adds whole files).
    """

    file: RepoPath
    sha256: Sha256
    patches: tuple[str, ...] = ()
    against: str = "upstream"


HAND_DIFF_AGAINST = ("upstream", "overlay", "new")


@dataclass(frozen=True)
class Patch:
    """A file the deployment runs instead of, or beside, upstream code.

    ``file`` is ``None`` for a diff-only patch: the file that runs is the base
    plus the diff, and ``sha256`` pins the result.
    """

    name: str
    kind: PatchKind
    sha256: Sha256
    target: ContainerPath
    file: RepoPath | None = None
    base: Base | None = None
    diff: DiffPin | None = None
    reason: str | None = None
    refs: tuple[Reference, ...] = ()
    drop_when: str | None = None
    origin: Origin | None = None

    @property
    def committed(self) -> bool:
        return self.file is not None


@dataclass(frozen=True)
class Artifact:
    """A pinned file: a tuning table, the entrypoint, a proxy config, compose.yaml."""

    name: str
    file: RepoPath
    sha256: Sha256
    target: ContainerPath | None = None
    note: str | None = None


REF_STATES = ("open", "closed", "merged", "unknown")
REF_KINDS = ("issue", "pull", "commit")


@dataclass(frozen=True)
class RefState:
    """The last known state of an upstream issue or pull request.

    ``etag`` is the validator of the last answer, sent back as ``If-None-Match``
    so an unchanged state costs no rate limit.
    """

    ref: Reference
    state: str
    checked_at: str | None = None
    merge_commit: Revision | None = None
    head_commit: Revision | None = None
    kind: str | None = None
    title: str | None = None
    merged_at: str | None = None
    etag: str | None = None


@dataclass(frozen=True)
class Signing:
    """How the repository's signatures are checked.

    ``allowed_signers`` is an OpenSSH allowed-signers file in the repository;
    ``identity`` the principal signatures must be made by; ``files`` the files
    that must carry a valid ``<file>.sig`` (SSHSIG, namespace ``patchkit``).
    """

    allowed_signers: RepoPath
    identity: str | None = None
    files: tuple[RepoPath, ...] = (RepoPath("SHA256SUMS"),)


@dataclass(frozen=True)
class Lockfile:
    """Every pin of a deployment."""

    name: str | None = None
    images: tuple[Image, ...] = ()
    model: Model | None = None
    upstreams: tuple[Upstream, ...] = ()
    patches: tuple[Patch, ...] = ()
    tuning: tuple[Artifact, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    refs: tuple[RefState, ...] = ()
    signing: Signing | None = None
    diffs: tuple[HandDiff, ...] = ()
    schema: int = SCHEMA_VERSION

    def upstream(self, name: str) -> Upstream | None:
        return next((u for u in self.upstreams if u.name == name), None)

    def patch(self, name: str) -> Patch | None:
        return next((p for p in self.patches if p.name == name), None)

    def files(self) -> list[tuple[str, RepoPath, Sha256]]:
        """Every repository file the lockfile pins, as (field, path, sha256)."""
        out: list[tuple[str, RepoPath, Sha256]] = []
        for i, p in enumerate(self.patches):
            if p.file is not None:
                out.append((f"patches[{i}].sha256", p.file, p.sha256))
            if p.diff is not None:
                out.append((f"patches[{i}].diff.sha256", p.diff.file, p.diff.sha256))
        for i, t in enumerate(self.tuning):
            out.append((f"tuning[{i}].sha256", t.file, t.sha256))
        for i, a in enumerate(self.artifacts):
            out.append((f"artifacts[{i}].sha256", a.file, a.sha256))
        for i, d in enumerate(self.diffs):
            out.append((f"diffs[{i}].sha256", d.file, d.sha256))
        if self.model is not None and self.model.manifest is not None:
            out.append(("model.manifest.sha256", self.model.manifest.file, self.model.manifest.sha256))
        return out

    def ref_state(self, ref: Reference) -> RefState | None:
        return next((s for s in self.refs if s.ref == ref), None)


# --------------------------------------------------------------------------- loading

T = TypeVar("T")
FieldPath = tuple[str | int, ...]


class _Reader:
    """Reads raw TOML data into typed values, collecting located problems."""

    def __init__(self, filename: str, text: str) -> None:
        self.filename = filename
        self.text = text
        self._index: LineIndex | None = None
        self.problems: list[Problem] = []

    @property
    def index(self) -> LineIndex:
        # Built on the first problem only: a valid lockfile never pays for it.
        if self._index is None:
            self._index = LineIndex(self.text)
        return self._index

    def problem(self, path: FieldPath, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(self.filename, self.index.line_of(path), _render_path(path), message, hint))

    def table(self, data: dict[str, Any], path: FieldPath, key: str) -> dict[str, Any] | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.problem((*path, key), f"must be a table, got {_toml_type(value)}")
            return None
        return value

    def array_of_tables(self, data: dict[str, Any], key: str) -> list[dict[str, Any]]:
        value = data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            self.problem((key,), f"must be an array of tables ([[{key}]]), got {_toml_type(value)}")
            return []
        return value

    def string(self, data: dict[str, Any], path: FieldPath, key: str, *, required: bool = False) -> str | None:
        if key not in data:
            if required:
                self.problem(path, f"missing required field '{key}'")
            return None
        value = data[key]
        if not isinstance(value, str):
            self.problem((*path, key), f"must be a string, got {_toml_type(value)}")
            return None
        return value

    def typed(
        self,
        data: dict[str, Any],
        path: FieldPath,
        key: str,
        ctor: Callable[[str], T],
        *,
        required: bool = False,
        hint: str | None = None,
    ) -> T | None:
        text = self.string(data, path, key, required=required)
        if text is None:
            return None
        try:
            return ctor(text)
        except ValueError as e:
            self.problem((*path, key), str(e), hint)
            return None

    def known(self, data: dict[str, Any], path: FieldPath, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        for key in data:
            if key not in allowed:
                self.problem(
                    (*path, key),
                    f"unknown field '{key}' (known: {', '.join(allowed)})",
                    "remove it or fix its spelling",
                )


def _toml_type(value: object) -> str:
    return {
        str: "a string",
        int: "an integer",
        float: "a float",
        bool: "a boolean",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def _render_path(path: FieldPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def loads(text: str, filename: str = LOCKFILE_NAME) -> Lockfile:
    """Parse and validate lockfile text; raise ``LockfileError`` listing every problem."""
    try:
        raw = tomlfast.loads(text) or tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = _toml_error_line(str(e))
        raise LockfileError(
            [Problem(filename, line, None, f"not valid TOML: {e}", "fix the syntax at that line")]
        ) from e
    except RecursionError as e:  # tomllib recurses once per nested array or inline table
        line = _deepest_line(text)
        raise LockfileError(
            [Problem(filename, line, None, "nested too deeply to be a lockfile", "remove the nested arrays or tables")]
        ) from e
    reader = _Reader(filename, text)
    lock = _read(raw, reader)
    if reader.problems or lock is None:
        raise LockfileError(reader.problems or [Problem(filename, None, None, "cannot be read")])
    return lock


def _deepest_line(text: str) -> int | None:
    """The first line holding a run of 100 opening brackets or braces (where a nesting bomb is)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if "[" * 100 in line.replace(" ", "") or "{" * 100 in line.replace(" ", ""):
            return number
    return None


def _toml_error_line(message: str) -> int | None:
    m = re.search(r"line (\d+)", message)
    return int(m.group(1)) if m else None


def _read(raw: dict[str, Any], r: _Reader) -> Lockfile | None:  # noqa: C901 (over the ceiling already)
    r.known(
        raw,
        (),
        (
            "schema",
            "deployment",
            "images",
            "model",
            "upstreams",
            "patches",
            "tuning",
            "artifacts",
            "diffs",
            "refs",
            "signing",
        ),
    )
    schema = raw.get("schema")
    if schema is None:
        r.problem((), "missing 'schema'", f"add 'schema = {SCHEMA_VERSION}' at the top")
        return None
    if not isinstance(schema, int) or isinstance(schema, bool):
        r.problem(("schema",), f"must be an integer, got {_toml_type(schema)}")
        return None
    if schema != SCHEMA_VERSION:
        r.problem(
            ("schema",),
            f"unknown schema version {schema}; this patchkit reads version {SCHEMA_VERSION}",
            "upgrade patchkit" if schema > SCHEMA_VERSION else "set schema = 1",
        )
        return None

    name = None
    deployment = r.table(raw, (), "deployment")
    if deployment is not None:
        r.known(deployment, ("deployment",), ("name",))
        name = r.typed(deployment, ("deployment",), "name", lambda s: check_name(s, "deployment name"))

    images = []
    images_raw = r.table(raw, (), "images") or {}
    for key, value in images_raw.items():
        path: FieldPath = ("images", key)
        if not isinstance(value, dict):
            r.problem(path, f"must be a table, got {_toml_type(value)}")
            continue
        images.append(_read_image(key, value, path, r))

    model = None
    model_raw = r.table(raw, (), "model")
    if model_raw is not None:
        model = _read_model(model_raw, r)

    upstreams = []
    for key, value in (r.table(raw, (), "upstreams") or {}).items():
        path = ("upstreams", key)
        if not isinstance(value, dict):
            r.problem(path, f"must be a table, got {_toml_type(value)}")
            continue
        upstreams.append(_read_upstream(key, value, path, r))

    upstream_names = {u.name for u in upstreams if u is not None}
    patches = []
    seen: dict[str, int] = {}
    for i, value in enumerate(r.array_of_tables(raw, "patches")):
        patch = _read_patch(value, ("patches", i), r, upstream_names)
        if patch is None:
            continue
        if patch.name in seen:
            r.problem(
                ("patches", i, "name"),
                f"duplicate patch name '{patch.name}' (also patches[{seen[patch.name]}])",
                "give each patch its own name",
            )
        seen[patch.name] = i
        patches.append(patch)

    tuning = _read_artifacts(raw, "tuning", r)
    artifacts = _read_artifacts(raw, "artifacts", r)

    refs = []
    for key, value in (r.table(raw, (), "refs") or {}).items():
        path = ("refs", key)
        if not isinstance(value, dict):
            r.problem(path, f"must be a table, got {_toml_type(value)}")
            continue
        refs.append(_read_ref(key, value, path, r))

    signing = None
    signing_raw = r.table(raw, (), "signing")
    if signing_raw is not None:
        signing = _read_signing(signing_raw, r)

    hand_diffs = _read_hand_diffs(raw, r, {p.name for p in patches})

    _check_unique(r, patches, tuning, artifacts, hand_diffs)
    if r.problems:
        return None
    return Lockfile(
        name=name,
        images=tuple(i for i in images if i is not None),
        model=model,
        upstreams=tuple(u for u in upstreams if u is not None),
        patches=tuple(patches),
        tuning=tuning,
        artifacts=artifacts,
        refs=tuple(x for x in refs if x is not None),
        signing=signing,
        diffs=hand_diffs,
    )


def _read_hand_diffs(raw: dict[str, Any], r: _Reader, patch_names: set[str]) -> tuple[HandDiff, ...]:
    out = []
    for i, t in enumerate(r.array_of_tables(raw, "diffs")):
        path: FieldPath = ("diffs", i)
        r.known(t, path, ("file", "sha256", "patches", "against"))
        file = r.typed(t, path, "file", RepoPath, required=True)
        sha = r.typed(t, path, "sha256", Sha256, required=True)
        names = t.get("patches", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            r.problem((*path, "patches"), "must be an array of patch names")
            names = []
        for j, n in enumerate(names):
            if n not in patch_names:
                r.problem((*path, "patches", j), f"no patch named '{n}'", "name a [[patches]] entry or remove it")
        against = r.string(t, path, "against") or "upstream"
        if against not in HAND_DIFF_AGAINST:
            r.problem((*path, "against"), f"unknown value '{against}' (upstream, overlay or new)")
        if file is not None and sha is not None:
            out.append(HandDiff(file=file, sha256=sha, patches=tuple(names), against=against))
    return tuple(out)


def _check_unique(
    r: _Reader,
    patches: list[Patch],
    tuning: tuple[Artifact, ...],
    artifacts: tuple[Artifact, ...],
    hand_diffs: tuple[HandDiff, ...] = (),
) -> None:
    """Names are unique across all entries; each file is pinned once; generated files not at all."""
    names: dict[str, str] = {}
    files: dict[str, str] = {}
    entries: list[tuple[FieldPath, str, list[tuple[str, str]]]] = []
    for i, p in enumerate(patches):
        pf = [("file", str(p.file))] if p.file else []
        if p.diff:
            pf.append(("diff.file", str(p.diff.file)))
        entries.append((("patches", i), p.name, pf))
    for key, items in (("tuning", tuning), ("artifacts", artifacts)):
        for i, a in enumerate(items):
            entries.append(((key, i), a.name, [("file", str(a.file))]))
    for i, d in enumerate(hand_diffs):
        entries.append((("diffs", i), "", [("file", str(d.file))]))
    for path, name, pinned in entries:
        where = _render_path(path)
        if name and name in names and not names[name].startswith(where.split("[")[0] + "["):
            r.problem((*path, "name"), f"name '{name}' is also used by {names[name]}", "give each entry its own name")
        if name:
            names.setdefault(name, where)
        for field_name, rel in pinned:
            fpath = (*path, *field_name.split("."))
            if rel in GENERATED:
                r.problem(fpath, f"{rel} is generated by patchkit and cannot be pinned")
            elif rel in files:
                r.problem(fpath, f"{rel} is already pinned by {files[rel]}", "pin each file once")
            files.setdefault(rel, _render_path(fpath))


def _name(r: _Reader, path: FieldPath, key: str, what: str) -> str | None:
    try:
        return check_name(key, what)
    except ValueError as e:
        r.problem(path, str(e))
        return None


def _read_image(key: str, t: dict[str, Any], path: FieldPath, r: _Reader) -> Image | None:
    fields = ("repository", "digest", "tag", "resolved_at", "platform", "platform_digest", "version", "note")
    r.known(t, path, fields)
    name = _name(r, path, key, "image name")
    repository = r.string(t, path, "repository", required=True)
    if repository is not None and not repository.strip():
        r.problem((*path, "repository"), "is empty", "write the image repository, e.g. 'vllm/vllm-openai-rocm'")
        repository = None
    if repository is not None and ("@" in repository or repository.rsplit("/", 1)[-1].count(":")):
        r.problem(
            (*path, "repository"),
            f"'{repository}' must be the repository alone, without a tag or digest",
            "put the tag in 'tag' and the digest in 'digest'",
        )
        repository = None
    digest = r.typed(t, path, "digest", Digest, required=True, hint="pin images by digest")
    platform_digest = r.typed(t, path, "platform_digest", Digest)
    if name is None or repository is None or digest is None:
        return None
    return Image(
        name=name,
        repository=repository,
        digest=digest,
        tag=r.string(t, path, "tag"),
        resolved_at=r.string(t, path, "resolved_at"),
        platform=r.string(t, path, "platform"),
        platform_digest=platform_digest,
        version=r.string(t, path, "version"),
        note=r.string(t, path, "note"),
    )


def _read_model(t: dict[str, Any], r: _Reader) -> Model | None:
    path: FieldPath = ("model",)
    r.known(t, path, ("repo", "revision", "ref", "resolved_at", "files", "manifest"))
    repo = r.string(t, path, "repo", required=True)
    if repo is not None and not _HF_REPO.fullmatch(repo):
        r.problem((*path, "repo"), f"'{repo}' is not a Hugging Face repo id (write 'org/name')")
        repo = None
    revision = r.typed(
        t,
        path,
        "revision",
        Revision,
        required=True,
        hint="resolve the branch to its commit (the model page shows it) and pin that",
    )
    files = []
    raw_files = t.get("files", [])
    if not isinstance(raw_files, list) or not all(isinstance(f, dict) for f in raw_files):
        r.problem((*path, "files"), "must be an array of tables ([[model.files]])")
        raw_files = []
    for i, f in enumerate(raw_files):
        fpath: FieldPath = (*path, "files", i)
        r.known(f, fpath, ("path", "size", "sha256", "blob"))
        p = r.typed(f, fpath, "path", UpstreamPath, required=True)
        size = f.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            r.problem((*fpath, "size"), "must be a non-negative integer")
            size = None
        sha = r.typed(f, fpath, "sha256", Sha256)
        blob = r.string(f, fpath, "blob")
        if blob is not None and not (len(blob) == 40 and all(c in "0123456789abcdef" for c in blob)):
            r.problem((*fpath, "blob"), f"'{blob}' is not a git blob id (40 lowercase hex)")
        if sha is None and blob is None:
            r.problem(fpath, "needs 'sha256' (LFS files) or 'blob' (small files)")
        if p is not None and size is not None:
            files.append(ModelFile(path=p, size=size, sha256=sha, blob=blob))
    ref = r.string(t, path, "ref")
    if ref is not None and (not ref or ref.startswith(("/", "-")) or ".." in ref or any(c in ref for c in " \t\n\\")):
        r.problem((*path, "ref"), f"'{ref}' is not a branch or tag name")
    manifest = None
    manifest_raw = r.table(t, path, "manifest")
    if manifest_raw is not None:
        mpath: FieldPath = (*path, "manifest")
        r.known(manifest_raw, mpath, ("file", "sha256"))
        mfile = r.typed(manifest_raw, mpath, "file", RepoPath, required=True)
        msha = r.typed(manifest_raw, mpath, "sha256", Sha256, required=True)
        if mfile is not None and msha is not None:
            manifest = FilePin(mfile, msha)
        if files:
            r.problem(mpath, "a model has its file list inline (files) or in a manifest file, not both")
    if repo is None or revision is None:
        return None
    return Model(
        repo=repo,
        revision=revision,
        files=tuple(files),
        ref=ref,
        resolved_at=r.string(t, path, "resolved_at"),
        manifest=manifest,
    )


_UPSTREAM_FIELDS = (
    "source", "git", "commit", "wheel", "wheel_sha256", "wheel_file", "dir", "dir_sha256",
    "image", "image_digest", "image_tag", "prefix", "platform", "version", "note",
)  # fmt: skip
_WHEEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*")


def _inferred_source(u: Upstream) -> str:
    """The source the loader infers when ``source`` is absent (so dumps can leave it out)."""
    if u.wheel is not None:
        return "wheel"
    if u.dir is not None:
        return "dir"
    return "image" if u.image is not None else "git"


def _read_upstream(key: str, t: dict[str, Any], path: FieldPath, r: _Reader) -> Upstream | None:
    r.known(t, path, _UPSTREAM_FIELDS)
    name = _name(r, path, key, "upstream name")
    git = r.string(t, path, "git")
    commit = r.typed(t, path, "commit", Revision)
    wheel = r.string(t, path, "wheel")
    if wheel is not None and not _WHEEL.fullmatch(wheel):
        r.problem((*path, "wheel"), f"'{wheel}' is not 'project==version'", 'e.g. wheel = "vllm==0.26.0"')
    directory = r.string(t, path, "dir")
    source = r.string(t, path, "source")
    if source is None:
        source = "wheel" if wheel is not None else "dir" if directory is not None else "git"
    image = r.string(t, path, "image")
    if source == "git" and image is not None and wheel is None and directory is None:
        source = "image"
    if source not in ("git", "wheel", "dir", "image"):
        r.problem((*path, "source"), f"unknown source '{source}' (git, wheel, dir or image)")
    elif source == "image" and (image is None or "image_digest" not in t or "prefix" not in t):
        r.problem(path, "an image upstream needs 'image' (the repository), 'image_digest' and 'prefix'")
    elif source == "wheel" and wheel is None:
        r.problem(path, "a wheel upstream needs 'wheel = \"project==version\"'")
    elif source == "dir" and directory is None:
        r.problem(path, "a dir upstream needs 'dir' (the directory's path)")
    wheel_sha = r.typed(t, path, "wheel_sha256", Sha256)
    dir_sha = r.typed(t, path, "dir_sha256", Sha256)
    image_digest = r.typed(t, path, "image_digest", Digest, hint="pin images by digest")
    prefix = r.typed(t, path, "prefix", ContainerPath)
    if name is None:
        return None
    return Upstream(
        name=name,
        git=git,
        commit=commit,
        version=r.string(t, path, "version"),
        note=r.string(t, path, "note"),
        source=source,
        wheel=wheel,
        wheel_sha256=wheel_sha,
        wheel_file=r.string(t, path, "wheel_file"),
        dir=directory,
        dir_sha256=dir_sha,
        image=image,
        image_digest=image_digest,
        image_tag=r.string(t, path, "image_tag"),
        prefix=prefix,
        platform=r.string(t, path, "platform"),
    )


_PATCH_FIELDS = ("name", "kind", "file", "sha256", "target", "reason", "refs", "drop_when", "base", "diff", "origin")


def _read_patch(t: dict[str, Any], path: FieldPath, r: _Reader, upstreams: set[str]) -> Patch | None:  # noqa: C901 (over the ceiling already)
    r.known(t, path, _PATCH_FIELDS)
    name = r.typed(t, path, "name", lambda s: check_name(s, "patch name"), required=True)
    kind_text = r.string(t, path, "kind", required=True)
    kind = None
    if kind_text is not None:
        try:
            kind = PatchKind(kind_text)
        except ValueError:
            r.problem((*path, "kind"), f"unknown kind '{kind_text}' (overlay, module or transformer)")
    file = r.typed(t, path, "file", RepoPath)
    sha = r.typed(t, path, "sha256", Sha256, required=True)
    target = r.typed(t, path, "target", ContainerPath, required=True)
    refs: list[Reference] = []
    raw_refs = t.get("refs", [])
    if not isinstance(raw_refs, list):
        r.problem((*path, "refs"), f"must be an array of strings, got {_toml_type(raw_refs)}")
        raw_refs = []
    for i, ref in enumerate(raw_refs):
        try:
            refs.append(Reference(ref if isinstance(ref, str) else repr(ref)))
        except ValueError as e:
            r.problem((*path, "refs", i), str(e))

    base = None
    base_raw = r.table(t, path, "base")
    if base_raw is not None:
        bpath = (*path, "base")
        r.known(base_raw, bpath, ("upstream", "commit", "version", "path", "sha256"))
        upstream = r.string(base_raw, bpath, "upstream", required=True)
        if upstream is not None and upstream not in upstreams:
            r.problem(
                (*bpath, "upstream"),
                f"upstream '{upstream}' is not declared",
                f"add an [upstreams.{upstream}] table",
            )
        bpath_value = r.typed(base_raw, bpath, "path", UpstreamPath, required=True)
        bsha = r.typed(base_raw, bpath, "sha256", Sha256, required=True)
        commit = r.typed(base_raw, bpath, "commit", Revision)
        if upstream is not None and bpath_value is not None and bsha is not None:
            version = r.string(base_raw, bpath, "version")
            base = Base(upstream=upstream, path=bpath_value, sha256=bsha, commit=commit, version=version)

    diff = None
    diff_raw = r.table(t, path, "diff")
    if diff_raw is not None:
        dpath = (*path, "diff")
        r.known(diff_raw, dpath, ("file", "sha256"))
        dfile = r.typed(diff_raw, dpath, "file", RepoPath, required=True)
        dsha = r.typed(diff_raw, dpath, "sha256", Sha256, required=True)
        if dfile is not None and dsha is not None:
            diff = DiffPin(file=dfile, sha256=dsha)

    origin = None
    origin_raw = r.table(t, path, "origin")
    if origin_raw is not None:
        origin = _read_origin(origin_raw, (*path, "origin"), r)

    if kind is PatchKind.OVERLAY and origin_raw is None:
        if "base" not in t:
            r.problem(path, "an overlay needs [base]: the upstream file it replaces", "see docs/lockfile.md")
        if "diff" not in t:
            r.problem(path, "an overlay needs [diff]: its diff against the base", "run `patchkit diff --write`")
    elif kind is PatchKind.MODULE and "base" in t:
        r.problem((*path, "base"), "a module is a new file and has no upstream base", "use kind = 'overlay'")
    if kind is not None and kind is not PatchKind.OVERLAY:
        if "file" not in t:
            r.problem(path, f"a {kind.value} is committed: set 'file' to its path under patches/")
        if "diff" in t:
            r.problem((*path, "diff"), f"a {kind.value} has no diff against upstream; remove [diff]")
    elif "file" not in t and "diff" not in t:
        r.problem(path, "needs 'file' (committed) or [diff] (diff-only)")

    if name is None or kind is None or sha is None or target is None:
        return None
    return Patch(
        name=name,
        kind=kind,
        sha256=sha,
        target=target,
        file=file,
        base=base,
        diff=diff,
        reason=r.string(t, path, "reason"),
        refs=tuple(refs),
        drop_when=r.string(t, path, "drop_when"),
        origin=origin,
    )


_SHORT_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def _read_origin(t: dict[str, Any], path: FieldPath, r: _Reader) -> Origin:
    r.known(t, path, ("repository", "commit", "path", "stated_in"))
    repository = r.string(t, path, "repository")
    if repository is not None and not _HF_REPO.fullmatch(repository):
        r.problem((*path, "repository"), f"'{repository}' is not 'owner/repo'")
    commit = r.string(t, path, "commit")
    if commit is not None and not _SHORT_COMMIT.fullmatch(commit):
        r.problem((*path, "commit"), f"'{commit}' is not a commit id (7 to 40 lowercase hex)")
    stated = t.get("stated_in", [])
    if not isinstance(stated, list) or not all(isinstance(x, str) for x in stated):
        r.problem((*path, "stated_in"), "must be an array of strings")
        stated = []
    return Origin(
        repository=repository,
        commit=commit,
        path=r.typed(t, path, "path", UpstreamPath),
        stated_in=tuple(stated),
    )


def _read_artifacts(raw: dict[str, Any], key: str, r: _Reader) -> tuple[Artifact, ...]:
    out = []
    seen: set[str] = set()
    for i, t in enumerate(r.array_of_tables(raw, key)):
        path: FieldPath = (key, i)
        r.known(t, path, ("name", "file", "sha256", "target", "note"))
        name = r.typed(t, path, "name", lambda s: check_name(s, f"{key} name"), required=True)
        file = r.typed(t, path, "file", RepoPath, required=True)
        sha = r.typed(t, path, "sha256", Sha256, required=True)
        target = r.typed(t, path, "target", ContainerPath, required=key == "tuning")
        if name is not None and name in seen:
            r.problem((*path, "name"), f"duplicate {key} name '{name}'")
        if name is not None:
            seen.add(name)
        if name is None or file is None or sha is None:
            continue
        out.append(Artifact(name=name, file=file, sha256=sha, target=target, note=r.string(t, path, "note")))
    return tuple(out)


def _read_ref(key: str, t: dict[str, Any], path: FieldPath, r: _Reader) -> RefState | None:
    r.known(t, path, ("state", "kind", "title", "checked_at", "merged_at", "merge_commit", "head_commit", "etag"))
    try:
        ref = Reference(key)
    except ValueError as e:
        r.problem(path, str(e))
        return None
    state = r.string(t, path, "state", required=True)
    if state is not None and state not in REF_STATES:
        r.problem((*path, "state"), f"unknown state '{state}' (open, closed, merged or unknown)")
    kind = r.string(t, path, "kind")
    if kind is not None and kind not in REF_KINDS:
        r.problem((*path, "kind"), f"unknown kind '{kind}' (issue, pull or commit)")
    merge = r.typed(t, path, "merge_commit", Revision)
    head = r.typed(t, path, "head_commit", Revision)
    if state is None:
        return None
    return RefState(
        ref=ref,
        state=state,
        checked_at=r.string(t, path, "checked_at"),
        merge_commit=merge,
        head_commit=head,
        kind=kind,
        title=r.string(t, path, "title"),
        merged_at=r.string(t, path, "merged_at"),
        etag=r.string(t, path, "etag"),
    )


def _read_signing(t: dict[str, Any], r: _Reader) -> Signing | None:
    path: FieldPath = ("signing",)
    r.known(t, path, ("allowed_signers", "identity", "files"))
    allowed = r.typed(t, path, "allowed_signers", RepoPath, required=True)
    identity = r.string(t, path, "identity")
    files: list[RepoPath] = []
    raw_files = t.get("files", ["SHA256SUMS"])
    if not isinstance(raw_files, list) or not raw_files:
        r.problem((*path, "files"), "must be a non-empty array of repository paths")
        raw_files = []
    for i, f in enumerate(raw_files):
        try:
            files.append(RepoPath(f if isinstance(f, str) else repr(f)))
        except ValueError as e:
            r.problem((*path, "files", i), str(e))
    if allowed is None:
        return None
    return Signing(allowed_signers=allowed, identity=identity, files=tuple(files))


# --------------------------------------------------------------------------- saving


def dumps(lock: Lockfile) -> str:  # noqa: C901 (over the ceiling already)
    """The canonical text of a lockfile: same content, same bytes.

    Tables and keys come in a fixed order, unset optional fields are left out,
    arrays of references are written one per line so a pull request shows
    each added or dropped reference on its own line.
    """
    import tomli_w

    doc: dict[str, Any] = {"schema": lock.schema}
    if lock.name is not None:
        doc["deployment"] = {"name": lock.name}
    if lock.images:
        doc["images"] = {
            img.name: _table(
                repository=img.repository,
                digest=img.digest,
                tag=img.tag,
                resolved_at=img.resolved_at,
                platform=img.platform,
                platform_digest=img.platform_digest,
                version=img.version,
                note=img.note,
            )
            for img in sorted(lock.images, key=lambda i: i.name)
        }
    if lock.model is not None:
        m = lock.model
        model = _table(repo=m.repo, revision=m.revision, ref=m.ref, resolved_at=m.resolved_at)
        if m.manifest is not None:
            model["manifest"] = _table(file=m.manifest.file, sha256=m.manifest.sha256)
        if m.files:
            model["files"] = [
                _table(path=f.path, size=f.size, sha256=f.sha256, blob=f.blob)
                for f in sorted(m.files, key=lambda f: f.path.path)
            ]
        doc["model"] = model
    if lock.upstreams:
        doc["upstreams"] = {
            u.name: _table(
                # Written except for a plain git upstream, and always when the
                # fields present would make the loader infer another source.
                source=None if u.source == "git" == _inferred_source(u) else u.source,
                git=u.git,
                commit=u.commit,
                wheel=u.wheel,
                wheel_sha256=u.wheel_sha256,
                wheel_file=u.wheel_file,
                dir=u.dir,
                dir_sha256=u.dir_sha256,
                image=u.image,
                image_digest=u.image_digest,
                image_tag=u.image_tag,
                prefix=u.prefix,
                platform=u.platform,
                version=u.version,
                note=u.note,
            )
            for u in sorted(lock.upstreams, key=lambda u: u.name)
        }
    if lock.patches:
        patches = []
        for p in lock.patches:
            t = _table(
                name=p.name,
                kind=p.kind.value,
                file=p.file,
                sha256=p.sha256,
                target=p.target,
                reason=p.reason,
                refs=[str(x) for x in p.refs] or None,
                drop_when=p.drop_when,
            )
            if p.base is not None:
                t["base"] = _table(
                    upstream=p.base.upstream,
                    commit=p.base.commit,
                    version=p.base.version,
                    path=p.base.path,
                    sha256=p.base.sha256,
                )
            if p.diff is not None:
                t["diff"] = _table(file=p.diff.file, sha256=p.diff.sha256)
            if p.origin is not None:
                o = p.origin
                t["origin"] = _table(
                    repository=o.repository, commit=o.commit, path=o.path, stated_in=list(o.stated_in) or None
                )
            patches.append(t)
        doc["patches"] = patches
    for key, items in (("tuning", lock.tuning), ("artifacts", lock.artifacts)):
        if items:
            doc[key] = [_table(name=a.name, file=a.file, sha256=a.sha256, target=a.target, note=a.note) for a in items]
    if lock.diffs:
        doc["diffs"] = [
            _table(
                file=d.file,
                sha256=d.sha256,
                patches=list(d.patches),
                against=None if d.against == "upstream" else d.against,
            )
            for d in lock.diffs
        ]
    if lock.refs:
        doc["refs"] = {
            s.ref.text: _table(
                state=s.state,
                kind=s.kind,
                title=s.title,
                checked_at=s.checked_at,
                merged_at=s.merged_at,
                merge_commit=s.merge_commit,
                head_commit=s.head_commit,
                etag=s.etag,
            )
            for s in sorted(lock.refs, key=lambda s: s.ref.text)
        }
    if lock.signing is not None:
        sg = lock.signing
        doc["signing"] = _table(
            allowed_signers=sg.allowed_signers,
            identity=sg.identity,
            files=None if sg.files == Signing.files else [str(f) for f in sg.files],
        )
    return HEADER + "\n" + tomli_w.dumps(doc)


_VALUE_TYPES = (Digest, Revision, Sha256, ContainerPath, RepoPath, UpstreamPath)


def _table(**values: Any) -> dict[str, Any]:
    """A TOML table of the set values, in the order given; typed values as their text."""
    return {k: str(v) if isinstance(v, _VALUE_TYPES) else v for k, v in values.items() if v is not None}
