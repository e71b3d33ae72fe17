"""Reading one patch of a series: ``git format-patch`` mail or a plain unified diff.

The structure (which files, git's extended headers: new and deleted files,
renames, copies, modes, binary markers) is read with unidiff; the hunks are
read byte for byte with :func:`patchkit.diffs.parse`, the parser patchkit
applies with, and the two must agree on every file and hunk.

unidiff works on text: its own readers decode UTF-8 and split lines the way
Python's text mode does, which turns ``\\r\\n`` into ``\\n`` and fails on
bytes that are not UTF-8. Neither may change a patch. So unidiff is handed
the patch decoded as Latin-1 (every byte one character, nothing lost) and
split on ``\\n`` only, and is used only for the structure; the bytes of every
line that is applied (a CRLF file's ``\\r``, a Latin-1 ``é``) come from
:mod:`patchkit.diffs`, which never decodes. Binary hunks (``GIT binary
patch``, ``Binary files … differ``) are refused: patchkit applies text.
"""

from __future__ import annotations

import dataclasses
import email.header
import email.parser
import re
from dataclasses import dataclass

from patchkit import diffs
from patchkit.errors import BadInput

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
    patch file.
    """

    old_path: str | None
    new_path: str | None
    diff: diffs.FileDiff | None
    line: int
    new_mode: str | None = None
    copy: bool = False

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
    is kept as it is when the patch is regenerated.
    """

    files: tuple[FileChange, ...]
    subject: str | None = None
    author: str | None = None
    date: str | None = None
    message: str = ""
    diff_start: int = 0

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
        return _parse_mail(lines, 0, file, strip)
    mails = [_parse_mail(lines[a:b], a, file, strip) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]
    return dataclasses.replace(mails[0], files=tuple(f for m in mails for f in m.files))


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
        if line.startswith(b"diff --git "):
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
    parts = email.header.decode_header(str(value))
    text = "".join(p.decode(enc or "utf-8", "replace") if isinstance(p, bytes) else p for p, enc in parts)
    return " ".join(text.split())


def _changes(body: list[bytes], offset: int, file: str, strip: int) -> list[FileChange]:
    """The file changes of the diff section: structure from unidiff, hunks from patchkit's parser."""
    import unidiff  # type: ignore[import-untyped]  # unidiff ships no type information

    hunks: list[diffs.FileDiff] = []
    if any(line.startswith(b"@@") for line in body):
        # The byte parser first: its errors name the line (unidiff's do not).
        try:
            hunks = diffs.parse(b"".join(body))
        except diffs.DiffError as e:
            raise PatchParseError(file, offset + e.line, e.message) from e
    try:
        patch_set = unidiff.PatchSet([line.decode("latin-1") for line in body])
    except unidiff.UnidiffParseError as e:
        raise PatchParseError(file, None, f"does not parse as a diff: {e}") from e
    headers = [offset + i + 1 for i, line in enumerate(body) if line.startswith(b"diff --git ")]
    with_hunks = [pf for pf in patch_set if len(pf)]
    if [len(pf) for pf in with_hunks] != [len(fd.hunks) for fd in hunks]:
        raise PatchParseError(
            file,
            offset + 1,
            f"unidiff reads {len(with_hunks)} files with hunks here, patchkit's parser {len(hunks)}: "
            "an ambiguous diff (a hunk line that looks like a header?)",
            "regenerate the patch with git format-patch",
        )
    out = []
    next_hunks = iter(hunks)
    for k, pf in enumerate(patch_set):
        line = headers[k] if k < len(headers) and len(headers) == len(patch_set) else offset + 1
        if pf.is_binary_file:
            raise PatchParseError(
                file,
                line,
                f"changes the binary file {_text(pf.path)!r} (a binary hunk); patchkit applies text patches only",
                "ship the file as an artifact pinned by sha256 ([[artifacts]]), or drop it from the patch",
            )
        fd = next(next_hunks) if len(pf) else None
        out.append(_change(pf, fd, line, offset, file, strip))
    return out


def _change(pf: object, fd: diffs.FileDiff | None, line: int, offset: int, file: str, strip: int) -> FileChange:
    info = [str(x) for x in getattr(pf, "patch_info", None) or ()]
    source, target = getattr(pf, "source_file", None), getattr(pf, "target_file", None)
    if fd is not None:
        # The hunks' own headers, C-unquoted to exact bytes; a git header only renames when the hunks say so.
        old, new = fd.old_path, fd.new_path
        if not info:
            line = offset + fd.line
        shifted = tuple(dataclasses.replace(h, line=h.line + offset) for h in fd.hunks)
        fd = diffs.FileDiff(old, new, shifted, offset + fd.line)
    else:
        old = None if source == "/dev/null" else _from_latin1(source)
        new = None if target == "/dev/null" else _from_latin1(target)
        for x in info:
            if x.startswith(("rename from ", "copy from ")):
                old = "a/" + _from_latin1(x.split(" from ", 1)[1].rstrip("\n"))
            elif x.startswith(("rename to ", "copy to ")):
                new = "b/" + _from_latin1(x.split(" to ", 1)[1].rstrip("\n"))
    mode = next((x.split()[-1] for x in info if x.startswith(("new mode ", "new file mode "))), None)
    return FileChange(
        old_path=_strip(old, strip, file, line),
        new_path=_strip(new, strip, file, line),
        diff=fd,
        line=line,
        new_mode=mode,
        copy=any(x.startswith("copy from ") for x in info),
    )


def _from_latin1(text: str | None) -> str:
    if text is None:
        return ""
    raw = text.encode("latin-1")
    if raw.startswith(b'"') and raw.endswith(b'"') and len(raw) >= 2:
        raw = diffs._unquote(raw[1:-1], 0)
    return raw.decode("utf-8", "surrogateescape")


def _text(path: str) -> str:
    return _from_latin1(path)


def _strip(path: str | None, strip: int, file: str, line: int) -> str | None:
    """``path`` without its first ``strip`` components, as ``patch -pN``; refused when it leaves the tree."""
    if path is None:
        return None
    parts = path.split("/")
    if len(parts) <= strip:
        raise PatchParseError(file, line, f"the path {path!r} has fewer than {strip + 1} parts for -p{strip}")
    rest = parts[strip:]
    if any(p in ("", ".", "..") for p in rest) or path.startswith("/"):
        raise PatchParseError(file, line, f"the path {path!r} is not inside the tree")
    if into_git_dir(rest):
        raise PatchParseError(
            file,
            line,
            f"the path {path!r} goes into the tree's .git directory; patchkit never writes there "
            "(a hook or a config there runs at the next git command)",
            "drop that file from the patch",
        )
    return "/".join(rest)


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
