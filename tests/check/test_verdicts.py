"""Checks remembered between runs: a pass is skipped only for the same code on the same bytes; a failure always runs."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Invoke

from patchkit import diffs as diff_code
from patchkit import verdicts
from patchkit.check import diffs, hand_diffs, pins
from patchkit.check.state import State
from patchkit.errors import LockfileError
from patchkit.lockfile.model import Lockfile
from patchkit.lockfile.reader import loads, read
from patchkit.lockfile.tomlfast import Layout
from patchkit.lockfile.writer import dumps
from patchkit.verdicts import Verdicts

from .memory import OVERLAY, overlay_repo, sha, state_of


def memo(tmp_path: Path) -> Verdicts:
    return Verdicts(tmp_path / "verdicts" / "repo")


def test_a_pass_is_remembered_and_only_under_the_same_key(tmp_path: Path) -> None:
    first = memo(tmp_path)
    k = first.key("patch-diff", "a" * 64, "b" * 64)
    assert k is not None and not first.passed(k)
    first.add(k)
    first.save()
    again = memo(tmp_path)
    assert again.passed(k)
    assert not again.passed(again.key("patch-diff", "a" * 64, "c" * 64))  # another input
    assert not again.passed(again.key("canonical", "a" * 64, "b" * 64))  # another check
    nothing = Verdicts()
    assert nothing.key("patch-diff", "a" * 64) is None and not nothing.passed(None)
    nothing.add(None)
    nothing.save()  # remembers nothing, writes nowhere


def test_the_key_covers_patchkits_own_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = memo(tmp_path).key("canonical", "a" * 64)
    monkeypatch.setattr(verdicts, "code_version", lambda: b"other code")
    assert memo(tmp_path).key("canonical", "a" * 64) != before


def test_a_damaged_or_unwritable_memo_is_empty_and_never_an_error(tmp_path: Path) -> None:
    path = tmp_path / "verdicts" / "repo"
    path.parent.mkdir()
    path.write_bytes(b"x" * 33)  # not a whole number of keys
    damaged = Verdicts(path)
    k = damaged.key("canonical", "a" * 64)
    assert not damaged.passed(k)
    blocked = Verdicts(tmp_path / "file" / "repo")
    (tmp_path / "file").write_bytes(b"")  # a file where the directory would go
    blocked.add(blocked.key("canonical", "a" * 64))
    blocked.save()
    assert (tmp_path / "file").read_bytes() == b""


def test_only_the_last_runs_passes_are_kept(tmp_path: Path) -> None:
    first = memo(tmp_path)
    old, kept = first.key("x", "old"), first.key("x", "kept")
    first.add(old)
    first.add(kept)
    first.save()
    second = memo(tmp_path)
    assert second.passed(kept)
    second.save()
    assert memo(tmp_path).passed(kept) and not memo(tmp_path).passed(old)


def test_a_remembered_diff_is_not_reversed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, files = overlay_repo()
    state = state_of(text, files)
    state.verdicts = memo(tmp_path)
    assert diffs.patch_diffs(state) == ([], 1)
    state.verdicts.save()
    monkeypatch.setattr(diff_code, "apply", lambda *a: pytest.fail("reversed again"))
    again = state_of(text, files)
    again.verdicts = memo(tmp_path)
    assert diffs.patch_diffs(again) == ([], 1)


def test_a_changed_overlay_is_checked_again_and_a_failure_every_time(tmp_path: Path) -> None:
    text, files = overlay_repo()
    state = state_of(text, files)
    state.verdicts = memo(tmp_path)
    assert diffs.patch_diffs(state) == ([], 1)
    state.verdicts.save()
    text, files = overlay_repo(overlay=OVERLAY.replace(b"line 10 fixed", b"line 10 fixed again"))
    for _ in range(2):
        stale = state_of(text, files)
        stale.files.sha256["patches/mod.py"] = sha(files["patches/mod.py"])
        stale.verdicts = memo(tmp_path)
        found, verified = diffs.patch_diffs(stale)
        assert (verified, [f.code for f in found]) == (0, ["diff-stale"])
        stale.verdicts.save()


def test_canonical_form_is_remembered_and_a_hand_edit_always_reported(tmp_path: Path) -> None:
    text, files = overlay_repo()
    state = state_of(text, files)
    state.verdicts = memo(tmp_path)
    assert pins.canonical(state) == []
    state.verdicts.save()
    assert (tmp_path / "verdicts" / "repo").stat().st_size == 32
    edited = text.replace('reason = "a fix"', 'reason  =  "a fix"')
    for _ in range(2):
        hand = state_of(edited, files)
        hand.verdicts = memo(tmp_path)
        assert [f.code for f in pins.canonical(hand)] == ["lockfile-format"]
        hand.verdicts.save()


def test_check_twice_gives_the_same_report_and_catches_a_later_edit(invoke: Invoke, deploy: Path) -> None:
    first = invoke("check", "--format", "json", repo=deploy)
    second = invoke("check", "--format", "json", repo=deploy)
    assert (first.exit_code, second.exit_code) == (0, 0)
    assert json.loads(first.stdout) == json.loads(second.stdout)
    cache = Path(os.environ["PATCHKIT_CACHE"])
    assert list((cache / "verdicts").iterdir())  # the memo is in the cache, not in the repository
    overlay = deploy / "patches" / "gpu_worker.py"
    overlay.write_bytes(overlay.read_bytes() + b"# edited\n")
    third = invoke("check", "--format", "json", repo=deploy)
    codes = {f["code"] for f in json.loads(third.stdout)["findings"]}
    assert third.exit_code == 1 and {"hash-mismatch", "base-mismatch"} <= codes  # the diff ran again


def test_sums_check_skips_the_lockfile_only_for_bytes_that_agreed(
    deploy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from patchkit.check.verify_sums import check_sums
    from patchkit.repo import Repo

    memo = tmp_path / "verdicts" / "sums"
    first = check_sums(Repo(deploy), Verdicts(memo))
    assert first.ok and first.files_hashed > 0
    real = Repo.read_lockfile
    monkeypatch.setattr(Repo, "read_lockfile", lambda self: pytest.fail("the lockfile was parsed again"))
    again = check_sums(Repo(deploy), Verdicts(memo))
    assert (again.ok, again.files_hashed) == (True, first.files_hashed)
    overlay = deploy / "patches" / "gpu_worker.py"
    overlay.write_bytes(overlay.read_bytes() + b"# edited\n")  # every file is still hashed
    assert [f.code for f in check_sums(Repo(deploy), Verdicts(memo)).findings] == ["hash-mismatch"]
    monkeypatch.setattr(Repo, "read_lockfile", real)
    sums_file = deploy / "SHA256SUMS"
    sums_file.write_bytes(sums_file.read_bytes() + b"\n")  # other bytes: compared with the lockfile again
    codes = {f.code for f in check_sums(Repo(deploy), Verdicts(memo)).findings}
    assert "sums-drift" in codes or "sums-format" in codes


# --------------------------------------------------------------------------- the typed lockfile


def lockfile_memo(tmp_path: Path) -> verdicts.LockfileMemo:
    return verdicts.LockfileMemo(tmp_path / "verdicts" / "lockfile-repo")


def parsed(text: str) -> Callable[[], tuple[Lockfile, Layout | None]]:
    return lambda: read(text)


def never() -> tuple[Lockfile, Layout | None]:
    pytest.fail("the lockfile was parsed again")


def test_the_same_bytes_give_the_same_lockfile_without_parsing(tmp_path: Path) -> None:
    text, _ = overlay_repo()
    first = lockfile_memo(tmp_path).load(text.encode(), parsed(text))
    again = lockfile_memo(tmp_path).load(text.encode(), never)
    assert again == first == loads(text) and again is not first
    assert dumps(again) == text  # the records rebuilt write back the same bytes


def test_other_bytes_code_or_interpreter_parse_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, _ = overlay_repo()
    lockfile_memo(tmp_path).load(text.encode(), parsed(text))
    # One byte of one value: the memo never serves the lockfile the old bytes parsed to.
    edited = text.replace('reason = "a fix"', 'reason = "a fiz"')
    got = lockfile_memo(tmp_path).load(edited.encode(), parsed(edited))
    assert got.patches[0].reason == "a fiz"
    assert lockfile_memo(tmp_path).load(edited.encode(), never) == got
    calls: list[str] = []
    monkeypatch.setattr(verdicts, "code_version", lambda: b"other code")
    lockfile_memo(tmp_path).load(edited.encode(), lambda: calls.append("parsed") or read(edited))
    monkeypatch.setattr(verdicts.sys, "version", "another interpreter")
    lockfile_memo(tmp_path).load(edited.encode(), lambda: calls.append("parsed") or read(edited))
    assert calls == ["parsed", "parsed"]


def test_a_bad_lockfile_fails_every_time_and_is_not_remembered(tmp_path: Path) -> None:
    text, _ = overlay_repo()
    bad = text.replace('kind = "overlay"', 'kind = "overlai"')
    for _ in range(2):
        with pytest.raises(LockfileError, match="unknown kind 'overlai'"):
            lockfile_memo(tmp_path).load(bad.encode(), parsed(bad))
    assert not (tmp_path / "verdicts").exists()


class _Runs:
    """Something a pickle would call on loading: ``os.system`` with a command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("kind", ["code", "other-record", "truncated", "empty"])
def test_a_damaged_or_foreign_memo_is_a_miss_and_runs_nothing(tmp_path: Path, kind: str) -> None:
    text, _ = overlay_repo()
    memo = lockfile_memo(tmp_path)
    memo.load(text.encode(), parsed(text))
    assert memo.path is not None
    held = memo.path.read_bytes()
    key, blob = held[:32], held[32:]
    marker = tmp_path / "ran"
    forged = {
        "code": pickle.dumps(_Runs(marker)),
        "other-record": pickle.dumps(loads(text).patches[0]),  # a record, but not a lockfile
        "truncated": blob[: len(blob) // 2],
        "empty": b"",
    }[kind]
    memo.path.write_bytes(key + forged)
    calls: list[str] = []
    got = lockfile_memo(tmp_path).load(text.encode(), lambda: calls.append("parsed") or read(text))
    assert (got, calls, marker.exists()) == (loads(text), ["parsed"], False)
    assert memo.path.read_bytes() == held  # the next run reads it again


def test_check_reads_an_edited_lockfile_again(invoke: Invoke, deploy: Path) -> None:
    first = invoke("check", "--format", "json", repo=deploy)
    assert first.exit_code == 0
    cache = Path(os.environ["PATCHKIT_CACHE"])
    assert [p.name.split("-")[0] for p in sorted((cache / "verdicts").iterdir())] == ["check", "lockfile"]
    (kept,) = (cache / "verdicts").glob("lockfile-*")
    written = kept.stat().st_ino
    assert invoke("check", "--format", "json", repo=deploy).stdout == first.stdout
    assert kept.stat().st_ino == written  # found again: not parsed, so not written again
    lockfile = deploy / "lockfile.toml"
    pinned = hashlib.sha256((deploy / "patches" / "fp8_fnuz.py").read_bytes()).hexdigest()
    lockfile.write_text(lockfile.read_text().replace(pinned, "0" * 64))
    found = json.loads(invoke("check", "--format", "json", repo=deploy).stdout)["findings"]
    assert any(f["code"] == "hash-mismatch" and "pinned 000000000000" in f["message"] for f in found)
    assert kept.stat().st_ino != written  # the edited bytes were parsed, and are the ones kept now


def test_a_rule_of_the_lockfile_alone_is_remembered_for_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, files = overlay_repo()
    first = state_of(text, files)
    first.verdicts = memo(tmp_path)
    assert (pins.targets(first), diffs.bases(first), diffs.overlays_have_diffs(first)) == ([], [], [])
    first.verdicts.save()
    with monkeypatch.context() as m:
        m.setattr(pins, "parent_dirs", lambda target: pytest.fail("targets ran again"))
        again = state_of(text, files)
        again.verdicts = memo(tmp_path)
        assert pins.targets(again) == []
        again.verdicts.save()
    # The same patch twice under another name: other bytes, so the rule runs, and finds it every time.
    second = text[text.index("[[patches]]") :].replace('name = "fix"', 'name = "fix2"')
    second = second.replace("patches/mod.py", "patches/mod2.py").replace("upstream/fix.diff", "upstream/fix2.diff")
    doubled = dumps(loads(text + "\n" + second))
    for _ in range(2):
        state = state_of(doubled, files)
        state.verdicts = memo(tmp_path)
        assert [f.code for f in pins.targets(state)] == ["duplicate-target"]
        state.verdicts.save()


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
def test_each_rule_of_the_lockfile_runs_again_on_other_bytes(
    tmp_path: Path, rule: Callable[[State], list[Any]], edit: Callable[[str], str], codes: list[str]
) -> None:
    text, files = overlay_repo()
    first = state_of(text, files)
    first.verdicts = memo(tmp_path)
    assert rule(first) == []
    first.verdicts.save()
    edited = dumps(loads(edit(text)))
    assert edited != text
    for _ in range(2):
        state = state_of(edited, files)
        state.verdicts = memo(tmp_path)
        assert [f.code for f in rule(state)] == codes
        state.verdicts.save()


def test_sums_file_is_remembered_for_the_bytes_of_both_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchkit import persist
    from patchkit.check import sums

    text, files = overlay_repo()
    first = state_of(text, files)
    first.verdicts = memo(tmp_path)
    assert sums.sums_file(first) == []
    first.verdicts.save()
    with monkeypatch.context() as m:
        m.setattr(persist, "expected_sums", lambda *a: pytest.fail("SHA256SUMS generated again"))
        again = state_of(text, files)
        again.verdicts = memo(tmp_path)
        assert sums.sums_file(again) == []
        again.verdicts.save()
    edited = {**files, "SHA256SUMS": files["SHA256SUMS"].replace(b"  patches/mod.py", b"  patches/mod.pyc")}
    for _ in range(2):
        state = state_of(text, edited)
        state.verdicts = memo(tmp_path)
        assert {f.code for f in sums.sums_file(state)} == {"sums-drift"}
        state.verdicts.save()


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


def hand_state(tmp_path: Path, text: str, files: dict[str, bytes], **view: Any) -> State:
    state = state_of(text, files, **view)
    state.verdicts = memo(tmp_path)
    return state


def test_hand_kept_diffs_that_passed_are_not_undone_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchkit.importing import handdiffs

    overlays = {
        "worker": HAND_BASE.replace(b"    return 5\n", b"    return 5  # fixed\n"),
        "sampler": HAND_BASE.replace(b"    return 20\n", b"    return 21\n"),
    }
    text, files = handkept(overlays)
    first = hand_state(tmp_path, text, files)
    assert hand_diffs.hand_diffs(first) == ([], 2)
    first.verdicts.save()
    with monkeypatch.context() as m:
        m.setattr(handdiffs, "chains", lambda *a: pytest.fail("the diffs were read again"))
        again = hand_state(tmp_path, text, files)
        assert hand_diffs.hand_diffs(again) == ([], 2)
        again.verdicts.save()
    # One overlay edited after its diff was made (its pin too): checked again, and the failure every time.
    later = overlays["worker"].replace(b"# fixed\n", b"# fixed again\n")
    edited = {**files, "patches/worker_fixed.py": later}
    text2 = text.replace(sha(files["patches/worker_fixed.py"]), sha(edited["patches/worker_fixed.py"]))
    for _ in range(2):
        stale = hand_state(tmp_path, text2, edited)
        found, verified = hand_diffs.hand_diffs(stale)
        assert ([f.code for f in found], verified) == (["diff-stale"], 1)
        stale.verdicts.save()
    # A diff's own bytes changed (not its pin): read again.
    diff = files["patches/diffs/sampler.patch"]
    damaged = {**files, "patches/diffs/sampler.patch": diff.replace(b"+    return 21", b"+    return 22")}
    found, verified = hand_diffs.hand_diffs(hand_state(tmp_path, text, damaged))
    assert ([f.code for f in found], verified) == (["diff-stale"], 1)


def test_a_pass_that_asked_the_provenance_tables_is_not_remembered(tmp_path: Path) -> None:
    text, files = handkept({"worker": HAND_BASE.replace(b"    return 5\n", b"    return 6\n")}, module=True)
    named = hand_state(tmp_path, text, files, provenance={"patches/helper.py"})
    assert hand_diffs.hand_diffs(named) == ([], 1)  # a provenance row says where the module comes from
    named.verdicts.save()
    # The same bytes, but no provenance row any more: the module's note is due, not the remembered pass.
    found, verified = hand_diffs.hand_diffs(hand_state(tmp_path, text, files))
    assert ([f.code for f in found], verified) == (["module-maybe-upstream"], 1)


# --------------------------------------------------------------------------- the lines of the lockfile


def test_the_lines_of_the_same_bytes_are_not_scanned_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from patchkit.lockfile.tomlpos import LineIndex

    text, _ = overlay_repo()
    data = text.encode()
    first = lockfile_memo(tmp_path).line_index(data)
    assert first.lines == LineIndex(text).lines and first.line_of(("patches", 0, "sha256")) is not None
    with monkeypatch.context() as m:
        m.setattr(LineIndex, "_scan", lambda self, text: pytest.fail("scanned again"))
        assert lockfile_memo(tmp_path).line_index(data).lines == first.lines
    moved = ("# one more line\n" + text).encode()  # every key one line further down
    again = lockfile_memo(tmp_path).line_index(moved)
    line = first.line_of(("patches", 0, "sha256"))
    assert line is not None and again.line_of(("patches", 0, "sha256")) == line + 1
    assert verdicts.LockfileMemo().line_index(data).lines == first.lines  # no memo: scanned


def test_a_forged_index_of_lines_runs_nothing(tmp_path: Path) -> None:
    text, _ = overlay_repo()
    memo_ = lockfile_memo(tmp_path)
    memo_.line_index(text.encode())
    (kept,) = (tmp_path / "verdicts").glob("lines-*")
    marker = tmp_path / "ran"
    kept.write_bytes(kept.read_bytes()[:32] + pickle.dumps(_Runs(marker)))
    index = lockfile_memo(tmp_path).line_index(text.encode())
    assert not marker.exists() and index.line_of(("patches", 0, "sha256")) is not None


def test_findings_point_at_the_lines_of_the_lockfile_as_it_is_now(invoke: Invoke, deploy: Path) -> None:
    lockfile = deploy / "lockfile.toml"
    pinned = hashlib.sha256((deploy / "patches" / "fp8_fnuz.py").read_bytes()).hexdigest()
    lockfile.write_text(lockfile.read_text().replace(pinned, "0" * 64))

    def mismatch_line() -> int:
        found = json.loads(invoke("check", "--format", "json", repo=deploy).stdout)["findings"]
        (line,) = [f["line"] for f in found if f["code"] == "hash-mismatch"]
        return int(line)

    first = mismatch_line()
    assert mismatch_line() == first  # the remembered lines
    lockfile.write_text("# a comment above everything\n" + lockfile.read_text())
    assert mismatch_line() == first + 1
