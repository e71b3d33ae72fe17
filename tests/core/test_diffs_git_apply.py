"""patchkit's hunk applier against ``git apply``, differentially: the same accept or refuse, the same bytes.

Seeded: generated Python-like files, edited, diffed (by patchkit's ``make``
and by ``git diff``, with 0, 1 and 3 lines of context), then applied to the
file they were made on and to variants of it (lines added or dropped above
and below, the hunk's lines copied at equal distances above and below, one
of its lines with a trailing blank or CRLF, CRLF, CRLF and LF mixed, no
final newline, NUL bytes before and after git's 8,000-byte probe, empty
and newline-only files, lines of tens of kilobytes, lines that read as
diff headers, hunk headers or the no-newline marker, blank-only lines,
edits at the first and last line, and two diffs of one file joined into
one so that hunks overlap or go back up), forwards and undone
(``-R``), by :func:`patchkit.core.diffs.apply_shifted` and by one batched
``git apply --reject`` per flag set (``--unidiff-zero`` for diffs without
context). ``PATCHKIT_GIT_APPLY_DIFFS`` sets how many diffs (CI runs a few
hundred; ``PATCHKIT_GIT_APPLY_DIFFS=5000`` for a full local run; ``PATCHKIT_GIT_APPLY_SEED``
picks another seed).

The one deliberate difference: where ``git apply`` puts a hunk ending
without a newline in the middle of a file, joining two lines, patchkit
refuses (as ``patch`` does). The test proves that is the only difference:
the same algorithm with that refusal turned off equals ``git apply`` in
every case.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from patchkit.core import diffs

WORDS = ["alpha", "beta", "gamma", "delta", "block", "cache", "page", "token", "layer", "rank", "shard", "kv", "attn"]
SEED = int(os.environ.get("PATCHKIT_GIT_APPLY_SEED", "30"))
NAMES = ["m.py", "my file.py", 'q"uote.py', "tab\tname.py", "caf\u00e9.py", "dir with space/n.py"]


def _ident(rng: random.Random) -> str:
    return "_".join(rng.sample(WORDS, rng.randint(1, 2)))


# Lines real files hold that a diff reader could take for its own: file and hunk headers, a removed
# "-- " line that reads "--- " in the diff, an added "++ " one that reads "+++ ", the no-newline marker,
# conflict markers; and lines of blanks only, a trailing blank, a line of tens of kilobytes.
ODD = [
    b"--- a/m.py\n",
    b"+++ b/m.py\n",
    b"-- \n",
    b"++ x\n",
    b"@@ -1,3 +1,4 @@\n",
    b"diff --git a/m.py b/m.py\n",
    b"\\ No newline at end of file\n",
    b"=======\n",
    b"    \n",
    b"\t\n",
    b"    pass \n",
]


def _odd(rng: random.Random) -> bytes:
    if rng.random() < 0.1:
        return b"    s = '" + b"xy" * rng.choice((5_000, 30_000)) + b"'\n"
    return rng.choice(ODD)


def _python_like(rng: random.Random) -> list[bytes]:
    """A module of imports, functions and classes, with the repeated lines real code has."""
    if rng.random() < 0.03:
        return [b"\n"] * rng.randint(1, 3)  # a file of newlines only
    lines = [f"import {_ident(rng)}\n" for _ in range(rng.randint(0, 3))]
    for _ in range(rng.randint(1, 6)):
        lines.append("\n")
        if rng.random() < 0.3:
            lines += [f"class {_ident(rng).title()}:\n", '    """Doc."""\n', "\n"]
        indent = "    " * rng.randint(0, 1)
        lines.append(f"{indent}def {_ident(rng)}(self, {_ident(rng)}):\n")
        for _ in range(rng.randint(1, 8)):
            lines.append(
                rng.choice(
                    [
                        f"{indent}    {_ident(rng)} = {_ident(rng)}({rng.randint(0, 9)})\n",
                        f"{indent}    if {_ident(rng)}:\n",
                        f"{indent}        return None\n",
                        f"{indent}    pass\n",
                        "\n",
                        f"{indent}    x = x + 1\n",
                    ]
                )
            )
        lines.append(f"{indent}    return {_ident(rng)}\n")
    out = [line.encode() for line in lines]
    if rng.random() < 0.2:
        for _ in range(rng.randint(1, 4)):
            out.insert(rng.randint(0, len(out)), _odd(rng))
    return out


def _edit(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    out = list(lines)
    for _ in range(rng.randint(1, 4)):
        at = rng.choice([0, len(out) - 1, len(out)]) if rng.random() < 0.15 else rng.randint(0, len(out))
        at = max(at, 0)  # the very first or last line, now and then
        kind = rng.random()
        if kind < 0.05 and at < len(out):
            out[at] = out[at].rstrip(b"\n") + b" \n"  # a trailing blank added: a whitespace-only change
        elif kind < 0.1:
            out[at:at] = [_odd(rng)]
        elif kind < 0.35 and at < len(out):
            out[at] = out[at].rstrip(b"\n") + b"  # edited\n"
        elif kind < 0.65:
            out[at:at] = [f"    {_ident(rng)} = {rng.randint(0, 99)}\n".encode() for _ in range(rng.randint(1, 3))]
        else:
            del out[at : at + rng.randint(1, 3)]
    return out


def _flavour(rng: random.Random, old: list[bytes], new: list[bytes]) -> tuple[bytes, bytes]:
    """The edge cases: CRLF, a NUL byte, no final newline on either side, empty files."""
    old, new = _line_ends(rng, old, new)
    a, b = b"".join(old), b"".join(new)
    r = rng.random()
    if r < 0.08:
        a = a.rstrip(b"\r\n")
    elif r < 0.16:
        b = b.rstrip(b"\r\n")
    elif r < 0.22:
        a, b = a.rstrip(b"\r\n"), b.rstrip(b"\r\n")
    elif r < 0.25:
        a = b""
    elif r < 0.28:
        b = b""
    elif r < 0.3:
        a, b = rng.choice([(b"\n", b), (a, b"\n"), (b"\r\n", b"\n"), (b"\n", b"\n\n")])  # only a newline
    return a, b


def _line_ends(rng: random.Random, old: list[bytes], new: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """CRLF, mixed CRLF and LF, a NUL byte, before git's binary probe or after it."""
    r = rng.random()
    if r < 0.1:
        old, new = [line.replace(b"\n", b"\r\n") for line in old], [line.replace(b"\n", b"\r\n") for line in new]
    elif r < 0.15 and old:
        at = rng.randrange(len(old))
        old[at] = b"\0" + old[at]
        new = [old[at] if line == old[at][1:] else line for line in new]
    elif r < 0.21:  # CRLF and LF mixed in one file: by the line's text, so old and new agree, or not
        crlf = {line: rng.random() < 0.5 for line in sorted({*old, *new})}
        loose = rng.random() < 0.3
        old, new = (
            [x[:-1] + b"\r\n" if (rng.random() < 0.5 if loose else crlf[x]) and x.endswith(b"\n") else x for x in side]
            for side in (old, new)
        )
    elif r < 0.24:  # a NUL after git's 8,000-byte binary probe
        pad = [b"#" * 8100 + b"\n"]
        old, new = pad + old + [b"x = '\0'\n"], pad + new + [b"x = '\0'\n"]
    return old, new


def _quote(path: str) -> str:
    """A name as git writes it in a header: C-quoted when it has a quote, backslash, control or non-ASCII byte."""
    raw = path.encode()
    if not any(c in b'"\\' or c < 0x20 or c >= 0x80 for c in raw):
        return path
    esc = {ord('"'): '\\"', ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n"}
    return '"' + "".join(esc.get(c) or (chr(c) if 0x20 <= c < 0x80 else f"\\{c:03o}") for c in raw) + '"'


def _header(path: str) -> bytes:
    a, b = _quote(f"a/{path}"), _quote(f"b/{path}")
    return f"diff --git {a} {b}\n--- {a}\n+++ {b}\n".encode()


@dataclass
class Case:
    name: str
    old: bytes
    new: bytes
    context: int
    by_git: bool
    hunks: bytes = b""  # the diff from its first "@@" on
    other: bytes | None = None  # another edit of ``old``: its hunks follow, overlapping or out of order


def _cases(rng: random.Random, n: int) -> list[Case]:
    cases = []
    while len(cases) < n:
        lines = _python_like(rng)
        old, new = _flavour(rng, lines, _edit(rng, lines))
        if old == new:
            continue
        name = rng.choice(NAMES) if rng.random() < 0.2 else "m.py"
        case = Case(name, old, new, rng.choice([0, 1, 3, 3]), rng.random() < 0.3)
        if rng.random() < 0.08:  # two diffs of one file in one: hunks that overlap, or go back up
            case.other = b"".join(_edit(rng, diffs.split_lines(old)))
        cases.append(case)
    return cases


def _made_by_git(cases: list[Case], root: Path) -> None:
    """The hunks of the ``by_git`` cases, from one ``git diff --no-index -a`` per context width."""
    for context in (0, 1, 3):
        todo = [(i, c) for i, c in enumerate(cases) if c.by_git and c.context == context]
        if not todo:
            continue
        base = root / f"made{context}"
        for i, c in todo:
            for side, data in (("old", c.old), ("new", c.new)):
                (base / side / f"c{i}").mkdir(parents=True)
                (base / side / f"c{i}" / "f").write_bytes(data)
        out = subprocess.run(
            ["git", "diff", "--no-index", "-a", f"-U{context}", "old", "new"],
            cwd=base,
            capture_output=True,
            check=False,
        ).stdout
        for part in re.split(rb"(?m)^diff --git ", out)[1:]:  # a line of a file may hold "diff --git " too
            m = re.match(rb"a/old/c(\d+)/", part)
            assert m is not None, part[:200]
            i = int(m.group(1))
            cases[i].hunks = part[part.index(b"\n@@") + 1 :]
    for c in cases:
        if not c.by_git:
            made = diffs.make(c.old, c.new, "a/f", "b/f", context=c.context)
            c.hunks = made[made.index(b"@@") :]
        if c.other is not None and c.other != c.old:
            made = diffs.make(c.old, c.other, "a/f", "b/f", context=c.context)
            c.hunks += made[made.index(b"@@") :]


def _variants(rng: random.Random, data: bytes, fd: diffs.FileDiff, reverse: bool) -> list[bytes]:
    """The file the diff was made on, and the same moved, trimmed or with its hunk's lines copied around."""
    lines = diffs.split_lines(data)
    nl = b"\r\n" if lines and lines[0].endswith(b"\r\n") else b"\n"
    junk = [b"# added %d%s" % (i, nl) for i in range(rng.randint(1, 6))]
    k = rng.randint(1, 4)
    out = [data, b"".join(junk + lines), b"".join(lines[k:]), b"".join(lines + junk), b"".join(lines[:-k])]
    # The first hunk's lines at equal distances above and below where it says, and not there.
    h = fd.hunks[0]
    side = h.new_lines() if reverse else h.old_lines()
    start = (h.old_start if reverse else h.new_start) - 1
    if side and start >= 0:
        d = len(side) + rng.randint(0, 3)
        filler = [b"filler %d%s" % (i, nl) for i in range(start + 2 * d + len(side))]
        filler[max(start - d, 0) : max(start - d, 0) + len(side)] = side
        filler[start + d : start + d + len(side)] = side
        out.append(b"".join(filler))
        out.append(b"".join(lines[:start] + side + lines[start:]))  # a copy just above
    if side and 0 <= start < len(lines):  # one of the hunk's lines with a trailing blank, or CRLF for LF
        k = start + rng.randrange(min(len(side), len(lines) - start))
        line = lines[k]
        body = line.rstrip(b"\r\n")
        changed = body + b" " + line[len(body) :] if rng.random() < 0.5 else body + b"\r\n"
        if changed != line:
            out.append(b"".join([*lines[:k], changed, *lines[k + 1 :]]))
    return out


@dataclass
class Run:
    case: int
    reverse: bool
    target: bytes
    path: str
    hunks: bytes
    zero: bool

    @property
    def patch(self) -> bytes:
        return _header(self.path) + self.hunks


def _git_apply(runs: list[Run], root: Path) -> list[bytes | None]:
    """Each run through ``git apply`` (``None``: refused), batched: one ``--reject`` run per set of flags."""
    results: list[bytes | None] = [None] * len(runs)
    for reverse in (False, True):
        for zero in (False, True):
            todo = [i for i, r in enumerate(runs) if r.reverse == reverse and r.zero == zero]
            if not todo:
                continue
            where = root / f"apply{int(reverse)}{int(zero)}"
            patch = []
            for i in todo:
                path = where / _placed(runs[i].path, i)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(runs[i].target)
                patch.append(_header(_placed(runs[i].path, i)) + runs[i].hunks)
            (root / "p.diff").write_bytes(b"".join(patch))
            flags = [*(["-R"] if reverse else []), *(["--unidiff-zero"] if zero else [])]
            proc = subprocess.run(
                ["git", "apply", "--reject", *flags, str(root / "p.diff")], cwd=where, capture_output=True, check=False
            )
            assert proc.returncode in (0, 1), proc.stderr.decode()[-2000:]
            for i in todo:
                path = where / _placed(runs[i].path, i)
                rejected = path.with_name(path.name + ".rej").exists()
                # git removes a file a diff empties
                results[i] = None if rejected else (path.read_bytes() if path.exists() else b"")
    return results


def _placed(path: str, i: int) -> str:
    """Run ``i``'s own copy of ``path``, beside the others' (one directory for all: fewer to make)."""
    parent, _, name = path.rpartition("/")
    return f"{parent}/r{i}-{name}" if parent else f"r{i}-{name}"


def _patchkit(run: Run, *, joins: bool = False) -> bytes | str:
    (fd,) = diffs.parse(run.patch)
    try:
        return diffs._apply(fd, run.target, reverse=run.reverse, joins=joins)[0]
    except diffs.ApplyError as e:
        return e.message


def _sample(rng: random.Random, cases: list[Case]) -> list[Run]:
    runs = []
    for i, c in enumerate(cases):
        path = c.name
        (fd,) = diffs.parse(_header(path) + c.hunks)
        zero = all(t != b" " for h in fd.hunks for t, _ in h.lines)
        for reverse in (False, True):
            for target in _variants(rng, c.new if reverse else c.old, fd, reverse):
                runs.append(Run(i, reverse, target, path, c.hunks, zero))
    return runs


def _lines_joined(run: Run, out: bytes) -> bool:
    """Whether applying ``run`` gave fewer lines than its hunks account for: two lines joined into one."""
    (fd,) = diffs.parse(run.patch)
    growth = sum(len(h.new_lines()) - len(h.old_lines()) for h in fd.hunks) * (-1 if run.reverse else 1)
    return len(diffs.split_lines(out)) != len(diffs.split_lines(run.target)) + growth


def _compare(runs: list[Run], git: list[bytes | None]) -> tuple[int, int, list[str]]:
    """The number of runs git accepted, those where git joined two lines (patchkit refuses), and the disagreements."""
    accepted = joined = 0
    bad: list[str] = []
    for run, want in zip(runs, git, strict=True):
        emulated = _patchkit(run, joins=True)
        got = _patchkit(run)
        accepted += want is not None
        if (emulated if isinstance(emulated, bytes) else None) != want:
            bad.append(f"emulation: {run!r}: git {want!r}, patchkit {emulated!r}")
        elif (isinstance(got, bytes) and got == want) or (want is None and isinstance(got, str)):
            continue
        elif want is not None and _lines_joined(run, want) and isinstance(got, str) and "join two lines" in got:
            joined += 1
        else:
            bad.append(f"{run!r}: git {want!r}, patchkit {got!r}")
    return accepted, joined, bad


def _differential(seed: int, n: int, root: Path) -> tuple[int, int, int, list[str]]:
    rng = random.Random(seed)
    cases = _cases(rng, n)
    _made_by_git(cases, root)
    runs = _sample(rng, cases)
    accepted, joined, bad = _compare(runs, _git_apply(runs, root))
    return len(runs), accepted, joined, bad


def test_the_applier_gives_what_git_apply_gives(tmp_path: Path) -> None:
    n = int(os.environ.get("PATCHKIT_GIT_APPLY_DIFFS", "250"))
    runs, accepted, joined, bad = _differential(SEED, n, tmp_path)
    print(
        f"{n} diffs, {runs} applications: git accepted {accepted}, joined lines in {joined}, {len(bad)} disagreements"
    )
    assert bad == []
    assert accepted > runs // 3 and runs - accepted > runs // 10  # both answers are well represented


def test_the_generator_reaches_the_edge_cases(tmp_path: Path) -> None:
    """The default sample holds each class the differential claims, so a passing run covers them."""
    rng = random.Random(SEED)
    cases = _cases(rng, int(os.environ.get("PATCHKIT_GIT_APPLY_DIFFS", "250")))
    _made_by_git(cases, tmp_path)
    bodies = [line for c in cases for line in c.hunks.split(b"\n")]
    assert any(line.startswith((b"--- ", b"+++ ")) for line in bodies)  # a diff inside the diffed file
    assert any(line.startswith((b"-\\ No newline", b" \\ No newline")) for line in bodies)
    files = [d for c in cases for d in (c.old, c.new)]
    assert any(b"\r\n" in d and b"\n" in d.replace(b"\r\n", b"") for d in files)  # CRLF and LF in one file
    assert any(b"\0" in d[8000:] and b"\0" not in d[:8000] for d in files)
    assert any(max(map(len, diffs.split_lines(d)), default=0) > 8000 for d in files)
    assert any(d in (b"\n", b"\r\n", b"\n\n") for d in files) and any(d == b"" for d in files)
    assert any(c.other is not None for c in cases) and any(c.context == 0 for c in cases)


# Named regressions, each checked against git apply as well.


def _git(tmp_path: Path, old: bytes, patch: bytes, *flags: str) -> bytes | None:
    (tmp_path / "f").write_bytes(old)
    (tmp_path / "p.diff").write_bytes(patch)
    proc = subprocess.run(["git", "apply", *flags, "p.diff"], cwd=tmp_path, capture_output=True, check=False)
    return (tmp_path / "f").read_bytes() if proc.returncode == 0 else None


def _refusal(patch: bytes, old: bytes, apply: Callable[..., object] = diffs.apply_shifted) -> str:
    with pytest.raises(diffs.ApplyError) as e:
        apply(diffs.parse(patch)[0], old)
    return e.value.message


def test_a_hunk_ending_without_newline_where_the_file_goes_on_is_refused(tmp_path: Path) -> None:
    """It used to join two lines: ``x\\ny\\nz\\n`` became ``x\\nyz\\n``. git apply and patch refuse."""
    patch = b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-y\n+y\n\\ No newline at end of file\n"
    assert _git(tmp_path, b"x\ny\nz\n", patch) is None
    assert "end at the file's last line" in _refusal(patch, b"x\ny\nz\n")  # it has no context below
    assert diffs.apply_shifted(diffs.parse(patch)[0], b"x\ny\n")[0] == b"x\ny"  # at the end: fine
    # Zero context (git diff -U0): git apply --unidiff-zero would join; patchkit refuses.
    zero = b"--- a/f\n+++ b/f\n@@ -2 +2 @@\n-y\n+y\n\\ No newline at end of file\n"
    assert _git(tmp_path, b"x\ny\nz\n", zero, "--unidiff-zero") == b"x\nyz\n"
    assert "join two lines" in _refusal(zero, b"x\ny\nz\n")


def test_a_hunk_without_leading_context_at_line_1_matches_only_at_the_start(tmp_path: Path) -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n-a\n+A\n b\n c\n"
    old = b"pre\na\nb\nc\nd\n"
    assert _git(tmp_path, old, patch) is None
    assert "must start at the file's first line" in _refusal(patch, old)


def test_a_hunk_without_trailing_context_matches_only_at_the_end(tmp_path: Path) -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -2,3 +2,3 @@\n b\n c\n-d\n+D\n"
    old = b"a\nb\nc\nd\npost\n"
    assert _git(tmp_path, old, patch) is None
    assert "must end at the file's last line" in _refusal(patch, old)
    assert diffs.apply_shifted(diffs.parse(patch)[0], b"z\na\nb\nc\nd\n") == (b"z\na\nb\nc\nD\n", 1)


def test_of_two_equally_near_matches_the_one_below_wins(tmp_path: Path) -> None:
    old = b"q\nA\nB\nq\nX\nA\nB\nq\n"
    patch = b"--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n A\n-B\n+C\n q\n"  # says line 4; its lines are at 2 and 6
    want = b"q\nA\nB\nq\nX\nA\nC\nq\n"
    assert _git(tmp_path, old, patch) == want
    assert diffs.apply_shifted(diffs.parse(patch)[0], old) == (want, 2)


def test_whitespace_is_exact(tmp_path: Path) -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
    for old in (b"a\nb \nc\n", b"a\r\nb\r\nc\r\n", b"a\n\tb\nc\n"):
        assert _git(tmp_path, old, patch) is None
        _refusal(patch, old)


def test_a_hunk_only_fuzz_would_apply_is_refused_saying_so(tmp_path: Path) -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -2,5 +2,5 @@\n b\n c\n-d\n+D\n e\n f\n"
    old = b"a\nb\nC\nd\ne\nf\ng\n"  # one context line differs
    assert _git(tmp_path, old, patch) is None
    message = _refusal(patch, old)
    assert "line 3 of the file does not match the hunk" in message
    assert "only fuzz would apply it" in message


def test_the_strict_apply_names_an_offset_and_a_wrong_new_side_start(tmp_path: Path) -> None:
    """``apply`` gives git's bytes or refuses; what git accepts at another line is named, not applied elsewhere."""
    old = b"".join(b"line %d\n" % i for i in range(1, 21))
    patch = b"--- a/f\n+++ b/f\n@@ -5,3 +5,3 @@\n line 5\n-line 6\n+six\n line 7\n"
    moved = b"extra\n" + old
    assert diffs.apply_shifted(diffs.parse(patch)[0], moved)[0] == _git(tmp_path, moved, patch)
    assert "an offset of +1" in _refusal(patch, moved, diffs.apply)
    wrong_new = patch.replace(b"+5,3", b"+9,3")
    assert diffs.apply_shifted(diffs.parse(wrong_new)[0], old)[0] == _git(tmp_path, old, wrong_new)
    assert "hunk header says the new side starts at line 9, but it starts at line 5" in _refusal(
        wrong_new, old, diffs.apply
    )


def test_a_line_a_hunk_wrote_never_matches_a_later_hunk(tmp_path: Path) -> None:
    old = b"a\nb\nc\n"
    patch = b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n@@ -2,2 +2,1 @@\n c\n-c\n"
    assert _git(tmp_path, old, patch) is None
    _refusal(patch, old)


def test_a_hunk_without_context_in_a_diff_with_context_is_anchored_as_git_anchors_it(tmp_path: Path) -> None:
    """Only a diff with no context at all reads as ``git diff -U0`` output (``git apply --unidiff-zero``).

    A context-less hunk in a diff whose other hunks have context is anchored
    at the file's start and end, as ``git apply`` anchors it; it used to be
    read as a -U0 hunk alone and applied where git refuses.
    """
    patch = b"--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n \n+\n@@ -1 +0,0 @@\n-\n"  # two diffs of one file, joined
    (fd,) = diffs.parse(patch)
    assert _git(tmp_path, b"\n\n", patch, "-R") is None
    with pytest.raises(diffs.ApplyError):
        diffs.apply_placed(fd, b"\n\n", reverse=True)
    # The same hunks in a diff with no context at all are -U0 hunks: git apply --unidiff-zero applies them.
    zero = b"--- a/f\n+++ b/f\n@@ -1 +0,0 @@\n-a\n@@ -3 +1,0 @@\n-c\n"
    assert _git(tmp_path, b"a\nb\nc\n", zero, "--unidiff-zero") == b"b\n"
    assert diffs.apply(diffs.parse(zero)[0], b"a\nb\nc\n") == b"b\n"
