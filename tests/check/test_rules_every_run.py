"""Every rule runs on every check: an edit is found the next time, and a finding is reported each time.

Nothing of a run is kept for the next one, so these run each rule twice over
the same state, then over an edited one, and expect the same answer as a
first run would give.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Invoke

from patchkit.check import diffs, hand_diffs, pins, sums
from patchkit.check.state import State
from patchkit.core import diffs as diff_code
from patchkit.errors import LockfileError
from patchkit.lockfile.reader import loads
from patchkit.lockfile.writer import dumps

from .memory import OVERLAY, overlay_repo, sha, state_of


def test_a_changed_overlay_is_stale_on_every_run() -> None:
    text, files = overlay_repo()
    assert diffs.patch_diffs(state_of(text, files)) == ([], 1)
    text, files = overlay_repo(overlay=OVERLAY.replace(b"line 10 fixed", b"line 10 fixed again"))
    for _ in range(2):
        stale = state_of(text, files)
        stale.files.sha256["patches/mod.py"] = sha(files["patches/mod.py"])
        found, verified = diffs.patch_diffs(stale)
        assert (verified, [f.code for f in found]) == (0, ["diff-stale"])


def test_a_hand_edited_layout_is_reported_every_time() -> None:
    text, files = overlay_repo()
    assert pins.canonical(state_of(text, files)) == []
    edited = text.replace('reason = "a fix"', 'reason  =  "a fix"')
    for _ in range(2):
        assert [f.code for f in pins.canonical(state_of(edited, files))] == ["lockfile-format"]


def test_a_bad_lockfile_fails_every_time() -> None:
    text, _ = overlay_repo()
    bad = text.replace('kind = "overlay"', 'kind = "overlai"')
    for _ in range(2):
        with pytest.raises(LockfileError, match="unknown kind 'overlai'"):
            loads(bad)


def test_check_twice_gives_the_same_report_and_catches_a_later_edit(invoke: Invoke, deploy: Path) -> None:
    first = invoke("check", "--format", "json", repo=deploy)
    second = invoke("check", "--format", "json", repo=deploy)
    assert (first.exit_code, second.exit_code) == (0, 0)
    assert first.stdout == second.stdout
    overlay = deploy / "patches" / "gpu_worker.py"
    overlay.write_bytes(overlay.read_bytes() + b"# edited\n")
    third = invoke("check", "--format", "json", repo=deploy)
    codes = {f["code"] for f in json.loads(third.stdout)["findings"]}
    assert third.exit_code == 1 and {"hash-mismatch", "base-mismatch"} <= codes


def test_sums_check_compares_with_the_lockfile_every_time(deploy: Path) -> None:
    from patchkit.check.verify_sums import check_sums
    from patchkit.store.repo import Repo

    first = check_sums(Repo(deploy))
    assert first.ok and first.files_hashed > 0
    assert check_sums(Repo(deploy)).files_hashed == first.files_hashed
    overlay = deploy / "patches" / "gpu_worker.py"
    overlay.write_bytes(overlay.read_bytes() + b"# edited\n")
    assert [f.code for f in check_sums(Repo(deploy)).findings] == ["hash-mismatch"]
    sums_file = deploy / "SHA256SUMS"
    sums_file.write_bytes(sums_file.read_bytes() + b"\n")
    codes = {f.code for f in check_sums(Repo(deploy)).findings}
    assert "sums-drift" in codes or "sums-format" in codes


def test_check_reads_an_edited_lockfile_again(invoke: Invoke, deploy: Path) -> None:
    first = invoke("check", "--format", "json", repo=deploy)
    assert first.exit_code == 0
    lockfile = deploy / "lockfile.toml"
    pinned = hashlib.sha256((deploy / "patches" / "fp8_fnuz.py").read_bytes()).hexdigest()
    lockfile.write_text(lockfile.read_text().replace(pinned, "0" * 64))
    found = json.loads(invoke("check", "--format", "json", repo=deploy).stdout)["findings"]
    assert any(f["code"] == "hash-mismatch" and "pinned 000000000000" in f["message"] for f in found)


def test_findings_point_at_the_lines_of_the_lockfile_as_it_is_now(invoke: Invoke, deploy: Path) -> None:
    lockfile = deploy / "lockfile.toml"
    pinned = hashlib.sha256((deploy / "patches" / "fp8_fnuz.py").read_bytes()).hexdigest()
    lockfile.write_text(lockfile.read_text().replace(pinned, "0" * 64))

    def mismatch_line() -> int:
        found = json.loads(invoke("check", "--format", "json", repo=deploy).stdout)["findings"]
        (line,) = [f["line"] for f in found if f["code"] == "hash-mismatch"]
        return int(line)

    first = mismatch_line()
    assert mismatch_line() == first
    lockfile.write_text("# a comment above everything\n" + lockfile.read_text())
    assert mismatch_line() == first + 1


def test_a_duplicate_target_is_found_every_time() -> None:
    text, files = overlay_repo()
    assert pins.targets(state_of(text, files)) == []
    second = text[text.index("[[patches]]") :].replace('name = "fix"', 'name = "fix2"')
    second = second.replace("patches/mod.py", "patches/mod2.py").replace("upstream/fix.diff", "upstream/fix2.diff")
    doubled = dumps(loads(text + "\n" + second))
    for _ in range(2):
        assert [f.code for f in pins.targets(state_of(doubled, files))] == ["duplicate-target"]


def _upstream_moved(text: str) -> str:
    """The upstream pinned at a newer commit than the one the base was taken at."""
    return text.replace('commit = "' + "a" * 40 + '"\n\n[[patches]]', 'commit = "' + "c" * 40 + '"\n\n[[patches]]')


def _diff_dropped(text: str) -> str:
    """The overlay as an import leaves it: an origin stated, no base or diff pinned."""
    head, _, _ = text.partition("[patches.base]")
    return head + '[patches.origin]\npath = "pkg/mod.py"\n'


@pytest.mark.parametrize(
    ("rule", "edit", "codes"),
    [
        (diffs.bases, _upstream_moved, ["base-outdated"]),
        (diffs.overlays_have_diffs, _diff_dropped, ["no-diff", "base-unknown"]),
    ],
)
def test_each_rule_of_the_lockfile_finds_an_edit(
    rule: Callable[[State], list[Any]], edit: Callable[[str], str], codes: list[str]
) -> None:
    text, files = overlay_repo()
    assert rule(state_of(text, files)) == []
    edited = dumps(loads(edit(text)))
    assert edited != text
    for _ in range(2):
        assert [f.code for f in rule(state_of(edited, files))] == codes


def test_sums_file_follows_the_bytes_of_both_files() -> None:
    text, files = overlay_repo()
    assert sums.sums_file(state_of(text, files)) == []
    edited = {**files, "SHA256SUMS": files["SHA256SUMS"].replace(b"  patches/mod.py", b"  patches/mod.pyc")}
    for _ in range(2):
        assert {f.code for f in sums.sums_file(state_of(text, edited))} == {"sums-drift"}


# --------------------------------------------------------------------------- hand-kept diffs

HAND_BASE = b"".join(b"def step_%d():\n    return %d\n\n" % (i, i) for i in range(30))
SITE = "/usr/local/lib/python3.12/dist-packages"


def handkept(overlays: dict[str, bytes], module: bool = False) -> tuple[str, dict[str, bytes]]:
    """An imported deployment: each overlay with its hand-kept diff (as people write them), optionally a module."""
    parts = [f'schema = 1\n\n[upstreams.vllm]\ngit = "https://github.com/vllm-project/vllm"\ncommit = "{"a" * 40}"\n\n']
    files: dict[str, bytes] = {}
    for name, overlay in overlays.items():
        up = f"vllm/{name}.py"
        files[f"patches/{name}_fixed.py"] = overlay
        files[f"patches/diffs/{name}.patch"] = diff_code.make(HAND_BASE, overlay, f"a/{up}", f"b/{name}_fixed.py")
    for name in overlays:
        parts.append(
            f'[[patches]]\nname = "{name}"\nkind = "overlay"\nfile = "patches/{name}_fixed.py"\n'
            f'sha256 = "{sha(files[f"patches/{name}_fixed.py"])}"\ntarget = "{SITE}/vllm/{name}.py"\n\n'
            f'[patches.origin]\npath = "vllm/{name}.py"\n\n'
        )
    if module:
        helper = files["patches/helper.py"] = b"def helper():\n    return 1\n"
        files["patches/diffs/helper.patch"] = diff_code.make(b"", helper, "/dev/null", "b/helper.py")
        parts.append(
            f'[[patches]]\nname = "helper"\nkind = "module"\nfile = "patches/helper.py"\n'
            f'sha256 = "{sha(files["patches/helper.py"])}"\ntarget = "{SITE}/vllm/helper.py"\n\n'
        )
    names = [*overlays, *(["helper"] if module else [])]
    for name in names:
        rel = f"patches/diffs/{name}.patch"
        parts.append(f'[[diffs]]\nfile = "{rel}"\nsha256 = "{sha(files[rel])}"\npatches = ["{name}"]\n\n')
    return dumps(loads("".join(parts))), files


def test_hand_kept_diffs_are_undone_on_every_run() -> None:
    overlays = {
        "worker": HAND_BASE.replace(b"    return 5\n", b"    return 5  # fixed\n"),
        "sampler": HAND_BASE.replace(b"    return 20\n", b"    return 21\n"),
    }
    text, files = handkept(overlays)
    for _ in range(2):
        assert hand_diffs.hand_diffs(state_of(text, files)) == ([], 2)
    # One overlay edited after its diff was made (its pin too): stale, every time.
    later = overlays["worker"].replace(b"# fixed\n", b"# fixed again\n")
    edited = {**files, "patches/worker_fixed.py": later}
    text2 = text.replace(sha(files["patches/worker_fixed.py"]), sha(edited["patches/worker_fixed.py"]))
    for _ in range(2):
        found, verified = hand_diffs.hand_diffs(state_of(text2, edited))
        assert ([f.code for f in found], verified) == (["diff-stale"], 1)
    # A diff's own bytes changed (not its pin).
    diff = files["patches/diffs/sampler.patch"]
    damaged = {**files, "patches/diffs/sampler.patch": diff.replace(b"+    return 21", b"+    return 22")}
    found, verified = hand_diffs.hand_diffs(state_of(text, damaged))
    assert ([f.code for f in found], verified) == (["diff-stale"], 1)


def test_a_module_note_follows_the_provenance_tables() -> None:
    text, files = handkept({"worker": HAND_BASE.replace(b"    return 5\n", b"    return 6\n")}, module=True)
    named = state_of(text, files, provenance={"patches/helper.py"})
    assert hand_diffs.hand_diffs(named) == ([], 1)  # a provenance row says where the module comes from
    found, verified = hand_diffs.hand_diffs(state_of(text, files))
    assert ([f.code for f in found], verified) == (["module-maybe-upstream"], 1)
