"""init, add, remove, lock, sums and diff: what they write, and that failures write nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import BASE, Invoke, snapshot


def test_init_gives_a_passing_deployment(invoke: Invoke, tmp_path: Path) -> None:
    r = invoke("init", str(tmp_path / "new"))
    assert r.exit_code == 0
    for d in ("patches", "upstream", "tuning"):
        assert (tmp_path / "new" / d).is_dir()
    assert invoke("check", repo=tmp_path / "new").exit_code == 0
    again = invoke("init", str(tmp_path / "new"))
    assert again.exit_code == 2
    assert "already exists" in again.stderr


def test_init_writes_a_starter_deploy_toml_in_the_same_write_and_keeps_an_existing_one(
    invoke: Invoke, tmp_path: Path
) -> None:
    from patchkit.emit.config import loads_build_config, loads_config

    r = invoke("init", str(tmp_path / "new"), "--name", "demo")
    assert r.exit_code == 0
    assert f"created {tmp_path / 'new' / 'deploy.toml'}" in r.stdout.splitlines()
    text = (tmp_path / "new" / "deploy.toml").read_text()
    assert "docs/deploy.md" in text and 'name = "demo"' in text
    starter = loads_build_config(text)
    assert (starter.image, starter.entrypoint, starter.deploy) == ("vllm", None, None)
    # Uncommented, the starter is a whole configuration for emit.
    whole = loads_config("\n".join(line.removeprefix("# ") if " = " in line or line.startswith("# [") else line
                                   for line in text.splitlines()))  # fmt: skip
    assert whole.inference.port == 8000 and [p.name for p in whole.profiles] == ["single"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "deploy.toml").write_text("# mine\n")
    assert invoke("init", str(mine)).exit_code == 0
    assert (mine / "deploy.toml").read_text() == "# mine\n"


def test_lock_without_change_is_a_no_op(invoke: Invoke, deploy: Path) -> None:
    before = snapshot(deploy)
    mtime = (deploy / "lockfile.toml").stat().st_mtime_ns
    r = invoke("lock", repo=deploy)
    assert r.exit_code == 0
    assert r.stdout == "nothing changed\n"
    assert snapshot(deploy) == before
    assert (deploy / "lockfile.toml").stat().st_mtime_ns == mtime


def test_lock_after_edit_prints_old_and_new(invoke: Invoke, deploy: Path) -> None:
    import hashlib

    old = hashlib.sha256((deploy / "tuning" / "moe.csv").read_bytes()).hexdigest()
    (deploy / "tuning" / "moe.csv").write_bytes(b"m,n,k,block\n1,7168,2048,128\n")
    new = hashlib.sha256((deploy / "tuning" / "moe.csv").read_bytes()).hexdigest()
    r = invoke("lock", repo=deploy)
    assert r.exit_code == 0
    assert f"tuning[moe].sha256 (tuning/moe.csv): {old} -> {new}" in r.stdout
    assert invoke("check", repo=deploy).exit_code == 0


def test_lock_regenerates_an_edited_overlays_diff_from_git_history(
    invoke: Invoke, deploy: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A fresh clone has an empty cache: the base is rebuilt from the committed overlay and diff.
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "fresh-cache"))
    overlay = deploy / "patches" / "gpu_worker.py"
    overlay.write_bytes(overlay.read_bytes().replace(b"wait_for_compute()", b"wait_for_compute(timeout=30)"))
    assert invoke("check", repo=deploy).exit_code == 1
    r = invoke("lock", repo=deploy)
    assert r.exit_code == 0, r.stderr
    assert "upstream/kv-restore-fence.diff: stale diff -> regenerated from the base" in r.stdout
    diff = (deploy / "upstream" / "kv-restore-fence.diff").read_bytes()
    assert b"+    wait_for_compute(timeout=30)\n" in diff
    assert invoke("check", repo=deploy).exit_code == 0


def test_lock_refuses_when_the_base_is_lost_and_writes_nothing(
    invoke: Invoke, deploy: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "fresh-cache"))
    overlay = deploy / "patches" / "gpu_worker.py"
    overlay.write_bytes(overlay.read_bytes().replace(b"wait_for_compute()", b"wait()"))
    # The edit is committed, so git history no longer holds the pinned overlay either.
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qam", "edit"], cwd=deploy, check=True
    )
    before = snapshot(deploy)
    r = invoke("lock", repo=deploy)
    assert r.exit_code == 1
    assert "cannot refresh the diff of 'kv-restore-fence'" in r.stderr
    assert "Traceback" not in r.stderr
    assert snapshot(deploy) == before


def test_add_refuses_a_taken_target(invoke: Invoke, deploy: Path) -> None:
    (deploy / "patches" / "other.py").write_text("x = 1\n")
    r = invoke(
        "add",
        str(deploy / "patches/other.py"),
        "--target",
        "/usr/local/lib/python3.12/dist-packages/vllm/fp8_fnuz.py",
        repo=deploy,
    )
    assert r.exit_code == 2
    assert "already claimed by 'fp8_fnuz'" in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "relative/path.py"], "--target: 'relative/path.py' is not an absolute container path"),
        (["--target", "/opt/x.py", "--ref", "vllm#1"], "--ref: 'vllm#1' is not a reference"),
        (["--target", "/opt/x.py", "--name", "Bad Name"], "--name: 'Bad Name' is not a valid name"),
        (["--target", "/opt/x.py", "--upstream", "vllm"], "an overlay needs --upstream NAME and --upstream-path P"),
    ],
)
def test_add_bad_arguments(invoke: Invoke, deploy: Path, args: list[str], message: str) -> None:
    (deploy / "patches" / "other.py").write_text("x = 1\n")
    before = snapshot(deploy)
    r = invoke("add", str(deploy / "patches" / "other.py"), *args, repo=deploy)
    assert r.exit_code == 2
    assert message in r.stderr
    assert snapshot(deploy) == before


def test_add_copies_outside_files_into_patches(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    src = tmp_path / "hook.py"
    src.write_text("def hook():\n    pass\n")
    r = invoke(
        "add", str(src), "--kind", "transformer", "--target", "/opt/patchkit/transformers/10-hook.py", repo=deploy
    )
    assert r.exit_code == 0, r.stderr
    assert (deploy / "patches" / "hook.py").read_bytes() == src.read_bytes()
    assert 'kind = "transformer"' in (deploy / "lockfile.toml").read_text()
    assert invoke("check", repo=deploy).exit_code == 0


def test_add_refuses_binary_overlays(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    (tmp_path / "lib.so").write_bytes(b"\x7fELF\x00\x00\x01")
    (tmp_path / "lib-new.so").write_bytes(b"\x7fELF\x00\x00\x02")
    r = invoke(
        "add", str(tmp_path / "lib-new.so"), "--target", "/opt/lib.so", "--upstream", "vllm",
        "--upstream-path", "vllm/lib.so", "--base", str(tmp_path / "lib.so"), repo=deploy,
    )  # fmt: skip
    assert r.exit_code == 2
    assert "binary file" in r.stderr


@pytest.mark.parametrize(("at", "code"), [(7999, 2), (8000, 0), (8191, 0)])
def test_add_decides_binary_where_git_does(invoke: Invoke, deploy: Path, tmp_path: Path, at: int, code: int) -> None:
    """A NUL byte in the first 8,000 bytes makes a file binary, as git's diff and merge decide; after them, text."""
    text = b"#" * (at - 1) + b"\n" + b"\0\nx = 1\n"  # the NUL is byte ``at``
    (tmp_path / "base.py").write_bytes(text)
    (tmp_path / "new.py").write_bytes(text.replace(b"x = 1", b"x = 2"))
    r = invoke(
        "add", str(tmp_path / "new.py"), "--target", "/opt/nul.py", "--upstream", "vllm",
        "--upstream-path", "vllm/nul.py", "--base", str(tmp_path / "base.py"), repo=deploy,
    )  # fmt: skip
    assert r.exit_code == code, r.stderr
    assert ("binary file" in r.stderr) == (code == 2)


def test_remove_unpins_and_deletes_its_files(invoke: Invoke, deploy: Path) -> None:
    r = invoke("remove", "kv-restore-fence", repo=deploy)
    assert r.exit_code == 0
    assert not (deploy / "patches" / "gpu_worker.py").exists()
    assert not (deploy / "upstream" / "kv-restore-fence.diff").exists()
    assert "kv-restore-fence" not in (deploy / "lockfile.toml").read_text()
    assert invoke("check", repo=deploy).exit_code == 0
    r = invoke("remove", "nope", repo=deploy)
    assert r.exit_code == 2
    assert "'nope' is not pinned" in r.stderr


def test_sums_in_a_read_only_repository(invoke: Invoke, deploy: Path) -> None:
    if os.geteuid() == 0:
        # root ignores directory permissions; a read-only bind mount is what root cannot write.
        pytest.skip("needs a non-root user or a read-only mount; covered by test_sums_read_only_mount")
    (deploy / "SHA256SUMS").write_text("stale\n")
    before = snapshot(deploy)
    deploy.chmod(0o555)
    try:
        r = invoke("sums", repo=deploy)
    finally:
        deploy.chmod(0o755)
    assert r.exit_code == 2
    assert "cannot write" in r.stderr and "nothing was changed" in r.stderr
    assert snapshot(deploy) == before


def test_sums_read_only_mount(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    """Root cannot write a read-only bind mount: the real case of a read-only checkout."""
    if os.geteuid() != 0:
        pytest.skip("bind mounts need root")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    (deploy / "SHA256SUMS").write_text("stale\n")
    ok = subprocess.run(["mount", "--bind", "-o", "ro", str(deploy), str(mnt)], capture_output=True, check=False)
    if ok.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {ok.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mnt)], check=False, capture_output=True)
        before = snapshot(mnt)
        r = invoke("sums", repo=mnt)
        assert r.exit_code == 2
        assert "cannot write" in r.stderr and "nothing was changed" in r.stderr
        assert snapshot(mnt) == before
        assert not list(mnt.glob(".SHA256SUMS.*"))
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_sums_refuses_while_a_file_does_not_match(invoke: Invoke, deploy: Path) -> None:
    (deploy / "patches" / "fp8_fnuz.py").write_text("FP8_MAX = 448.0\n")
    before = snapshot(deploy)
    r = invoke("sums", repo=deploy)
    assert r.exit_code == 1
    assert "patches/fp8_fnuz.py" in r.stderr and "patchkit lock" in r.stderr
    assert snapshot(deploy) == before


def test_sums_check_like_sha256sum(invoke: Invoke, deploy: Path) -> None:
    assert invoke("sums", "--check", repo=deploy).exit_code == 0
    (deploy / "entrypoint.sh").write_text("#!/bin/sh\nexit 1\n")
    r = invoke("sums", "--check", repo=deploy)
    assert r.exit_code == 1
    assert "entrypoint.sh: FAILED" in r.stdout


def test_diff_is_stable_and_write_is_idempotent(invoke: Invoke, deploy: Path) -> None:
    one = invoke("diff", repo=deploy)
    two = invoke("diff", repo=deploy)
    assert one.exit_code == 0
    assert one.stdout == two.stdout
    assert one.stdout.startswith(
        "--- a/vllm/v1/kv_offload/cpu/gpu_worker.py\n+++ b/vllm/v1/kv_offload/cpu/gpu_worker.py\n@@"
    )
    assert one.stdout.encode() == (deploy / "upstream" / "kv-restore-fence.diff").read_bytes()
    r = invoke("diff", "--write", repo=deploy)
    assert r.stdout == "diffs are up to date\n"
    stat = invoke("diff", "--stat", repo=deploy)
    assert "kv-restore-fence | +1 -0  vllm/v1/kv_offload/cpu/gpu_worker.py" in stat.stdout


def test_diff_recovers_the_base_from_the_cache(invoke: Invoke, deploy: Path) -> None:
    from patchkit.core.hashing import sha256_bytes
    from patchkit.store.cache import BlobStore, cache_dir

    assert BlobStore(cache_dir(os.environ)).get(sha256_bytes(BASE)) == BASE  # stored by add --base
    diff = deploy / "upstream" / "kv-restore-fence.diff"
    diff.write_text("garbage\n")
    r = invoke("diff", "--write", repo=deploy)
    assert r.exit_code == 0, r.stderr
    assert invoke("check", repo=deploy).exit_code == 0


def test_sums_check_refuses_names_leaving_the_repository(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("secret\n")
    import hashlib

    digest = hashlib.sha256(b"secret\n").hexdigest()
    with (deploy / "SHA256SUMS").open("a") as f:
        f.write(f"{digest}  ../outside.txt\n")
    r = invoke("sums", "--check", repo=deploy)
    assert r.exit_code == 1
    assert "../outside.txt: '../outside.txt' leaves the repository" in r.stdout
    assert "1 errors" not in r.stdout
