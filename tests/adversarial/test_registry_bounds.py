"""A hostile registry: bounds come from patchkit, never from what the registry declares.

Fake registries on 127.0.0.x, each bounded to a few seconds:

- a layer that declares 2^50 bytes and drips ends at the first deadline, one
  that streams fast forever at the cap (both set small here);
- credentials (Basic, Bearer) go only to the registry's origin: not to an
  upload ``Location`` on another host, not across a redirect to another
  port, and a challenge from elsewhere is not followed with them;
- a blob longer than its descriptor is refused after its descriptor's size
  (bytes served counted, peak memory measured in a child process);
- a bundle with many referrers: at most ``MAX_REFERRERS`` considered, each
  signature checked before the next is fetched.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from patchkit.core.values import Digest
from patchkit.errors import Refused
from patchkit.images.errors import RegistryError
from patchkit.images.registry import RegistryClient
from patchkit.oci.manifest import Descriptor
from patchkit.oci.ref import ImageRef
from patchkit.ship import artifact
from tests.conftest import Invoke

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
TAR_LAYER = "application/vnd.oci.image.layer.v1.tar"
USER, SECRET = "alice", "s3cret-registry-password"
TOKEN = "t0ken-for-the-registry-only"
BASIC = "Basic " + base64.b64encode(f"{USER}:{SECRET}".encode()).decode()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Seen:
    """One request a fake server received."""

    method: str
    path: str
    authorization: str | None


Route = Callable[["Handler"], None]


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _any(self) -> None:
        fake = self.server.fake
        path = self.path.split("?")[0]
        fake.seen.append(Seen(self.command, path, self.headers.get("Authorization")))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        route = fake.routes.get((self.command, path)) or fake.routes.get((self.command, "*"))
        if route is None:
            self.reply(404, b'{"errors": [{"code": "NOT_FOUND"}]}')
        else:
            route(self)

    def do_GET(self) -> None:
        self._any()

    def do_HEAD(self) -> None:
        self._any()

    def do_POST(self) -> None:
        self._any()

    def do_PUT(self) -> None:
        self._any()

    def reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        """Answer with ``body`` (its length declared unless ``headers`` says otherwise)."""
        self.send_response(status)
        sent = {"Content-Length": str(len(body)), **(headers or {})}
        for k, v in sent.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: Fake


@dataclass
class Fake:
    """An HTTP server on ``host`` answering ``routes[(METHOD, path)]``, recording every request."""

    host: str = "127.0.0.1"
    routes: dict[tuple[str, str], Route] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    served: int = 0  # body bytes the routes that count them managed to send

    def __post_init__(self) -> None:
        self.server = Server((self.host, 0), Handler)
        self.server.fake = self
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fakes() -> Iterator[Callable[[str], Fake]]:
    made: list[Fake] = []

    def make(host: str = "127.0.0.1") -> Fake:
        made.append(Fake(host))
        return made[-1]

    yield make
    for f in made:
        f.close()


def docker_config(tmp_path: Path, registry: Fake) -> Path:
    path = tmp_path / "docker-config.json"
    path.write_text(
        json.dumps({"auths": {registry.netloc: {"auth": base64.b64encode(f"{USER}:{SECRET}".encode()).decode()}}})
    )
    return path


def guarded(registry: Fake, scheme: str, route: Route) -> Route:
    """``route`` behind the registry's authentication (``basic`` or ``bearer`` with a token from ``/token``)."""

    def answer(h: Handler) -> None:
        want = BASIC if scheme == "basic" else f"Bearer {TOKEN}"
        if h.headers.get("Authorization") != want:
            challenge = (
                'Basic realm="fake"'
                if scheme == "basic"
                else f'Bearer realm="http://{registry.netloc}/token",service="fake"'
            )
            h.reply(401, b'{"errors": [{"code": "UNAUTHORIZED"}]}', {"WWW-Authenticate": challenge})
            return
        route(h)

    if scheme == "bearer":
        registry.routes[("GET", "/token")] = lambda h: h.reply(200, json.dumps({"token": TOKEN}).encode())
    return answer


def client_for(tmp_path: Path, registry: Fake | None = None, **kwargs: Any) -> RegistryClient:
    config = docker_config(tmp_path, registry) if registry is not None else tmp_path / "none.json"
    kwargs = {"timeout": 30, "deadline": 10, "retries": 0, "backoff": 0, **kwargs}
    return RegistryClient(docker_config=config, **kwargs)


# --- a declared size does not buy time -----------------------------------------------------------------


def huge_layer_image(registry: Fake, layer: Route) -> str:
    """An image whose one (uncompressed tar) layer declares 2^50 bytes and is served by ``layer``."""
    layer_digest = "sha256:" + "ab" * 32
    config = json.dumps(
        {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [layer_digest]}}
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
            "layers": [{"mediaType": TAR_LAYER, "digest": layer_digest, "size": 1 << 50}],
        }
    ).encode()
    registry.routes[("GET", "/v2/huge/manifests/v1")] = lambda h: h.reply(200, manifest, {"Content-Type": OCI_MANIFEST})
    registry.routes[("GET", f"/v2/huge/blobs/{sha(config)}")] = lambda h: h.reply(200, config)
    registry.routes[("GET", f"/v2/huge/blobs/{layer_digest}")] = layer
    return f"{registry.netloc}/huge:v1"


def streaming(interval: float, piece: bytes, stop_after: float) -> Route:
    """Send the headers of a 2^50-byte body, then ``piece`` every ``interval`` s, and stop after ``stop_after`` s
    (so that a client without the bound fails the test instead of hanging it)."""

    def answer(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(1 << 50))
        h.end_headers()
        ends = time.monotonic() + stop_after
        try:
            while time.monotonic() < ends:
                h.wfile.write(piece)
                h.wfile.flush()
                time.sleep(interval)
        except OSError:
            return

    return answer


def test_a_huge_declared_layer_that_drips_ends_at_the_first_deadline(
    fakes: Callable[[str], Fake], tmp_path: Path
) -> None:
    registry = fakes("127.0.0.1")
    ref = huge_layer_image(registry, streaming(0.5, b"\0", stop_after=12))
    client = client_for(tmp_path, deadline=2)
    started = time.monotonic()
    with pytest.raises(RegistryError) as caught:
        client.read_files(ref, ["/etc/os-release"])
    elapsed = time.monotonic() - started
    assert elapsed < 4, f"took {elapsed:.1f} s"
    message = caught.value.message
    assert message.startswith(f"layer sha256:{'ab' * 32} of {registry.netloc}/huge: not complete within 2 s"), message
    assert "1 s for every 1 MiB that arrives, 3600 s at most, whatever size it declares" in message


def test_a_huge_declared_layer_that_streams_fast_ends_at_the_cap(fakes: Callable[[str], Fake], tmp_path: Path) -> None:
    registry = fakes("127.0.0.1")
    # 64 KiB every 10 ms is about 6 MiB/s: faster than the minimum rate, so only the cap ends it.
    ref = huge_layer_image(registry, streaming(0.01, b"\0" * (64 << 10), stop_after=15))
    client = client_for(tmp_path, deadline=1, max_blob_seconds=3)
    started = time.monotonic()
    with pytest.raises(RegistryError) as caught:
        client.read_files(ref, ["/etc/os-release"])
    elapsed = time.monotonic() - started
    assert 2.5 < elapsed < 5, f"took {elapsed:.1f} s"
    assert "not complete within 3 s" in caught.value.message and "3 s at most" in caught.value.message


def test_a_layer_that_breaks_off_and_is_fetched_again_stays_within_the_cap(
    fakes: Callable[[str], Fake], tmp_path: Path
) -> None:
    registry = fakes("127.0.0.1")
    # Fast for 2.5 s, then the connection drops: each try would get a cap of its own, four tries 10 s.
    ref = huge_layer_image(registry, streaming(0.01, b"\0" * (64 << 10), stop_after=2.5))
    client = client_for(tmp_path, deadline=1, max_blob_seconds=3, retries=3)
    started = time.monotonic()
    with pytest.raises(RegistryError) as caught:
        client.read_files(ref, ["/etc/os-release"])
    elapsed = time.monotonic() - started
    # The second try has what is left of the cap, and at least the first deadline (1 s).
    assert elapsed < 5, f"took {elapsed:.1f} s"
    assert "not complete within" in caught.value.message, caught.value.message


def test_image_cat_of_a_dripping_huge_layer_exits_3_naming_the_blob(
    fakes: Callable[[str], Fake], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, invoke: Invoke
) -> None:
    from patchkit.images import registry as module

    registry = fakes("127.0.0.1")
    ref = huge_layer_image(registry, streaming(0.5, b"\0", stop_after=12))
    original = module.RegistryClient.__init__

    def short(self: RegistryClient, **kwargs: Any) -> None:
        original(self, **{**kwargs, "deadline": 2.0, "retries": 0, "docker_config": tmp_path / "none.json"})

    monkeypatch.setattr(module.RegistryClient, "__init__", short)
    started = time.monotonic()
    r = invoke("image", "cat", ref, "/etc/os-release")
    assert time.monotonic() - started < 4
    assert r.exit_code == 3, r.stdout + r.stderr
    assert f"layer sha256:{'ab' * 32}" in r.stderr and "not complete within 2 s" in r.stderr
    assert "Traceback" not in r.stderr


# --- credentials stay with their host ---------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_an_upload_location_on_another_host_gets_no_credentials(
    fakes: Callable[[str], Fake], tmp_path: Path, scheme: str
) -> None:
    registry, elsewhere = fakes("127.0.0.1"), fakes("127.0.0.2")
    start = lambda h: h.reply(202, headers={"Location": f"http://{elsewhere.netloc}/upload/1?state=x"})  # noqa: E731
    registry.routes[("POST", "/v2/team/app/blobs/uploads/")] = guarded(registry, scheme, start)
    elsewhere.routes[("PUT", "/upload/1")] = lambda h: h.reply(201)
    client = client_for(tmp_path, registry)
    client.push_blob(ImageRef.parse(f"{registry.netloc}/team/app:v1"), b"layer bytes", known_absent=True)
    assert [s.authorization for s in registry.seen if s.method == "POST"][-1] is not None  # it had credentials
    assert [(s.method, s.path, s.authorization) for s in elsewhere.seen] == [("PUT", "/upload/1", None)]


def test_a_challenge_from_an_upload_location_elsewhere_is_not_answered_with_credentials(
    fakes: Callable[[str], Fake], tmp_path: Path
) -> None:
    registry, elsewhere = fakes("127.0.0.1"), fakes("127.0.0.2")
    start = lambda h: h.reply(202, headers={"Location": f"http://{elsewhere.netloc}/upload/1"})  # noqa: E731
    registry.routes[("POST", "/v2/team/app/blobs/uploads/")] = guarded(registry, "basic", start)
    bait = f'Bearer realm="http://{elsewhere.netloc}/token",service="bait"'
    elsewhere.routes[("PUT", "/upload/1")] = lambda h: h.reply(401, b"{}", {"WWW-Authenticate": bait})
    elsewhere.routes[("GET", "/token")] = lambda h: h.reply(200, b'{"token": "stolen"}')
    client = client_for(tmp_path, registry)
    with pytest.raises(RegistryError) as caught:
        client.push_blob(ImageRef.parse(f"{registry.netloc}/team/app:v1"), b"layer bytes", known_absent=True)
    assert "401" in caught.value.message
    assert all(s.authorization is None for s in elsewhere.seen), elsewhere.seen
    assert "/token" not in [s.path for s in elsewhere.seen]


@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_a_redirect_to_another_port_gets_no_credentials_and_the_same_origin_keeps_them(
    fakes: Callable[[str], Fake], tmp_path: Path, scheme: str
) -> None:
    registry, storage = fakes("127.0.0.1"), fakes("127.0.0.1")
    blob = b"config bytes"
    digest = sha(blob)
    moved = lambda h: h.reply(307, headers={"Location": f"http://{storage.netloc}/storage/{digest}"})  # noqa: E731
    here = lambda h: h.reply(307, headers={"Location": f"/v2/team/app/blobs/{digest}"})  # noqa: E731
    registry.routes[("GET", f"/v2/team/app/blobs/{digest}")] = guarded(registry, scheme, moved)
    registry.routes[("GET", f"/v2/other/blobs/{digest}")] = guarded(registry, scheme, here)
    storage.routes[("GET", f"/storage/{digest}")] = lambda h: h.reply(200, blob)
    client = client_for(tmp_path, registry)
    desc = Descriptor("application/octet-stream", Digest(digest), len(blob))
    assert client.blob(ImageRef.parse(f"{registry.netloc}/team/app:v1"), desc) == blob
    assert [(s.path, s.authorization) for s in storage.seen] == [(f"/storage/{digest}", None)]
    # A redirect within the registry's origin keeps the credentials (it is the same registry).
    assert client.blob(ImageRef.parse(f"{registry.netloc}/other:v1"), desc) == blob
    assert registry.seen[-1].path == f"/v2/team/app/blobs/{digest}" and registry.seen[-1].authorization


def test_a_challenge_after_a_redirect_elsewhere_is_not_answered_with_credentials(
    fakes: Callable[[str], Fake], tmp_path: Path
) -> None:
    registry, storage = fakes("127.0.0.1"), fakes("127.0.0.1")
    digest, first = sha(b"x"), sha(b"first")
    moved = lambda h: h.reply(307, headers={"Location": f"http://{storage.netloc}/storage/x"})  # noqa: E731
    registry.routes[("GET", f"/v2/team/app/blobs/{digest}")] = guarded(registry, "basic", moved)
    registry.routes[("GET", f"/v2/team/app/blobs/{first}")] = guarded(
        registry, "basic", lambda h: h.reply(200, b"first")
    )
    bait = f'Bearer realm="http://{storage.netloc}/token",service="bait"'
    storage.routes[("GET", "/storage/x")] = lambda h: h.reply(401, b"{}", {"WWW-Authenticate": bait})
    storage.routes[("GET", "/token")] = lambda h: h.reply(200, b'{"token": "stolen"}')
    client = client_for(tmp_path, registry)
    # A first blob: the client has learnt how to authenticate to the registry, and has credentials for it.
    client.blob(ImageRef.parse(f"{registry.netloc}/team/app:v1"), Descriptor("", Digest(first), 5))
    with pytest.raises(RegistryError):
        client.blob(ImageRef.parse(f"{registry.netloc}/team/app:v1"), Descriptor("", Digest(digest), 1))
    assert all(s.authorization is None for s in storage.seen) and "/token" not in [s.path for s in storage.seen]


# --- no blob read past its descriptor ----------------------------------------------------------------------

BUNDLE = b"a small bundle " * 2900  # 43.5 kB, what the descriptor says
FLOOD = 256 << 20


def bundle_artifact(registry: Fake, content_length: bool) -> str:
    """A bundle manifest whose bundle layer is 43.5 kB by its descriptor, served as 256 MiB of bytes."""
    sums = b"0" * 64 + b"  compose.yaml\n"
    layers = [
        {
            "mediaType": artifact.BUNDLE_LAYER,
            "digest": sha(BUNDLE),
            "size": len(BUNDLE),
            "annotations": {artifact.TITLE: "deploy.tar.gz"},
        },
        {"mediaType": artifact.SUMS_LAYER, "digest": sha(sums), "size": len(sums)},
    ]
    body = artifact.artifact_manifest(artifact.BUNDLE_ARTIFACT, layers)
    registry.routes[("GET", f"/v2/bundles/manifests/{sha(body)}")] = lambda h: h.reply(
        200, body, {"Content-Type": OCI_MANIFEST}
    )

    def flood(h: Handler) -> None:
        h.send_response(200)
        if content_length:
            h.send_header("Content-Length", str(FLOOD))
        h.send_header("Connection", "close")
        h.end_headers()
        piece = BUNDLE[: 64 << 10].ljust(64 << 10, b"!")
        try:
            for _ in range(FLOOD // len(piece)):
                h.wfile.write(piece)
                h.server.fake.served += len(piece)
        except OSError:
            return

    registry.routes[("GET", f"/v2/bundles/blobs/{sha(BUNDLE)}")] = flood
    return f"{registry.netloc}/bundles@{sha(body)}"


PULL_IN_A_CHILD = """
import resource, sys
from pathlib import Path
from patchkit.errors import PatchkitError
from patchkit.ship import artifact
from patchkit.oci.ref import ImageRef
from patchkit.images.registry import RegistryClient
client = RegistryClient(docker_config=Path(sys.argv[2]), retries=0, deadline=30)
try:
    artifact.pull(client, ImageRef.parse(sys.argv[1]), Path(sys.argv[3]), Path(sys.argv[4]))
except PatchkitError as e:
    print(type(e).__name__, e.message)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.parametrize("content_length", [True, False], ids=["declared", "close-delimited"])
def test_a_blob_longer_than_its_descriptor_is_refused_after_its_size(
    fakes: Callable[[str], Fake], tmp_path: Path, content_length: bool
) -> None:
    registry = fakes("127.0.0.1")
    ref = bundle_artifact(registry, content_length)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=60)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'alice namespaces="patchkit" {key.with_suffix(".pub").read_text().strip()}\n')
    out = tmp_path / "pulled"
    baseline = subprocess.run(
        [sys.executable, "-c", "import resource, patchkit.ship.artifact, patchkit.images.registry; "
         "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
        capture_output=True, text=True, timeout=60, check=True, env=os.environ,
    )  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-c", PULL_IN_A_CHILD, ref, str(tmp_path / "none.json"), str(out), str(allowed)],
        capture_output=True, text=True, timeout=60, check=False, env=os.environ,
    )  # fmt: skip
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 2, r.stdout + r.stderr
    assert lines[0].startswith("Refused ") and "its descriptor's 43500 bytes; refusing it" in lines[0]
    grown_kib = int(lines[1]) - int(baseline.stdout)
    assert grown_kib < 32 << 10, f"the pull grew by {grown_kib} KiB reading a 43.5 kB blob"
    # What the server got into the socket: the descriptor's size, a chunk or two, and the socket buffers.
    assert registry.served < 24 << 20, registry.served
    assert not out.exists()


# --- referrers: a limit, and each checked before the next ------------------------------------------------------


@pytest.fixture
def signed_bundle(deploy: Path, invoke: Invoke, tmp_path: Path) -> dict[str, Any]:
    key = tmp_path / "keys" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@test", "-f", str(key)], check=True, timeout=60
    )
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'alice namespaces="patchkit" {key.with_suffix(".pub").read_text().strip()}\n')
    (deploy / "compose.yaml").write_text("services: {}\n")
    bundle = tmp_path / "dist" / "deploy.tar.gz"
    bundle.parent.mkdir()
    assert invoke("bundle", "-o", str(bundle), repo=deploy).exit_code == 0
    assert invoke("sign", "--key", str(key), str(bundle)).exit_code == 0
    return {
        "bundle": bundle.read_bytes(),
        "sig": bundle.with_name("deploy.tar.gz.sig").read_bytes(),
        "allowed": allowed,
    }


def sums_of(bundle: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
        f = tar.extractfile("SHA256SUMS")
        assert f is not None
        return f.read()


class Registry:
    """A bundle, its SHA256SUMS and signature referrers (the referrers API), served by ``fake``."""

    def __init__(self, fake: Fake, bundle: bytes) -> None:
        self.fake = fake
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, bytes] = {}
        sums = sums_of(bundle)
        layers = [
            {**self.blob(bundle, artifact.BUNDLE_LAYER), "annotations": {artifact.TITLE: "deploy.tar.gz"}},
            self.blob(sums, artifact.SUMS_LAYER),
        ]
        body = artifact.artifact_manifest(artifact.BUNDLE_ARTIFACT, layers)
        self.digest = self.manifest(body)
        self.subject = {"mediaType": OCI_MANIFEST, "digest": self.digest, "size": len(body)}
        self.index: list[dict[str, Any]] = []
        self.signatures: dict[str, int] = {}  # signature blob digest -> its referrer's rank in digest order
        self.log: list[str] = []
        fake.routes[("GET", "*")] = self.serve

    def blob(self, data: bytes, media_type: str) -> dict[str, Any]:
        self.blobs[sha(data)] = data
        return {"mediaType": media_type, "digest": sha(data), "size": len(data)}

    def manifest(self, body: bytes) -> str:
        self.manifests[sha(body)] = body
        return sha(body)

    def signature(self, sig: bytes, nonce: str) -> str:
        """Attach ``sig`` as a signature referrer (``nonce`` makes its manifest's digest); its manifest digest."""
        layer = self.blob(sig, artifact.SIGNATURE_ARTIFACT)
        doc = json.loads(artifact.artifact_manifest(artifact.SIGNATURE_ARTIFACT, [layer], self.subject))
        doc["annotations"] = {"nonce": nonce}
        body = json.dumps(doc).encode()
        digest = self.manifest(body)
        self.index.append(
            {
                "mediaType": OCI_MANIFEST,
                "digest": digest,
                "size": len(body),
                "artifactType": artifact.SIGNATURE_ARTIFACT,
            }
        )
        return digest

    def serve(self, h: Handler) -> None:
        path = h.path.split("?")[0]
        name, _, last = path.rpartition("/")
        if name.endswith("/manifests") and last in self.manifests:
            h.reply(200, self.manifests[last], {"Content-Type": OCI_MANIFEST})
        elif name.endswith("/blobs") and last in self.blobs:
            if last in self.signatures:
                self.log.append(f"get:{self.signatures[last]}")
            h.reply(200, self.blobs[last])
        elif name.endswith("/referrers"):
            h.reply(
                200,
                json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": self.index}).encode(),
                {"Content-Type": OCI_INDEX},
            )
        else:
            h.reply(404, b"{}")


def junk_signature(i: int) -> bytes:
    body = base64.b64encode(b"SSHSIG" + i.to_bytes(4, "big") * 8).decode()
    return f"-----BEGIN SSH SIGNATURE-----\n{body}\n-----END SSH SIGNATURE-----\n".encode()


def events(monkeypatch: pytest.MonkeyPatch, reg: Registry) -> list[str]:
    """The order of signature downloads and verifications: ``get:N`` / ``verify:N`` (N the signature's rank)."""
    from patchkit.signing import signatures

    rank = {d: i for i, d in enumerate(sorted(e["digest"] for e in reg.index))}
    reg.signatures = {json.loads(reg.manifests[d])["layers"][0]["digest"]: r for d, r in rank.items()}
    real = signatures.verify_files

    def verify(paths: Any, *args: Any, **kwargs: Any) -> Any:
        sig = paths[0].with_name(paths[0].name + ".sig").read_bytes()
        reg.log.append(f"verify:{reg.signatures[sha(sig)]}")
        return real(paths, *args, **kwargs)

    monkeypatch.setattr(signatures, "verify_files", verify)
    return reg.log


def pull(fake: Fake, reg: Registry, tmp_path: Path, allowed: Path) -> artifact.Pulled:
    client = client_for(tmp_path)
    return artifact.pull(client, ImageRef.parse(f"{fake.netloc}/bundles@{reg.digest}"), tmp_path / "out", allowed)


def test_many_referrers_stop_at_the_limit_each_checked_before_the_next(
    fakes: Callable[[str], Fake], tmp_path: Path, signed_bundle: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fakes("127.0.0.1")
    reg = Registry(fake, signed_bundle["bundle"])
    for i in range(40):
        reg.signature(junk_signature(i), f"junk-{i}")
    log = events(monkeypatch, reg)
    with pytest.raises(Refused) as caught:
        pull(fake, reg, tmp_path, signed_bundle["allowed"])
    limit = artifact.MAX_REFERRERS
    assert f"only the first {limit} of its 40 signature and attestation referrers" in caught.value.message
    assert log == [e for i in range(limit) for e in (f"get:{i}", f"verify:{i}")]
    manifests = [s.path for s in fake.seen if "/manifests/" in s.path]
    assert len(manifests) == 1 + limit  # the bundle's, then one per referrer considered
    assert not (tmp_path / "out").exists()


def test_a_valid_signature_among_many_ends_the_fetching(
    fakes: Callable[[str], Fake], tmp_path: Path, signed_bundle: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = fakes("127.0.0.1")
    reg = Registry(fake, signed_bundle["bundle"])
    junk = sorted(reg.signature(junk_signature(i), f"junk-{i}") for i in range(30))
    # Place the real signature fifth in digest order (a nonce that sorts between the fourth and fifth junk).
    nonce = next(
        f"real-{n}"
        for n in range(100_000)
        if junk[3] < candidate_digest(reg, signed_bundle["sig"], f"real-{n}") < junk[4]
    )
    reg.signature(signed_bundle["sig"], nonce)
    log = events(monkeypatch, reg)
    pulled = pull(fake, reg, tmp_path, signed_bundle["allowed"])
    assert pulled.signer == "alice"
    assert log == [e for i in range(5) for e in (f"get:{i}", f"verify:{i}")]  # nothing fetched after the fifth
    assert (tmp_path / "out" / "deploy.tar.gz.sig").read_bytes() == signed_bundle["sig"]


def candidate_digest(reg: Registry, sig: bytes, nonce: str) -> str:
    """The manifest digest ``Registry.signature`` would give ``sig`` with ``nonce`` (without attaching it)."""
    layer = {"mediaType": artifact.SIGNATURE_ARTIFACT, "digest": sha(sig), "size": len(sig)}
    doc = json.loads(artifact.artifact_manifest(artifact.SIGNATURE_ARTIFACT, [layer], reg.subject))
    doc["annotations"] = {"nonce": nonce}
    return sha(json.dumps(doc).encode())
