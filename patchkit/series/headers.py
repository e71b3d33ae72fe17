"""The file headers of a patch, read as ``git apply -p<N>`` reads them.

Which file a section of a patch changes, and how (new, deleted, renamed,
copied, a mode change, binary), follows git's rules for each form:

- ``diff --git A B``: the name both sides share once ``N`` leading
  components are stripped (found even when it holds spaces or tabs, or is
  C-quoted); ``rename from``/``copy from`` names lose ``N - 1`` components
  (they carry no ``a/``); the ``---``/``+++`` lines, when present, must name
  the same file (a quoted name unquoted, ending at a tab);
- a plain ``---``/``+++`` diff: the ``+++`` name (the ``---`` one when that
  is empty), a trailing timestamp dropped; ``/dev/null`` or the epoch as a
  timestamp makes it a new or deleted file. A plain diff never renames.

Names are bytes until the end, then decoded as UTF-8 with surrogate escapes,
so no name is changed on the way. Each section's hunks are read where git
reads them, in the same pass, by :func:`patchkit.core.diffs.read_hunks` (byte for
byte, each holding exactly the lines its header counts): one reader finds
the files and their hunks, and what ``git apply`` would drop without a word
(a hunk line after a file's hunks, a hunk without a file header) is refused.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass

from patchkit.core import diffs

_TERM_TAB = 1
_GIT_SPACE = b" \t\n\r"
# GNU diff's timestamps after a plain diff's name: ISO (diff -u) and ctime (diff -c style).
_ISO_STAMP = re.compile(
    rb"[ \t]+(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.\d+)?(?:[ \t]*([+-])(\d\d):?(\d\d))?[ \t]*$"
)
_CTIME_STAMP = re.compile(rb"[ \t]+[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? \d{4}[ \t]*$")
_EXTENDED = (
    b"old mode ",
    b"new mode ",
    b"deleted file mode ",
    b"new file mode ",
    b"copy from ",
    b"copy to ",
    b"rename old ",
    b"rename new ",
    b"rename from ",
    b"rename to ",
    b"similarity index ",
    b"dissimilarity index ",
    b"index ",
)


class HeaderError(ValueError):
    """A file header git would not read, or would read otherwise than it looks; ``line`` is 0-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Header:
    """One file section: its paths inside the tree (``None`` for ``/dev/null``), modes and kind.

    ``line`` is the 0-based index of its first line, ``end`` that of the
    first line after its header; ``hunks_at`` that of its ``---`` line when
    hunks follow, else ``None``; ``hunks`` its hunks, their ``line`` 1-based.
    """

    old: str | None
    new: str | None
    line: int
    hunks_at: int | None = None
    old_mode: str | None = None
    new_mode: str | None = None
    copy: bool = False
    binary: bool = False
    end: int = 0
    hunks: tuple[diffs.Hunk, ...] = ()


@dataclass
class _Git:
    """The state of one ``diff --git`` section while its extended header is read."""

    default: bytes | None
    old: bytes | None = None
    new: bytes | None = None
    is_new: bool = False
    is_delete: bool = False
    copy: bool = False
    old_mode: str | None = None
    new_mode: str | None = None
    hunks_at: int | None = None


def read_headers(lines: list[bytes], strip: int) -> list[Header]:
    """Every file section of ``lines`` (a diff's lines, each with its ``\\n``), in order, with its hunks.

    Raises :class:`HeaderError` for a header git would not read, and
    :class:`patchkit.core.diffs.DiffError` (its ``line`` 1-based) for a hunk that
    does not hold the lines its header counts or a hunk line outside a hunk.
    """
    out: list[Header] = []
    last: diffs.Hunk | None = None
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        # A 'diff --git' line with no header line after it begins no section for git: it is skipped.
        if line.startswith(b"diff --git ") and i + 1 < n and lines[i + 1].startswith((b"--- ", b"+++ ", *_EXTENDED)):
            header, i = _git_section(lines, i, strip)
        elif binary_files(line):
            # GNU diff's mark of a binary change: git skips it silently; patchkit cannot apply it.
            name = line[len(b"Binary files ") :].split(b" and ", 1)[0]
            header, i = Header(old=_decode(name), new=None, line=i, binary=True, end=i + 1), i + 1
        elif line.startswith(b"--- ") and i + 2 < n and lines[i + 1].startswith(b"+++ ") and _is_hunk(lines[i + 2]):
            header, i = _plain_section(lines, i, strip), i + 2
        else:
            diffs.refuse_stray(lines, i, last)
            i += 1
            continue
        hunks, i = diffs.read_hunks(lines, i)
        if hunks:
            header, last = dataclasses.replace(header, hunks=hunks), hunks[-1]
        out.append(header)
    return out


def binary_files(line: bytes) -> bool:
    """Whether ``line`` is diff's ``Binary files A and B differ``: a binary change without its bytes."""
    return line.startswith(b"Binary files ") and line.rstrip(b"\r\n").endswith(b" differ")


def _is_hunk(line: bytes) -> bool:
    return line.startswith(b"@@ -")


def _git_section(lines: list[bytes], i: int, strip: int) -> tuple[Header, int]:
    first = i
    state = _Git(default=_git_header_name(lines[i][len(b"diff --git ") :].rstrip(b"\n"), strip, i))
    i += 1
    binary = False
    while i < len(lines):
        line = lines[i].rstrip(b"\n")
        if _is_hunk(line):
            break
        if line.startswith((b"--- ", b"+++ ")):
            _verify_name(state, line, strip, i)
            if line.startswith(b"+++ ") and i + 1 < len(lines) and _is_hunk(lines[i + 1]):
                state.hunks_at = i - 1
        elif line.startswith(_EXTENDED):
            _extended(state, line, strip, i)
        else:
            binary = line.startswith(b"GIT binary patch") or binary_files(line)
            break
        i += 1
    old, new = _resolve(state, first, strip)
    header = Header(
        old=_decode(old),
        new=_decode(new),
        line=first,
        hunks_at=state.hunks_at,
        old_mode=state.old_mode,
        new_mode=state.new_mode,
        copy=state.copy,
        binary=binary,
        end=i,
    )
    return header, i + binary


def _resolve(state: _Git, first: int, strip: int) -> tuple[bytes | None, bytes | None]:
    """The section's old and new names once its header is read: the ``diff --git`` name when no line gave one."""
    old, new = state.old, state.new
    if old is None and new is None:
        if state.default is None:
            raise HeaderError(
                first,
                f"the 'diff --git' header does not name one file on both sides once {strip} leading "
                f"component{'s' if strip != 1 else ''} are stripped (-p{strip}), and no other line names it",
            )
        old = new = state.default
    if state.is_new:
        old = None
    if state.is_delete:
        new = None
    if (new is None and not state.is_delete) or (old is None and not state.is_new):
        raise HeaderError(first, "the 'diff --git' section names no file on one side")
    return old, new


def _extended(state: _Git, line: bytes, strip: int, at: int) -> None:
    """One extended header line of a ``diff --git`` section."""
    if line.startswith((b"rename from ", b"copy from ")):
        # These names carry no a/ or b/: git strips one component fewer.
        state.old = _find_name(line.split(b" from ", 1)[1], max(strip - 1, 0), 0, at)
        state.copy = line.startswith(b"copy")
    elif line.startswith((b"rename to ", b"copy to ")):
        state.new = _find_name(line.split(b" to ", 1)[1], max(strip - 1, 0), 0, at)
    elif line.startswith((b"rename old ", b"rename new ")):
        raise HeaderError(at, "an old-style 'rename old'/'rename new' line; regenerate the patch with git format-patch")
    elif line.startswith(b"new file mode "):
        state.is_new, state.old, state.new_mode = True, None, _mode(line, at)
    elif line.startswith(b"deleted file mode "):
        state.is_delete, state.new, state.old_mode = True, None, _mode(line, at)
    elif line.startswith(b"old mode "):
        state.old_mode = _mode(line, at)
    elif line.startswith(b"new mode "):
        state.new_mode = _mode(line, at)


def _mode(line: bytes, at: int) -> str:
    value = line.rsplit(b" ", 1)[-1].rstrip(b"\r")
    if not re.fullmatch(rb"[0-7]{6}", value):
        raise HeaderError(at, f"the mode {value[:20]!r} is not six octal digits")
    return value.decode()


def _verify_name(state: _Git, line: bytes, strip: int, at: int) -> None:
    """A ``---``/``+++`` line of a git section: it names the file the section already names, or sets it."""
    old_side = line.startswith(b"---")
    text = line[4:]
    is_null = state.is_new if old_side else state.is_delete
    current = state.old if old_side else state.new
    side = "old" if old_side else "new"
    if current is None and not is_null:
        found = _find_name(text, strip, _TERM_TAB, at)
        if found is None:
            raise HeaderError(at, f"the {side} name {text[:200]!r} has no path left at -p{strip}")
        if old_side:
            state.old = found
        else:
            state.new = found
        return
    if current is not None:
        if is_null:
            raise HeaderError(at, f"the {side} side should be /dev/null (a new or deleted file), the line names a file")
        if _find_name(text, strip, _TERM_TAB, at) != current:
            raise HeaderError(
                at,
                f"the {side} file name differs from the one the section's header already gave it "
                f"({_decode(current)!r}); git refuses such a patch",
            )
    elif not _dev_null(text):
        raise HeaderError(at, f"the {side} side of a new or deleted file should be /dev/null")


def _dev_null(text: bytes) -> bool:
    return text.startswith(b"/dev/null") and (len(text) == 9 or text[9:10] in b" \t\r\n")


def _plain_section(lines: list[bytes], i: int, strip: int) -> Header:
    """A ``---``/``+++`` diff without git's header: no renames, ``/dev/null`` or the epoch for new and deleted."""
    first, second = lines[i][4:].rstrip(b"\n"), lines[i + 1][4:].rstrip(b"\n")
    old: bytes | None
    new: bytes | None
    if _dev_null(first):
        old, new = None, _traditional_name(second, None, strip, i + 1)
        name = new
    elif _dev_null(second):
        old, new = _traditional_name(first, None, strip, i), None
        name = old
    else:
        name = _traditional_name(second, _traditional_name(first, None, strip, i), strip, i + 1)
        old = None if _epoch(first) else name
        new = None if _epoch(second) and old is not None else name
    if name is None:
        raise HeaderError(i, f"no file name is left in the '---'/'+++' lines at -p{strip}")
    return Header(old=_decode(old), new=_decode(new), line=i, hunks_at=i, end=i + 2)


def _traditional_name(text: bytes, default: bytes | None, strip: int, at: int) -> bytes | None:
    if text.startswith(b'"'):
        return _find_name(text, strip, 0, at)
    stamp = _stamp(text)
    if stamp is None:
        return _common_name(text, default, strip, _TERM_TAB)
    return _common_name(text[: stamp.start()], default, strip, 0, whole=True)


def _stamp(text: bytes) -> re.Match[bytes] | None:
    return _ISO_STAMP.search(text) or _CTIME_STAMP.search(text)


def _epoch(text: bytes) -> bool:
    """Whether the timestamp after a plain diff's name is the epoch: GNU diff's mark of a missing file."""
    m = _ISO_STAMP.search(text)
    if m is None:
        return False
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    offset = 0
    if m.group(7):
        offset = (int(m.group(8)) * 60 + int(m.group(9))) * (1 if m.group(7) == b"+" else -1)
    try:
        when = dt.datetime(y, mo, d, h, mi, s, tzinfo=dt.timezone(dt.timedelta(minutes=offset)))
    except ValueError:
        return False
    return when.timestamp() == 0


def _find_name(text: bytes, strip: int, terminate: int, at: int) -> bytes | None:
    """git's ``find_name``: a C-quoted name unquoted, else up to the end (a tab too, for ``---``/``+++``)."""
    if text.startswith(b'"'):
        quoted = _quoted(text, at)
        if quoted is None:
            raise HeaderError(at, f"the quoted file name {text[:200]!r} has no closing quote")
        name = quoted[0]
        for _ in range(strip):
            slash = name.find(b"/")
            if slash < 0:
                return None
            name = name[slash + 1 :]
        return _squash(name) or None
    return _common_name(text, None, strip, terminate)


def _common_name(
    text: bytes, default: bytes | None, strip: int, terminate: int, *, whole: bool = False
) -> bytes | None:
    """git's ``find_name_common``: ``strip`` slashes skipped, ending at a line break (or a tab when asked)."""
    start = 0 if strip == 0 else None
    end = len(text)
    for k, c in enumerate(text):
        if not whole and c in _GIT_SPACE and (c not in b" \t" or (c == 9 and terminate & _TERM_TAB)):
            end = k
            break
        if c == 0x2F:
            strip -= 1
            if strip == 0:
                start = k + 1
    if start is None or start >= end:
        return default
    return _squash(text[start:end])


def _squash(name: bytes) -> bytes:
    return re.sub(rb"/{2,}", b"/", name)


def _quoted(text: bytes, at: int) -> tuple[bytes, bytes] | None:
    """The C-quoted name at the start of ``text`` (which starts with ``"``) unquoted, and what follows it."""
    k = 1
    while k < len(text):
        c = text[k]
        if c == 0x5C:
            k += 2
            continue
        if c == 0x22:
            try:
                return diffs._unquote(text[1:k], at + 1), text[k + 1 :]
            except diffs.DiffError as e:
                raise HeaderError(at, e.message) from e
        k += 1
    return None


def _skip_prefix(strip: int, text: bytes) -> bytes | None:
    """git's ``skip_tree_prefix``: ``text`` after its first ``strip`` slashes; None when it has too few."""
    if strip == 0:
        return None if text.startswith(b"/") else text
    left = strip
    for k, c in enumerate(text):
        if c == 0x2F:
            left -= 1
            if left <= 0:
                return None if k == 0 else text[k + 1 :]
    return None


def _git_header_name(text: bytes, strip: int, at: int) -> bytes | None:
    """The name a ``diff --git`` line gives both sides, as git's ``git_header_name``; None when they differ."""
    if text.startswith(b'"'):
        return _quoted_header_name(text, strip, at)
    name = _skip_prefix(strip, text)
    if name is None:
        return None
    quote = name.find(b'"')
    if quote >= 0:
        # An unquoted first name followed by a quoted second one.
        other = _quoted(name[quote:], at)
        second = _skip_prefix(strip, other[0]) if other is not None else None
        if second is not None and len(second) < quote and name.startswith(second) and name[len(second)] in b" \t":
            return second
        return None
    for k, c in enumerate(name):
        # Both unquoted: the split at a blank where both halves name the same file.
        # git gives up at the first blank whose right-hand side has too few components.
        if c in b" \t":
            second = _skip_prefix(strip, name[k + 1 :])
            if second is None:
                return None
            if second == name[:k]:
                return second
    return None


def _quoted_header_name(text: bytes, strip: int, at: int) -> bytes | None:
    """A ``diff --git`` line whose first name is quoted: the name, when the second names the same file."""
    quoted = _quoted(text, at)
    if quoted is None:
        return None
    first, rest = quoted
    name = _skip_prefix(strip, first)
    second_text = rest.lstrip(b" \t")
    if name is None or rest == second_text:
        return None
    if second_text.startswith(b'"'):
        other = _quoted(second_text, at)
        second = _skip_prefix(strip, other[0]) if other is not None and not other[1] else None
    else:
        second = _skip_prefix(strip, second_text)
    return name if second == name else None


_ESCAPES = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 34: '"', 92: "\\"}


def quote(name: str) -> str:
    """``name`` as git writes it in a header: C-quoted when it has a quote, a backslash, a control or non-ASCII byte.

    The inverse of the reading above, so a patch patchkit writes reads back to the same paths, in git too.
    """
    raw = name.encode("utf-8", "surrogateescape")
    if not any(b < 0x20 or b >= 0x7F or b in (34, 92) for b in raw):
        return name
    out = []
    for b in raw:
        if b in _ESCAPES:
            out.append("\\" + _ESCAPES[b])
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\{b:03o}")
        else:
            out.append(chr(b))
    return '"' + "".join(out) + '"'


def prefixes(strip: int) -> tuple[str, str, str]:
    """The prefixes a patch read at ``-p<strip>`` is written with: old side, new side, and rename lines'.

    ``a/`` and ``b/`` at 1, none at 0 (``--no-prefix``); at 2 and more,
    components a reader strips and nothing else uses.
    """
    if strip == 0:
        return "", "", ""
    more = "p/" * (strip - 1)
    return "a/" + more, "b/" + more, more


def _decode(name: bytes | None) -> str | None:
    return None if name is None else name.decode("utf-8", "surrogateescape")
