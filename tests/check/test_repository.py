"""check's repository rules over a state in memory: pending writes, unsafe paths, orphans."""

from __future__ import annotations

import stat

from patchkit.check import repository
from patchkit.check.state import TreeEntry

from .memory import overlay_repo, state_of


def test_an_interrupted_write_and_a_pending_rebase() -> None:
    state = state_of(*overlay_repo())
    assert repository.pending(state) == []
    state.journal_pending = state.rebase_pending = True
    found = repository.pending(state)
    assert [(f.code, f.file, f.severity) for f in found] == [
        ("interrupted-write", ".patchkit/journal.json", "error"),
        ("rebase-in-progress", ".patchkit/rebase/state.json", "note"),
    ]


def test_a_symlinked_lockfile_is_unsafe() -> None:
    state = state_of(*overlay_repo())
    state.lockfile_unsafe = "is a symlink"
    [f] = repository.lockfile_itself(state)
    assert (f.code, f.file, f.message) == ("unsafe-path", "lockfile.toml", "lockfile.toml is a symlink")


def test_what_the_lockfile_does_not_name_below_the_managed_directories() -> None:
    state = state_of(*overlay_repo())
    state.symlinked_dirs = ["tuning"]
    state.tree += [
        TreeEntry("patches/link.py", "symlink", stat.S_IFLNK, "/etc/passwd", link_inside=False),
        TreeEntry("patches/stray.py", "file", stat.S_IFREG),
        TreeEntry("patches/.patchkit-tmp-12-mod.py.x.tmp", "file", stat.S_IFREG, staged=True),
        TreeEntry("upstream/fifo", "special", stat.S_IFIFO),
        TreeEntry("upstream/sub", "dir", stat.S_IFDIR),
    ]
    found = repository.orphans(state)
    assert [(f.code, f.file) for f in found] == [
        ("unsafe-path", "tuning"),
        ("unsafe-path", "patches/link.py"),
        ("orphan", "patches/stray.py"),
        ("interrupted-write", "patches/.patchkit-tmp-12-mod.py.x.tmp"),
        ("orphan", "upstream/fifo"),
    ]
    assert found[1].message == "patches/link.py is a symlink to /etc/passwd (outside the repository) and is not pinned"
    assert found[4].message == "upstream/fifo is a named pipe (FIFO), not a file; nothing can pin it"
