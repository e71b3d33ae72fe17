"""patchkit check on real deployments: passes when exact, names file and fix when not."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import Invoke, snapshot


def repin(invoke: Invoke, root: Path, rel: str) -> None:
    """Pin a hand-edited file's new hash directly, as a careless hand edit of the lockfile would."""
    import hashlib
    import re

    lock = root / "lockfile.toml"
    text = lock.read_text()
    new = hashlib.sha256((root / rel).read_bytes()).hexdigest()
    text = re.sub(rf'(file = "{re.escape(rel)}"\nsha256 = ")[0-9a-f]{{64}}', rf"\g<1>{new}", text)
    lock.write_text(text)
    assert invoke("sums", repo=root).exit_code == 0


def findings(invoke: Invoke, root: Path) -> list[dict[str, object]]:
    r = invoke("check", "--format", "json", repo=root)
    doc = json.loads(r.stdout)
    assert r.exit_code == (0 if doc["ok"] else 1)
    return [f for f in doc["findings"] if f["severity"] == "error"]


def test_clean_deployment_passes(invoke: Invoke, deploy: Path) -> None:
    r = invoke("check", repo=deploy)
    assert r.exit_code == 0, r.stdout
    assert "check: ok: 5 files hashed, 1 diffs verified, 0 errors" in r.stdout
    sums = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=deploy, capture_output=True, check=False)
    assert sums.returncode == 0, sums.stdout


@pytest.mark.parametrize(
    "rel",
    [
        "patches/gpu_worker.py",
        "patches/fp8_fnuz.py",
        "tuning/moe.csv",
        "entrypoint.sh",
        "upstream/kv-restore-fence.diff",
    ],
)
def test_any_changed_byte_fails_naming_file_and_fix(invoke: Invoke, deploy: Path, rel: str) -> None:
    path = deploy / rel
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    errors = findings(invoke, deploy)
    mismatch = [f for f in errors if f["code"] == "hash-mismatch"]
    assert len(mismatch) == 1
    assert rel in str(mismatch[0]["message"])
    assert mismatch[0]["file"] == "lockfile.toml" and isinstance(mismatch[0]["line"], int)
    assert "patchkit lock" in str(mismatch[0]["fix"])
    text = invoke("check", repo=deploy)
    assert text.exit_code == 1
    assert rel in text.stdout and "fix:" in text.stdout


def test_file_listed_but_missing(invoke: Invoke, deploy: Path) -> None:
    (deploy / "tuning" / "moe.csv").unlink()
    errors = findings(invoke, deploy)
    assert [f["code"] for f in errors] == ["missing"]
    assert "tuning/moe.csv" in str(errors[0]["message"])
    assert errors[0]["field"] == "tuning[moe].file"


def test_file_present_but_unlisted(invoke: Invoke, deploy: Path) -> None:
    (deploy / "patches" / "stray.py").write_text("x = 1\n")
    (deploy / "upstream" / "old.diff").write_text("")
    errors = findings(invoke, deploy)
    assert sorted((f["code"], f["file"]) for f in errors) == [
        ("orphan", "patches/stray.py"),
        ("orphan", "upstream/old.diff"),
    ]
    assert "patchkit add patches/stray.py" in str(errors[0]["fix"])


def test_symlink_in_patches_pointing_outside(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.py"
    outside.write_text("token = 1\n")
    (deploy / "patches" / "link.py").symlink_to(outside)
    errors = findings(invoke, deploy)
    assert [f["code"] for f in errors] == ["unsafe-path"]
    assert "outside the repository" in str(errors[0]["message"])


def test_pinned_file_replaced_by_symlink(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    target = deploy / "patches" / "fp8_fnuz.py"
    copy = tmp_path / "fp8_fnuz.py"
    copy.write_bytes(target.read_bytes())  # same bytes: only the link is wrong
    target.unlink()
    target.symlink_to(copy)
    errors = findings(invoke, deploy)
    assert [f["code"] for f in errors] == ["unsafe-path"]
    assert "outside the repository" in str(errors[0]["message"])


def test_two_patches_with_one_target(invoke: Invoke, deploy: Path) -> None:
    lock = deploy / "lockfile.toml"
    text = lock.read_text()
    lock.write_text(
        text.replace(
            '"/usr/local/lib/python3.12/dist-packages/vllm/fp8_fnuz.py"',
            '"/usr/local/lib/python3.12/dist-packages/vllm/v1/kv_offload/cpu/gpu_worker.py"',
        )
    )
    invoke("sums", repo=deploy)
    errors = findings(invoke, deploy)
    assert [f["code"] for f in errors] == ["duplicate-target"]
    assert "already claimed by patches[kv-restore-fence].target" in str(errors[0]["message"])
    assert errors[0]["field"] == "patches[fp8_fnuz].target"
    line = text.splitlines().index('target = "/usr/local/lib/python3.12/dist-packages/vllm/fp8_fnuz.py"') + 1
    assert errors[0]["line"] == line


def test_diff_with_wrong_hunk_counts(invoke: Invoke, deploy: Path) -> None:
    diff = deploy / "upstream" / "kv-restore-fence.diff"
    text = diff.read_text()
    header = next(line for line in text.splitlines() if line.startswith("@@"))
    diff.write_text(text.replace(header, "@@ -1,9 +1,10 @@"))
    repin(invoke, deploy, "upstream/kv-restore-fence.diff")  # pinned; check must still catch it
    errors = findings(invoke, deploy)
    assert [f["code"] for f in errors] == ["diff-invalid"]
    assert errors[0]["file"] == "upstream/kv-restore-fence.diff"
    assert errors[0]["line"] == 3
    assert "hunk header says -9 +10 lines, its body has -6 +7" in str(errors[0]["message"])


def test_diff_that_no_longer_matches_its_overlay(invoke: Invoke, deploy: Path) -> None:
    overlay = deploy / "patches" / "gpu_worker.py"
    overlay.write_bytes(overlay.read_bytes().replace(b"wait_for_compute()", b"wait_for_compute(stream)"))
    errors = findings(invoke, deploy)
    codes = sorted(f["code"] for f in errors)
    assert codes == ["diff-stale", "hash-mismatch"]
    stale = next(f for f in errors if f["code"] == "diff-stale")
    assert stale["file"] == "upstream/kv-restore-fence.diff"
    assert "no longer matches the overlay patches/gpu_worker.py" in str(stale["message"])


def test_diff_reverse_applies_but_to_another_base(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    # An "incremental" diff: against an earlier overlay, not against upstream.
    from patchkit.core import diffs

    overlay = (deploy / "patches" / "gpu_worker.py").read_bytes()
    earlier = overlay.replace(b"    return len(blocks)\n", b"    return len(blocks)  # v1\n")
    (deploy / "upstream" / "kv-restore-fence.diff").write_bytes(
        diffs.make(earlier, overlay, "a/vllm/v1/kv_offload/cpu/gpu_worker.py", "b/vllm/v1/kv_offload/cpu/gpu_worker.py")
    )
    repin(invoke, deploy, "upstream/kv-restore-fence.diff")
    errors = findings(invoke, deploy)
    assert [f["code"] for f in errors] == ["base-mismatch"]
    assert errors[0]["field"] == "patches[kv-restore-fence].base.sha256"


def test_diff_headers_must_name_the_base(invoke: Invoke, deploy: Path) -> None:
    diff = deploy / "upstream" / "kv-restore-fence.diff"
    diff.write_bytes(
        diff.read_bytes().replace(b"+++ b/vllm/v1/kv_offload/cpu/gpu_worker.py", b"+++ b/patches/gpu_worker.py")
    )
    repin(invoke, deploy, "upstream/kv-restore-fence.diff")
    errors = findings(invoke, deploy)
    assert [f["code"] for f in errors] == ["diff-header"]
    assert errors[0]["line"] == 1


def test_crlf_and_non_utf8_patch_hashed_as_bytes_never_rewritten(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    data = b"# -*- coding: latin-1 -*-\r\nname = '\xe9t\xe9'\r\n\x00\xff\r\n"
    (deploy / "patches" / "latin.py").write_bytes(data)
    r = invoke("add", str(deploy / "patches" / "latin.py"), "--target", "/opt/latin.py", repo=deploy)
    assert r.exit_code == 0, r.stderr
    assert invoke("check", repo=deploy).exit_code == 0
    assert invoke("lock", repo=deploy).stdout == "nothing changed\n"
    assert (deploy / "patches" / "latin.py").read_bytes() == data
    import hashlib

    assert hashlib.sha256(data).hexdigest() in (deploy / "lockfile.toml").read_text()


def test_crlf_overlay_diff_verifies(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    base = b"a = 1\r\nb = 2\r\nc = 3\r\n"
    (tmp_path / "crlf_base.py").write_bytes(base)
    (deploy / "patches" / "crlf.py").write_bytes(base.replace(b"b = 2", b"b = 22"))
    r = invoke(
        "add", str(deploy / "patches" / "crlf.py"), "--target", "/opt/crlf.py", "--upstream", "vllm",
        "--upstream-path", "vllm/crlf.py", "--base", str(tmp_path / "crlf_base.py"), repo=deploy,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert b"\r\n" in (deploy / "upstream" / "crlf.diff").read_bytes()
    r = invoke("check", repo=deploy)
    assert r.exit_code == 0, r.stdout
    assert "2 diffs verified" in r.stdout


def test_sha256sums_edited_by_hand(invoke: Invoke, deploy: Path) -> None:
    sums = deploy / "SHA256SUMS"
    lines = sums.read_text().splitlines(keepends=True)
    lines[1] = " " + lines[1]  # a leading space, as hand edits leave
    lines.append("0" * 64 + "  patches/gone.py\n")
    sums.write_text("".join(lines))
    errors = findings(invoke, deploy)
    # The indented line still lists its file (sha256sum -c --strict reads it): one note, no error for it.
    assert [(f["code"], f["line"]) for f in errors] == [("sums-drift", len(lines))]
    assert "patches/gone.py, which the lockfile does not pin" in errors[0]["message"]
    notes = [f for f in json.loads(invoke("check", "--format", "json", repo=deploy).stdout)["findings"]
             if f["severity"] == "note" and f["file"] == "SHA256SUMS"]  # fmt: skip
    assert [(f["code"], f["line"], f["message"]) for f in notes] == [
        ("sums-format", 2, f"lists {lines[1].split()[1]} in a form patchkit does not write (leading whitespace)")
    ]
    assert all(f["fix"] == "regenerate it: patchkit sums" for f in errors + notes)
    assert invoke("sums", repo=deploy).exit_code == 0
    assert invoke("check", repo=deploy).exit_code == 0


def test_sums_missing(invoke: Invoke, deploy: Path) -> None:
    (deploy / "SHA256SUMS").unlink()
    errors = findings(invoke, deploy)
    assert [f["code"] for f in errors] == ["sums-missing"]


def test_check_never_writes(invoke: Invoke, deploy: Path) -> None:
    (deploy / "patches" / "gpu_worker.py").write_bytes(b"changed\n")
    before = snapshot(deploy)
    invoke("check", repo=deploy)
    assert snapshot(deploy) == before


def test_github_format_annotations(invoke: Invoke, deploy: Path) -> None:
    (deploy / "tuning" / "moe.csv").write_bytes(b"m,n\n")
    r = invoke("check", "--format", "github", repo=deploy)
    assert r.exit_code == 1
    first = r.stdout.splitlines()[0]
    assert first.startswith("::error file=lockfile.toml,line=")
    assert ",title=patchkit hash-mismatch::" in first
    assert "tuning/moe.csv" in first


def test_diff_only_patch_note_and_verification(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    base = b"X = 1\nY = 2\n"
    (tmp_path / "base.py").write_bytes(base)
    (tmp_path / "edited.py").write_bytes(b"X = 1\nY = 3\n")
    r = invoke(
        "add", str(tmp_path / "edited.py"), "--diff-only", "--name", "only-diff", "--target", "/opt/only.py",
        "--upstream", "vllm", "--upstream-path", "vllm/only.py", "--base", str(tmp_path / "base.py"), repo=deploy,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert not (deploy / "patches" / "edited.py").exists()
    r = invoke("check", repo=deploy)
    assert r.exit_code == 0
    assert "2 diffs verified" in r.stdout  # the base is in the cache: materialized and re-hashed
    # Without the cache the file that runs cannot be rebuilt offline: a note, not a failure.
    os.environ["PATCHKIT_CACHE"] = str(tmp_path / "empty-cache")
    r = invoke("check", repo=deploy)
    assert r.exit_code == 0
    assert "note: patches[only-diff].base" in r.stdout


def test_base_older_than_the_pinned_upstream(invoke: Invoke, deploy: Path) -> None:
    lock = deploy / "lockfile.toml"
    old = 'commit = "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"\n'
    text = lock.read_text()
    assert text.count(old) == 2  # the upstream's pin, then the patch base's
    lock.write_text(text.replace(old, f'commit = "{"f" * 40}"\n', 1))
    assert invoke("sums", repo=deploy).exit_code == 0
    errors = findings(invoke, deploy)
    assert [f["code"] for f in errors] == ["base-outdated"]
    assert errors[0]["field"] == "patches[kv-restore-fence].base.commit"
    assert "may revert upstream changes" in str(errors[0]["message"])


def test_hand_edited_lockfile_layout(invoke: Invoke, deploy: Path) -> None:
    lock = deploy / "lockfile.toml"
    lines = lock.read_text().splitlines(keepends=True)
    lines.insert(6, "# a reviewer's comment\n")
    lock.write_text("".join(lines))
    assert invoke("sums", repo=deploy).exit_code == 0
    errors = findings(invoke, deploy)
    assert [(f["code"], f["line"]) for f in errors] == [("lockfile-format", 7)]
    assert invoke("lock", repo=deploy).exit_code == 0
    assert invoke("check", repo=deploy).exit_code == 0


def test_a_layout_edit_is_reported_at_its_line(invoke: Invoke, deploy: Path) -> None:
    """A blank added after a header is still valid TOML: the content is valid, the form is not."""
    lock = deploy / "lockfile.toml"
    lock.write_text(lock.read_text().replace("\n[deployment]\n", "\n[deployment]  \n", 1))
    assert invoke("sums", repo=deploy).exit_code == 0
    errors = findings(invoke, deploy)
    line = lock.read_text().split("\n").index("[deployment]  ") + 1
    assert [(f["code"], f["line"]) for f in errors] == [("lockfile-format", line)]
