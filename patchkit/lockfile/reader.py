"""Reading the lockfile: TOML text to the frozen model, every problem located.

``loads`` reports every problem with its file, line and field, and raises
``LockfileError`` listing all of them; a valid lockfile is parsed once and never
pays for line numbers.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from patchkit.errors import LockfileError, Problem
from patchkit.lockfile.model import (
    GENERATED,
    HAND_DIFF_AGAINST,
    LOCKFILE_NAME,
    REF_KINDS,
    REF_STATES,
    SCHEMA_VERSION,
    UPSTREAM_KINDS,
    Artifact,
    Base,
    Derived,
    DiffPin,
    FilePin,
    GitUpstream,
    HandDiff,
    Image,
    Lockfile,
    Model,
    ModelFile,
    Origin,
    Patch,
    PatchKind,
    RefState,
    Signing,
    Upstream,
)
from patchkit.lockfile.tomlpos import FieldPath, FieldReader, render_path, toml_type
from patchkit.series.model import read as read_series
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

_HF_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def loads(text: str, filename: str = LOCKFILE_NAME) -> Lockfile:
    """Parse and validate lockfile text; raise ``LockfileError`` listing every problem."""
    try:
        raw = tomllib.loads(text)
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
    reader = FieldReader(filename, text)
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


def _read(raw: dict[str, Any], r: FieldReader) -> Lockfile | None:  # noqa: C901 (over the ceiling already)
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
            "series",
            "derived",
        ),
    )
    schema = raw.get("schema")
    if schema is None:
        r.problem((), "missing 'schema'", f"add 'schema = {SCHEMA_VERSION}' at the top")
        return None
    if not isinstance(schema, int) or isinstance(schema, bool):
        r.problem(("schema",), f"must be an integer, got {toml_type(schema)}")
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
            r.problem(path, f"must be a table, got {toml_type(value)}")
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
            r.problem(path, f"must be a table, got {toml_type(value)}")
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
            r.problem(path, f"must be a table, got {toml_type(value)}")
            continue
        refs.append(_read_ref(key, value, path, r))

    signing = None
    signing_raw = r.table(raw, (), "signing")
    if signing_raw is not None:
        signing = _read_signing(signing_raw, r)

    hand_diffs = _read_hand_diffs(raw, r, {p.name for p in patches})
    series = read_series(raw.get("series"), r, upstream_names)
    derived = _read_derived(raw, r, {i.name for i in images if i is not None})

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
        series=series,
        derived=derived,
    )


def _read_hand_diffs(raw: dict[str, Any], r: FieldReader, patch_names: set[str]) -> tuple[HandDiff, ...]:
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
    r: FieldReader,
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
        where = render_path(path)
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
            files.setdefault(rel, render_path(fpath))


def _name(r: FieldReader, path: FieldPath, key: str, what: str) -> str | None:
    try:
        return check_name(key, what)
    except ValueError as e:
        r.problem(path, str(e))
        return None


def _read_image(key: str, t: dict[str, Any], path: FieldPath, r: FieldReader) -> Image | None:
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


def _read_derived(raw: dict[str, Any], r: FieldReader, image_names: set[str]) -> tuple[Derived, ...]:
    """``[derived.<profile>]`` tables: every field required but ``tag``; the base must be a pinned image."""
    out: list[Derived] = []
    for key, t in (r.table(raw, (), "derived") or {}).items():
        path: FieldPath = ("derived", key)
        if not isinstance(t, dict):
            r.problem(path, f"must be a table, got {toml_type(t)}")
            continue
        r.known(t, path, ("base", "repository", "tag", "digest", "base_digest", "layer_digest", "diff_id", "created"))
        name = _name(r, path, key, "profile name")
        base = r.string(t, path, "base", required=True)
        if base is not None and base not in image_names:
            r.problem((*path, "base"), f"names image '{base}', which [images] does not pin", "patchkit image pin")
        repository = r.string(t, path, "repository", required=True)
        digests = {
            k: r.typed(t, path, k, Digest, required=True, hint="rebuild it: patchkit image build --push …")
            for k in ("digest", "base_digest", "layer_digest", "diff_id")
        }
        created = r.string(t, path, "created", required=True)
        tag = r.string(t, path, "tag")
        d, b, ly, di = (digests[k] for k in ("digest", "base_digest", "layer_digest", "diff_id"))
        if name and base and repository and created and d and b and ly and di:
            out.append(Derived(name, base, repository, d, b, ly, di, created, tag))
    return tuple(out)


def _read_model(t: dict[str, Any], r: FieldReader) -> Model | None:
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


_WHEEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*")
_UPSTREAM_FIELDS = (
    "source", "git", "commit", "wheel", "wheel_sha256", "wheel_file", "dir", "dir_sha256",
    "image", "image_digest", "image_tag", "prefix", "platform", "version", "note",
)  # fmt: skip


def _read_upstream(key: str, t: dict[str, Any], path: FieldPath, r: FieldReader) -> Upstream | None:
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
    kind = UPSTREAM_KINDS.get(source)
    if kind is None:
        *others, last = UPSTREAM_KINDS
        r.problem((*path, "source"), f"unknown source '{source}' ({', '.join(others)} or {last})")
        kind = GitUpstream
    elif any({"image": image, "wheel": wheel, "dir": directory}.get(f, t.get(f)) is None for f in kind.required):
        r.problem(path, kind.lacking)
    wheel_sha = r.typed(t, path, "wheel_sha256", Sha256)
    dir_sha = r.typed(t, path, "dir_sha256", Sha256)
    image_digest = r.typed(t, path, "image_digest", Digest, hint="pin images by digest")
    prefix = r.typed(t, path, "prefix", ContainerPath)
    if name is None:
        return None
    return kind(
        name=name,
        git=git,
        commit=commit,
        version=r.string(t, path, "version"),
        note=r.string(t, path, "note"),
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


def _read_patch(t: dict[str, Any], path: FieldPath, r: FieldReader, upstreams: set[str]) -> Patch | None:  # noqa: C901 (over the ceiling already)
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
        r.problem((*path, "refs"), f"must be an array of strings, got {toml_type(raw_refs)}")
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


def _read_origin(t: dict[str, Any], path: FieldPath, r: FieldReader) -> Origin:
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


def _read_artifacts(raw: dict[str, Any], key: str, r: FieldReader) -> tuple[Artifact, ...]:
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


def _read_ref(key: str, t: dict[str, Any], path: FieldPath, r: FieldReader) -> RefState | None:
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


def _read_signing(t: dict[str, Any], r: FieldReader) -> Signing | None:
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
