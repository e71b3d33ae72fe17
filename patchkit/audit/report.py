"""The audit report: what the deployment runs that differs from upstream, why, and whether it checks out.

``build`` gathers one ``AuditReport`` offline: the pins, ``check``'s findings,
every patch with its reason, references (recorded states, drop candidates),
upstream base, diffstat, full diff and the verification of each of its
files. The renderers (patchkit.formats) turn it into a self-contained HTML page
(patchkit.formats.audit_html), Markdown for a pull request description, or JSON.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from patchkit.check.run import check
from patchkit.core import diffs
from patchkit.core.findings import CheckResult, Finding
from patchkit.errors import Refused
from patchkit.importing import handdiffs
from patchkit.lockfile.model import GitUpstream, Lockfile, Patch, PatchKind, Upstream, WheelUpstream
from patchkit.store.cache import BlobStore
from patchkit.store.repo import Escape, Repo
from patchkit.tracking import refs

#: Markdown diffs longer than this are cut (a pull request description holds 65536 characters).
MARKDOWN_DIFF_LINES = 200
_GITHUB_REPO = re.compile(r"^(?:https://|git@|ssh://git@)github\.com[/:](?P<repo>[^/]+/[^/]+?)(?:\.git)?/?$")


class Verified(Enum):
    """The verification status of one file of a patch."""

    OK = "ok"
    FAILED = "failed"
    UNVERIFIED = "unverified"


@dataclass(frozen=True)
class Verification:
    """One verified property of one file: the file, what was checked, the outcome and why."""

    file: str
    what: str
    status: Verified
    detail: str | None = None


@dataclass(frozen=True)
class DiffLine:
    """A line of a rendered diff: ``kind`` is hunk, context, add, del or note; line numbers old/new."""

    kind: str
    old: int | None
    new: int | None
    text: str


@dataclass(frozen=True)
class BaseInfo:
    """The upstream file a patch is based on, with where to read it and how old it is."""

    upstream: str
    source: str
    repository: str | None
    commit: str | None
    version: str | None
    path: str
    sha256: str
    link: str | None
    committed_at: str | None
    freshness: str


@dataclass(frozen=True)
class Review:
    """A patch against one required criterion: ``status`` as ``audit status`` says it, who reviewed, what changed."""

    criterion: str
    status: str
    by: tuple[str, ...]  # "alice@example.com 2026-12-03 (delta)", in chain order
    change: tuple[str, ...] = ()  # the interdiff since the last review, when it needs a delta audit

    @property
    def covered(self) -> bool:
        return self.status in ("audited", "carried over")


@dataclass(frozen=True)
class PatchSection:
    """Everything the report says about one patch."""

    name: str
    kind: str
    target: str
    file: str | None
    reason: str | None
    drop_when: str | None
    refs: refs.PatchRefs
    base: BaseInfo | None
    diff_file: str | None
    added: int
    removed: int
    diff: str  # the unified diff (or the new file) as text
    lines: tuple[DiffLine, ...]
    verification: tuple[Verification, ...]
    findings: tuple[Finding, ...]
    # With --since REV: the interdiff of the patch's diff as committed at REV against now (lines).
    interdiff: tuple[str, ...] = ()
    # With audits.toml: where the patch stands against each criterion the policy requires.
    reviews: tuple[Review, ...] = ()

    @property
    def status(self) -> Verified:
        """The patch's one verdict, from its verification rows: the table and the section say the same."""
        states = {v.status for v in self.verification}
        if Verified.FAILED in states:
            return Verified.FAILED
        return Verified.UNVERIFIED if Verified.UNVERIFIED in states else Verified.OK


@dataclass(frozen=True)
class Pin:
    """One pinned thing in the summary: its name, the pin, a link and a note."""

    name: str
    value: str
    link: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class AuditReport:
    deployment: str | None
    generated_at: str
    images: tuple[Pin, ...]
    model: Pin | None
    upstreams: tuple[Pin, ...]
    patches: tuple[PatchSection, ...]
    findings: tuple[Finding, ...]
    files_hashed: int
    diffs_verified: int

    @property
    def check_ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    @property
    def by_kind(self) -> dict[str, int]:
        return dict(sorted(Counter(p.kind for p in self.patches).items()))

    @property
    def by_status(self) -> dict[str, int]:
        return dict(sorted(Counter(p.status.value for p in self.patches).items()))

    @property
    def by_standing(self) -> dict[str, int]:
        return dict(sorted(Counter(p.refs.standing.value for p in self.patches).items()))

    @property
    def drop_candidates(self) -> list[str]:
        return [p.name for p in self.patches if p.refs.drop_candidate]


# --------------------------------------------------------------------------- building


def github_repo(url: str | None) -> str | None:
    """``owner/repo`` when ``url`` is a GitHub repository URL."""
    m = _GITHUB_REPO.match(url or "")
    return m["repo"] if m else None


def build(
    repo: Repo,
    lock: Lockfile,
    lock_bytes: bytes,
    store: BlobStore | None,
    cache: Path,
    now: dt.datetime,
    since: str | None = None,
) -> AuditReport:
    """The audit report of ``repo``, offline: check's findings, recorded reference states, every diff.

    With ``since`` (a git revision of the repository), each patch whose diff changed since then
    carries the interdiff of its diff at ``since`` against its diff now.
    """
    if since is not None:
        _require_revision(repo, since)
    result = check(repo, lock, lock_bytes, store)
    assessed = {a.patch: a for a in refs.assess(lock, refs.git_containment(lock, cache), now)}
    hand = handdiffs.chains(lock, lambda d: _read(repo, str(d.file)))
    owners = _part_owners(repo, lock, hand)
    sections = tuple(
        _section(repo, lock, p, assessed[p.name], _Mine(result, owners), cache, hand) for p in lock.patches
    )
    if since is not None:
        sections = tuple(_since(repo, lock, s, since) for s in sections)
    sections = _with_reviews(repo, lock, sections, now)
    return AuditReport(
        deployment=lock.name,
        generated_at=refs.timestamp(now),
        images=tuple(
            Pin(
                i.name,
                i.reference,
                None,
                "; ".join(x for x in (f"tag {i.tag}" if i.tag else "", i.version or "", i.note or "") if x) or None,
            )
            for i in lock.images
        ),
        model=Pin(
            lock.model.repo,
            str(lock.model.revision),
            f"https://huggingface.co/{lock.model.repo}/tree/{lock.model.revision}",
            f"from {lock.model.ref}" if lock.model.ref else None,
        )
        if lock.model
        else None,
        upstreams=tuple(_upstream_pin(u) for u in lock.upstreams),
        patches=sections,
        findings=tuple(result.findings),
        files_hashed=result.files_hashed,
        diffs_verified=result.diffs_verified,
    )


def _with_reviews(
    repo: Repo, lock: Lockfile, sections: tuple[PatchSection, ...], now: dt.datetime
) -> tuple[PatchSection, ...]:
    """Each section with its recorded reviews, when the repository keeps audits.toml."""
    from patchkit.signing import certify

    audits = certify.load(repo)
    if audits is None:
        return sections
    found, _ = certify.statuses(repo, lock, audits, now)
    by_patch: dict[str, list[Review]] = {}
    for s in found:
        who = tuple(
            f"{a.who} {a.date}{' (delta)' if a.delta_from else ''}{f' via import {a.source}' if a.source else ''}"
            for a in s.audits
        )
        by_patch.setdefault(s.patch, []).append(Review(s.criterion, s.coverage.value, who, s.change))
    return tuple(dataclasses.replace(s, reviews=tuple(by_patch.get(s.name, ()))) for s in sections)


def _require_revision(repo: Repo, rev: str) -> None:
    """Refuse ``--since REV`` when REV names no commit of the repository: every patch would read as new."""
    from patchkit.vcs import gitclient

    if gitclient.commit_of(repo.root, rev) is None:
        raise Refused(
            f"--since {rev}: no such commit in {repo.root} (git rev-parse --verify '{rev}^{{commit}}' finds none)",
            "name a commit of this repository: a hash, a tag or a branch (git log --oneline lists them)",
        )


def _since(repo: Repo, lock: Lockfile, s: PatchSection, rev: str) -> PatchSection:
    from patchkit.trust import interdiff

    p = lock.patch(s.name)
    if p is None or p.diff is None:
        return s
    old = interdiff.at_revision(repo.root, rev, str(p.diff.file))
    now = _read(repo, str(p.diff.file))
    if now is None:
        return s
    if old is None:
        return dataclasses.replace(s, interdiff=(f"new since {rev}: no diff of it was committed there",))
    found = interdiff.compare(old, now)
    return dataclasses.replace(s, interdiff=tuple(found.lines())) if found is not None and not found.empty else s


def _upstream_pin(u: Upstream) -> Pin:
    gh = github_repo(u.git)
    if isinstance(u, GitUpstream) and u.commit is not None:
        link = f"https://github.com/{gh}/commit/{u.commit}" if gh else None
        return Pin(u.name, f"{u.git} @ {u.commit}", link, u.version or u.note)
    if isinstance(u, WheelUpstream) and u.wheel_project and u.wheel_version:
        link = f"https://pypi.org/project/{u.wheel_project}/{u.wheel_version}/"
        return Pin(
            u.name, f"{u.wheel} ({u.wheel_file or 'wheel'}, sha256 {u.wheel_sha256 or 'unpinned'})", link, u.note
        )
    return Pin(u.name, u.pin_text, None, u.note)


def _base(lock: Lockfile, p: Patch, cache: Path) -> BaseInfo | None:
    if p.base is None:
        return None
    b = p.base
    up = lock.upstream(b.upstream)
    source = up.source if up else "?"
    gh = github_repo(up.git) if up else None
    link = None
    committed_at = None
    freshness = "unknown"
    if isinstance(up, GitUpstream) and b.commit is not None:
        link = f"https://github.com/{gh}/blob/{b.commit}/{b.path}" if gh else None
        from patchkit.sources.git import GitSource

        found = (
            GitSource(up.git, cache).commit_age(b.commit.sha, up.commit.sha if up.commit else None) if up.git else None
        )
        if found is not None:
            committed_at = found[0]
        if up.commit == b.commit:
            freshness = f"at the pinned {up.name} commit"
        elif found is not None and found[1] is not None:
            freshness = (
                f"{found[1]} commits behind the pinned {up.name} {up.commit.short if up.commit else ''}".rstrip()
            )
        else:
            freshness = f"older or other than the pinned {up.name} {up.pin_text} (the clone is not in the cache)"
    elif isinstance(up, WheelUpstream):
        link = f"https://pypi.org/project/{up.wheel_project}/{b.version}/" if up.wheel_project and b.version else None
        if b.version and b.version == up.wheel_version:
            freshness = f"at the pinned {up.wheel}"
        else:
            freshness = f"version {b.version or '?'}, the deployment pins {up.wheel}"
    elif up is not None:
        freshness = f"taken at {b.version or b.commit or up.pin_text}"
    return BaseInfo(
        upstream=b.upstream,
        source=source,
        repository=(up.git or up.wheel or up.dir or up.image) if up else None,
        commit=str(b.commit) if b.commit else None,
        version=b.version,
        path=str(b.path),
        sha256=b.sha256.hex,
        link=link,
        committed_at=committed_at,
        freshness=freshness,
    )


def _read(repo: Repo, rel: str) -> bytes | None:
    try:
        return repo.read(rel)
    except (OSError, Escape):
        return None


# Findings about a hand-kept diff as a whole (not one of its parts): they concern every patch it names.
_WHOLE_DIFF = {"diff-incremental", "missing", "hash-mismatch", "unsafe-path", "unreadable"}


@dataclass(frozen=True)
class _Mine:
    """Check's findings, with each hand-kept diff's parts: (first line, the patches that part describes)."""

    result: CheckResult
    owners: dict[str, list[tuple[int, frozenset[str]]]]


def _part_owners(repo: Repo, lock: Lockfile, chains: handdiffs.Chains) -> dict[str, list[tuple[int, frozenset[str]]]]:
    """For each hand-kept diff, where each of its parts starts and which patches that part describes.

    A multi-file diff holds the parts of several patches: a finding inside one
    part (a stale hunk, a bad hunk count) is about that part's patch only.
    """
    owned: dict[tuple[str, int], set[str]] = {}
    for name, parts in chains.parts.items():
        for rel, fd in parts:
            owned.setdefault((rel, fd.line), set()).add(name)
    for name, new_parts in chains.new_file_parts.items():
        for rel, at in new_parts:
            owned.setdefault((rel, at), set()).add(name)
    out: dict[str, list[tuple[int, frozenset[str]]]] = {}
    for d in lock.diffs:
        rel = str(d.file)
        starts = {line for r, line in owned if r == rel} | set(_part_starts(repo, rel))
        out[rel] = sorted((line, frozenset(owned.get((rel, line), ()))) for line in starts)
    return out


def _part_starts(repo: Repo, rel: str) -> list[int]:
    """The first line of every part of a diff, as ``patch`` reads it (none when it does not parse)."""
    data = _read(repo, rel)
    try:
        return [fd.line for fd in diffs.parse_lenient(data)[0]] if data else []
    except diffs.DiffError:
        return []


def _owned_by(f: Finding, name: str, parts: list[tuple[int, frozenset[str]]]) -> bool:
    """Whether a finding on a hand-kept diff that names patch ``name`` is about that patch's part of it."""
    if f.code in _WHOLE_DIFF or f.line is None:
        return True
    before = [owners for start, owners in parts if start <= f.line]
    return not before or name in before[-1]


def _section(
    repo: Repo,
    lock: Lockfile,
    p: Patch,
    assessed: refs.PatchRefs,
    found: _Mine,
    cache: Path,
    chains: handdiffs.Chains,
) -> PatchSection:
    hand = tuple(str(d.file) for d in lock.diffs if p.name in d.patches)
    mine = tuple(f for f in found.result.findings if _concerns(f, p, hand, found.owners))
    text, added, removed = "", 0, 0
    lines: tuple[DiffLine, ...] = ()
    if p.diff is not None:
        data = _read(repo, str(p.diff.file))
        if data is None:
            lines = (DiffLine("note", None, None, f"{p.diff.file} cannot be read"),)
        else:
            text, lines, added, removed = _diff_lines(data)
    elif p.kind is PatchKind.OVERLAY and p.base is None:
        # A modified copy of an upstream file: never shown as a whole new file. Its hand-kept diffs, if any.
        text, lines, added, removed = _hand_diff_lines(p, chains)
    elif p.file is not None:
        data = _read(repo, str(p.file))
        if data is None:
            lines = (DiffLine("note", None, None, f"{p.file} cannot be read"),)
        else:
            text, lines, added, removed = _new_file_lines(data, str(p.file))
    return PatchSection(
        name=p.name,
        kind=p.kind.value,
        target=str(p.target),
        file=str(p.file) if p.file else None,
        reason=p.reason,
        drop_when=p.drop_when,
        refs=assessed,
        base=_base(lock, p, cache),
        diff_file=str(p.diff.file) if p.diff else None,
        added=added,
        removed=removed,
        diff=text,
        lines=lines,
        verification=_verification(p, mine, hand),
        findings=mine,
    )


def _concerns(
    f: Finding, p: Patch, hand: tuple[str, ...] = (), owners: dict[str, list[tuple[int, frozenset[str]]]] | None = None
) -> bool:
    """Whether a finding is about ``p``: its lockfile entry, its file, its diff, or its part of a hand-kept diff."""
    field = f.field or ""
    if field == f"patches[{p.name}]" or field.startswith(f"patches[{p.name}]."):
        return True
    if f.file in {str(x) for x in (p.file, p.diff.file if p.diff else None) if x is not None}:
        return True
    return f.file in hand and _owned_by(f, p.name, (owners or {}).get(f.file, []))


def _hand_diff_lines(p: Patch, chains: handdiffs.Chains) -> tuple[str, tuple[DiffLine, ...], int, int]:
    """The parts of the hand-kept diffs that describe an overlay without a known base, each under a note."""
    parts = chains.parts.get(p.name, [])
    if not parts:
        why = chains.unreadable.get(p.name) or (
            "its hand-kept diff adds it whole (--- /dev/null), though it is a modified upstream file"
            if p.name in chains.adds_whole_file
            else "a modified upstream file"
        )
        note = f"{why}; its base is not known, so there is no diff against upstream to show"
        return "", (DiffLine("note", None, None, note),), 0, 0
    texts: list[str] = []
    out: list[DiffLine] = []
    added = removed = 0
    for rel, fd in parts:
        out.append(DiffLine("note", None, None, f"hand-kept diff {rel} (base not pinned)"))
        lines, a, r = _lines_of([fd])
        texts.append(_part_text(fd))
        out.extend(lines)
        added, removed = added + a, removed + r
    return "".join(texts), tuple(out), added, removed


def _part_text(fd: diffs.FileDiff) -> str:
    """One file's part of a diff as unified diff text."""
    out = [f"--- {fd.old_path or '/dev/null'}\n", f"+++ {fd.new_path or '/dev/null'}\n"]
    for h in fd.hunks:
        out.append(f"@@ -{h.old_start},{h.old_len} +{h.new_start},{h.new_len} @@\n")
        for tag, content in h.lines:
            line = content.decode("utf-8", "replace")
            out.append(tag.decode() + (line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"))
    return "".join(out)


def _verification(p: Patch, mine: tuple[Finding, ...], hand: tuple[str, ...] = ()) -> tuple[Verification, ...]:
    """What was verified of each of the patch's own files; every error about the patch fails one of these rows."""
    used: set[int] = set()

    def status(codes: set[str], fields: tuple[str, ...], files: tuple[str, ...]) -> tuple[Verified, str | None]:
        hits = [f for f in mine if f.code in codes and ((f.field or "") in fields or (f.file in files and not f.field))]
        used.update(id(f) for f in hits)
        errors = [f for f in hits if f.severity == "error"]
        if errors:
            return Verified.FAILED, errors[0].message
        if hits:
            return Verified.UNVERIFIED, hits[0].message
        return Verified.OK, None

    prefix = f"patches[{p.name}]"
    out = []
    file_codes = {"missing", "hash-mismatch", "unsafe-path", "unreadable"}
    if p.file is not None:
        st, why = status(file_codes, (f"{prefix}.sha256", f"{prefix}.file"), (str(p.file),))
        out.append(Verification(str(p.file), "matches its pinned sha256", st, why))
    if p.diff is not None:
        out += _diff_rows(p, str(p.diff.file), status)
    # module-maybe-upstream (a note): a "module" that may be an upstream file is never shown as verified.
    hand_codes = {
        "diff-invalid",
        "diff-stale",
        "diff-new-file",
        "diff-incremental",
        "module-maybe-upstream",
        "missing",
        "hash-mismatch",
    }
    for rel in hand:
        st, why = status(hand_codes, (), (rel,))
        out.append(
            Verification(rel, "hand-kept diff: parses, is against upstream, undoes exactly on the overlay", st, why)
        )
    if p.kind is PatchKind.OVERLAY and p.base is None:
        # No diff to upstream is nothing to verify against, not a failure of the patch's files.
        _, why = status({"no-diff"}, (f"{prefix}.name",), ())
        why = why or "the upstream base is not pinned, so the file cannot be compared with upstream"
        out.append(
            Verification(str(p.file or p.target), "is a known upstream base plus its diff", Verified.UNVERIFIED, why)
        )
    # Any other error about the patch's own files fails a row of its own: the verdict never hides one.
    out += [
        Verification(f.file if f.line is None else f"{f.file}:{f.line}", f"check: {f.code}", Verified.FAILED, f.message)
        for f in mine
        if f.severity == "error" and id(f) not in used
    ]
    return tuple(out)


def _diff_rows(
    p: Patch, drel: str, status: Callable[[set[str], tuple[str, ...], tuple[str, ...]], tuple[Verified, str | None]]
) -> list[Verification]:
    """The rows of a patch's own diff: its pinned sha256, then that it rebuilds the base (or the file)."""
    prefix = f"patches[{p.name}]"
    st, why = status(
        {"missing", "hash-mismatch", "unsafe-path", "unreadable"},
        (f"{prefix}.diff.sha256", f"{prefix}.diff.file"),
        (drel,),
    )
    out = [Verification(drel, "matches its pinned sha256", st, why)]
    if st is Verified.OK and p.base is not None:
        codes = {"diff-invalid", "diff-header", "diff-stale", "base-mismatch", "base-unavailable", "hash-mismatch"}
        fields = (f"{prefix}.base.sha256", f"{prefix}.base", f"{prefix}.sha256")
        st, why = status(codes, fields, (drel,))
        what = (
            "reversed onto the overlay, gives exactly the pinned base"
            if p.file is not None
            else "applied to the pinned base, gives exactly the pinned sha256 of the file that runs"
        )
        out.append(Verification(drel, what, st, why))
    return out


def _decode(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _diff_lines(data: bytes) -> tuple[str, tuple[DiffLine, ...], int, int]:
    text = _decode(data)
    if text is None:
        return "", (DiffLine("note", None, None, f"not UTF-8 text ({len(data)} bytes)"),), 0, 0
    if not data:
        return "", (DiffLine("note", None, None, "empty diff: the patch is identical to its base"),), 0, 0
    try:
        files = diffs.parse(data)
    except diffs.DiffError as e:
        return text, (DiffLine("note", None, None, f"does not parse (line {e.line}): {e.message}"),), 0, 0
    lines, added, removed = _lines_of(files)
    return text, lines, added, removed


def _lines_of(files: list[diffs.FileDiff]) -> tuple[tuple[DiffLine, ...], int, int]:
    """The numbered lines of the hunks of ``files``, with lines added and removed."""
    out: list[DiffLine] = []
    added = removed = 0
    for fd in files:
        for h in fd.hunks:
            out.append(DiffLine("hunk", None, None, f"@@ -{h.old_start},{h.old_len} +{h.new_start},{h.new_len} @@"))
            old, new = h.old_start, h.new_start
            for tag, content in h.lines:
                line = content.decode("utf-8", "replace").rstrip("\r\n")
                if tag == b"+":
                    out.append(DiffLine("add", None, new, line))
                    new += 1
                    added += 1
                elif tag == b"-":
                    out.append(DiffLine("del", old, None, line))
                    old += 1
                    removed += 1
                else:
                    out.append(DiffLine("context", old, new, line))
                    old += 1
                    new += 1
    return tuple(out), added, removed


def _new_file_lines(data: bytes, name: str) -> tuple[str, tuple[DiffLine, ...], int, int]:
    text = _decode(data)
    if text is None:
        return "", (DiffLine("note", None, None, f"{name}: binary file, {len(data)} bytes"),), 0, 0
    body = text.splitlines()
    lines = [DiffLine("add", None, n, line) for n, line in enumerate(body, 1)]
    diff = f"--- /dev/null\n+++ b/{name}\n@@ -0,0 +1,{len(body)} @@\n" + "".join(f"+{line}\n" for line in body)
    return diff, (DiffLine("hunk", None, None, "new file (no upstream base)"), *lines), len(body), 0
