"""``patchkit import``: turn a hand-kept deployment repository into a patchkit deployment.

The importer reads what such repositories hold (compose files and their
profiles, the Dockerfiles that copy overlays into the image, the
repository's own lock files, ``patches/`` with overlays, modules and
transformers, hand-kept diffs, ``SHA256SUMS``, provenance tables in
Markdown) and builds the lockfile
that describes them as they are: it pins files in place and moves nothing.
What no source states (a base commit nobody wrote down) is left unknown and
reported; nothing is invented. Every defect it sees is reported with its file
and line, and ``patchkit check`` reports the same ones from then on.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from patchkit.core import diffs, sums
from patchkit.core.hashing import sha256_bytes
from patchkit.core.values import (
    LOCKFILE_NAME,
    ContainerPath,
    Digest,
    Reference,
    RepoPath,
    Revision,
    Sha256,
    UpstreamPath,
)
from patchkit.errors import BadInput
from patchkit.importing import compose, dockerfile, handdiffs, patchers, pins, provenance, queue, read_inside, shell
from patchkit.lockfile.model import (
    GENERATED,
    Artifact,
    GitUpstream,
    HandDiff,
    Image,
    Lockfile,
    Model,
    Origin,
    Patch,
    PatchKind,
    Upstream,
)
from patchkit.lockfile.writer import dumps
from patchkit.oci.ref import same_repository
from patchkit.store.repo import gitignored

_PYTHON_TREE = re.compile(r"/(?:site|dist)-packages/")
_DIFF_SUFFIXES = (".patch", ".diff")
_DIFF_NAME = re.compile(r"(?:\d+[-_.])?(?P<name>.+?)\.(?:patch|diff)")


@dataclass(frozen=True)
class Issue:
    """Something wrong or unknown in the hand-kept repository, where it is, and what to do."""

    kind: str
    file: str
    line: int | None
    message: str
    fix: str | None = None

    @property
    def severity(self) -> str:
        """``note`` for what is worth knowing but not wrong (as ``check`` reports it), else ``error``."""
        return "note" if self.kind in NOTES else "error"

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "message": self.message,
            "fix": self.fix,
        }


# Kinds that are not defects: a gitignored mount meant to be absent, a SHA256SUMS line coreutils accepts,
# a module that may be an upstream file (only upstream can tell).
NOTES = frozenset(
    {"mount-ignored", "mount-generated", "sums-format", "module-maybe-upstream", "queue-profile-arg"}
    | {"pin-no-repository", "ref-unassigned", "kind-unknown"}  # a statement nothing lets import complete or place
    | {"build-step-unknown", "patcher-target-unknown", "queue-apply-unknown"}  # a build step not read statically
)


@dataclass
class ImportResult:
    """What ``import`` found and the lockfile it writes (or would write)."""

    lock: Lockfile
    text: bytes
    issues: list[Issue] = field(default_factory=list)
    written: bool = False
    unchanged: bool = False
    ignored: bool = False  # .patchkit/ was added to .gitignore (or would be, in a dry run)
    where: str = "."  # the repository as the user named it, for the next commands

    @property
    def summary(self) -> dict[str, int]:
        kinds = {k.value: sum(1 for p in self.lock.patches if p.kind is k) for k in PatchKind}
        found = {
            "images": len(self.lock.images),
            "model": 0 if self.lock.model is None else 1,
            "upstreams": len(self.lock.upstreams),
            "overlays": kinds["overlay"],
            "modules": kinds["module"],
            "transformers": kinds["transformer"],
            "tuning": len(self.lock.tuning),
            "artifacts": len(self.lock.artifacts),
            "diffs": len(self.lock.diffs),
            "references": len({r for p in self.lock.patches for r in p.refs}),
        }
        if self.lock.series:
            found["series"] = len(self.lock.series)
            found["series_patches"] = sum(len(s.patches) for s in self.lock.series)
        return found

    @property
    def next_commands(self) -> list[str]:
        """The commands to run next, in order, exactly as typed from where import was run."""
        here = self.where in (".", "")
        pk = "patchkit" if here else f"patchkit -C {shlex.quote(self.where)}"
        path = "" if here else f" {shlex.quote(self.where)}"
        out = []
        if not self.written and not self.unchanged:
            out.append(f"patchkit import{path}    # write lockfile.toml (this was a dry run)")
        out.append(f"{pk} check    # every defect above, with file and line, until it is fixed")
        if self.lock.diffs:
            out.append(
                f"patchkit import --normalize{path}    # one canonical diff per patch under upstream/, where possible"
            )
        for i in self.issues:
            if i.kind == "image-unpinned" and i.fix is not None and i.fix.startswith("patchkit "):
                out.append(i.fix.replace("patchkit ", f"{pk} ", 1) + "    # pin it by digest")
        if any(i.kind == "model-unpinned" for i in self.issues):
            out.append("edit lockfile.toml: [model] repo and revision (a full commit)")
        out.append(f"{pk} sums    # regenerate SHA256SUMS from the lockfile")
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "written": self.written,
            "unchanged": self.unchanged,
            "gitignore": self.ignored,
            "found": self.summary,
            "issues": [i.as_dict() for i in self.issues],
            "next": self.next_commands,
        }


@dataclass
class _Entry:
    """A repository file mounted into the container, before it becomes a lockfile entry."""

    rel: str
    target: str
    mount: compose.Mount
    data: bytes
    kind: str  # overlay, module, transformer, tuning, artifact
    name: str = ""
    refs: list[Reference] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)
    stated_in: list[str] = field(default_factory=list)
    new_module: str | None = None  # the provenance row calling the file a new module, if one does
    named_in_table: bool = False  # a provenance row names the file
    dev_null: tuple[str, int] | None = None  # the diff part (file, line) that made it a module by adding it whole
    build: str | None = None  # the Dockerfile whose image build copies it in (None: a compose mount)
    reason: str | None = None  # a transformer's: what it edits

    @property
    def upstream_statement(self) -> str | None:
        """Where a source says this file exists upstream (a stated path or commit), if one does."""
        if self.new_module is not None:
            return None
        return self.origin.get("path_source") or self.origin.get("commit_source")


@dataclass
class _Section:
    diff: str
    fd: diffs.FileDiff
    entry: _Entry | None
    upstream_path: str | None
    against: str


class _Importer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.issues: list[Issue] = []
        self._index: handdiffs.Index | None = None
        self._by_rel: dict[str, _Entry] = {}
        self._lock_files: list[str] = []  # the repository's own lock files that state pins
        self.builds: list[str] = []  # the build scripts and Containerfiles read for patch queues
        self.reading = shell.Reading()
        self.applied: set[str] = set()  # patch files the build applies: series, not hand-kept diffs
        self.unsure: set[str] = set()  # patch files an unreadable build step may apply: pinned as artifacts
        self._given: dict[str, dict[str, tuple[str, int]]] = {}  # by Dockerfile: where compose states its build args

    def issue(self, kind: str, file: str, line: int | None, message: str, fix: str | None = None) -> None:
        self.issues.append(Issue(kind, file, line, message, fix))

    # -- reading

    def read(self, rel: str, what: str) -> bytes:
        return read_inside(self.root, rel, what)

    def compressed_queue(self) -> None:
        """A patch queue kept compressed (``patches/0.5.0/01-x.patch.gz``, applied by ``git apply <(gunzip -c …)``)
        is refused as what it is, not as a repository with nothing in it."""
        folder = self.root / "patches"
        packed = sorted(
            p.relative_to(self.root).as_posix()
            for p in (folder.rglob("*") if folder.is_dir() and not folder.is_symlink() else [])
            if p.is_file() and p.name.endswith((".patch.gz", ".diff.gz", ".patch.xz", ".diff.xz", ".patch.bz2"))
        )
        if packed:
            raise BadInput(
                f"{self.root}: patches/ holds compressed patches ({', '.join(packed[:3])}"
                f"{', …' if len(packed) > 3 else ''}), which patchkit does not read",
                "keep the patches uncompressed (gunzip them; git stores them compressed anyway) and import again",
            )

    def read_text(self, rel: str, what: str) -> str:
        return _utf8(rel, read_inside(self.root, rel, what))

    def build(self) -> Lockfile:
        names = sorted(os.listdir(self.root))
        files = compose.find(names) + self.nested_composes()
        composes = [compose.read(f, self.read_text(f, "compose file")) for f in files]
        builds = self.image_builds(composes)
        delivers = any(_PYTHON_TREE.search(c.target) for b in builds for c in b.copied)
        if not files and not delivers and queue.has_queue(self.root):
            return self.read_builds(self.patch_queue(), builds)
        if not files and not builds:
            self.compressed_queue()
            raise BadInput(
                f"{self.root}: no compose file (compose.yaml, compose.*.yaml, docker-compose.yml) "
                "and no Dockerfile or Containerfile (at the top, or in "
                + ", ".join(f"{place}/" for place in dockerfile.PLACES)
                + ")",
                "run patchkit import in the repository that holds the deployment's compose or build files",
            )
        self.builds, self.reading = queue.read_build(self.root)
        self.applied = queue.applied_files(self.reading)
        entries = self.entries(composes) + self.built_entries(builds, composes)
        # Provenance first: whether a file exists upstream is the table's to say, not a diff's /dev/null.
        self.provenance(entries)
        hand = self.hand_diffs(entries)
        stated = self.stated_pins(builds, entries)
        self.kind_unknown(entries)
        self.prose_refs(entries)
        upstreams = self.upstreams(entries, stated)
        self.name_entries(entries, hand)
        self.check_modules(entries, upstreams)
        self.check_runs(entries, composes)
        self.check_sums(entries)
        built = self.patchers(entries)
        patches = []
        for e in entries:
            if e.kind not in ("overlay", "module", "transformer"):
                continue
            origin = None
            if e.kind == "overlay":
                origin = Origin(
                    repository=e.origin.get("repository"),
                    commit=e.origin.get("commit"),
                    path=UpstreamPath(e.origin["path"]) if "path" in e.origin else None,
                    stated_in=tuple(dict.fromkeys(e.stated_in)),
                )
            patches.append(
                Patch(
                    name=e.name,
                    kind=PatchKind(e.kind),
                    sha256=Sha256(sha256_bytes(e.data)),
                    target=ContainerPath(e.target),
                    file=RepoPath(e.rel),
                    refs=tuple(e.refs),
                    origin=origin,
                    build=RepoPath(e.build) if e.build else None,
                    reason=e.reason,
                )
            )
        patches += built
        tuning = tuple(self.artifact(e) for e in entries if e.kind == "tuning")
        artifacts = [self.artifact(e) for e in entries if e.kind == "artifact"]
        artifacts += self.unmounted(
            {e.rel for e in entries}
            | {str(d.file) for d in hand}
            | {str(p.file) for p in built}
            | (self.applied | set(self.builds) if self.applied else set())
        )
        for f in files:
            stem = f.rsplit(".", 1)[0].replace("docker-", "")
            artifacts.append(
                Artifact(slug(stem), RepoPath(f), Sha256(sha256_bytes(self.read(f, "compose file"))), note="compose")
            )
        for f, note in [(b.file, "image build") for b in builds] + [(f, "lock") for f in self._lock_files]:
            artifacts.append(Artifact(slug(f), RepoPath(f), Sha256(sha256_bytes(self.read(f, note))), note=note))
        # Names are unique across patches, tuning tables and artifacts.
        used = {p.name for p in patches} | {t.name for t in tuning}
        for k, a in enumerate(artifacts):
            name, n = a.name, 2
            while name in used:
                name, n = f"{a.name}-{n}", n + 1
            used.add(name)
            artifacts[k] = dataclasses.replace(a, name=name)
        lock = Lockfile(
            name=slug(self.root.name),
            images=self.base_images(builds, self.images(composes)),
            model=self.model(composes),
            upstreams=upstreams,
            patches=tuple(patches),
            tuning=tuning,
            artifacts=tuple(artifacts),
            diffs=tuple(hand),
        )
        return self.with_queue(lock, stated)

    def with_queue(self, lock: Lockfile, stated: dict[str, pins.Stated]) -> Lockfile:
        """Patch files the build applies (compose, then Containerfile, then script) are series, not hand-kept diffs."""
        for issue in queue.edit_issues(self.reading):  # sed -i on an installed file: a patch nothing pins
            self.issue(*issue)
        if not self.applied:
            for u in self.reading.unknowns:  # a step that may apply patches: its files may be no hand-kept diffs
                self.issue(
                    "build-step-unknown",
                    u.file,
                    u.line,
                    f"a build step that may apply patches cannot be read statically: {u.reason}",
                    "write it in a form import reads (docs/import.md)",
                )
            return lock
        found = queue.recognise(self.root, only=self.applied)
        settled = self.settle_series(found, stated)
        for kind, file, line, message, fix in found.issues:
            if (kind, file) not in settled:
                self.issue(kind, file, line, message, fix)
        q = queue.to_lockfile(self.root, found)
        pinned = {str(a.file) for a in (*lock.artifacts, *lock.tuning)} | {str(p.file) for p in lock.patches}
        used = {p.name for p in lock.patches} | {t.name for t in lock.tuning} | {a.name for a in lock.artifacts}
        extra = []
        for a in q.artifacts:
            if str(a.file) in pinned:
                continue
            name, n = a.name, 2
            while name in used:
                name, n = f"{a.name}-{n}", n + 1
            used.add(name)
            extra.append(dataclasses.replace(a, name=name))
        digests = {i.digest for i in lock.images}
        images = [i for i in q.images if i.digest not in digests and i.name not in {x.name for x in lock.images}]
        declared = {u.name for u in lock.upstreams}
        return dataclasses.replace(
            lock,
            images=lock.images + tuple(images),
            upstreams=lock.upstreams + tuple(u for u in q.upstreams if u.name not in declared),
            artifacts=lock.artifacts + tuple(extra),
            series=q.series,
        )

    def settle_series(self, found: queue.Found, stated: dict[str, pins.Stated]) -> set[tuple[str, str]]:
        """A series whose commit no queue file states takes the one the build's pins state (an ``ARG`` compose's
        ``build.args`` sets, a lock file); returns the queue's issues that settles, as (kind, file)."""
        settled = set()
        for k, s in enumerate(found.series):
            pin = stated.get(s.name)
            if pin is not None and pin.git is not None:  # upstream.lock's VLLM_REPO: import declares it from there
                settled.add(("queue-url-unknown", f"patches/{s.name}"))
            if s.commit is not None or pin is None or pin.commit is None or len(pin.commit) != 40:
                continue
            found.series[k] = dataclasses.replace(s, commit=Revision(pin.commit))
            settled.add(("queue-commit-unknown", f"patches/{s.name}"))
            where = pin.where["commit"]
            for j, u in enumerate(found.upstreams):
                if u.name == s.name and u.commit is None:
                    found.upstreams[j] = dataclasses.replace(
                        u, commit=Revision(pin.commit), note=f"imported: commit from {where}"
                    )
            if any(u.name == s.name and u.git for u in found.upstreams):  # the build's clone names the repository
                self.issues = [i for i in self.issues if (i.kind, f"{i.file}:{i.line}") != ("pin-no-repository", where)]
        return settled

    def patch_queue(self) -> Lockfile:
        """A repository that applies patch series at build time, and has no compose file (importing/queue.py)."""
        found = queue.recognise(self.root)
        for kind, file, line, message, fix in found.issues:
            self.issue(kind, file, line, message, fix)
        return queue.to_lockfile(self.root, found)

    def patchers(self, entries: list[_Entry]) -> list[Patch]:
        """Patcher scripts: mounted transformers get what they edit; those a Containerfile runs become transformers."""
        for e in entries:
            if e.kind == "transformer" and (p := patchers.read(e.data)) is not None:
                e.reason = patchers.reason(p, None)
                for issue in patchers.issues(p, e.rel):
                    self.issue(*issue)
        mounted = {e.rel for e in entries}
        used = {e.name for e in entries}
        out = []
        for run in patchers.run_by_build(self.root, self.reading):
            if run.rel in mounted or run.target is None or not run.target.startswith("/"):
                continue
            for issue in patchers.issues(run.patcher, run.rel):
                self.issue(*issue)
            name = queue.unique(slug(PurePosixPath(run.rel).stem), used)
            used.add(name)
            out.append(
                Patch(
                    name=name,
                    kind=PatchKind.TRANSFORMER,
                    sha256=Sha256(sha256_bytes(run.data)),
                    target=ContainerPath(run.target),
                    file=RepoPath(run.rel),
                    reason=patchers.reason(run.patcher, f"{run.file}:{run.line}"),
                )
            )
        return out

    def unmounted(self, known: set[str]) -> list[Artifact]:
        """Notes in patches/ and tuning/ (a provenance README) are pinned; other unmounted files reported."""
        out = []
        for rel in _files(self.root, ("patches", "tuning")):
            if rel in known:
                continue
            if rel.endswith((".md", ".txt", ".rst")) or rel in self.unsure:
                data = self.read(rel, "a note pinned as an artifact")
                out.append(Artifact(slug(rel.replace("/", "-")), RepoPath(rel), Sha256(sha256_bytes(data))))
            else:
                self.issue(
                    "not-mounted",
                    rel,
                    None,
                    "no compose file mounts it and no image build copies it, so the deployment does not run it",
                    "mount it, or delete it (patchkit check reports it as an orphan)",
                )
        return out

    def artifact(self, e: _Entry) -> Artifact:
        return Artifact(e.name, RepoPath(e.rel), Sha256(sha256_bytes(e.data)), ContainerPath(e.target))

    # -- mounts

    def entries(self, composes: list[compose.ComposeFile]) -> list[_Entry]:
        by_source: dict[str, _Entry] = {}
        by_target: dict[str, _Entry] = {}
        for cf in composes:
            for m in cf.mounts:
                for rel, target in self.mounted_files(m):
                    if rel in GENERATED:
                        self.generated_mount(m, rel, target)
                        continue
                    known = by_source.get(rel)
                    if known is not None:
                        if known.target != target and not compose.also_placed(cf.mounts, m, rel, known.target):
                            self.issue(
                                "mount-conflict",
                                m.compose,
                                m.line,
                                f"{rel} is mounted at {target} here but at {known.target} in {known.mount.where}",
                                "mount each file at one path in every profile",
                            )
                        _add_refs(known, m.comment, None)
                        continue
                    other = by_target.get(target)
                    if other is not None:
                        self.issue(
                            "mount-conflict",
                            m.compose,
                            m.line,
                            f"{target} gets {rel} here but {other.rel} in {other.mount.where}; "
                            "only the first is pinned",
                            "give each profile the same file, or separate targets",
                        )
                        continue
                    data = self.read(rel, f"mounted by {m.where}")
                    entry = _Entry(rel, target, m, data, _kind(rel, target))
                    _add_refs(entry, m.comment, None)
                    by_source[rel] = by_target[target] = entry
        return list(by_source.values())

    def generated_mount(self, m: compose.Mount, rel: str, target: str) -> None:
        """A mount of a file patchkit writes from the lockfile (``SHA256SUMS``): fine, and never pinned.

        The container may read it (a startup check runs ``sha256sum -c``);
        ``patchkit sums`` keeps it true, so the lockfile cannot pin it, and
        pinning it would make every later command refuse the lockfile.
        """
        self.issue(
            "mount-generated",
            m.compose,
            m.line,
            f"{rel} is mounted at {target}; patchkit generates it from the lockfile (patchkit sums), "
            "so it is not pinned",
        )

    def mounted_files(self, m: compose.Mount) -> list[tuple[str, str]]:
        """The repository files a bind mount brings into the container, with their container paths."""
        rel = m.repo_source
        if rel is None:
            return []
        if m.outside:
            self.issue("mount-outside", m.compose, m.line, f"mount source {m.source} is outside the repository")
            return []
        path = self.root / rel
        link = _link_on_the_way(self.root, rel)
        if link is not None and link != rel:
            self.mount_through_link(m, link)
            return []
        if not path.is_symlink() and not path.exists() and (rule := gitignored(self.root, [rel]).get(rel)):
            self.issue(
                "mount-ignored",
                m.compose,
                m.line,
                f"mount source {m.source} does not exist and {rule} ignores it: it is meant to be absent "
                "from the repository (created at run time, or provided on the host), so nothing pins it",
            )
            return []
        if path.is_symlink() or not path.exists():
            what = "is a symlink" if path.is_symlink() else "does not exist"
            self.issue(
                "mount-missing",
                m.compose,
                m.line,
                f"mount source {m.source} {what}; the container would get an empty directory or fail to start",
                "restore the file (git log -- PATH) or remove the mount",
            )
            return []
        if path.is_file():
            return [(rel, m.target)]
        return self.directory_files(m, path)

    def directory_files(self, m: compose.Mount, path: Path) -> list[tuple[str, str]]:
        """The files below a mounted directory, in walk order; symlinks in it are reported, not followed."""
        out = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames.sort()
            for name in [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
                self.mount_through_link(m, (Path(dirpath) / name).relative_to(self.root).as_posix())
            for fname in sorted(filenames):
                full = Path(dirpath) / fname
                if full.is_symlink():
                    self.mount_through_link(m, full.relative_to(self.root).as_posix())
                    continue
                sub = full.relative_to(path).as_posix()
                out.append((full.relative_to(self.root).as_posix(), f"{m.target}/{sub}"))
        return out

    def mount_through_link(self, m: compose.Mount, link: str) -> None:
        """A mount that reaches files through a symlink: reported, and nothing behind the link is pinned."""
        target = os.readlink(self.root / link)
        where = "outside" if not (self.root / link).resolve().is_relative_to(self.root) else "inside"
        self.issue(
            "mount-symlink",
            m.compose,
            m.line,
            f"mount source {m.source} goes through the symlink {link} (to {target}, {where} the repository); "
            "nothing is pinned through a link",
            "commit the files themselves in place of the link, or remove the mount",
        )

    # -- diffs

    def hand_diffs(self, entries: list[_Entry]) -> list[HandDiff]:
        overlays = [e for e in entries if e.kind in ("overlay", "module", "transformer")]
        out: list[HandDiff] = []
        sections_of: dict[str, list[_Section]] = {}
        for rel in self.diff_files():
            data = self.read(rel, "a diff")
            sections = [self.section(rel, fd, overlays) for fd in self.parse_diff(rel, data)]
            covered = [s.entry for s in sections if s.entry is not None]
            if not covered and self.maybe_applied(rel):
                continue
            for s in sections:
                if s.entry is None:
                    self.issue(
                        "diff-unmatched",
                        rel,
                        s.fd.line,
                        f"the file diff for {s.fd.new_path or s.fd.old_path} matches no mounted file",
                        "mount the file it describes, or delete this part of the diff",
                    )
                else:
                    sections_of.setdefault(s.entry.rel, []).append(s)
            preamble = data.split(b"\n--- ", 1)[0].decode("utf-8", "replace")
            for e in covered:
                if _add_refs(e, preamble, e.origin.get("repository")):
                    e.stated_in.append(f"{rel}:1")
            names = list(dict.fromkeys(e.rel for e in covered))
            against = {s.against for s in sections}
            out.append(
                HandDiff(
                    file=RepoPath(rel),
                    sha256=Sha256(sha256_bytes(data)),
                    patches=tuple(names),  # renamed to entry names once those are chosen
                    against="new" if against == {"new"} else "overlay" if "overlay" in against else "upstream",
                )
            )
        incremental = self.verify_sections(sections_of)
        out = [
            HandDiff(d.file, d.sha256, d.patches, "overlay" if str(d.file) in incremental else d.against) for d in out
        ]
        for e in overlays:
            if e.kind == "overlay" and e.rel not in sections_of:
                self.issue(
                    "no-diff",
                    e.rel,
                    None,
                    f"overlay of {e.target} has no diff to upstream: reviewers cannot see what it changes",
                    "state its upstream and full base commit in the provenance table, then "
                    "patchkit import --normalize --fetch",
                )
        return out

    def parse_diff(self, rel: str, data: bytes) -> list[diffs.FileDiff]:
        """The file parts of a hand-kept diff; each hunk whose counts were edited by hand is reported."""
        try:
            fds, repairs = diffs.parse_lenient(data)
        except diffs.DiffError as err:
            raise BadInput(
                f"{rel}: not a diff at all ({err.message})",
                "remove it from patches/ or replace it with a unified diff (diff -u / git diff)",
            ) from err
        for r in repairs:
            self.issue(
                "diff-hunk-count",
                rel,
                r.line,
                f"hand-edited hunk: {r.message}",
                "patchkit import --normalize regenerates the diff",
            )
        return fds

    def maybe_applied(self, rel: str) -> bool:
        """A patch file no mounted file matches, that a build step import cannot read may apply: noted, pinned.

        Calling it an unmatched hand-kept diff would be false when the step
        applies it to the image; whether it does is unknown, and said so.
        """
        if not self.reading.unknowns:
            return False
        u = self.reading.unknowns[0]
        self.unsure.add(rel)
        self.issue(
            "queue-apply-unknown",
            u.file,
            u.line,
            f"{rel} matches no mounted file, and whether this build step applies it is unknown: {u.reason}",
            "write the step in a form import reads (docs/import.md)",
        )
        return True

    def diff_files(self) -> list[str]:
        """Hand-kept diffs: every diff under patches/ and diffs/ except the patch files the build applies."""
        return [
            rel
            for rel in _files(self.root, ("patches", "diffs"))
            if rel.endswith(_DIFF_SUFFIXES) and rel not in self.applied
        ]

    def section(self, rel: str, fd: diffs.FileDiff, overlays: list[_Entry]) -> _Section:
        m = handdiffs.match(fd, self.index(overlays))
        entry = self._by_rel[m.candidate.key] if m.candidate is not None else None
        if entry is not None and m.against == "new" and entry.kind == "overlay":
            if (where := entry.upstream_statement) is not None:
                self.issue(
                    "diff-new-file",
                    rel,
                    fd.line,
                    f"adds {entry.rel} as a new file (--- /dev/null), but {where} states it is "
                    f"{entry.origin.get('path', 'a file')} upstream: the diff hides what the overlay changes",
                    "patchkit import --normalize --fetch rebuilds the diff against upstream at the stated commit",
                )
            else:
                entry.kind = "module"  # the diff adds the whole file, and no source says upstream has it
                entry.dev_null = (rel, fd.line)
        if entry is not None and m.against == "new" and (why := handdiffs.whole_file_stale(entry.data, fd)):
            self.issue(
                "diff-stale",
                rel,
                fd.line,
                f"does not reproduce {entry.rel}: {why} (the file changed after the diff was made)",
                f"regenerate this part of the diff from {entry.rel}, or drop it (a module needs no diff)",
            )
        if entry is not None and m.upstream_path and "path" not in entry.origin:
            entry.origin["path"] = m.upstream_path
            entry.stated_in.append(f"{rel}:{fd.line}")
        return _Section(rel, fd, entry, m.upstream_path, m.against)

    def index(self, overlays: list[_Entry]) -> handdiffs.Index:
        if self._index is None:
            self._index = handdiffs.Index(
                [handdiffs.Candidate(e.rel, e.rel, e.target, e.origin.get("path")) for e in overlays]
            )
            self._by_rel = {e.rel: e for e in overlays}
        return self._index

    def verify_sections(self, sections_of: dict[str, list[_Section]]) -> set[str]:
        """Report stale diffs; return the diffs found to be incremental by their content.

        The sections of one overlay are undone newest first: when undoing the
        newest one leaves a file that an older one undoes, the newest was
        written against that older version of the overlay, not upstream.
        """
        incremental: set[str] = set()
        for sections in sections_of.values():
            entry = sections[0].entry
            if entry is None or entry.kind == "module":
                continue
            sections = [s for s in sections if s.against != "new"]  # a whole-file "diff" undoes nothing
            if not sections:
                continue
            undone = handdiffs.undo(entry.data, [(s.diff, s.fd) for s in sections])
            for rel, line, why in undone.stale:
                self.issue(
                    "diff-stale",
                    rel,
                    line,
                    f"does not reproduce {entry.rel}: {why} (the file changed after the diff was made)",
                    "state the full base commit, then patchkit import --normalize --fetch rebuilds the diff "
                    "against upstream",
                )
            incremental |= undone.incremental
            for s in sections:
                if s.against == "overlay" or s.diff in undone.incremental:
                    self.issue(
                        "diff-incremental",
                        s.diff,
                        s.fd.line,
                        f"is against an earlier version of {entry.rel}, not against upstream",
                        "patchkit import --normalize folds it into one diff against upstream",
                    )
        return incremental

    # -- image builds (importing/dockerfile.py) and the repository's own pins (importing/pins.py)

    def read_builds(self, lock: Lockfile, builds: list[dockerfile.Build]) -> Lockfile:
        """A queue's lockfile with the Dockerfiles import read marked so, for check to read them again.

        Their tag-only bases are reported here; the queue pins those written by digest.
        """
        self.base_images(builds)
        read = {b.file for b in builds}
        marked = [
            dataclasses.replace(a, note="image build") if str(a.file) in read and a.note is None else a
            for a in lock.artifacts
        ]
        return dataclasses.replace(lock, artifacts=tuple(marked))

    def nested_composes(self) -> list[str]:
        """Compose files in the directories repositories keep their deployment in (docker/, deploy/, build/)."""
        out = []
        for place in dockerfile.PLACES:
            folder = self.root / place
            if folder.is_dir() and not folder.is_symlink():
                out += [f"{place}/{n}" for n in compose.find(sorted(os.listdir(folder))) if (folder / n).is_file()]
        return out

    def image_builds(self, composes: list[compose.ComposeFile]) -> list[dockerfile.Build]:
        """Every Dockerfile a compose ``build:`` names (with its context and arguments), then those found by name."""
        out: dict[str, dockerfile.Build] = {}
        for use in (b for cf in composes for b in cf.builds):
            if (found := provenance.references(use.comment)).refs or found.unresolved:
                self.issue(
                    "ref-unassigned",
                    use.compose,
                    use.line,
                    f"the comment above services.{use.service}.build cites "
                    f"{', '.join([str(r) for r in found.refs] + list(found.unresolved))}, but the build copies "
                    "every file it delivers: which patch it belongs to is not said; not recorded",
                    "cite it in the provenance table row of the patch it belongs to, or above its COPY",
                )
            rel = compose.built_file(use, lambda r: not r.startswith("../") and (self.root / r).is_file())
            if rel in out:
                continue
            if rel.startswith("../") or not (self.root / rel).is_file():
                self.issue(
                    "build-missing",
                    use.compose,
                    use.line,
                    f"services.{use.service}.build names {rel}, which is not a file of the repository",
                    "fix build.context or build.dockerfile",
                )
                continue
            text = self.read_text(rel, f"built by {use.compose}:{use.line}")
            out[rel] = dockerfile.read(self.root, rel, text, use.context, dict(use.args), use.target)
            self._given[rel] = use.stated_at()
        for rel in dockerfile.find(self.root):
            if rel not in out:
                out[rel] = dockerfile.read(self.root, rel, self.read_text(rel, "a Dockerfile"))
        for b in out.values():
            for kind, line, message, fix in b.problems:
                self.issue(kind, b.file, line, message, fix)
        return list(out.values())

    def built_entries(self, builds: list[dockerfile.Build], composes: list[compose.ComposeFile]) -> list[_Entry]:
        """The files an image build copies into a Python tree: overlays (or modules), delivered by the build."""
        mounted = {m.target for cf in composes for m in cf.mounts}
        out: dict[str, _Entry] = {}
        for b in builds:
            copied = [c for c in b.copied if _PYTHON_TREE.search(c.target) and c.target not in mounted]
            for c in copied:
                if c.target in out:
                    continue  # a bind mount over the same path is what runs; the mount's entry stands
                m = compose.Mount(b.file, c.line, "build", c.rel, c.target, True, c.comment)
                entry = _Entry(c.rel, c.target, m, self.read(c.rel, f"copied by {b.file}:{c.line}"), "overlay")
                entry.build = b.file
                out[c.target] = entry
            self.copy_comments(b, copied, out)
        return list(out.values())

    def copy_comments(self, b: dockerfile.Build, copied: list[dockerfile.Copied], out: dict[str, _Entry]) -> None:
        """References written above a COPY: the file's when it copies one file; several files: which is unknown."""
        by_line: dict[int, list[dockerfile.Copied]] = {}
        for c in copied:
            by_line.setdefault(c.line, []).append(c)
        for line, group in by_line.items():
            found = provenance.references(group[0].comment)
            if not found.refs and not found.unresolved:
                continue
            if len(group) == 1 and not found.unresolved:
                _add_refs(out[group[0].target], group[0].comment, None)
                continue
            refs = [str(r) for r in found.refs] + list(found.unresolved)
            why = f"copies {len(group)} files" if len(group) > 1 else f"{', '.join(found.unresolved)} names no project"
            self.issue(
                "ref-unassigned",
                b.file,
                line,
                f"the comment cites {', '.join(refs)}, but the COPY {why}: not recorded",
                "cite it in the provenance table row of the patch it belongs to (owner/repo#N)",
            )

    def base_images(self, builds: list[dockerfile.Build], services: tuple[Image, ...] = ()) -> tuple[Image, ...]:
        """The services' images, then the images builds start FROM: pinned when written by digest (once, however
        its repository is written), else reported (and by check)."""
        out: list[Image] = list(services)
        for b in builds:
            for base in b.bases:
                if base.ref is None:
                    continue  # reported as image-unresolved
                if base.digest is None:
                    self.issue(
                        "image-unpinned",
                        base.file,
                        base.line,
                        f"FROM {base.ref} is not pinned by digest: every build may start from another image",
                        f"write FROM {base.repository}:{base.tag or 'latest'}@sha256:<digest> "
                        f"(skopeo inspect docker://{base.repository}:{base.tag or 'latest'} prints it)",
                    )
                    continue
                if any(i.digest == Digest(base.digest) and same_repository(i.repository, base.repository) for i in out):
                    continue
                name = slug(base.stage or "base")
                while any(i.name == name for i in out):
                    name = f"{name}-2"
                out.append(Image(name, base.repository, Digest(base.digest), tag=base.tag))
        return tuple(out)

    def stated_pins(self, builds: list[dockerfile.Build], entries: list[_Entry]) -> dict[str, pins.Stated]:
        """Upstream pins the repository's lock and build files state; conflicts reported, overlays given the commit."""
        files = pins.lock_files(self.root)
        ignored = gitignored(self.root, files) if files else {}
        found, bad = pins.read(self.root, [f for f in files if f not in ignored])  # a host's own .env is not read
        self._lock_files = sorted({p.file for p in found} | {f for f, _ in bad})
        for rel, why in bad:
            self.issue("pin-unreadable", rel, None, why, "fix the file; its pins are not carried over")
        for b in builds:
            found += pins.from_build(b, self._given.get(b.file))
        self.lock_refs(entries)
        stated, conflicts = pins.agree(found)
        for a, b_ in conflicts:
            self.issue(
                "pin-conflict",
                b_.file,
                b_.line,
                f"states {b_.name} {b_.what} {b_.value}, but {a.where} states {a.value}; neither is taken",
                "make the files agree",
            )
        for e in entries:
            pin = stated.get(_package(e.target) or "")
            if e.kind != "overlay" or pin is None or pin.commit is None or "commit" in e.origin:
                continue
            e.origin["commit"], e.origin["commit_source"] = pin.commit, pin.where["commit"]
            e.stated_in.append(pin.where["commit"])
            if pin.git is not None and "repository" not in e.origin and (gh := _github(pin.git)) is not None:
                e.origin["repository"] = gh
                e.stated_in.append(pin.where["git"])
        return stated

    def lock_refs(self, entries: list[_Entry]) -> None:
        """References a JSON lock's per-patch entry writes (``"pr": "vllm-project/vllm#1"``), given to its file."""
        for rel in (f for f in self._lock_files if f.endswith(".json")):
            text = self.read(rel, "a lock file").decode("utf-8", "replace")
            for entry in pins.patch_entries(rel, text):
                named = [e for e in entries if provenance.mentions(entry.names, e.rel)]
                found = provenance.references(entry.text)
                if not found.refs:
                    continue
                if len(named) == 1:
                    _add_refs(named[0], entry.text, None)
                    continue
                self.issue(
                    "ref-unassigned",
                    rel,
                    entry.line,
                    f"the entry for {entry.names} cites {', '.join(str(r) for r in found.refs)}, but "
                    f"{'no patch' if not named else 'several patches'} has that file: not recorded",
                    "name the patch's file in the entry as its repository path",
                )

    def pinned_upstreams(self, stated: dict[str, pins.Stated], repos: dict[str, set[str]]) -> list[Upstream]:
        """Upstreams the repository's own pins declare: a pin's repository, or the provenance's of the same name.

        A repository the provenance names whose pins state no full commit is
        left to the provenance's statements (``upstreams``).
        """
        by_name = {slug(repo.split("/")[1]): repo for repo in repos}
        out = []
        for name in sorted(stated):
            pin, repo = stated[name], by_name.get(slug(name))
            if repo is not None and (pin.commit is None or len(pin.commit) < 40):
                continue
            up = self.pinned_upstream(pin, f"https://github.com/{repo}" if repo else None)
            if up is not None:
                out.append(up)
        return out

    def pinned_upstream(self, pin: pins.Stated, git: str | None = None) -> Upstream | None:
        """The upstream a repository's own pins declare; None (reported) without a repository to fetch from."""
        git = git or pin.git
        if git is None:
            if pin.commit is not None:  # a version alone (PYTHON_VERSION=3.12) need not be an upstream's
                file, _, line = pin.where["commit"].rpartition(":")
                self.issue(
                    "pin-no-repository",
                    file,
                    int(line),
                    f"states {pin.name} commit {pin.commit}, but no source names the repository it is a commit of; "
                    "no upstream is declared for it",
                    f"state the repository beside it ({pin.name.upper()}_REPO=https://github.com/OWNER/REPO)",
                )
            return None
        said = [f"{k} from {v}" for k, v in sorted(pin.where.items())]
        extra = [f"version {pin.version}"] if pin.version else []
        extra += [f"release commit {pin.release}"] if pin.release else []
        full = pin.commit is not None and len(pin.commit) == 40
        note = "imported: " + "; ".join(said + extra)
        if not full:
            note += "; no full commit is stated"
        return GitUpstream(
            name=slug(pin.name), git=git, commit=Revision(pin.commit) if full and pin.commit else None, note=note
        )

    # -- provenance

    def provenance(self, entries: list[_Entry]) -> None:
        for doc in provenance.DOCUMENTS:
            path = self.root / doc
            if not path.is_file() or not path.resolve().is_relative_to(self.root):
                continue  # as provenance.rows reads them for check: a document outside names nothing
            for row in provenance.tables(doc, _utf8(doc, path.read_bytes())):
                entry = next((e for e in entries if provenance.names(row, e.rel)), None)
                if entry is None:
                    file, line = row.source.rsplit(":", 1)
                    self.issue(
                        "provenance-unmatched",
                        file,
                        int(line),
                        f"the table names {row.file}, which no compose file mounts and no image build copies",
                        "fix the file name in the table, or mount the file",
                    )
                    continue
                if row.new_module and entry.kind == "overlay" and "path" not in entry.origin:
                    entry.kind, entry.new_module = "module", row.source
                for key in ("repository", "commit", "path"):
                    value = getattr(row, key)
                    if value and key not in entry.origin:
                        entry.origin[key] = value
                        entry.origin[f"{key}_source"] = row.source
                entry.stated_in.append(row.source)
                entry.named_in_table = True
                _add_refs(entry, row.text, row.repository)

    def kind_unknown(self, entries: list[_Entry]) -> None:
        """Note each file a build copies in that no diff or provenance row speaks of: taken as an overlay."""
        undiffed = {i.file for i in self.issues if i.kind == "no-diff"}
        for e in entries:
            if e.build is None or e.kind != "overlay" or e.rel not in undiffed:
                continue
            if e.named_in_table:
                continue  # what a provenance row says of it stands
            self.issue(
                "kind-unknown",
                e.rel,
                None,
                f"no diff or provenance row says whether upstream has {e.target.split('-packages/', 1)[1]} "
                f"(an overlay) or not (a new module); it is taken as an overlay",
                "name it in the provenance table: its upstream path, or 'new module'",
            )

    def prose_refs(self, entries: list[_Entry]) -> None:
        """References in README prose, given to the one patch the paragraph (or its heading) names; else noted."""
        patches = {e.rel: e for e in entries if e.kind in ("overlay", "module", "transformer")}
        files = {rel: e.origin.get("repository") for rel, e in patches.items()}
        for c in provenance.prose_citations(self.root, files):
            if c.rel is not None:
                _add_refs(patches[c.rel], c.text, c.default_repo)
                continue
            file, line = c.source.rsplit(":", 1)
            self.issue(
                "ref-unassigned",
                file,
                int(line),
                f"cites {', '.join(c.cited)}, but the paragraph {c.why}: not recorded",
                "cite it in the provenance table row of the patch it belongs to (owner/repo#N)",
            )

    def upstreams(self, entries: list[_Entry], stated: dict[str, pins.Stated]) -> tuple[Upstream, ...]:
        repos: dict[str, set[str]] = {}
        for e in entries:
            if e.kind != "overlay":
                continue
            if (repo := e.origin.get("repository")) is not None:
                repos.setdefault(repo, set())
                if (commit := e.origin.get("commit")) is not None:
                    repos[repo].add(commit)
            if "commit" not in e.origin:
                self.issue(
                    "base-unknown",
                    e.rel,
                    None,
                    f"no source states the upstream commit this overlay of {e.target} is based on",
                    "add it to the provenance table (upstream, commit, path), then patchkit import --normalize",
                )
            elif len(e.origin["commit"]) < 40:
                where = e.origin.get("commit_source", e.rel)
                self.issue(
                    "base-short-commit",
                    where.rsplit(":", 1)[0],
                    int(where.rsplit(":", 1)[1]) if ":" in where else None,
                    f"{e.rel}: the stated base commit {e.origin['commit']} is abbreviated; it is kept as stated",
                    "write the full 40-hex commit in the provenance table",
                )
        out = self.pinned_upstreams(stated, repos)
        for repo in sorted(repos):
            if any(u.name == slug(repo.split("/")[1]) for u in out):
                continue
            commits = repos[repo]
            fulls = {c for c in commits if len(c) == 40}
            # Short ids that abbreviate the one full commit stated are that commit.
            commit = (
                next(iter(fulls)) if len(fulls) == 1 and all(next(iter(fulls)).startswith(c) for c in commits) else None
            )
            full = commit is not None
            out.append(
                GitUpstream(
                    name=slug(repo.split("/")[1]),
                    git=f"https://github.com/{repo}",
                    commit=Revision(commit) if full and commit is not None else None,
                    note=None if full else "imported: the base commit differs between patches or is not stated",
                )
            )
        return tuple(out)

    # -- names

    def name_entries(self, entries: list[_Entry], hand: list[HandDiff]) -> None:
        from_diff: dict[str, str] = {}
        for d in hand:
            if len(d.patches) == 1 and (m := _DIFF_NAME.fullmatch(PurePosixPath(str(d.file)).name)):
                from_diff.setdefault(d.patches[0], m["name"])
        used: set[str] = set()
        for e in entries:
            stem = from_diff.get(e.rel) or PurePosixPath(e.rel).stem
            name = base = slug(stem)
            k = 2
            while name in used:
                name, k = f"{base}-{k}", k + 1
            used.add(name)
            e.name = name
        by_rel = {e.rel: e.name for e in entries}
        hand[:] = [HandDiff(d.file, d.sha256, tuple(by_rel[r] for r in d.patches), d.against) for d in hand]

    def check_modules(self, entries: list[_Entry], upstreams: tuple[Upstream, ...]) -> None:
        """Note each module only a ``/dev/null`` diff made a module, mounted in a declared upstream's tree.

        Offline nothing tells whether the upstream has the file (which would make
        it an overlay); ``check`` gives the same note, ``--normalize --fetch`` decides.
        """
        from patchkit.importing.normalize import maybe_upstream_note

        declared = {u.name for u in upstreams}
        for e in entries:
            parts = _PYTHON_TREE.split(e.target, 1)
            if e.kind != "module" or e.dev_null is None or e.named_in_table or len(parts) != 2:
                continue
            top = parts[1].split("/", 1)[0]
            if top in declared:
                message, fix = maybe_upstream_note(e.name, e.rel, parts[1], top)
                self.issue("module-maybe-upstream", e.dev_null[0], e.dev_null[1], message, fix)

    # -- what runs, what is summed

    def check_runs(self, entries: list[_Entry], composes: list[compose.ComposeFile]) -> None:
        texts = [t for cf in composes for t in cf.texts]
        texts += [e.data.decode("utf-8", "replace") for e in entries if e.kind == "artifact"]
        for e in entries:
            if e.kind != "transformer":
                continue
            if not any(runs_script(e.target, t) for t in texts):
                self.issue(
                    "transformer-not-run",
                    e.mount.compose,
                    e.mount.line,
                    f"{e.rel} is mounted at {e.target}, but neither the compose command nor a mounted script runs it",
                    "run it from the entrypoint, or remove the mount",
                )

    def check_sums(self, entries: list[_Entry]) -> None:
        rel = sums.FILENAME
        path = self.root / rel
        if not path.is_file():
            self.issue("sums-missing", rel, None, "there is no SHA256SUMS", "patchkit sums writes it")
            return
        got = sums.read(self.read(rel, "the checksum list"), rel)
        for pr in got.malformed:
            self.issue("sums-malformed", rel, pr.line, pr.message, "patchkit sums")
        for pr in got.noncanonical:
            self.issue("sums-format", rel, pr.line, pr.message, "patchkit sums")
        listed: dict[str, str] = {}
        for entry in got.entries:
            listed[entry.name] = entry.sha256
            self.sums_entry(rel, entry.name, entry.line, entry.sha256)
        for e in entries:
            if e.rel not in listed:
                self.issue(
                    "sums-unlisted",
                    e.mount.compose,
                    e.mount.line,
                    f"{e.rel} is mounted but not in SHA256SUMS",
                    "patchkit sums adds every pinned file",
                )

    def sums_entry(self, rel: str, name: str, line: int, digest: str) -> None:
        """One SHA256SUMS line: the file it lists read (never through a symlink) and compared."""
        from patchkit.store.repo import Escape, Repo

        why = None
        data = b""
        try:
            if not (self.root / name).resolve().is_relative_to(self.root):
                why = "which is outside the repository"
            else:
                data = Repo(self.root).read(name)
        except FileNotFoundError:
            why = "which does not exist"
        except (Escape, OSError) as e:
            why = f"which {e}" if isinstance(e, Escape) else f"which cannot be read ({e.strerror})"
        if why is not None:
            self.issue("sums-not-present", rel, line, f"lists {name}, {why}", "patchkit sums drops it")
        elif sha256_bytes(data) != digest:
            self.issue(
                "sums-mismatch",
                rel,
                line,
                f"lists {name} with a sha256 the file no longer has",
                "patchkit sums (after checking the change is intended)",
            )

    # -- images and the model

    def images(self, composes: list[compose.ComposeFile]) -> tuple[Image, ...]:
        out: dict[str, Image] = {}
        for cf in composes:
            for use in cf.images:
                if use.digest is None and use.built:
                    continue  # the tag its build: gets; what it starts FROM is pinned (or reported) in the Dockerfile
                if use.digest is None:
                    self.issue(
                        "image-unpinned",
                        use.compose,
                        use.line,
                        f"services.{use.service}.image {use.repository}:{use.tag or 'latest'} is not pinned by digest",
                        f"patchkit image pin {slug(use.service)} {use.repository}:{use.tag or 'latest'}",
                    )
                    continue
                try:
                    digest = Digest(use.digest)
                except ValueError as e:
                    self.issue("image-invalid", use.compose, use.line, f"services.{use.service}.image: {e}")
                    continue
                if any(same_repository(i.repository, use.repository) and i.digest == digest for i in out.values()):
                    continue  # python@X and docker.io/library/python@X are one image
                name = slug(use.service)
                if name in out:
                    name = slug(f"{use.service}-{_profile(use.compose)}")
                out[name] = Image(name, use.repository, digest, tag=use.tag)
        return tuple(out[k] for k in sorted(out))

    def model(self, composes: list[compose.ComposeFile]) -> Model | None:
        chosen: Model | None = None
        for cf in composes:
            for use in cf.models:
                try:
                    model = Model(use.repo, Revision(use.revision))
                except ValueError as e:
                    self.issue("model-unpinned", use.compose, use.line, f"model {use.repo}: {e}")
                    continue
                if chosen is None:
                    chosen = model
                elif chosen != model:
                    self.issue(
                        "model-conflict",
                        use.compose,
                        use.line,
                        f"uses {use.repo}@{use.revision[:12]}, but {chosen.repo}@{chosen.revision.short} "
                        "is used first; only that one is pinned",
                    )
        return chosen


def _package(target: str) -> str | None:
    """The top-level package a Python-tree path is in (``…/site-packages/vllm/x.py``: ``vllm``)."""
    parts = _PYTHON_TREE.split(target, 1)
    return parts[1].split("/", 1)[0].lower() if len(parts) == 2 and "/" in parts[1] else None


def _github(url: str) -> str | None:
    m = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)", url)
    return m.group(1) if m else None


def _utf8(rel: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{rel}: not UTF-8 text ({e.reason} at byte {e.start})") from e


def _link_on_the_way(root: Path, rel: str) -> str | None:
    """The first component of ``rel`` that is a symlink (``patches/etc`` of ``patches/etc/passwd``), or None."""
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if (root / prefix).is_symlink():
            return prefix
    return None


def _files(root: Path, tops: tuple[str, ...]) -> list[str]:
    """Every regular file under the given top-level directories, as sorted repository paths."""
    out: list[str] = []
    for top in tops:
        base = root / top
        if not base.is_dir():
            continue
        if base.is_symlink():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            out.extend(
                (Path(dirpath) / f).relative_to(root).as_posix()
                for f in sorted(filenames)
                if not (Path(dirpath) / f).is_symlink()
            )
    return out


def _kind(rel: str, target: str) -> str:
    if rel.startswith("patches/"):
        return "overlay" if _PYTHON_TREE.search(target) else "transformer"
    if rel.startswith("tuning/") or rel.endswith(".csv"):
        return "tuning"
    return "artifact"


def _add_refs(entry: _Entry, text: str, default_repo: str | None) -> bool:
    found = provenance.references(text, default_repo)
    for r in found.refs:
        if r not in entry.refs:
            entry.refs.append(r)
    return bool(found.refs)


def slug(text: str) -> str:
    """A lockfile name as import writes it: lower case, other runs one dash ("unnamed" if nothing is left)."""
    name = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.")
    return name or "unnamed"


def _profile(compose_file: str) -> str:
    m = compose.COMPOSE_NAMES.fullmatch(compose_file)
    return (m.group(2) or "").strip(".-") if m else compose_file


def import_repository(root: Path, *, dry_run: bool = False, where: str = ".") -> ImportResult:
    """Build the lockfile of the hand-kept repository at ``root`` and write it (unless ``dry_run``).

    Refuses a repository that already is a patchkit deployment, unless its
    lockfile is exactly what this import produces (importing twice is a no-op).
    """
    from patchkit.store.persist import ignore_work_area
    from patchkit.store.repo import write_all

    root = root.resolve()
    if not root.is_dir():
        raise BadInput(f"{root}: not a directory")
    existing = root / LOCKFILE_NAME
    refuse = BadInput(
        f"{existing}: this repository is already a patchkit deployment",
        "import adopts a hand-kept repository once; from then on use patchkit check, lock and add",
    )
    importer = _Importer(root)
    try:
        lock = importer.build()
    except BadInput:
        if existing.exists():
            raise refuse from None
        raise
    text = dumps(lock).encode()
    result = ImportResult(lock, text, importer.issues, where=where)
    files = ignore_work_area(root)  # .patchkit/ in .gitignore, with the lockfile, in one transaction
    result.ignored = bool(files)
    if os.path.lexists(existing):
        if read_inside(root, LOCKFILE_NAME, "the lockfile") != text:
            raise refuse
        result.unchanged = True
    else:
        files[LOCKFILE_NAME] = text
        result.written = not dry_run
    if not dry_run:
        write_all(root, files)
    return result


_GLOB_LOOP = re.compile(r"\bfor\s+\w+\s+in\s+[^;\n]*\*|\brun-parts\b")


def runs_script(target: str, text: str) -> bool:
    """Whether a compose command or a mounted script runs the script mounted at ``target``: it names the
    script, or it loops over a glob (or ``run-parts``) and names the script's directory. ``check`` asks
    the same question of the same texts, so both report an unrun transformer alike."""
    if target in text or PurePosixPath(target).name in text:
        return True
    folder = re.escape(str(PurePosixPath(target).parent))
    return re.search(folder + r"(?![\w.-])", text) is not None and _GLOB_LOOP.search(text) is not None
