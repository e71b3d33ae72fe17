"""The registry client against a real docker-registry, real umoci images and skopeo's view of them.

Failure shapes a real registry cannot be made to produce (500s, a slow answer,
a body cut short on the wire, a manifest that is not JSON, 429) come from the
fake registry in conftest; everything else is the real thing.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import requests
from requests.adapters import HTTPAdapter

from images.conftest import (
    OCI_MANIFEST,
    ClientFactory,
    CountingSession,
    FakeRegistry,
    ImageBuilder,
    RegistryServer,
    Reply,
    TarEntry,
    TestImages,
    TokenRegistry,
    registry_error,
    tar_bytes,
)
from patchkit.core.values import Digest
from patchkit.errors import EXIT_BAD_INPUT, EXIT_EXTERNAL, BadInput
from patchkit.images import registry
from patchkit.images.credentials import parse_challenge
from patchkit.images.errors import RegistryError
from patchkit.oci import layers
from patchkit.oci import manifest as oci
from patchkit.oci.layers import LayerScan, Overlay, decide
from patchkit.oci.manifest import ImageIndex, ImageManifest, Platform, parse_config, parse_manifest, select_platform
from patchkit.oci.ref import DOCKER_HUB, ImageRef

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def docker_config(path: Path, auths: dict[str, tuple[str, str]]) -> Path:
    entries = {k: {"auth": base64.b64encode(f"{u}:{p}".encode()).decode()} for k, (u, p) in auths.items()}
    path.write_text(json.dumps({"auths": entries}))
    return path


# --- references (pure) --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "registry_", "repository", "tag", "digest", "canonical"),
    [
        ("ubuntu", DOCKER_HUB, "library/ubuntu", "latest", None, "docker.io/library/ubuntu:latest"),
        ("ubuntu:22.04", DOCKER_HUB, "library/ubuntu", "22.04", None, "docker.io/library/ubuntu:22.04"),
        ("vllm/vllm-openai-rocm:nightly", DOCKER_HUB, "vllm/vllm-openai-rocm", "nightly", None,
         "docker.io/vllm/vllm-openai-rocm:nightly"),
        ("docker.io/caddy:2", DOCKER_HUB, "library/caddy", "2", None, "docker.io/library/caddy:2"),
        ("index.docker.io/library/caddy", DOCKER_HUB, "library/caddy", "latest", None,
         "docker.io/library/caddy:latest"),
        ("ghcr.io/org/app:v1.2", "ghcr.io", "org/app", "v1.2", None, "ghcr.io/org/app:v1.2"),
        ("localhost/app", "localhost", "app", "latest", None, "localhost/app:latest"),
        ("localhost:5000/app:1", "localhost:5000", "app", "1", None, "localhost:5000/app:1"),
        ("127.0.0.1:5000/a/b/c:t", "127.0.0.1:5000", "a/b/c", "t", None, "127.0.0.1:5000/a/b/c:t"),
        ("[::1]:5000/app:x", "[::1]:5000", "app", "x", None, "[::1]:5000/app:x"),
        ("Registry/app", "Registry", "app", "latest", None, "Registry/app:latest"),
        ("localhost:5000", DOCKER_HUB, "library/localhost", "5000", None, "docker.io/library/localhost:5000"),
        (f"reg.example.com:8443/team/app@{D1}", "reg.example.com:8443", "team/app", None, D1,
         f"reg.example.com:8443/team/app@{D1}"),
        (f"caddy:2@{D1}", DOCKER_HUB, "library/caddy", "2", D1, f"docker.io/library/caddy:2@{D1}"),
        ("a_b__c-d/f.g---h:T_1.x-y", DOCKER_HUB, "a_b__c-d/f.g---h", "T_1.x-y", None,
         "docker.io/a_b__c-d/f.g---h:T_1.x-y"),
    ],
)  # fmt: skip
def test_parse_reference(
    text: str, registry_: str, repository: str, tag: str | None, digest: str | None, canonical: str
) -> None:
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.tag) == (registry_, repository, tag)
    assert ref.digest == (Digest(digest) if digest else None)
    assert str(ref) == canonical
    assert ImageRef.parse(str(ref)) == ref  # the canonical form parses back to itself
    assert ref.reference == (digest or tag)


def test_reference_forms() -> None:
    ref = ImageRef.parse("caddy:2")
    assert ref.familiar == "caddy:2"
    assert ref.name == "docker.io/library/caddy"
    assert ref.display_registry == "docker.io"
    pinned = ref.with_digest(Digest(D1))
    assert str(pinned) == f"docker.io/library/caddy:2@{D1}"
    assert pinned.reference == D1  # the digest wins over the tag
    assert ImageRef.parse("ghcr.io/o/a:1").familiar == "ghcr.io/o/a:1"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("caddy:2", "caddy"),
        ("docker.io/library/caddy", "caddy"),
        ("index.docker.io/vllm/vllm-openai:v0.6", "vllm/vllm-openai"),
        ("rocm/vllm-dev@sha256:" + "a" * 64, "rocm/vllm-dev"),
        ("ghcr.io/library/tool:1", "ghcr.io/library/tool"),
        ("127.0.0.1:5000/team/app:1", "127.0.0.1:5000/team/app"),
        ("localhost/app", "localhost/app"),
    ],
)
def test_display_repository_is_how_compose_writes_it(text: str, shown: str) -> None:
    """Docker Hub names short (no docker.io/, no library/), every other registry with its host and port."""
    assert ImageRef.parse(text).display_repository == shown


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("Ubuntu", "lowercase"),
        ("ubuntu:", "bad tag"),
        ("ubuntu:-x", "bad tag"),
        ("ubuntu@sha256:abc", "64 lowercase hex"),
        (f"ubuntu@{D1.upper()}", "not a digest"),
        ("ubuntu@md5:" + "0" * 32, "not a digest"),
        ("a//b", "bad repository name"),
        ("-a/b", "bad repository name"),
        ("ubuntu:tag with space", "whitespace"),
        (":tag", "bad repository name"),
        ("ghcr.io/", "bad repository name"),
        ("host:abc/app", "bad registry host"),
        ("a_b.c/app", "bad registry host"),
        ("ghcr.io/Org/app", "lowercase"),
        ("ubuntu:caf\u00e9", "bad tag"),  # Docker's tag grammar is ASCII
    ],
)
def test_bad_references(text: str, why: str) -> None:
    with pytest.raises(BadInput) as e:
        ImageRef.parse(text)
    assert why in e.value.message
    assert e.value.exit_code == EXIT_BAD_INPUT
    assert e.value.hint
    assert "\n" not in e.value.message


@pytest.mark.parametrize(
    ("text", "is_tag"),
    [("nightly", True), ("v0.26.1", True), ("_x-1.2", True), ("x" * 128, True), ("x" * 129, False),
     ("", False), ("-v1", False), (".v1", False), ("a:b", False), ("a/b", False), ("caf\u00e9", False),
     ("sha256:" + "1" * 64, False)],
)  # fmt: skip
def test_what_is_a_tag(text: str, is_tag: bool) -> None:
    assert ImageRef.is_tag(text) is is_tag
    if is_tag:
        assert ImageRef.parse(f"ghcr.io/o/r:{text}").tag == text


# --- platforms, manifests, challenges, the overlay (pure) ------------------------------------------


def test_platforms() -> None:
    assert str(Platform.parse("linux/arm64/v8")) == "linux/arm64/v8"
    assert Platform.parse("linux/arm64").matches(Platform("linux", "arm64", "v8"))
    assert Platform.parse("linux/arm64/v8").matches(Platform("linux", "arm64"))
    assert not Platform.parse("linux/arm/v7").matches(Platform("linux", "arm", "v6"))
    assert not Platform.parse("linux/amd64").matches(Platform("windows", "amd64"))
    for bad in ("linux", "linux/", "linux/amd64/v1/x", "Linux/AMD64"):
        with pytest.raises(BadInput, match="not a platform"):
            Platform.parse(bad)


def _index(*entries: tuple[str, dict[str, str]]) -> ImageIndex:
    doc = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": d, "size": 1, "platform": p} for d, p in entries],
    }
    parsed = parse_manifest(json.dumps(doc).encode())
    assert isinstance(parsed, ImageIndex)
    return parsed


def test_select_platform() -> None:
    d3, d4 = "sha256:" + "3" * 64, "sha256:" + "4" * 64
    index = _index(
        (D1, {"os": "linux", "architecture": "arm", "variant": "v6"}),
        (D2, {"os": "linux", "architecture": "arm", "variant": "v7"}),
        (d3, {"os": "linux", "architecture": "arm64", "variant": "v8"}),
        (d4, {"os": "unknown", "architecture": "unknown"}),  # an attestation manifest, as buildx writes
    )
    pick = select_platform
    assert str(pick(index, Platform.parse("linux/arm/v7")).digest) == D2  # type: ignore[union-attr]
    assert str(pick(index, Platform.parse("linux/arm64")).digest) == d3  # type: ignore[union-attr]
    assert str(pick(index, Platform.parse("linux/arm64/v8")).digest) == d3  # type: ignore[union-attr]
    assert pick(index, Platform.parse("linux/amd64")) is None


def test_parse_manifest_shapes() -> None:
    manifest = {
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": D1, "size": 10},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": D2, "size": 20}],
    }
    # no mediaType in the body: the Content-Type header says what it is, else the shape does
    parsed = parse_manifest(json.dumps(manifest).encode(), "application/vnd.docker.distribution.manifest.v2+json")
    assert isinstance(parsed, ImageManifest)
    assert parsed.media_type == "application/vnd.docker.distribution.manifest.v2+json"
    assert [str(x.digest) for x in parsed.layers] == [D2]
    assert parse_manifest(json.dumps(manifest).encode()).media_type == OCI_MANIFEST
    for body, why in [
        (b"<html>", "not JSON"),
        (b"[]", "not a JSON object"),
        (json.dumps({"schemaVersion": 1, "fsLayers": []}).encode(), "schema 1"),
        (json.dumps({"schemaVersion": 2}).encode(), "unknown manifest media type"),
        (json.dumps({**manifest, "layers": [{"mediaType": "x", "digest": "sha256:12", "size": 1}]}).encode(), "64"),
        (json.dumps({**manifest, "config": None}).encode(), "config is not an object"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_manifest(body)
    config = parse_config(json.dumps({"os": "linux", "architecture": "arm64", "rootfs": {"diff_ids": [D1]}}).encode())
    assert str(config.platform) == "linux/arm64"
    assert [str(d) for d in config.diff_ids] == [D1]
    with pytest.raises(ValueError, match="diff_ids"):
        parse_config(b'{"rootfs": {}}')


def test_parse_challenge() -> None:
    c = parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
        'scope="repository:library/ubuntu:pull",error="insufficient_scope"'
    )
    assert c is not None
    assert c.scheme == "bearer"
    assert c.params == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:library/ubuntu:pull",
        "error": "insufficient_scope",
    }
    basic = parse_challenge('Basic realm="basic-realm"')
    assert basic is not None
    assert (basic.scheme, dict(basic.params)) == ("basic", {"realm": "basic-realm"})
    assert parse_challenge("") is None


def test_overlay_decisions() -> None:
    top = LayerScan(
        files={"/a/new.py": b"new"},
        whiteouts={"/a/gone.py", "/b"},
        opaque={"/c"},
        symlinks={"/lib": "/usr/lib"},
    )
    # entries of a layer win over its own whiteouts; whiteouts hide only what is below
    assert decide("/a/new.py", top) == layers.Found(b"new")
    assert decide("/a/gone.py", top) == layers.Absent()
    assert decide("/b/deep/x", top) == layers.Absent()  # under a deleted directory
    assert decide("/c/x", top) == layers.Absent()  # under an opaque directory
    assert decide("/c", top) is None  # the opaque directory itself stays
    assert decide("/lib/python3/x.py", top) == layers.SymlinkTo("/usr/lib/python3/x.py")
    assert decide("/a/other.py", top) is None
    overlay = Overlay(["/a/new.py", "/a/other.py", "/c/x", "/f/x"])
    assert overlay.ancestors() >= {"/", "/a", "/c", "/f"}
    overlay.apply(0, top)
    assert overlay.wanted() == {"/a/other.py", "/f/x"}
    overlay.apply(1, LayerScan(files={"/a/other.py": b"o"}, nondirs={"/f"}))
    assert overlay.done
    assert overlay.results == {"/a/new.py": b"new", "/c/x": None, "/a/other.py": b"o", "/f/x": None}


def test_https_except_loopback_and_insecure(make_client: ClientFactory, counting_session: CountingSession) -> None:
    """Plain HTTP only for loopback registries and those named insecure; HTTPS to everything else."""

    class Refuse(HTTPAdapter):
        def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            counting_session.sent.append((str(request.method), str(request.url)))
            raise requests.ConnectionError("refused by the test")

    counting_session.session.mount("http://", Refuse())
    counting_session.session.mount("https://", Refuse())
    client = make_client(insecure=["build-cache.internal:5000"], retries=0)
    for ref in ("127.0.0.1:5000/a", "localhost:5000/a", "[::1]:5000/a", "127.9.9.9/a", "registry.example.com/a",
                "build-cache.internal:5000/a", "ghcr.io/o/a", "ubuntu"):  # fmt: skip
        with pytest.raises(RegistryError, match="cannot connect") as e:
            client.resolve(ref)
        assert e.value.exit_code == EXIT_EXTERNAL
    schemes = [url.split("://")[0] + "://" + url.split("://")[1].split("/")[0] for _, url in counting_session.sent]
    assert schemes == [
        "http://127.0.0.1:5000", "http://localhost:5000", "http://[::1]:5000", "http://127.9.9.9",
        "https://registry.example.com", "http://build-cache.internal:5000", "https://ghcr.io",
        "https://registry-1.docker.io",
    ]  # fmt: skip


# --- resolving against the real registry ------------------------------------------------------------


def test_resolve_single_platform_matches_skopeo(
    oci_image: TestImages, registry_server: RegistryServer, make_client: ClientFactory
) -> None:
    r = make_client().resolve(oci_image.single)
    raw = registry_server.inspect_raw(oci_image.single)
    assert str(r.digest) == sha(raw) == registry_server.inspect(oci_image.single)["Digest"] == oci_image.single_digest
    assert r.platform_digest == r.digest
    assert (r.media_type, r.platform, r.is_index) == (OCI_MANIFEST, "linux/amd64", False)
    assert str(r.pinned) == f"{oci_image.single}@{r.digest}"


def test_resolve_index_matches_skopeo(
    oci_image: TestImages, registry_server: RegistryServer, make_client: ClientFactory
) -> None:
    client = make_client()
    raw = registry_server.inspect_raw(oci_image.multi)
    children = {
        f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in json.loads(raw)["manifests"]
    }
    amd, arm = client.resolve(oci_image.multi), client.resolve(oci_image.multi, platform="linux/arm64")
    for r in (amd, arm):
        assert str(r.digest) == sha(raw) == oci_image.index_digest
        assert r.is_index
        assert r.media_type == "application/vnd.oci.image.index.v1+json"
    assert str(amd.platform_digest) == children["linux/amd64"] == oci_image.single_digest
    assert str(arm.platform_digest) == children["linux/arm64"] == oci_image.arm64_digest
    assert (amd.platform, arm.platform) == ("linux/amd64", "linux/arm64")
    # skopeo's Digest is the top-level one whatever the platform
    assert registry_server.inspect(oci_image.multi, "--override-arch", "arm64")["Digest"] == str(arm.digest)
    # the child, pinned by digest, is a single-platform manifest of its own
    child = client.resolve(f"{oci_image.multi.split(':v1')[0]}@{arm.platform_digest}", platform="linux/arm64")
    assert child.digest == child.platform_digest == arm.platform_digest


def test_resolve_by_digest_wins_over_tag(oci_image: TestImages, make_client: ClientFactory) -> None:
    repo = oci_image.multi.rsplit(":", 1)[0]
    r = make_client().resolve(f"{repo}:no-such-tag@{oci_image.index_digest}")
    assert str(r.digest) == oci_image.index_digest
    assert r.ref.tag == "no-such-tag"  # kept for information; never asked for


def test_resolve_missing_platform(oci_image: TestImages, make_client: ClientFactory) -> None:
    client = make_client()
    with pytest.raises(BadInput, match=r"has no linux/s390x image \(it has linux/amd64, linux/arm64\)"):
        client.resolve(oci_image.multi, platform="linux/s390x")
    with pytest.raises(BadInput, match="single-platform linux/amd64 image, not linux/arm64"):
        client.resolve(oci_image.single, platform="linux/arm64")


def test_missing_tag_and_repository(
    oci_image: TestImages, registry_server: RegistryServer, make_client: ClientFactory
) -> None:
    client = make_client()
    repo = oci_image.single.rsplit(":", 1)[0]
    with pytest.raises(RegistryError) as e:
        client.resolve(f"{repo}:no-such-tag")
    assert e.value.status == 404
    assert e.value.exit_code == EXIT_EXTERNAL
    assert "404" in e.value.message
    assert "MANIFEST_UNKNOWN" in e.value.message
    assert f"{repo}:no-such-tag" in e.value.message
    assert "skopeo list-tags" in (e.value.hint or "")
    with pytest.raises(RegistryError, match="404 not found") as e:
        client.resolve(f"{registry_server.host}/no/such-repo:v1")
    assert e.value.status == 404
    assert client.exists(oci_image.single)
    assert client.exists(f"{repo}@{oci_image.single_digest}")
    assert not client.exists(f"{repo}:no-such-tag")


# --- reading files ----------------------------------------------------------------------------------


def test_read_files_across_layers(oci_image: TestImages, make_client: ClientFactory) -> None:
    """Top wins, whiteouts delete, opaque directories hide, links are followed, absent and directories are None."""
    expected = TestImages.expected("linux/amd64")
    assert make_client().read_files(oci_image.single, list(expected)) == expected


def test_each_platform_reads_its_own_files(oci_image: TestImages, make_client: ClientFactory) -> None:
    client = make_client()
    for platform in ("linux/amd64", "linux/arm64"):
        expected = TestImages.expected(platform)
        assert client.read_files(oci_image.multi, list(expected), platform=platform) == expected
    resolved = client.resolve(oci_image.multi, platform="linux/arm64")
    # a Resolved carries its platform: the argument does not override it
    assert client.read_files(resolved, ["/app/lib/a.py"], platform="linux/amd64") == {"/app/lib/a.py": b"A = 'arm64'\n"}


def test_stops_downloading_once_everything_is_found(
    oci_image: TestImages, make_client: ClientFactory, counting_session: CountingSession
) -> None:
    client = make_client()
    resolved = client.resolve(oci_image.single)
    manifest = json.loads(Path(oci_image.layout, "blobs/sha256", resolved.digest.hex).read_bytes())
    layers = [x["digest"] for x in manifest["layers"]]
    assert len(layers) == oci_image.layers == 4

    counting_session.sent.clear()
    assert client.read_files(resolved, ["/app/top.txt"]) == {"/app/top.txt": b"top\n"}
    fetched = [d for d in counting_session.blob_gets() if d in layers]
    assert fetched == [layers[-1]]  # only the top layer, though the image has four

    counting_session.sent.clear()
    assert client.read_files(resolved, ["/app/mid.txt", "/app/gone.txt"]) == {
        "/app/mid.txt": b"mid\n",
        "/app/gone.txt": None,  # deleted by the same layer's whiteout: nothing below is read
    }
    assert [d for d in counting_session.blob_gets() if d in layers] == layers[::-1][:3]

    counting_session.sent.clear()
    assert client.read_files(resolved, ["/etc/os-release"]) == {"/etc/os-release": b"ID=patchkit-test\n"}
    assert [d for d in counting_session.blob_gets() if d in layers] == layers[::-1]


def test_paths_are_normalised_and_keyed_as_given(oci_image: TestImages, make_client: ClientFactory) -> None:
    client = make_client()
    got = client.read_files(oci_image.single, ["/app//lib/./a.py", "/app/x/../top.txt"])
    assert got == {"/app//lib/./a.py": b"A = 2\n", "/app/x/../top.txt": b"top\n"}
    with pytest.raises(BadInput, match="not an absolute container path"):
        client.read_files(oci_image.single, ["app/lib/a.py"])
    assert client.read_files(oci_image.single, []) == {}


def test_uncompressed_layers(
    oci_image: TestImages, image_builder: ImageBuilder, registry_server: RegistryServer, make_client: ClientFactory
) -> None:
    ref = registry_server.put_dir(image_builder.convert("amd64", "--dest-decompress"), "patchkit/layers-tar:v1")
    raw = json.loads(registry_server.inspect_raw(ref))
    assert {x["mediaType"] for x in raw["layers"]} == {"application/vnd.oci.image.layer.v1.tar"}
    expected = TestImages.expected()
    assert make_client().read_files(ref, list(expected)) == expected


def test_zstd_layers_are_refused_clearly(
    oci_image: TestImages, image_builder: ImageBuilder, registry_server: RegistryServer, make_client: ClientFactory
) -> None:
    source = image_builder.convert("amd64", "--dest-compress", "--dest-compress-format", "zstd")
    ref = registry_server.push(f"dir:{source}", "patchkit/layers-zstd:v1")
    with pytest.raises(RegistryError, match=r"application/vnd\.oci\.image\.layer\.v1\.tar\+zstd") as e:
        make_client().read_files(ref, ["/app/top.txt"])
    assert "zstandard" in e.value.message
    assert e.value.hint


# --- tampered and truncated blobs in the real registry --------------------------------------------


def _unique_image(image_builder: ImageBuilder, registry_server: RegistryServer, name: str) -> tuple[str, str]:
    """An image whose top layer no other image shares (random content); its reference and top layer digest."""
    image_builder.new(name)
    image_builder.repack(name, {"/base.txt": b"base\n"})
    image_builder.repack(name, {"/data/random.bin": os.urandom(200_000), "/data/small.txt": b"small\n"})
    ref = registry_server.push(image_builder.ref(name), f"patchkit/{name}:v1")
    return ref, image_builder.manifest(name)["layers"][-1]["digest"]


def test_blob_with_wrong_content_is_refused(
    image_builder: ImageBuilder, registry_server: RegistryServer, make_client: ClientFactory
) -> None:
    ref, top = _unique_image(image_builder, registry_server, "tampered")
    blob = registry_server.blob_path(top)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 16] = os.urandom(16)  # same size, different bytes
    blob.write_bytes(bytes(data))
    with pytest.raises(RegistryError) as e:
        make_client().read_files(ref, ["/data/small.txt"])
    assert top in e.value.message
    assert "not to its digest; refusing it" in e.value.message
    assert e.value.exit_code == EXIT_EXTERNAL


def test_truncated_blob_is_refused(
    image_builder: ImageBuilder, registry_server: RegistryServer, make_client: ClientFactory
) -> None:
    ref, top = _unique_image(image_builder, registry_server, "truncated")
    blob = registry_server.blob_path(top)
    size = blob.stat().st_size
    blob.write_bytes(blob.read_bytes()[: size // 2])
    with pytest.raises(RegistryError, match=rf"{top}.*truncated: the body ended after {size // 2} of {size} bytes"):
        make_client().read_files(ref, ["/data/small.txt"])


# --- Basic auth (htpasswd) ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def basic_image(oci_image: TestImages, image_builder: ImageBuilder, auth_registry_server: RegistryServer) -> str:
    return auth_registry_server.push(image_builder.ref("amd64"), "patchkit/private:v1")


def test_basic_auth_401_then_docker_config(
    basic_image: str, auth_registry_server: RegistryServer, make_client: ClientFactory, tmp_path: Path
) -> None:
    host = auth_registry_server.host
    with pytest.raises(RegistryError) as e:
        make_client().resolve(basic_image)
    assert e.value.status == 401
    assert "401 authentication required" in e.value.message
    assert f"no credentials for {host}" in e.value.message
    assert f"docker login {host}" in (e.value.hint or "")

    wrong = docker_config(tmp_path / "wrong.json", {host: ("patchkit", "not-the-password")})
    with pytest.raises(RegistryError, match="were refused"):
        make_client(docker_config=wrong).resolve(basic_image)

    assert auth_registry_server.username is not None
    assert auth_registry_server.password is not None
    creds = (auth_registry_server.username, auth_registry_server.password)
    for key in (host, f"http://{host}/v2/"):  # both spellings docker login writes
        config = docker_config(tmp_path / "config.json", {key: creds})
        client = make_client(docker_config=config)
        r = client.resolve(basic_image)
        assert str(r.digest) == sha(auth_registry_server.inspect_raw(basic_image))
        assert client.read_files(r, ["/app/top.txt"]) == {"/app/top.txt": b"top\n"}


def test_docker_config_problems(basic_image: str, make_client: ClientFactory, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BadInput, match=r"bad\.json: .* is not JSON"):
        make_client(docker_config=bad).resolve(basic_image)
    host = basic_image.split("/", maxsplit=1)[0]
    helper = tmp_path / "helper.json"
    helper.write_text(json.dumps({"auths": {host: {}}, "credsStore": "pk-absent"}))
    with pytest.raises(
        RegistryError, match="credential store 'pk-absent' gave none: docker-credential-pk-absent is not installed"
    ):
        make_client(docker_config=helper).resolve(basic_image)


def credential_helper(bin_dir: Path, name: str, entries: dict[str, tuple[str, str]]) -> None:
    """A real ``docker-credential-NAME`` on PATH, speaking the helper protocol: ``get`` reads a server URL on stdin."""
    bin_dir.mkdir(exist_ok=True)
    table = {server: {"ServerURL": server, "Username": u, "Secret": p} for server, (u, p) in entries.items()}
    script = bin_dir / f"docker-credential-{name}"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"table = {table!r}\n"
        "assert sys.argv[1] == 'get', sys.argv\n"
        "server = sys.stdin.read().strip()\n"
        "if server not in table:\n"
        "    print('credentials not found in native keychain')\n"
        "    sys.exit(1)\n"
        "print(json.dumps(table[server]))\n"
    )
    script.chmod(0o755)


def test_credentials_from_a_credential_helper_and_store(
    basic_image: str,
    auth_registry_server: RegistryServer,
    make_client: ClientFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = auth_registry_server.host
    assert auth_registry_server.username is not None
    assert auth_registry_server.password is not None
    bin_dir = tmp_path / "bin"
    credential_helper(bin_dir, "pk-good", {host: (auth_registry_server.username, auth_registry_server.password)})
    credential_helper(bin_dir, "pk-wrong", {host: ("patchkit", "not-the-password")})
    credential_helper(bin_dir, "pk-empty", {})
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"credHelpers": {host: "pk-good"}}))
    client = make_client(docker_config=config)
    r = client.resolve(basic_image)
    assert str(r.digest) == sha(auth_registry_server.inspect_raw(basic_image))
    assert client.read_files(r, ["/app/top.txt"]) == {"/app/top.txt": b"top\n"}

    # docker login with a credsStore writes an empty auths entry; the store holds the secret.
    config.write_text(json.dumps({"auths": {host: {}}, "credsStore": "pk-good"}))
    assert str(make_client(docker_config=config).resolve(basic_image).digest) == str(r.digest)

    config.write_text(json.dumps({"credHelpers": {host: "pk-wrong"}}))
    with pytest.raises(RegistryError, match=f"the credentials the credential helper 'pk-wrong' gave for {host} were"):
        make_client(docker_config=config).resolve(basic_image)

    config.write_text(json.dumps({"credHelpers": {host: "pk-empty"}}))
    with pytest.raises(RegistryError, match=f"the credential helper 'pk-empty' gave none: no entry for {host}"):
        make_client(docker_config=config).resolve(basic_image)


# --- Bearer tokens (a real registry with auth: token, and a local token server) ---------------------


@pytest.fixture(scope="module")
def token_images(
    oci_image: TestImages, image_builder: ImageBuilder, token_registry_server: TokenRegistry
) -> dict[str, str]:
    return {
        "public": token_registry_server.push(image_builder.ref("amd64"), "public/app:v1"),
        "private": token_registry_server.push(image_builder.ref("amd64"), "private/app:v1"),
    }


def test_anonymous_token_flow_and_reuse(
    token_images: dict[str, str], token_registry_server: TokenRegistry, make_client: ClientFactory
) -> None:
    tokens = token_registry_server.tokens
    raw = token_registry_server.inspect_raw(token_images["public"])
    tokens.requests.clear()
    client = make_client()
    r = client.resolve(token_images["public"])
    assert str(r.digest) == sha(raw)
    assert client.read_files(r, ["/app/lib/a.py"]) == {"/app/lib/a.py": b"A = 2\n"}
    assert len(tokens.requests) == 1  # one token for the manifest, config and every layer
    asked = tokens.requests[0]
    assert asked["authorization"] is None
    assert asked["query"]["scope"] == ["repository:public/app:pull"]
    assert asked["query"]["service"] == [tokens.service]


def test_token_expiry(
    token_images: dict[str, str],
    token_registry_server: TokenRegistry,
    make_client: ClientFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tokens = token_registry_server.tokens
    clock = [1000.0]
    monkeypatch.setattr(registry, "_now", lambda: clock[0])
    client = make_client()
    tokens.requests.clear()
    monkeypatch.setattr(tokens, "expires_in", None)  # the spec's default: 60 s
    client.resolve(token_images["public"])
    clock[0] += 30
    client.resolve(token_images["public"])
    assert len(tokens.requests) == 1  # still valid
    clock[0] += 30
    client.resolve(token_images["public"])
    assert len(tokens.requests) == 2  # expired after 60 s (refreshed a little early)


def test_access_token_answer(
    token_images: dict[str, str],
    token_registry_server: TokenRegistry,
    make_client: ClientFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(token_registry_server.tokens, "field", "access_token")  # the OAuth2 spelling
    raw = token_registry_server.inspect_raw(token_images["public"])
    token_registry_server.tokens.requests.clear()
    assert str(make_client().resolve(token_images["public"]).digest) == sha(raw)
    assert len(token_registry_server.tokens.requests) == 1  # the token was taken from "access_token"


def test_private_repository_needs_credentials_at_the_token_server(
    token_images: dict[str, str], token_registry_server: TokenRegistry, make_client: ClientFactory, tmp_path: Path
) -> None:
    tokens = token_registry_server.tokens
    with pytest.raises(RegistryError) as e:
        make_client().resolve(token_images["private"])
    assert e.value.status == 401
    assert "insufficient_scope" in e.value.message

    wrong = docker_config(tmp_path / "wrong.json", {token_registry_server.host: ("patchkit", "nope")})
    with pytest.raises(RegistryError, match=r"token for .*: 401 incorrect username or password") as e:
        make_client(docker_config=wrong).resolve(token_images["private"])
    assert e.value.hint

    config = docker_config(tmp_path / "config.json", {token_registry_server.host: (tokens.username, tokens.password)})
    raw = token_registry_server.inspect_raw(token_images["private"])
    tokens.requests.clear()
    client = make_client(docker_config=config)
    r = client.resolve(token_images["private"])
    assert str(r.digest) == sha(raw)
    assert client.read_files(r, ["/app/top.txt"]) == {"/app/top.txt": b"top\n"}
    basic = "Basic " + base64.b64encode(f"{tokens.username}:{tokens.password}".encode()).decode()
    assert [t["authorization"] for t in tokens.requests] == [basic]
    assert tokens.requests[0]["query"]["account"] == [tokens.username]


# --- failure shapes (the fake registry) -----------------------------------------------------------


def _serve_image(
    fake: FakeRegistry, repo: str, tag: str, layers: list[bytes], *, gzip_layers: bool = True
) -> dict[str, Any]:
    """Put a small image on the fake registry: layers are uncompressed tars, bottom first."""
    blobs = [gzip.compress(t, mtime=0) if gzip_layers else t for t in layers]
    layer_type = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gzip_layers else "")
    config = json.dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [sha(t) for t in layers]}}
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": sha(config),
                "size": len(config),
            },
            "layers": [{"mediaType": layer_type, "digest": sha(b), "size": len(b)} for b in blobs],
        }
    ).encode()
    fake.route("GET", f"/v2/{repo}/manifests/{tag}", Reply(body=manifest, headers={"Content-Type": OCI_MANIFEST}))
    fake.route(
        "GET", f"/v2/{repo}/manifests/{sha(manifest)}", Reply(body=manifest, headers={"Content-Type": OCI_MANIFEST})
    )
    fake.route("GET", f"/v2/{repo}/blobs/{sha(config)}", Reply(body=config))
    for b in blobs:
        fake.route("GET", f"/v2/{repo}/blobs/{sha(b)}", Reply(body=b))
    return {"manifest": manifest, "config": config, "blobs": blobs}


def test_accept_header_on_get_and_head(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    _serve_image(fake_registry, "t/app", "v1", [tar_bytes([TarEntry("/x", b"x")])])
    client = make_client()
    client.resolve(f"{fake_registry.host}/t/app:v1")
    client.exists(f"{fake_registry.host}/t/app:v1")
    accepts = {m: h.get("Accept", "") for m, p, h in fake_registry.requests if "/manifests/" in p}
    for method in ("GET", "HEAD"):
        assert accepts[method].split(", ") == list(oci.MANIFEST_MEDIA_TYPES)


def test_server_errors_are_retried_then_reported(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    body = registry_error("UNKNOWN", "storage backend unavailable")
    fake_registry.route("GET", "/v2/t/app/manifests/v1", Reply(500, body))
    with pytest.raises(RegistryError) as e:
        make_client(retries=2).resolve(f"{fake_registry.host}/t/app:v1")
    assert e.value.status == 500
    assert "500 Internal Server Error after 3 attempts (UNKNOWN: storage backend unavailable)" in e.value.message
    assert len(fake_registry.requests) == 3

    fake_registry.requests.clear()
    served = _serve_image(fake_registry, "t/ok", "v1", [tar_bytes([TarEntry("/x", b"x")])])
    fake_registry.route(
        "GET",
        "/v2/t/ok/manifests/v1",
        Reply(503),
        Reply(body=served["manifest"], headers={"Content-Type": OCI_MANIFEST}),
    )
    assert str(make_client(retries=1).resolve(f"{fake_registry.host}/t/ok:v1").digest) == sha(served["manifest"])


def test_client_errors_are_not_retried(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    fake_registry.route(
        "GET", "/v2/t/app/manifests/v1", Reply(403, registry_error("DENIED", "requested access denied"))
    )
    with pytest.raises(RegistryError, match=r"403 Forbidden .*DENIED: requested access denied"):
        make_client(retries=3).resolve(f"{fake_registry.host}/t/app:v1")
    assert len(fake_registry.requests) == 1


def test_slow_registry_times_out(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    fake_registry.route("GET", "/v2/t/app/manifests/v1", Reply(200, b"{}", delay=2.0))
    with pytest.raises(RegistryError, match=r"t/app:v1: timed out \(tried 2 times\)") as e:
        make_client(timeout=0.3, retries=1).resolve(f"{fake_registry.host}/t/app:v1")
    assert "try again later" in (e.value.hint or "")


def test_rate_limit_is_reported_with_its_headers(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    fake_registry.route(
        "GET",
        "/v2/library/app/manifests/v1",
        Reply(
            429,
            registry_error("TOOMANYREQUESTS", "You have reached your pull rate limit."),
            headers={"ratelimit-limit": "100;w=21600", "ratelimit-remaining": "0;w=21600"},
        ),
    )
    with pytest.raises(RegistryError) as e:
        make_client(retries=3).resolve(f"{fake_registry.host}/library/app:v1")
    assert e.value.status == 429
    assert "ratelimit-limit: 100;w=21600, ratelimit-remaining: 0;w=21600" in e.value.message
    assert "TOOMANYREQUESTS" in e.value.message
    assert len(fake_registry.requests) == 1  # a 429 is not retried


def test_manifest_that_is_not_json(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    fake_registry.route(
        "GET", "/v2/t/app/manifests/v1", Reply(200, b"<html>maintenance</html>", {"Content-Type": "text/html"})
    )
    with pytest.raises(RegistryError, match=r"t/app@sha256:[0-9a-f]{64}: the manifest is not JSON") as e:
        make_client().resolve(f"{fake_registry.host}/t/app:v1")
    assert e.value.exit_code == EXIT_EXTERNAL


def test_manifest_not_matching_the_digest_asked_for(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    served = _serve_image(fake_registry, "t/app", "v1", [tar_bytes([TarEntry("/x", b"x")])])
    fake_registry.route("GET", f"/v2/t/app/manifests/{D1}", Reply(body=served["manifest"]))
    with pytest.raises(RegistryError, match=rf"hashes to {sha(served['manifest'])}, not to the digest asked for"):
        make_client().resolve(f"{fake_registry.host}/t/app@{D1}")


def test_oversized_manifest_is_refused(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    fake_registry.route("GET", "/v2/t/app/manifests/v1", Reply(200, b" " * (registry.MAX_DOCUMENT_BYTES + 1)))
    with pytest.raises(RegistryError, match="over the 4 MiB limit"):
        make_client().resolve(f"{fake_registry.host}/t/app:v1")


def test_body_cut_short_on_the_wire(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    served = _serve_image(fake_registry, "t/app", "v1", [tar_bytes([TarEntry("/x", os.urandom(50_000))])])
    blob = served["blobs"][0]
    fake_registry.route("GET", f"/v2/t/app/blobs/{sha(blob)}", Reply(body=blob, send=len(blob) // 3))
    with pytest.raises(
        RegistryError, match=rf"layer {sha(blob)} .*broke off after .* of {len(blob)} bytes.*tried 2 times"
    ):
        make_client(retries=1).read_files(f"{fake_registry.host}/t/app:v1", ["/x"])


def test_layer_checks(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    """diff_ids are checked; a blob with the right digest that is not gzip is reported as such."""
    layer = tar_bytes([TarEntry("/x", b"x")])
    served = _serve_image(fake_registry, "t/app", "v1", [layer])
    config = json.loads(served["config"])
    config["rootfs"]["diff_ids"] = [D1]
    _rewire_config(fake_registry, "t/app", served, json.dumps(config).encode())
    with pytest.raises(
        RegistryError, match=rf"uncompressed layer hashes to {sha(layer)}, but the image config's diff_id is {D1}"
    ):
        make_client().read_files(f"{fake_registry.host}/t/app:v1", ["/x"])

    not_gzip = b"this is not gzip" * 10
    served = _serve_image(fake_registry, "t/bad", "v1", [layer])
    manifest = json.loads(served["manifest"])
    manifest["layers"][0].update(digest=sha(not_gzip), size=len(not_gzip))
    body = json.dumps(manifest).encode()
    fake_registry.route("GET", "/v2/t/bad/manifests/v1", Reply(body=body))
    fake_registry.route("GET", f"/v2/t/bad/blobs/{sha(not_gzip)}", Reply(body=not_gzip))
    with pytest.raises(RegistryError, match=r"cannot be read as a tar archive: not a valid gzip stream"):
        make_client().read_files(f"{fake_registry.host}/t/bad:v1", ["/x"])


def _rewire_config(fake: FakeRegistry, repo: str, served: dict[str, Any], config: bytes) -> None:
    manifest = json.loads(served["manifest"])
    manifest["config"].update(digest=sha(config), size=len(config))
    body = json.dumps(manifest).encode()
    fake.route("GET", f"/v2/{repo}/manifests/v1", Reply(body=body, headers={"Content-Type": OCI_MANIFEST}))
    fake.route("GET", f"/v2/{repo}/blobs/{sha(config)}", Reply(body=config))


def test_links_and_limits(fake_registry: FakeRegistry, make_client: ClientFactory) -> None:
    """Hard links read from their own layer; symlink loops and oversized files are refused."""
    lower = tar_bytes([TarEntry("/etc", kind="dir"), TarEntry("/etc/real", b"real\n"), TarEntry("/big", b"b" * 2000)])
    upper = tar_bytes(
        [
            TarEntry("/etc/alias", kind="hardlink", target="etc/real"),
            TarEntry("/loop/a", kind="symlink", target="b"),
            TarEntry("/loop/b", kind="symlink", target="/loop/a"),
            TarEntry("/abs", kind="symlink", target="/etc/../etc/real"),
            TarEntry("/dangling", kind="symlink", target="nowhere"),
        ]
    )
    _serve_image(fake_registry, "t/links", "v1", [lower, upper], gzip_layers=False)
    ref = f"{fake_registry.host}/t/links:v1"
    client = make_client()
    assert client.read_files(ref, ["/abs", "/dangling", "/etc"]) == {"/abs": b"real\n", "/dangling": None, "/etc": None}
    with pytest.raises(
        RegistryError, match=r"/etc/alias is a hard link to /etc/real, which is not a regular file in the same layer"
    ):
        client.read_files(ref, ["/etc/alias"])
    with pytest.raises(RegistryError, match="symbolic link loop: /loop/a -> /loop/b -> /loop/a"):
        client.read_files(ref, ["/loop/a"])
    with pytest.raises(BadInput, match=r"/big in layer .* is 2000 bytes, over the"):
        make_client(max_file_size=1000).read_files(ref, ["/big"])


# --- memory -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_memory_stays_small_with_a_large_layer(
    image_builder: ImageBuilder, registry_server: RegistryServer, tmp_path: Path
) -> None:
    """Reading a small file from behind a 300 MB layer of random data keeps the peak RSS growth small."""
    size = 300 << 20
    big = tmp_path / "big.tar"
    with big.open("wb") as f:
        import tarfile

        with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tf:
            info = tarfile.TarInfo("data/big.bin")
            info.size = size

            class Random:
                left = size

                def read(self, n: int) -> bytes:
                    chunk = os.urandom(min(n, self.left, 4 << 20))
                    self.left -= len(chunk)
                    return chunk

            tf.addfile(info, Random())  # type: ignore[arg-type]
            small = tarfile.TarInfo("data/small.txt")
            small.size = 6
            tf.addfile(small, __import__("io").BytesIO(b"small\n"))
    image_builder.new("big")
    image_builder.add_layer("big", big)
    big.unlink()
    image_builder.repack("big", {"/top.txt": b"top\n"})
    ref = registry_server.push(image_builder.ref("big"), "patchkit/big:v1")

    # Peak RSS is read as VmHWM: ru_maxrss of a child also counts the RSS of the pytest process it
    # was forked from (Linux keeps the larger of the pre-exec and post-exec peaks).
    script = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        import requests
        from patchkit.images.registry import RegistryClient

        def status(key):
            line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(key + ":"))
            return int(line.split()[1])  # KiB

        session = requests.Session()
        session.trust_env = False
        client = RegistryClient(docker_config=Path({str(tmp_path / "none.json")!r}), session=session)
        resolved = client.resolve({ref!r})
        before = status("VmRSS")
        got = client.read_files(resolved, ["/data/small.txt"])
        print(json.dumps({{"got": got["/data/small.txt"].decode(), "before": before, "peak": status("VmHWM")}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr.decode()
    result = json.loads(out.stdout)
    assert result["got"] == "small\n"
    growth_mib = (result["peak"] - result["before"]) / 1024
    assert growth_mib < 16, f"peak RSS grew by {growth_mib:.1f} MiB reading past a 300 MiB layer"
