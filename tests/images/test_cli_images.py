"""patchkit image resolve/pin/cat/files against the real local registry."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Invoke

from .conftest import TestImages


def test_resolve_multi_platform_records_both_digests(invoke: Invoke, oci_image: TestImages) -> None:
    r = invoke("image", "resolve", oci_image.multi, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["digest"] == oci_image.index_digest
    assert doc["platform_digest"] == oci_image.single_digest
    arm = json.loads(
        invoke("image", "resolve", oci_image.multi, "--platform", "linux/arm64", "--format", "json").stdout
    )
    assert (arm["digest"], arm["platform_digest"]) == (oci_image.index_digest, oci_image.arm64_digest)
    text = invoke("image", "resolve", oci_image.multi)
    assert text.stdout.splitlines()[0].endswith(f"@{oci_image.index_digest}")


def test_pin_writes_the_lockfile_and_check_passes(invoke: Invoke, oci_image: TestImages, tmp_path: Path) -> None:
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    r = invoke("image", "pin", "app", oci_image.multi, repo=root)
    assert r.exit_code == 0, r.stderr
    lock = (root / "lockfile.toml").read_text()
    assert f'digest = "{oci_image.index_digest}"' in lock
    assert f'platform_digest = "{oci_image.single_digest}"' in lock
    assert 'tag = "v1"' in lock and "resolved_at = " in lock
    assert invoke("check", repo=root).exit_code == 0
    again = invoke("image", "pin", "app", oci_image.multi, repo=root)
    assert again.exit_code == 0
    assert (root / "lockfile.toml").read_text() == lock  # same digest: the lockfile does not change


def test_cat_and_files(invoke: Invoke, oci_image: TestImages, tmp_path: Path) -> None:
    expected = TestImages.expected()
    r = invoke("image", "cat", oci_image.single, "/app/lib/a.py")
    assert r.exit_code == 0 and r.stdout.encode() == expected["/app/lib/a.py"]
    missing = invoke("image", "cat", oci_image.single, "/app/gone.txt")
    assert missing.exit_code == 2 and "no such file" in missing.stderr
    out = tmp_path / "out"
    paths = ["/app/lib/a.py", "/app/mid.txt", "/app/plugins/new.py", "/app/gone.txt"]
    r = invoke("image", "files", oci_image.single, *paths, "--out", str(out))
    assert r.exit_code == 1  # one path is whited out
    assert "missing /app/gone.txt" in r.stderr
    for p in paths[:3]:
        assert (out / p.lstrip("/")).read_bytes() == expected[p]
    relative = invoke("image", "cat", oci_image.single, "app/lib/a.py")
    assert relative.exit_code == 2 and "absolute" in relative.stderr


def test_a_pinned_name_stands_for_its_digest(invoke: Invoke, oci_image: TestImages, tmp_path: Path) -> None:
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    assert invoke("image", "pin", "app", oci_image.single, repo=root).exit_code == 0
    r = invoke("image", "cat", "app", "/app/top.txt", repo=root)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.encode() == TestImages.expected()["/app/top.txt"]


def test_unknown_tag_is_exit_3(invoke: Invoke, registry_server: object) -> None:
    host = registry_server.host  # type: ignore[attr-defined]
    r = invoke("image", "resolve", f"{host}/patchkit/layers:no-such-tag")
    assert r.exit_code == 3
    assert r.stderr.startswith("patchkit: error:") and "Traceback" not in r.stderr


def test_repin_keeps_the_version_and_the_guard_keeps_its_runtime_check(
    deploy: Path, invoke: Invoke, oci_image: TestImages
) -> None:
    from tests.guard.test_manifest import small

    root = small(deploy, invoke)
    lockfile = root / "lockfile.toml"
    version = 'version = "0.26.1rc1.dev229+g124154a88.rocm723"\n'
    lockfile.write_text(lockfile.read_text().replace('version = "0.26.0"\n', version))
    assert invoke("lock", repo=root).exit_code == 0
    r = invoke("image", "pin", "vllm", oci_image.multi, repo=root)
    assert r.exit_code == 0, r.stderr
    table = lockfile.read_text().split("[images.vllm]\n", 1)[1].split("\n\n", 1)[0] + "\n"
    assert f'digest = "{oci_image.index_digest}"\n' in table
    assert version in table  # byte for byte, though the registry knows nothing of it
    assert (
        "note: images.vllm.version 0.26.1rc1.dev229+g124154a88.rocm723 was kept from the previous pin; confirm it "
        "is the runtime version in the new image (patchkit image cat vllm …/vllm/_version.py) and correct it in "
        "lockfile.toml if not: the runtime guard's VERSION check compares it\n"
    ) in r.stderr
    r = invoke("emit", repo=root)
    assert r.exit_code == 0 and "note:" not in r.stderr, r.stderr
    runtime = json.loads((root / "guard.json").read_text())["runtime"]
    assert runtime == {
        "image": "vllm",
        "digest": oci_image.index_digest,
        "package": "vllm",
        "version": "0.26.1rc1.dev229+g124154a88.rocm723",
    }
    assert invoke("check", repo=root).exit_code == 0
    again = invoke("image", "pin", "vllm", oci_image.multi, repo=root)  # the same digest: nothing to confirm
    assert again.exit_code == 0 and "note:" not in again.stderr
    assert version in lockfile.read_text()
