"""A bare re-pin of the deployed image fails offline check; the bump that moves the bases onto it passes."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Invoke

from .conftest import ImageBuilder, RegistryServer

PREFIX = "usr/local/lib/python3.12/dist-packages"
WORKER = b"class Worker:\n    def restore(self, blocks):\n        return len(blocks)\n\n\ndef helper():\n    return 1\n"


def _digest(invoke: Invoke, ref: str) -> str:
    return str(json.loads(invoke("image", "resolve", ref, "--format", "json").stdout)["digest"])


def test_image_pin_alone_fails_check_and_the_bump_passes(
    invoke: Invoke, tmp_path: Path, image_builder: ImageBuilder, registry_server: RegistryServer
) -> None:
    image_builder.new("verified-1")
    image_builder.repack(
        "verified-1",
        {
            f"{PREFIX}/vllm/_version.py": b"__version__ = version = '0.26.1rc1.dev229+g124154a88'\n",
            f"{PREFIX}/vllm/worker.py": WORKER,
        },
    )
    old = registry_server.push(image_builder.ref("verified-1"), "pk/vllm-verified:nightly")
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
    old_digest = _digest(invoke, old)
    # add read the base from the pinned image itself: it records that image, against its files.
    assert (
        f'[patches.base.verified]\nimage = "vllm"\ndigest = "{old_digest}"\nagainst = "image"\n'
        in (root / "lockfile.toml").read_text()
    )
    assert invoke("check", repo=root).exit_code == 0

    image_builder.repack(
        "verified-1",
        {
            f"{PREFIX}/vllm/_version.py": b"__version__ = version = '0.26.1rc1.dev300+g0123abcd9'\n",
            f"{PREFIX}/vllm/worker.py": WORKER.replace(b"    return 1", b"    return 3"),
        },
    )
    new = registry_server.push(image_builder.ref("verified-1"), "pk/vllm-verified:nightly")
    new_digest = _digest(invoke, new)
    repository = new.split("@")[0].rsplit(":", 1)[0]

    # A bare re-pin: the overlay still carries the old image's file.
    r = invoke("image", "pin", "vllm", new, repo=root)
    assert r.exit_code == 0, r.stderr
    assert (
        "note: worker: verified for the previous images.vllm digest; patchkit check fails until the bases are "
        f"moved onto the new one: patchkit bump --image {repository}@{new_digest}"
    ) in r.stderr
    r = invoke("check", "--format", "json", repo=root)
    assert r.exit_code == 1
    [f] = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "base-unverified"]
    assert f["field"] == "patches[worker].base.verified.digest"
    assert f["fix"] == f"move the bases onto the pinned image: patchkit bump --image {repository}@{new_digest}"

    # The fix it names moves the base onto the new image's file and records it.
    r = invoke("bump", "--image", f"{repository}@{new_digest}", repo=root)
    assert r.exit_code == 0, r.stderr
    assert b"return 3" in (root / "patches" / "worker.py").read_bytes()
    text = (root / "lockfile.toml").read_text()
    assert f'image = "vllm"\ndigest = "{new_digest}"\nagainst = "image"\n' in text
    assert invoke("check", repo=root).exit_code == 0
