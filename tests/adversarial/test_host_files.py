"""Host files into published images: a repository file that is a symlink out, pinned at the host file's hash.

Every attack is generated: each pinned file of a deployment (a tuning table,
the entrypoint, a committed module, an overlay) replaced by a symlink to
``/etc/passwd`` or to a file outside the repository, or reached through a
symlinked directory, with the lockfile and SHA256SUMS re-pinned at the host
file's sha256 (what an attacker who writes the repository can do). ``image
build`` against the real registry, ``bundle``, ``materialize --out`` and
``emit`` must refuse with one line naming the file and publish, write or pin
nothing of the host; ``import`` of a hand-kept repository or patch queue
whose files link out must refuse rather than record the host file's hash.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.adversarial.conftest import patchkit
from tests.conftest import Invoke, snapshot
from tests.images.conftest import RegistryServer, TestImages, image_builder, oci_image, registry_server
from tests.images.test_build import make_derivable

__all__ = ["image_builder", "oci_image", "registry_server"]  # fixtures used here, defined for tests/images

HOST_SECRET = b"root:x:0:0:host secret, not for any image:/root:/bin/sh\n"

# The deploy fixture's pinned files, each read by another path of the code.
PINNED = ("tuning/moe.csv", "entrypoint.sh", "patches/fp8_fnuz.py", "patches/gpu_worker.py")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _repin(root: Path, old: bytes, new: bytes) -> None:
    """Re-pin every record of ``old``'s sha256 (lockfile and SHA256SUMS) at ``new``'s, as an attacker would."""
    for name in ("lockfile.toml", "SHA256SUMS"):
        path = root / name
        if path.exists():
            path.write_text(path.read_text().replace(_sha(old), _sha(new)))


def _host_file(kind: str, outside: Path) -> Path:
    if kind == "etc-passwd":
        return Path("/etc/passwd")
    secret = outside / "host-secret.txt"
    secret.write_bytes(HOST_SECRET)
    return secret


def _link_file(root: Path, rel: str, host: Path) -> bytes:
    """``rel`` replaced by a symlink to ``host``, pinned at the host file's hash; the host file's bytes."""
    old = (root / rel).read_bytes()
    (root / rel).unlink()
    os.symlink(host, root / rel)
    data = host.read_bytes()
    _repin(root, old, data)
    return data


def _link_directory(root: Path, rel: str, outside: Path) -> bytes:
    """``rel``'s directory moved outside and replaced by a symlink to it, ``rel`` holding host bytes there."""
    top = rel.split("/", 1)[0]
    moved = outside / f"moved-{top}"
    shutil.move(root / top, moved)
    os.symlink(moved, root / top)
    old = (moved / rel.split("/", 1)[1]).read_bytes()
    (moved / rel.split("/", 1)[1]).write_bytes(HOST_SECRET)
    _repin(root, old, HOST_SECRET)
    return HOST_SECRET


ATTACKS: list[tuple[str, str]] = [(rel, how) for rel in PINNED for how in ("etc-passwd", "outside-file")]
ATTACKS += [("tuning/moe.csv", "linked-directory"), ("patches/fp8_fnuz.py", "linked-directory")]


def _attack(root: Path, rel: str, how: str, outside: Path) -> bytes:
    if how == "linked-directory":
        return _link_directory(root, rel, outside)
    return _link_file(root, rel, _host_file(how, outside))


def _registry_holds(registry: RegistryServer, needle: bytes) -> list[str]:
    """Every blob in the registry's storage whose bytes (gunzipped when gzip) contain ``needle``."""
    found = []
    for blob in registry.storage.rglob("data"):
        data = blob.read_bytes()
        if data[:2] == b"\x1f\x8b":
            with contextlib.suppress(OSError, EOFError, zlib.error):
                data = gzip.decompress(data)
        if needle in data:
            found.append(str(blob))
    return found


def _refused(stderr: str, rel: str) -> None:
    first = stderr.strip().splitlines()[0]
    assert first.startswith("patchkit: error: "), stderr
    assert "symlink" in first and (rel in first or rel.split("/", 1)[0] in first), first
    assert "Traceback" not in stderr


@pytest.mark.parametrize(("rel", "how"), ATTACKS, ids=[f"{r}-{h}" for r, h in ATTACKS])
def test_image_build_never_packs_a_linked_host_file(
    rel: str,
    how: str,
    deploy: Path,
    oci_image: TestImages,
    registry_server: RegistryServer,
    invoke: Invoke,
    outside: Path,
) -> None:
    root = make_derivable(deploy, oci_image.single, invoke)
    host = _attack(root, rel, how, outside)
    before = snapshot(root)
    push = f"{registry_server.host}/derived/host-files:{abs(hash((rel, how))) % 10**8}"
    r = invoke("image", "build", "--push", push, repo=root)
    assert r.exit_code == 2, r.stdout + r.stderr
    _refused(r.stderr, rel)
    assert snapshot(root) == before
    assert _registry_holds(registry_server, host) == []


@pytest.mark.parametrize(("rel", "how"), ATTACKS, ids=[f"{r}-{h}" for r, h in ATTACKS])
def test_bundle_materialize_and_emit_never_read_through_a_link(
    rel: str, how: str, deploy: Path, oci_image: TestImages, invoke: Invoke, outside: Path, tmp_path: Path
) -> None:
    root = make_derivable(deploy, oci_image.single, invoke)
    host = _attack(root, rel, how, outside)
    before = snapshot(root)
    out = tmp_path / "bundle.tar.gz"
    r = invoke("bundle", "-o", str(out), repo=root)
    assert r.exit_code == 2, r.stdout + r.stderr
    _refused(r.stderr, rel)
    assert not out.exists()
    built = tmp_path / "built"
    built.mkdir()
    r = invoke("materialize", "--out", str(built), repo=root)
    if rel.startswith("patches/"):  # materialize writes the patches' files; the others are not its to read
        assert r.exit_code == 2, r.stdout + r.stderr
        _refused(r.stderr, rel)
    assert all(host not in p.read_bytes() for p in built.rglob("*") if p.is_file())
    if rel == "entrypoint.sh":  # emit validates the entrypoint with sh -n: never through the link
        r = invoke("emit", repo=root)
        assert r.exit_code == 2, r.stdout + r.stderr
        _refused(r.stderr, rel)
    assert snapshot(root) == before


def test_layer_building_refuses_a_linked_artifact(deploy: Path, invoke: Invoke, outside: Path) -> None:
    """The layer's own reader (``runtime_files``), without a registry: the tuning table is refused by name."""
    from patchkit.errors import BadInput
    from patchkit.ship.build import runtime_files
    from patchkit.sources.context import Context
    from patchkit.store.cache import BlobStore
    from patchkit.store.repo import Repo

    _link_file(deploy, "tuning/moe.csv", Path("/etc/passwd"))
    repo = Repo(deploy.resolve())
    lock, _ = repo.read_lockfile()
    cache = outside / "cache"
    with pytest.raises(BadInput) as e:
        runtime_files(repo, lock, BlobStore(cache / "blobs"), Context(cache))
    assert str(e.value).startswith("tuning/moe.csv: is a symlink to /etc/passwd, outside the repository (tuning 'moe'")


# --- import --------------------------------------------------------------------------------------


COMPOSE = (
    "services:\n  vllm:\n    image: vllm/vllm-openai-rocm@sha256:" + "e6" * 32 + "\n    volumes:\n"
    "      - ./patches/fix.py:/opt/fix.py:ro\n"
)


def _hand_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "hand"
    (repo / "patches").mkdir(parents=True)
    (repo / "patches" / "fix.py").write_bytes(b"x = 1\n")
    (repo / "compose.yaml").write_text(COMPOSE)
    return repo


def _linked_compose(repo: Path, outside: Path) -> str:
    (repo / "compose.yaml").rename(outside / "compose.yaml")
    os.symlink(outside / "compose.yaml", repo / "compose.yaml")
    return "compose.yaml"


def _linked_extra_compose(repo: Path, outside: Path) -> str:
    os.symlink("/etc/passwd", repo / "compose.override.yaml")
    return "compose.override.yaml"


def _linked_sums(repo: Path, outside: Path) -> str:
    os.symlink("/etc/passwd", repo / "SHA256SUMS")
    return "SHA256SUMS"


def _linked_note(repo: Path, outside: Path) -> str:
    os.symlink("/etc/passwd", repo / "patches" / "NOTES.md")
    return ""  # skipped as a link, never pinned: no refusal needed, but nothing of the host recorded


def _linked_diff(repo: Path, outside: Path) -> str:
    (outside / "fix.patch").write_bytes(b"--- a/fix.py\n+++ b/fix.py\n@@ -1 +1 @@\n-x = 0\n+x = 1\n")
    os.symlink(outside / "fix.patch", repo / "patches" / "fix.patch")
    return ""


HAND_ATTACKS: dict[str, Callable[[Path, Path], str]] = {
    "compose": _linked_compose,
    "compose-profile": _linked_extra_compose,
    "sha256sums": _linked_sums,
    "note": _linked_note,
    "diff": _linked_diff,
}


@pytest.mark.parametrize("attack", sorted(HAND_ATTACKS))
def test_import_never_pins_a_file_through_a_link(attack: str, tmp_path: Path, outside: Path) -> None:
    repo = _hand_repo(tmp_path)
    refused = HAND_ATTACKS[attack](repo, outside)
    done = patchkit("import", "--format", "json", str(repo), cwd=tmp_path)
    assert "Traceback" not in done.stderr
    secrets = {_sha(Path("/etc/passwd").read_bytes()), *(_sha(p.read_bytes()) for p in outside.iterdir())}
    if refused:
        assert done.returncode == 2, done.stdout + done.stderr
        first = done.stderr.strip().splitlines()[0]
        assert first.startswith(f"patchkit: error: {refused}: is a symlink to "), first
        assert "outside the repository" in first
        assert not (repo / "lockfile.toml").exists()
    else:
        assert done.returncode == 0, done.stderr
        text = (repo / "lockfile.toml").read_text()
        assert not any(s in text for s in secrets), text


QUEUE_PATCH = b"""From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A <a@example.invalid>
Subject: [PATCH] fix

---
diff --git a/vllm/x.py b/vllm/x.py
--- a/vllm/x.py
+++ b/vllm/x.py
@@ -1 +1 @@
-x = 0
+x = 1
"""


def _queue_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "queue"
    (repo / "patches" / "vllm").mkdir(parents=True)
    (repo / "patches" / "vllm" / "0001-fix.patch").write_bytes(QUEUE_PATCH)
    (repo / "patches" / "vllm" / "series").write_text("0001-fix.patch\n")
    (repo / "Containerfile").write_text("FROM base@sha256:" + "ab" * 32 + "\nRUN git apply 0001-fix.patch\n")
    return repo


@pytest.mark.parametrize(
    "rel", ["patches/vllm/0001-fix.patch", "patches/vllm/series", "Containerfile", "build.sh", "profiles/full.txt"]
)
def test_import_of_a_patch_queue_refuses_a_linked_file(rel: str, tmp_path: Path, outside: Path) -> None:
    repo = _queue_repo(tmp_path)
    secret = outside / "host.txt"
    secret.write_bytes(QUEUE_PATCH if rel.endswith(".patch") else b"0001-fix.patch\n")
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    os.symlink(secret, path)
    done = patchkit("import", "--format", "json", str(repo), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    first = done.stderr.strip().splitlines()[0]
    assert first.startswith(f"patchkit: error: {rel}: is a symlink to {secret}, outside the repository"), first
    assert not (repo / "lockfile.toml").exists()


def test_import_never_reads_or_replaces_a_linked_lockfile(tmp_path: Path, outside: Path) -> None:
    repo = _hand_repo(tmp_path)
    kept = outside / "lockfile.toml"
    kept.write_bytes(b"# not this repository's\n")
    os.symlink(kept, repo / "lockfile.toml")
    done = patchkit("import", str(repo), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"patchkit: error: lockfile.toml: is a symlink to {kept}, outside the repository")
    assert (repo / "lockfile.toml").is_symlink() and kept.read_bytes() == b"# not this repository's\n"
