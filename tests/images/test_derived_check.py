"""``check --online`` on derived images: the pushed image must still be its base plus exactly the pinned files."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchkit.core.findings import Finding
from patchkit.core.values import Digest
from patchkit.images.registry import RegistryClient
from patchkit.lockfile.reader import loads as load_lock
from patchkit.lockfile.tomlpos import LineIndex
from patchkit.oci.manifest import parse_descriptor
from patchkit.oci.ref import ImageRef
from patchkit.ship.build import LayerFile, build_and_push, layer_tar
from patchkit.ship.verify import layer_differences, pinned_targets
from patchkit.tracking.online import image_findings
from tests.conftest import Invoke, git
from tests.images.conftest import RegistryServer, TestImages
from tests.images.test_build import build, make_derivable, pinned_files

SHA_A = "a" * 64


def findings(root: Path) -> list[Finding]:
    """What ``check --online`` finds about the images of ``root``'s lockfile."""
    text = (root / "lockfile.toml").read_text()
    index = LineIndex(text)
    return image_findings(load_lock(text), index.line_of, RegistryClient())


def codes(found: list[Finding]) -> list[tuple[str, str | None]]:
    return [(f.code, f.field) for f in found]


@pytest.fixture
def built(
    deploy: Path, oci_image: TestImages, registry_server: RegistryServer, invoke: Invoke, tmp_path: Path
) -> Iterator[tuple[Path, dict[str, object]]]:
    """A deployment with its derived image pushed; its layer is unique to the test (a tuning table of its own)."""
    (deploy / "tuning/moe.csv").write_bytes(f"m,n,k,block\n{tmp_path.name}\n".encode())
    assert invoke("lock", repo=deploy).exit_code == 0
    git(deploy, "commit", "-qam", "tune")
    make_derivable(deploy, oci_image.single, invoke)
    doc = build(invoke, deploy, f"{registry_server.host}/derived/checked:{tmp_path.name[-20:].lower()}")
    yield deploy, doc


# --- the layer's contents, pure -------------------------------------------------------------------------


def _tar(entries: list[tarfile.TarInfo], data: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for info in entries:
            payload = data.get(info.name, b"")
            info.size = len(payload) if info.isreg() else 0
            t.addfile(info, io.BytesIO(payload) if info.isreg() else None)
    return buf.getvalue()


def test_layer_differences_name_every_way_a_layer_can_differ() -> None:
    import hashlib

    expected = {"/opt/a.py": hashlib.sha256(b"a").hexdigest(), "/opt/b.py": hashlib.sha256(b"b").hexdigest()}
    assert layer_differences(layer_tar([LayerFile("/opt/a.py", b"a"), LayerFile("/opt/b.py", b"b")], 0), expected) == []

    reg = tarfile.TarInfo("opt/a.py")
    odd_mode = tarfile.TarInfo("opt/b.py")
    odd_mode.mode = 0o4755
    extra = tarfile.TarInfo("etc/extra")
    whiteout = tarfile.TarInfo("usr/lib/.wh.site.py")
    link = tarfile.TarInfo("opt/link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
    directory = tarfile.TarInfo("opt/dir")
    directory.type = tarfile.DIRTYPE
    tar = _tar([reg, odd_mode, extra, whiteout, link, directory], {"opt/a.py": b"A", "opt/b.py": b"b"})
    assert layer_differences(tar, {**expected, "/opt/c.py": SHA_A}) == [
        f"/opt/a.py has sha256 {hashlib.sha256(b'A').hexdigest()[:12]}…, not the pinned {expected['/opt/a.py'][:12]}…",
        "/opt/b.py has mode 4755, not 0644 or 0755",
        "/etc/extra is not pinned",
        "/usr/lib/.wh.site.py is a whiteout: it deletes a file of the base",
        "/opt/link is a symbolic link to /etc/shadow, not a pinned file",
        "/opt/dir is a directory, not a pinned file",
        "/opt/c.py is missing",
    ]
    assert layer_differences(b"not a tar" * 100, expected)[0].startswith("the layer is not a tar archive")


def test_pinned_targets_are_what_the_build_puts_in(deploy: Path) -> None:
    import hashlib

    lock = load_lock((deploy / "lockfile.toml").read_text())
    assert pinned_targets(lock) == {t: hashlib.sha256(b).hexdigest() for t, b in pinned_files(deploy).items()}


# --- against the registry ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_pushed_derived_image_passes(built: tuple[Path, dict[str, object]]) -> None:
    root, _ = built
    assert findings(root) == []


@pytest.mark.slow
def test_a_tampered_top_layer_is_caught(built: tuple[Path, dict[str, object]], registry_server: RegistryServer) -> None:
    root, doc = built
    blob = registry_server.blob_path(str(doc["layer_digest"]))
    original = blob.read_bytes()
    # Someone with write access to the registry's storage swaps the layer for one with another file.
    blob.write_bytes(gzip.compress(layer_tar([LayerFile("/opt/patchkit/entrypoint.sh", b"evil")], 0)))
    try:
        found = findings(root)
    finally:
        blob.write_bytes(original)
    assert codes(found) == [("derived-tampered", "derived.single.digest")]
    assert "hashes to sha256:" in found[0].message and "refusing it" in found[0].message
    assert found[0].fix is not None and found[0].fix.startswith("rebuild and re-pin it: patchkit image build")


@pytest.mark.slow
def test_an_image_with_a_file_that_is_not_pinned_is_caught(
    built: tuple[Path, dict[str, object]], registry_server: RegistryServer
) -> None:
    root, _ = built
    lock = load_lock((root / "lockfile.toml").read_text())
    (pin,) = lock.derived
    files = [LayerFile(t, b) for t, b in pinned_files(root).items()] + [LayerFile("/etc/ld.so.preload", b"/x.so\n")]
    with RegistryClient() as client:
        other = build_and_push(
            client,
            ImageRef.parse(f"{lock.images[0].repository}@{lock.images[0].digest}"),
            ImageRef.parse(f"{registry_server.host}/derived/forged:v1"),
            files,
            pin.created,
        )
    forged = dataclasses.replace(
        pin,
        repository=other.repository,
        digest=other.digest,
        layer_digest=other.layer.digest,
        diff_id=other.layer.diff_id,
    )
    lock = dataclasses.replace(lock, derived=(forged,))
    found = image_findings(lock, lambda _path: None, RegistryClient())
    assert [(f.code, f.message.rsplit(": ", 1)[-1]) for f in found] == [
        ("derived-files", "/etc/ld.so.preload is not pinned")
    ]


@pytest.mark.slow
def test_a_repinned_file_makes_the_derived_image_stale(built: tuple[Path, dict[str, object]], invoke: Invoke) -> None:
    import hashlib

    root, _ = built
    pushed = hashlib.sha256((root / "tuning/moe.csv").read_bytes()).hexdigest()
    retuned = b"m,n,k,block\nretuned\n"
    (root / "tuning/moe.csv").write_bytes(retuned)
    assert invoke("lock", repo=root).exit_code == 0
    found = findings(root)
    assert codes(found) == [("derived-files", "derived.single.layer_digest")]
    now = hashlib.sha256(retuned).hexdigest()
    assert found[0].message.endswith(
        f"top layer: /opt/tuning/moe.csv has sha256 {pushed[:12]}…, not the pinned {now[:12]}…"
    )


@pytest.mark.slow
def test_a_moved_base_pin_and_a_vanished_image_are_findings(
    built: tuple[Path, dict[str, object]], oci_image: TestImages, invoke: Invoke
) -> None:
    root, _ = built
    text = (root / "lockfile.toml").read_text()
    lock = load_lock(text)
    (pin,) = lock.derived
    gone = dataclasses.replace(pin, digest=Digest("sha256:" + SHA_A))
    found = image_findings(dataclasses.replace(lock, derived=(gone,)), lambda _path: None, RegistryClient())
    assert [f.code for f in found] == ["derived-gone"]

    assert invoke("image", "pin", "vllm", oci_image.multi, repo=root).exit_code == 0
    found = findings(root)
    assert codes(found) == [("derived-stale", "derived.single.base_digest")]
    assert f"built on {pin.base_digest}, but images.vllm now pins {oci_image.index_digest}" in found[0].message
    assert found[0].line is not None
    # Offline too: plain `check` knows the base moved without asking the registry.
    r = invoke("check", "--format", "json", repo=root)
    offline = [f for f in json.loads(r.stdout)["findings"] if f["code"] == "derived-stale"]
    assert [(f["field"], f["line"]) for f in offline] == [("derived.single.base_digest", found[0].line)]
    assert r.exit_code == 1


@pytest.mark.slow
def test_check_online_fails_on_a_tampered_layer(
    built: tuple[Path, dict[str, object]],
    registry_server: RegistryServer,
    invoke: Invoke,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, doc = built
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the hub is "unknown", not asked
    r = invoke("check", "--online", "--format", "json", repo=root)
    assert [f["code"] for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"] == []
    blob = registry_server.blob_path(str(doc["layer_digest"]))
    original = blob.read_bytes()
    blob.write_bytes(original[:-10] + b"0123456789")  # same size, other bytes
    try:
        r = invoke("check", "--online", "--format", "json", repo=root)
    finally:
        blob.write_bytes(original)
    assert r.exit_code == 1, r.stdout + r.stderr
    errors = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"]
    assert [(f["code"], f["file"], f["field"]) for f in errors] == [
        ("derived-tampered", "lockfile.toml", "derived.single.digest")
    ]
    assert (
        errors[0]["line"] == (root / "lockfile.toml").read_text().splitlines().index("[derived.single]") + 5
    )  # digest, the 4th key


def _forge(lock_text: str, **changes: object) -> list[Finding]:
    lock = load_lock(lock_text)
    (pin,) = lock.derived
    return image_findings(
        dataclasses.replace(lock, derived=(dataclasses.replace(pin, **changes),)), lambda _p: None, RegistryClient()
    )


@pytest.mark.slow
def test_an_image_on_other_lower_layers_or_with_a_changed_config_is_caught(
    built: tuple[Path, dict[str, object]], registry_server: RegistryServer, oci_image: TestImages
) -> None:
    from patchkit.ship.build import canonical_json

    root, _ = built
    text = (root / "lockfile.toml").read_text()
    lock = load_lock(text)
    (pin,) = lock.derived
    files = [LayerFile(t, b) for t, b in pinned_files(root).items()]
    target = ImageRef.parse(f"{registry_server.host}/derived/forged-base:v1")
    arm64 = ImageRef.parse(f"{registry_server.host}/patchkit/multi@{oci_image.arm64_digest}")
    with RegistryClient() as client:
        other = build_and_push(client, arm64, target, files, pin.created)
        found = _forge(text, repository=other.repository, digest=other.digest)
        assert [f.code for f in found] == ["derived-base-layers"]
        assert "its lower layers are not its base's layers" in found[0].message

        # The pinned image, but its config now sets an environment variable of its own.
        ref = ImageRef.parse(f"{pin.repository}@{pin.digest}")
        manifest = json.loads(client.manifest(ref, pin.digest)[0])
        config = json.loads(client.blob(ref, parse_descriptor(manifest["config"], "config")))
        config.setdefault("config", {})["Env"] = ["LD_PRELOAD=/x.so"]
        body = canonical_json(config)
        desc = client.push_blob(ref, body)
        manifest["config"] = {**manifest["config"], "digest": desc.digest.text, "size": desc.size}
        raw = canonical_json(manifest)
        changed = client.put_manifest(ref, "changed-config", raw, manifest["mediaType"])
    found = _forge(text, digest=changed)
    assert [f.code for f in found] == ["derived-config"]
    assert found[0].message.endswith("its config changes the base's config")


@pytest.mark.slow
def test_a_multi_platform_derived_image_is_checked_per_platform(
    deploy: Path, oci_image: TestImages, registry_server: RegistryServer, invoke: Invoke
) -> None:
    make_derivable(deploy, oci_image.multi, invoke)
    build(invoke, deploy, f"{registry_server.host}/derived/checked-multi:v1")
    assert findings(deploy) == []
    text = (deploy / "lockfile.toml").read_text()
    found = _forge(text, layer_digest=Digest("sha256:" + SHA_A))
    assert [f.code for f in found] == ["derived-layer", "derived-layer"]  # one per platform
    assert all("its top layer is " in f.message and "(sha256:" in f.message for f in found)


@pytest.mark.slow
def test_a_derived_image_with_a_guard_passes_its_own_check(
    deploy: Path,
    oci_image: TestImages,
    registry_server: RegistryServer,
    invoke: Invoke,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With [guard], image build adds guard.json; check --online expects exactly those bytes, and no others."""
    from patchkit.core.values import Revision
    from patchkit.emit.config import load_config
    from patchkit.ship.verify import build_adds
    from tests.conftest import REPO_ROOT
    from tests.images.test_build import DEPLOY_TOML

    root = make_derivable(deploy, oci_image.single, invoke)
    (root / "patches" / "guard.py").write_bytes((REPO_ROOT / "patchkit" / "guard" / "runtime.py").read_bytes())
    r = invoke("add", str(root / "patches" / "guard.py"), "--name", "runtime-guard", "--kind", "module",
               "--target", "/opt/patchkit/guard.py", repo=root)  # fmt: skip
    assert r.exit_code == 0, r.stderr
    (root / "deploy.toml").write_text(DEPLOY_TOML + '\n[guard]\nscript = "runtime-guard"\n')
    assert invoke("emit", repo=root).exit_code == 0
    git(root, "add", "-A")
    git(root, "commit", "-qm", "the runtime guard")
    doc = build(invoke, root, f"{registry_server.host}/derived/guarded:{root.parent.name[-20:].lower()}")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the hub and GitHub are "not checked";
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")  # the registry is asked
    r = invoke("check", "--online", "--format", "json", repo=root)
    assert r.exit_code == 3, r.stdout + r.stderr  # nothing failed
    found = json.loads(r.stdout)["findings"]
    # Nothing failed for the images or the derived image; the note that the test image records no runtime
    # version (so guard.json has no VERSION check) is true and stays.
    about_images = [f for f in found if str(f["field"]).startswith(("derived", "images"))]
    assert [f for f in found if f["severity"] == "error"] == []
    assert [f["code"] for f in about_images] in ([], ["guard-unversioned"])

    # What is compared is the bytes the build wrote: a guard.json rendered from other pins differs.
    text = (root / "lockfile.toml").read_text()
    lock = load_lock(text)
    assert lock.model is not None
    moved = dataclasses.replace(lock, model=dataclasses.replace(lock.model, revision=Revision("b" * 40)))
    found = image_findings(
        moved, lambda _p: None, RegistryClient(), added=build_adds(moved, load_config(root / "deploy.toml"))
    )
    assert [(f.code, f.message.rsplit(": ", 1)[-1].split(" has sha256")[0]) for f in found] == [
        ("derived-files", "/opt/patchkit/guard.json")
    ]

    blob = registry_server.blob_path(str(doc["layer_digest"]))
    original = blob.read_bytes()
    blob.write_bytes(original[:-10] + b"0123456789")  # same size, other bytes
    try:
        r = invoke("check", "--online", "--format", "json", repo=root)
    finally:
        blob.write_bytes(original)
    assert r.exit_code == 1, r.stdout + r.stderr
    errors = [f for f in json.loads(r.stdout)["findings"] if f["severity"] == "error"]
    assert [(f["code"], f["field"]) for f in errors] == [("derived-tampered", "derived.single.digest")]
