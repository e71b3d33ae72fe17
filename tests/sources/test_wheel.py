"""WheelSource with the real pip: from a find-links directory and from a PEP 503 index served on 127.0.0.1."""

from __future__ import annotations

import base64
import hashlib
import html
import os
import shutil
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from patchkit.errors import EXIT_BAD_INPUT, EXIT_EXTERNAL, BadInput, SourceError
from patchkit.sources.interface import Pin
from patchkit.sources.wheel import WheelSnapshot, WheelSource

WHEEL_1 = "demo_pkg-1.0.0-py3-none-any.whl"
WHEEL_2 = "demo_pkg-2.0.0-py3-none-any.whl"
MOD = b"def answer():\r\n    return 42\n\xff\n"


def build_wheel(directory: Path, version: str) -> Path:
    """A real, installable wheel of ``demo-pkg``: package files, METADATA, WHEEL and a RECORD with hashes."""
    dist_info = f"demo_pkg-{version}.dist-info"
    files = {
        "pkg/__init__.py": f"__version__ = {version!r}\n".encode(),
        "pkg/mod.py": MOD,
        f"demo_pkg-{version}.data/purelib/pkg/extra.py": b"EXTRA = 1\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: demo-pkg\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: patchkit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }

    def record_hash(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{name},{record_hash(data)},{len(data)}\n" for name, data in files.items())
    record += f"{dist_info}/RECORD,,\n"
    path = directory / f"demo_pkg-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{dist_info}/RECORD", record)
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def _hermetic_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip sees only what a test gives it: no user or site configuration, no proxy for 127.0.0.1."""
    for var in list(os.environ):
        if var.startswith("PIP_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("wheelhouse")
    build_wheel(directory, "1.0.0")
    build_wheel(directory, "2.0.0")
    return directory


@pytest.fixture
def links(wheelhouse: Path, tmp_path: Path) -> Path:
    """A find-links directory of this test's own (tests remove it)."""
    directory = tmp_path / "links"
    shutil.copytree(wheelhouse, directory)
    return directory


def offline(links: Path) -> list[str]:
    return ["--no-index", "--find-links", str(links), "--no-cache-dir"]


@dataclass
class Index:
    """A running index: its URL, the paths requested from it, and how to stop it."""

    url: str
    requests: list[str]
    server: ThreadingHTTPServer
    thread: threading.Thread

    def stop(self) -> None:
        if self.thread.is_alive():
            self.server.shutdown()
            self.thread.join(timeout=10)
            self.server.server_close()


@pytest.fixture
def index(wheelhouse: Path, tmp_path: Path) -> Iterator[Index]:
    """A PEP 503 simple index on 127.0.0.1 serving the wheelhouse; stopped when the test ends (or asks)."""
    root = tmp_path / "index"
    (root / "files").mkdir(parents=True)
    (root / "simple" / "demo-pkg").mkdir(parents=True)
    anchors = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        shutil.copy(wheel, root / "files" / wheel.name)
        href = f"../../files/{wheel.name}#sha256={sha256_of(wheel)}"
        anchors.append(f'<a href="{html.escape(href)}">{html.escape(wheel.name)}</a><br/>')
    (root / "simple" / "index.html").write_text('<html><body><a href="demo-pkg/">demo-pkg</a></body></html>\n')
    page = "<!DOCTYPE html>\n<html><body>\n" + "\n".join(anchors) + "\n</body></html>\n"
    (root / "simple" / "demo-pkg" / "index.html").write_text(page)

    requests: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        timeout = 10  # a stuck client cannot hold a server thread for ever

        def log_message(self, format: str, *args: object) -> None:
            requests.append(self.path)

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    running = Index(f"http://127.0.0.1:{server.server_address[1]}/simple/", requests, server, thread)
    try:
        yield running
    finally:
        running.stop()


def cached_wheels(cache: Path) -> list[Path]:
    return sorted((cache / "wheels").rglob("*.whl")) if (cache / "wheels").exists() else []


def test_download_from_find_links_read_members_then_reuse_the_cache_offline(links: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    source = WheelSource("demo-pkg", cache, offline(links))
    snap = source.snapshot("1.0.0")
    digest = sha256_of(links / WHEEL_1)
    assert snap.pin == Pin(kind="wheel", version="1.0.0", sha256=digest, filename=WHEEL_1)
    assert snap.path == cache / "wheels" / digest / WHEEL_1
    assert snap.path.read_bytes() == (links / WHEEL_1).read_bytes()
    assert snap.read(["pkg/mod.py", "pkg/__init__.py", "pkg/extra.py", "pkg/nope.py", "pkg"]) == {
        "pkg/mod.py": MOD,
        "pkg/__init__.py": b"__version__ = '1.0.0'\n",
        "pkg/extra.py": b"EXTRA = 1\n",  # from demo_pkg-1.0.0.data/purelib/, where it installs to
        "pkg/nope.py": None,
        "pkg": None,
    }
    assert snap.read(["demo_pkg-1.0.0.dist-info/METADATA"])["demo_pkg-1.0.0.dist-info/METADATA"] is not None
    # Read as a zip: nothing extracted, no temporary download left behind.
    assert [p.relative_to(cache).as_posix() for p in sorted(cache.rglob("*"))] == [
        "wheels",
        f"wheels/{digest}",
        f"wheels/{digest}/{WHEEL_1}",
    ]

    shutil.rmtree(links)  # no index at all any more
    again = WheelSource("demo-pkg", cache, offline(links)).snapshot("1.0.0", sha256=digest)
    assert again.pin == snap.pin
    assert again.read(["pkg/mod.py"]) == {"pkg/mod.py": MOD}
    with pytest.raises(BadInput, match=f"the pinned sha256 {digest} is {WHEEL_1}, not version 2.0.0 of demo-pkg"):
        WheelSource("demo-pkg", cache, offline(links)).snapshot("2.0.0", sha256=digest)
    # Without the pin a version asks the index, which is gone.
    with pytest.raises(SourceError):
        WheelSource("demo-pkg", cache, offline(links)).snapshot("1.0.0")


def test_download_from_a_simple_index_then_reuse_the_cache_with_the_server_stopped(
    index: Index, tmp_path: Path, wheelhouse: Path
) -> None:
    cache = tmp_path / "cache"
    args = ["--index-url", index.url, "--no-cache-dir", "--retries", "0", "--timeout", "5"]
    snap = WheelSource("Demo_Pkg", cache, args).snapshot("2.0.0")
    digest = sha256_of(wheelhouse / WHEEL_2)
    assert snap.pin == Pin(kind="wheel", version="2.0.0", sha256=digest, filename=WHEEL_2)
    assert snap.read(["pkg/__init__.py"]) == {"pkg/__init__.py": b"__version__ = '2.0.0'\n"}
    assert "/simple/demo-pkg/" in index.requests
    assert f"/files/{WHEEL_2}" in index.requests

    index.stop()
    seen = len(index.requests)
    again = WheelSource("demo-pkg", cache, args).snapshot("2.0.0", sha256=digest)
    assert again.path == snap.path
    assert again.read(["pkg/mod.py"]) == {"pkg/mod.py": MOD}
    assert len(index.requests) == seen


def test_a_wheel_that_does_not_match_its_pin_is_refused_and_not_cached(links: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    actual = sha256_of(links / WHEEL_1)
    pinned = hashlib.sha256(b"the wheel that was reviewed").hexdigest()
    with pytest.raises(BadInput) as e:
        WheelSource("demo-pkg", cache, offline(links)).snapshot("1.0.0", sha256=pinned)
    assert e.value.exit_code == EXIT_BAD_INPUT
    assert pinned in str(e.value)
    assert actual in str(e.value)
    assert "nothing was cached" in str(e.value)
    assert cached_wheels(cache) == []
    assert [p.name for p in (cache / "wheels").iterdir()] == []


def test_a_corrupt_cached_wheel_is_downloaded_again(links: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    digest = sha256_of(links / WHEEL_1)
    corrupt = cache / "wheels" / digest / WHEEL_1
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"not the wheel any more")
    snap = WheelSource("demo-pkg", cache, offline(links)).snapshot("1.0.0", sha256=digest)
    assert snap.path == corrupt
    assert corrupt.read_bytes() == (links / WHEEL_1).read_bytes()
    assert snap.read(["pkg/mod.py"]) == {"pkg/mod.py": MOD}


def test_no_such_version_is_a_source_error_with_pips_reason(links: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as e:
        WheelSource("demo-pkg", cache, offline(links)).snapshot("9.9.9")
    assert e.value.exit_code == EXIT_EXTERNAL
    assert str(e.value) == "pip download demo-pkg==9.9.9 failed: No matching distribution found for demo-pkg==9.9.9"
    assert e.value.hint == "the index has these versions: 1.0.0, 2.0.0"
    assert cached_wheels(cache) == []


def test_bad_names_versions_pins_and_paths_are_bad_input(links: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(BadInput, match="not a Python project name"):
        WheelSource("--index-url=http://evil.invalid/", cache)
    source = WheelSource("demo-pkg", cache, offline(links))
    for version in ("1.0; os_name == 'posix'", ">=1", "1.0,<2", ""):
        with pytest.raises(BadInput, match="is not a version of demo-pkg"):
            source.snapshot(version)
    with pytest.raises(BadInput, match="is not a sha256"):
        source.snapshot("1.0.0", sha256="abc123")
    assert not (cache / "wheels").exists()  # pip never ran
    snap = WheelSnapshot(links / WHEEL_1, sha256_of(links / WHEEL_1))
    assert snap.read(["pkg/mod.py"]) == {"pkg/mod.py": MOD}
    for bad in ("../pkg/mod.py", "/pkg/mod.py", "pkg//mod.py"):
        with pytest.raises(BadInput, match="not a path inside the upstream tree"):
            snap.read([bad])
