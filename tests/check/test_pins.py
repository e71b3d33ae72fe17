"""check's pin rules over a repository in memory: pinned files, targets, the canonical form."""

from __future__ import annotations

from patchkit.check import pins
from patchkit.check.run import run_rules
from patchkit.check.state import PinnedFiles

from .memory import OVERLAY, TARGET, overlay_repo, sha, state_of


def test_a_clean_overlay_passes_every_rule() -> None:
    text, files = overlay_repo()
    result = run_rules(state_of(text, files))
    assert [f.code for f in result.findings] == []
    assert (result.files_hashed, result.diffs_verified) == (2, 1)


def test_a_changed_byte_is_a_hash_mismatch_at_the_pin() -> None:
    text, files = overlay_repo(overlay=OVERLAY.replace(b"fixed", b"fixeD"))
    [f] = pins.pinned_files(state_of(text, files))
    assert (f.code, f.file, f.field) == ("hash-mismatch", "lockfile.toml", "patches[fix].sha256")
    assert f.line == text.splitlines().index(f'sha256 = "{sha(OVERLAY)}"') + 1
    assert f.message.startswith(f"patches/mod.py (patch 'fix') does not match its pin: pinned {sha(OVERLAY)[:12]}…")


def test_a_missing_file_names_its_file_field() -> None:
    text, files = overlay_repo()
    del files["upstream/fix.diff"]
    [f] = pins.pinned_files(state_of(text, files))
    assert (f.code, f.field) == ("missing", "patches[fix].diff.file")
    assert f.fix == "restore it (git checkout -- upstream/fix.diff) or drop the entry (patchkit remove)"


def test_unsafe_and_unreadable_files_are_named_once() -> None:
    text, files = overlay_repo()
    state = state_of(text, files)
    state.files = PinnedFiles(unsafe={"patches/mod.py": "is a symlink"}, unreadable={"upstream/fix.diff": "EIO"})
    found = pins.pinned_files(state)
    assert [(f.code, f.file, f.message) for f in found] == [
        ("unsafe-path", "patches/mod.py", "patches/mod.py (patch 'fix') is a symlink"),
        ("unreadable", "upstream/fix.diff", "cannot read: EIO"),
    ]


def test_two_files_at_one_target_and_a_file_below_another() -> None:
    extra = (
        f'\n[[tuning]]\nname = "same"\nfile = "tuning/a.csv"\nsha256 = "{sha(b"a")}"\ntarget = "{TARGET}"\n'
        f'\n[[tuning]]\nname = "below"\nfile = "tuning/b.csv"\nsha256 = "{sha(b"b")}"\ntarget = "{TARGET}/x.csv"\n'
    )
    text, files = overlay_repo(extra=extra, files=[("tuning/a.csv", b"a"), ("tuning/b.csv", b"b")])
    found = pins.targets(state_of(text, files))
    assert [(f.code, f.field, f.message) for f in found] == [
        ("duplicate-target", "tuning[same].target", f"target {TARGET} is already claimed by patches[fix].target"),
        (
            "nested-target",
            "tuning[below].target",
            f"target {TARGET}/x.csv lies below {TARGET}, which patches[fix].target mounts as a file",
        ),
    ]


def test_a_hand_edited_layout_is_not_canonical_at_its_first_line() -> None:
    text, files = overlay_repo()
    edited = text.replace('name = "t"\n', 'name = "t"  # ours\n')
    [f] = pins.canonical(state_of(edited, files))
    assert (f.code, f.line) == ("lockfile-format", edited.splitlines().index('name = "t"  # ours') + 1)
    assert pins.canonical(state_of(text, files)) == []
