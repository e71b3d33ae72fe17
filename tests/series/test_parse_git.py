"""Series patches read as ``git apply -p<N>`` reads them: a seeded differential test against git itself.

Each case is a real git repository with generated file names (spaces, tabs,
quotes, backslashes, non-ASCII, leading dashes, deep directories) and one
commit of edits, renames with and without edits, copies, mode changes, new
empty and new files, deletions and binary files. The files' lines include
what a patch reader could take for its own (``-- `` that reads ``--- `` once
removed, ``++ `` that reads ``+++ ``, headers, hunk headers, mail lines),
blanks-only lines, CRLF on some lines or all, very long lines, newline-only
files and a NUL byte past git's binary probe. Its patch is made in every
form a queue holds (``git format-patch`` default, ``--no-prefix``, other
prefixes at strip 2 and 3, ``-M``, ``-C -C``, ``--binary``, raw UTF-8 names, ``git diff`` and
GNU ``diff -ruN``), read by patchkit at the matching strip level and
compared with git: the file list (old path, new path, kind, new mode) with
``git apply --numstat --summary -z -p<N>``, and the tree patchkit's series
applier makes from the pre-image with the one ``git apply -p<N>`` makes.
A binary change must be refused, and only that.

CI runs a bounded sample; ``PATCHKIT_SERIES_GIT_CASES=N`` runs more
(``PATCHKIT_SERIES_GIT_SEED`` picks another seed).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import stat
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from patchkit.series.apply import Item, SeriesApplyError, apply_series
from patchkit.series.parse import PatchParseError, parse_patch

SEED = int(os.environ.get("PATCHKIT_SERIES_GIT_SEED", "30"))
CASES = int(os.environ.get("PATCHKIT_SERIES_GIT_CASES", "20"))

# Name components git quotes (tab, quote, backslash, non-ASCII) or that trip a naive reader (spaces, dashes).
_PIECES = [
    "sp ace",
    "two  spaces",
    "t\tab",
    'dq"uote',
    "back\\slash",
    "café",
    "日本",
    "-dash",
    "--x",
    "a",
    "b",
    "pkg",
    "deep",
    "end ",
    "x.y",
    "#hash",
]
_ENV = {
    "GIT_AUTHOR_DATE": "2026-01-05T10:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-05T10:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "PATH": "/usr/bin:/bin",
}


def _run(cwd: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[bytes]:
    env = {**_ENV, "HOME": str(cwd)}
    done = subprocess.run(list(args), cwd=cwd, capture_output=True, env=env, check=False, timeout=60)
    if ok and done.returncode != 0:
        raise AssertionError(f"{args}: {done.stderr.decode(errors='replace')}")
    return done


def _git(cwd: Path, *args: str) -> bytes:
    return _run(cwd, "git", "-c", "user.name=Dev", "-c", "user.email=dev@example.invalid", *args).stdout


# --------------------------------------------------------------------------- generated repositories


def _name(rng: random.Random) -> str:
    depth = rng.choice([1, 1, 2, 2, 3, 5])
    parts = [rng.choice(_PIECES) + (f"{rng.randrange(100)}" if rng.random() < 0.5 else "") for _ in range(depth)]
    return "/".join(parts) + rng.choice(["", ".py", ".txt"])


# Lines a reader of patches could take for its own: a removed "-- " reads "--- " in the patch, an added
# "++ " reads "+++ "; headers, hunk headers, the no-newline marker, a mail's "From " and "---" lines.
_ODD = ["-- ", "++ ", "--- a/x", "+++ b/x", "@@ -1 +1 @@", "diff --git a/x b/x", "\\ No newline at end of file",
        "From dev@example.invalid Mon Sep 17 00:00:00 2001", "---", "Subject: x", "    ", "\t", "trail "]  # fmt: skip


def _text(rng: random.Random) -> bytes:
    words = ["alpha", "beta", "gamma", "return x", "def f():", "    pass", "", "# note", "import os"]
    if rng.random() < 0.3:
        words += _ODD
    if rng.random() < 0.03:
        return rng.choice([b"\n", b"\n\n", b"\r\n"])  # newlines only
    lines = [
        f"{rng.choice(words)} {i}" if rng.random() < 0.9 else rng.choice(words) for i in range(rng.randrange(8, 30))
    ]
    if rng.random() < 0.05:
        lines[rng.randrange(len(lines))] = "x = '" + "ab" * rng.choice([5_000, 30_000]) + "'"  # a very long line
    if rng.random() < 0.15:  # CRLF, on every line or some
        every = rng.random() < 0.5
        lines = [line + "\r" if every or rng.random() < 0.5 else line for line in lines]
    if rng.random() < 0.05:  # a NUL byte past git's 8,000-byte binary probe: text to git
        lines[:0] = ["#" * 8100, "x = '\0'"]
    end = b"\n" if rng.random() < 0.9 else b""
    return "\n".join(lines).encode() + end


def _edit(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    k = rng.randrange(len(lines))
    lines[k] = lines[k] + b" edited"
    if rng.random() < 0.5:
        lines.insert(rng.randrange(len(lines)), b"inserted line")
    return b"\n".join(lines)


@dataclass
class Tree:
    """Files by path: (bytes, executable)."""

    files: dict[str, tuple[bytes, bool]]

    def clash(self, path: str) -> bool:
        parts = path.split("/")
        prefixes = {"/".join(parts[:i]) for i in range(1, len(parts))}
        return any(p == path or p in prefixes or p.startswith(path + "/") for p in self.files)

    def write(self, root: Path) -> None:
        for path, (data, executable) in self.files.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o755 if executable else 0o644)


def _fresh(rng: random.Random, tree: Tree) -> str:
    while True:
        path = _name(rng)
        if not tree.clash(path):
            return path


def _base(rng: random.Random) -> Tree:
    tree = Tree({})
    for _ in range(rng.randrange(5, 10)):
        data = _text(rng) if rng.random() < 0.85 else bytes(rng.randrange(256) for _ in range(64)) + b"\0"
        tree.files[_fresh(rng, tree)] = (data, rng.random() < 0.2)
    return tree


def _change(rng: random.Random, base: Tree) -> Tree:
    """The next commit: every kind of change git diffs, each on its own file."""
    files = dict(base.files)
    head = Tree(files)
    paths = list(base.files)
    rng.shuffle(paths)
    ops = ["edit", "rename", "rename-edit", "copy", "copy-edit", "mode", "delete", "keep"]
    for path, op in zip(paths, rng.sample(ops * 2, len(paths)), strict=False):
        data, executable = files[path]
        if op == "edit":
            files[path] = (_edit(rng, data), executable)
        elif op in ("rename", "rename-edit", "copy", "copy-edit"):
            dest = _fresh(rng, head)
            if op.startswith("rename"):
                del files[path]
            files[dest] = (_edit(rng, data) if op.endswith("edit") else data, executable)
        elif op == "mode":
            files[path] = (data, not executable)
        elif op == "delete":
            del files[path]
    files[_fresh(rng, head)] = (b"", False)  # a new empty file
    files[_fresh(rng, head)] = (_text(rng), rng.random() < 0.3)
    return head


def _commit(repo: Path, tree: Tree) -> str:
    for child in repo.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    tree.write(repo)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "change")
    return _git(repo, "rev-parse", "HEAD").decode().strip()


# The forms of a patch: (label, command after the base and head commits are made, -p level).
FORMS: list[tuple[str, list[str], int]] = [
    ("format-patch", ["git", "format-patch", "--stdout", "{base}..{head}"], 1),
    ("format-patch --no-prefix", ["git", "format-patch", "--stdout", "--no-prefix", "{base}..{head}"], 0),
    (
        "format-patch --src-prefix=s/x/ --dst-prefix=d/y/",
        ["git", "format-patch", "--stdout", "--src-prefix=s/x/", "--dst-prefix=d/y/", "{base}..{head}"],
        2,
    ),
    (
        "format-patch --src-prefix=s/x/y/ --dst-prefix=d/y/z/",
        ["git", "format-patch", "--stdout", "--src-prefix=s/x/y/", "--dst-prefix=d/y/z/", "-M", "{base}..{head}"],
        3,
    ),
    ("format-patch -M", ["git", "format-patch", "--stdout", "-M", "{base}..{head}"], 1),
    ("format-patch -C -C", ["git", "format-patch", "--stdout", "-C", "-C", "{base}..{head}"], 1),
    ("format-patch --binary", ["git", "format-patch", "--stdout", "--binary", "-M", "{base}..{head}"], 1),
    (
        "format-patch, raw UTF-8 names",
        ["git", "-c", "core.quotePath=false", "format-patch", "--stdout", "-M", "--no-prefix", "{base}..{head}"],
        0,
    ),
    ("git diff", ["git", "diff", "--no-renames", "{base}", "{head}"], 1),
    ("git diff -M --no-prefix", ["git", "diff", "-M", "--no-prefix", "{base}", "{head}"], 0),
    ("diff -ruN", ["diff", "-ruN", "a", "b"], 1),
]


@dataclass(frozen=True)
class Case:
    """One generated repository: the pre-image tree and its patch in one form."""

    root: Path
    before: Tree
    patch: bytes
    strip: int
    label: str


def _cases(tmp: Path, seed: int, count: int) -> Iterable[Case]:
    rng = random.Random(seed)
    for k in range(count):
        before = _base(rng)
        after = _change(rng, before)
        yield from _forms(tmp / f"case{k}", before, after)


def _forms(root: Path, before: Tree, after: Tree) -> Iterable[Case]:
    """The change from ``before`` to ``after``, committed in a repository under ``root``, in every form."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    base, head = _commit(repo, before), _commit(repo, after)
    for label, command, strip in FORMS:
        if command[0] == "diff":
            before.write(root / "a")
            after.write(root / "b")
            patch = _run(root, *command, ok=False).stdout
        else:
            patch = _git(repo, *(c.format(base=base, head=head) for c in command[1:]))
        yield Case(root, before, patch, strip, label)


# --------------------------------------------------------------------------- what git reads


Entry = tuple[str | None, str | None, str, str | None]


def _git_reads(case: Case) -> tuple[list[Entry], bool] | str:
    """``git apply --numstat --summary -z``: (old path, new path, kind, new mode) per file, and any binary.

    What git says when it cannot read the patch (a rename whose name has fewer
    components than ``-p`` strips, for one), instead.
    """
    patch = case.root / "p.patch"
    patch.write_bytes(case.patch)
    done = _run(case.root, "git", "apply", "--numstat", "--summary", "-z", f"-p{case.strip}", str(patch), ok=False)
    if done.returncode != 0:
        return done.stderr.decode(errors="replace").strip()
    out = done.stdout
    *numstat, summary = out.split(b"\0")
    names, binary = [], False
    for entry in numstat:
        added, _, name = entry.split(b"\t", 2)
        binary |= added == b"-"
        names.append(name.decode("utf-8", "surrogateescape"))
    # GNU diff's "Binary files … differ" line: git skips that change silently, patchkit refuses the patch.
    binary |= re.search(rb"(?m)^Binary files .* differ$", case.patch) is not None
    # Each name's summary lines in patch order, as numstat lists them: -p2 can give two sections one name.
    kinds: dict[str, list[tuple[str | None, str, str | None]]] = {}
    last = ""
    for raw in summary.decode("utf-8", "surrogateescape").split("\n"):
        if m := re.fullmatch(r" (create|delete)(?: mode (\d{6}))? (.*)", raw):  # no mode: a plain diff
            kinds.setdefault(m[3], []).append((None, "add", m[2]) if m[1] == "create" else (m[3], "delete", None))
        elif m := re.fullmatch(r" (rename|copy) (.*)\{(.*) => (.*)\} \(\d+%\)", raw) or re.fullmatch(
            r" (rename|copy) ()(.*) => (.*) \(\d+%\)", raw
        ):
            last = m[2] + m[4]
            kinds.setdefault(last, []).append((m[2] + m[3], m[1], None))
        elif m := re.fullmatch(r" mode change \d{6} => (\d{6}) (.*)", raw):  # a file's own mode change
            kinds.setdefault(m[2], []).append((m[2], "modify", m[1]))
        elif m := re.fullmatch(r" mode change \d{6} => (\d{6})", raw):  # the rename or copy above's
            old, kind, _ = kinds[last][-1]
            kinds[last][-1] = (old, kind, m[1])
        elif raw.strip():
            raise AssertionError(f"unread summary line {raw!r}")
    entries: list[Entry] = []
    for name in names:
        queue = kinds.get(name)
        old, kind, mode = queue.pop(0) if queue else (name, "modify", None)
        entries.append((old if kind != "delete" else name, None if kind == "delete" else name, kind, mode))
    return entries, binary


def _patchkit_reads(case: Case) -> list[Entry]:
    parsed = parse_patch(case.patch, "p.patch", strip=case.strip)
    out: list[Entry] = []
    for f in parsed.files:
        changed = f.kind == "add" or (f.old_mode is not None and f.new_mode not in (None, f.old_mode))
        out.append((f.old_path, f.new_path, f.kind, f.new_mode if changed else None))
    return out


def _git_applies(case: Case) -> dict[str, bytes] | str:
    where = case.root / "git-applied"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    case.before.write(where)
    (case.root / "p.patch").write_bytes(case.patch)
    done = _run(where, "git", "apply", f"-p{case.strip}", str(case.root / "p.patch"), ok=False)
    if done.returncode != 0:
        return "refused"
    return {
        p.relative_to(where).as_posix(): p.read_bytes() + (b"\0x" if p.stat().st_mode & stat.S_IXUSR else b"")
        for p in where.rglob("*")
        if p.is_file()
    }


def _patchkit_applies(case: Case) -> dict[str, bytes] | str:
    parsed = parse_patch(case.patch, "p.patch", strip=case.strip)
    before = {p: data for p, (data, _) in case.before.files.items()}
    try:
        # The whole pre-image is there: a file it lacks is a failure, as for git, not a part not carried.
        items = [Item("p", "p.patch", parsed)]
        result = apply_series(items, lambda paths: {p: before.get(p) for p in paths}, carried=lambda _: True)
    except SeriesApplyError as e:
        if any(path.startswith(f"{e.path}/") for path in before):
            # The change's file is a directory of the tree (a name that lost a component at -p2):
            # git reads a directory as a submodule and "renames" it to an empty directory, no file.
            return "refused: a directory"
        return "refused"
    executable = {p for p, (_, x) in case.before.files.items() if x}
    for f in parsed.files:
        if f.kind == "rename" and f.old_path in executable:
            executable.add(f.new_path or "")
        if f.kind == "copy" and f.old_path in executable:
            executable.add(f.new_path or "")
    for path, mode in result.modes.items():
        (executable.add if mode.endswith("755") else executable.discard)(path)
    tree = {**before, **result.files}
    return {p: data + (b"\0x" if p in executable else b"") for p, data in tree.items() if data is not None}


def disagreements(tmp: Path, seed: int, count: int) -> tuple[int, list[str]]:
    """How many patches were compared, and every disagreement with git, described."""
    found: list[str] = []
    compared = 0
    for case in _cases(tmp, seed, count):
        compared += 1
        problem = _disagreement(case)
        if problem is not None:
            found.append(f"{case.label}: {problem}")
    return compared, found


def _disagreement(case: Case) -> str | None:
    """How patchkit's reading or applying of ``case`` differs from git's; None when they agree."""
    git_read = _git_reads(case)
    try:
        read = _patchkit_reads(case)
    except PatchParseError as e:
        if isinstance(git_read, str):
            return None  # both refuse
        expected, binary = git_read
        return None if binary and "binary" in e.detail else f"patchkit refuses ({e}); git reads {expected}"
    if isinstance(git_read, str):
        return f"git refuses ({git_read}), patchkit reads {read}"
    expected, binary = git_read
    git_tree = _git_applies(case)
    expected = _as_git_applies(expected, git_tree)
    if binary:
        return f"git reads a binary change, patchkit reads {read}"
    if read != expected:
        return f"patchkit reads {read}, git {expected}"
    ours = _patchkit_applies(case)
    if ours not in (git_tree, "refused: a directory"):
        return f"the trees differ after applying {case.patch[:4000]!r}"
    return None


def _as_git_applies(entries: list[Entry], tree: dict[str, bytes] | str) -> list[Entry]:
    """git's reading, a deletion ``git apply`` leaves in place read as what it is: the file emptied.

    A plain diff that removes every line of a file, with neither ``/dev/null``
    nor the epoch on its ``+++`` line (``diff -ruN`` of a file that became
    empty), leaves apply.c's ``is_delete`` undecided (-1): ``--summary`` prints
    that as a deletion, while ``git apply`` (and GNU ``patch``) writes the
    empty file. What the tree gets is the reading patchkit must equal.
    """
    if isinstance(tree, str):
        return entries
    return [
        (old, old, "modify", None)
        if kind == "delete" and old is not None and tree.get(old) in (b"", b"\0x")
        else (old, new, kind, mode)
        for old, new, kind, mode in entries
    ]


def test_every_form_of_a_generated_patch_is_read_and_applied_as_git_does(tmp_path: Path) -> None:
    compared, found = disagreements(tmp_path, SEED, CASES)
    assert compared == CASES * len(FORMS)
    assert found == [], "\n".join(found[:5])


_TEXT = b"".join(b"line %d of the script\n" % i for i in range(12))


def test_a_file_emptied_with_a_mode_change_and_copied_with_an_edit_reads_and_applies_as_git(tmp_path: Path) -> None:
    """The copy reads the file as the patch found it; the emptied file stays, empty, in every form.

    ``format-patch -C -C`` writes the emptying (and ``old mode``/``new mode``)
    before the copy whose hunks expect the original lines: git applies the
    copy to the original. ``diff -ruN`` writes the emptying as a plain hunk
    removing every line: ``git apply --summary`` calls that a deletion, but
    ``git apply`` leaves the empty file, and so does patchkit.
    """
    before = Tree({"sp ace": (_TEXT, True), "keep.py": (b"x = 1\n", False)})
    copied = _TEXT.replace(b"line 3 of", b"line 3, edited, of")
    after = Tree({"sp ace": (b"", False), "t\tab": (copied, True), "keep.py": (b"x = 1\n", False)})
    problems = [f"{c.label}: {p}" for c in _forms(tmp_path, before, after) if (p := _disagreement(c)) is not None]
    assert problems == []
    cases = {c.label: c for c in _forms(tmp_path / "again", before, after)}
    copies = cases["format-patch -C -C"]
    assert b"copy from sp ace" in copies.patch and b"new mode 100644" in copies.patch
    assert _patchkit_applies(copies) == {"sp ace": b"", "t\tab": copied + b"\0x", "keep.py": b"x = 1\n"}
    plain = cases["diff -ruN"]
    assert _patchkit_reads(plain)[0] == ("sp ace", "sp ace", "modify", None)
    assert _git_applies(plain)["sp ace"] == b"\0x"  # git keeps it: empty, still executable (a plain diff has no modes)


def test_in_a_file_of_several_mails_a_copy_reads_what_the_earlier_mails_made(tmp_path: Path) -> None:
    """Each mail applies to the tree the mails before it left, as ``git am`` applies them one at a time."""
    edited = _TEXT.replace(b"line 1 of", b"line 1, edited, of")
    copied = edited.replace(b"line 9 of", b"line 9, edited, of")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    base = _commit(repo, Tree({"a.py": (_TEXT, False)}))
    _commit(repo, Tree({"a.py": (edited, False)}))
    _commit(repo, Tree({"a.py": (edited, False), "b.py": (copied, False)}))
    patch = _git(repo, "format-patch", "--stdout", "-C", "-C", f"{base}..HEAD")
    assert patch.count(b"\nFrom: ") == 2 and b"copy from a.py" in patch
    (tmp_path / "p.patch").write_bytes(patch)
    _git(repo, "checkout", "-q", base)
    _git(repo, "am", "-q", str(tmp_path / "p.patch"))
    parsed = parse_patch(patch, "p.patch")
    result = apply_series([Item("p", "p.patch", parsed)], lambda paths: {p: {"a.py": _TEXT}.get(p) for p in paths})
    assert result.files == {"a.py": (repo / "a.py").read_bytes(), "b.py": (repo / "b.py").read_bytes()}
    assert result.files["b.py"] == copied


def test_at_p2_a_rename_whose_source_names_a_directory_is_refused(tmp_path: Path) -> None:
    """Rename lines lose one component fewer than -p2 strips: ``rename from dq/back`` reads ``back``, a directory.

    git reads that directory as a submodule and leaves an empty directory
    where the file should go; patchkit refuses the patch, naming the path.
    """
    before = Tree({"dq/back": (_TEXT, False), "back/f.py": (b"x = 1\n", False)})
    after = Tree({"back/f.py": (b"x = 1\n", False), "sp/new.py": (_TEXT, False)})
    case = next(c for c in _forms(tmp_path, before, after) if c.label.startswith("format-patch --src-prefix"))
    assert b"rename from dq/back" in case.patch
    assert _patchkit_reads(case) == _git_reads(case)[0] == [("back", "new.py", "rename", None)]
    assert _git_applies(case) == {"back/f.py": b"x = 1\n", "dq/back": _TEXT}  # new.py is an empty directory
    assert (case.root / "git-applied" / "new.py").is_dir()
    assert _patchkit_applies(case) == "refused: a directory"


def test_at_p2_a_rename_and_a_new_file_that_read_as_one_name_are_two_changes_both_refused(tmp_path: Path) -> None:
    """``rename to q/日本.py`` loses ``q/`` at -p2, as the new file ``s/x/日本.py`` loses ``s/x/``: both are 日本.py.

    git lists both changes, in patch order, and refuses to apply them; so does patchkit.
    """
    before = Tree({"x/a34/-dash.txt": (_TEXT, False)})
    after = Tree({"q/日本.py": (_TEXT, False), "日本.py": (b"new = 1\n", False)})
    case = next(c for c in _forms(tmp_path, before, after) if c.label.startswith("format-patch --src-prefix"))
    read = [("a34/-dash.txt", "日本.py", "rename", None), (None, "日本.py", "add", "100644")]
    assert _patchkit_reads(case) == _git_reads(case)[0] == read
    assert _git_applies(case) == _patchkit_applies(case) == "refused"


def test_a_text_patch_applies_to_a_file_with_a_nul_byte_as_git_applies_it(tmp_path: Path) -> None:
    """A NUL past git's 8,000-byte probe: git diffs the file as text, and ``git apply`` applies its hunks.

    patchkit used to refuse any tree file holding a NUL byte ("the tree's file is binary").
    """
    late = b"#" * 8100 + b"\nx = '\0'\ny = 1\n"
    before = Tree({"n.py": (late, False), "sp ace.py": (_TEXT, False)})
    after = Tree({"n.py": (late.replace(b"y = 1", b"y = 2"), False), "sp ace.py": (_TEXT + b"z\n", False)})
    cases = list(_forms(tmp_path, before, after))
    assert [f"{c.label}: {p}" for c in cases if (p := _disagreement(c)) is not None] == []
    plain = next(c for c in cases if c.label == "format-patch")
    assert b"Binary files" not in plain.patch
    assert _patchkit_applies(plain) == _git_applies(plain) != "refused"
    assert _patchkit_applies(plain)["n.py"] == late.replace(b"y = 1", b"y = 2")  # type: ignore[index]
