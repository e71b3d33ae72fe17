"""DockerEngine against a real dockerd (vfs, private socket) pulling from a real local registry.

The module starts Debian's ``dockerd`` as root on its own socket, data root and
exec root, and Debian's ``docker-registry`` on 127.0.0.1; the image is built
with ``umoci`` (two layers, one whiteout, a symlink, a binary file larger than
a stream chunk, no Entrypoint/Cmd) and copied into the registry with
``skopeo``, also as a two-platform OCI index. Digests are checked against
``skopeo inspect --raw``. The tests skip only where dockerd cannot start, with
dockerd's own reason.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from patchkit.errors import EXIT_BAD_INPUT, EXIT_EXTERNAL, BadInput, SourceError
from patchkit.images.engine import DockerEngine, EngineUnavailable, local_name
from patchkit.oci.ref import ImageRef
from tests.dockerd import Dockerd, leftover_containers

BIG = random.Random(4).randbytes(3 * 1024 * 1024 + 17)  # crosses several 1 MiB stream chunks
BINARY = b"a\r\nb\x00\xff\xfe tail without newline"
FILES_LOWER = {
    "app/pkg/a.py": b"v1\n",
    "app/pkg/old.py": b"deleted by the upper layer\n",
    "app/pkg/bin.dat": BINARY,
    "etc/hello": b"x",
    "opt/big.bin": BIG,
}
A_UPPER = b"v2 = 'from the upper layer'\n"


# --- dockerd: tests/dockerd.py (a session fixture) ----------------------------------------------

# --- the registry and the image --------------------------------------------------------------


@dataclass
class Published:
    """The test image: the registry it is in, its OCI layout (to push more tags), platform and config digest."""

    host: str
    layout: Path
    native: str  # the engine's architecture, as Go names it
    config_digest: str  # = the image id Docker gives it


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def registry_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's docker-registry on 127.0.0.1 (plain HTTP, no auth), storing in a temporary directory."""
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.fail("docker-registry is not installed: .ci/run must install Debian's docker-registry")
    root = tmp_path_factory.mktemp("registry")
    host = f"127.0.0.1:{_free_port()}"
    (root / "config.yml").write_text(
        "version: 0.1\nlog: {level: error}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '{host}'}}\n"
    )
    with (root / "registry.log").open("wb") as log:
        proc = subprocess.Popen([binary, "serve", str(root / "config.yml")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{host}/v2/", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"docker-registry did not start: {(root / 'registry.log').read_text(errors='replace')}")
            time.sleep(0.05)
        yield host
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(*argv: str) -> bytes:
    return subprocess.run(argv, check=True, capture_output=True).stdout


def _write_blob(layout: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def build_image(work: Path) -> Path:
    """An OCI layout with tag ``v1`` (two layers, a whiteout) and ``multi`` (an index of two platforms)."""
    layout, bundle = work / "oci", work / "bundle"
    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:v1")
    run("umoci", "unpack", "--image", f"{layout}:v1", str(bundle))
    rootfs = bundle / "rootfs"
    for rel, data in FILES_LOWER.items():
        (rootfs / rel).parent.mkdir(parents=True, exist_ok=True)
        (rootfs / rel).write_bytes(data)
    (rootfs / "app" / "link.py").symlink_to("pkg/a.py")
    run("umoci", "repack", "--refresh-bundle", "--image", f"{layout}:v1", str(bundle))
    (rootfs / "app" / "pkg" / "old.py").unlink()  # becomes app/pkg/.wh.old.py in the upper layer
    (rootfs / "app" / "pkg" / "a.py").write_bytes(A_UPPER)
    run("umoci", "repack", "--refresh-bundle", "--image", f"{layout}:v1", str(bundle))

    # A second platform beside the native one: same layers, a config naming another architecture.
    index = json.loads((layout / "index.json").read_text())
    native_desc = next(m for m in index["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == "v1")
    manifest = json.loads((layout / "blobs" / "sha256" / native_desc["digest"].split(":")[1]).read_bytes())
    config = json.loads((layout / "blobs" / "sha256" / manifest["config"]["digest"].split(":")[1]).read_bytes())
    native = config["architecture"]
    other = "arm64" if native != "arm64" else "amd64"
    other_config = _write_blob(layout, json.dumps({**config, "architecture": other}).encode())
    other_manifest = {**manifest, "config": {**manifest["config"], **other_config}}
    other_desc = _write_blob(layout, json.dumps(other_manifest).encode())
    manifest_type = "application/vnd.oci.image.manifest.v1+json"
    image_index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": manifest_type, **{k: native_desc[k] for k in ("digest", "size")},
             "platform": {"architecture": native, "os": "linux"}},
            {"mediaType": manifest_type, **other_desc, "platform": {"architecture": other, "os": "linux"}},
        ],
    }  # fmt: skip
    index_desc = _write_blob(layout, json.dumps(image_index).encode())
    index["manifests"].append(
        {
            "mediaType": "application/vnd.oci.image.index.v1+json",
            **index_desc,
            "annotations": {"org.opencontainers.image.ref.name": "multi"},
        }
    )
    (layout / "index.json").write_text(json.dumps(index))
    return layout


def push(layout: Path, tag: str, dest: str) -> None:
    """``skopeo copy`` one tag of the layout to ``dest`` (``host/repo:tag``), every platform of an index."""
    run("skopeo", "copy", "--all", "--dest-tls-verify=false", f"oci:{layout}:{tag}", f"docker://{dest}")


def registry_digest(ref: str) -> str:
    """The digest of what the registry serves for ``ref``: sha256 of ``skopeo inspect --raw``."""
    raw = run("skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{ref}")
    return "sha256:" + hashlib.sha256(raw).hexdigest()


@pytest.fixture(scope="module")
def published(registry_host: str, tmp_path_factory: pytest.TempPathFactory) -> Published:
    """The image built once, its config digest, and the native platform name."""
    for tool in ("umoci", "skopeo"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: .ci/run must install Debian's {tool}")
    layout = build_image(tmp_path_factory.mktemp("image"))
    push(layout, "v1", f"{registry_host}/pk/engine:v1")
    config = run(
        "skopeo", "inspect", "--tls-verify=false", "--config", "--raw", f"docker://{registry_host}/pk/engine:v1"
    )
    native = json.loads(config)["architecture"]
    return Published(registry_host, layout, native, "sha256:" + hashlib.sha256(config).hexdigest())


# --- references and unreachable engines (no engine needed) ------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "tag", "digest", "canonical"),
    [
        ("ubuntu", "ubuntu", None, None, "docker.io/library/ubuntu"),
        ("ubuntu:24.04", "ubuntu", "24.04", None, "docker.io/library/ubuntu"),
        ("vllm/vllm-openai-rocm:nightly", "vllm/vllm-openai-rocm", "nightly", None, "docker.io/vllm/vllm-openai-rocm"),
        ("docker.io/library/caddy:2", "docker.io/library/caddy", "2", None, "docker.io/library/caddy"),
        ("index.docker.io/caddy", "index.docker.io/caddy", None, None, "docker.io/library/caddy"),
        ("localhost/app", "localhost/app", None, None, "localhost/app"),
        ("127.0.0.1:5000/team/app:v1", "127.0.0.1:5000/team/app", "v1", None, "127.0.0.1:5000/team/app"),
        ("ghcr.io/o/r@sha256:" + "a" * 64, "ghcr.io/o/r", None, "sha256:" + "a" * 64, "ghcr.io/o/r"),
        ("r:t@sha256:" + "b" * 64, "r", "t", "sha256:" + "b" * 64, "docker.io/library/r"),
    ],
)
def test_references_split_and_normalise_as_docker_does(
    text: str, name: str, tag: str | None, digest: str | None, canonical: str
) -> None:
    ref = ImageRef.parse(text)
    assert (ref.written_name, ref.tag if tag or digest else None, str(ref.digest) if ref.digest else None) == (
        name,
        tag,
        digest,
    )
    assert ref.name == canonical
    # A digest wins over a tag, as in Docker: the tag is never what is pulled.
    assert ref.reference == (digest or tag or "latest")
    assert local_name(ref) == (f"{name}@{digest}" if digest else f"{name}:{tag or 'latest'}")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Vllm/App:1", "repository names are lowercase"),
        ("app@sha256:" + "a" * 63, "need 64 lowercase hex digits after 'sha256:', got 63"),
        ("app@md5:abc", "is not a digest"),
        ("", "empty image reference"),
        ("a b", "'a b' is not an image reference (no whitespace, at most 512 characters)"),
        ("app:-tag", "'app:-tag' is not an image reference: bad tag '-tag'"),
    ],
)
def test_bad_references_are_refused(text: str, why: str) -> None:
    with pytest.raises(BadInput, match=re.escape(why)) as info:
        ImageRef.parse(text)
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert info.value.hint == "write [registry/]repository[:tag][@sha256:<64 hex>], e.g. vllm/vllm-openai-rocm:nightly"


def test_no_engine_at_a_missing_socket(tmp_path: Path) -> None:
    url = f"unix://{tmp_path}/docker.sock"
    with pytest.raises(EngineUnavailable) as info:
        DockerEngine(base_url=url)
    e = info.value
    assert isinstance(e, SourceError)
    assert e.exit_code == EXIT_EXTERNAL == 3
    assert e.message == f"no Docker engine at {url}: No such file or directory"
    assert e.hint == "start one, set DOCKER_HOST, or use --via registry"


def test_no_engine_where_nothing_listens(tmp_path: Path) -> None:
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))  # the socket file exists, nobody accepts on it
        with pytest.raises(EngineUnavailable) as info:
            DockerEngine(base_url=f"unix://{path}")
    assert info.value.message == f"no Docker engine at unix://{path}: Connection refused"
    assert info.value.exit_code == 3


def test_no_engine_at_docker_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line's engine is the one $DOCKER_HOST names, as for the docker CLI, and the message names it."""
    from patchkit.cli.common import docker_engine

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/elsewhere.sock")
    with pytest.raises(EngineUnavailable, match=f"^no Docker engine at unix://{tmp_path}/elsewhere.sock: "):
        docker_engine()
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    with pytest.raises(EngineUnavailable, match=r"^no Docker engine at tcp://127\.0\.0\.1:1: Connection refused$"):
        docker_engine()


def test_an_engine_that_never_answers_times_out(tmp_path: Path) -> None:
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        s.listen()  # accepts connections (in the backlog) but never answers
        started = time.monotonic()
        with pytest.raises(EngineUnavailable, match=r": timed out$"):
            DockerEngine(base_url=f"unix://{path}", timeout=0.3)
    assert time.monotonic() - started < 5


# --- against the real engine -------------------------------------------------------------------


@pytest.mark.slow
def test_the_engine_treats_loopback_registries_as_insecure_by_default(dockerd: Dockerd) -> None:
    """Why pulls from the plain-HTTP test registry work without --insecure-registry."""
    assert not any("insecure" in arg for arg in dockerd.argv)
    assert "127.0.0.0/8" in dockerd.client.info()["RegistryConfig"]["InsecureRegistryCIDRs"]
    assert dockerd.client.info()["Driver"] == "vfs"


@pytest.mark.slow
def test_pull_by_digest_records_the_registry_digest(engine: DockerEngine, published: Published) -> None:
    push(published.layout, "v1", f"{published.host}/pk/bydigest:v1")
    digest = registry_digest(f"{published.host}/pk/bydigest:v1")
    ref = f"{published.host}/pk/bydigest@{digest}"
    assert engine.local_digest(ref) is None
    assert engine.image_id(ref) is None

    image_id = engine.pull(ref)

    assert image_id == published.config_digest
    assert engine.image_id(ref) == image_id
    assert engine.local_digest(ref) == f"{published.host}/pk/bydigest@{digest}"
    # As a lockfile writes it: the digest wins, the tag is only a note (it names no local image here).
    pinned = f"{published.host}/pk/bydigest:since-moved@{digest}"
    assert engine.local_digest(pinned) == f"{published.host}/pk/bydigest@{digest}"
    assert engine.read_files(pinned, ["/etc/hello"]) == {"/etc/hello": b"x"}


@pytest.mark.slow
def test_pulling_a_multi_platform_tag_records_the_index_digest(engine: DockerEngine, published: Published) -> None:
    push(published.layout, "multi", f"{published.host}/pk/multi:nightly")
    index_digest = registry_digest(f"{published.host}/pk/multi:nightly")
    index = json.loads(
        run("skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{published.host}/pk/multi:nightly")
    )
    assert len(index["manifests"]) == 2
    native_child = next(m["digest"] for m in index["manifests"] if m["platform"]["architecture"] == published.native)

    image_id = engine.pull(f"{published.host}/pk/multi:nightly", platform=f"linux/{published.native}")

    assert image_id == published.config_digest
    recorded = engine.local_digest(f"{published.host}/pk/multi:nightly")
    assert recorded == f"{published.host}/pk/multi@{index_digest}"
    assert native_child not in recorded  # the index digest, never the platform manifest's


@pytest.mark.slow
def test_a_tag_whose_image_carries_two_digests_is_not_guessed(engine: DockerEngine, published: Published) -> None:
    push(published.layout, "multi", f"{published.host}/pk/twice:nightly")
    index = json.loads(
        run("skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{published.host}/pk/twice:nightly")
    )
    child = next(m["digest"] for m in index["manifests"] if m["platform"]["architecture"] == published.native)
    engine.pull(f"{published.host}/pk/twice:nightly")
    engine.pull(f"{published.host}/pk/twice@{child}")  # same image, a second digest of the repository

    assert engine.local_digest(f"{published.host}/pk/twice@{child}") == f"{published.host}/pk/twice@{child}"
    with pytest.raises(BadInput, match="carries 2 digests of") as info:
        engine.local_digest(f"{published.host}/pk/twice:nightly")
    assert info.value.hint is not None
    assert "by digest" in info.value.hint


@pytest.mark.slow
def test_pull_without_a_tag_pulls_latest_and_no_other_tag(
    engine: DockerEngine, published: Published, dockerd: Dockerd
) -> None:
    for tag in ("latest", "other", "third"):
        push(published.layout, "v1", f"{published.host}/pk/tags:{tag}")

    image_id = engine.pull(f"{published.host}/pk/tags")

    tags = dockerd.client.images.get(image_id).attrs["RepoTags"]
    assert f"{published.host}/pk/tags:latest" in tags
    assert not [t for t in tags if t.startswith(f"{published.host}/pk/tags:") and not t.endswith(":latest")]


@pytest.mark.slow
def test_pull_of_a_missing_tag_is_one_clear_error(engine: DockerEngine, published: Published) -> None:
    with pytest.raises(SourceError) as info:
        engine.pull(f"{published.host}/pk/engine:no-such-tag")
    e = info.value
    assert e.exit_code == EXIT_EXTERNAL
    assert e.message.startswith(f"docker pull {published.host}/pk/engine:no-such-tag: ")
    assert "manifest unknown" in e.message
    assert "\n" not in e.message
    assert not isinstance(e, EngineUnavailable)  # the engine answered; the registry had nothing


@pytest.mark.slow
def test_read_files_returns_exact_bytes_from_the_top_layer(
    engine: DockerEngine, published: Published, dockerd: Dockerd
) -> None:
    ref = f"{published.host}/pk/engine:v1"
    engine.pull(ref)
    # The image has no Entrypoint and no Cmd: a plain containers.create would be refused.
    config = dockerd.client.images.get(ref).attrs["Config"]
    assert not config.get("Entrypoint")
    assert not config.get("Cmd")

    since = f"{time.time():.9f}"
    found = engine.read_files(
        ref,
        [
            "/app/pkg/a.py",  # rewritten by the upper layer
            "/app/pkg/bin.dat",  # CRLF, NUL, non-UTF-8
            "/etc/hello",  # one byte, no newline
            "/opt/big.bin",  # 3 MiB, several stream chunks
            "/app/link.py",  # a symlink to pkg/a.py, followed inside the image
            "/app/pkg/old.py",  # whited out by the upper layer
            "/app/missing.py",
            "/no/such/dir/file",
            "/app/pkg",  # a directory
        ],
    )

    assert found == {
        "/app/pkg/a.py": A_UPPER,
        "/app/pkg/bin.dat": BINARY,
        "/etc/hello": b"x",
        "/opt/big.bin": BIG,
        "/app/link.py": A_UPPER,
        "/app/pkg/old.py": None,
        "/app/missing.py": None,
        "/no/such/dir/file": None,
        "/app/pkg": None,
    }
    assert leftover_containers(dockerd) == []
    # Created, copied from, destroyed: never started.
    events = dockerd.client.events(since=since, until=f"{time.time():.9f}", decode=True, filters={"type": "container"})
    assert {event["Action"] for event in events} == {"create", "archive-path", "destroy"}


@pytest.mark.slow
def test_read_files_by_image_id_and_without_paths(engine: DockerEngine, published: Published, dockerd: Dockerd) -> None:
    image_id = engine.pull(f"{published.host}/pk/engine:v1")
    assert engine.read_files(image_id, ["/etc/hello", "/etc/hello"]) == {"/etc/hello": b"x"}
    assert engine.read_files(image_id, []) == {}
    assert leftover_containers(dockerd) == []


@pytest.mark.slow
def test_an_oversized_file_is_refused_and_the_container_still_removed(published: Published, dockerd: Dockerd) -> None:
    with DockerEngine(base_url=dockerd.url, max_file_size=1024 * 1024) as small:
        small.pull(f"{published.host}/pk/engine:v1")
        with pytest.raises(BadInput) as info:
            small.read_files(f"{published.host}/pk/engine:v1", ["/etc/hello", "/opt/big.bin"])
        assert info.value.exit_code == EXIT_BAD_INPUT
        assert info.value.message == (
            f"/opt/big.bin in {published.host}/pk/engine:v1 is {len(BIG)} bytes, "
            "over the 1 MiB limit for a file read from an image"
        )
        assert leftover_containers(dockerd) == []
        # The engine connection is still usable after the refused stream was abandoned.
        assert small.read_files(f"{published.host}/pk/engine:v1", ["/etc/hello"]) == {"/etc/hello": b"x"}
    assert leftover_containers(dockerd) == []


@pytest.mark.slow
def test_reading_an_image_that_is_not_there(engine: DockerEngine, dockerd: Dockerd) -> None:
    with pytest.raises(BadInput, match="repository names are lowercase"):
        engine.read_files("PK/Absent:1", ["/etc/hello"])
    with pytest.raises(SourceError) as info:
        engine.read_files("pk/absent:1", ["/etc/hello"])
    assert info.value.exit_code == EXIT_EXTERNAL
    assert info.value.message == f"image pk/absent:1 is not in the Docker engine at {dockerd.url}"
    assert info.value.hint == "pull it first (docker pull), or use --via registry"
    assert leftover_containers(dockerd) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "why"),
    [("etc/hello", "is not an absolute container path"), ("/", "is the root directory"), ("/a\x00b", "NUL")],
)
def test_paths_must_be_absolute(
    engine: DockerEngine, published: Published, dockerd: Dockerd, path: str, why: str
) -> None:
    with pytest.raises(BadInput, match=why):
        engine.read_files(f"{published.host}/pk/engine:v1", ["/etc/hello", path])
    assert leftover_containers(dockerd) == []


@pytest.mark.slow
def test_paths_are_normalised_as_the_registry_path_does(engine: DockerEngine, published: Published) -> None:
    """``/a//b/./c`` is ``/a/b/c`` (and ``..`` stops at the root); results are keyed by the paths as given."""
    ref = f"{published.host}/pk/engine:v1"
    engine.pull(ref)
    given = ["/etc//hello", "/etc/./hello", "/app/../etc/hello", "/../../etc/hello", "/etc/hello/"]
    assert engine.read_files(ref, given) == dict.fromkeys(given, b"x")


@pytest.mark.slow
def test_local_digest_of_images_without_one(engine: DockerEngine, published: Published, dockerd: Dockerd) -> None:
    """None for an absent image and for one only tagged locally (Docker recorded no registry digest for it)."""
    assert engine.local_digest("pk/absent:1") is None
    image_id = engine.pull(f"{published.host}/pk/engine:v1")
    dockerd.client.images.get(image_id).tag("pk/local-only", "1")
    assert engine.image_id("pk/local-only:1") == image_id
    assert engine.local_digest("pk/local-only:1") is None
