"""Symlinks and traversal: no write, unlink or pin ever reaches outside the repository."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.adversarial.conftest import patchkit
from tests.conftest import BASE, Invoke, snapshot


def test_remove_through_a_symlinked_directory_deletes_nothing_outside(deploy: Path, outside: Path) -> None:
    os.symlink(outside, deploy / "tuning" / "ext")
    lock = deploy / "lockfile.toml"
    lock.write_text(lock.read_text().replace('file = "tuning/moe.csv"', 'file = "tuning/ext/precious.csv"'))
    before = snapshot(deploy)
    done = patchkit("remove", "moe", cwd=deploy)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[0] == (
        f"patchkit: error: tuning/ext is a symlink (to {outside}); refusing to write or delete "
        "tuning/ext/precious.csv through it"
    )
    assert (outside / "precious.csv").read_bytes() == b"do not touch\n"
    assert snapshot(deploy) == before


def test_add_with_upstream_symlinked_out_writes_nothing_there(deploy: Path, tmp_path: Path, invoke: Invoke) -> None:
    elsewhere = tmp_path / "elsewhere"
    (deploy / "upstream").rename(elsewhere)
    os.symlink(elsewhere, deploy / "upstream")
    listed = sorted(p.name for p in elsewhere.iterdir())
    base = tmp_path / "base.py"
    base.write_bytes(BASE)
    (deploy / "patches" / "other.py").write_bytes(BASE + b"# changed\n")
    before = snapshot(deploy)
    r = invoke(
        "add", str(deploy / "patches" / "other.py"), "--target", "/opt/other.py", "--upstream", "vllm",
        "--upstream-path", "vllm/other.py", "--base", str(base), "--name", "other", repo=deploy,
    )  # fmt: skip
    assert r.exit_code == 2, r.stderr
    assert "patchkit: error: upstream is a symlink (to " in r.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == listed
    assert snapshot(deploy) == before


def test_lockfile_symlinked_out_is_flagged_and_never_replaced(deploy: Path, tmp_path: Path, invoke: Invoke) -> None:
    real = tmp_path / "kept-elsewhere.toml"
    (deploy / "lockfile.toml").rename(real)
    os.symlink(real, deploy / "lockfile.toml")
    before = real.read_bytes()
    r = invoke("check", "--format", "json", repo=deploy)
    assert r.exit_code == 1
    found = [f for f in json.loads(r.stdout)["findings"] if f["file"] == "lockfile.toml" and f["code"] == "unsafe-path"]
    assert [f["message"] for f in found] == [f"lockfile.toml is a symlink to {real}, outside the repository"]
    r = invoke("lock", repo=deploy)
    assert r.exit_code == 2
    assert "lockfile.toml is a symlink" in r.stderr
    assert (deploy / "lockfile.toml").is_symlink()
    assert real.read_bytes() == before


def test_sums_and_emit_refuse_a_symlinked_sha256sums(deploy: Path, outside: Path, invoke: Invoke) -> None:
    (deploy / "SHA256SUMS").unlink()
    os.symlink(outside / "precious.csv", deploy / "SHA256SUMS")
    r = invoke("sums", repo=deploy)
    assert r.exit_code == 2
    assert "SHA256SUMS is a symlink" in r.stderr
    assert (outside / "precious.csv").read_bytes() == b"do not touch\n"


def test_import_reports_a_mount_through_a_symlinked_directory_and_pins_nothing_behind_it(tmp_path: Path) -> None:
    repo = tmp_path / "hand"
    (repo / "patches").mkdir(parents=True)
    (repo / "patches" / "fix.py").write_bytes(b"x = 1\n")
    os.symlink("/etc", repo / "patches" / "etc")
    (repo / "compose.yaml").write_text(
        "services:\n  vllm:\n    image: vllm/vllm-openai-rocm@sha256:" + "e6" * 32 + "\n    volumes:\n"
        "      - ./patches/fix.py:/opt/fix.py:ro\n"
        "      - ./patches/etc/passwd:/etc/passwd:ro\n"
        "      - ./patches:/opt/patches:ro\n"
    )
    done = patchkit("import", "--format", "json", str(repo), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    issues = json.loads(done.stdout)["import"]["issues"]
    linked = [(i["kind"], i["line"], i["message"]) for i in issues if i["kind"] == "mount-symlink"]
    assert linked == [
        (
            "mount-symlink",
            6,
            "mount source ./patches/etc/passwd goes through the symlink patches/etc (to /etc, outside the "
            "repository); nothing is pinned through a link",
        ),
        (
            "mount-symlink",
            7,
            "mount source ./patches goes through the symlink patches/etc (to /etc, outside the repository); "
            "nothing is pinned through a link",
        ),
    ]
    text = (repo / "lockfile.toml").read_text()
    assert "passwd" not in text and "patches/etc" not in text
