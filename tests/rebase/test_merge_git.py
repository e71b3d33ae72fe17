"""patchkit's merge against git's own, side by side: the same status and the same bytes for every triple.

The reference is the command patchkit's docs name: ``git merge-tree --write-tree``
(merge-ort, what ``git cherry-pick`` runs) with ``merge.conflictStyle=diff3``,
in a plain repository of its own, one merge per triple, with the file at a
real path. Triples are generated, seeded, from Python-like modules (imports,
classes, methods, repeated lines such as ``return x`` and blank lines) with
the edge cases that matter: CRLF files, no final newline, NUL bytes before
and after git's 8,000-byte binary probe (and on either side of its last
byte), empty files and files that are only a newline, repeated and
duplicated lines, the same edit on both sides, adjacent edits, deletions,
edits at the very first and last line; and the lines real files hold that a
merge's own machinery could trip on: conflict markers and diffs inside the
text, lines of blanks only, trailing blanks changed on one side, lines
of tens of kilobytes, CRLF and LF mixed in one file.

CI runs a bounded sample; ``PATCHKIT_DIFFERENTIAL_N=10000`` runs more locally.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from patchkit.core.diffs import split_lines
from patchkit.rebase.merge import (
    _LABELS,
    BASE_MARKER,
    OURS_MARKER,
    THEIRS_MARKER,
    BinaryFileError,
    MergeResult,
    Outcome,
    rebase_file,
    rebase_files,
)
from patchkit.vcs import gitmerge

SAMPLE = int(os.environ.get("PATCHKIT_DIFFERENTIAL_N", "400"))
SEED = int(os.environ.get("PATCHKIT_DIFFERENTIAL_SEED", "30"))

Triple = tuple[bytes, bytes, bytes]

_WORDS = ("blocks", "stream", "config", "device", "cache", "layer", "worker", "tokens", "scale", "group")
_SHAPES = (
    b"import {w}\n",
    b"from vllm.{w} import {W}\n",
    b"\n",
    b"\n",
    b"class {W}:\n",
    b"    def {w}(self, {v}):\n",
    b"        return {v}\n",
    b"        return x\n",
    b"        {v} = self.{w}({v})\n",
    b"        if {v} is None:\n",
    b"            raise ValueError({v})\n",
    b"        for b in {v}:\n",
    b"            self.copy(b)\n",
    b"    # {w} {v}\n",
    b"        pass\n",
    b"def {w}_{v}({v}):\n",
    b"    return [{v}.cpu() for {v} in {w}]\n",
    b"    )\n",
    b"@torch.inference_mode()\n",
)


def _line(rng: random.Random) -> bytes:
    shape = rng.choice(_SHAPES)
    w, v = rng.choice(_WORDS), rng.choice(_WORDS)
    return shape.replace(b"{w}", w.encode()).replace(b"{W}", w.title().encode()).replace(b"{v}", v.encode())


def _module(rng: random.Random) -> list[bytes]:
    size = rng.choice((0, 1, 2, 5, 20, 40, 80))
    if rng.random() < 0.3:
        # Few distinct lines, many repeats (blank lines, "return x", closing brackets): where diffs can align otherwise.
        few = [b"\n", b"        return x\n", b"    )\n", _line(rng)]
        return [rng.choice(few) for _ in range(size)]
    return [_line(rng) for _ in range(size)]


def _edit(rng: random.Random, lines: list[bytes]) -> list[bytes]:
    """A few edits: lines replaced, deleted, inserted (new ones or copies of lines already there)."""
    out = list(lines)
    for _ in range(rng.choice((0, 1, 1, 2, 3, 5))):
        at = rng.randint(0, len(out))
        match rng.randrange(5):
            case 0:
                out[at : at + 1] = [_line(rng)]
            case 1:
                del out[at : at + rng.randint(1, 3)]
            case 2:
                out[at:at] = [_line(rng) for _ in range(rng.randint(1, 3))]
            case 3 if out:
                out[at:at] = [rng.choice(out)] * rng.randint(1, 2)  # a repeated line
            case 4 if len(out) > 1 and rng.random() < 0.3:
                i, j = sorted(rng.sample(range(len(out)), 2))
                out[i], out[j] = out[j], out[i]  # two lines swapped
            case _:
                out[at : at + rng.randint(0, 2)] = [_line(rng) for _ in range(rng.randint(0, 2))]
    return out


# Lines a file may hold that look like a merge's or a diff's own: markers, headers, hunks, blanks only.
_ODD = (
    b"<<<<<<< HEAD\n",
    b"=======\n",
    b">>>>>>> theirs\n",
    b"||||||| base\n",
    b"<<<<<<< ours\n",
    b"--- a/vllm/worker.py\n",
    b"+++ b/vllm/worker.py\n",
    b"@@ -1,3 +1,4 @@\n",
    b"-- \n",
    b"\\ No newline at end of file\n",
    b"    \n",
    b"\t\n",
    b"        return x \n",
)


def _recast(rng: random.Random, kind: int, files: list[list[bytes]]) -> list[list[bytes]]:
    """The line-level edge cases: a line rewritten the same way in all three versions, or in one only."""
    seen = sorted({line for lines in files for line in lines})
    if not seen:
        return files
    if kind == 6:  # some lines become markers, diff lines, blanks-only lines, in every version
        swap = {line: rng.choice(_ODD) for line in rng.sample(seen, min(len(seen), rng.randint(1, 3)))}
    elif kind == 7:  # one version's blank lines get blanks, or a line gets a trailing blank: whitespace changes
        which = rng.randrange(3)
        line = rng.choice(seen)
        swap = {b"\n": rng.choice((b"    \n", b"\t\n")), line: line[:-1] + b" \n"}
        return [[swap.get(x, x) for x in lines] if i == which else lines for i, lines in enumerate(files)]
    else:  # a line of tens of kilobytes (no NUL: text however long), in every version
        long = b"    x = '" + b"ab" * rng.choice((4_000, 20_000, 40_000)) + b"'\n"
        swap = {rng.choice(seen): long}
    return [[swap.get(x, x) for x in lines] for lines in files]


def _dress(rng: random.Random, kind: int, files: list[list[bytes]]) -> list[bytes]:
    """The three line lists as bytes, with the triple's edge case applied."""
    if kind in (6, 7, 8):
        files = _recast(rng, kind, files)
    if kind == 9:  # CRLF and LF mixed in a file: by the line's text (the same in all three versions) or at random
        crlf = {line: rng.random() < 0.5 for line in sorted({x for lines in files for x in lines})}
        by_text = rng.random() < 0.5
        files = [
            [x[:-1] + b"\r\n" if (crlf[x] if by_text else rng.random() < 0.5) else x for x in lines] for lines in files
        ]
    data = [b"".join(lines) for lines in files]
    if kind == 1:  # CRLF, sometimes on one side only
        which = rng.choice(((0, 1, 2), (1,), (2,), (0, 1)))
        data = [d.replace(b"\n", b"\r\n") if i in which else d for i, d in enumerate(data)]
    elif kind == 2:  # no final newline somewhere
        data = [d.rstrip(b"\n") if rng.random() < 0.6 else d for d in data]
    elif kind == 3:  # a NUL byte after git's binary probe: a text merge for git
        pad = b"#" * 8100 + b"\n"
        data = [pad + d + b"x = '\0'\n" for d in data]
    elif kind == 4:  # a NUL byte inside the probe, in one version: binary for git
        which = rng.randrange(3)
        data = [d + b"\0\n" if i == which else d for i, d in enumerate(data)]
    elif kind == 5:  # an empty file, or one that is only a newline
        which = rng.randrange(3)
        empty = rng.choice((b"", b"\n", b"\r\n"))
        data = [empty if i == which or rng.random() < 0.2 else d for i, d in enumerate(data)]
    elif kind == 10:  # a NUL at git's probe's last byte (binary) or just past it (text), in one version
        which = rng.randrange(3)
        at = gitmerge.BINARY_PROBE - rng.randrange(2)
        pad = b"#" * (at - 1) + b"\n"  # the NUL that follows it is byte ``at``, 0-based
        data = [pad + b"\0\n" + d if i == which else pad + d for i, d in enumerate(data)]
    if kind >= 6 and rng.random() < 0.3:  # and no final newline, on some sides
        data = [d.rstrip(b"\r\n") if rng.random() < 0.6 else d for d in data]
    return data


def generate(rng: random.Random) -> Triple:
    """One (base, ours, theirs), Python-like, with one of the edge cases."""
    base = _module(rng)
    ours = _edit(rng, base)
    shape = rng.randrange(10)
    if shape == 0:
        theirs = list(ours)  # upstream made the patch's very edit
    elif shape == 1:
        theirs = _edit(rng, ours)  # upstream took the patch and more
    elif shape == 2 and base:
        at = rng.randrange(len(base))  # an edit right next to one of ours
        theirs = [*base[:at], _line(rng), *base[at + 1 :]]
    elif shape == 3 and base:  # edits at the very first and last line, on one side or both
        theirs = [_line(rng), *base[1:-1], _line(rng)] if rng.random() < 0.5 else [_line(rng), *base, _line(rng)]
        if rng.random() < 0.5:
            ours = [*ours[: rng.randint(0, 1)], _line(rng), *ours[rng.randint(1, 2) :]]
    else:
        theirs = _edit(rng, base)
    kind = rng.choice((0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9, 10))
    b, o, t = _dress(rng, kind, [base, ours, theirs])
    return b, o, t


# --- the reference: git merge-tree in a repository of its own ------------------------------------------------


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_ATTR_NOSYSTEM="1")
    return env


_GIT = ["git", "-c", "merge.conflictStyle=diff3"]
_BASE_LABEL = re.compile(rb"^\|\|\|\|\|\|\| [0-9a-f]{7,40}(?=\r?\n|$)", re.MULTILINE)


def reference(tmp: Path, triples: list[Triple]) -> list[tuple[bool, bytes]]:
    """For each triple, (conflicted, merged bytes) from ``git merge-tree --write-tree``, labels made patchkit's."""
    repo = tmp / "reference"
    env = _git_env()
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True, env=env)
    stream = []
    for k, triple in enumerate(triples):
        for side, data in enumerate(triple):
            stream += [b"blob\nmark :%d\ndata %d\n" % (3 * k + side + 1, len(data)), data, b"\n"]
        for side, name in enumerate((b"base", b"ours", b"theirs")):
            stream.append(b"commit refs/heads/%s%d\ncommitter t <t@t> 0 +0000\ndata 0\n" % (name, k))
            if side:
                stream.append(b"from refs/heads/base%d\n" % k)
            stream.append(b"M 100644 :%d vllm/worker.py\n\n" % (3 * k + side + 1))
    git = [*_GIT, f"--git-dir={repo}"]
    subprocess.run([*git, "fast-import", "--quiet"], input=b"".join(stream), check=True, env=env)
    results = []
    trees = []
    for k in range(len(triples)):
        done = subprocess.run(
            [*git, "merge-tree", "--write-tree", f"ours{k}", f"theirs{k}"], check=False, capture_output=True, env=env
        )
        assert done.returncode in (0, 1), done.stderr
        results.append(done.returncode == 1)
        trees.append(done.stdout.split(b"\n", 1)[0].decode())
    names = "".join(f"{tree}:vllm/worker.py\n" for tree in trees).encode()
    out = subprocess.run([*git, "cat-file", "--batch"], input=names, capture_output=True, check=True, env=env).stdout
    merged = []
    at = 0
    for _ in trees:
        eol = out.index(b"\n", at)
        size = int(out[at:eol].split(b" ")[2])
        merged.append(out[eol + 1 : eol + 1 + size])
        at = eol + 1 + size + 1
    return [(conflicted, _relabel(data, k)) for k, (conflicted, data) in enumerate(zip(results, merged, strict=True))]


def _relabel(data: bytes, k: int) -> bytes:
    data = re.sub(rb"^<<<<<<< ours%d(?=\r?\n|$)" % k, OURS_MARKER, data, flags=re.MULTILINE)
    data = re.sub(rb"^>>>>>>> theirs%d(?=\r?\n|$)" % k, THEIRS_MARKER, data, flags=re.MULTILINE)
    return _BASE_LABEL.sub(BASE_MARKER, data)


def _binary(triple: Triple) -> bool:
    return any(b"\0" in d[: gitmerge.BINARY_PROBE] for d in triple)


def _conflicts_placed(triple: Triple, result: MergeResult) -> bool:
    """Whether each conflict's base, ours and theirs ranges name exactly the lines git wrote in its sections."""
    merged = split_lines(result.merged)
    versions = [split_lines(d) for d in triple]
    for c in result.conflicts:
        block = merged[c.start - 1 : c.end]
        ours_end = 1 + c.ours.count
        base_end = ours_end + 1 + c.base.count
        if not (block[0].startswith(OURS_MARKER) and block[-1].startswith(THEIRS_MARKER)):
            return False
        if not block[ours_end].startswith(BASE_MARKER):
            return False
        sections = {1: block[1:ours_end], 0: block[ours_end + 1 : base_end], 2: block[base_end + 1 : -1]}
        for side, span in ((0, c.base), (1, c.ours), (2, c.theirs)):
            want = versions[side][span.start - 1 : span.end]
            got = sections[side]
            # git ends a section's last line when the file's own last line has no newline
            if len(got) != len(want) or not all(g.startswith(w) for g, w in zip(got, want, strict=True)):
                return False
    return True


def run_differential(tmp_path: Path, n: int, seed: int) -> tuple[int, list[str]]:
    """Generate ``n`` triples, merge them through patchkit and git: (how many were merged, disagreements)."""
    rng = random.Random(seed)
    triples = [generate(rng) for _ in range(n)]
    text = [t for t in triples if not _binary(t)]
    for t in triples:
        if _binary(t):
            with pytest.raises(BinaryFileError):
                rebase_file(*t, path="vllm/worker.py")
    ours = rebase_files([(*t, "vllm/worker.py") for t in text])
    theirs = reference(tmp_path, text)
    disagreements = []
    for k, (triple, mine, (conflicted, merged)) in enumerate(zip(text, ours, theirs, strict=True)):
        if (mine.outcome is Outcome.CONFLICT) != conflicted or mine.merged != merged:
            disagreements.append(f"triple {k}: {triple!r}: patchkit {mine.outcome} {mine.merged!r}, git {merged!r}")
        elif not _conflicts_placed(triple, mine):
            disagreements.append(f"triple {k}: {triple!r}: conflicts placed at {mine.conflicts}")
    return len(text), disagreements


def test_patchkit_merges_every_triple_as_git_merge_tree_does(tmp_path: Path) -> None:
    merged, disagreements = run_differential(tmp_path, SAMPLE, SEED)
    assert merged > SAMPLE * 3 // 4  # most triples are text: the comparison is not vacuous
    assert disagreements == [], disagreements[:3]


def test_the_generator_reaches_the_edge_cases() -> None:
    """The sample holds conflicts, clean merges, upstreamed patches, CRLF, no final newline, late NULs."""
    rng = random.Random(SEED)
    triples = [generate(rng) for _ in range(SAMPLE)]
    text = [t for t in triples if not _binary(t)]
    outcomes = {r.outcome for r in rebase_files([(*t, "m.py") for t in text])}
    assert {Outcome.CONFLICT, Outcome.CLEAN, Outcome.UPSTREAMED, Outcome.UNCHANGED} <= outcomes
    assert any(b"\r\n" in t[0] for t in text)
    assert any(t[1] and not t[1].endswith(b"\n") for t in text)
    assert any(b"\0" in t[0] for t in text)  # after the probe: merged as text
    assert len(text) < len(triples)  # and some binary ones, refused
    probe = gitmerge.BINARY_PROBE
    assert any(any(d[probe : probe + 1] == b"\0" for d in t) for t in text)  # the first byte past the probe
    assert any(any(d[probe - 1 : probe] == b"\0" for d in t) for t in triples if _binary(t))  # its last byte
    lines = [set(split_lines(d)) for t in text for d in t]
    assert any(b"=======\n" in ls for ls in lines) and any(b"+++ b/vllm/worker.py\n" in ls for ls in lines)
    assert any(b"    \n" in ls or b"\t\n" in ls for ls in lines)
    assert any(max(map(len, ls), default=0) > 8_000 for ls in lines)
    assert any(b"\r\n" in d and b"\n" in d.replace(b"\r\n", b"") for t in text for d in t)  # CRLF and LF in one file
    assert any(d in (b"\n", b"\r\n") for t in text for d in t)


# --- the minimal cases -------------------------------------------------------------------------------


def test_a_line_both_sides_added_is_kept_once() -> None:
    result = rebase_file(b"z\na\n", b"z\na\na\n", b"b\nz\na\na\n")
    assert result.merged == b"b\nz\na\na\n"
    assert result.outcome is Outcome.UPSTREAMED


def test_a_swap_against_a_deletion_conflicts_as_in_git() -> None:
    result = rebase_file(b"a\nb\n", b"b\na\n", b"a\n")
    assert result.outcome is Outcome.CONFLICT
    assert result.merged == (OURS_MARKER + b"\nb\na\n" + BASE_MARKER + b"\na\nb\n=======\na\n" + THEIRS_MARKER + b"\n")
    (c,) = result.conflicts
    assert (c.start, c.end, c.base.count, c.ours.count, c.theirs.count) == (1, 9, 2, 2, 1)


def test_upstream_containing_the_patch_merges_cleanly_and_is_upstreamed() -> None:
    base = b"def f():\n    return 1\n\n\ndef g():\n    return 2\n"
    ours = base.replace(b"return 1", b"return 10")
    theirs = b"import os\n\n\n" + ours.replace(b"return 2", b"return 20")
    result = rebase_file(base, ours, theirs, path="m.py")
    assert result.outcome is Outcome.UPSTREAMED
    assert result.merged == theirs


def test_crlf_conflict_markers_are_crlf_only_where_git_writes_them() -> None:
    crlf = rebase_file(b"a\r\nb\r\n", b"a\r\nc\r\n", b"a\r\nd\r\n")
    assert crlf.merged.count(b"\r\n") == crlf.merged.count(b"\n")
    # The patch side alone in CRLF: git writes LF markers.
    mixed = rebase_file(b"a\nb\n", b"a\r\nc\r\n", b"a\nd\n")
    assert OURS_MARKER + b"\n" in mixed.merged


def test_a_nul_after_the_first_8000_bytes_merges() -> None:
    pad = b"#" * 8100 + b"\n"
    result = rebase_file(pad + b"a\nb\n\0\n", pad + b"A\nb\n\0\n", pad + b"a\nb\n\0\nc\n")
    assert result.outcome is Outcome.CLEAN
    assert result.merged == pad + b"A\nb\n\0\nc\n"


def test_a_nul_within_the_first_8000_bytes_is_refused() -> None:
    with pytest.raises(BinaryFileError, match="first 8000 bytes"):
        rebase_file(b"a\n\0\n", b"b\n\0\n", b"c\n\0\n", path="blob.py")


def test_many_files_cost_a_handful_of_git_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of files runs git a fixed number of times, not once per file."""
    from patchkit.vcs import gitclient

    calls: list[str] = []

    def counting(real: Any) -> Any:
        def call(*args: object, **kwargs: object) -> object:
            calls.append(str(args[1]))
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(gitmerge, "run", counting(gitclient.run))
    monkeypatch.setattr(gitmerge, "start", counting(gitclient.start))  # the merge, started beside the analysis
    items = [(b"a\nb\nc\nd\ne\n", b"a\nB\nc\nd\ne\n", b"a\nb\nc\nd\nE%d\n" % k, "f.py") for k in range(200)]
    items += [(b"x\n", b"y\n", b"z\n", "g.py")]  # one conflict: two diff-tree runs locate it
    results = rebase_files(items)
    assert [r.outcome for r in results[:200]] == [Outcome.CLEAN] * 200
    assert results[200].outcome is Outcome.CONFLICT
    # The objects are written and the results read without git: merge-tree, and diff-tree twice.
    assert [call.split("', '")[len(gitmerge._CONFIG) * 2 + 1] for call in calls] == [
        "merge-tree",
        "diff-tree",
        "diff-tree",
    ]


def test_the_objects_written_without_git_are_what_git_writes(tmp_path: Path) -> None:
    """Blobs, the tree and the commits the scratch repository gets are the objects git itself would write."""
    git_dir = gitmerge._scratch(tmp_path)
    store = gitmerge._Objects(git_dir / "objects")
    # Stored deflate blocks hold 65,535 bytes: one object fills one exactly ("blob 65524\0" is 11 bytes).
    blobs = [b"", b"a\n", b"no newline", b"\0binary\r\n" * 20000, b"y" * 65524, b"a\n"]  # the last one twice
    ids = [store.blob(data) for data in blobs]
    tree = store.tree(ids)
    commit = store.commit(store.tree(ids[:1]), None)
    child = store.commit(tree, commit)
    env = {**os.environ, "GIT_DIR": str(git_dir), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}

    def git(*args: str, stdin: bytes | None = None) -> bytes:
        return subprocess.run(["git", *args], env=env, input=stdin, capture_output=True, check=True).stdout

    for data, blob_id in zip(blobs, ids, strict=True):
        assert git("hash-object", "--stdin", stdin=data).decode().strip() == blob_id.hex()
        assert git("cat-file", "blob", blob_id.hex()) == data
    listing = git("ls-tree", "-z", tree.hex()).split(b"\0")[:-1]
    # Sorted as git sorts a tree's names (bytewise: "10" would come before "2"), at the modes git writes.
    assert [entry.split(b"\t")[1] for entry in listing] == [b"0", b"1", b"2", b"3", b"4", b"5"]
    assert git("rev-parse", f"{child.hex()}^").decode().strip() == commit.hex()
    git("fsck", "--strict", "--no-dangling")
    assert store.files(tree.hex(), 6) == blobs
    assert store.files(tree.hex(), 7) is None  # a path the tree does not have
    (git_dir / "objects" / ids[1].hex()[:2] / ids[1].hex()[2:]).chmod(0o644)
    (git_dir / "objects" / ids[1].hex()[:2] / ids[1].hex()[2:]).write_bytes(b"not zlib")
    assert store.files(tree.hex(), 6) is None  # a damaged object: the caller asks git instead


def test_merged_files_read_through_git_when_not_loose(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the merge's objects cannot be read directly, cat-file reads them: the same results."""
    items = [(b"a\nb\nc\n", b"A\nb\nc\n", b"a\nb\nC\n"), (b"x\n", b"y\n", b"z\n")]
    direct = gitmerge.merge_many(items, _LABELS)
    monkeypatch.setattr(gitmerge._Objects, "files", lambda self, tree, n: None)
    assert gitmerge.merge_many(items, _LABELS) == direct
    assert direct[0].data == b"A\nb\nC\n"


def test_conflicts_the_scripts_do_not_explain_are_placed_by_their_markers() -> None:
    """The fallback when git's scripts and markers disagree: sections counted, placed after the text before."""
    merged = b"x\n<<<<<<< o\na\n||||||| b\nb\n=======\n=======\nc\n>>>>>>> t\n"
    lines = gitmerge.lines_of(merged)
    (span,) = gitmerge._spans([], [1], [9], lines)
    assert (span.start, span.end) == (1, 9)
    # The base section is "b" (the first separator ends it); theirs holds the second "=======" and "c".
    assert (span.base, span.ours, span.theirs) == ((1, 1), (1, 1), (1, 2))


def test_a_conflict_after_a_clean_change_is_placed_where_git_wrote_it_past_a_long_common_tail() -> None:
    """The three versions share a tail of over 1,024 bytes (one long line here).

    ``git diff -U0`` first trims a common tail in 1,024-byte blocks and can
    then align the lines otherwise than the merge did: the conflict used to
    be placed a line too low in the base and the patch.
    """
    long = b"x = '" + b"ab" * 600 + b"'\n"
    base = b"L\nfor\nclass\n" + long + b"raise"
    ours = b"L\nraise\nclass\ncopy\n" + long + b"cache\n"
    theirs = long + b"L\n" + long + b"raise"  # upstream adds the long line at the top: a clean change before
    result = rebase_file(base, ours, theirs, path="m.py")
    assert result.outcome is Outcome.CONFLICT
    assert _conflicts_placed((base, ours, theirs), result)
    (c,) = result.conflicts
    assert ((c.base.start, c.base.end), (c.ours.start, c.ours.end), c.theirs.start) == ((2, 3), (2, 4), 3)


def test_an_analysis_that_raises_leaves_no_git_and_no_scratch_repository(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """git merges beside the analysis; when the analysis fails, git is ended and its directory removed."""
    from patchkit.rebase import merge
    from patchkit.vcs import gitclient

    started: list[gitclient.Running] = []

    def recording(*args: Any, **kwargs: Any) -> gitclient.Running:
        running = gitclient.start(*args, **kwargs)
        started.append(running)
        return running

    def failing(fn: Any, items: Any, **_: Any) -> Any:
        raise RuntimeError("the analysis failed")

    monkeypatch.setattr(gitmerge, "start", recording)
    monkeypatch.setattr(gitmerge, "_memory_dir", lambda room: str(tmp_path))
    monkeypatch.setattr(merge, "map_items", failing)
    items = [(b"a\nb\nc\n", b"a\nB\nc\n", b"a\nb\nC%d\n" % k, "f.py") for k in range(50)]
    with pytest.raises(RuntimeError, match="the analysis failed"):
        rebase_files(items)
    (running,) = started
    assert running._process.proc is not None and running._process.proc.returncode is not None
    assert list(tmp_path.iterdir()) == []
