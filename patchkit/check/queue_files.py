"""Rules about the files a patch queue is read from: its top-level locks, its profile lists, its upstream's source.

``patchkit import`` reads a patch queue's order, profiles and pins from the
repository's own files (``importing/queue.py``) and reports what they get
wrong; these rules read the same files the same way on every check of a
lockfile import wrote with a series, so each report stays while it holds: a
top-level lock that does not parse or pins an upstream by an abbreviated
commit (``queue-lock``), a profile list naming a patch file that does not
exist (``queue-profile``), a series whose upstream states no repository
(``queue-url-unknown``: until the lockfile's upstream has ``git``), a series
whose order nothing states or whose profiles apply it in different orders
(``queue-order``).
"""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING

from patchkit.check.build_steps import imported
from patchkit.check.state import RepoView, State
from patchkit.core.findings import Finding
from patchkit.core.values import LOCKFILE_NAME
from patchkit.errors import BadInput
from patchkit.lockfile.model import GitUpstream
from patchkit.lockfile.series import Series

if TYPE_CHECKING:
    from patchkit.importing import shell

_NUMBERED = re.compile(r"\d+[-_]")


def queue_files(state: State) -> list[Finding]:
    """The lock, profile and upstream problems import reports of a patch queue, read again while they hold."""
    lock = state.lock
    if not lock.series or not imported(lock) or not isinstance(state.view, RepoView):
        return []
    from patchkit.importing import queue

    root = state.view.repo.root
    files = [str(p.file) for s in lock.series for p in s.patches]
    try:
        # Import read the locks before it wrote lockfile.toml, whose own pins are no lock of the repository's.
        issues = [i for i in queue.lock_issues(root) if i[0] == "queue-lock" and i[1] != LOCKFILE_NAME]
        issues += queue.profile_issues(root, files)
    except (BadInput, OSError):
        issues = []  # a lock or profile that is no regular file of the repository: the file rules say so when pinned
    out = [Finding(kind, file, line, message, fix) for kind, file, line, message, fix in issues]
    reading = state.view.build_reading
    if not isinstance(reading, str):  # unreadable: build_steps says so
        out += [f for s in lock.series if s.series_file is None for f in _order(state, s, reading)]
    return out + _no_source(state)


def _here(s: Series) -> str:
    """The series' directory, as the build and import name it (``patches/vllm``)."""
    return posixpath.dirname(posixpath.commonprefix(sorted(str(p.file) for p in s.patches))) or "."


def _order(state: State, s: Series, reading: shell.Reading) -> list[Finding]:
    """A series without a series file: the build's profiles apply it in one order, and something states it.

    As import reads it (``queue-order``): profiles applying the patches in
    different orders; or no series file, no readable step and no numeric
    prefix stating the order, which import then took by name. A step that
    cannot be read is ``build-step-unknown``'s.
    """
    from patchkit.importing import queue

    here, files = _here(s), [str(p.file) for p in s.patches]
    if any(a.repo in files for a in reading.applies):
        return [Finding(*i) for i in queue.order_issues(here, files, reading)]
    numbered = all(_NUMBERED.match(posixpath.basename(f)) for f in files)
    if reading.unknowns or numbered or state.view.kind(f"{here}/series") == "file":
        return []
    return [
        Finding(
            "queue-order",
            here,
            None,
            "no series file, build step or numeric prefix states the order; the lockfile took it by name",
            f"write {here}/series",
        )
    ]


def _no_source(state: State) -> list[Finding]:
    """Each series whose git upstream states no repository to fetch it from: nothing can apply or rebase it."""
    out = []
    for s in state.lock.series:
        up = state.lock.upstream(s.upstream)
        if not isinstance(up, GitUpstream) or up.git is not None:
            continue
        out.append(
            Finding(
                "queue-url-unknown",
                _here(s),
                None,
                f"no lock or build file states where {s.upstream} comes from, and the lockfile does not either",
                f"set upstreams.{s.upstream}.git in lockfile.toml to its repository's URL",
            )
        )
    return out
