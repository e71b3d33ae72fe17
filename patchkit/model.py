"""Model pins: lock a Hugging Face revision with its file manifest, verify a local cache against it.

``lock`` resolves a branch or tag to its full commit through a ``Hub``, lists
every file recursively and records each file's size and hash (the LFS
sha256, or the git blob id of a small file) in the lockfile, or, past
``INLINE_MAX`` files, in ``model/manifest.json`` pinned by sha256.

``verify_cache`` works offline on a Hugging Face cache: the snapshot of the
pinned commit, every manifest file present with the right size and content,
each snapshot symlink naming the blob of that content and never leaving the
cache, nothing extra, and ``refs/<ref>`` (when present) naming the pin. The
format of the manifest file is in docs/model.md.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit.errors import BadInput, ExternalFailure, Refused
from patchkit.hashing import GIT_SHA1, SHA256, Progress, digest_many, sha256_bytes
from patchkit.hub import Hub, RemoteFile, repo_folder
from patchkit.lockfile import LOCKFILE_NAME, FilePin, Lockfile, Model, ModelFile
from patchkit.repo import Escape, Repo
from patchkit.values import RepoPath, Revision, Sha256, UpstreamPath

if TYPE_CHECKING:
    from patchkit.findings import Finding
    from patchkit.outcome import Outcome
    from patchkit.verifyrecord import VerifyRecord

# Past this many files the manifest goes to its own file: a model of 163
# shards would otherwise add some 800 lines to the lockfile.
INLINE_MAX = 32
MANIFEST_FILE = "model/manifest.json"
MANIFEST_FORMAT = "patchkit-model-manifest/1"
DEFAULT_REF = "main"
_HF_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")

Locate = Callable[[tuple[str | int, ...]], int | None]


# check and edit (findings, lockfile writes) are imported where used, so that
# `model verify` starts without them.

# --------------------------------------------------------------------------- the manifest


def check_repo_id(repo: str) -> str:
    """A Hugging Face model id, ``org/name``; BadInput otherwise."""
    if not _HF_REPO.fullmatch(repo):
        raise BadInput(f"REPO: '{repo}' is not a Hugging Face repo id", "write it as org/name")
    return repo


def manifest_from_listing(listing: Iterable[RemoteFile], where: str) -> tuple[ModelFile, ...]:
    """The manifest of a Hub listing: every file's size and hash, sorted by path.

    LFS files are pinned by the sha256 of their content, small files by their
    git blob id: the names the Hugging Face cache gives their blobs. A
    listing the Hub should never produce (an unsafe path, a malformed hash,
    a path twice) is refused rather than pinned.
    """
    files: dict[str, ModelFile] = {}
    for f in listing:
        try:
            path = UpstreamPath(f.path)
        except ValueError as e:
            raise ExternalFailure(f"{where}: the Hub listed an unsafe path: {e}") from e
        if f.path in files:
            raise ExternalFailure(f"{where}: the Hub listed {f.path} twice")
        if f.size < 0:
            raise ExternalFailure(f"{where}: the Hub listed {f.path} with size {f.size}")
        if f.lfs_sha256 is not None:
            if not _HEX64.fullmatch(f.lfs_sha256):
                raise ExternalFailure(f"{where}: {f.path}: LFS sha256 {f.lfs_sha256!r} is not 64 lowercase hex")
            files[f.path] = ModelFile(path, f.size, sha256=Sha256(f.lfs_sha256))
        else:
            if not _HEX40.fullmatch(f.blob_id):
                raise ExternalFailure(f"{where}: {f.path}: blob id {f.blob_id!r} is not 40 lowercase hex")
            files[f.path] = ModelFile(path, f.size, blob=f.blob_id)
    return tuple(files[p] for p in sorted(files))


def manifest_bytes(repo: str, revision: Revision, files: Iterable[ModelFile]) -> bytes:
    """The canonical manifest file: same content, same bytes (fixed key order, sorted files)."""
    entries: list[dict[str, Any]] = []
    for f in sorted(files, key=lambda f: f.path.path):
        entry: dict[str, Any] = {"path": f.path.path, "size": f.size}
        if f.sha256 is not None:
            entry["sha256"] = f.sha256.hex
        if f.blob is not None:
            entry["blob"] = f.blob
        entries.append(entry)
    doc = {"format": MANIFEST_FORMAT, "repo": repo, "revision": revision.sha, "files": entries}
    return (json.dumps(doc, indent=1) + "\n").encode()


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest file."""

    repo: str
    revision: str
    files: tuple[ModelFile, ...]


def parse_manifest(data: bytes, name: str) -> Manifest:
    """Read a manifest file strictly; BadInput naming the file and the field that is wrong."""
    hint = "regenerate it: patchkit model lock"
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise BadInput(f"{name}: not valid JSON ({e})", hint) from e
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise BadInput(f'{name}: format: not a patchkit model manifest (need "format": "{MANIFEST_FORMAT}")', hint)
    repo, revision, raw = doc.get("repo"), doc.get("revision"), doc.get("files")
    if not isinstance(repo, str) or not isinstance(revision, str):
        raise BadInput(f"{name}: repo and revision must be strings", hint)
    if not isinstance(raw, list):
        raise BadInput(f"{name}: files: must be a list", hint)
    files: list[ModelFile] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        field = f"{name}: files[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"path", "size", "sha256", "blob"}:
            raise BadInput(f"{field}: must be an object with path, size and sha256 or blob", hint)
        try:
            path = UpstreamPath(entry.get("path"))  # type: ignore[arg-type]  # checked by the constructor
        except (ValueError, TypeError) as e:
            raise BadInput(f"{field}.path: {e}", hint) from e
        size = entry.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BadInput(f"{field}.size: must be a non-negative integer", hint)
        sha, blob = entry.get("sha256"), entry.get("blob")
        if (sha is None) == (blob is None):
            raise BadInput(f"{field}: needs exactly one of sha256 (LFS files) or blob (small files)", hint)
        if sha is not None and not (isinstance(sha, str) and _HEX64.fullmatch(sha)):
            raise BadInput(f"{field}.sha256: {sha!r} is not 64 lowercase hex", hint)
        if blob is not None and not (isinstance(blob, str) and _HEX40.fullmatch(blob)):
            raise BadInput(f"{field}.blob: {blob!r} is not a git blob id (40 lowercase hex)", hint)
        if path.path in seen:
            raise BadInput(f"{field}.path: {path.path} is listed twice", hint)
        seen.add(path.path)
        files.append(ModelFile(path, size, sha256=Sha256(sha) if sha else None, blob=blob))
    return Manifest(repo, revision, tuple(files))


NO_MANIFEST_FIX = "pin its files (size and hash of each, listed by the Hub at the pinned commit): patchkit model lock"


def has_manifest(model: Model) -> bool:
    """Whether the pin lists the revision's files (inline or in its manifest file)."""
    return model.manifest is not None or bool(model.files)


def pinned_files(repo: Repo, model: Model) -> tuple[ModelFile, ...]:
    """The model's file manifest: inline, or read from its manifest file and checked against its pin.

    Refused when the pin lists no files at all: a cache cannot be verified
    against a revision alone (every file would be "not in the manifest").
    """
    if not has_manifest(model):
        raise Refused(
            f"{LOCKFILE_NAME}: model {model.repo}@{model.revision.short} is pinned without a file manifest, "
            "so there is nothing to verify its files against",
            NO_MANIFEST_FIX,
        )
    if model.manifest is None:
        return model.files
    rel = str(model.manifest.file)
    hint = f"restore it (git checkout -- {rel}) or regenerate it: patchkit model lock"
    try:
        data = repo.check_inside(model.manifest.file).read_bytes()
    except FileNotFoundError as e:
        raise BadInput(f"{rel} (model manifest) is pinned but does not exist", hint) from e
    except Escape as e:
        raise BadInput(f"{rel} (model manifest) {e}", hint) from e
    got = sha256_bytes(data)
    if got != model.manifest.sha256.hex:
        raise BadInput(
            f"{rel} (model manifest) does not match its pin: pinned {model.manifest.sha256.short}…, "
            f"file has {got[:12]}…",
            hint,
        )
    manifest = parse_manifest(data, rel)
    if manifest.repo != model.repo or manifest.revision != model.revision.sha:
        raise BadInput(
            f"{rel}: describes {manifest.repo}@{manifest.revision[:12]}, but the lockfile pins "
            f"{model.repo}@{model.revision.short}",
            "regenerate it: patchkit model lock",
        )
    return manifest.files


# --------------------------------------------------------------------------- lock


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def lock(
    repo: Repo,
    lockf: Lockfile,
    hub: Hub,
    repo_id: str | None = None,
    revision: str | None = None,
    now: str | None = None,
) -> Outcome:
    """Pin a model: resolve ``revision`` to its commit, list its files, write lockfile, manifest and sums.

    ``repo_id`` defaults to the pinned model; ``revision`` to the branch it was
    resolved from, else ``main``. A full commit id is pinned as given (the Hub
    still confirms it exists). Re-locking an unchanged revision changes nothing.
    """
    from patchkit.outcome import Change, Outcome
    from patchkit.persist import finish

    old = lockf.model
    if repo_id is None:
        if old is None:
            raise BadInput("no model is pinned yet; name one", "patchkit model lock ORG/NAME [--revision REV]")
        repo_id = old.repo
    check_repo_id(repo_id)
    same_repo = old is not None and old.repo == repo_id
    if revision is None:
        revision = (old.ref if same_repo and old is not None and old.ref else None) or DEFAULT_REF
    if not revision or revision.startswith("-") or any(c in revision for c in " \t\n"):
        raise BadInput(f"--revision: {revision!r} is not a branch, tag or commit")
    commit_text = hub.resolve(repo_id, revision)
    try:
        commit = Revision(commit_text)
    except ValueError as e:
        raise ExternalFailure(f"{repo_id}@{revision}: the Hub resolved it to {commit_text!r}: {e}") from e
    ref = None if revision == commit.sha else revision
    files = manifest_from_listing(hub.list_files(repo_id, commit.sha), f"{repo_id}@{commit.short}")
    if not files:
        raise ExternalFailure(f"{repo_id}@{commit.short}: the Hub lists no files in this revision")

    extra: dict[str, bytes] = {}
    deletes: list[str] = []
    if len(files) > INLINE_MAX:
        data = manifest_bytes(repo_id, commit, files)
        extra[MANIFEST_FILE] = data
        new = Model(repo_id, commit, ref=ref, manifest=FilePin(RepoPath(MANIFEST_FILE), Sha256(sha256_bytes(data))))
    else:
        new = Model(repo_id, commit, files=files, ref=ref)
    if (
        old is not None
        and old.manifest is not None
        and (new.manifest is None or new.manifest.file != old.manifest.file)
    ):
        deletes.append(str(old.manifest.file))
    unchanged = old is not None and dataclasses.replace(old, resolved_at=None) == new
    new = dataclasses.replace(new, resolved_at=old.resolved_at if unchanged and old else (now or _now()))

    outcome = Outcome()
    if old is None or old.repo != new.repo:
        outcome.changes.append(Change("model.repo", old.repo if old else "(none)", new.repo))
    if old is None or old.revision != new.revision:
        outcome.changes.append(
            Change("model.revision", old.revision.sha if old else "(none)", f"{new.revision.sha} ({revision})")
        )
    if old is not None and old.ref != new.ref:
        outcome.changes.append(Change("model.ref", old.ref or "(none)", new.ref or "(none)"))
    if not unchanged:
        where = MANIFEST_FILE if new.manifest is not None else "lockfile.toml"
        outcome.changes.append(Change("model files", _count(old), f"{len(files)} files in {where}"))
    outcome.written = finish(repo, dataclasses.replace(lockf, model=new), extra, deletes)
    return outcome


def _count(old: Model | None) -> str:
    if old is None:
        return "(none)"
    return f"{len(old.files)} files inline" if old.manifest is None else f"manifest {old.manifest.file}"


# --------------------------------------------------------------------------- verify


class ProblemKind(Enum):
    """What is wrong with one path of the cache."""

    NOT_CACHED = "not-cached"
    REF_MOVED = "ref-moved"
    MISSING = "missing"
    EXTRA = "extra"
    SIZE = "size"
    CONTENT = "content"
    WRONG_BLOB = "wrong-blob"
    ESCAPES = "escapes"
    NOT_A_FILE = "not-a-file"
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class CacheProblem:
    """One problem found in the cache, with the path it is about (relative to the cache root)."""

    kind: ProblemKind
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind.value, "path": self.path, "message": self.message}


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of verifying a cache: the problems and what was checked."""

    cache: Path
    snapshot: Path
    problems: tuple[CacheProblem, ...]
    files: int
    bytes_hashed: int
    bytes_trusted: int

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def fix(self) -> str | None:
        """The command that repairs the cache: a fetch, after removing damaged entries if any.

        huggingface_hub skips files it already has, so damage must go before a fetch.
        """
        if self.ok:
            return None
        if all(p.kind is ProblemKind.NOT_CACHED for p in self.problems):
            return "patchkit model fetch"
        return "delete the snapshot entries (and their blobs) listed above, then patchkit model fetch"

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "fix": self.fix,
            "cache": str(self.cache),
            "snapshot": str(self.snapshot),
            "files": self.files,
            "bytes_hashed": self.bytes_hashed,
            "bytes_trusted": self.bytes_trusted,
            "problems": [p.as_dict() for p in self.problems],
        }


@dataclass(frozen=True)
class _Pending:
    rel: str  # path in the cache, for messages
    file: ModelFile
    algorithm: str
    expected: str
    real: str
    st: os.stat_result


def _expected(f: ModelFile) -> tuple[str, str]:
    """The algorithm and digest a manifest entry is verified by (and its cache blob is named by)."""
    if f.sha256 is not None:
        return SHA256, f.sha256.hex
    assert f.blob is not None  # the loader and the manifest parser require one of the two  # noqa: S101
    return GIT_SHA1, f.blob


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def verify_cache(
    cache: Path,
    model: Model,
    files: Iterable[ModelFile],
    *,
    jobs: int | None = None,
    start_progress: Callable[[int], Progress] | None = None,
    record: VerifyRecord | None = None,
) -> VerifyResult:
    """Verify the Hugging Face cache at ``cache`` against a model pin, offline; never writes the cache.

    ``start_progress`` is called once with the number of bytes to hash and
    returns the callback that receives each hashed slice. With ``record``,
    blobs whose stamp is unchanged since they last verified are not re-read.
    """
    root = os.path.realpath(cache)
    folder = repo_folder(model.repo)
    repo_dir = os.path.join(root, folder)
    snapshot = os.path.join(repo_dir, "snapshots", model.revision.sha)
    snap_rel = f"{folder}/snapshots/{model.revision.sha}"
    manifest = {f.path.path: f for f in files}
    problems: list[CacheProblem] = []

    def done(hashed: int = 0, trusted: int = 0) -> VerifyResult:
        ordered = tuple(sorted(problems, key=lambda p: (p.path, p.kind.value)))
        return VerifyResult(Path(root), Path(snapshot), ordered, len(manifest), hashed, trusted)

    if not os.path.isdir(repo_dir):
        problems.append(CacheProblem(ProblemKind.NOT_CACHED, folder, f"{model.repo} is not in the cache {root}"))
        return done()
    if model.ref:
        ref_path = os.path.join(repo_dir, "refs", model.ref)
        try:
            with open(ref_path, encoding="utf-8") as fh:
                named = fh.read().strip()
        except (FileNotFoundError, NotADirectoryError):
            named = None
        except (OSError, UnicodeDecodeError) as e:
            named = f"(unreadable: {e})"
        if named is not None and named != model.revision.sha:
            problems.append(
                CacheProblem(
                    ProblemKind.REF_MOVED,
                    f"{folder}/refs/{model.ref}",
                    f"names {named[:40]}, not the pinned {model.revision.sha}: loading {model.repo} by "
                    f"'{model.ref}' offline would get another snapshot",
                )
            )
    snap_st = _lstat(snapshot)
    if snap_st is None or not stat.S_ISDIR(snap_st.st_mode):
        what = "does not exist" if snap_st is None else "is not a directory"
        problems.append(CacheProblem(ProblemKind.MISSING, snap_rel, f"snapshot of the pinned revision {what}"))
        return done()

    present = _walk_snapshot(snapshot, snap_rel, problems)
    pending: list[_Pending] = []
    for path in sorted(set(present) - set(manifest)):
        problems.append(CacheProblem(ProblemKind.EXTRA, f"{snap_rel}/{path}", "is not in the pinned manifest"))
    for path, f in sorted(manifest.items()):
        rel = f"{snap_rel}/{path}"
        if path not in present:
            problems.append(CacheProblem(ProblemKind.MISSING, rel, "is in the manifest but not in the snapshot"))
            continue
        algorithm, expected = _expected(f)
        item = _locate_blob(present[path], rel, root, repo_dir, expected, problems)
        if item is None:
            continue
        real, st = item
        if st.st_size != f.size:
            problems.append(CacheProblem(ProblemKind.SIZE, rel, f"has {st.st_size} bytes, the manifest says {f.size}"))
            continue
        pending.append(_Pending(rel, f, algorithm, expected, real, st))

    trusted = 0
    to_hash: dict[Path, str] = {}
    sizes: dict[Path, int] = {}
    digests: dict[str, str | OSError] = {}
    for p in pending:
        known = record.known(p.real, p.st, p.algorithm) if record is not None else None
        if known is not None:
            digests[p.real] = known
            trusted += p.st.st_size
        elif Path(p.real) not in to_hash:
            to_hash[Path(p.real)] = p.algorithm
            sizes[Path(p.real)] = p.st.st_size
    total = sum(sizes.values())
    progress = start_progress(total) if start_progress is not None else None
    for hashed, digest in digest_many(to_hash, jobs=jobs, progress=progress, sizes=sizes).items():
        digests[str(hashed)] = digest
    for p in pending:
        got = digests.get(p.real, OSError("not hashed"))
        if isinstance(got, OSError):
            problems.append(CacheProblem(ProblemKind.UNREADABLE, p.rel, f"cannot read: {got.strerror}"))
        elif got != p.expected:
            kind = "sha256" if p.algorithm == SHA256 else "git blob id"
            problems.append(
                CacheProblem(
                    ProblemKind.CONTENT,
                    p.rel,
                    f"content does not match: {kind} is {str(got)[:12]}…, the manifest pins {p.expected[:12]}…",
                )
            )
            if record is not None:
                record.forget(p.real)
        elif record is not None:
            record.remember(p.real, p.st, p.algorithm, got)
    return done(total, trusted)


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _walk_snapshot(snapshot: str, snap_rel: str, problems: list[CacheProblem]) -> dict[str, str]:
    """Every file or file symlink under the snapshot, by its path in the repository.

    A symlink to a directory is reported and not followed: a snapshot holds
    links to blobs, never to directories.
    """
    present: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(snapshot):
        rel_dir = os.path.relpath(dirpath, snapshot)
        keep = []
        for d in dirnames:
            full = os.path.join(dirpath, d)
            rel = d if rel_dir == "." else f"{rel_dir}/{d}"
            if os.path.islink(full):
                problems.append(
                    CacheProblem(
                        ProblemKind.NOT_A_FILE,
                        f"{snap_rel}/{rel}",
                        f"is a symlink to a directory ({os.readlink(full)}); a snapshot links files only",
                    )
                )
            else:
                keep.append(d)
        dirnames[:] = keep
        for name in filenames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            present[rel] = os.path.join(dirpath, name)
    return present


def _locate_blob(
    link: str, rel: str, root: str, repo_dir: str, expected: str, problems: list[CacheProblem]
) -> tuple[str, os.stat_result] | None:
    """The real file behind a snapshot entry, if it is the right blob, inside the cache; else a problem.

    A snapshot entry is a relative symlink to ``../../blobs/<hash>`` named by
    the content's hash. That blob may itself link on (huggingface_hub's
    shared Xet store under ``<cache>/blobs/``): the final file must be a
    regular file inside the cache.
    """
    st = os.lstat(link)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(link)
        real = os.path.realpath(link)
        if not _inside(real, root):
            problems.append(
                CacheProblem(ProblemKind.ESCAPES, rel, f"links to {target}, which resolves outside the cache ({real})")
            )
            return None
        named = os.path.normpath(os.path.join(os.path.dirname(link), target))
        want = os.path.join(repo_dir, "blobs", expected)
        if named != want:
            problems.append(
                CacheProblem(
                    ProblemKind.WRONG_BLOB,
                    rel,
                    f"links to {target}, not to the blob of its pinned content (../../blobs/{expected})",
                )
            )
            return None
    else:
        real = link  # a cache without symlinks (huggingface_hub's fallback) stores the file itself
    real_st = _lstat(real)
    if real_st is None:
        problems.append(CacheProblem(ProblemKind.MISSING, rel, f"links to a blob that does not exist ({real})"))
        return None
    if not stat.S_ISREG(real_st.st_mode):
        problems.append(CacheProblem(ProblemKind.NOT_A_FILE, rel, f"resolves to {real}, which is not a regular file"))
        return None
    return real, real_st


# --------------------------------------------------------------------------- check


def format_findings(repo: Repo, lockf: Lockfile, locate: Locate) -> list[Finding]:
    """Offline findings about the model pin's manifest (for ``patchkit check``).

    The manifest file exists inside the repository, matches its sha256,
    parses, and describes the pinned repo and revision; no path is listed
    twice and no entry carries both kinds of hash.
    """
    from patchkit.findings import Finding

    model = lockf.model
    if model is None:
        return []
    out: list[Finding] = []
    if not has_manifest(model):
        return [
            Finding(
                "model-no-manifest",
                LOCKFILE_NAME,
                locate(("model",)),
                f"{model.repo}@{model.revision.short} is pinned by revision only; without a file manifest "
                "`patchkit model verify` cannot prove the cache holds the model's files",
                NO_MANIFEST_FIX,
                field="model",
                severity="note",
            )
        ]
    if model.manifest is not None:
        try:
            pinned_files(repo, model)
        except BadInput as e:
            out.append(
                Finding(
                    "model-manifest",
                    str(model.manifest.file),
                    None,
                    e.message,
                    e.hint,
                    field="model.manifest",
                )
            )
        return out
    seen: set[str] = set()
    for i, f in enumerate(model.files):
        if f.path.path in seen:
            out.append(
                Finding(
                    "model-manifest",
                    LOCKFILE_NAME,
                    locate(("model", "files", i, "path")),
                    f"model.files: {f.path} is listed twice",
                    "regenerate the manifest: patchkit model lock",
                    field=f"model.files[{i}].path",
                )
            )
        seen.add(f.path.path)
        if f.sha256 is not None and f.blob is not None:
            out.append(
                Finding(
                    "model-manifest",
                    LOCKFILE_NAME,
                    locate(("model", "files", i)),
                    f"model.files: {f.path} has both sha256 and blob; a file is pinned by one "
                    "(sha256 for LFS files, blob for small files)",
                    "regenerate the manifest: patchkit model lock",
                    field=f"model.files[{i}]",
                )
            )
    return out


def revision_findings(lockf: Lockfile, locate: Locate, hub: Hub) -> list[Finding]:
    """With ``check --online``: the pinned revision still exists on the Hub."""
    from patchkit.findings import Finding

    model = lockf.model
    if model is None or hub.revision_exists(model.repo, model.revision.sha):
        return []
    return [
        Finding(
            "model-revision-gone",
            LOCKFILE_NAME,
            locate(("model", "revision")),
            f"model: {model.repo}@{model.revision.short} no longer exists on the Hub (deleted or history rewritten)",
            f"pin a revision that exists: patchkit model lock {model.repo} --revision <branch>",
            field="model.revision",
        )
    ]
