"""The series rebase core on trees in memory: renames, additions, deletions, CRLF and Latin-1 bytes kept exact."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from patchkit.rebase.series import PatchOutcome, rebase_series
from patchkit.series.apply import Item, apply_series
from patchkit.series.parse import parse_patch
from tests.series.queue import commit, git

OLD = {
    "win/config.ini": b"[a]\r\nkey=1\r\nother=2\r\n",
    "doc/notes.txt": b"caf\xe9 au lait\n",
    "old/name.py": b"x = 1\ny = 2\n",
    "gone.txt": b"bye\n",
}


@pytest.fixture
def patch(tmp_path: Path) -> bytes:
    """One format-patch that edits a CRLF and a Latin-1 file, deletes one, adds one and renames one (edited)."""
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, dict(OLD), "base")
    git(repo, "mv", "old/name.py", "old/renamed.py")
    commit(
        repo,
        {
            "win/config.ini": b"[a]\r\nkey=2\r\nother=2\r\n",
            "doc/notes.txt": b"caf\xe9 cr\xe8me\n",
            "gone.txt": None,
            "new/module.py": b"def f():\n    return 1\n",
            "old/renamed.py": b"x = 1\ny = 3\n",
        },
        "Mixed change (#4711)",
    )
    return subprocess.run(
        ["git", "format-patch", "--stdout", "-M", f"{base}..HEAD"], cwd=repo, check=True, capture_output=True
    ).stdout


def _reader(tree: dict[str, bytes]):  # type: ignore[no-untyped-def]
    def read(paths: Iterable[str]) -> dict[str, bytes | None]:
        return {p: tree.get(p) for p in paths}

    return read


def test_every_kind_of_change_survives_an_upstream_edit_byte_for_byte(patch: bytes) -> None:
    new = {
        **OLD,
        "win/config.ini": b"; header\r\n" + OLD["win/config.ini"],
        "old/name.py": b"# moved soon\n" + OLD["old/name.py"],
    }
    item = Item("mixed", "p.patch", parse_patch(patch, "p.patch"))
    result = rebase_series([item], _reader(OLD), _reader(new))
    (r,) = result.patches
    assert r.outcome is PatchOutcome.CLEAN
    assert {f.path: f.outcome for f in r.files} == {
        "doc/notes.txt": "unchanged",
        "gone.txt": "clean",
        "new/module.py": "clean",
        "win/config.ini": "clean",
        "old/renamed.py": "clean",
    }
    assert r.new_bytes is not None
    regenerated = parse_patch(r.new_bytes, "new.patch")
    assert [(f.kind, f.old_path, f.new_path) for f in regenerated.files] == [
        ("modify", "doc/notes.txt", "doc/notes.txt"),
        ("delete", "gone.txt", None),
        ("add", None, "new/module.py"),
        ("rename", "old/name.py", "old/renamed.py"),
        ("modify", "win/config.ini", "win/config.ini"),
    ]
    applied = apply_series([Item("mixed", "new.patch", regenerated)], _reader(new))
    assert applied.files == {
        "doc/notes.txt": b"caf\xe9 cr\xe8me\n",
        "gone.txt": None,
        "new/module.py": b"def f():\n    return 1\n",
        "old/name.py": None,
        "old/renamed.py": b"# moved soon\nx = 1\ny = 3\n",
        "win/config.ini": b"; header\r\n[a]\r\nkey=2\r\nother=2\r\n",
    }
    again = rebase_series([item], _reader(OLD), _reader(new))
    assert again.patches[0].new_bytes == r.new_bytes  # byte-stable


def test_a_rename_upstream_already_made_leaves_only_the_edit(patch: bytes) -> None:
    new = {k: v for k, v in OLD.items() if k != "old/name.py"} | {"old/renamed.py": OLD["old/name.py"]}
    item = Item("mixed", "p.patch", parse_patch(patch, "p.patch"))
    (r,) = rebase_series([item], _reader(OLD), _reader(new)).patches
    assert {f.path: f.outcome for f in r.files}["old/renamed.py"] == "unchanged"  # upstream moved it, unedited
    assert r.new_bytes is not None
    kinds = [(f.kind, f.old_path) for f in parse_patch(r.new_bytes, "n").files]
    assert ("modify", "old/renamed.py") in kinds and ("rename", "old/name.py") not in kinds


def test_a_patchs_files_merge_in_one_git_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four files changed on both sides cost one batch of git processes, not one batch per file."""
    from patchkit.vcs import gitmerge

    files = {f"pkg/m{k}.py": b"".join(b"line %d\n" % i for i in range(20)) for k in range(4)}
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, dict(files), "base")
    commit(repo, {p: d.replace(b"line 3\n", b"line three\n") for p, d in files.items()}, "Edit (#1)")
    patch = subprocess.run(
        ["git", "format-patch", "--stdout", f"{base}..HEAD"], cwd=repo, check=True, capture_output=True
    ).stdout
    batches: list[int] = []
    real = gitmerge.merging
    monkeypatch.setattr(
        gitmerge, "merging", lambda triples, labels: batches.append(len(triples)) or real(triples, labels)
    )
    new = {p: d.replace(b"line 15\n", b"line fifteen\n") for p, d in files.items()}
    result = rebase_series([Item("edit", "p.patch", parse_patch(patch, "p.patch"))], _reader(files), _reader(new))
    (r,) = result.patches
    assert r.outcome is PatchOutcome.CLEAN
    assert batches == [4]


def _queue(tmp_path: Path, files: dict[str, bytes], edits: list[tuple[str, bytes, bytes]]) -> list[Item]:
    """A series made as commits and exported with format-patch: one patch per (path, old line, new line)."""
    repo = tmp_path / "q"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, dict(files), "base")
    tree = dict(files)
    for n, (path, was, now) in enumerate(edits):
        tree[path] = tree[path].replace(was, now, 1)
        commit(repo, {path: tree[path]}, f"Edit {n} (#{n + 1})")
    out = subprocess.run(
        ["git", "format-patch", "-o", str(tmp_path / "out"), f"{base}..HEAD"], cwd=repo, check=True, capture_output=True
    ).stdout.decode()
    return [Item(f"p{n}", name, parse_patch(Path(name).read_bytes(), name)) for n, name in enumerate(out.split())]


def test_merges_run_ahead_in_waves_give_the_patch_by_patch_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Patches that touch none of each other's files merge in one git batch; one that touches an
    earlier patch's file waits for a later batch and sees the earlier patch's result. Every outcome
    and every regenerated byte equals the rebase merged one patch at a time."""
    from patchkit.rebase import series
    from patchkit.vcs import gitmerge

    files = {f"pkg/m{k}.py": b"".join(b"line %d\n" % i for i in range(30)) for k in range(4)}
    edits = [(f"pkg/m{k}.py", b"line 3\n", b"line three %d\n" % k) for k in range(4)]
    # m1 again: its merge reads patch p1's result, as git am -3 applies it; then m2's line 16,
    # which upstream changed too: a conflict after the batch, found as one patch at a time finds it.
    edits += [("pkg/m1.py", b"line 20\n", b"line twenty\n"), ("pkg/m0.py", b"line 5\n", b"line five\n")]
    edits += [("pkg/m2.py", b"line 16\n", b"line sixteen\n"), ("pkg/m3.py", b"line 25\n", b"line 25b\n")]
    items = _queue(tmp_path, files, edits)
    new = {p: d.replace(b"line 10\n", b"line ten\n").replace(b"line 16\n", b"line 16!\n") for p, d in files.items()}
    batches: list[int] = []
    real = gitmerge.merging
    monkeypatch.setattr(
        gitmerge, "merging", lambda triples, labels: batches.append(len(triples)) or real(triples, labels)
    )
    waved = rebase_series(items, _reader(files), _reader(new))
    # p0-p3 at once; then p4-p7 (p4 touches m1 again: a new wave); then p6's conflict read again, once.
    assert batches == [4, 4, 1]
    batches.clear()
    monkeypatch.setattr(series, "_WAVE_FILES", 0)  # every wave one patch: merged patch by patch
    single = rebase_series(items, _reader(files), _reader(new))
    assert len(batches) == 8  # p0 to p6 one by one, and p6's conflict
    assert [p.name for p in waved.patches] == [f"p{n}" for n in range(7)]
    assert waved.stopped is not None and waved.stopped.name == "p6"
    for a, b in zip(waved.patches, single.patches, strict=True):
        assert (a.name, a.outcome, a.files, a.new_bytes) == (b.name, b.outcome, b.files, b.new_bytes)
        assert a.conflicted == b.conflicted and a.interdiffs == b.interdiffs
    p4 = waved.patches[4].new_bytes or b""
    # p4 applies to m1 as upstream and p1 left it (its blob id), and leaves both changes in it.
    before = new["pkg/m1.py"].replace(b"line 3\n", b"line three 1\n")
    after = before.replace(b"line 20\n", b"line twenty\n")
    assert f"index {series._blob(before)}..{series._blob(after)} 100644\n".encode() in p4


def test_a_patch_regenerated_to_its_own_bytes_is_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A canonical patch whose files upstream left alone comes out byte for byte as it went in: its
    interdiff reads the patch as already parsed, and equals what parsing the bytes again gives."""
    from patchkit.series import checks

    files = {f"pkg/m{k}.py": b"".join(b"line %d\n" % i for i in range(30)) for k in range(3)}
    items = _queue(tmp_path, files, [(f"pkg/m{k}.py", b"line 3\n", b"line three %d\n" % k) for k in range(3)])
    first = rebase_series(items, _reader(files), _reader(files))  # canonical bytes, same tree
    canonical = [
        Item(it.name, it.file, parse_patch(r.new_bytes or b"", it.file), r.new_bytes)
        for it, r in zip(items, first.patches, strict=True)
    ]
    newer = {**files, "pkg/m1.py": files["pkg/m1.py"].replace(b"line 20\n", b"line twenty\n")}
    parsed: list[bytes] = []
    real = checks.parse_patch
    monkeypatch.setattr(checks, "parse_patch", lambda data, *a, **k: parsed.append(data) or real(data, *a, **k))
    kept = rebase_series(canonical, _reader(files), _reader(newer))
    assert [r.new_bytes == it.data for r, it in zip(kept.patches, canonical, strict=True)] == [True, False, True]
    assert parsed == [kept.patches[1].new_bytes]  # only the patch whose file upstream changed
    unknown = rebase_series([Item(it.name, it.file, it.patch) for it in canonical], _reader(files), _reader(newer))
    assert [r.interdiffs for r in kept.patches] == [r.interdiffs for r in unknown.patches]
    assert [r.new_bytes for r in kept.patches] == [r.new_bytes for r in unknown.patches]
