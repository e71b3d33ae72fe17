"""``patchkit image build --push``: the derived image, built without a daemon, against the real registry.

The deployment is the ``deploy`` fixture's (an overlay, a module, a tuning
table, the entrypoint) over the standard test images in Debian's
docker-registry; what the registry holds is read back with skopeo and with
the test Docker engine, never only through patchkit.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from patchkit.lockfile.reader import loads as load_lock
from patchkit.ship.build import LayerFile, layer_tar, make_layer
from tests.conftest import Invoke, git, snapshot
from tests.dockerd import Dockerd
from tests.images.conftest import RegistryServer, TestImages

DEPLOY_TOML = """\
schema = 1
name = "demo"

[inference]
image = "vllm"
entrypoint = "entrypoint"
port = 8000

[profiles.single]
file = "compose.yaml"

[[profiles.single.replicas]]
service = "vllm"
publish = "127.0.0.1:8000"
"""

MODEL_REVISION = "7872f01b1d1fe23eabc4c98b48bffcef5a386062"

# What the deploy fixture pins, by container target (and whether the container executes it).
TARGETS = {
    "/usr/local/lib/python3.12/dist-packages/vllm/v1/kv_offload/cpu/gpu_worker.py": False,
    "/usr/local/lib/python3.12/dist-packages/vllm/fp8_fnuz.py": False,
    "/opt/tuning/moe.csv": False,
    "/opt/patchkit/entrypoint.sh": True,
}


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_derivable(root: Path, base: str, invoke: Invoke) -> Path:
    """``root`` (the deploy fixture) with images.vllm pinned to ``base`` and a deploy.toml, committed."""
    r = invoke("image", "pin", "vllm", base, repo=root)
    assert r.exit_code == 0, r.stderr
    with (root / "lockfile.toml").open("a") as f:
        f.write(f'\n[model]\nrepo = "deepseek-ai/DeepSeek-V4-Flash-0731"\nrevision = "{MODEL_REVISION}"\n')
    (root / "deploy.toml").write_text(DEPLOY_TOML)
    for command in (("lock",), ("emit",)):
        r = invoke(*command, repo=root)
        assert r.exit_code == 0, r.stderr
    git(root, "add", "-A")
    git(root, "commit", "-qm", "pin the base image")
    return root


def clone(origin: Path, dest: Path, *, umask: int, mtime: int | None = None) -> Path:
    """A git clone of ``origin`` made under ``umask``; every file's mtime set to ``mtime`` when given."""
    subprocess.run(["sh", "-c", f"umask {umask:03o} && git clone -q {origin} {dest}"], check=True, capture_output=True)
    if mtime is not None:
        for p in dest.rglob("*"):
            if ".git" not in p.parts and p.is_file():
                os.utime(p, (mtime, mtime))
    return dest


def build(invoke: Invoke, root: Path, push: str, *extra: str) -> dict[str, Any]:
    r = invoke("image", "build", "--push", push, "--format", "json", *extra, repo=root)
    assert r.exit_code == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def pinned_files(root: Path) -> dict[str, bytes]:
    """The bytes of every file the deployment pins, by container target."""
    lock = load_lock((root / "lockfile.toml").read_text())
    out = {str(p.target): (root / str(p.file)).read_bytes() for p in lock.patches if p.file is not None}
    out.update({str(a.target): (root / str(a.file)).read_bytes() for a in (*lock.tuning, *lock.artifacts) if a.target})
    return out


@pytest.fixture
def derivable(deploy: Path, oci_image: TestImages, invoke: Invoke) -> Path:
    return make_derivable(deploy, oci_image.single, invoke)


# --- the layer, pure --------------------------------------------------------------------------------


def test_layer_bytes_depend_on_the_files_alone() -> None:
    files = [LayerFile("/b/two.py", b"2\n"), LayerFile("/a/one.py", b"1\n", executable=True)]
    one = make_layer(files, 1_700_000_000)
    two = make_layer(list(reversed(files)), 1_700_000_000)
    assert (one.digest, one.diff_id, one.blob) == (two.digest, two.diff_id, two.blob)
    assert one.blob[4:8] == b"\0\0\0\0"  # gzip header mtime 0
    assert one.blob[3] & 0x08 == 0  # no file name in the gzip header
    tar = gzip.decompress(one.blob)
    assert _sha(tar) == one.diff_id.text
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        members = t.getmembers()
        assert [m.name for m in members] == ["a/one.py", "b/two.py"]  # sorted, no directories
        assert [(m.mode, m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members] == [
            (0o755, 0, 0, "", "", 1_700_000_000),
            (0o644, 0, 0, "", "", 1_700_000_000),
        ]
        assert all(not m.pax_headers for m in members)  # no atime/ctime/fractional mtime records


def test_layer_refuses_two_files_at_one_target_and_relative_targets() -> None:
    from patchkit.errors import BadInput

    with pytest.raises(BadInput, match="two files of the layer claim /a"):
        layer_tar([LayerFile("/a", b"1"), LayerFile("/a", b"2")], 0)
    with pytest.raises(BadInput, match="not an absolute container path"):
        layer_tar([LayerFile("a/b", b"1")], 0)
    with pytest.raises(BadInput, match="not an absolute container path"):
        layer_tar([LayerFile("/a/../etc/passwd", b"1")], 0)


def test_long_targets_use_pax_names_deterministically() -> None:
    target = "/usr/local/lib/python3.12/dist-packages/vllm/models/deepseek_v4/common/ops/" + "x" * 80 + ".py"
    layer = make_layer([LayerFile(target, b"x")], 0)
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer.blob))) as t:
        assert t.getnames() == [target.lstrip("/")]
    assert make_layer([LayerFile(target, b"x")], 0).blob == layer.blob


# --- building and pushing ----------------------------------------------------------------------------


@pytest.mark.slow
def test_two_clones_with_different_mtimes_and_umasks_build_identical_digests(
    derivable: Path, tmp_path: Path, registry_server: RegistryServer, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    a = clone(derivable, tmp_path / "clone-a", umask=0o022)
    b = clone(derivable, tmp_path / "clone-b", umask=0o077, mtime=86_400 * 365)
    assert (a / "tuning/moe.csv").stat().st_mode & 0o777 != (b / "tuning/moe.csv").stat().st_mode & 0o777

    monkeypatch.setenv("TZ", "UTC")
    first = build(invoke, a, f"{registry_server.host}/derived/clone-a:v1")
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    second = build(invoke, b, f"{registry_server.host}/derived/clone-b:v1")

    for key in ("digest", "layer_digest", "diff_id", "base_digest", "created"):
        assert first[key] == second[key], key
    # Both clones pin the same, byte for byte (only the repository differs).
    pin_a = (a / "lockfile.toml").read_text().replace("clone-a", "clone-b")
    assert pin_a == (b / "lockfile.toml").read_text()
    # skopeo agrees on the digest the registry serves, for both pushes.
    for name in ("clone-a", "clone-b"):
        assert registry_server.inspect(f"{registry_server.host}/derived/{name}:v1")["Digest"] == first["digest"]


@pytest.mark.slow
def test_build_pins_the_digests_and_skopeo_shows_the_layers(
    derivable: Path, registry_server: RegistryServer, oci_image: TestImages, invoke: Invoke
) -> None:
    target = f"{registry_server.host}/derived/pins:v1"
    doc = build(invoke, derivable, target)

    lock = load_lock((derivable / "lockfile.toml").read_text())
    (pin,) = lock.derived
    assert (pin.name, pin.base, pin.tag) == ("single", "vllm", "v1")
    assert pin.repository == f"{registry_server.host}/derived/pins"
    assert pin.digest.text == doc["digest"]
    assert pin.base_digest.text == oci_image.single_digest
    assert (pin.layer_digest.text, pin.diff_id.text) == (doc["layer_digest"], doc["diff_id"])
    assert pin.created == lock.images[0].resolved_at  # from the lockfile: when the base was pinned

    seen = registry_server.inspect(target)
    base = registry_server.inspect(oci_image.single)
    assert seen["Digest"] == doc["digest"]
    assert seen["Layers"] == [*base["Layers"], doc["layer_digest"]]
    raw_config = subprocess.run(
        ["skopeo", "inspect", "--config", "--raw", "--tls-verify=false", f"docker://{target}"],
        capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    cfg = json.loads(raw_config)
    base_cfg = json.loads(
        subprocess.run(
            ["skopeo", "inspect", "--config", "--raw", "--tls-verify=false", f"docker://{oci_image.single}"],
            capture_output=True, check=True, timeout=60,
        ).stdout
    )  # fmt: skip
    assert cfg["rootfs"]["diff_ids"] == [*base_cfg["rootfs"]["diff_ids"], doc["diff_id"]]
    assert cfg["created"] == pin.created
    assert cfg["history"][-1]["created_by"] == "patchkit image build"
    manifest = json.loads(registry_server.inspect_raw(target))
    assert manifest["annotations"]["org.opencontainers.image.base.digest"] == oci_image.single_digest

    # The lockfile and SHA256SUMS were written together: check passes on the result.
    r = invoke("check", repo=derivable)
    assert r.exit_code == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_only_the_new_layer_is_uploaded_and_a_rebuild_uploads_nothing(
    derivable: Path, registry_server: RegistryServer, oci_image: TestImages, invoke: Invoke
) -> None:
    base = registry_server.inspect(oci_image.single)
    first = build(invoke, derivable, f"{registry_server.host}/derived/upload:v1")
    # Same registry: the base layers are mounted, never sent; the layer and the config are.
    assert sorted(first["mounted"]) == sorted(base["Layers"])
    assert first["layer_digest"] in first["uploaded"]
    assert len(first["uploaded"]) == 2
    layer_size = registry_server.blob_path(first["layer_digest"]).stat().st_size
    assert layer_size < first["bytes_uploaded"] < layer_size + 4096  # the layer plus a small config

    before = snapshot(derivable)
    again = build(invoke, derivable, f"{registry_server.host}/derived/upload:v1")
    assert again["digest"] == first["digest"]
    assert (again["uploaded"], again["mounted"], again["bytes_uploaded"]) == ([], [], 0)
    assert sorted(again["present"]) == sorted([*first["mounted"], *first["uploaded"]])
    assert snapshot(derivable) == before  # same pin: nothing rewritten


@pytest.mark.slow
def test_chunked_upload_gives_the_same_image(derivable: Path, registry_server: RegistryServer, invoke: Invoke) -> None:
    whole = build(invoke, derivable, f"{registry_server.host}/derived/whole:v1")
    chunked = build(invoke, derivable, f"{registry_server.host}/derived/chunked:v1", "--chunk-size", "97")
    assert chunked["digest"] == whole["digest"]
    assert chunked["layer_digest"] in chunked["uploaded"]
    blob = registry_server.blob_path(chunked["layer_digest"]).read_bytes()
    assert _sha(blob) == chunked["layer_digest"]
    assert len(blob) > 97  # it really went up in several PATCHes


@pytest.mark.slow
def test_the_engine_pulls_it_and_a_container_has_each_pinned_file(
    derivable: Path, registry_server: RegistryServer, invoke: Invoke, dockerd: Dockerd
) -> None:
    doc = build(invoke, derivable, f"{registry_server.host}/derived/run:v1")
    ref = f"{registry_server.host}/derived/run@{doc['digest']}"
    dockerd.client.images.pull(ref)
    expected = pinned_files(derivable)
    assert set(expected) == set(TARGETS)
    container = dockerd.client.containers.create(ref, command=["/opt/patchkit/entrypoint.sh"])
    try:
        for target, data in expected.items():
            bits, _ = container.get_archive(target)
            with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as t:
                (member,) = t.getmembers()
                f = t.extractfile(member)
                assert f is not None
                got = f.read()
            assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest(), target
            assert member.mode & 0o777 == (0o755 if TARGETS[target] else 0o644), target
        # The base image's own files are still there beneath the layer.
        bits, _ = container.get_archive("/app/top.txt")
        with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as t:
            top = t.extractfile(t.getmembers()[0])
            assert top is not None and top.read() == b"top\n"
    finally:
        container.remove(force=True)


@pytest.mark.slow
def test_a_multi_platform_base_gives_an_index_with_one_child_per_platform(
    deploy: Path, registry_server: RegistryServer, oci_image: TestImages, invoke: Invoke
) -> None:
    make_derivable(deploy, oci_image.multi, invoke)
    target = f"{registry_server.host}/derived/multi:v1"
    doc = build(invoke, deploy, target)
    index = json.loads(registry_server.inspect_raw(target))
    assert _sha(registry_server.inspect_raw(target)) == doc["digest"]
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert sorted(doc["platforms"]) == ["linux/amd64", "linux/arm64"]
    assert sorted(m["digest"] for m in index["manifests"]) == sorted(doc["platforms"].values())
    for platform, child in doc["platforms"].items():
        os_, arch = platform.split("/")
        seen = registry_server.inspect(target, "--override-os", os_, "--override-arch", arch)
        assert seen["Layers"][-1] == doc["layer_digest"], platform
        manifest = json.loads(registry_server.inspect_raw(f"{registry_server.host}/derived/multi@{child}"))
        assert manifest["annotations"]["org.opencontainers.image.base.name"].endswith(oci_image.index_digest)


@pytest.mark.slow
def test_a_file_that_does_not_match_its_pin_stops_the_build_before_any_write(
    derivable: Path, registry_server: RegistryServer, invoke: Invoke
) -> None:
    (derivable / "tuning/moe.csv").write_bytes(b"m,n,k,block\n1,7168,2048,128\n")
    before = snapshot(derivable)
    r = invoke("image", "build", "--push", f"{registry_server.host}/derived/bad:v1", repo=derivable)
    assert r.exit_code == 2
    assert "tuning/moe.csv (tuning 'moe') does not match its pin" in r.stderr
    assert "Traceback" not in r.stderr
    assert snapshot(derivable) == before
    assert not any("/derived/bad/manifests" in line for line in registry_server.access_log())


def test_push_with_a_digest_or_an_unpinned_base_is_refused(derivable: Path, deploy: Path, invoke: Invoke) -> None:
    r = invoke("image", "build", "--push", "127.0.0.1:1/x@sha256:" + "a" * 64, repo=derivable)
    assert r.exit_code == 2
    assert "give a repository and tag, not a digest" in r.stderr
    (derivable / "deploy.toml").write_text(DEPLOY_TOML.replace('image = "vllm"', 'image = "other"'))
    r = invoke("image", "build", "--push", "127.0.0.1:1/x:v1", repo=derivable)
    assert r.exit_code == 2
    assert "inference.image names 'other', which lockfile.toml does not pin" in r.stderr


def test_created_comes_from_source_date_epoch_else_from_the_base_pin(derivable: Path) -> None:
    import dataclasses

    from patchkit.errors import BadInput
    from patchkit.ship.build import created_time

    lock = load_lock((derivable / "lockfile.toml").read_text())
    pinned_at = lock.images[0].resolved_at
    assert pinned_at is not None
    assert created_time(lock, "vllm", "1700000000") == "2023-11-14T22:13:20Z"
    assert created_time(lock, "vllm", None) == pinned_at
    assert created_time(lock, "vllm", "") == pinned_at
    unpinned_time = dataclasses.replace(lock, images=(dataclasses.replace(lock.images[0], resolved_at=None),))
    assert created_time(unpinned_time, "vllm", None) == "1970-01-01T00:00:00Z"
    with pytest.raises(BadInput, match=r"SOURCE_DATE_EPOCH='1\.5' is not an integer number of seconds"):
        created_time(lock, "vllm", "1.5")


@pytest.mark.slow
def test_build_as_a_user_runs_it(derivable: Path, registry_server: RegistryServer) -> None:
    import sys

    target = f"{registry_server.host}/derived/subprocess:v1"
    p = subprocess.run(
        [sys.executable, "-m", "patchkit", "image", "build", "--push", target],
        cwd=derivable, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    lock = load_lock((derivable / "lockfile.toml").read_text())
    (pin,) = lock.derived
    assert lines[0] == f"{registry_server.host}/derived/subprocess@{pin.digest}"
    assert lines[1].startswith(f"  layer {pin.layer_digest} (4 files, ")
    assert lines[2].startswith("  uploaded 2 blobs (") and lines[2].endswith(", already there 0")
    assert lines[3:] == [f"derived[single]: unpinned -> {pin.digest}", "wrote lockfile.toml", "wrote SHA256SUMS"]


def test_a_new_deployment_builds_a_base_and_one_layer_with_the_starter_deploy_toml(
    tmp_path: Path, oci_image: TestImages, registry_server: RegistryServer, invoke: Invoke
) -> None:
    """``init``'s deploy.toml names the base alone: no model pin, no entrypoint, no profile needed to build."""
    root = tmp_path / "new"
    assert invoke("init", str(root)).exit_code == 0
    assert invoke("image", "pin", "vllm", oci_image.single, repo=root).exit_code == 0
    (root / "tuning" / "moe.csv").write_bytes(b"m,n,k,block\n1,7168,2048,128\n")
    r = invoke("add", str(root / "tuning" / "moe.csv"), "--target", "/opt/tuning/moe.csv", repo=root)
    assert r.exit_code == 0, r.stderr
    doc = build(invoke, root, f"{registry_server.host}/derived/starter:v1")
    lock = load_lock((root / "lockfile.toml").read_text())
    (derived,) = lock.derived
    assert (derived.name, derived.base, str(derived.digest)) == ("single", "vllm", doc["digest"])
    assert invoke("check", repo=root).exit_code == 0


def test_build_reads_only_what_it_uses_and_points_to_the_docs(derivable: Path, invoke: Invoke) -> None:
    """Without [profiles] only schema and inference.image are read; a missing one names docs/deploy.md, no source."""
    (derivable / "deploy.toml").write_text('schema = 1\n[inference]\nentrypoint = "entrypoint"\n')
    r = invoke("image", "build", "--push", "127.0.0.1:1/x:v1", repo=derivable)
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        "patchkit: error: deploy.toml:2: inference: missing required field 'image'",
        "  fix: deploy.toml's fields: docs/deploy.md",
    ]
    (derivable / "deploy.toml").unlink()
    r = invoke("image", "build", "--push", "127.0.0.1:1/x:v1", repo=derivable)
    assert r.exit_code == 2
    assert "fix: create deploy.toml (patchkit init writes a starter; fields: docs/deploy.md)" in r.stderr
    assert ".py" not in r.stderr and "Traceback" not in r.stderr
    (derivable / "deploy.toml").write_text('schema = 1\n[inference]\nimage = "vllm"\n')
    r = invoke("image", "build", "--push", "127.0.0.1:1/x:v1", "--profile", "tp2", repo=derivable)
    assert r.exit_code == 3  # read and accepted: it got as far as the (unreachable) registry
