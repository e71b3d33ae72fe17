"""Real registries and real OCI images for the image tests, all on 127.0.0.1.

Session fixtures (stable names and shapes; tests/images/test_engine.py uses them too):

- ``registry_server`` -> ``RegistryServer``: Debian's ``docker-registry``
  (distribution 2.8) with its own config, filesystem storage in a temporary
  directory, no auth. ``.host`` is ``"127.0.0.1:PORT"``, ``.url`` is
  ``"http://127.0.0.1:PORT"``, ``.storage`` its storage root,
  ``.blob_path(digest)`` where a blob's bytes live on disk, ``.push(...)``
  copies an OCI layout image in with skopeo.
- ``auth_registry_server`` -> ``RegistryServer`` with htpasswd Basic auth;
  ``.username``/``.password`` are the only valid credentials. The bcrypt entry
  is made with the system's libcrypt (libxcrypt), skipped if it has no bcrypt.
- ``token_registry_server`` -> ``TokenRegistry``: a registry with ``auth: token``
  in front of which ``.token_server`` (a small http.server on 127.0.0.1)
  issues real ES256 JWTs signed by a self-signed certificate the registry
  trusts. Anonymous tokens grant pull on ``public/*`` only; ``.username`` /
  ``.password`` grant everything asked for.
- ``image_builder`` -> ``ImageBuilder``: builds images with umoci in one OCI
  layout (``new``, ``repack`` a layer from files/deletions/links, ``add_layer``
  from a tar written here, ``index`` for a hand-written multi-platform index).
- ``oci_image`` -> ``TestImages``: the standard images, pushed to
  ``registry_server``: ``.single`` (linux/amd64, four layers: a whiteout, an
  opaque directory, symlinks and a hard link) and ``.multi`` (an OCI index with
  linux/amd64 = ``.single``'s manifest and a linux/arm64 image).
  ``.expected(platform)`` maps container paths to the bytes (or ``None``)
  each platform must show.

Function fixtures: ``fake_registry`` -> ``FakeRegistry`` (failure shapes only:
500s, a slow answer, a truncated body, a body that is not JSON, 429),
``counting_session`` -> ``CountingSession`` (a requests session recording every
request it sends) and ``make_client(**kwargs)`` -> ``RegistryClient`` on that
session, with no Docker config, short timeouts and no backoff.

``RegistryServer.push(source, "repo:tag", all_platforms=True)`` copies
``oci:LAYOUT:TAG`` or ``dir:DIR`` in with skopeo and returns
``"127.0.0.1:PORT/repo:tag"``; ``put_image``/``put_dir`` upload through the
distribution API as is (skopeo would recompress uncompressed layers);
``inspect_raw``/``inspect`` are skopeo's view. A missing tool skips the tests
on a developer machine and fails them in CI (``CI`` set).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import ctypes.util
import datetime as dt
import hashlib
import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from requests.adapters import HTTPAdapter

REGISTRY_BIN = "/usr/bin/docker-registry"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing(what: str) -> NoReturn:
    """A tool the tests need is not here: skip on a developer's machine, fail in CI (where .ci/run installs it)."""
    if os.environ.get("CI"):
        pytest.fail(f"{what}: .ci/run must install it")
    pytest.skip(what)


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        missing(f"{tool} is not installed (Debian package {tool})")
    return path


def run(*argv: str, cwd: Path | None = None, timeout: float = 120) -> str:
    """Run a tool; on failure, fail the test with its stderr."""
    p = subprocess.run(list(argv), cwd=cwd, capture_output=True, timeout=timeout, check=False)
    if p.returncode != 0:
        pytest.fail(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.decode(errors='replace')[-2000:]}")
    return p.stdout.decode()


# --- docker-registry --------------------------------------------------------------------------------


@dataclass
class RegistryServer:
    """A running ``docker-registry`` on 127.0.0.1."""

    host: str
    url: str
    storage: Path
    log: Path
    username: str | None = None
    password: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def creds(self) -> list[str]:
        """skopeo's credential arguments for this registry (none when it has no auth)."""
        return [f"--creds={self.username}:{self.password}"] if self.username else []

    def blob_path(self, digest: str) -> Path:
        """Where the registry keeps a blob's bytes (filesystem driver layout)."""
        hexd = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"

    def push(self, source: str, repo_tag: str, *, all_platforms: bool = True) -> str:
        """``skopeo copy`` ``source`` (``oci:DIR:TAG`` or ``dir:DIR``) to ``repo_tag`` here; the full reference."""
        dest = f"{self.host}/{repo_tag}"
        dest_creds = [f"--dest-creds={self.username}:{self.password}"] if self.username else []
        run(
            "skopeo", "copy", "--quiet", *(["--all"] if all_platforms else []),
            "--dest-tls-verify=false", *dest_creds, source, f"docker://{dest}",
        )  # fmt: skip
        return dest

    def put_image(self, repo_tag: str, manifest: bytes, media_type: str, blobs: Iterable[bytes]) -> str:
        """Upload blobs and a manifest through the distribution API as they are (skopeo would recompress
        uncompressed layers); the full reference. For registries without auth."""
        repo, _, tag = repo_tag.partition(":")
        for blob in blobs:
            digest = "sha256:" + hashlib.sha256(blob).hexdigest()
            start = requests.post(f"{self.url}/v2/{repo}/blobs/uploads/", timeout=30)
            assert start.status_code == 202, start.text
            location = start.headers["Location"]
            location = location if location.startswith("http") else self.url + location
            done = requests.put(location, params={"digest": digest}, data=blob, timeout=60)
            assert done.status_code == 201, done.text
        put = requests.put(
            f"{self.url}/v2/{repo}/manifests/{tag}", data=manifest, headers={"Content-Type": media_type}, timeout=30
        )
        assert put.status_code == 201, put.text
        return f"{self.host}/{repo_tag}"

    def put_dir(self, source: Path, repo_tag: str) -> str:
        """``put_image`` of a skopeo ``dir:`` copy (manifest.json and one file per blob)."""
        manifest = (source / "manifest.json").read_bytes()
        doc = json.loads(manifest)
        digests = [doc["config"]["digest"], *(x["digest"] for x in doc["layers"])]
        blobs = [(source / d.removeprefix("sha256:")).read_bytes() for d in digests]
        return self.put_image(repo_tag, manifest, doc.get("mediaType", OCI_MANIFEST), blobs)

    def inspect_raw(self, ref: str) -> bytes:
        """``skopeo inspect --raw``: the manifest bytes exactly as served."""
        p = subprocess.run(
            ["skopeo", "inspect", "--raw", "--tls-verify=false", *self.creds, f"docker://{ref}"],
            capture_output=True,
            timeout=60,
            check=True,
        )
        return p.stdout

    def inspect(self, ref: str, *extra: str) -> dict[str, Any]:
        """``skopeo inspect`` (``Digest`` is the top-level manifest's)."""
        out = run("skopeo", *extra, "inspect", "--tls-verify=false", *self.creds, f"docker://{ref}")
        doc: dict[str, Any] = json.loads(out)
        return doc

    def access_log(self) -> list[str]:
        """The request lines of the registry's access log so far (``GET /v2/... 200``)."""
        return [
            line for line in self.log.read_text(errors="replace").splitlines() if '"' in line and "HTTP/1.1" in line
        ]


def _start_registry(base: Path, name: str, auth: str = "") -> RegistryServer:
    if not os.access(REGISTRY_BIN, os.X_OK):
        missing(f"{REGISTRY_BIN} is not installed (Debian package docker-registry)")
    port = free_port()
    storage = base / f"{name}-storage"
    storage.mkdir()
    config = base / f"{name}.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n  accesslog:\n    disabled: false\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: patchkit-test-{secrets.token_hex(8)}\n"
        f"{auth}"
    )
    log = base / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([REGISTRY_BIN, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT)
    server = RegistryServer(f"127.0.0.1:{port}", f"http://127.0.0.1:{port}", storage, log, process=proc)
    deadline = time.monotonic() + 15
    while True:
        try:
            if requests.get(f"{server.url}/v2/", timeout=1).status_code in (200, 401):
                return server
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"docker-registry did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture(scope="session")
def registry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A plain-HTTP, no-auth ``docker-registry`` on 127.0.0.1, for the whole session."""
    server = _start_registry(tmp_path_factory.mktemp("registry"), "plain")
    try:
        yield server
    finally:
        _stop(server.process)


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash (``$2b$``) from the system's libcrypt (libxcrypt); skips if it has none."""
    name = ctypes.util.find_library("crypt")
    if name is None:
        pytest.skip("no libcrypt to make a bcrypt htpasswd entry with")
    lib = ctypes.CDLL(name)
    try:
        gensalt, crypt = lib.crypt_gensalt, lib.crypt
    except AttributeError:
        pytest.skip("libcrypt has no crypt_gensalt (not libxcrypt): cannot make a bcrypt entry")
    gensalt.restype, gensalt.argtypes = (
        ctypes.c_char_p,
        [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int],
    )
    crypt.restype, crypt.argtypes = ctypes.c_char_p, [ctypes.c_char_p, ctypes.c_char_p]
    salt = gensalt(b"$2b$", 5, None, 0)
    hashed = crypt(password.encode(), salt) if salt else None
    if not hashed or not hashed.startswith(b"$2b$"):
        pytest.skip("libcrypt cannot make bcrypt hashes")
    return str(hashed.decode())


@pytest.fixture(scope="session")
def auth_registry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A ``docker-registry`` with htpasswd Basic auth; only ``.username``/``.password`` get in."""
    base = tmp_path_factory.mktemp("auth-registry")
    username, password = "patchkit", secrets.token_urlsafe(12)
    htpasswd = base / "htpasswd"
    htpasswd.write_text(f"{username}:{bcrypt_hash(password)}\n")
    server = _start_registry(base, "basic", f"auth:\n  htpasswd:\n    realm: patchkit-test\n    path: {htpasswd}\n")
    server.username, server.password = username, password
    try:
        yield server
    finally:
        _stop(server.process)


# --- the token server ----------------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """A token endpoint as in distribution's ``docs/spec/auth/token.md``, issuing ES256 JWTs.

    ``requests`` records each call (query and Authorization). ``field`` is the
    answer's token key (``token`` or ``access_token``), ``expires_in`` its
    lifetime; tests may change both and must put them back.
    """

    issuer = "patchkit-test-issuer"
    service = "patchkit-test-registry"

    def __init__(self, base: Path, username: str, password: str) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "patchkit test token issuer")])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .sign(self._key, hashes.SHA256())
        )
        self.cert_bundle = base / "token-cert.pem"
        self.cert_bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._x5c = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()
        self.username, self.password = username, password
        self.requests: list[dict[str, Any]] = []
        self.field = "token"
        self.expires_in: int | None = 300
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/token"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _jwt(self, subject: str, access: list[dict[str, Any]]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        now = int(time.time())
        header = _b64url(json.dumps({"typ": "JWT", "alg": "ES256", "x5c": [self._x5c]}).encode())
        claims = {
            "iss": self.issuer, "sub": subject, "aud": self.service, "exp": now + 600, "nbf": now - 30,
            "iat": now, "jti": secrets.token_hex(8), "access": access,
        }  # fmt: skip
        payload = _b64url(json.dumps(claims).encode())
        r, s = decode_dss_signature(self._key.sign(f"{header}.{payload}".encode(), ec.ECDSA(hashes.SHA256())))
        return f"{header}.{payload}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def _answer(self, query: Mapping[str, list[str]], authorization: str | None) -> tuple[int, dict[str, Any]]:
        subject = ""
        if authorization:
            scheme, _, value = authorization.partition(" ")
            user, _, password = base64.b64decode(value).decode().partition(":") if scheme == "Basic" else ("", "", "")
            if (user, password) != (self.username, self.password):
                return 401, {"details": "incorrect username or password"}
            subject = user
        access = []
        for scope in query.get("scope", []):
            kind, name, actions = scope.split(":")
            granted = actions.split(",") if subject else (["pull"] if name.startswith("public/") else [])
            access.append({"type": kind, "name": name, "actions": [a for a in actions.split(",") if a in granted]})
        answer: dict[str, Any] = {
            self.field: self._jwt(subject, access),
            "issued_at": dt.datetime.now(dt.UTC).isoformat(),
        }
        if self.expires_in is not None:
            answer["expires_in"] = self.expires_in
        return 200, answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                authorization = self.headers.get("Authorization")
                owner.requests.append({"query": query, "authorization": authorization})
                status, doc = owner._answer(query, authorization)
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                del format, args

        return Handler


@dataclass
class TokenRegistry(RegistryServer):
    """A registry with ``auth: token`` and the token server it trusts."""

    token_server: TokenServer | None = None

    @property
    def tokens(self) -> TokenServer:
        assert self.token_server is not None
        return self.token_server


@pytest.fixture(scope="session")
def token_registry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenRegistry]:
    """A ``docker-registry`` answering 401 with a Bearer challenge whose realm is a local token server."""
    pytest.importorskip("cryptography", reason="the token server signs its JWTs with the cryptography package")
    base = tmp_path_factory.mktemp("token-registry")
    tokens = TokenServer(base, "patchkit", secrets.token_urlsafe(12))
    try:
        auth = (
            "auth:\n  token:\n"
            f"    realm: {tokens.url}\n    service: {tokens.service}\n    issuer: {tokens.issuer}\n"
            f"    rootcertbundle: {tokens.cert_bundle}\n"
        )
        plain = _start_registry(base, "token", auth)
        server = TokenRegistry(**{**plain.__dict__, "username": tokens.username, "password": tokens.password})
        server.token_server = tokens
        try:
            yield server
        finally:
            _stop(server.process)
    finally:
        tokens.close()


# --- building images with umoci --------------------------------------------------------------------


@dataclass
class TarEntry:
    """One entry of a hand-written layer: a file (``data``), a directory, a symlink or a hard link."""

    path: str
    data: bytes | None = None
    kind: str = "file"  # file | dir | symlink | hardlink
    target: str = ""


def tar_bytes(entries: list[TarEntry]) -> bytes:
    """An uncompressed tar of ``entries`` in the order given (deterministic: fixed times and owners)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for e in entries:
            info = tarfile.TarInfo(e.path.lstrip("/"))
            info.mtime = 1_700_000_000
            if e.kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            elif e.kind in ("symlink", "hardlink"):
                info.type = tarfile.SYMTYPE if e.kind == "symlink" else tarfile.LNKTYPE
                info.linkname = e.target
                tf.addfile(info)
            else:
                data = e.data or b""
                info.size, info.mode = len(data), 0o644
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class ImageBuilder:
    """Builds OCI images with umoci in one layout directory (``oci:LAYOUT:TAG``)."""

    def __init__(self, root: Path) -> None:
        _need("umoci")
        _need("skopeo")
        self.root = root
        self.layout = root / "layout"
        run("umoci", "init", "--layout", str(self.layout))
        self._n = 0

    def ref(self, tag: str) -> str:
        """``oci:LAYOUT:TAG``, as skopeo names it."""
        return f"oci:{self.layout}:{tag}"

    def new(self, tag: str, *, arch: str = "amd64", os_name: str = "linux") -> None:
        """An image with no layers, for ``os_name/arch``."""
        image = f"{self.layout}:{tag}"
        run("umoci", "new", "--image", image)
        if (arch, os_name) != ("amd64", "linux"):
            run("umoci", "config", "--image", image, "--architecture", arch, "--os", os_name)

    def repack(
        self,
        tag: str,
        files: Mapping[str, bytes] | None = None,
        *,
        delete: tuple[str, ...] = (),
        symlinks: Mapping[str, str] | None = None,
        hardlinks: Mapping[str, str] | None = None,
    ) -> None:
        """One new layer, as umoci computes it: unpack, change the rootfs, repack.

        Deleting a file makes umoci write a ``.wh.`` whiteout; two names of one
        inode become a tar hard link.
        """
        self._n += 1
        bundle = self.root / f"bundle-{self._n}"
        image = f"{self.layout}:{tag}"
        run("umoci", "unpack", "--image", image, str(bundle))
        rootfs = bundle / "rootfs"
        for path, data in (files or {}).items():
            p = rootfs / path.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        for path in delete:
            (rootfs / path.lstrip("/")).unlink()
        for path, target in (symlinks or {}).items():
            p = rootfs / path.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.symlink_to(target)
        for path, existing in (hardlinks or {}).items():
            p = rootfs / path.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            os.link(rootfs / existing.lstrip("/"), p)
        run("umoci", "repack", "--image", image, str(bundle))
        shutil.rmtree(bundle)

    def add_layer(self, tag: str, layer: bytes | Path) -> None:
        """Append a hand-written (uncompressed) tar as a layer; umoci gzips it."""
        self._n += 1
        path = layer if isinstance(layer, Path) else self.root / f"layer-{self._n}.tar"
        if not isinstance(layer, Path):
            path.write_bytes(layer)
        run("umoci", "raw", "add-layer", "--image", f"{self.layout}:{tag}", str(path))
        if not isinstance(layer, Path):
            path.unlink()

    def descriptor(self, tag: str) -> dict[str, Any]:
        """The layout's index.json entry for ``tag``."""
        index = json.loads((self.layout / "index.json").read_text())
        for d in index["manifests"]:
            if d.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
                return dict(d)
        raise KeyError(tag)

    def blob(self, digest: str) -> bytes:
        return (self.layout / "blobs/sha256" / digest.removeprefix("sha256:")).read_bytes()

    def manifest(self, tag: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.blob(self.descriptor(tag)["digest"]))
        return doc

    def index(self, tag: str, platforms: Mapping[str, str]) -> str:
        """Write an OCI index over images of this layout (``{"linux/arm64": tag}``) as ``tag``; its digest.

        umoci makes one image per tag; the index with a ``platform`` on each
        manifest descriptor is written here, as image-spec ``image-index.md`` says.
        """
        manifests = []
        for platform, image_tag in platforms.items():
            d = self.descriptor(image_tag)
            os_name, arch, *variant = platform.split("/")
            entry = {"mediaType": d["mediaType"], "digest": d["digest"], "size": d["size"]}
            entry["platform"] = {"architecture": arch, "os": os_name, **({"variant": variant[0]} if variant else {})}
            manifests.append(entry)
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        (self.layout / "blobs/sha256" / digest.removeprefix("sha256:")).write_bytes(body)
        top = json.loads((self.layout / "index.json").read_text())
        top["manifests"] = [
            d for d in top["manifests"] if d.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag
        ]
        top["manifests"].append(
            {
                "mediaType": OCI_INDEX,
                "digest": digest,
                "size": len(body),
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        )
        (self.layout / "index.json").write_text(json.dumps(top))
        return digest

    def convert(self, tag: str, *args: str) -> Path:
        """``skopeo copy ARGS oci:LAYOUT:TAG dir:OUT`` (e.g. ``--dest-decompress``); OUT."""
        self._n += 1
        out = self.root / f"converted-{self._n}"
        run("skopeo", "copy", "--quiet", *args, self.ref(tag), f"dir:{out}")
        return out


@pytest.fixture(scope="session")
def image_builder(tmp_path_factory: pytest.TempPathFactory) -> ImageBuilder:
    """An umoci OCI layout to build images in (one per session; give each image its own tag)."""
    return ImageBuilder(tmp_path_factory.mktemp("images"))


BASE_FILES = {
    "/etc/os-release": b"ID=patchkit-test\n",
    "/app/lib/a.py": b"A = 1\n",
    "/app/lib/b.py": b"B = 1\n",
    "/app/gone.txt": b"deleted in layer 2\n",
    "/app/plugins/old.py": b"OLD = 1\n",
    "/app/plugins/keep.py": b"KEEP = 1\n",
    "/app/hard/original.txt": b"one inode, two names\n",
    "/usr/lib/python3.12/site.py": b"# site\n",
}


@dataclass(frozen=True)
class TestImages:
    """The standard test images in ``registry_server`` and what each platform must show.

    ``single`` is ``HOST/patchkit/layers:v1`` (linux/amd64), four layers from the bottom:
    1. ``BASE_FILES``, ``/app/lib/alias.py -> a.py``, ``/usr/lib/python3 -> python3.12``,
       ``/app/hard/link.txt`` a hard link of ``/app/hard/original.txt``;
    2. ``/app/lib/a.py`` changed, ``/app/gone.txt`` deleted (a whiteout), ``/app/mid.txt``;
    3. ``/app/plugins`` made opaque with only ``new.py`` (hand-written tar);
    4. ``/app/top.txt``.
    ``multi`` is ``HOST/patchkit/multi:v1``: an OCI index of ``single``'s manifest
    (linux/amd64) and a one-layer linux/arm64 image.
    """

    __test__ = False  # not a test class, despite its name

    single: str
    multi: str
    single_digest: str
    arm64_digest: str
    index_digest: str
    layers: int
    layout: Path

    @staticmethod
    def expected(platform: str = "linux/amd64") -> dict[str, bytes | None]:
        if platform == "linux/arm64":
            return {
                "/etc/os-release": b"ID=patchkit-test-arm64\n",
                "/app/lib/a.py": b"A = 'arm64'\n",
                "/app/top.txt": None,
                "/app/lib/b.py": None,
            }
        return {
            "/etc/os-release": b"ID=patchkit-test\n",
            "/app/lib/a.py": b"A = 2\n",
            "/app/lib/b.py": b"B = 1\n",
            "/app/gone.txt": None,
            "/app/mid.txt": b"mid\n",
            "/app/plugins/old.py": None,
            "/app/plugins/keep.py": None,
            "/app/plugins/new.py": b"NEW = 1\n",
            "/app/top.txt": b"top\n",
            "/app/lib/alias.py": b"A = 2\n",
            "/usr/lib/python3/site.py": b"# site\n",
            "/app/hard/original.txt": b"one inode, two names\n",
            "/app/hard/link.txt": b"one inode, two names\n",
            "/app/lib": None,
            "/app/nothing-here.py": None,
        }


@pytest.fixture(scope="session")
def oci_image(image_builder: ImageBuilder, registry_server: RegistryServer) -> TestImages:
    """Build the standard images with umoci and push them to ``registry_server`` with skopeo."""
    b = image_builder
    b.new("amd64")
    b.repack(
        "amd64",
        BASE_FILES,
        symlinks={"/app/lib/alias.py": "a.py", "/usr/lib/python3": "python3.12"},
        hardlinks={"/app/hard/link.txt": "/app/hard/original.txt"},
    )
    b.repack("amd64", {"/app/lib/a.py": b"A = 2\n", "/app/mid.txt": b"mid\n"}, delete=("/app/gone.txt",))
    b.add_layer(
        "amd64",
        tar_bytes(
            [
                TarEntry("/app/plugins", kind="dir"),
                TarEntry("/app/plugins/.wh..wh..opq"),
                TarEntry("/app/plugins/new.py", b"NEW = 1\n"),
            ]
        ),
    )
    b.repack("amd64", {"/app/top.txt": b"top\n"})
    b.new("arm64", arch="arm64")
    b.repack("arm64", {"/etc/os-release": b"ID=patchkit-test-arm64\n", "/app/lib/a.py": b"A = 'arm64'\n"})
    index_digest = b.index("multi", {"linux/amd64": "amd64", "linux/arm64": "arm64"})
    single = registry_server.push(b.ref("amd64"), "patchkit/layers:v1")
    multi = registry_server.push(b.ref("multi"), "patchkit/multi:v1")
    return TestImages(
        single=single,
        multi=multi,
        single_digest=b.descriptor("amd64")["digest"],
        arm64_digest=b.descriptor("arm64")["digest"],
        index_digest=index_digest,
        layers=len(b.manifest("amd64")["layers"]),
        layout=b.layout,
    )


# --- requests bookkeeping -------------------------------------------------------------------------


class CountingAdapter(HTTPAdapter):
    """An HTTPAdapter that records (method, url) of every request before sending it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        self.sent.append((str(request.method), str(request.url)))
        return super().send(request, *args, **kwargs)


@dataclass
class CountingSession:
    """A requests session (``.session``) that ignores proxy settings and records what it sends (``.sent``)."""

    session: requests.Session
    adapter: CountingAdapter

    @property
    def sent(self) -> list[tuple[str, str]]:
        return self.adapter.sent

    def blob_gets(self) -> list[str]:
        """The blob digests fetched with GET, in order."""
        return [url.rsplit("/", 1)[1] for method, url in self.sent if method == "GET" and "/blobs/" in url]


@pytest.fixture
def counting_session() -> Iterator[CountingSession]:
    """A fresh requests session that counts requests; hand ``.session`` to ``RegistryClient``."""
    session = requests.Session()
    session.trust_env = False  # a proxy from the environment must not see 127.0.0.1 traffic
    adapter = CountingAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    try:
        yield CountingSession(session, adapter)
    finally:
        session.close()


# --- a fake registry for failure shapes ------------------------------------------------------------


@dataclass
class Reply:
    """One answer of the fake registry.

    ``delay`` waits before answering (a slow server); ``send`` sends only that
    many bytes of the body although ``Content-Length`` promises all of it,
    then drops the connection (a truncated body).
    """

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    send: int | None = None


def registry_error(code: str, message: str) -> bytes:
    """An error body in the distribution API's shape."""
    return json.dumps({"errors": [{"code": code, "message": message, "detail": None}]}).encode()


class FakeRegistry:
    """An http.server on 127.0.0.1 answering ``routes[(method, path)]`` (a ``Reply``, or a list used in turn).

    Only for what a real registry cannot be made to do: 500s, slowness,
    truncated bodies, bodies that are not JSON. Unknown paths get a 404 in the
    registry's error shape. ``requests`` records (method, path, headers).
    """

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Reply | list[Reply]] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.host = f"127.0.0.1:{self._server.server_address[1]}"
        self.url = f"http://{self.host}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def route(self, method: str, path: str, *replies: Reply) -> None:
        """Answer ``method path`` with ``replies`` in turn (the last one repeats)."""
        self.routes[(method, path)] = list(replies)

    def _reply(self, method: str, path: str) -> Reply:
        found = self.routes.get((method, path))
        if found is None and method == "HEAD":
            found = self.routes.get(("GET", path))
        if found is None:
            return Reply(404, registry_error("NAME_UNKNOWN", "repository name not known to registry"))
        if isinstance(found, Reply):
            return found
        return found.pop(0) if len(found) > 1 else found[0]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        """A handler class that answers from this registry's routes."""
        return type("Handler", (_RegistryHandler,), {"owner": self})


class _RegistryHandler(BaseHTTPRequestHandler):
    """The fake registry's answers: each request recorded, then the reply routed for it sent (maybe cut short)."""

    protocol_version = "HTTP/1.1"
    owner: FakeRegistry

    def setup(self) -> None:
        super().setup()
        # headers and body go out in two writes: without this, Nagle and delayed ACKs cost 40 ms a request
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _serve(self, method: str) -> None:
        path = urlsplit(self.path).path
        self.owner.requests.append((method, path, dict(self.headers.items())))
        reply = self.owner._reply(method, path)
        if reply.delay:
            time.sleep(reply.delay)
        with contextlib.suppress(OSError):
            self._send(method, reply)
        if reply.send is not None:
            self.close_connection = True

    def _send(self, method: str, reply: Reply) -> None:
        """The reply's status, headers and body; with ``send``, only that many bytes of it, then the close."""
        self.send_response(reply.status)
        for k, v in {"Content-Type": "application/json", **reply.headers}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(reply.body)))
        if reply.send is not None:
            self.send_header("Connection", "close")
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(reply.body if reply.send is None else reply.body[: reply.send])
        self.wfile.flush()

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


@pytest.fixture
def fake_registry() -> Iterator[FakeRegistry]:
    """A fresh fake registry on 127.0.0.1 for one test."""
    server = FakeRegistry()
    try:
        yield server
    finally:
        server.close()


ClientFactory = Callable[..., Any]


@pytest.fixture
def make_client(tmp_path: Path, counting_session: CountingSession) -> ClientFactory:
    """``make_client(**kwargs)``: a RegistryClient on the counting session, with no Docker config
    unless given, short timeouts and no backoff (tests must be fast)."""
    from patchkit.images.registry import RegistryClient

    def make(**kwargs: Any) -> RegistryClient:
        kwargs.setdefault("docker_config", tmp_path / "no-docker-config.json")
        kwargs.setdefault("session", counting_session.session)
        kwargs.setdefault("timeout", 10.0)
        kwargs.setdefault("retries", 1)
        kwargs.setdefault("backoff", 0.0)
        return RegistryClient(**kwargs)

    return make
