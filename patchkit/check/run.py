"""``patchkit check``: every offline invariant of a deployment, as a list of findings.

Each finding names the file, the line or lockfile field, what is wrong and the
command that fixes it. The checker reads the repository and hashes; it never
writes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit import diffs, sums
from patchkit.cache import BlobStore
from patchkit.findings import CheckResult, Finding
from patchkit.hashing import sha256_bytes, sha256_many
from patchkit.lockfile.model import LOCKFILE_NAME, Lockfile, Patch, PatchKind
from patchkit.lockfile.tomlpos import LineIndex
from patchkit.persist import expected_sums
from patchkit.repo import JOURNAL, MANAGED_DIRS, WORK_DIR, Escape, Repo, gitignored, pending_journal, staging_pid
from patchkit.values import RepoPath

if TYPE_CHECKING:
    from patchkit.importing import handdiffs

REBASE_STATE = f"{WORK_DIR}/rebase/state.json"


@dataclass(frozen=True)
class _Named:
    field: tuple[str | int, ...]
    path: RepoPath
    sha256: str
    owner: str


def base_of_committed(patch: Patch, patch_bytes: bytes, diff_bytes: bytes) -> bytes:
    """The base of a committed overlay: its diff applied in reverse to it, exactly."""
    files = diffs.parse(diff_bytes)
    if len(files) != 1:
        raise diffs.DiffError(1, f"holds {len(files)} file diffs; a patch's diff covers one file")
    return diffs.apply(files[0].reversed(), patch_bytes)


class Checker:
    """Runs every offline check over one repository and its loaded lockfile."""

    def __init__(self, repo: Repo, lock: Lockfile, lock_bytes: bytes, store: BlobStore | None = None) -> None:
        self.repo = repo
        self.lock = lock
        self.lock_bytes = lock_bytes
        self.store = store
        self._index: LineIndex | None = None
        self.result = CheckResult()

    @property
    def index(self) -> LineIndex:
        if self._index is None:  # only findings need lines
            self._index = LineIndex(self.lock_bytes.decode("utf-8"))
        return self._index

    # -- helpers

    def _lock_finding(
        self, code: str, path: tuple[str | int, ...], message: str, fix: str | None, severity: str = "error"
    ) -> None:
        self.result.findings.append(
            Finding(
                code=code,
                file=LOCKFILE_NAME,
                line=self.index.line_of(path),
                field=_field_name(path, self.lock),
                message=message,
                fix=fix,
                severity=severity,
            )
        )

    def _named(self) -> Iterator[_Named]:
        for i, p in enumerate(self.lock.patches):
            if p.file is not None:
                yield _Named(("patches", i, "sha256"), p.file, p.sha256.hex, f"patch '{p.name}'")
            if p.diff is not None:
                yield _Named(("patches", i, "diff", "sha256"), p.diff.file, p.diff.sha256.hex, f"diff of '{p.name}'")
        for key, items in (("tuning", self.lock.tuning), ("artifacts", self.lock.artifacts)):
            for i, a in enumerate(items):
                yield _Named((key, i, "sha256"), a.file, a.sha256.hex, f"{key} '{a.name}'")
        for i, d in enumerate(self.lock.diffs):
            yield _Named(("diffs", i, "sha256"), d.file, d.sha256.hex, "hand-kept diff")

    # -- checks

    def run(self) -> CheckResult:
        if pending_journal(self.repo.root):
            self.result.findings.append(
                Finding(
                    "interrupted-write",
                    JOURNAL,
                    None,
                    "a write of several files was interrupted; the repository is between two states",
                    "finish it: patchkit status",
                )
            )
        if (self.repo.root / REBASE_STATE).exists():
            self.result.findings.append(
                Finding(
                    "rebase-in-progress",
                    REBASE_STATE,
                    None,
                    "a rebase waits for its conflicts to be resolved; the repository is still at the old pin",
                    "patchkit status; then patchkit rebase --continue or --abort",
                    severity="note",
                )
            )
        self._check_lockfile_itself()
        self._check_canonical()
        readable = self._check_files()
        self._check_orphans()
        self._check_targets()
        self._check_bases()
        self._check_diffs(readable)
        self._check_hand_diffs(readable)
        self._check_overlays_have_diffs()
        self._check_sums()
        self._check_compose()
        self._check_mounts()
        self._check_model()
        if self.lock.signing is not None:
            from patchkit.signing.signatures import signature_findings

            self.result.findings.extend(signature_findings(self.repo, self.lock))
        return self.result

    def _check_model(self) -> None:
        """The model pin's manifest (inline or its file) is well formed and matches its pin."""
        if self.lock.model is not None:
            from patchkit.model.findings import format_findings

            self.result.findings.extend(format_findings(self.repo, self.lock, self.index.line_of))

    def _check_hand_diffs(self, readable: dict[str, Path]) -> None:
        """Diffs adopted by ``patchkit import``: they parse, reproduce their files, and are against upstream."""
        if not self.lock.diffs:
            return
        from patchkit.importing import handdiffs

        found = handdiffs.chains(
            self.lock, lambda d: readable[str(d.file)].read_bytes() if str(d.file) in readable else None
        )
        for d in self.lock.diffs:
            rel = str(d.file)
            for e in found.strict.get(rel, []):
                self.result.findings.append(
                    Finding(
                        "diff-invalid",
                        rel,
                        e.line,
                        f"does not parse: {e.message}",
                        "rewrite it canonically: patchkit import --normalize",
                    )
                )
            if d.against == "overlay" and rel in found.first_line:
                self.result.findings.append(
                    Finding(
                        "diff-incremental",
                        rel,
                        found.first_line[rel],
                        "is against an earlier version of the overlay, not against upstream: "
                        "it does not show what the deployment changes",
                        "fold it into one diff against upstream: patchkit import --normalize",
                    )
                )
        by_name = {p.name: p for p in self.lock.patches}
        for name in sorted(found.adds_whole_file):
            p = by_name[name]
            if p.kind is PatchKind.OVERLAY:
                # An overlay (the provenance says upstream has the file) that a diff adds whole.
                self._lock_finding(
                    "diff-new-file",
                    ("patches", self.lock.patches.index(p), "name"),
                    f"overlay '{name}' ({p.file}) exists upstream, but its hand-kept diff adds it as a new "
                    "file (--- /dev/null): the diff hides what the overlay changes",
                    "patchkit import --normalize --fetch rebuilds the diff against upstream at the stated commit",
                )
            else:
                self._check_module_maybe_upstream(p, found)
        for name, chain in found.parts.items():
            p = by_name[name]
            prel = str(p.file)
            if prel not in readable or p.kind is not PatchKind.OVERLAY:
                continue
            undone = handdiffs.undo(readable[prel].read_bytes(), chain)
            for rel, line, why in undone.stale:
                self.result.findings.append(
                    Finding(
                        "diff-stale",
                        rel,
                        line,
                        f"no longer reproduces {prel}: {why}",
                        f"regenerate the diff of '{name}' against upstream (the overlay changed after it was made)",
                    )
                )
            if not undone.stale:
                self.result.diffs_verified += 1

    def _check_module_maybe_upstream(self, p: Patch, found: handdiffs.Chains) -> None:
        """A note for a module only a ``/dev/null`` diff made a module, mounted in an upstream's package tree.

        Offline, nothing tells whether that upstream has the file: if it does, the
        module is an overlay whose diff hides what it changes. A provenance row
        naming the file decides instead, so then nothing is said.
        """
        from patchkit.importing.normalize import maybe_upstream, maybe_upstream_note

        asks = maybe_upstream(self.repo, self.lock, p, found)
        if asks is None:
            return
        rel, line = found.new_file_parts[p.name][0]
        message, fix = maybe_upstream_note(p.name, str(p.file), str(asks[1]), asks[0].name)
        self.result.findings.append(Finding("module-maybe-upstream", rel, line, message, fix, severity="note"))

    def _check_overlays_have_diffs(self) -> None:
        """Every overlay shows reviewers what it changes: a diff to upstream."""
        covered = {n for d in self.lock.diffs for n in d.patches}
        for i, p in enumerate(self.lock.patches):
            if p.kind is not PatchKind.OVERLAY:
                continue
            if p.diff is None and p.name not in covered:
                self._lock_finding(
                    "no-diff",
                    ("patches", i, "name"),
                    f"overlay '{p.name}' ({p.file}) has no diff to upstream: reviewers cannot see what it changes",
                    "state its upstream and full base commit ([patches.origin]), then "
                    "patchkit import --normalize --fetch",
                )
            if p.base is None and p.origin is not None and p.origin.commit and len(p.origin.commit) == 40:
                # A full commit is stated: the base is known, only not pinned ([base]) yet.
                self._lock_finding(
                    "base-unpinned",
                    ("patches", i, "name"),
                    f"overlay '{p.name}': its base is stated ({p.origin.repository or '?'} @ {p.origin.commit[:12]}…"
                    f"{', ' + str(p.origin.path) if p.origin.path else ''}) but not pinned in [base] yet",
                    "patchkit import --normalize pins it (--fetch reads the base from upstream at that commit)",
                    severity="note",
                )
            elif p.base is None and p.origin is not None:
                stated = f" (stated: {p.origin.repository or '?'} {p.origin.commit})" if p.origin.commit else ""
                self._lock_finding(
                    "base-unknown",
                    ("patches", i, "name"),
                    f"overlay '{p.name}': its upstream base is not established{stated}",
                    "patchkit import --normalize rebuilds it from the diffs (--fetch: from upstream at its commit)",
                    severity="note",
                )

    def _check_mounts(self) -> None:
        """Hand-kept compose files (no deploy.toml): every mount's source exists and is pinned at its target."""
        if (self.repo.root / "deploy.toml").exists():
            return
        from patchkit.importing import compose

        compose_files = [a for a in self.lock.artifacts if compose.COMPOSE_NAMES.fullmatch(a.file.pure.name)]
        if not compose_files:
            return
        from patchkit.errors import BadInput

        pinned: dict[str, str | None] = {str(p.file): str(p.target) for p in self.lock.patches if p.file}
        for a in (*self.lock.tuning, *self.lock.artifacts):
            pinned[str(a.file)] = str(a.target) if a.target else None
        for art in compose_files:
            rel = str(art.file)
            try:
                text = self.repo.check_inside(art.file).read_text(encoding="utf-8")
                parsed = compose.read(rel, text)
            except (OSError, UnicodeDecodeError, Escape):
                continue  # reported by the file checks
            except BadInput as e:
                self.result.findings.append(Finding("compose-invalid", rel, None, e.message, e.hint))
                continue
            for m in parsed.mounts:
                src = m.repo_source
                if src is None:
                    continue
                if m.outside:
                    self.result.findings.append(
                        Finding(
                            "mount-outside",
                            rel,
                            m.line,
                            f"mounts {m.source}, which is outside the repository: nothing pins it",
                            "move the file into the repository and pin it, or mount it from an absolute host path",
                        )
                    )
                    continue
                path = self.repo.root / src
                if not path.exists() and not path.is_symlink() and (rule := gitignored(self.repo.root, [src]).get(src)):
                    self.result.findings.append(
                        Finding(
                            "mount-ignored",
                            rel,
                            m.line,
                            f"mounts {m.source} at {m.target}; {src} does not exist and {rule} ignores it: "
                            "it is meant to be absent from the repository (created at run time or on the host)",
                            severity="note",
                        )
                    )
                elif not path.exists() or path.is_symlink():
                    self.result.findings.append(
                        Finding(
                            "mount-missing",
                            rel,
                            m.line,
                            f"mounts {m.source} at {m.target}, but {src} does not exist",
                            f"restore the file (git log -- {src}) or remove the mount",
                        )
                    )
                elif path.is_file() and src not in pinned:
                    self.result.findings.append(
                        Finding(
                            "mount-unpinned",
                            rel,
                            m.line,
                            f"mounts {src}, which the lockfile does not pin (so SHA256SUMS does not list it)",
                            f"pin it: patchkit add {src} --target {m.target}",
                        )
                    )
                elif path.is_file() and pinned[src] not in (None, m.target):
                    self.result.findings.append(
                        Finding(
                            "mount-target",
                            rel,
                            m.line,
                            f"mounts {src} at {m.target}, but the lockfile pins it for {pinned[src]}",
                            "make the compose mount and the lockfile target agree",
                        )
                    )

    def _check_compose(self) -> None:
        """With a deploy.toml, every compose file must be exactly what ``patchkit emit`` writes."""
        if not (self.repo.root / "deploy.toml").exists():
            return
        from patchkit.emit.files import emit_files
        from patchkit.errors import BadInput

        try:
            _, drift = emit_files(self.repo, self.lock, check_only=True, validate_output=False)
        except BadInput as e:
            self.result.findings.append(
                Finding("compose-unchecked", "deploy.toml", None, f"cannot emit the compose files: {e}", e.hint)
            )
            return
        for rel in drift:
            self.result.findings.append(
                Finding(
                    "compose-drift",
                    rel,
                    None,
                    "differs from what patchkit emit writes from lockfile.toml and deploy.toml "
                    "(edited by hand, or the pins moved)",
                    "regenerate it: patchkit emit (edit deploy.toml for service settings)",
                )
            )

    def _check_canonical(self) -> None:
        """The lockfile is in the form patchkit writes, so reviews see only real changes."""
        from patchkit.lockfile.writer import dumps

        canonical = dumps(self.lock).encode()
        if canonical == self.lock_bytes:
            return
        have, want = self.lock_bytes.split(b"\n"), canonical.split(b"\n")
        line = next((i + 1 for i, (a, b) in enumerate(zip(have, want, strict=False)) if a != b), None)
        if line is None:
            line = min(len(have), len(want))
        self.result.findings.append(
            Finding(
                "lockfile-format",
                LOCKFILE_NAME,
                line,
                "is not in canonical form (hand-edited layout, order or comments); the content is valid",
                "rewrite it canonically: patchkit lock",
            )
        )

    def _check_bases(self) -> None:
        """A base older than the pinned upstream silently reverts what upstream fixed since."""
        for i, p in enumerate(self.lock.patches):
            up = self.lock.upstream(p.base.upstream) if p.base is not None else None
            if p.base is None or up is None:
                continue
            if up.source == "wheel" and p.base.version is not None and up.wheel_version is not None:
                field, have, want = "version", p.base.version, up.wheel_version
            elif up.source == "image" and p.base.version is not None and up.version is not None:
                field, have, want = "version", p.base.version, up.version
            elif p.base.commit is not None and up.commit is not None:
                field, have, want = "commit", p.base.commit.short, up.commit.short
            else:
                continue
            if have == want:
                continue
            self._lock_finding(
                "base-outdated",
                ("patches", i, "base", field),
                f"'{p.name}' is based on {p.base.upstream} {have}, but the deployment pins "
                f"{p.base.upstream} {want}: the overlay may revert upstream changes made since",
                (
                    f"move the patch onto the pinned image: patchkit rebase --upstream {p.base.upstream} "
                    f"--onto {up.image_digest}"
                    if up.source == "image"
                    else f"move the patch onto {want}: patchkit rebase --onto {want} --upstream {p.base.upstream}"
                ),
            )

    def _check_files(self) -> dict[str, Path]:
        """Existence, containment and hashes of every pinned file; returns the readable ones."""
        ok: dict[str, Path] = {}
        sizes: dict[Path, int] = {}
        named = list(self._named())
        for n in named:
            rel = str(n.path)
            try:
                ok[rel], st = self.repo.check_inside_stat(n.path)
                sizes[ok[rel]] = st.st_size
            except FileNotFoundError:
                self._lock_finding(
                    "missing",
                    (*n.field[:-1], "file") if n.field[-1] == "sha256" else n.field,
                    f"{rel} ({n.owner}) is pinned but does not exist",
                    f"restore it (git checkout -- {rel}) or drop the entry (patchkit remove)",
                )
            except Escape as e:
                self.result.findings.append(
                    Finding("unsafe-path", rel, None, f"{rel} ({n.owner}) {e}", "replace it with a regular file")
                )
        hashes = sha256_many(ok.values(), sizes=sizes)
        self.result.files_hashed = len(hashes)
        for n in named:
            rel = str(n.path)
            if rel not in ok:
                continue
            got = hashes[ok[rel]]
            if isinstance(got, OSError):
                self.result.findings.append(Finding("unreadable", rel, None, f"cannot read: {got.strerror}"))
                del ok[rel]
                continue
            if got != n.sha256:
                self._lock_finding(
                    "hash-mismatch",
                    n.field,
                    f"{rel} ({n.owner}) does not match its pin: pinned {n.sha256[:12]}…, file has {got[:12]}…",
                    "if the change is intended: patchkit lock; if not: git checkout -- " + rel,
                )
        return ok

    def _check_lockfile_itself(self) -> None:
        """lockfile.toml must be a regular file of the repository, like every file it pins."""
        try:
            self.repo.check_inside(LOCKFILE_NAME)
        except Escape as e:
            self.result.findings.append(
                Finding(
                    "unsafe-path",
                    LOCKFILE_NAME,
                    None,
                    f"{LOCKFILE_NAME} {e}",
                    'replace the link with the lockfile itself (cp --remove-destination "$(readlink -f '
                    'lockfile.toml)" lockfile.toml)',
                )
            )
        except FileNotFoundError:
            pass

    def _check_orphans(self) -> None:
        named = {str(n.path) for n in self._named()}
        for top in MANAGED_DIRS:
            base = self.repo.root / top
            if not base.is_dir() or base.is_symlink():
                if base.is_symlink():
                    self.result.findings.append(
                        Finding("unsafe-path", top, None, f"{top}/ is a symlink", "make it a real directory")
                    )
                continue
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames.sort()
                for name in sorted(dirnames + filenames):
                    path = Path(dirpath) / name
                    rel = self.repo.rel(path)
                    st = path.lstat()
                    if stat.S_ISLNK(st.st_mode):
                        if rel in named:
                            continue  # reported by the file check
                        inside = path.resolve().is_relative_to(self.repo.root)
                        where = "inside" if inside else "outside"
                        self.result.findings.append(
                            Finding(
                                "unsafe-path",
                                rel,
                                None,
                                f"{rel} is a symlink to {os.readlink(path)} ({where} the repository) and is not pinned",
                                "delete the link; commit the file itself and pin it with patchkit add",
                            )
                        )
                    elif stat.S_ISREG(st.st_mode) and rel not in named:
                        if staging_pid(name) is not None:
                            self.result.findings.append(
                                Finding(
                                    "interrupted-write",
                                    rel,
                                    None,
                                    f"{rel} is a file patchkit staged for a write that was interrupted",
                                    "finish or clean up the interrupted write: patchkit status",
                                )
                            )
                            continue
                        self.result.findings.append(
                            Finding(
                                "orphan",
                                rel,
                                None,
                                f"{rel} is not named by the lockfile",
                                f"pin it (patchkit add {rel} --target …) or delete it",
                            )
                        )
                    elif not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
                        self.result.findings.append(
                            Finding(
                                "orphan",
                                rel,
                                None,
                                f"{rel} is a {_special_kind(st.st_mode)}, not a file; nothing can pin it",
                                f"delete it (rm {rel})",
                            )
                        )

    def _check_targets(self) -> None:
        claimed: dict[str, tuple[str | int, ...]] = {}
        owners: list[tuple[tuple[str | int, ...], str]] = []
        for i, p in enumerate(self.lock.patches):
            owners.append((("patches", i, "target"), str(p.target)))
        for key, items in (("tuning", self.lock.tuning), ("artifacts", self.lock.artifacts)):
            for i, a in enumerate(items):
                if a.target is not None:
                    owners.append(((key, i, "target"), str(a.target)))
        files_at = {target: path for path, target in reversed(owners)}  # the first claim of each
        for path, target in owners:
            outer = next((d for d in _parent_dirs(target) if d in files_at), None)
            if outer is not None:
                self._lock_finding(
                    "nested-target",
                    path,
                    f"target {target} lies below {outer}, which {_field_name(files_at[outer], self.lock)} "
                    "mounts as a file",
                    "give each file a target that is not below another file's target",
                )
            if target in claimed:
                first = _field_name(claimed[target], self.lock)
                self._lock_finding(
                    "duplicate-target",
                    path,
                    f"target {target} is already claimed by {first}",
                    "give each file its own container target (edit lockfile.toml or patchkit remove one)",
                )
            else:
                claimed[target] = path

    def _check_diffs(self, readable: dict[str, Path]) -> None:
        for i, p in enumerate(self.lock.patches):
            if p.diff is None:
                continue
            drel = str(p.diff.file)
            if drel not in readable:
                continue
            data = readable[drel].read_bytes()
            if not data:
                self._check_identical(i, p)
                continue
            try:
                files = diffs.parse(data)
            except diffs.DiffError as e:
                for bad in _every_bad_hunk(data, e):
                    self.result.findings.append(
                        Finding(
                            "diff-invalid",
                            drel,
                            bad.line,
                            f"diff of '{p.name}' does not parse: {bad.message}",
                            f"regenerate it: patchkit diff --write {p.name}",
                        )
                    )
                continue
            if len(files) != 1:
                self.result.findings.append(
                    Finding(
                        "diff-invalid",
                        drel,
                        files[1].line,
                        f"diff of '{p.name}' covers {len(files)} files; a patch's diff covers its one base file",
                        f"split it, then patchkit diff --write {p.name}",
                    )
                )
                continue
            fd = files[0]
            if p.base is not None:
                want = str(p.base.path)
                old, new = diffs.strip_prefix(fd.old_path), diffs.strip_prefix(fd.new_path)
                if old != want or new != want:
                    self.result.findings.append(
                        Finding(
                            "diff-header",
                            drel,
                            fd.line,
                            f"diff headers name {fd.old_path!s} / {fd.new_path!s}; the base is {want} "
                            f"(expected a/{want} and b/{want})",
                            f"regenerate it: patchkit diff --write {p.name}",
                        )
                    )
            self._verify_reconstruction(i, p, fd, readable)

    def _check_identical(self, i: int, p: Patch) -> None:
        """An empty diff: the patch is its base, byte for byte (upstream took the whole change)."""
        if p.base is None:
            return
        if p.base.sha256 != p.sha256:
            self._lock_finding(
                "base-mismatch",
                ("patches", i, "base", "sha256"),
                f"the diff of '{p.name}' is empty, so the patch must equal its base, but sha256 "
                f"{p.sha256.short}… is not the base's {p.base.sha256.short}…",
                f"regenerate the diff: patchkit diff --write {p.name}",
            )
            return
        self.result.diffs_verified += 1
        self._lock_finding(
            "upstreamed",
            ("patches", i, "name"),
            f"'{p.name}' is identical to upstream {p.base.path}: upstream has the whole change",
            f"drop it: patchkit remove {p.name}",
            severity="note",
        )

    def _verify_reconstruction(self, i: int, p: Patch, fd: diffs.FileDiff, readable: dict[str, Path]) -> None:
        drel = str(p.diff.file) if p.diff else ""
        if p.kind is not PatchKind.OVERLAY or p.base is None:
            return
        if p.file is not None:
            prel = str(p.file)
            if prel not in readable:
                return
            try:
                base = diffs.apply(fd.reversed(), readable[prel].read_bytes())
            except diffs.ApplyError as e:
                self.result.findings.append(
                    Finding(
                        "diff-stale",
                        drel,
                        e.line,
                        f"diff no longer matches the overlay {prel}: {e.message}",
                        "regenerate the diff from the base: patchkit lock (after an intended edit of the "
                        f"overlay) or patchkit diff --write {p.name}",
                    )
                )
                return
            got = sha256_bytes(base)
            if got != p.base.sha256.hex:
                self._lock_finding(
                    "base-mismatch",
                    ("patches", i, "base", "sha256"),
                    f"reversing {drel} on {prel} gives a base with sha256 {got[:12]}…, "
                    f"not the pinned base {p.base.sha256.short}…",
                    f"regenerate the diff against the pinned base: patchkit diff --write {p.name}",
                )
                return
            self.result.diffs_verified += 1
            return
        # Diff-only: the file that runs is base + diff; verifiable when the base is at hand.
        base_bytes = self.store.get(p.base.sha256.hex) if self.store else None
        if base_bytes is None:
            self._lock_finding(
                "base-unavailable",
                ("patches", i, "base"),
                f"diff-only patch '{p.name}': base {p.base.path} is not in the local cache, "
                "so the materialized file's sha256 was not recomputed",
                "fetch the base and verify the file that runs: patchkit materialize",
                severity="note",
            )
            return
        try:
            materialized = diffs.apply(fd, base_bytes)
        except diffs.ApplyError as e:
            self.result.findings.append(
                Finding("diff-stale", drel, e.line, f"diff does not apply to the pinned base: {e.message}")
            )
            return
        got = sha256_bytes(materialized)
        if got != p.sha256.hex:
            self._lock_finding(
                "hash-mismatch",
                ("patches", i, "sha256"),
                f"base + {drel} gives sha256 {got[:12]}…, not the pinned {p.sha256.short}…",
                "if the diff change is intended: patchkit lock",
            )
            return
        self.result.diffs_verified += 1

    def _check_sums(self) -> None:
        try:
            actual: bytes | None = self.repo.check_inside(sums.FILENAME).read_bytes()
        except FileNotFoundError:
            actual = None
        except Escape as e:
            self.result.findings.append(
                Finding("unsafe-path", sums.FILENAME, None, f"{sums.FILENAME} {e}", "make it a regular file")
            )
            return
        self.result.findings.extend(sums_findings(self.lock, self.lock_bytes, actual, self.repo.root))


def sums_findings(lock: Lockfile, lock_bytes: bytes, actual: bytes | None, root: Path | None = None) -> list[Finding]:
    """How the SHA256SUMS bytes ``actual`` (None: missing) differ from what patchkit generates.

    With the repository ``root``, an entry for a file that does not exist says so.
    """
    fix = "regenerate it: patchkit sums"
    if actual is None:
        return [Finding("sums-missing", sums.FILENAME, None, "does not exist", fix)]
    expected = expected_sums(lock, lock_bytes)
    if actual == expected:
        return []
    out: list[Finding] = []
    got = sums.read(actual)
    have = got.entries
    for pr in got.malformed:
        out.append(Finding("sums-drift", sums.FILENAME, pr.line, pr.message, fix))
    # A line sha256sum accepts still lists its file: one note, never a second finding.
    for pr in got.noncanonical:
        out.append(Finding("sums-format", sums.FILENAME, pr.line, pr.message, fix, severity="note"))
    want, _ = sums.parse(expected)
    want_by = {w.name: w for w in want}
    have_by = {h.name: h for h in have}
    for h in have:
        w = want_by.get(h.name)
        if w is None:
            gone = " (and which does not exist)" if root is not None and not (root / h.name).exists() else ""
            out.append(
                Finding(
                    "sums-drift", sums.FILENAME, h.line, f"lists {h.name}, which the lockfile does not pin{gone}", fix
                )
            )
        elif w.sha256 != h.sha256:
            now = "the lockfile now has" if h.name == LOCKFILE_NAME else "the lockfile pins"
            message = f"lists {h.name} as {h.sha256[:12]}…, but {now} {w.sha256[:12]}…"
            out.append(Finding("sums-drift", sums.FILENAME, h.line, message, fix))
    for w in want:
        if w.name not in have_by:
            out.append(Finding("sums-drift", sums.FILENAME, None, f"does not list {w.name}", fix))
    if not any(f.severity == "error" for f in out) and [h.name for h in have] != [w.name for w in want]:
        out.append(
            Finding(
                "sums-drift",
                sums.FILENAME,
                None,
                "lists its files in another order than patchkit writes, or one of them twice",
                fix,
            )
        )
    elif not out:
        out.append(
            Finding("sums-drift", sums.FILENAME, None, "differs from what patchkit generates (order or format)", fix)
        )
    return out


def _every_bad_hunk(data: bytes, first: diffs.DiffError) -> list[diffs.DiffError]:
    """Every bad hunk of a diff that does not parse strictly, as ``patch`` would read it; else the first error."""
    try:
        _, repairs = diffs.parse_lenient(data)
    except diffs.DiffError:
        return [first]
    return repairs or [first]


def check_pinned_files(repo: Repo, lock: Lockfile, lock_bytes: bytes) -> CheckResult:
    """Only the existence, containment and hash checks of the pinned files."""
    checker = Checker(repo, lock, lock_bytes)
    checker._check_files()
    return checker.result


def _parent_dirs(target: str) -> list[str]:
    """``/a/b/c`` -> ``['/a', '/a/b']``: the directories a container path lies in."""
    parts = target.split("/")
    return ["/".join(parts[:i]) for i in range(2, len(parts))]


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _field_name(path: tuple[str | int, ...], lock: Lockfile) -> str:
    """``patches[kv-fence].base.sha256``: indices shown as the entry's name where it has one."""
    out = ""
    collection: tuple[object, ...] | None = None
    for part in path:
        if isinstance(part, int):
            item = collection[part] if collection is not None and part < len(collection) else None
            label = getattr(item, "name", None)
            out += f"[{label}]" if label else f"[{part}]"
            collection = None
        else:
            out += ("." if out else "") + part
            collection = getattr(lock, part, None) if out == part else None
            if not isinstance(collection, tuple):
                collection = None
    return out


def check(repo: Repo, lock: Lockfile, lock_bytes: bytes, store: BlobStore | None = None) -> CheckResult:
    """Run every offline invariant over ``repo``; never writes."""
    return Checker(repo, lock, lock_bytes, store).run()
