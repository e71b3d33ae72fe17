"""git's own three-way merge of many files at once: merge-ort, as ``git merge-tree --write-tree`` runs it.

patchkit does not merge text itself. For a batch of (base, ours, theirs)
triples it builds a scratch bare repository in a temporary directory, writes
the three versions of every file and three commits into it as loose objects
(the two sides children of the base, every file at the same path in all
three, so no rename or add/delete case can arise), merges them with one
``git merge-tree --write-tree -z --name-only OURS THEIRS`` and reads the
merged files back from the loose objects merge-ort wrote (``git cat-file
--batch`` if any is not there): one git process for any number of files,
plus two ``git diff-tree`` when some file conflicts (they locate each
conflict in the three versions, below). ``merging`` starts the merge and lets
the caller work while git runs (the rebase reads the same files on its
workers meanwhile); ``merge_many`` waits at once.

The result is byte for byte what ``git cherry-pick`` or ``git merge-tree``
gives for that file with ``merge.conflictStyle=diff3``: the same clean or
conflict status, the same merged lines, git's conflict markers (CRLF exactly
where git writes CRLF) with the labels the caller asks for in place of
git's. ``git merge-file`` is another command: it diffs with Myers where
merge-ort diffs with histogram, so on some files it merges otherwise.

Git runs disarmed: no system or user configuration, no attributes (a
``.gitattributes`` merge driver or ``text`` conversion never applies: the
paths are numbers), no hooks.

Where each conflict lies in the three versions is not in git's output: git
writes the sections, not their line numbers. ``git diff-tree -U0`` gives the
two histogram scripts (base to ours, base to theirs) that the merge itself ran
on; walking them by libxdiff's own rules (``xdl_do_merge``) names the
conflicting chunks, and each one is checked against the markers git wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchkit.vcs.gitclient import GitFailed, Running, repo_env, run, start

#: What git deems a binary file: a NUL byte in the first 8,000 bytes (``buffer_is_binary``).
BINARY_PROBE = 8000

# Configuration that holds whatever the user's git says: what the merge equals does not depend on it.
_CONFIG = (
    f"core.hooksPath={os.devnull}",
    f"core.attributesFile={os.devnull}",
    "core.abbrev=40",
    # A scratch repository lives for one batch: zlib would cost more than the disk it saves.
    "core.compression=0",
    "pack.compression=0",
    "merge.conflictStyle=diff3",
    "merge.renames=false",
    "merge.renormalize=false",
)
# A script's span: (start, count), 0-based, as libxdiff's scripts give them.
_Span = tuple[int, int]
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def is_binary(data: bytes) -> bool:
    """Whether git merges ``data`` as a binary file (it cannot merge it as text)."""
    return b"\0" in data[:BINARY_PROBE]


@dataclass(frozen=True)
class Labels:
    """The words after the conflict markers: ``<<<<<<< ours``, ``||||||| base``, ``>>>>>>> theirs``."""

    ours: bytes
    base: bytes
    theirs: bytes


@dataclass(frozen=True)
class ConflictSpan:
    """One conflict: lines ``start``..``end`` (0-based, half-open) of the merged file, markers included.

    ``base``, ``ours`` and ``theirs`` are the (start, count) of the lines each
    version has there, 0-based.
    """

    start: int
    end: int
    base: _Span
    ours: _Span
    theirs: _Span


@dataclass(frozen=True)
class Merged:
    """git's merge of one file: the bytes, and its conflicts in file order (none when it merged cleanly)."""

    data: bytes
    conflicts: tuple[ConflictSpan, ...] = ()


def merge_many(triples: Sequence[tuple[bytes, bytes, bytes]], labels: Labels) -> list[Merged]:
    """git's merge of every (base, ours, theirs) in ``triples``, in order, in a handful of git processes.

    No triple may hold a binary file (:func:`is_binary`): the caller refuses
    those. Raises ``GitFailed`` when git dies or answers what it should not,
    ``GitMissing`` when git is not installed.
    """
    with merging(triples, labels) as result:
        return result()


@contextlib.contextmanager
def merging(triples: Sequence[tuple[bytes, bytes, bytes]], labels: Labels) -> Iterator[Callable[[], list[Merged]]]:
    """:func:`merge_many`, started: git merges while the block runs; the function it gives waits for the result.

    The caller does other work meanwhile (the analysis of the same files, on
    forked workers): git's merge runs in a process of its own, on another core.
    """
    if not triples:
        yield list
        return
    room = 3 * sum(len(blob) for triple in triples for blob in triple)
    with tempfile.TemporaryDirectory(prefix="patchkit-merge-", dir=_memory_dir(room)) as tmp:
        batch = _Batch(_scratch(Path(tmp)), triples)
        started = batch.start()
        try:
            yield lambda: batch.finish(started, labels)
        finally:
            started[1].stop()  # before its directory goes: a block that raised leaves no git behind


def _memory_dir(room: int) -> str | None:
    """``/dev/shm`` when it is a writable file system with ``room`` bytes free, else None (the default temp dir).

    The scratch repository lives for one batch: in memory, git's thousand
    object writes cost half what they cost on disk. A small ``/dev/shm``
    (containers default to 64 MiB) is passed over, never filled.
    """
    shm = "/dev/shm"  # noqa: S108 (mkdtemp makes a private 0700 directory in it, as in any temp dir)
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    return shm if os.access(shm, os.W_OK | os.X_OK) and st.f_bavail * st.f_frsize > room else None


def _scratch(tmp: Path) -> Path:
    """An empty bare repository under ``tmp`` (what ``git init --bare`` makes, without its process)."""
    git_dir = tmp / "merge.git"
    (git_dir / "objects").mkdir(parents=True)
    (git_dir / "refs").mkdir()
    (git_dir / "HEAD").write_bytes(b"ref: refs/heads/main\n")
    (git_dir / "config").write_bytes(b"[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
    return git_dir


def _env(git_dir: Path) -> dict[str, str]:
    return {
        **repo_env(git_dir),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_COUNT": "0",
        "GIT_CONFIG_PARAMETERS": "",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
    }


class _Batch:
    """One batch of merges in the scratch repository ``git_dir``; file ``k`` of the batch is at path ``k``."""

    def __init__(self, git_dir: Path, triples: Sequence[tuple[bytes, bytes, bytes]]) -> None:
        self.git_dir = git_dir
        self.triples = triples
        self.env = _env(git_dir)
        self.store = _Objects(git_dir / "objects")
        nonce = secrets.token_hex(16)
        self.refs = (f"refs/patchkit/{nonce}/base", f"refs/patchkit/{nonce}/ours", f"refs/patchkit/{nonce}/theirs")

    def _config(self) -> list[str]:
        argv = [f"--git-dir={self.git_dir}"]
        for value in _CONFIG:
            argv += ["-c", value]
        return argv

    def git(self, args: Sequence[str], stdin: bytes | None = None, ok: tuple[int, ...] = (0,)) -> tuple[int, bytes]:
        done = run(self.git_dir, [*self._config(), *args], env=self.env, stdin=stdin, strip=False)
        return self._checked(args[0], done, ok)

    @staticmethod
    def _checked(command: str, done: tuple[int, bytes, str], ok: tuple[int, ...]) -> tuple[int, bytes]:
        status, out, err = done
        if status not in ok:
            reason = err.strip().splitlines()[-1] if err.strip() else f"exit status {status}"
            raise GitFailed(f"git {command} in a scratch merge repository failed: {reason}")
        return status, out

    def start(self) -> tuple[str, Running]:
        """Write the objects and start git's merge; the base commit's id and the merge, running."""
        base_id = self.load()
        merge = ["merge-tree", "--write-tree", "-z", "--name-only", self.refs[1], self.refs[2]]
        return base_id, start(self.git_dir, [*self._config(), *merge], env=self.env)

    def finish(self, started: tuple[str, Running], labels: Labels) -> list[Merged]:
        """Wait for git's merge and read every file's result back."""
        base_id, running = started
        status, out = self._checked("merge-tree", running.result(), ok=(0, 1))
        fields = out.split(b"\0")
        tree = fields[0].decode("ascii")
        conflicted = {int(name) for name in fields[1 : fields.index(b"", 1)]} if status == 1 else set()
        # merge-ort writes its results as loose objects: read straight from them, else through cat-file.
        data = self.store.files(tree, len(self.triples)) or self.read([f"{tree}:{k}" for k in range(len(self.triples))])
        scripts = self.scripts(sorted(conflicted)) if conflicted else {}
        git_labels = Labels(self.refs[1].encode(), base_id.encode(), self.refs[2].encode())
        results = []
        for k, merged in enumerate(data):
            if k in conflicted:
                results.append(_conflicted(merged, self.triples[k], scripts.get(k, ([], [])), git_labels, labels))
            else:
                results.append(Merged(merged))
        return results

    def load(self) -> str:
        """Write the three versions of every file and the three commits as loose objects; the base commit's id.

        The objects are written here, not by ``git fast-import``: a loose
        object is the zlib stream of its type, size, a NUL byte and its data,
        stored under the SHA-1 of those bytes. In stored (uncompressed)
        deflate blocks it costs one hash and one write per file, a fraction
        of fast-import's pack (its stdin copied to a file, hashed again by
        git, indexed). Git reads them as it reads any loose object.
        """
        store = self.store
        trees = [store.tree([store.blob(triple[side]) for triple in self.triples]) for side in range(3)]
        base = store.commit(trees[0], None)
        for side in (1, 2):
            (self.git_dir / self.refs[side]).parent.mkdir(parents=True, exist_ok=True)
            (self.git_dir / self.refs[side]).write_bytes(store.commit(trees[side], base).hex().encode() + b"\n")
        (self.git_dir / self.refs[0]).write_bytes(base.hex().encode() + b"\n")
        return base.hex()

    def read(self, names: list[str]) -> list[bytes]:
        """The blobs ``names`` name, through one ``git cat-file --batch``."""
        _, out = self.git(["cat-file", "--batch"], stdin="".join(f"{name}\n" for name in names).encode())
        blobs = []
        at = 0
        for name in names:
            eol = out.find(b"\n", at)
            header = out[at:eol].split(b" ")
            if eol < 0 or len(header) != 3 or header[1] != b"blob":
                raise GitFailed(f"git cat-file in a scratch merge repository could not read {name}")
            size = int(header[2])
            blobs.append(out[eol + 1 : eol + 1 + size])
            at = eol + 1 + size + 1
        return blobs

    def scripts(self, paths: list[int]) -> dict[int, tuple[list[tuple[_Span, _Span]], list[tuple[_Span, _Span]]]]:
        """Each file's two histogram scripts, base to ours and base to theirs, as the merge computed them."""
        found: dict[int, tuple[list[tuple[_Span, _Span]], list[tuple[_Span, _Span]]]] = {k: ([], []) for k in paths}
        for side in (1, 2):
            # One line of context: with none, git trims a common tail first (in 1,024-byte blocks) and can
            # align otherwise than the merge did; with some it diffs the whole files, as the merge does.
            args = ["diff-tree", "-r", "-p", "-U1", "--no-indent-heuristic", "--diff-algorithm=histogram"]
            args += ["--no-renames", "--no-ext-diff", "--no-textconv", self.refs[0], self.refs[side], "--"]
            _, out = self.git([*args, *(str(k) for k in paths)])
            for k, script in _parse_scripts(out).items():
                found[k][side - 1].extend(script)
        return found


class _Objects:
    """Loose objects of the scratch repository, written and read without a git process.

    Only for the scratch repository this module makes: every object in it is
    one this class or git's merge wrote, never a stranger's.
    """

    def __init__(self, objects: Path) -> None:
        self.objects = objects
        self._root = f"{objects}/"  # paths as strings: a Path per object cost a tenth of writing it
        self.made: set[str] = set()

    def _path(self, hex_id: str) -> str:
        return f"{self._root}{hex_id[:2]}/{hex_id[2:]}"

    def write(self, kind: bytes, data: bytes) -> bytes:
        """Store ``data`` as an object of type ``kind`` (unless it is there); its 20-byte id."""
        header = b"%s %d\0" % (kind, len(data))
        digest = hashlib.sha1(header, usedforsecurity=False)
        digest.update(data)
        hex_id = digest.hexdigest()
        if hex_id in self.made:
            return digest.digest()
        if hex_id[:2] not in self.made:
            os.makedirs(self._root + hex_id[:2], exist_ok=True)
            self.made.add(hex_id[:2])
        body = _stored(header + data)
        fd = os.open(self._path(hex_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            _write_all(fd, body)
        finally:
            os.close(fd)
        self.made.add(hex_id)
        return digest.digest()

    def blob(self, data: bytes) -> bytes:
        """A blob of ``data``; its id."""
        return self.write(b"blob", data)

    def tree(self, blobs: list[bytes]) -> bytes:
        """A tree with blob ``blobs[k]`` at path ``k`` (mode 100644); its id."""
        # git orders a tree's entries by name, bytewise: "10" before "2".
        names = sorted(b"%d" % k for k in range(len(blobs)))
        return self.write(b"tree", b"".join(b"100644 " + name + b"\0" + blobs[int(name)] for name in names))

    def commit(self, tree: bytes, parent: bytes | None) -> bytes:
        """A commit of ``tree`` with the one ``parent`` (or none), an empty message and a fixed date; its id."""
        text = b"tree %s\n" % tree.hex().encode()
        if parent is not None:
            text += b"parent %s\n" % parent.hex().encode()
        text += b"author patchkit <patchkit> 0 +0000\ncommitter patchkit <patchkit> 0 +0000\n\n"
        return self.write(b"commit", text)

    def read(self, hex_id: str, kind: bytes) -> bytes | None:
        """The data of loose object ``hex_id`` if it is of type ``kind`` and reads back to its id, else None."""
        try:
            with open(self._path(hex_id), "rb") as f:
                raw = zlib.decompress(f.read())
        except (OSError, zlib.error):
            return None
        nul = raw.find(b"\0")
        if raw[:nul] != b"%s %d" % (kind, len(raw) - nul - 1):
            return None
        if hashlib.sha1(raw, usedforsecurity=False).hexdigest() != hex_id:
            return None
        return raw[nul + 1 :]

    def files(self, tree_id: str, n: int) -> list[bytes] | None:
        """The blobs at paths 0..n-1 of tree ``tree_id`` as git's merge wrote it, or None when any is not loose here."""
        tree = self.read(tree_id, b"tree")
        if tree is None:
            return None
        ids: dict[int, str] = {}
        at = 0
        while at < len(tree):
            nul = tree.index(b"\0", at)
            mode, _, name = tree[at:nul].partition(b" ")
            if mode != b"100644" or not name.isdigit():
                return None
            ids[int(name)] = tree[nul + 1 : nul + 21].hex()
            at = nul + 21
        out = []
        for k in range(n):
            data = self.read(ids[k], b"blob") if k in ids else None
            if data is None:
                return None
            out.append(data)
        return out


def _stored(data: bytes) -> bytes:
    """``data`` as a zlib stream of stored (uncompressed) deflate blocks: what ``zlib.compress(data, 0)`` gives.

    Built here, not by zlib: at level 0 zlib still runs its deflate loop
    over every byte, several times slower than copying the blocks and
    computing the checksum.
    """
    parts = [b"\x78\x01"]  # deflate, 32 KiB window, no dictionary, fastest level
    size = len(data)
    for at in range(0, size, _STORED_MAX):
        block = data[at : at + _STORED_MAX]
        final = at + _STORED_MAX >= size
        parts += [struct.pack("<BHH", final, len(block), len(block) ^ 0xFFFF), block]
    if not size:
        parts.append(b"\x01\x00\x00\xff\xff")
    parts.append(struct.pack(">I", zlib.adler32(data)))
    return b"".join(parts)


_STORED_MAX = 0xFFFF  # the most bytes one stored deflate block holds


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _parse_scripts(out: bytes) -> dict[int, list[tuple[_Span, _Span]]]:
    """The changes of ``git diff-tree -p`` output per path, as libxdiff's (base span, side span).

    Read from the hunks' lines, a run of removed and added lines between two
    context lines being one change of the script, and counted by the hunk
    header so that no line of a file is taken for a header.
    """
    scripts: dict[int, list[tuple[_Span, _Span]]] = {}
    current: list[tuple[_Span, _Span]] = []
    lines = out.split(b"\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith(b"diff --git a/"):
            current = scripts.setdefault(int(line[len(b"diff --git a/") :].split(b" ", 1)[0]), [])
        elif line.startswith(b"@@ -") and (m := _HUNK.match(line)) is not None:
            i = _hunk_changes(lines, i, m, current)
    return scripts


def _hunk_changes(lines: list[bytes], i: int, m: re.Match[bytes], out: list[tuple[_Span, _Span]]) -> int:
    """Append the changes of the hunk whose header ``m`` is and whose lines start at ``lines[i]``; the line after it."""
    left = [1 if m.group(2) is None else int(m.group(2)), 1 if m.group(4) is None else int(m.group(4))]
    # 0-based positions: a header names the line before an empty side, and the first line of any other.
    at = [int(m.group(1)) - (left[0] > 0), int(m.group(3)) - (left[1] > 0)]
    start: tuple[int, int] | None = None  # where the run of changed lines being read began
    while (left[0] > 0 or left[1] > 0) and i < len(lines):
        tag = lines[i][:1]
        i += 1
        sides = {b" ": (0, 1), b"-": (0,), b"+": (1,)}.get(tag, ())
        if tag == b" " and start is not None:
            out.append(((start[0], at[0] - start[0]), (start[1], at[1] - start[1])))
            start = None
        elif tag in (b"-", b"+") and start is None:
            start = (at[0], at[1])
        for side in sides:
            at[side] += 1
            left[side] -= 1
    if start is not None:
        out.append(((start[0], at[0] - start[0]), (start[1], at[1] - start[1])))
    while i < len(lines) and lines[i].startswith(b"\\"):  # "\ No newline at end of file" after the last line
        i += 1
    return i


def lines_of(data: bytes) -> list[bytes]:
    """``data`` cut after each ``\\n``, as libxdiff reads records (a last line without one is a record too)."""
    lines = data.split(b"\n")
    last = lines.pop()
    out = [line + b"\n" for line in lines]
    if last:
        out.append(last)
    return out


@dataclass
class _Chunk:
    mode: int  # 0: conflict, 1: ours, 2: theirs (libxdiff's numbering)
    i0: int
    c0: int
    i1: int
    c1: int
    i2: int
    c2: int


def chunks(
    ours_script: list[tuple[_Span, _Span]],
    theirs_script: list[tuple[_Span, _Span]],
    sizes: tuple[int, int, int],
    ours: list[bytes],
    theirs: list[bytes],
) -> list[_Chunk]:
    """The chunks of libxdiff's merge at its EAGER level (``xdl_do_merge``) from the two scripts."""
    out: list[_Chunk] = []
    a = b = 0
    while a < len(ours_script) and b < len(theirs_script):
        (x0, xc0), (x1, xc1) = ours_script[a]
        (y0, yc0), (y2, yc2) = theirs_script[b]
        if x0 + xc0 < y0:
            _append(out, _Chunk(1, x0, xc0, x1, xc1, y2 - y0 + x0, xc0))
            a += 1
            continue
        if y0 + yc0 < x0:
            _append(out, _Chunk(2, y0, yc0, x1 - x0 + y0, yc0, y2, yc2))
            b += 1
            continue
        if x0 != y0 or xc0 != yc0 or xc1 != yc2 or ours[x1 : x1 + xc1] != theirs[y2 : y2 + yc2]:
            _append(out, _conflict(ours_script[a], theirs_script[b]))
        end1, end2 = x0 + xc0, y0 + yc0
        if end1 >= end2:
            b += 1
        if end2 >= end1:
            a += 1
    n0, n1, n2 = sizes
    for (x0, xc0), (x1, xc1) in ours_script[a:]:
        _append(out, _Chunk(1, x0, xc0, x1, xc1, x0 + n2 - n0, xc0))
    for (y0, yc0), (y2, yc2) in theirs_script[b:]:
        _append(out, _Chunk(2, y0, yc0, y0 + n1 - n0, yc0, y2, yc2))
    return out


def _conflict(mine: tuple[_Span, _Span], upstream: tuple[_Span, _Span]) -> _Chunk:
    """Two overlapping changes of the scripts, different: the conflict chunk spanning both (``xdl_do_merge``)."""
    (x0, xc0), (x1, xc1) = mine
    (y0, yc0), (y2, yc2) = upstream
    off = x0 - y0
    ffo = off + xc0 - yc0
    i0, i1, i2 = x0, x1, y2
    if off > 0:
        i0, i1 = i0 - off, i1 - off
    else:
        i2 += off
    c0, c1, c2 = x0 + xc0 - i0, x1 + xc1 - i1, y2 + yc2 - i2
    if ffo < 0:
        c0, c1 = c0 - ffo, c1 - ffo
    else:
        c2 += ffo
    return _Chunk(0, i0, c0, i1, c1, i2, c2)


def _append(out: list[_Chunk], c: _Chunk) -> None:
    """``xdl_append_merge``: a chunk touching the last one in either side joins it (a conflict if they differ)."""
    if out and (c.i1 <= out[-1].i1 + out[-1].c1 or c.i2 <= out[-1].i2 + out[-1].c2):
        m = out[-1]
        if c.mode != m.mode:
            m.mode = 0
        m.c0, m.c1, m.c2 = c.i0 + c.c0 - m.i0, c.i1 + c.c1 - m.i1, c.i2 + c.c2 - m.i2
    else:
        out.append(c)


def _conflicted(
    merged: bytes,
    triple: tuple[bytes, bytes, bytes],
    scripts: tuple[list[tuple[_Span, _Span]], list[tuple[_Span, _Span]]],
    git_labels: Labels,
    labels: Labels,
) -> Merged:
    """A conflicted file: git's markers relabelled, and where each conflict lies."""
    base, ours, theirs = (lines_of(t) for t in triple)
    found = [c for c in chunks(*scripts, (len(base), len(ours), len(theirs)), ours, theirs) if c.mode == 0]
    lines = lines_of(merged)
    heads = {
        b"<<<<<<< " + git_labels.ours: b"<<<<<<< " + labels.ours,
        b"||||||| " + git_labels.base: b"||||||| " + labels.base,
        b">>>>>>> " + git_labels.theirs: b">>>>>>> " + labels.theirs,
    }
    starts: list[int] = []
    ends: list[int] = []
    for number, line in enumerate(lines):
        body = line.rstrip(b"\n").removesuffix(b"\r")
        new = heads.get(body)
        if new is not None:
            lines[number] = new + line[len(body) :]
            if body.startswith(b"<"):
                starts.append(number)
            elif body.startswith(b">"):
                ends.append(number + 1)
    spans = _spans(found, starts, ends, lines)
    return Merged(b"".join(lines), tuple(spans))


def _spans(found: list[_Chunk], starts: list[int], ends: list[int], lines: list[bytes]) -> list[ConflictSpan]:
    """Each conflict's place: from the chunks when they match git's markers, else counted from the markers."""
    if len(found) == len(starts) == len(ends) and all(
        e - s == c.c0 + c.c1 + c.c2 + 4 and lines[s + 1 + c.c1].startswith(b"||||||| ")
        for c, s, e in zip(found, starts, ends, strict=True)
    ):
        return [
            ConflictSpan(s, e, (c.i0, c.c0), (c.i1, c.c1), (c.i2, c.c2))
            for c, s, e in zip(found, starts, ends, strict=True)
        ]
    return _counted(starts, ends, lines)


def _counted(starts: list[int], ends: list[int], lines: list[bytes]) -> list[ConflictSpan]:
    """The conflicts' places as far as the markers tell, for a merge the scripts did not explain.

    Each section is read off the markers (the first ``=======`` after the
    base marker ends the base section) and placed as many lines after the
    previous conflict in each version as in the merged file: exact when no
    change merged cleanly between two conflicts.
    """
    spans = []
    at = [0, 0, 0]
    after = 0
    for s, e in zip(starts, ends, strict=False):
        block = [line.rstrip(b"\n").removesuffix(b"\r") for line in lines[s:e]]
        bar = next((i for i, line in enumerate(block) if line.startswith(b"||||||| ")), 1)
        sep = next((i for i in range(bar + 1, len(block)) if block[i] == b"======="), len(block) - 1)
        counts = (sep - bar - 1, bar - 1, len(block) - sep - 2)  # base, ours, theirs
        gap = s - after
        places = [at[i] + gap for i in range(3)]
        spans.append(ConflictSpan(s, e, (places[0], counts[0]), (places[1], counts[1]), (places[2], counts[2])))
        at = [places[i] + counts[i] for i in range(3)]
        after = e
    return spans
