"""An image as the upstream source: register it, then rebase onto a newer image."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Invoke

from patchkit.ship.adopt import upstream_from_state, upstream_state

from .conftest import ImageBuilder, RegistryServer

PREFIX = "usr/local/lib/python3.12/dist-packages"
WORKER = b"class Worker:\n    def restore(self, blocks):\n        return len(blocks)\n\n\ndef helper():\n    return 1\n"


def test_upstream_from_an_image_and_rebase_onto_the_next(
    invoke: Invoke, tmp_path: Path, image_builder: ImageBuilder, registry_server: RegistryServer
) -> None:
    image_builder.new("nightly-1")
    image_builder.repack(
        "nightly-1",
        {
            f"{PREFIX}/vllm/_version.py": b"__version__ = version = '0.26.1rc1.dev229+g124154a88'\n",
            f"{PREFIX}/vllm/worker.py": WORKER,
        },
    )
    old = registry_server.push(image_builder.ref("nightly-1"), "pk/vllm-rocm:nightly-1")
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    r = invoke("upstream", "add", "nightly", "--image", old, "--prefix", f"/{PREFIX}", repo=root)
    assert r.exit_code == 0, r.stderr
    lock = (root / "lockfile.toml").read_text()
    assert (
        'version = "0.26.1rc1.dev229+g124154a88"' in lock
        and 'prefix = "/usr/local/lib/python3.12/dist-packages"' in lock
    )
    listing = json.loads(invoke("upstream", "list", "--format", "json", repo=root).stdout)
    assert listing[0]["source"] == "image"

    edited = tmp_path / "worker.py"
    edited.write_bytes(WORKER.replace(b"        return len(blocks)", b"        sync()\n        return len(blocks)"))
    r = invoke(
        "add", str(edited), "--target", f"/{PREFIX}/vllm/worker.py", "--upstream", "nightly",
        "--upstream-path", "vllm/worker.py", repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr  # the base was read from the pinned image
    assert invoke("check", repo=root).exit_code == 0

    image_builder.repack(
        "nightly-1",
        {
            f"{PREFIX}/vllm/_version.py": b"__version__ = version = '0.26.1rc1.dev250+gabcdef012'\n",
            f"{PREFIX}/vllm/worker.py": WORKER.replace(b"    return 1", b"    return 2"),
        },
    )
    new = registry_server.push(image_builder.ref("nightly-1"), "pk/vllm-rocm:nightly-2")
    r = invoke("rebase", "--upstream", "nightly", "--source", f"image:{new}", "--format", "json", repo=root)
    assert r.exit_code == 0, r.stderr
    assert {p["name"]: p["outcome"] for p in json.loads(r.stdout)["patches"]} == {"worker": "clean"}
    lock = (root / "lockfile.toml").read_text()
    assert 'version = "0.26.1rc1.dev250+gabcdef012"' in lock
    merged = (root / "patches" / "worker.py").read_bytes()
    assert b"sync()" in merged and b"return 2" in merged
    assert invoke("check", repo=root).exit_code == 0


def test_bump_image_rebases_and_repins_in_one_step(
    invoke: Invoke, tmp_path: Path, image_builder: ImageBuilder, registry_server: RegistryServer
) -> None:
    image_builder.new("bump-1")
    image_builder.repack(
        "bump-1",
        {
            f"{PREFIX}/vllm/_version.py": b"__version__ = version = '0.26.1rc1.dev229+g124154a88'\n",
            f"{PREFIX}/vllm/worker.py": WORKER,
        },
    )
    old = registry_server.push(image_builder.ref("bump-1"), "pk/vllm-bump:nightly")
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    assert invoke("image", "pin", "vllm", old, repo=root).exit_code == 0
    assert invoke("upstream", "add", "nightly", "--image", old, "--prefix", f"/{PREFIX}", repo=root).exit_code == 0
    edited = tmp_path / "worker.py"
    edited.write_bytes(WORKER.replace(b"        return len(blocks)", b"        sync()\n        return len(blocks)"))
    r = invoke(
        "add", str(edited), "--target", f"/{PREFIX}/vllm/worker.py", "--upstream", "nightly",
        "--upstream-path", "vllm/worker.py", repo=root,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr

    image_builder.repack(
        "bump-1",
        {
            f"{PREFIX}/vllm/_version.py": b"__version__ = version = '0.26.1rc1.dev300+g0123abcd9.rocm723'\n",
            f"{PREFIX}/vllm/worker.py": WORKER.replace(b"    return 1", b"    return 3"),
        },
    )
    new = registry_server.push(image_builder.ref("bump-1"), "pk/vllm-bump:nightly")
    r = invoke("bump", "--image", new, "--format", "json", repo=root)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["committed"] and doc["commit_prefix"] == "0123abcd9"
    new_digest = json.loads(invoke("image", "resolve", new, "--format", "json").stdout)["digest"]
    assert doc["images"] == {"vllm": new_digest}
    lock = (root / "lockfile.toml").read_text()
    # The deployed image, the upstream and what the base was verified against moved together.
    assert lock.count(f'"{new_digest}"') == 3
    assert invoke("check", repo=root).exit_code == 0


def test_bump_records_the_new_runtime_version_and_keeps_the_old_one_when_the_image_has_none(
    invoke: Invoke, tmp_path: Path, image_builder: ImageBuilder, registry_server: RegistryServer
) -> None:
    image_builder.new("bump-v")
    version_file = f"{PREFIX}/vllm/_version.py"
    image_builder.repack(
        "bump-v",
        {version_file: b"__version__ = version = '0.26.1rc1.dev229+g124154a88'\n", f"{PREFIX}/vllm/worker.py": WORKER},
    )
    old = registry_server.push(image_builder.ref("bump-v"), "pk/vllm-version:nightly")
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    assert invoke("image", "pin", "vllm", old, repo=root).exit_code == 0
    assert invoke("upstream", "add", "nightly", "--image", old, "--prefix", f"/{PREFIX}", repo=root).exit_code == 0
    lockfile = root / "lockfile.toml"
    text = lockfile.read_text()
    lockfile.write_text(text.replace("[images.vllm]\n", '[images.vllm]\nnote = "ROCm nightly"\n'))
    assert invoke("lock", repo=root).exit_code == 0

    image_builder.repack("bump-v", {version_file: b"__version__ = version = '0.26.1rc1.dev300+g0123abcd9.rocm723'\n"})
    new = registry_server.push(image_builder.ref("bump-v"), "pk/vllm-version:nightly")
    r = invoke("bump", "--image", new, repo=root)
    assert r.exit_code == 0, r.stderr
    assert "note:" not in r.stderr  # the version was read from the image itself
    table = lockfile.read_text().split("[images.vllm]\n", 1)[1].split("\n\n", 1)[0] + "\n"
    assert 'version = "0.26.1rc1.dev300+g0123abcd9.rocm723"\n' in table and 'note = "ROCm nightly"\n' in table
    assert 'tag = "nightly"\n' in table

    image_builder.repack("bump-v", delete=(version_file,))  # a nightly that does not say its version
    newer = registry_server.push(image_builder.ref("bump-v"), "pk/vllm-version:nightly")
    r = invoke("bump", "--image", newer, "--format", "json", repo=root)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["version"] is None
    digest = json.loads(r.stdout)["images"]["vllm"]
    table = lockfile.read_text().split("[images.vllm]\n", 1)[1].split("\n\n", 1)[0] + "\n"
    assert f'digest = "{digest}"\n' in table
    assert 'version = "0.26.1rc1.dev300+g0123abcd9.rocm723"\n' in table and 'note = "ROCm nightly"\n' in table
    assert "note: images.vllm.version 0.26.1rc1.dev300+g0123abcd9.rocm723 was kept from the previous pin" in r.stderr


def test_a_saved_image_upstream_with_a_field_of_another_type_is_malformed() -> None:
    saved = {"name": "vllm", "image": "docker.io/rocm/vllm", "prefix": "/usr/local/lib/python3.12/dist-packages"}
    assert upstream_state(upstream_from_state(saved)) == {
        **saved, "image_digest": None, "platform": None, "version": None, "note": None,
    }  # fmt: skip
    for field in ("platform", "version", "note", "prefix", "image_digest"):
        with pytest.raises(ValueError, match=field):
            upstream_from_state({**saved, field: 5})
