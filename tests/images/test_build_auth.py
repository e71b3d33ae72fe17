"""The derived image pushed to a registry with token auth, its base on another registry (streamed across)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from patchkit.lockfile.reader import loads as load_lock
from tests.conftest import Invoke
from tests.images.conftest import ImageBuilder, RegistryServer, TestImages, TokenRegistry
from tests.images.test_build import make_derivable


def docker_config(directory: Path, host: str, creds: tuple[str, str] | None) -> Path:
    directory.mkdir()
    auths = {host: {"auth": base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()}} if creds else {}
    (directory / "config.json").write_text(json.dumps({"auths": auths}))
    return directory


@pytest.mark.slow
def test_push_asks_for_a_push_token_and_copies_base_layers_from_another_registry(
    deploy: Path,
    oci_image: TestImages,
    registry_server: RegistryServer,
    token_registry_server: TokenRegistry,
    invoke: Invoke,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_derivable(deploy, oci_image.single, invoke)
    reg = token_registry_server
    target = f"{reg.host}/private/derived:v1"

    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(tmp_path / "anonymous", reg.host, None)))
    r = invoke("image", "build", "--push", target, repo=deploy)
    assert r.exit_code == 3
    assert "401 authentication required" in r.stderr and "docker login" in r.stderr
    assert "derived" not in (deploy / "lockfile.toml").read_text()

    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(tmp_path / "login", reg.host, (reg.username, reg.password))))
    reg.tokens.requests.clear()
    r = invoke("image", "build", "--push", target, "--format", "json", repo=deploy)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    scopes = {s for q in reg.tokens.requests for s in q["query"]["scope"]}
    assert scopes == {"repository:private/derived:pull,push"}
    # Another registry: nothing to mount from, so each base layer is streamed across, verified.
    base = registry_server.inspect(oci_image.single)
    assert doc["mounted"] == []
    assert sorted(doc["uploaded"]) == sorted([*base["Layers"], doc["layer_digest"], *doc["uploaded"][-1:]])
    assert (
        doc["bytes_uploaded"]
        == sum(registry_server.blob_path(d).stat().st_size for d in base["Layers"])
        + reg.blob_path(doc["layer_digest"]).stat().st_size
        + reg.blob_path(doc["uploaded"][-1]).stat().st_size
    )
    seen = reg.inspect(target)
    assert seen["Digest"] == doc["digest"]
    assert seen["Layers"] == [*base["Layers"], doc["layer_digest"]]

    # check --online reads it back with the same credentials (the client the command line builds) and finds it intact.
    from patchkit.cli.common import build_context
    from patchkit.tracking.online import image_findings

    lock = load_lock((deploy / "lockfile.toml").read_text())
    assert image_findings(lock, lambda _path: None, build_context({}, os.environ).registry()) == []


@pytest.mark.slow
def test_on_one_token_registry_the_base_layers_are_mounted_with_a_token_that_may_read_the_base(
    deploy: Path,
    image_builder: ImageBuilder,
    oci_image: TestImages,
    token_registry_server: TokenRegistry,
    invoke: Invoke,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reg = token_registry_server
    monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(tmp_path / "login", reg.host, (reg.username, reg.password))))
    base = reg.push(image_builder.ref("amd64"), "private/base:v1")
    make_derivable(deploy, base, invoke)
    reg.tokens.requests.clear()
    r = invoke("image", "build", "--push", f"{reg.host}/private/derived-mounted:v1", "--format", "json", repo=deploy)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    layers = reg.inspect(base)["Layers"]
    assert sorted(doc["mounted"]) == sorted(layers)  # nothing of the base sent again
    assert len(doc["uploaded"]) == 2  # the layer and the config
    scopes = [sorted(q["query"]["scope"]) for q in reg.tokens.requests]
    assert ["repository:private/base:pull", "repository:private/derived-mounted:pull,push"] in scopes
