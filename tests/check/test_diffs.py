"""check's diff rules over a state in memory: each diff parses, names its base and reproduces the patch."""

from __future__ import annotations

from patchkit.check import diffs

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
