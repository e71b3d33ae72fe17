"""The trusted-rebase checks applied per patch of a series: semantic checks of what it produces, interdiffs.

A series rebase merges file by file like ``git am -3``; a clean text merge can still drop an
import the file uses. Once every patch has merged, each Python file each patch produced is
checked by :mod:`patchkit.trust.semantic` against its two inputs (the file with the old patch,
the new upstream's file with the earlier patches rebased); its imports of the upstream's own
package are resolved in the new upstream tree with the whole rebased series laid over it, since
that is what runs. A blocking problem makes the patch ``broken``.

The interdiff of each regenerated patch is computed file by file (:mod:`patchkit.trust.interdiff`):
the old patch's hunks of a file against the new patch's, pure moves suppressed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from patchkit.series.apply import Item, Reader
from patchkit.series.parse import parse_patch
from patchkit.series.rebase import PatchOutcome, PatchRebase
from patchkit.trust import semantic
from patchkit.trust.imports import Tree
from patchkit.trust.interdiff import compare_hunks


def mark_broken(
    patches: Sequence[PatchRebase],
    new_read: Reader,
    new_state: Mapping[str, bytes | None],
    old_read: Reader,
    old_state: Mapping[str, bytes | None],
    accept: Mapping[str, str],
) -> None:
    """Check every file the patches produced; a patch with a blocking problem becomes ``broken``.

    ``new_state`` and ``old_state`` are the files the series touches in the new tree as
    rebased and in the old tree with the old patches: laid over the trees the imports are
    resolved in. A broken patch named in ``accept`` keeps its reason and is committed.
    """
    produced: list[semantic.Produced] = []
    where: dict[str, tuple[PatchRebase, str, bytes]] = {}
    for i, r in enumerate(patches):
        for j, f in enumerate(r.produced):
            key = f"{i}/{j}"  # one key per file: the problems of each file are told apart
            where[key] = (r, f.path, f.merged)
            produced.append(semantic.Produced(key, f.path, f.merged, f.ours, f.theirs, f.base))
    if not produced:
        return
    found = semantic.check(produced, Tree(new_read, _overlay(new_state)), lambda: Tree(old_read, _overlay(old_state)))
    for key, problems in found.items():
        r, path, merged = where[key]
        r.problems[path] = r.problems.get(path, ()) + problems
        if semantic.blocking(problems):
            r.broken[path] = merged
    for r in patches:
        if r.broken:
            r.outcome = PatchOutcome.BROKEN
            r.accepted = accept.get(r.name)


def _overlay(state: Mapping[str, bytes | None]) -> dict[str, bytes | Callable[[], bytes | None]]:
    """The series' files as a tree overlay; a file the series deletes reads as absent."""
    return {p: (data if data is not None else _absent) for p, data in state.items()}


def _absent() -> None:
    return None


def interdiffs(it: Item, r: PatchRebase) -> None:
    """How each file's hunks of the patch changed (old patch against regenerated), pure moves left out."""
    if r.new_bytes is None:
        return
    new = parse_patch(r.new_bytes, it.file)
    old_files = {c.new_path or c.old_path or "": c for c in it.patch.files}
    new_files = {c.new_path or c.old_path or "": c for c in new.files}
    for path in dict.fromkeys([*old_files, *new_files]):
        a, b = old_files.get(path), new_files.get(path)
        found = compare_hunks(
            a.diff.hunks if a is not None and a.diff is not None else (),
            b.diff.hunks if b is not None and b.diff is not None else (),
        )
        if not found.empty:
            r.interdiffs[path] = found
