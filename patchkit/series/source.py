"""The upstream tree a series applies to, read offline when it can be: the check's and the rebase's reader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from patchkit.errors import PatchkitError
from patchkit.lockfile.model import DirUpstream, GitUpstream, Lockfile
from patchkit.lockfile.series import Series
from patchkit.series.apply import Reader
from patchkit.sources.context import Context


def offline_tree(lock: Lockfile, cache: Path, repo_root: Path) -> Callable[[Series], Reader | str]:
    """A ``tree_for`` for the check: each series' upstream at its pin, or the reason it cannot be read offline."""

    def tree_for(s: Series) -> Reader | str:
        up = lock.upstream(s.upstream)
        if up is None:
            return f"upstream '{s.upstream}' is not declared; not applied"
        pin = str(s.commit) if s.commit is not None else s.version
        if isinstance(up, GitUpstream) and up.git is not None and s.commit is not None:
            from patchkit.sources.git import GitSource

            source = GitSource(up.git, cache)  # the cache only: no fetch, so no progress
            local = up.git.startswith(("file://", "/")) or Path(up.git).is_dir()
            if not (local or source.cached(str(s.commit))):
                return (
                    f"upstream '{up.name}' at {pin} is not in the cache, so the series was not applied offline; "
                    f"patchkit rebase --series {s.name} --onto {pin} fetches it"
                )
            try:
                return source.snapshot(str(s.commit)).read
            except PatchkitError as e:
                return f"upstream '{up.name}' at {pin} could not be read ({e.message}); not applied"
        if isinstance(up, DirUpstream) and up.dir is not None:
            from patchkit.sources.factory import open_source

            try:
                return open_source(up, Context(cache), repo_root).snapshot("").read  # a directory: no client
            except PatchkitError as e:
                return f"upstream '{up.name}' could not be read ({e.message}); not applied"
        return f"upstream '{up.name}' ({up.source}) is not read offline by check; not applied"

    return tree_for
