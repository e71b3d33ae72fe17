"""The runtime guard for real: containers of a test image from the local registry, on the test Docker engine.

The image is built with umoci from this machine's own Debian ``python3.11``
(the interpreter, the shared libraries it and its extension modules link, and
exactly the standard-library files the guard imports, found by running the guard
once), ``dash`` as ``/bin/sh``, a ``vllm`` package with a ``_version.py`` and an
upstream file the deployment overlays, and a stand-in ``vllm`` command that
prints what it would serve. It is pushed to ``registry_server`` and pulled by
digest, as compose would.

The deployment is built with the CLI in ``tmp_path`` (the shipped entrypoint and
guard, an overlay over the image's file, a new module, a tuning table, a model
pin) and ``patchkit emit`` writes its ``compose.yaml`` and ``guard.json``. Each
container is started with exactly what the compose file says: image, entrypoint,
command, environment and every volume (``./`` sources in the repository, the
Hugging Face cache from ``$HF_CACHE``), then one thing is changed per test.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT, Invoke
from tests.dockerd import Dockerd
from tests.images.conftest import ImageBuilder, RegistryServer, missing

PYTHON = "/usr/bin/python3.11"
SITE = "/usr/local/lib/python3.11/dist-packages"
VERSION = "0.26.1rc1.dev229+g124154a88"
RETAGGED = "0.26.1rc1.dev231+g5d0c1f2e7"
REVISION = "7872f01b1d1fe23eabc4c98b48bffcef5a386062"
UPSTREAM_WORKER = b"def restore(blocks):\n    for b in blocks:\n        copy(b)\n"
OVERLAY_WORKER = b"def restore(blocks):\n    wait_for_compute()\n    for b in blocks:\n        copy(b)\n"
FAKE_VLLM = b'#!/usr/bin/python3\nimport sys\nprint("vllm-stand-in:", " ".join(sys.argv[1:]))\n'
GUARD = REPO_ROOT / "patchkit" / "guard" / "runtime.py"
TRANSFORMER = REPO_ROOT / "patches" / "transformers" / "10-aiter-private-merge.py"
AITER_BLOCK = b'    new_file_path = f"/tmp/{merge_name}.csv"\n'
AITER_CORE = (
    b"def update_config_files(file_path, merge_name):\n    merge_df = load(file_path)\n"
    + AITER_BLOCK
    + b"    merge_df.to_csv(new_file_path, index=False)\n    return new_file_path\n"
)

pytestmark = pytest.mark.slow


def _ldd(path: str) -> set[str]:
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=False).stdout
    found = set()
    for line in out.splitlines():
        parts = line.split()
        for p in parts:
            if p.startswith("/"):
                found.add(p)
                break
    return found


def _guard_files(tmp: Path) -> set[str]:
    """The interpreter files the entrypoint's Python needs: every module file the guard (on its slowest path,
    a metadata lookup) and the shipped AITER transformer (on a copy of the block it rewrites) loaded."""
    manifest = tmp / "probe.json"
    manifest.write_text(
        json.dumps(
            {
                "schema": 1,
                "files": [{"name": "x", "target": "/etc/hostname", "sha256": "0" * 64}],
                "runtime": {"package": "no_such_package_here", "version": "1"},
                "model": {"path": "/nonexistent", "revision": REVISION},
            }
        )
    )
    core = tmp / "core.py"
    core.write_bytes(AITER_CORE)
    probe = (
        "import json, os, runpy, sys\n"
        f"os.environ['AITER_CORE'] = {str(core)!r}\n"
        f"for script, args in (({str(GUARD)!r}, ['--manifest', {str(manifest)!r}]), ({str(TRANSFORMER)!r}, [])):\n"
        "    sys.argv = [script, *args]\n"
        "    try:\n        runpy.run_path(script, run_name='__main__')\n    except SystemExit:\n        pass\n"
        "print(json.dumps(sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, '__file__', None)})))\n"
    )
    out = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, check=True).stdout
    files = {f for f in json.loads(out) if f.startswith("/usr/lib/python3") and os.path.exists(f)}
    files.add("/usr/lib/python3.11/os.py")  # the landmark the interpreter finds its prefix by
    return files


def _layer(files: dict[str, bytes | Path], symlinks: dict[str, str]) -> bytes:
    """A tar layer: host files keep their mode (binaries stay executable), bytes are 0644 (0755 with ``#!``)."""
    buf = io.BytesIO()
    dirs: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:

        def parents(path: str) -> None:
            parts = path.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
                    tf.addfile(info)

        for path, src in sorted(files.items()):
            parents(path)
            data = src.read_bytes() if isinstance(src, Path) else src
            info = tarfile.TarInfo(path.strip("/"))
            info.size, info.mtime = len(data), 1_700_000_000
            if isinstance(src, Path):
                info.mode = src.stat().st_mode & 0o777
            else:
                info.mode = 0o755 if data.startswith(b"#!") else 0o644
            tf.addfile(info, io.BytesIO(data))
        for path, target in sorted(symlinks.items()):
            parents(path)
            info = tarfile.TarInfo(path.strip("/"))
            info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 1_700_000_000
            tf.addfile(info)
    return buf.getvalue()


@dataclass(frozen=True)
class GuardImages:
    good: str  # repository@digest with the pinned version
    retagged: str  # the same repository's tag re-pushed with another version


@pytest.fixture(scope="module")
def guard_images(
    image_builder: ImageBuilder, registry_server: RegistryServer, tmp_path_factory: pytest.TempPathFactory
) -> GuardImages:
    for tool in (PYTHON, "/bin/dash", "/usr/bin/ldd"):
        if not os.path.exists(tool):
            missing(f"{tool} is not on this machine (Debian python3.11, dash, libc-bin)")
    tmp = tmp_path_factory.mktemp("guard-image")
    py_files = _guard_files(tmp)
    binaries = {PYTHON, "/bin/dash", *(f for f in py_files if f.endswith(".so"))}
    libs = set().union(*(_ldd(b) for b in binaries))
    files: dict[str, bytes | Path] = {f: Path(f).resolve() for f in {*binaries, *py_files, *libs}}
    base = {
        "/usr/local/bin/vllm": FAKE_VLLM,
        f"{SITE}/vllm/__init__.py": b"",
        f"{SITE}/vllm/worker.py": UPSTREAM_WORKER,
        f"{SITE}/aiter/__init__.py": b"",
        f"{SITE}/aiter/jit/__init__.py": b"",
        f"{SITE}/aiter/jit/core.py": AITER_CORE,
        "/etc/os-release": b"ID=patchkit-guard-test\n",
        "/dev/shm/.keep": b"",
        "/root/.cache/.keep": b"",
        "/tmp/.keep": b"",
    }
    links = {"/usr/bin/python3": "python3.11", "/bin/sh": "dash"}
    refs = {}
    for tag, version in (("v1", VERSION), ("v2", RETAGGED)):
        image_builder.new(f"guard-{tag}")
        version_file = f"__version__ = version = {version!r}\n".encode()
        layer = _layer({**files, **base, f"{SITE}/vllm/_version.py": version_file}, links)
        image_builder.add_layer(f"guard-{tag}", layer)
        pushed = registry_server.push(image_builder.ref(f"guard-{tag}"), "pk/guard-python:nightly")
        digest = registry_server.inspect(pushed)["Digest"]
        refs[tag] = f"{pushed.rsplit(':', 1)[0]}@{digest}"
    return GuardImages(good=refs["v1"], retagged=refs["v2"])


def _deployment(root: Path, invoke: Invoke, image: str) -> Path:
    """A deployment whose compose.yaml runs ``image``: the shipped entrypoint and guard, an overlay, a module."""
    assert invoke("init", str(root)).exit_code == 0
    repository, digest = image.split("@")
    with (root / "lockfile.toml").open("a") as f:
        f.write(
            f'\n[images.vllm]\nrepository = "{repository}"\ndigest = "{digest}"\nversion = "{VERSION}"\n'
            f'\n[model]\nrepo = "deepseek-ai/DeepSeek-V4-Flash-0731"\nrevision = "{REVISION}"\n'
        )
    assert invoke("lock", repo=root).exit_code == 0
    shutil.copy(REPO_ROOT / "entrypoint.sh", root / "entrypoint.sh")
    shutil.copy(GUARD, root / "patches" / "guard.py")
    (root / "patches" / "transformers").mkdir()
    shutil.copy(TRANSFORMER, root / "patches" / "transformers" / TRANSFORMER.name)
    shutil.copy(REPO_ROOT / "patches" / "aiter_merge_dir.py", root / "patches" / "aiter_merge_dir.py")
    (root / "patches" / "worker.py").write_bytes(OVERLAY_WORKER)
    (root / "patches" / "fp8_fnuz.py").write_bytes(b"FP8_MAX = 224.0\n")
    (root / "tuning" / "moe.csv").write_bytes(b"m,n,k,block\n1,7168,2048,64\n")
    for args in (
        ("patches/guard.py", "--name", "runtime-guard", "--kind", "module", "--target", "/opt/patchkit/guard.py"),
        ("patches/worker.py", "--name", "kv-restore-fence", "--kind", "module", "--target", f"{SITE}/vllm/worker.py"),
        ("patches/fp8_fnuz.py", "--name", "fp8-fnuz", "--kind", "module", "--target", f"{SITE}/vllm/fp8_fnuz.py"),
        ("tuning/moe.csv", "--name", "moe-tuning", "--target", "/opt/tuning/moe.csv"),
        (
            f"patches/transformers/{TRANSFORMER.name}",
            "--name",
            "aiter-private-merge",
            "--kind",
            "transformer",
            "--target",
            f"/opt/patchkit/transformers/{TRANSFORMER.name}",
        ),
        (
            "patches/aiter_merge_dir.py",
            "--name",
            "aiter-merge-dir",
            "--kind",
            "module",
            "--target",
            f"{SITE}/aiter_merge_dir.py",
        ),
        ("entrypoint.sh", "--name", "entrypoint", "--target", "/opt/patchkit/entrypoint.sh"),
    ):
        r = invoke("add", str(root / args[0]), *args[1:], repo=root)
        assert r.exit_code == 0, r.stderr
    (root / "deploy.toml").write_text(
        'schema = 1\nname = "guard-test"\n\n[inference]\nimage = "vllm"\nentrypoint = "entrypoint"\nport = 8000\n'
        'args = ["--served-model-name=dsv4"]\n\n[guard]\nscript = "runtime-guard"\n\n'
        '[profiles.single]\nfile = "compose.yaml"\n\n[[profiles.single.replicas]]\nservice = "vllm"\n'
        'publish = "127.0.0.1:8000"\n'
    )
    r = invoke("emit", repo=root)
    assert r.exit_code == 0, r.stderr
    assert invoke("check", repo=root).exit_code == 0
    return root


@pytest.fixture
def hf_cache(tmp_path: Path) -> Path:
    """A Hugging Face cache holding the pinned revision's snapshot."""
    cache = tmp_path / "hf"
    snap = cache / "hub" / "models--deepseek-ai--DeepSeek-V4-Flash-0731" / "snapshots" / REVISION
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}\n")
    return cache


@pytest.fixture
def repo(tmp_path: Path, invoke: Invoke, guard_images: GuardImages) -> Path:
    return _deployment(tmp_path / "deploy", invoke, guard_images.good)


@dataclass
class Service:
    """What compose.yaml says the inference service runs, in the docker SDK's terms."""

    image: str
    entrypoint: list[str]
    command: list[str]
    environment: dict[str, str]
    volumes: list[str]  # host:target:ro, host side resolved


def service(root: Path, hf_cache: Path) -> Service:
    doc = yaml.safe_load((root / "compose.yaml").read_text())
    svc = doc["services"]["vllm"]
    volumes = []
    for spec in svc["volumes"]:
        if spec.startswith("${HF_CACHE:-"):
            volumes.append(f"{hf_cache}:{spec.split('}:', 1)[1]}")
            continue
        source, rest = spec.split(":", 1)
        volumes.append(f"{root / source[2:]}:{rest}" if source.startswith("./") else spec)
    return Service(svc["image"], svc["entrypoint"], svc["command"], dict(svc.get("environment", {})), volumes)


@dataclass
class Ran:
    status: int
    stdout: str
    stderr: str


def start(dockerd: Dockerd, svc: Service) -> Ran:
    """Run the service's container to its end (the stand-in server exits at once), then remove it."""
    client = dockerd.client
    client.images.pull(svc.image)
    container: Any = client.containers.create(
        svc.image,
        entrypoint=svc.entrypoint,
        command=svc.command,
        environment=svc.environment,
        volumes=svc.volumes,
        network_mode="none",
    )
    try:
        container.start()
        status = container.wait(timeout=120)["StatusCode"]
        out = container.logs(stdout=True, stderr=False).decode()
        err = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    return Ran(status, out, err)


def guard_lines(ran: Ran) -> list[str]:
    return [line for line in ran.stderr.splitlines() if line.startswith("guard: ")]


@pytest.fixture(scope="module", autouse=True)
def _engine_can_run(dockerd: Dockerd) -> Iterator[None]:
    if sys.platform != "linux":
        pytest.skip("containers need Linux")
    yield


def test_everything_matches_and_the_server_starts(dockerd: Dockerd, repo: Path, hf_cache: Path) -> None:
    svc = service(repo, hf_cache)
    ran = start(dockerd, svc)
    assert ran.status == 0, ran.stderr
    model = f"/root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/snapshots/{REVISION}"
    assert ran.stdout == f"vllm-stand-in: serve {model} --served-model-name=dsv4 --port=8000\n"
    lines = guard_lines(ran)
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith(f"guard: ok: 7 files match, vllm {VERSION}, model at {REVISION} (deploy, ")
    # After the guard, the shipped transformer rewrote AITER's exact line in the container.
    transformer = f"/opt/patchkit/transformers/{TRANSFORMER.name}"
    assert ran.stderr.splitlines()[1:] == [
        f"entrypoint: running transformer {transformer}",
        f"10-aiter-private-merge: {SITE}/aiter/jit/core.py: merged tuning tables now go to a private directory",
    ]


def test_a_changed_aiter_makes_the_transformer_refuse_the_start(
    dockerd: Dockerd, repo: Path, hf_cache: Path, tmp_path: Path
) -> None:
    """The guard passes (AITER's file is not ours to pin), the transformer fails closed on the changed block."""
    changed = tmp_path / "core.py"
    changed.write_bytes(AITER_CORE.replace(b'f"/tmp/', b'f"/var/tmp/'))
    svc = service(repo, hf_cache)
    svc.volumes.append(f"{changed}:{SITE}/aiter/jit/core.py:ro")
    ran = start(dockerd, svc)
    assert ran.status == 1
    assert ran.stderr.splitlines()[1:] == [
        f"entrypoint: running transformer /opt/patchkit/transformers/{TRANSFORMER.name}",
        f"10-aiter-private-merge: {SITE}/aiter/jit/core.py: the block to replace is not there exactly once "
        "(AITER changed?); refusing to start",
        f"entrypoint: transformer /opt/patchkit/transformers/{TRANSFORMER.name} failed; refusing to start",
    ]
    assert ran.stdout == ""


def test_a_missing_mount_of_a_new_module_is_refused(dockerd: Dockerd, repo: Path, hf_cache: Path) -> None:
    svc = service(repo, hf_cache)
    svc.volumes = [v for v in svc.volumes if not v.endswith(f":{SITE}/vllm/fp8_fnuz.py:ro")]
    ran = start(dockerd, svc)
    assert ran.status == 1
    assert guard_lines(ran) == [
        f"guard: MISSING {SITE}/vllm/fp8_fnuz.py (fp8-fnuz, module): not in the container; is its mount missing?",
        "guard: refusing to start: 1 mismatch(es) against /opt/patchkit/guard.json (deploy)",
    ]
    assert "entrypoint: the runtime guard refused; not starting" in ran.stderr
    assert ran.stdout == ""


def test_a_missing_overlay_mount_shows_the_images_own_file(dockerd: Dockerd, repo: Path, hf_cache: Path) -> None:
    import hashlib

    svc = service(repo, hf_cache)
    svc.volumes = [v for v in svc.volumes if not v.endswith(f":{SITE}/vllm/worker.py:ro")]
    ran = start(dockerd, svc)
    assert ran.status == 1
    upstream, pinned = hashlib.sha256(UPSTREAM_WORKER).hexdigest(), hashlib.sha256(OVERLAY_WORKER).hexdigest()
    assert guard_lines(ran)[0] == (
        f"guard: STALE {SITE}/vllm/worker.py (kv-restore-fence, module): sha256 {upstream[:12]}… but the lockfile "
        f"pins {pinned[:12]}… (a mount from an older checkout, a missing mount over the image's own file, or an edit)"
    )
    assert len(guard_lines(ran)) == 2
    assert ran.stdout == ""


def test_a_stale_overlay_from_an_older_checkout_is_refused(
    dockerd: Dockerd, repo: Path, hf_cache: Path, tmp_path: Path
) -> None:
    """The manifest and compose of this checkout, the overlay mounted from an older one."""
    older = tmp_path / "older"
    older.mkdir()
    (older / "worker.py").write_bytes(UPSTREAM_WORKER.replace(b"copy(b)", b"copy(b, sync=False)"))
    svc = service(repo, hf_cache)
    svc.volumes = [
        f"{older / 'worker.py'}:{SITE}/vllm/worker.py:ro" if v.endswith(f":{SITE}/vllm/worker.py:ro") else v
        for v in svc.volumes
    ]
    ran = start(dockerd, svc)
    assert ran.status == 1
    lines = guard_lines(ran)
    assert len(lines) == 2, ran.stderr
    assert lines[0].startswith(f"guard: STALE {SITE}/vllm/worker.py (kv-restore-fence, module): sha256 ")


def test_a_retagged_nightly_with_another_version_is_refused(
    dockerd: Dockerd, repo: Path, hf_cache: Path, guard_images: GuardImages
) -> None:
    svc = service(repo, hf_cache)
    svc.image = guard_images.retagged
    ran = start(dockerd, svc)
    assert ran.status == 1
    assert guard_lines(ran)[0] == (
        f"guard: VERSION vllm is {RETAGGED} ({SITE}/vllm/_version.py) but images.vllm records {VERSION} "
        "(a re-tagged nightly, or another image than the pinned digest)"
    )
    assert len(guard_lines(ran)) == 2


def test_a_cache_without_the_pinned_revision_is_refused(
    dockerd: Dockerd, repo: Path, hf_cache: Path, tmp_path: Path
) -> None:
    snapshots = hf_cache / "hub" / "models--deepseek-ai--DeepSeek-V4-Flash-0731" / "snapshots"
    (snapshots / REVISION).rename(snapshots / ("0" * 40))
    ran = start(dockerd, service(repo, hf_cache))
    assert ran.status == 1
    model = f"/root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/snapshots/{REVISION}"
    assert guard_lines(ran) == [
        f"guard: MODEL {model} is missing: the model at the pinned revision {REVISION} is not in the mounted cache "
        "(patchkit model fetch, or mount the cache that has it)",
        "guard: refusing to start: 1 mismatch(es) against /opt/patchkit/guard.json (deploy)",
    ]


def test_a_server_asked_for_another_model_path_is_refused(dockerd: Dockerd, repo: Path, hf_cache: Path) -> None:
    svc = service(repo, hf_cache)
    pinned = svc.command[0]
    wrong = pinned.replace(REVISION, "0" * 40)
    svc.command = [wrong, *svc.command[1:]]
    ran = start(dockerd, svc)
    assert ran.status == 1
    assert guard_lines(ran)[0] == f"guard: MODEL the server is asked to serve {wrong}, not the pinned snapshot {pinned}"


def test_every_mismatch_gets_its_own_line(
    dockerd: Dockerd, repo: Path, hf_cache: Path, guard_images: GuardImages
) -> None:
    svc = service(repo, hf_cache)
    svc.image = guard_images.retagged
    svc.volumes = [v for v in svc.volumes if "/vllm/" not in v.split(":")[1]]
    ran = start(dockerd, svc)
    assert ran.status == 1
    kinds = [line.split()[1] for line in guard_lines(ran)]
    assert kinds == ["MISSING", "STALE", "VERSION", "refusing"], ran.stderr


def test_the_off_switch_is_logged_and_the_server_starts_unchecked(
    dockerd: Dockerd, repo: Path, hf_cache: Path, guard_images: GuardImages
) -> None:
    svc = service(repo, hf_cache)
    svc.image = guard_images.retagged  # would be refused
    svc.environment["PATCHKIT_GUARD"] = "off"
    ran = start(dockerd, svc)
    assert ran.status == 0, ran.stderr
    assert guard_lines(ran) == [
        "guard: PATCHKIT_GUARD=off: the runtime guard is switched off; nothing was checked, the server starts unchecked"
    ]
    assert ran.stdout.startswith("vllm-stand-in: serve ")


def test_a_missing_guard_refuses_unless_switched_off(dockerd: Dockerd, repo: Path, hf_cache: Path) -> None:
    svc = service(repo, hf_cache)
    svc.volumes = [v for v in svc.volumes if not v.endswith(":/opt/patchkit/guard.py:ro")]
    ran = start(dockerd, svc)
    assert ran.status == 1
    assert ran.stderr == (
        "entrypoint: the runtime guard /opt/patchkit/guard.py is missing; refusing to start "
        "(PATCHKIT_GUARD=off starts unchecked)\n"
    )
    svc.environment["PATCHKIT_GUARD"] = "off"
    ran = start(dockerd, svc)
    assert ran.status == 0
    assert "entrypoint: PATCHKIT_GUARD=off and no runtime guard at /opt/patchkit/guard.py; starting unchecked" in (
        ran.stderr
    )
