"""Rules about what a hand-kept build delivers: the images it starts from, and the files it copies in.

``patchkit import`` pins a repository's Dockerfiles and compose files as
artifacts and marks each patch an image build copies in (``build``). These
rules read them again on every check, so what import reported stays
reported while it holds: a base image or service image written by tag only
(``image-unpinned``) or by a digest that is not one (``image-invalid``), a
``FROM`` or ``COPY`` whose variable has no value, a
copied source that is gone, a patch the build no longer copies to its
target (``build-not-copied``), a compose ``build:`` naming no Dockerfile
(``build-missing``), and the repository's own pins: two files pinning one
upstream differently (``pin-conflict``), a lock that does not parse
(``pin-unreadable``), a commit with no repository (the note ``pin-no-repository``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.check.state import RepoView, State
from patchkit.core.findings import Finding
from patchkit.errors import BadInput
from patchkit.lockfile.model import PatchKind

if TYPE_CHECKING:
    from patchkit.importing import compose, dockerfile


def image_builds(state: State) -> list[Finding]:
    """Each pinned Dockerfile and compose file of a hand-kept repository, read again as import read it."""
    lock = state.lock
    if not lock.artifacts or not isinstance(state.view, RepoView):
        return []  # a build's context is the repository on disk
    from patchkit.importing import dockerfile

    composes = _composes(state)
    out: list[Finding] = []
    uses: dict[str, compose.BuildUse] = {}
    for c in composes:
        out += [_unpinned_service(u) for u in c.images if u.digest is None and not u.built]
        out += [f for u in c.images if (f := _invalid_digest(u)) is not None]
        for u in c.builds:
            rel = _built_file(state, u)
            uses.setdefault(rel, u)
            if state.view.kind(rel) != "file":
                out.append(_build_missing(u, rel))
        out += [f for u in c.builds if (f := _build_comment(u)) is not None]
    # The Dockerfiles import read (a Dockerfile pinned by hand is the deployment's own business).
    files = [str(a.file) for a in lock.artifacts if a.note == "image build"]
    files += [str(p.build) for p in lock.patches if p.build is not None]
    root = state.view.repo.root
    builds: dict[str, dockerfile.Build] = {}
    for rel in dict.fromkeys(files):
        data = state.view.read(rel)
        if data is None:
            continue  # a pinned file that is gone is reported by the file checks
        use = uses.get(rel)
        text = data.decode("utf-8", "replace")
        build = (
            dockerfile.read(root, rel, text, use.context, dict(use.args), use.target)
            if use is not None
            else dockerfile.read(root, rel, text)
        )
        builds[rel] = build
        out += [
            Finding(kind, rel, line, message, fix, severity="note" if kind == "build-step-unknown" else "error")
            for kind, line, message, fix in build.problems
        ]
        out += [_unpinned_base(b) for b in build.bases if b.ref is not None and b.digest is None]
    out += _copied(state, builds)
    out += [f for b in builds.values() for f in _copy_comments(state, b)]
    out += _kind_unknown(state)
    out += _pins(state, list(builds.values()), {rel: u.stated_at() for rel, u in uses.items()})
    out += _unplaced(state)
    return out + _provenance_unmatched(state)


def _provenance_unmatched(state: State) -> list[Finding]:
    """Each provenance row of an adopted compose or image build naming no file it delivers (``provenance-unmatched``).

    Delivered as import counts it: a pinned patch, a tuning table, an
    artifact mounted at a target. A row for a file nothing delivers says
    something false about the deployment, or names a file by a wrong name.
    """
    from patchkit.importing import provenance

    lock = state.lock
    # Import reads the tables where it reads compose files or a build that delivers files (not a queue alone).
    adopted = any(a.note == "compose" for a in lock.artifacts) or any(p.build for p in lock.patches)
    if not adopted or not isinstance(state.view, RepoView):
        return []
    delivered = [str(p.file) for p in lock.patches if p.file is not None]
    delivered += [str(t.file) for t in lock.tuning] + [str(a.file) for a in lock.artifacts if a.target is not None]
    out = []
    for row in state.view.provenance_rows:
        if any(provenance.names(row, rel) for rel in delivered):
            continue
        file, _, line = row.source.rpartition(":")
        out.append(
            Finding(
                "provenance-unmatched",
                file,
                int(line),
                f"the table names {row.file}, which no compose file mounts and no image build copies",
                "fix the file name in the table, or mount the file",
            )
        )
    return out


def _composes(state: State) -> list[compose.ComposeFile]:
    from patchkit.importing import compose

    out = []
    for a in state.lock.artifacts:
        if a.note != "compose" or not compose.COMPOSE_NAMES.fullmatch(a.file.pure.name):
            continue  # only the hand-kept compose files import pinned
        data = state.view.read(str(a.file))
        try:
            if data is not None:
                out.append(compose.read(str(a.file), data.decode("utf-8")))
        except (UnicodeDecodeError, BadInput):
            continue  # compose.mounts reports a compose file that does not read
    return out


def _unpinned_service(use: compose.ImageUse) -> Finding:
    ref = f"{use.repository}:{use.tag or 'latest'}"
    return Finding(
        "image-unpinned",
        use.compose,
        use.line,
        f"services.{use.service}.image {ref} is not pinned by digest",
        f"write {ref}@sha256:<digest> (patchkit image pin NAME {ref} resolves it)",
    )


def _invalid_digest(use: compose.ImageUse) -> Finding | None:
    """A compose service image written with ``@`` and something that is no sha256 digest: nothing pins it."""
    from patchkit.core.values import Digest

    if use.digest is None:
        return None
    try:
        Digest(use.digest)
    except ValueError as e:
        return Finding(
            "image-invalid",
            use.compose,
            use.line,
            f"services.{use.service}.image: {e}",
            f"write {use.repository}:{use.tag or 'latest'}@sha256:<digest> "
            f"(patchkit image pin NAME {use.repository}:{use.tag or 'latest'} resolves it)",
        )
    return None


def _unpinned_base(base: dockerfile.BaseImage) -> Finding:
    ref = f"{base.repository}:{base.tag or 'latest'}"
    return Finding(
        "image-unpinned",
        base.file,
        base.line,
        f"FROM {base.ref} is not pinned by digest: every build may start from another image",
        f"write FROM {ref}@sha256:<digest> (skopeo inspect docker://{ref} prints it)",
    )


def _copied(state: State, builds: dict[str, dockerfile.Build]) -> list[Finding]:
    """Each patch pinned as delivered by an image build is still copied by it, from its file, to its target."""
    out = []
    for i, p in enumerate(state.lock.patches):
        build = builds.get(str(p.build)) if p.build is not None else None
        if build is None:
            continue
        copied = {c.target: c.rel for c in build.copied}
        if copied.get(str(p.target)) != str(p.file):
            out.append(
                state.lock_finding(
                    "build-not-copied",
                    ("patches", i, "build"),
                    f"{p.build} no longer copies {p.file} to {p.target}: the image does not carry this patch",
                    "restore the COPY, or remove the patch (patchkit rm)",
                )
            )
    return out


def _pins(state: State, builds: list[dockerfile.Build], given: dict[str, dict[str, tuple[str, int]]]) -> list[Finding]:
    """The repository's own pins, read again: files that disagree, a lock that does not parse, a commit of nothing."""
    from patchkit.importing import pins

    files = [str(a.file) for a in state.lock.artifacts if a.note == "lock" and state.view.read(str(a.file)) is not None]
    if not isinstance(state.view, RepoView) or not (files or builds):
        return []
    try:
        found, bad = pins.read(state.view.repo.root, files)
    except BadInput:
        return []  # a lock file that is not a regular file inside the repository: the file checks report it
    out = [Finding("pin-unreadable", rel, None, why, "fix the file; its pins are not carried over") for rel, why in bad]
    for b in builds:
        found += pins.from_build(b, given.get(b.file))
    stated, conflicts = pins.agree(found)
    out += [
        Finding(
            "pin-conflict",
            b.file,
            b.line,
            f"states {b.name} {b.what} {b.value}, but {a.where} states {a.value}; neither is taken",
            "make the files agree",
        )
        for a, b in conflicts
    ]
    declared = {u.name for u in state.lock.upstreams}
    for s in stated.values():
        if s.commit is not None and s.git is None and s.name not in declared:
            file, _, line = s.where["commit"].rpartition(":")
            out.append(
                Finding(
                    "pin-no-repository",
                    file,
                    int(line),
                    f"states {s.name} commit {s.commit}, but no source names the repository it is a commit of",
                    f"state the repository beside it ({s.name.upper()}_REPO=https://github.com/OWNER/REPO)",
                    severity="note",
                )
            )
    return out


def _built_file(state: State, use: compose.BuildUse) -> str:
    from patchkit.importing import compose

    return compose.built_file(use, lambda rel: state.view.kind(rel) == "file")


def _build_missing(use: compose.BuildUse, rel: str) -> Finding:
    return Finding(
        "build-missing",
        use.compose,
        use.line,
        f"services.{use.service}.build names {rel}, which is not a file of the repository",
        "fix build.context or build.dockerfile",
    )


def _kind_unknown(state: State) -> list[Finding]:
    """Each overlay a build copies in that no diff covers and no provenance row names: overlay or module is unknown."""
    lock = state.lock
    covered = {name for d in lock.diffs for name in d.patches}
    out = []
    for i, p in enumerate(lock.patches):
        if p.build is None or p.kind is not PatchKind.OVERLAY or p.diff is not None or p.name in covered:
            continue
        if p.file is None or state.view.provenance_names(str(p.file)):
            continue
        out.append(
            state.lock_finding(
                "kind-unknown",
                ("patches", i, "name"),
                f"overlay '{p.name}' ({p.file}): no diff or provenance row says whether upstream has it "
                "(an overlay) or not (a new module)",
                "name it in the provenance table: its upstream path, or 'new module'",
                "note",
            )
        )
    return out


def _unplaced(state: State) -> list[Finding]:
    """References README prose cites that no single patch can be given, as import noted them (not recorded)."""
    from patchkit.importing import provenance

    lock = state.lock
    if not isinstance(state.view, RepoView) or not any(p.origin is not None or p.build for p in lock.patches):
        return []  # only an imported repository's prose was read
    files = {str(p.file): p.origin.repository if p.origin else None for p in lock.patches if p.file is not None}
    out: list[Finding] = []
    out += _lock_entries(state, list(files))
    for c in provenance.prose_citations(state.view.repo.root, files):
        if c.rel is None:
            file, line = c.source.rsplit(":", 1)
            out.append(
                Finding(
                    "ref-unassigned",
                    file,
                    int(line),
                    f"cites {', '.join(c.cited)}, but the paragraph {c.why}: no patch records it",
                    "cite it in the provenance table row of the patch it belongs to (owner/repo#N)",
                    severity="note",
                )
            )
    return out


def _refs_in(text: str) -> list[str]:
    from patchkit.importing import provenance

    found = provenance.references(text)
    return [str(r) for r in found.refs] + list(found.unresolved)


def _build_comment(use: compose.BuildUse) -> Finding | None:
    """A comment above a compose ``build:`` citing references: which patch they belong to is not said."""
    refs = _refs_in(use.comment)
    if not refs:
        return None
    return Finding(
        "ref-unassigned",
        use.compose,
        use.line,
        f"the comment above services.{use.service}.build cites {', '.join(refs)}; no patch records it",
        "cite it in the provenance table row of the patch it belongs to, or above its COPY",
        severity="note",
    )


def _copy_comments(state: State, build: dockerfile.Build) -> list[Finding]:
    """A comment above a COPY of several patches (or naming no project) citing references no patch records."""
    from patchkit.importing import provenance

    delivered = {str(p.target) for p in state.lock.patches if p.build is not None and str(p.build) == build.file}
    by_line: dict[int, list[dockerfile.Copied]] = {}
    for c in build.copied:
        if c.target in delivered:
            by_line.setdefault(c.line, []).append(c)
    out = []
    for line, group in sorted(by_line.items()):
        found = provenance.references(group[0].comment)
        if (len(group) > 1 and (found.refs or found.unresolved)) or found.unresolved:
            out.append(
                Finding(
                    "ref-unassigned",
                    build.file,
                    line,
                    f"the comment cites {', '.join(_refs_in(group[0].comment))}, but the COPY "
                    f"{'copies several patches' if len(group) > 1 else 'names no project'}; no patch records it",
                    "cite it in the provenance table row of the patch it belongs to (owner/repo#N)",
                    severity="note",
                )
            )
    return out


def _lock_entries(state: State, files: list[str]) -> list[Finding]:
    """A JSON lock's per-patch entry citing references for a file no single patch has."""
    from patchkit.importing import pins, provenance

    out = []
    for a in state.lock.artifacts:
        data = state.view.read(str(a.file)) if a.note == "lock" and str(a.file).endswith(".json") else None
        for entry in pins.patch_entries(str(a.file), data.decode("utf-8", "replace")) if data else []:
            named = [rel for rel in files if provenance.mentions(entry.names, rel)]
            if len(named) != 1 and provenance.references(entry.text).refs:
                out.append(
                    Finding(
                        "ref-unassigned",
                        entry.file,
                        entry.line,
                        f"the entry for {entry.names} cites references, but no single patch has that file; "
                        "no patch records them",
                        "name the patch's file in the entry as its repository path",
                        severity="note",
                    )
                )
    return out
