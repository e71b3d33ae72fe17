"""``image build`` carries what the patch series produce, and ``check --online`` expects exactly that."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from patchkit.core.findings import Finding
from patchkit.images.registry import RegistryClient
from patchkit.lockfile.reader import loads as load_lock
from patchkit.lockfile.tomlpos import LineIndex
from patchkit.tracking.online import image_findings
from tests.conftest import Invoke
from tests.images.conftest import ImageBuilder, RegistryServer
from tests.images.test_series_build import queue_on_base
from tests.series.queue import (
    CORE_PATCHED,
    ENVS_PATCHED,
    MXFP4_PATCHED,
    SCHED_V1,
    Queue,
)

SITE = "/usr/local/lib/python3.12/dist-packages"

DEPLOY_TOML = """\
schema = 1
name = "queue"

[inference]
image = "vllm"
entrypoint = "entrypoint"
port = 8000

[profiles.mxfp4]
file = "compose.yaml"

[[profiles.mxfp4.replicas]]
service = "vllm"
publish = "127.0.0.1:8000"
"""


@pytest.fixture
def series_deploy(
    tmp_path: Path, invoke: Invoke, image_builder: ImageBuilder, registry_server: RegistryServer
) -> Queue:
    """The patch-queue deployment with a base image (the upstreams installed) pinned, and a deploy.toml."""
    q, _ = queue_on_base(tmp_path, image_builder, registry_server, "queue-base")
    (q.root / "deploy.toml").write_text(DEPLOY_TOML)
    run = invoke("lock", repo=q.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    return q


def _layer_files(registry_server: RegistryServer, digest: str) -> dict[str, bytes]:
    """The files of a layer as the registry stores it (read from its storage, not through patchkit)."""
    blob = registry_server.blob_path(digest).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob)), mode="r:") as t:
        out = {}
        for m in t:
            f = t.extractfile(m)
            assert f is not None and m.mode == 0o644
            out["/" + m.name] = f.read()
    return out


def _findings(root: Path) -> list[Finding]:
    text = (root / "lockfile.toml").read_text()
    return image_findings(load_lock(text), LineIndex(text).line_of, RegistryClient())


def test_the_derived_image_holds_what_the_profiles_series_produce(
    series_deploy: Queue, invoke: Invoke, registry_server: RegistryServer
) -> None:
    q = series_deploy
    push = f"{registry_server.host}/series/derived:mxfp4"
    run = invoke("image", "build", "--profile", "mxfp4", "--push", push, "--format", "json", repo=q.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    doc = json.loads(run.stdout)
    files = _layer_files(registry_server, doc["layer_digest"])
    # Profile mxfp4 of series vllm (not the scheduler patch), and every patch of flashinfer, which has no profiles.
    assert sorted(files) == [
        f"{SITE}/.patchkit/series/flashinfer.json",
        f"{SITE}/.patchkit/series/vllm.json",
        f"{SITE}/flashinfer/jit/core.py",
        f"{SITE}/vllm/envs.py",
        f"{SITE}/vllm/model_executor/layers/quant/mxfp4.py",
    ]
    assert files[f"{SITE}/vllm/model_executor/layers/quant/mxfp4.py"] == MXFP4_PATCHED
    assert files[f"{SITE}/vllm/envs.py"] == ENVS_PATCHED
    assert files[f"{SITE}/flashinfer/jit/core.py"] == CORE_PATCHED
    record = json.loads(files[f"{SITE}/.patchkit/series/vllm.json"])
    assert record["profile"] == "mxfp4"
    assert [p["name"] for p in record["patches_applied"]] == [
        "vllm-48303-mxfp4-flashinfer-cutlass",
        "vllm-48512-mxfp4-cutlass-env",
    ]
    # check --online expects exactly those files: nothing unpinned, nothing missing.
    assert _findings(q.root) == []
    # The same series emitted as a Containerfile copies the same bytes.
    emitted = invoke("emit", "--containerfile", "Containerfile", "--series-profile", "mxfp4", repo=q.root)
    assert emitted.exit_code == 0, emitted.stderr
    for rel, target in (
        ("build/series/vllm/vllm/envs.py", f"{SITE}/vllm/envs.py"),
        ("build/series/vllm/.patchkit/series/vllm.json", f"{SITE}/.patchkit/series/vllm.json"),
    ):
        assert (q.root / rel).read_bytes() == files[target]


def test_check_online_reports_a_derived_image_built_from_other_series_patches(
    series_deploy: Queue, invoke: Invoke, registry_server: RegistryServer
) -> None:
    q = series_deploy
    push = f"{registry_server.host}/series/derived:stale"
    run = invoke("image", "build", "--profile", "mxfp4", "--push", push, repo=q.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    # The env patch is re-exported (another commit message) and re-pinned after the image was built.
    patch = q.root / "patches/vllm/vllm-48512-mxfp4-cutlass-env.patch"
    patch.write_bytes(patch.read_bytes().replace(b"VLLM_MXFP4_USE_CUTLASS (#48512)", b"VLLM_MXFP4_USE_CUTLASS"))
    assert invoke("lock", repo=q.root).exit_code == 0
    found = _findings(q.root)
    assert [(f.code, f.field) for f in found] == [("derived-files", "derived.mxfp4.layer_digest")]
    assert found[0].message.endswith(
        f"top layer: {SITE}/.patchkit/series/vllm.json: built from other patches of series 'vllm' than the "
        f"lockfile pins now (vllm-48303-mxfp4-flashinfer-cutlass, vllm-48512-mxfp4-cutlass-env at {q.vllm_c1[:12]})"
    )


def test_a_series_that_deletes_a_file_is_refused_before_anything_is_pushed(
    series_deploy: Queue, invoke: Invoke, registry_server: RegistryServer
) -> None:
    q = series_deploy
    with (q.root / "deploy.toml").open("a") as f:
        f.write(
            '\n[profiles.single]\nfile = "compose.single.yaml"\n\n'
            '[[profiles.single.replicas]]\nservice = "vllm"\npublish = "127.0.0.1:8001"\n'
        )
    # A patch that deletes the scheduler, made the way git format-patch writes one; profile "single" is no
    # profile of the series, so the build applies every patch, this one too.
    sched = q.root / "patches/vllm/vllm-47900-legacy-sched-priority.patch"
    sched.write_bytes(
        b"From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\n"
        b"From: Dev <dev@example.invalid>\nSubject: [PATCH] drop the legacy scheduler\n\n---\n"
        b"diff --git a/vllm/legacy/sched.py b/vllm/legacy/sched.py\ndeleted file mode 100644\n"
        b"index 1111111..0000000\n--- a/vllm/legacy/sched.py\n+++ /dev/null\n"
        + b"@@ -1,3 +0,0 @@\n"
        + b"".join(b"-" + line for line in SCHED_V1.splitlines(keepends=True))
    )
    assert invoke("lock", repo=q.root).exit_code == 0
    pinned = (q.root / "lockfile.toml").read_bytes()
    push = f"{registry_server.host}/series/deletes:1"
    run = invoke("image", "build", "--profile", "single", "--push", push, repo=q.root)
    assert run.exit_code == 2, run.stdout + run.stderr
    assert "series 'vllm' deletes vllm/legacy/sched.py; an image built without a shell cannot delete a file" in (
        run.stderr
    )
    assert (q.root / "lockfile.toml").read_bytes() == pinned
    assert not any("/series/deletes/" in line for line in registry_server.access_log())
