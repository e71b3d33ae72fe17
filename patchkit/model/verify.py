"""``patchkit model verify``: a local Hugging Face cache against the model pin, offline.

``verify_cache`` checks the snapshot of the pinned commit, every manifest file
present with the right size and content, each snapshot symlink naming the blob
of that content and never leaving the cache, nothing extra, and ``refs/<ref>``
(when present) naming the pin.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.core.hashing import GIT_SHA1, SHA256, Progress, digest_many
from patchkit.lockfile.model import Model, ModelFile
from patchkit.net.hub import repo_folder

if TYPE_CHECKING:
    from patchkit.model.record import VerifyRecord


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

    def as_dict(self) -> dict[str, object]:
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
    moved = _ref_moved(repo_dir, folder, model)
    if moved is not None:
        problems.append(moved)
    snap_st = _lstat(snapshot)
    if snap_st is None or not stat.S_ISDIR(snap_st.st_mode):
        what = "does not exist" if snap_st is None else "is not a directory"
        problems.append(CacheProblem(ProblemKind.MISSING, snap_rel, f"snapshot of the pinned revision {what}"))
        return done()
    present = _walk_snapshot(snapshot, snap_rel, problems)
    pending = _to_verify(present, manifest, snap_rel, root, repo_dir, problems)
    to_hash, sizes, digests, trusted = _known(pending, record)
    total = sum(sizes.values())
    progress = start_progress(total) if start_progress is not None else None
    for hashed, digest in digest_many(to_hash, jobs=jobs, progress=progress, sizes=sizes).items():
        digests[str(hashed)] = digest
    problems += _content_problems(pending, digests, record)
    return done(total, trusted)


def _ref_moved(repo_dir: str, folder: str, model: Model) -> CacheProblem | None:
    """``refs/<ref>`` naming another commit than the pin (an absent ref is fine: nothing loads by it)."""
    if not model.ref:
        return None
    try:
        with open(os.path.join(repo_dir, "refs", model.ref), encoding="utf-8") as fh:
            named = fh.read().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as e:
        named = f"(unreadable: {e})"
    if named == model.revision.sha:
        return None
    return CacheProblem(
        ProblemKind.REF_MOVED,
        f"{folder}/refs/{model.ref}",
        f"names {named[:40]}, not the pinned {model.revision.sha}: loading {model.repo} by "
        f"'{model.ref}' offline would get another snapshot",
    )


def _to_verify(
    present: dict[str, str],
    manifest: dict[str, ModelFile],
    snap_rel: str,
    root: str,
    repo_dir: str,
    problems: list[CacheProblem],
) -> list[_Pending]:
    """The manifest files whose blob is in place with the right size, to hash; the rest are problems.

    Reported: snapshot files the manifest does not list, manifest files the
    snapshot lacks, links to the wrong blob or out of the cache, wrong sizes.
    """
    problems += [
        CacheProblem(ProblemKind.EXTRA, f"{snap_rel}/{path}", "is not in the pinned manifest")
        for path in sorted(set(present) - set(manifest))
    ]
    pending: list[_Pending] = []
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
    return pending


def _known(
    pending: list[_Pending], record: VerifyRecord | None
) -> tuple[dict[Path, str], dict[Path, int], dict[str, str | OSError], int]:
    """Split the blobs into those to hash (each once) and those the record vouches for, unchanged since.

    Returns the blobs to hash with their algorithm and size, the digests known
    already, and the bytes so trusted without reading.
    """
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
    return to_hash, sizes, digests, trusted


def _content_problems(
    pending: list[_Pending], digests: dict[str, str | OSError], record: VerifyRecord | None
) -> list[CacheProblem]:
    """Each file whose blob could not be read or does not hash to the pin; the record learns the outcome."""
    problems: list[CacheProblem] = []
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
    return problems


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
