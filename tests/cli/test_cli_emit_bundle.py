"""emit, bundle and verify-bundle as a user runs them, on the shipped deployment."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import Invoke, copy_shipped

from patchkit.bundle.tar import Writer, compress, entry_order


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "shipped")


def test_emit_is_a_no_op_on_the_shipped_deployment_and_catches_drift(invoke: Invoke, shipped: Path) -> None:
    r = invoke("emit", "--check", repo=shipped)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert invoke("emit", repo=shipped).stdout == "compose files are up to date\n"
    compose = shipped / "compose.yaml"
    compose.write_text(compose.read_text().replace("127.0.0.1:8000:8000", "0.0.0.0:8000:8000"))
    r = invoke("emit", "--check", repo=shipped)
    assert r.exit_code == 1 and "compose.yaml: differs" in r.stdout
    check = invoke("check", repo=shipped)
    assert check.exit_code == 1 and "compose.yaml: error: differs" in check.stdout
    assert invoke("emit", repo=shipped).exit_code == 0
    assert invoke("check", repo=shipped).exit_code == 0


def test_emit_refuses_publishing_the_inference_service(invoke: Invoke, shipped: Path) -> None:
    deploy = shipped / "deploy.toml"
    deploy.write_text(deploy.read_text().replace('publish = "127.0.0.1:8000"', 'publish = "0.0.0.0:8000"', 1))
    before = (shipped / "compose.yaml").read_bytes()
    r = invoke("emit", repo=shipped)
    assert r.exit_code == 2
    assert (
        "deploy.toml:59: profiles.single.replicas[0].publish:" in r.stderr
        and "only the proxy may be public" in r.stderr
    )
    assert (shipped / "compose.yaml").read_bytes() == before


def test_bundle_is_reproducible_and_verifies(
    invoke: Invoke, deploy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (deploy / "compose.yaml").write_text("services: {}\n")
    one, two = tmp_path / "one.tar.gz", tmp_path / "two.tar.gz"
    r = invoke("bundle", "-o", str(one), repo=deploy)
    assert r.exit_code == 0, r.stderr
    for p in deploy.rglob("*"):
        if ".git" not in p.parts:
            p.touch()
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert invoke("bundle", "-o", str(two), repo=deploy).exit_code == 0
    assert one.read_bytes() == two.read_bytes()
    r = invoke("verify-bundle", str(one))
    assert r.exit_code == 0, r.stdout
    out = tmp_path / "unpacked"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(one), "-C", str(out)], check=True)
    sums = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS"], cwd=out, capture_output=True, check=False)
    assert sums.returncode == 0, sums.stdout
    # A bundle whose file was changed after packing is refused, naming the member.
    (out / "tuning" / "moe.csv").write_text("tampered\n")
    bad = tmp_path / "bad.tar.gz"
    writer = Writer(0)  # packed again exactly as patchkit bundle packs, only the content changed
    for p in sorted(out.rglob("*"), key=lambda p: entry_order(p.relative_to(out).as_posix())):
        name = p.relative_to(out).as_posix()
        if p.is_dir():
            writer.directory(name)
        else:
            writer.file(name, p.read_bytes(), bool(p.stat().st_mode & 0o100))
    bad.write_bytes(compress(writer.close()))
    r = invoke("verify-bundle", str(bad))
    assert r.exit_code == 1 and "tuning/moe.csv" in r.stdout
    # Packed by another tar writer, it is refused before its contents: only patchkit's bytes are read.
    with tarfile.open(bad, "w:gz") as tar:
        for p in sorted(out.rglob("*")):
            tar.add(p, arcname=p.relative_to(out).as_posix(), recursive=False)
    r = invoke("verify-bundle", str(bad))
    assert r.exit_code == 1 and "is not the one patchkit bundle writes" in r.stdout
