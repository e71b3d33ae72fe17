"""Rules about how a hand-kept build applies its patches: the steps and patcher scripts import could not read.

``patchkit import`` reads the repository's Containerfiles and build scripts
statically (``importing/shell.py``) and the patcher scripts it runs
(``importing/patchers.py``). What that reading could not settle it reports,
and these rules read the same files the same way on every check, so each
report stays while it holds and goes once the file is fixed: a step that
may apply patches and cannot be read (``build-step-unknown``, a note), a
pinned patch file whether such a step applies is unknown
(``queue-apply-unknown``, a note), a series applied with several ``-p``
levels or none (``queue-strip``), a patcher whose target is built at run
time (``patcher-target-unknown``, a note) or that replaces text without
checking it is there (``patcher-not-anchored``), a transformer a compose file
mounts that nothing runs (``transformer-not-run``), a patcher a queue's
build runs from outside the image (``patcher-outside-image``), with what is
unknown or unanchored in it as for a pinned one.

The patcher rules read every pinned transformer, in any deployment: a
transformer patchkit's own deployment ships is a patcher script like any
other, and the static reading (``importing/patchers.py``) reads the
forms a careful one is written in (a target found from the installed
package, an edit checked fail-closed). The build-step rules and ``transformer-not-run`` read only a
lockfile ``import`` wrote (one with a file an image build delivers, a patch
origin, a hand-kept diff, or a series beside its pinned build files): a
deployment patchkit built itself has no hand-kept build for them to read.
"""

from __future__ import annotations

import posixpath
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from patchkit.check.state import RepoView, State
from patchkit.core.findings import Finding
from patchkit.lockfile.model import Lockfile, PatchKind

if TYPE_CHECKING:
    from patchkit.importing import compose, patchers, shell

# Notes of import's (``adopt.NOTES``): the kinds these rules report that are not defects.
_NOTES = frozenset({"build-step-unknown", "queue-apply-unknown", "patcher-target-unknown"})
_IMPORTED_NOTES = frozenset({"compose", "image build", "lock"})
_DIFF_SUFFIXES = (".patch", ".diff")


def build_steps(state: State) -> list[Finding]:
    """Import's problems with the build's patch steps and patcher scripts, read again while they hold."""
    out = patcher_findings(state)
    if not imported(state.lock):
        return out  # the build rules read a hand-kept build
    out += not_run(state)
    if not isinstance(state.view, RepoView):
        return out  # the build's files are read from the repository on disk
    reading = state.view.build_reading
    if isinstance(reading, str):
        return [*out, _unreadable(reading)]
    out += step_findings(state.lock, reading)
    return out + outside_image(state.lock, state.view.build_patchers)


def _unreadable(why: str) -> Finding:
    """A build file that cannot be read safely: nothing of the build is read, and that is said, on that file."""
    file, sep, rest = why.partition(": ")
    if not sep or " " in file:
        file, rest = "lockfile.toml", why
    return Finding(
        "build-step-unknown",
        file,
        None,
        f"no build file is read, so how the build applies patches is unknown: {rest}",
        "make it a regular file inside the repository, or remove it",
        severity="note",
    )


def imported(lock: Lockfile) -> bool:
    """Whether ``lock`` describes a hand-kept build ``patchkit import`` read (see the module's docstring)."""
    if lock.diffs or any(a.note in _IMPORTED_NOTES for a in lock.artifacts):
        return True
    if any(p.build is not None or p.origin is not None for p in lock.patches):
        return True
    return bool(lock.series) and any(_build_file(str(a.file)) for a in lock.artifacts)


def _build_file(rel: str) -> bool:
    name = PurePosixPath(rel).name
    return name.startswith(("Containerfile", "Dockerfile")) or name.endswith(".sh")


def _finding(issue: tuple[str, str, int | None, str, str | None]) -> Finding:
    kind, file, line, message, fix = issue
    return Finding(kind, file, line, message, fix, severity="note" if kind in _NOTES else "error")


def patcher_findings(state: State) -> list[Finding]:
    """Each pinned transformer that is a patcher script: a target it builds at run time, an edit it does not anchor."""
    from patchkit.importing import patchers

    out = []
    for p in state.lock.patches:
        if p.kind is not PatchKind.TRANSFORMER or p.file is None:
            continue
        data = state.readable(str(p.file))  # None: missing or changed, which the file rules report
        patcher = patchers.read(data) if data is not None else None
        if patcher is not None:
            out += [_finding(i) for i in patchers.issues(patcher, str(p.file))]
    return out


def not_run(state: State) -> list[Finding]:
    """Each transformer a hand-kept compose file mounts that neither a compose command nor a mounted script runs.

    The same question import asks (``adopt.runs_script``) of the same texts:
    the compose files' commands, entrypoints and environment, and the scripts
    they mount (the artifacts with a target). A mounted script that cannot be
    read leaves the answer unknown, and nothing is said (the file rules report it).
    """
    from patchkit.importing.adopt import runs_script

    composes = state.hand_composes
    texts = [t for cf in composes for t in cf.texts]
    for a in state.lock.artifacts:
        if a.target is not None:
            data = state.readable(str(a.file))
            if data is None:
                return []
            texts.append(data.decode("utf-8", "replace"))
    out = []
    for p in state.lock.patches:
        if p.kind is not PatchKind.TRANSFORMER or p.file is None or any(runs_script(str(p.target), t) for t in texts):
            continue
        mount = _mount_of(str(p.file), composes)
        if mount is not None:
            out.append(
                Finding(
                    "transformer-not-run",
                    mount.compose,
                    mount.line,
                    f"{p.file} is mounted at {p.target}, but neither the compose command nor a mounted script runs it",
                    "run it from the entrypoint, or remove the mount",
                )
            )
    return out


def _mount_of(rel: str, composes: list[compose.ComposeFile]) -> compose.Mount | None:
    """The first mount that puts ``rel`` in the container (the file itself, or a directory holding it), as import
    takes the first."""
    for cf in composes:
        for m in cf.mounts:
            src = m.repo_source
            if src is not None and not m.outside and (rel == src or rel.startswith(src.rstrip("/") + "/")):
                return m
    return None


def outside_image(lock: Lockfile, runs: list[patchers.Run]) -> list[Finding]:
    """Each patcher script a patch queue's build runs from outside the image (``patcher-outside-image``), with what is
    unknown or unanchored in it as for a pinned one.

    Import reports it where it reads a queue alone (no compose file, no
    build-delivered file beside it): such a patcher has no path in the image
    to pin, so it is not pinned, and only the build's reading finds it again.
    """
    if not lock.series or any(a.note == "compose" for a in lock.artifacts) or any(p.build for p in lock.patches):
        return []
    from patchkit.importing import patchers

    pinned = {str(p.file) for p in lock.patches if p.file is not None}
    out = []
    for run in (r for r in runs if r.target is None):
        out.append(
            Finding(
                "patcher-outside-image",
                run.file,
                run.line,
                f"runs the patcher {run.rel} from outside the image, so it has no path in it to pin",
                "COPY it into the image and run it there",
            )
        )
        if run.rel not in pinned:  # a pinned one's are patcher_findings'
            pinned.add(run.rel)
            out += [_finding(i) for i in patchers.issues(run.patcher, run.rel)]
    return out


def step_findings(lock: Lockfile, reading: shell.Reading) -> list[Finding]:
    """What the static reading of the build leaves unknown or finds inconsistent, for the files ``lock`` pins."""
    from patchkit.importing import queue

    out = [
        Finding(
            "build-step-unknown",
            u.file,
            u.line,
            f"a build step that may apply patches cannot be read statically: {u.reason}",
            "write it in a form import reads (docs/import.md)",
            severity="note",
        )
        for u in reading.unknowns
    ]
    applied = {a.repo for a in reading.applies if a.repo is not None}
    if reading.unknowns:
        u = reading.unknowns[0]
        out += [
            Finding(
                "queue-apply-unknown",
                u.file,
                u.line,
                f"whether {rel} is applied is unknown: {u.reason}",
                "write the step in a form import reads (docs/import.md), or list the order in a series file",
                severity="note",
            )
            for rel in _maybe_applied(lock)
            if rel not in applied
        ]
    out += [_finding(i) for i in queue.edit_issues(reading)]
    out += [_finding(i) for i in queue.outside_issues(reading)]
    for s in lock.series:
        files = {str(p.file) for p in s.patches}
        applies = [a for a in reading.applies if a.repo in files]
        if applies:
            here = posixpath.dirname(posixpath.commonprefix(sorted(files))) or "."
            out += [_finding(i) for i in queue.strip_issues(here, applies)]
    return out


def _maybe_applied(lock: Lockfile) -> list[str]:
    """Pinned patch files whose application only the build states: series without a series file, and the
    diffs import pinned as artifacts because an unreadable step may apply them."""
    out = [str(p.file) for s in lock.series if s.series_file is None for p in s.patches]
    out += [str(a.file) for a in lock.artifacts if str(a.file).endswith(_DIFF_SUFFIXES)]
    return list(dict.fromkeys(out))
