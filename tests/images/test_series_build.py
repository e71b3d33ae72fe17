"""``patchkit emit --containerfile``: built for real by the test Docker engine on an image from the local registry."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from tests.conftest import Invoke
from tests.dockerd import Dockerd
from tests.images.conftest import ImageBuilder, RegistryServer
from tests.series.queue import (
    CORE_V1,
    ENVS_PATCHED,
    ENVS_V1,
    MXFP4_PATCHED,
    MXFP4_V1,
    SCHED_V1,
    Queue,
    build_queue,
    lockfile_text,
)

SITE = "/usr/local/lib/python3.12/dist-packages"


def queue_on_base(
    tmp_path: Path, image_builder: ImageBuilder, registry_server: RegistryServer, name: str
) -> tuple[Queue, str]:
    """The patch-queue deployment, image ``vllm`` pinned to a local-registry base with the upstreams; and its digest."""
    image_builder.new(name)
    image_builder.repack(
        name,
        {
            f"{SITE}/vllm/__init__.py": b'__version__ = "0.26.0"\n',
            f"{SITE}/vllm/envs.py": ENVS_V1,
            f"{SITE}/vllm/model_executor/layers/quant/mxfp4.py": MXFP4_V1,
            f"{SITE}/vllm/legacy/sched.py": SCHED_V1,
            f"{SITE}/flashinfer/jit/core.py": CORE_V1,
        },
    )
    pushed = registry_server.push(image_builder.ref(name), f"series/{name}:nightly")
    digest = registry_server.inspect(pushed)["Digest"]
    q = build_queue(tmp_path)
    text = lockfile_text(q).replace(
        "[upstreams.flashinfer]",
        f'[images.vllm]\nrepository = "{registry_server.host}/series/{name}"\ndigest = "{digest}"\n\n'
        "[upstreams.flashinfer]",
    )
    (q.root / "lockfile.toml").write_text(text)
    return q, digest


def _file_in_image(dockerd: Dockerd, image: str, path: str) -> bytes:
    container = dockerd.client.containers.create(image, command=["/none"])
    try:
        bits, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tf:
            member = tf.extractfile(tf.getmembers()[0])
            assert member is not None
            return member.read()
    finally:
        container.remove()


def test_the_emitted_containerfile_builds_and_the_image_has_the_patched_bytes(
    tmp_path: Path, invoke: Invoke, image_builder: ImageBuilder, registry_server: RegistryServer, dockerd: Dockerd
) -> None:
    q, digest = queue_on_base(tmp_path, image_builder, registry_server, "vllm-base")
    assert invoke("lock", repo=q.root).exit_code == 0
    run = invoke("emit", "--containerfile", "Containerfile", "--series-profile", "mxfp4", repo=q.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    containerfile = (q.root / "Containerfile").read_text()
    assert f"FROM {registry_server.host}/series/vllm-base@{digest}\n" in containerfile
    mxfp4 = "vllm/model_executor/layers/quant/mxfp4.py"
    assert f"COPY build/series/vllm/{mxfp4} {SITE}/{mxfp4}\n" in containerfile
    assert "# not in the image's tree: requirements/cuda.txt (vllm-48303-mxfp4-flashinfer-cutlass)\n" in containerfile
    assert "RUN" not in containerfile  # no shell, git or patch needed in the image
    again = invoke("emit", "--containerfile", "Containerfile", "--series-profile", "mxfp4", repo=q.root)
    assert again.exit_code == 0 and again.stdout == ""  # byte-stable: nothing to rewrite

    image, _ = dockerd.client.images.build(path=str(q.root), dockerfile="Containerfile", tag="series-built:1", rm=True)
    assert (
        _file_in_image(dockerd, "series-built:1", f"{SITE}/vllm/model_executor/layers/quant/mxfp4.py") == MXFP4_PATCHED
    )
    assert _file_in_image(dockerd, "series-built:1", f"{SITE}/vllm/envs.py") == ENVS_PATCHED
    assert _file_in_image(dockerd, "series-built:1", f"{SITE}/vllm/legacy/sched.py") == SCHED_V1  # not in profile mxfp4
    record = _file_in_image(dockerd, "series-built:1", f"{SITE}/.patchkit/series/vllm.json")
    assert b'"profile": "mxfp4"' in record
    dockerd.client.images.remove(image.id, force=True)
