"""check's SHA256SUMS rule over a state in memory."""

from __future__ import annotations

from patchkit.check import sums

from .memory import overlay_repo, state_of


def test_sums_as_generated_missing_unsafe_and_drifted() -> None:
    text, files = overlay_repo()
    assert sums.sums_file(state_of(text, files)) == []
    generated = files.pop("SHA256SUMS")
    [missing] = sums.sums_file(state_of(text, files))
    assert (missing.code, missing.message) == ("sums-missing", "does not exist")
    state = state_of(text, files)
    state.sums = "is a symlink"
    assert [f.code for f in sums.sums_file(state)] == ["unsafe-path"]
    files["SHA256SUMS"] = generated + b"0" * 64 + b"  gone.txt\n"
    [extra] = sums.sums_file(state_of(text, files))
    assert (extra.code, extra.line) == ("sums-drift", generated.count(b"\n") + 1)
    assert extra.message == "lists gone.txt, which the lockfile does not pin (and which does not exist)"
