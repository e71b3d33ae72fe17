"""Reading one patch of a series: ``git format-patch`` mail or a plain unified diff.

One reader reads it: :mod:`patchkit.series.headers` finds the files as
``git apply`` does (git's extended headers: new and deleted files, renames,
copies, modes, binary markers) and reads their hunks byte for byte with
:func:`patchkit.core.diffs.read_hunks`, the parser patchkit applies with. unidiff
cross-checks it: it must find the same hunks in the same files.

unidiff works on text: its own readers decode UTF-8 and split lines the way
Python's text mode does, which turns ``\\r\\n`` into ``\\n`` and fails on
bytes that are not UTF-8. Neither may change a patch. So unidiff is handed
the patch decoded as Latin-1 (every byte one character, nothing lost) and
split on ``\\n`` only, and only cross-checks; the bytes of every
line that is applied (a CRLF file's ``\\r``, a Latin-1 ``é``) come from
:mod:`patchkit.core.diffs`, which never decodes. Binary hunks (``GIT binary
patch``, ``Binary files … differ``) are refused: patchkit applies text.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from patchkit.core import diffs
from patchkit.errors import BadInput
from patchkit.series import headers

_MBOX_FROM = re.compile(rb"From [0-9a-f]{40} Mon Sep 17 00:00:00 2001\n")
_SUBJECT_TAG = re.compile(r"^(?:\[[^\]]*PATCH[^\]]*\]\s*)+")  # git am --keep-non-patch
_SIGNATURE = b"-- \n"


class PatchParseError(BadInput):
    """A patch file that does not parse, or that patchkit refuses to apply (binary); names the file and line."""

    def __init__(self, file: str, line: int | None, message: str, hint: str | None = None) -> None:
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {message}", hint)
        self.file = file
        self.line = line
        self.detail = message


@dataclass(frozen=True)
class FileChange:
    """What one patch does to one file.

    Paths are inside the tree (the ``-p`` prefix stripped); ``old_path`` is
    ``None`` for a new file, ``new_path`` ``None`` for a deleted one. ``diff``
    holds the hunks, ``None`` for a change without any (a pure rename, a mode
    change, an empty new file). ``line`` is the line of its header in the
    patch file; ``mail`` the 0-based index of the mail it belongs to in a
    file of several ``git format-patch`` mails (0 in a plain diff).
    """

    old_path: str | None
    new_path: str | None
    diff: diffs.FileDiff | None
    line: int
    new_mode: str | None = None
    copy: bool = False
    old_mode: str | None = None
    mail: int = 0

    @property
    def kind(self) -> str:
        """``add``, ``delete``, ``rename``, ``copy`` or ``modify``."""
        if self.old_path is None:
            return "add"
        if self.new_path is None:
            return "delete"
        if self.old_path != self.new_path:
            return "copy" if self.copy else "rename"
        return "modify"

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(p for p in dict.fromkeys((self.old_path, self.new_path)) if p is not None)


@dataclass(frozen=True)
class ParsedPatch:
    """One patch file: the mail's headers and message when it has them, and its file changes in order.

    ``diff_start`` is the 0-based byte offset of the first diff line: what
    comes before it (the mail headers, the message, the ``---`` stat block)
    is kept as it is when the patch is regenerated. ``strip`` is the ``-p``
    level it was read at, and is written with again. ``mails`` holds, for a
    file of several mails, each mail's headers and message (without files),
    in order: a change's ``mail`` indexes it.
    """

    files: tuple[FileChange, ...]
    subject: str | None = None
    author: str | None = None
    date: str | None = None
    message: str = ""
    diff_start: int = 0
    strip: int = 1
    mails: tuple[ParsedPatch, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for f in self.files for p in f.paths))


def parse_patch(data: bytes, file: str, *, strip: int = 1) -> ParsedPatch:
    """Parse the patch ``file`` (its bytes ``data``); raise :class:`PatchParseError` naming the line.

    A file of several mails (``git format-patch --stdout A..B``) is one
    patch of all their changes, in order; the first mail names it.
    """
    lines = diffs.split_lines(data)
    starts = [i for i, line in enumerate(lines) if _MBOX_FROM.fullmatch(line)]
    if len(starts) <= 1:
        return dataclasses.replace(_parse_mail(lines, 0, file, strip), strip=strip)
    mails = [_parse_mail(lines[a:b], a, file, strip) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]
    files = tuple(dataclasses.replace(f, mail=k) for k, m in enumerate(mails) for f in m.files)
    heads = tuple(dataclasses.replace(m, files=(), strip=strip) for m in mails)
    return dataclasses.replace(mails[0], files=files, strip=strip, mails=heads)


def _parse_mail(lines: list[bytes], first: int, file: str, strip: int) -> ParsedPatch:
    """One mail (or a plain diff) starting at line ``first`` (0-based) of the file."""
    start = _diff_start(lines)
    if start is None:
        raise PatchParseError(file, None, "holds no diff ('diff --git' or '--- a/…' / '+++ b/…' with hunks)")
    end = _signature_start(lines, start)
    body = lines[start:end]
    subject, author, date, message = _mail(b"".join(lines[:start]))
    changes = _changes(body, first + start, file, strip)
    if not changes:
        raise PatchParseError(file, first + start + 1, "holds no file change")
    return ParsedPatch(
        files=tuple(changes),
        subject=subject,
        author=author,
        date=date,
        message=message,
        diff_start=sum(len(x) for x in lines[:start]),
    )


def _diff_start(lines: list[bytes]) -> int | None:
    for i, line in enumerate(lines):
        if line.startswith(b"diff --git ") or headers.binary_files(line):
            return i
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            # A plain diff; a header line just above it ("Index:", "diff -u") belongs to it.
            return i
    return None


def _signature_start(lines: list[bytes], start: int) -> int:
    """Where ``git format-patch``'s signature (``-- `` and the git version) begins, or the end.

    Only a last ``-- `` line followed by lines no diff has (a version
    number, blank lines) is the signature: a ``-- `` inside a hunk removes the
    line ``- `` and is followed by more of the hunk or by the next file.
    """
    for i in range(len(lines) - 1, start - 1, -1):
        if lines[i] == _SIGNATURE:
            rest = lines[i + 1 :]
            if (
                rest
                and rest[0].strip()
                and len(rest) <= 3
                and all(x[:1] not in (b" ", b"+", b"-", b"@", b"\\") for x in rest)
            ):
                return i
            break
    return len(lines)


def _mail(head: bytes) -> tuple[str | None, str | None, str | None, str]:
    """Subject (without ``[PATCH n/m]``), From, Date and message of a format-patch mail header."""
    if not _MBOX_FROM.match(head):
        return None, None, None, head.decode("utf-8", "replace").strip()
    import email.parser  # here: a series of plain diffs, and every command that never reads one, skip the email package

    headers_text, _, rest = head.partition(b"\n\n")
    msg = email.parser.BytesHeaderParser().parsebytes(headers_text.split(b"\n", 1)[1] + b"\n\n")
    subject = _header(msg.get("Subject"))
    if subject is not None:
        subject = _SUBJECT_TAG.sub("", subject).strip()
    message = re.split(rb"(?m)^---$", rest, maxsplit=1)[0].decode("utf-8", "replace").strip()
    return subject, _header(msg.get("From")), _header(msg.get("Date")), message


def _header(value: object) -> str | None:
    if value is None:
        return None
    import email.header

    parts = email.header.decode_header(str(value))
    text = "".join(p.decode(enc or "utf-8", "replace") if isinstance(p, bytes) else p for p, enc in parts)
    return " ".join(text.split())


def _changes(body: list[bytes], offset: int, file: str, strip: int) -> list[FileChange]:
    """The file changes of the diff section, read once, as ``git apply -p<strip>`` reads them; then cross-checked.

    :func:`patchkit.series.headers.read_headers` is the one reader: it finds
    each file section and its paths as git does and reads its hunks there,
    byte for byte (:func:`patchkit.core.diffs.read_hunks`, the parser patchkit
    applies with). unidiff, a reader written apart from it, must then find
    the same hunks in the same files and no binary change: a disagreement
    refuses the patch at its line, since another tool would read the patch
    another way. Nothing is read twice to be used: what is applied is the
    one reader's.
    """
    try:
        found = headers.read_headers(body, strip)
    except headers.HeaderError as e:
        hint = _STRIP_HINT if f"-p{strip}" in e.message else "regenerate the patch with git format-patch"
        raise PatchParseError(file, offset + e.line + 1, e.message, hint) from e
    except diffs.DiffError as e:
        raise PatchParseError(file, offset + e.line, e.message) from e
    for h in found:
        if h.binary:
            raise PatchParseError(
                file,
                offset + h.line + 1,
                f"changes the binary file {h.new or h.old!r} (a binary hunk); patchkit applies text patches only",
                "ship the file as an artifact pinned by sha256 ([[artifacts]]), or drop it from the patch",
            )
    changes = [_change(h, offset, file) for h in found]
    _agree_with_unidiff(_for_unidiff(body, found), [c.diff for c in changes if c.diff is not None], offset, file)
    return changes


_STRIP_HINT = "set strip in [series.NAME] to the patch's -p level (0 for --no-prefix), or regenerate it with git"


def _for_unidiff(body: list[bytes], found: list[headers.Header]) -> list[str]:
    """The diff as unidiff is given it: Latin-1 text, each file's names replaced by ``f<k>``.

    unidiff is the second reader of the hunks and the binary markers, not of
    the names: its patterns do not read every name git writes (two spaces in
    a row, a quoted name after ``+++``, names without ``a/``), so a valid
    patch would be refused. The names are the header reader's alone, and the
    differential test against ``git apply`` is their check.
    """
    text = [line.decode("latin-1") for line in body]
    for k, h in enumerate(found):
        for j in range(h.line, h.end):
            text[j] = _placeholder(text[j], k)
    return text


def _placeholder(line: str, k: int) -> str:
    if line.startswith("diff --git "):
        return f"diff --git a/f{k} b/f{k}\n"
    for prefix, side in (("--- ", "a"), ("+++ ", "b")):
        if line.startswith(prefix):
            return line if line[4:].startswith("/dev/null") else f"{prefix}{side}/f{k}\n"
    for verb in ("rename from ", "rename to ", "copy from ", "copy to "):
        if line.startswith(verb):
            return f"{verb}f{k}\n"
    return line


def _agree_with_unidiff(text: list[str], ours: list[diffs.FileDiff], offset: int, file: str) -> None:
    """unidiff must read the same hunks, in the same files, as patchkit's reader (``ours``); and no binary change."""
    import unidiff  # type: ignore[import-untyped]  # unidiff ships no type information

    try:
        patch_set = unidiff.PatchSet(text)
    except unidiff.UnidiffParseError as e:
        raise PatchParseError(file, None, f"does not parse as a diff: {e}") from e
    theirs = [
        [(h.source_start, h.source_length, h.target_start, h.target_length, h.added, h.removed) for h in pf]
        for pf in patch_set
        if len(pf)
    ]
    mine = [
        [(h.old_start, h.old_len, h.new_start, h.new_len, _count(h, b"+"), _count(h, b"-")) for h in fd.hunks]
        for fd in ours
    ]
    binary = any(pf.is_binary_file for pf in patch_set)
    if theirs != mine or binary:
        k = next((k for k, (a, b) in enumerate(zip(theirs, mine, strict=False)) if a != b), min(len(theirs), len(mine)))
        where = ours[k].line if k < len(ours) else offset + 1
        what = "a binary change" if binary else f"{len(theirs)} files with hunks where patchkit reads {len(mine)}"
        raise PatchParseError(
            file,
            where,
            f"unidiff reads {what}, or other hunks: an ambiguous diff (a hunk line that looks like a header?)",
            "regenerate the patch with git format-patch",
        )


def _count(hunk: diffs.Hunk, tag: bytes) -> int:
    return sum(1 for t, _ in hunk.lines if t == tag)


def _change(h: headers.Header, offset: int, file: str) -> FileChange:
    line = offset + h.line + 1
    old_path, new_path = _inside(h.old, file, line), _inside(h.new, file, line)
    fd = None
    if h.hunks:
        shifted = tuple(dataclasses.replace(x, line=x.line + offset) for x in h.hunks)
        fd = diffs.FileDiff(old_path, new_path, shifted, offset + (h.line if h.hunks_at is None else h.hunks_at) + 1)
    return FileChange(
        old_path=old_path,
        new_path=new_path,
        diff=fd,
        line=line,
        new_mode=h.new_mode,
        copy=h.copy,
        old_mode=h.old_mode,
    )


def _inside(path: str | None, file: str, line: int) -> str | None:
    """``path`` (its ``-p`` prefix already stripped) when it is a path inside the tree; refused otherwise."""
    if path is None:
        return None
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise PatchParseError(file, line, f"names {path!r}, a path outside the tree; a patch changes files inside it")
    if into_git_dir(parts):
        raise PatchParseError(
            file,
            line,
            f"the path {path!r} goes into the tree's .git directory; patchkit never writes there "
            "(a hook or a config there runs at the next git command)",
            "drop that file from the patch",
        )
    return path


# Code points HFS+ ignores in names (git's is_hfs_dotgit): ".g\u200cit" is ".git" on macOS.
_HFS_IGNORED = dict.fromkeys([*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF])


def into_git_dir(parts: list[str]) -> bool:
    """Whether a path (its components) names git's own directory, in any spelling a file system takes for it.

    As git's ``verify_path`` refuses them: ``.git`` in any case, with the trailing dots and blanks
    or the ``:stream`` NTFS drops, the 8.3 short name ``git~1``, with the code points HFS+ ignores,
    and behind a backslash (a separator on Windows).
    """
    for part in parts:
        for piece in part.split("\\"):
            name = piece.translate(_HFS_IGNORED).split(":", 1)[0].rstrip(". ").casefold()
            if name in (".git", "git~1"):
                return True
    return False


def pr_numbers(name: str, subject: str | None) -> tuple[int, ...]:
    """The pull request numbers a patch names: ``vllm-48303-…`` in its file name, ``(#48303)`` in its subject."""
    found: list[int] = []
    m = re.match(r"(?:\d{1,4}-)?[a-z][a-z0-9_]*-(\d{3,7})(?:-|\.|$)", name.lower())
    if m:
        found.append(int(m.group(1)))
    for n in re.findall(r"#(\d+)\b", subject or ""):
        found.append(int(n))
    return tuple(dict.fromkeys(found))
