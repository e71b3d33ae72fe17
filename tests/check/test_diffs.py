"""check's diff rules over a state in memory: each diff parses, names its base and reproduces the patch."""

from __future__ import annotations

import pytest

from patchkit.check import diffs
from patchkit.core import diffs as diff_code
from patchkit.core.values import UpstreamPath

from .memory import BASE, BASE_PATH, OVERLAY, overlay_repo, sha, state_of


def test_an_exact_diff_is_verified() -> None:
    assert diffs.patch_diffs(state_of(*overlay_repo())) == ([], 1)


def test_a_diff_that_does_not_parse_names_its_bad_hunk() -> None:
    text, files = overlay_repo()
    files["upstream/fix.diff"] = files["upstream/fix.diff"].replace(b"@@ -7,7 +7,7 @@", b"@@ -7,9 +7,7 @@")
    state = state_of(text, files)
    state.files.sha256["upstream/fix.diff"] = sha(files["upstream/fix.diff"])
    found, verified = diffs.patch_diffs(state)
    assert verified == 0
    assert [(f.code, f.file, f.line) for f in found] == [("diff-invalid", "upstream/fix.diff", 3)]
    assert found[0].fix == "regenerate it: patchkit diff --write fix"


def test_an_overlay_edited_after_its_diff_is_stale_or_a_base_mismatch() -> None:
    text, files = overlay_repo(overlay=OVERLAY.replace(b"line 10 fixed", b"line 10 fixed again"))
    state = state_of(text, files)
    state.files.sha256["patches/mod.py"] = sha(files["patches/mod.py"])
    found, verified = diffs.patch_diffs(state)
    assert (verified, [(f.code, f.file) for f in found]) == (0, [("diff-stale", "upstream/fix.diff")])
    text, files = overlay_repo(overlay=OVERLAY.replace(b"line 1\n", b"line one\n"))
    found, verified = diffs.patch_diffs(state_of(text, files))
    assert [(f.code, f.field) for f in found] == [("base-mismatch", "patches[fix].base.sha256")]


def test_an_empty_diff_of_a_patch_equal_to_its_base_is_upstreamed() -> None:
    text, files = overlay_repo()
    text = text.replace(sha(OVERLAY), sha(BASE))
    files["upstream/fix.diff"] = b""
    state = state_of(text, files)
    found, verified = diffs.patch_diffs(state)
    assert verified == 1
    assert [(f.code, f.severity, f.message) for f in found] == [
        ("upstreamed", "note", f"'fix' is identical to upstream {BASE_PATH}: upstream has the whole change")
    ]


def test_a_base_behind_the_pinned_upstream() -> None:
    text, files = overlay_repo()
    text = text.replace(f'commit = "{"a" * 40}"\n', f'commit = "{"b" * 40}"\n', 1)  # the upstream's pin moved
    [f] = diffs.bases(state_of(text, files))
    assert (f.code, f.field) == ("base-outdated", "patches[fix].base.commit")
    assert f.message.startswith(f"'fix' is based on pkg {'a' * 12}, but the deployment pins pkg {'b' * 12}")
    assert f.fix == f"move the patch onto {'b' * 12}: patchkit rebase --onto {'b' * 12} --upstream pkg"


def test_an_overlay_without_a_diff_is_reported() -> None:
    text, files = overlay_repo()
    head, _, _ = text.partition("[patches.diff]")
    head += '[patches.origin]\nrepository = "example/pkg"\ncommit = "abc1234"\n'
    found = diffs.overlays_have_diffs(state_of(head, files))
    assert [(f.code, f.field) for f in found] == [("no-diff", "patches[fix].name")]


def _many(n: int) -> tuple[str, dict[str, bytes]]:
    """A lockfile of ``n`` overlays with their diffs, every fourth file broken a way of its own."""
    upstream = '[upstreams.pkg]\ngit = "https://github.com/example/pkg"\ncommit = "' + "a" * 40 + '"\n\n'
    text = 'schema = 1\n\n[deployment]\nname = "t"\n\n' + upstream
    files: dict[str, bytes] = {}
    for i in range(n):
        base = BASE.replace(b"line 1\n", b"line 1 of %d\n" % i)
        overlay = base.replace(b"line 10\n", b"line 10 fixed\n")
        diff = diff_code.canonical_diff(base, overlay, UpstreamPath(BASE_PATH))
        files[f"patches/m{i}.py"], files[f"upstream/m{i}.diff"] = overlay, diff
        text += (
            f'[[patches]]\nname = "p{i}"\nkind = "overlay"\nfile = "patches/m{i}.py"\nsha256 = "{sha(overlay)}"\n'
            f'target = "/usr/lib/pkg/m{i}.py"\n\n[patches.base]\nupstream = "pkg"\npath = "{BASE_PATH}"\n'
            f'sha256 = "{sha(base)}"\n\n[patches.diff]\nfile = "upstream/m{i}.diff"\nsha256 = "{sha(diff)}"\n\n'
        )
        broken = {1: overlay.replace(b"line 8", b"line eight"), 2: overlay + b"tail\n", 3: b""}.get(i % 4)
        if broken is not None:
            files[f"{'upstream' if i % 4 == 3 else 'patches'}/m{i}.{'diff' if i % 4 == 3 else 'py'}"] = broken
    return text, files


def test_diffs_verified_on_every_core_find_what_one_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same findings in the same order and the same count, spread or not."""
    text, files = _many(40)
    runs = []
    for spread_from in (10**9, 1):
        monkeypatch.setattr(diffs, "SPREAD_FROM", spread_from)
        state = state_of(text, files)
        for rel, data in files.items():  # the bytes as they hashed, broken ones too
            state.files.sha256[rel] = sha(data)
        found, verified = diffs.patch_diffs(state)
        runs.append(([(f.code, f.file, f.line, f.field, f.message) for f in found], verified))
    assert runs[0] == runs[1]
    codes = [code for code, *_ in runs[0][0]]
    # Stale (a line in the hunk edited), a base that is not the pinned one (a line added, an empty diff), verified.
    assert (codes.count("diff-stale"), codes.count("base-mismatch"), runs[0][1]) == (10, 20, 10)
