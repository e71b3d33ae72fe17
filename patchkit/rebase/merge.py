"""Three-way rebase of patched files onto new upstream files: git merges, patchkit reads the result.

Rebasing a patch merges three versions of one file: *base*, the upstream file
the patch was made against; *ours*, the patched file; *theirs*, the same path
at the new upstream revision. :func:`rebase_files` takes any number of such
triples as bytes and returns, for each, what happened (an :class:`Outcome`),
the merged bytes, every conflict with its line numbers, which of the patch's
hunks upstream has taken, and where a clean merge still deserves a human look.
It writes nothing the caller sees, so the rebase command can plan a whole bump
before it writes anything.

The merge is git's own (merge-ort, through :mod:`patchkit.vcs.gitmerge`): the
merged bytes and the clean or conflict status are those of ``git merge-tree
--write-tree`` (and of ``git cherry-pick``) with ``merge.conflictStyle=diff3``,
for every input, in a handful of git processes per batch. Conflict markers are
git's with patchkit's labels (:data:`OURS_MARKER` and the others). What
patchkit adds on top is read from the three versions and git's result: which
of the patch's hunks (as ``patchkit.core.diffs.make`` writes them) went upstream,
and the review flags of the Python analysis below.
"""

from __future__ import annotations

import ast
import re
import warnings
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from patchkit.core.diffs import line_matcher, split_lines
from patchkit.core.fanout import map_items
from patchkit.errors import BadInput
from patchkit.vcs import gitmerge

#: The conflict markers written into a conflicted file, diff3 style (the base section included).
OURS_MARKER = b"<<<<<<< ours (patch)"
BASE_MARKER = b"||||||| base"
SEPARATOR = b"======="
THEIRS_MARKER = b">>>>>>> theirs (upstream)"
_LABELS = gitmerge.Labels(OURS_MARKER[8:], BASE_MARKER[8:], THEIRS_MARKER[8:])

#: Lines of unchanged context around each hunk, as in the diffs patchkit writes.
CONTEXT = 3


class Outcome(Enum):
    """What rebasing one patch onto a new upstream found.

    :func:`rebase_file` decides the content outcomes; ``MOVED`` and ``DELETED``
    are for the caller, which learns from the upstream source that the path
    was renamed or is gone, and ``BROKEN`` too: a merge that fails the
    semantic checks (``patchkit.trust.semantic``).
    """

    CLEAN = "clean"
    CONFLICT = "conflict"
    UPSTREAMED = "upstreamed"
    PARTIALLY_UPSTREAMED = "partially-upstreamed"
    UNCHANGED = "unchanged"
    MOVED = "moved"
    DELETED = "deleted"
    BROKEN = "broken"


class BinaryFileError(BadInput):
    """One of the three versions holds a NUL byte: patchkit merges text files only."""


@dataclass(frozen=True)
class LineRange:
    """Lines ``start`` to ``end`` of one file, 1-based and inclusive.

    An empty range has ``end == start - 1``: it is the position just before
    line ``start``, where lines were inserted or deleted.
    """

    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start + 1

    def unified(self) -> str:
        """The range as a unified diff hunk header writes it: ``10,3``, ``10`` for one line, ``9,0`` when empty."""
        if self.count == 1:
            return str(self.start)
        if self.count == 0:
            return f"{self.start - 1},0"
        return f"{self.start},{self.count}"

    def __str__(self) -> str:
        if self.count == 0:
            return f"after line {self.start - 1}"
        if self.count == 1:
            return f"line {self.start}"
        return f"lines {self.start}-{self.end}"


@dataclass(frozen=True)
class Conflict:
    """One conflicting region.

    ``start`` and ``end`` are the lines of the merged output holding the
    ``<<<<<<<`` and ``>>>>>>>`` markers (1-based, inclusive); ``base``,
    ``ours`` and ``theirs`` are the lines each version had there.
    """

    start: int
    end: int
    base: LineRange
    ours: LineRange
    theirs: LineRange


@dataclass(frozen=True)
class HunkRef:
    """One hunk of a diff from base: of the patch (base -> ours) or of upstream (base -> theirs).

    ``header`` is the hunk's header as ``patchkit.core.diffs.make`` writes it, with
    three lines of context (``@@ -10,7 +10,8 @@``), so a reader finds the hunk
    in the patch's diff file. ``base`` and ``new`` are the ranges the header
    names: in base, and in ours (or theirs, for an upstream hunk).
    ``definitions`` are the qualified names (``GpuWorker.restore_blocks``) of
    the innermost Python functions or classes whose lines the hunk changes;
    empty when the file is not Python or was not analysed, which includes
    merges where no upstream change can share a definition with the patch
    (see ``_may_share_block``): those need no review and skip parsing.
    """

    header: str
    base: LineRange
    new: LineRange
    definitions: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReviewFlag:
    """A reason a clean merge still needs a human look.

    Upstream changed ``definition`` (the function or class, qualified name)
    in hunk ``upstream`` of diff(base, theirs) (``upstream.new`` is its range
    in theirs), and patch hunk ``hunk`` changes the same definition: the two
    edits merged as text, but nobody has checked that they still fit together.
    """

    hunk: HunkRef
    definition: str
    upstream: HunkRef

    @property
    def message(self) -> str:
        return (
            f"upstream hunk {self.upstream.header} changed {self.definition}, which patch hunk "
            f"{self.hunk.header} also changes: check that the two still fit together"
        )

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class MergeResult:
    """Everything :func:`rebase_file` found for one file.

    ``merged`` is the new patched file; for ``CONFLICT`` it holds conflict
    markers (see :data:`OURS_MARKER` and the others) with the base section,
    diff3 style. The hunks are those of diff(base, ours), each in exactly one
    of ``hunks_upstreamed`` and ``hunks_remaining``; ``hunks_partly_upstreamed``
    are the remaining hunks that upstream took part of.
    """

    outcome: Outcome
    merged: bytes
    conflicts: tuple[Conflict, ...] = ()
    hunks_upstreamed: tuple[HunkRef, ...] = ()
    hunks_remaining: tuple[HunkRef, ...] = ()
    hunks_partly_upstreamed: tuple[HunkRef, ...] = ()
    review_flags: tuple[ReviewFlag, ...] = ()


def rebase_file(base: bytes, ours: bytes, theirs: bytes, *, path: str = "") -> MergeResult:
    """Merge the patch (base -> ours) onto the new upstream file ``theirs``: one file of :func:`rebase_files`."""
    return rebase_files([(base, ours, theirs, path)])[0]


def rebase_files(items: Sequence[tuple[bytes, bytes, bytes, str]]) -> list[MergeResult]:
    """Merge each patch (base -> ours) onto its new upstream file ``theirs``; items are (base, ours, theirs, path).

    The merged bytes and whether a file conflicts are git's: what
    ``git merge-tree --write-tree`` (merge-ort, as ``git cherry-pick`` runs
    it) writes with ``merge.conflictStyle=diff3``, markers relabelled. All
    the files that need a merge go to git in one batch.

    The outcome, decided in this order:

    - ``UNCHANGED``: theirs is base byte for byte; the result is ours. Even an
      empty patch (ours == base) is ``UNCHANGED`` then: there is nothing to do.
    - ``CONFLICT``: git's merge conflicts; ``conflicts`` lists every region,
      with the lines each version has there.
    - ``UPSTREAMED``: the merge equals theirs, so upstream already contains
      the whole change and the patch is a drop candidate; every hunk is in
      ``hunks_upstreamed``. An empty patch (ours == base) whose file upstream
      changed is ``UPSTREAMED`` too, with no hunks: the merge is theirs and
      the patch carries nothing.
    - ``PARTIALLY_UPSTREAMED``: the merge is clean and differs from theirs, but
      upstream already made every change of at least one of the patch's hunks
      (named in ``hunks_upstreamed``): the patch shrank by whole hunks.
    - ``CLEAN`` otherwise.

    Which changes went upstream: the changes of diff(base, ours) and of
    diff(base, theirs) (patchkit's own diffs, so the hunks are those of the
    patch's diff file) are grouped into *stretches*, runs of changes that
    overlap or touch in base. A change of the patch *went upstream* when its
    stretch reads the same in ours and in theirs (upstream made the identical
    edit); otherwise it *remains*. A hunk went upstream when all its changes
    did; a hunk with some changes gone and some left is remaining and also
    listed in ``hunks_partly_upstreamed``.

    ``review_flags`` are set for ``CLEAN`` and ``PARTIALLY_UPSTREAMED`` merges of
    Python files (``path`` ends with ``.py``/``.pyi`` and all three versions parse);
    see :func:`_review_flags` for the rule.

    Raises :class:`BinaryFileError` when any version of any file is binary as
    git deems it (a NUL byte in its first 8,000 bytes): git cannot merge it
    as text. ``GitFailed`` or ``GitMissing`` when git cannot run.
    """
    for base, ours, theirs, path in items:
        _refuse_binary(base, ours, theirs, path)
    need = [k for k, (base, ours, theirs, _) in enumerate(items) if len({base, ours, theirs}) == 3]
    merged: list[gitmerge.Merged | None] = [None] * len(items)
    # git merges in a process of its own while the workers read the same files (_study): on two
    # cores the two overlap, and nothing the workers compute waits for git's answer.
    with gitmerge.merging([items[k][:3] for k in need], _LABELS) as git_result:
        studies = map_items(_study, items)
        for k, m in zip(need, git_result(), strict=True):
            merged[k] = m
    return [_result(items[k], studies[k], merged[k]) for k in range(len(items))]


def _refuse_binary(base: bytes, ours: bytes, theirs: bytes, path: str) -> None:
    for role, data in (("old upstream (base)", base), ("patched", ours), ("new upstream", theirs)):
        if gitmerge.is_binary(data):
            raise BinaryFileError(
                f"{path or 'file'}: the {role} version is binary (a NUL byte in its first "
                f"{gitmerge.BINARY_PROBE} bytes, as git decides); patchkit merges text files only",
                hint="ship binary files as artifacts pinned by sha256 in the lockfile instead of patching them",
            )


def _trivial(base: bytes, ours: bytes, theirs: bytes) -> gitmerge.Merged:
    """git's merge when two of the three are the same file: the side that changed, with no content merge."""
    return gitmerge.Merged(ours if theirs == base else theirs)


@dataclass(frozen=True)
class _Study:
    """What one file's three versions say before git's merge is known (:func:`_study`).

    ``gone`` holds, per hunk of the patch, whether each of its changes went
    upstream; ``flags`` are the review flags the file has if its merge is clean.
    ``unchanged`` is the whole result when upstream did not touch the file.
    """

    hunks: tuple[HunkRef, ...]
    gone: tuple[tuple[bool, ...], ...]
    flags: tuple[ReviewFlag, ...]
    unchanged: MergeResult | None = None


def _study(item: tuple[bytes, bytes, bytes, str]) -> _Study:
    """One file's hunks, which of their changes upstream made, and its review flags; on a worker, beside git."""
    base, ours, theirs, path = item
    base_lines, our_lines, their_lines = split_lines(base), split_lines(ours), split_lines(theirs)
    our_changes = _changes(_matching_blocks(base_lines, our_lines))
    our_groups = _group(our_changes)
    if theirs == base:
        # The fast path: no merge and no Python analysis, since upstream did not touch the file.
        hunks = tuple(_hunk_ref(our_changes, g, len(base_lines), ()) for g in our_groups)
        return _Study((), (), (), MergeResult(Outcome.UNCHANGED, ours, hunks_remaining=hunks))
    their_changes = _changes(_matching_blocks(base_lines, their_lines))
    our_kinds, their_kinds = _stretch_kinds(our_changes, their_changes, our_lines, their_lines)

    defs = None
    if path.endswith((".py", ".pyi")) and _may_share_block(base_lines, our_changes, their_changes):
        defs = _python_defs(base)
    our_hunks = tuple(
        _hunk_ref(our_changes, g, len(base_lines), _names(defs, our_changes, g, our_lines)) for g in our_groups
    )
    gone = tuple(tuple(our_kinds[k] == "same" for k in g) for g in our_groups)
    flags: tuple[ReviewFlag, ...] = ()
    if defs is not None:  # kept by _result only if the merge is clean (CLEAN or PARTIALLY_UPSTREAMED)
        flags = _review_flags(
            defs,
            [(our_hunks[i], [our_changes[k] for k in g if our_kinds[k] != "same"]) for i, g in enumerate(our_groups)],
            their_changes,
            their_kinds,
            ours=our_lines,
            theirs=their_lines,
            base_len=len(base_lines),
        )
        if flags and not (
            _edit_parses(defs, len(base_lines), our_lines, our_changes)
            and _edit_parses(defs, len(base_lines), their_lines, their_changes)
        ):
            flags = ()
    return _Study(our_hunks, gone, flags)


def _result(item: tuple[bytes, bytes, bytes, str], study: _Study, git: gitmerge.Merged | None) -> MergeResult:
    """One file's result from its study and git's merge of it (None: a trivial merge)."""
    if study.unchanged is not None:
        return study.unchanged
    base, ours, theirs, _ = item
    result = git if git is not None else _trivial(base, ours, theirs)
    merged = result.data
    conflicts = tuple(
        Conflict(c.start + 1, c.end, _range(c.base), _range(c.ours), _range(c.theirs)) for c in result.conflicts
    )
    gone = study.gone
    if conflicts:
        outcome = Outcome.CONFLICT
    elif merged == theirs:
        outcome = Outcome.UPSTREAMED
        gone = tuple(tuple(True for _ in g) for g in gone)
    elif any(all(g) for g in gone):
        # Only a whole hunk of the patch now upstream makes it partly upstreamed; a hunk upstream took
        # some lines of stays the patch's (hunks_partly_upstreamed) and the outcome is clean.
        outcome = Outcome.PARTIALLY_UPSTREAMED
    else:
        outcome = Outcome.CLEAN
    clean = outcome in (Outcome.CLEAN, Outcome.PARTIALLY_UPSTREAMED)
    hunks = study.hunks
    return MergeResult(
        outcome,
        merged,
        conflicts=conflicts,
        hunks_upstreamed=tuple(h for h, g in zip(hunks, gone, strict=True) if all(g)),
        hunks_remaining=tuple(h for h, g in zip(hunks, gone, strict=True) if not all(g)),
        hunks_partly_upstreamed=tuple(h for h, g in zip(hunks, gone, strict=True) if any(g) and not all(g)),
        review_flags=study.flags if clean else (),
    )


def _range(span: tuple[int, int]) -> LineRange:
    return LineRange(span[0] + 1, span[0] + span[1])


_DEF_START = (b"def ", b"async def ", b"class ")
_INSIDE = frozenset((b" ", b"\t", b"\r", b"\n", b"#", b""))  # first bytes of lines that stay in the block
_LOOSE = frozenset((b"#", b"\r", b"\n", b""))  # first bytes (after the indentation) of comment and blank lines
_CLOSING = frozenset((b")", b"]", b"}"))  # first bytes of a line that closes a bracket: it stays in the block


def _may_share_block(base: list[bytes], ours: list[_Change], theirs: list[_Change]) -> bool:
    """Whether a patch change and an upstream change can lie in the same definition.

    A cheap, conservative pre-filter for the review flags: parsing and walking
    the base with ``ast`` costs milliseconds a file, and most upstream changes
    are far from the patch. See ``_Blocks`` for the blocks; two changes that
    the analysis finds in one definition always share a block (the reverse
    need not hold, which only costs a full analysis).

    Blocks never reach across a *segment* boundary (``_segment_starts``), so
    only the segments both sides touch are scanned line by line: in most
    merged files there is none, and the file is not scanned at all.
    """
    starts = _segment_starts(base)
    shared = _segments(starts, ours, len(base)) & _segments(starts, theirs, len(base))
    if not shared:
        return False
    bounds = [0, *starts, len(base)]
    blocks = _Blocks(base, bounds[min(shared)], bounds[max(shared) + 1])
    return bool(blocks.of(ours) & blocks.of(theirs))


_NOT_TOP = _INSIDE | _CLOSING  # first bytes of lines that are not a statement at column 0


def _segment_starts(base: list[bytes]) -> list[int]:
    """The lines (0-based) that start a new top-level block: ``_Blocks`` starts afresh at each.

    That is a column-0 ``def``, ``class`` or decorator that does not follow a
    decorator. Nothing before such a line is in the block it starts or in
    any later one, so the blocks of one segment (the lines from one start to
    the next) are never those of another. (A dangling decorator at the end
    of a class body, which ``_Blocks`` would let run on, is a syntax error:
    the analysis it filters for parses the file, so it never runs there.)
    """
    starts = []
    decorating = False
    for i in [i for i, line in enumerate(base) if line[:1] not in _NOT_TOP]:
        line = base[i]
        opens = line[:1] == b"@" or line.startswith(_DEF_START)
        if opens and not decorating:
            starts.append(i)
        decorating = opens and line[:1] == b"@"
    return starts


def _segments(starts: list[int], changes: list[_Change], size: int) -> set[int]:
    """The segments (0: before the first start) holding the lines ``_Blocks.of`` looks at for ``changes``."""
    found: set[int] = set()
    for c in changes:
        first, stop = _looked_at(c, 0, size)
        if first < stop:
            found.update(range(bisect_right(starts, first), bisect_right(starts, stop - 1) + 1))
    return found


def _looked_at(change: _Change, lo: int, hi: int) -> tuple[int, int]:
    """The lines ``lo <= i < hi`` whose blocks a change touches: those it replaces, or the two around an insertion."""
    start, stop = change.base
    return max(start - 1, lo), min(max(stop, start + 1), hi)


class _Blocks:
    """The blocks of a Python file, read line by line without parsing it.

    A top-level block starts at a column-0 ``def``, ``class`` or decorator; a
    run of decorators and the definition they decorate are one block
    (comments, blank lines and the lines of a decorator's arguments, their
    closing bracket included, may lie between them). Everything else stays
    in the current block: indented lines, comments, column-0 statements.

    Inside a top-level class each method is a block of its own, the same way
    at the class body's indentation; the class's own lines (its header, a
    docstring, class-level statements and what continues them) are the
    class's block. A comment or blank line in a class may belong to the
    method before it or to the class (the method ends at its last
    statement), so it counts for both; so does a line inserted in a class,
    which may extend a method or the class. Lines are not tokenized: a
    ``def`` at a block's indentation inside a multi-line string starts a
    block too, the one case where two changes of one definition can land in
    two blocks.
    """

    def __init__(self, base: list[bytes], lo: int = 0, hi: int | None = None) -> None:
        # One pass over lines lo..hi (a run of whole segments), all in locals.
        self.lo = lo
        block: list[int] = []  # each line's block
        klass: list[int | None] = []  # the top-level class block each line lies in, if any
        loose: list[bool] = []  # a comment or blank line inside a class: the class's too
        count = current = 0
        decorating = False
        in_class: int | None = None
        body = b""  # the class body's indentation, once seen (b"": not yet)
        for line in base[lo:hi]:
            text = line  # the line at the level that opens blocks: column 0, or the class body's
            top = line[:1] not in _INSIDE
            is_loose = False
            if not top and in_class is not None:
                text = line.lstrip(b" \t")
                is_loose = text[:1] in _LOOSE
                indent = line[: len(line) - len(text)]
                body = body or (b"" if is_loose else indent)
            if text[:1] in _CLOSING:
                pass  # the end of a bracket opened above (a decorator's arguments): of the block it is in
            elif top or (not is_loose and in_class is not None and indent == body):
                opens = text[:1] == b"@" or text.startswith(_DEF_START)
                if opens and not decorating:
                    count += 1
                    current = count
                decorating = opens and text[:1] == b"@"
                if top:
                    in_class, body = _class_after(line, current)
                elif not opens:
                    current = in_class if in_class is not None else current
            block.append(current)
            klass.append(in_class)
            loose.append(is_loose)
        self.block, self.klass, self.loose = block, klass, loose

    def of(self, changes: list[_Change]) -> set[int]:
        """The blocks the changes touch in the lines scanned: those they replace, or the two around an insertion."""
        found: set[int] = set()
        lo = self.lo
        for c in changes:
            inserted = c.base[1] == c.base[0]
            for i in range(*_looked_at(c, lo, lo + len(self.block))):
                found.add(self.block[i - lo])
                klass = self.klass[i - lo]
                if klass is not None and (inserted or self.loose[i - lo]):
                    found.add(klass)
        return found


def _class_after(line: bytes, current: int) -> tuple[int | None, bytes]:
    """The top-level class (block) and its body's indentation after the column-0 line ``line``.

    Any other column-0 line ends the class before it: a decorator starts the
    next block, whatever it decorates (its indented arguments are not the
    class's lines).
    """
    return (current, b"") if line.startswith(b"class ") else (None, b"")


def conflict_markers_remain(data: bytes) -> list[int]:
    """The 1-based numbers of lines that are still conflict markers, so ``rebase --continue`` can refuse.

    git's rule (``is_conflict_marker`` in diff.c, what ``git diff --check``
    reports): seven ``<``, ``|``, ``=`` or ``>`` at the start of a line,
    followed by whitespace (a space, a tab, CR, the newline) and any text, so
    ``=======   `` and ``>>>>>>> theirs`` are markers and ``========`` is not.
    A marker on a last line without a newline counts too. Like git, a file
    whose own content has such a line (a seven-character reStructuredText
    underline) is reported too.
    """
    found = []
    for number, line in enumerate(split_lines(data), start=1):
        head = line[:7]
        if len(head) == 7 and head[:1] in (b"<", b"|", b"=", b">") and head == head[:1] * 7:
            after = line[7:8]
            if after in (b"", b" ", b"\t", b"\n", b"\r"):
                found.append(number)
    return found


# --- alignment ------------------------------------------------------------------------------------------------

# A matching block (i, j, n): a[i:i+n] == b[j:j+n], as difflib reports them.
_Block = tuple[int, int, int]
# A half-open, 0-based span of line indices.
_Span = tuple[int, int]
_Kind = Literal["same", "ours", "theirs", "both"]


@dataclass(frozen=True, slots=True)
class _Change:
    """One change of a two-way diff from base: base lines ``base`` became ``side`` lines of the other file."""

    base: _Span
    side: _Span


def _matching_blocks(a: Sequence[bytes], b: Sequence[bytes]) -> list[_Block]:
    """The matching blocks of ``a`` and ``b``, after setting aside their common first and last lines.

    The same matcher as ``patchkit.core.diffs.make`` (``diffs.line_matcher``, patience
    diff), so the hunks a merge reports match the patch's diff file. The
    common first and last lines,
    usually most of a patched file, are matched here without the matcher.
    """
    n, m = len(a), len(b)
    limit = min(n, m)
    head = _common_run(a, b, limit, 0, 0, 1)
    tail = _common_run(a, b, limit - head, n - 1, m - 1, -1)
    blocks: list[_Block] = [(0, 0, head)] if head else []
    if head < n - tail and head < m - tail:
        matcher = line_matcher(a[head : n - tail], b[head : m - tail])
        blocks.extend((i + head, j + head, k) for i, j, k in matcher.get_matching_blocks() if k)
    if tail:
        blocks.append((n - tail, m - tail, tail))
    blocks.append((n, m, 0))
    return blocks


def _common_run(a: Sequence[bytes], b: Sequence[bytes], limit: int, i: int, j: int, step: int) -> int:
    """How many lines from ``a[i]`` and ``b[j]`` on, going by ``step`` (1 or -1), are equal; at most ``limit``.

    Found by halving with slice comparisons, which compare the lines in C:
    a patched file is mostly its base's lines, so a loop line by line cost
    more than the patience matcher it spares.
    """
    found, left = 0, limit
    while left:
        size = (left + 1) // 2
        if step > 0:
            same = a[i + found : i + found + size] == b[j + found : j + found + size]
        else:
            same = a[i - found - size + 1 : i - found + 1] == b[j - found - size + 1 : j - found + 1]
        if same:
            found += size
            left -= size
        elif size == 1:
            break
        else:
            left = size - 1
    return found


def _changes(blocks: list[_Block]) -> list[_Change]:
    """The changes between consecutive matching blocks (difflib's non-equal opcodes)."""
    changes = []
    i = j = 0
    for bi, bj, k in blocks:
        if i < bi or j < bj:
            changes.append(_Change((i, bi), (j, bj)))
        i, j = bi + k, bj + k
    return changes


def _stretch_kinds(
    ours: list[_Change], theirs: list[_Change], our_lines: list[bytes], their_lines: list[bytes]
) -> tuple[list[_Kind], list[_Kind]]:
    """The kind of the stretch holding each change of diff(base, ours), and of each of diff(base, theirs).

    A stretch is a run of changes of either diff that overlap or touch in
    base (an insertion touches the lines on both sides of it). It is
    ``ours`` or ``theirs`` when only that side changed it, ``same`` when both
    did and it reads the same in ours and in theirs, ``both`` otherwise.
    """
    changes = (ours, theirs)
    order = sorted((c.base, side, k) for side in (0, 1) for k, c in enumerate(changes[side]))
    stretches: list[list[tuple[int, int]]] = []
    end = -1
    for (start, stop), side, k in order:
        if stretches and start <= end:
            stretches[-1].append((side, k))
            end = max(end, stop)
        else:
            stretches.append([(side, k)])
            end = stop
    kinds: tuple[list[_Kind], list[_Kind]] = (["ours"] * len(ours), ["theirs"] * len(theirs))
    for members in stretches:
        mine = [changes[0][k] for side, k in members if side == 0]
        upstream = [changes[1][k] for side, k in members if side == 1]
        if not mine or not upstream:
            continue
        lo = min(c.base[0] for c in mine + upstream)
        hi = max(c.base[1] for c in mine + upstream)
        kind: _Kind = "same" if _over(mine, lo, hi, our_lines) == _over(upstream, lo, hi, their_lines) else "both"
        for side, k in members:
            kinds[side][k] = kind
    return kinds


def _over(changes: list[_Change], lo: int, hi: int, lines: list[bytes]) -> list[bytes]:
    """The side's lines over base lines ``lo``..``hi``: ``changes`` (in order) and the base lines between."""
    first, last = changes[0], changes[-1]
    return lines[first.side[0] - (first.base[0] - lo) : last.side[1] + (hi - last.base[1])]


def _lines(span: _Span) -> LineRange:
    return LineRange(span[0] + 1, span[1])


def _group(changes: list[_Change]) -> list[list[int]]:
    """Indices of the changes that share one hunk: as difflib groups them, apart by at most 2 x CONTEXT lines."""
    groups: list[list[int]] = []
    for k, c in enumerate(changes):
        if groups and c.base[0] - changes[groups[-1][-1]].base[1] <= 2 * CONTEXT:
            groups[-1].append(k)
        else:
            groups.append([k])
    return groups


def _hunk_ref(changes: list[_Change], group: list[int], base_len: int, definitions: tuple[str, ...]) -> HunkRef:
    first, last = changes[group[0]], changes[group[-1]]
    # The context lines before and after are unchanged, so they are as many on both sides.
    b0 = max(0, first.base[0] - CONTEXT)
    b1 = min(base_len, last.base[1] + CONTEXT)
    s0 = first.side[0] - (first.base[0] - b0)
    s1 = last.side[1] + (b1 - last.base[1])
    old, new = _lines((b0, b1)), _lines((s0, s1))
    return HunkRef(f"@@ -{old.unified()} +{new.unified()} @@", old, new, definitions)


# --- Python definitions and review flags ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Def:
    """A function or class of the base file: lines ``start`` (its first decorator) to ``end``, 1-based."""

    name: str
    start: int
    end: int
    column: int
    function: bool
    parent: int | None


@dataclass(frozen=True)
class _Defs:
    """The definitions of a Python file in source order, the innermost one owning each line, its statements.

    ``statements`` are the lines (0-based) where its top-level statements
    start, decorators included: the places where the file can be cut into
    pieces that parse on their own (``_edit_parses``).
    """

    defs: list[_Def]
    owner: list[int | None]  # owner[line], 1-based; owner[0] is unused
    statements: list[int]


_LONE_CR = re.compile(rb"\r(?!\n)")


def _parse(source: bytes) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            # Invalid escape sequences and the like warn at compile time; they are upstream's business.
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _parses(source: bytes) -> bool:
    return _parse(source) is not None


def _python_defs(source: bytes) -> _Defs | None:
    """The definitions of the base file, or None when it does not parse.

    Also None when the file has a lone ``\\r``: Python ends a line there, we
    do not, so ast's line numbers would not be ours.
    """
    if _LONE_CR.search(source):
        return None
    tree = _parse(source)
    if tree is None:
        return None
    defs: list[_Def] = []
    _collect_defs(tree.body, None, "", defs)
    statements = [
        min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) - 1 for node in tree.body
    ]
    return _Defs(defs, _owners(defs, source.count(b"\n") + 2), statements)


# PEP 263's coding declaration, and the one future import that changes how Python reads a file.
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)
_BARRY = b"barry_as_FLUFL"


def _edit_parses(base: _Defs, size: int, side: list[bytes], changes: list[_Change]) -> bool:
    """Whether ``side``, the base file of ``size`` lines (which parses) with ``changes`` made, parses.

    The base's top-level statements are pieces that parse on their own, one
    after the other. The side has the same pieces but where the changes
    are, so only the runs of whole statements that hold a change (and the
    lines around it) are parsed on their own: each starts, as in the file,
    at column 0 outside any bracket or string, and ends where the next
    unchanged statement starts. When every run parses, so does the file.
    A run that does not, a coding declaration (pieces would be decoded
    apart from it) or Barry's future import sends the whole file to the
    parser.
    """
    pieces = [side[start:stop] for start, stop in _side_spans(_runs(base.statements, changes, size), changes, size)]
    whole = b"".join(side)
    if _BARRY in whole or any(_CODING.search(b"".join(lines[:2])) for lines in (side, *pieces)):
        return _parses(whole)
    return all(_parses(b"".join(lines)) for lines in pieces) or _parses(whole)


def _runs(statements: list[int], changes: list[_Change], size: int) -> list[tuple[int, int]]:
    """The base lines ``[start, stop)`` of each run of top-level statements holding a change and its neighbours.

    A run starts at the last statement start at or above the line before
    the change (the file's start for a change at the top) and stops at the
    first one below the line after it (the file's end), so every line
    outside the runs, and the lines on either side of each cut, are the
    base's own; runs that overlap are one.
    """
    cuts = [0, *statements, size]
    runs: list[tuple[int, int]] = []
    for c in changes:
        lo, hi = c.base
        start = cuts[bisect_right(cuts, max(lo - 1, 0)) - 1]
        stop = cuts[min(bisect_left(cuts, hi + 1), len(cuts) - 1)]
        if runs and start < runs[-1][1]:
            runs[-1] = (runs[-1][0], max(stop, runs[-1][1]))
        else:
            runs.append((start, stop))
    return runs


def _side_spans(runs: list[tuple[int, int]], changes: list[_Change], size: int) -> list[tuple[int, int]]:
    """Each run of base lines as the lines of the side: shifted by what the changes before it added or removed.

    A run that ends the file holds what was added after the base's last line.
    """
    spans = []
    k = shift = 0
    for start, stop in runs:
        while k < len(changes) and changes[k].base[0] < start:
            shift = changes[k].side[1] - changes[k].base[1]
            k += 1
        first = start + shift
        while k < len(changes) and (changes[k].base[0] < stop or stop == size):
            shift = changes[k].side[1] - changes[k].base[1]
            k += 1
        spans.append((first, stop + shift))
    return spans


def _collect_defs(body: list[ast.stmt], parent: int | None, prefix: str, defs: list[_Def]) -> None:
    """Append the functions and classes of ``body`` and everything nested in them to ``defs``, in source order.

    ``parent`` is the index of the enclosing definition, ``prefix`` its
    qualified name so far (``Outer.`` or ``outer.<locals>.``).
    """
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            function = not isinstance(node, ast.ClassDef)
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            end = node.end_lineno if node.end_lineno is not None else node.lineno
            defs.append(_Def(prefix + node.name, start, end, node.col_offset, function, parent))
            inner = prefix + node.name + (".<locals>." if function else ".")
            _collect_defs(node.body, len(defs) - 1, inner, defs)
        else:
            _collect_block_defs(node, parent, prefix, defs)


def _collect_block_defs(node: ast.stmt, parent: int | None, prefix: str, defs: list[_Def]) -> None:
    """The definitions inside an if/try/with/for/while/match block: they belong to the block's owner."""
    for field in ("body", "orelse", "finalbody"):
        value = getattr(node, field, None)
        if isinstance(value, list):
            _collect_defs(value, parent, prefix, defs)
    for handler in getattr(node, "handlers", ()):
        _collect_defs(handler.body, parent, prefix, defs)
    for case in getattr(node, "cases", ()):
        _collect_defs(case.body, parent, prefix, defs)


def _owners(defs: list[_Def], size: int) -> list[int | None]:
    """The innermost definition (index) owning each of ``size`` line slots, 1-based; None outside any."""
    owner: list[int | None] = [None] * size
    # Source order puts every definition after the ones enclosing it, so inner ones paint last.
    for index, d in enumerate(defs):
        end = min(d.end, len(owner) - 1)
        owner[d.start : end + 1] = [index] * (end + 1 - d.start)
    return owner


def _indent(lines: Sequence[bytes]) -> tuple[int, bytes] | None:
    """The indentation width and the text of the first line with content, or None if all are blank."""
    for line in lines:
        text = line.lstrip(b" \t")
        if text.strip():
            return len(line) - len(text), text
    return None


def _touched(py: _Defs, change: _Change, side: Sequence[bytes]) -> set[int]:
    """The innermost definitions (indices) whose lines a change of a diff from base changes.

    Lines replaced or deleted belong to their innermost definition. Lines
    inserted after base line ``k`` belong to the innermost definition holding
    both line ``k`` and line ``k + 1``; or to the one ending at line ``k`` when
    they are indented deeper than its ``def``/``class`` (they extend its body);
    or to the definition starting at line ``k + 1`` when they are a decorator
    at its indentation.
    """
    lo, hi = change.base
    if hi > lo:
        return {d for d in py.owner[lo + 1 : hi + 1] if d is not None}
    k = lo
    first = _indent(side[change.side[0] : change.side[1]])
    below = py.owner[k + 1] if k + 1 < len(py.owner) else None
    if below is not None and first is not None:
        d = py.defs[below]
        if d.start == k + 1 and first[0] == d.column and first[1].startswith(b"@"):
            return {below}
    current = py.owner[k] if k >= 1 else None
    while current is not None:
        d = py.defs[current]
        if d.end > k or (first is not None and first[0] > d.column):
            return {current}
        current = d.parent
    return set()


def _names(py: _Defs | None, changes: list[_Change], group: list[int], side: Sequence[bytes]) -> tuple[str, ...]:
    if py is None:
        return ()
    touched: set[int] = set()
    for k in group:
        touched |= _touched(py, changes[k], side)
    return tuple(py.defs[d].name for d in sorted(touched))


def _unit(py: _Defs, index: int) -> int:
    """The definition a change in definition ``index`` counts for when comparing edits.

    That is the definition itself, except inside a function: a nested
    function or class shares the enclosing function's variables, so it
    counts as part of the outermost function around it.
    """
    unit = index
    current: int | None = index
    while current is not None:
        if py.defs[current].function:
            unit = current
        current = py.defs[current].parent
    return unit


def _review_flags(
    py: _Defs,
    patch: list[tuple[HunkRef, list[_Change]]],
    their_changes: list[_Change],
    their_kinds: list[_Kind],
    *,
    ours: Sequence[bytes],
    theirs: Sequence[bytes],
    base_len: int,
) -> tuple[ReviewFlag, ...]:
    """Flag each patch hunk whose remaining changes share a definition with an upstream-only change.

    Both diffs are mapped onto the base file's lines and each change onto the
    innermost function or class it touches (:func:`_touched`), counted as its
    enclosing function when nested in one (:func:`_unit`). A patch hunk and an
    upstream hunk of diff(base, theirs) are flagged when they share such a
    definition. Upstream changes identical to the patch's (the part upstream
    took) do not count, nor do the patch changes that went upstream:
    they are no longer an edit on top of upstream. Module-level lines belong
    to no definition and are never flagged.
    """
    upstream = []
    for group in _group(their_changes):
        units: set[int] = set()
        touched: set[int] = set()
        for k in group:
            hit = _touched(py, their_changes[k], theirs)
            touched |= hit
            if their_kinds[k] != "same":
                units |= {_unit(py, d) for d in hit}
        names = tuple(py.defs[d].name for d in sorted(touched))
        upstream.append((_hunk_ref(their_changes, group, base_len, names), units))
    flags: list[ReviewFlag] = []
    for hunk, changes in patch:
        mine = {_unit(py, d) for c in changes for d in _touched(py, c, ours)}
        for ref, units in upstream:
            flags.extend(ReviewFlag(hunk, py.defs[d].name, ref) for d in sorted(mine & units))
    return tuple(flags)
