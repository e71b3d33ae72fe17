"""The nightly bump end to end, on a faithful copy of this repository's own deployment.

The copy keeps the shipped lockfile's shape: ``[images.vllm]`` with its
``version``, the git upstream ``vllm``, the wheel upstreams ``vllm-release``
and ``aiter`` the overlays' bases were taken from, diff-only overlays at the
shipped targets (two vLLM files and AITER's tuning table), the modules, the
guard. What it cannot ship is vLLM itself: the base files here are
synthesized with vLLM's layout (the same paths, a ``vllm/_version.py``),
served as wheels from a local pip directory and as nightly images from a
local ``docker-registry``. The bump then runs as the README and
``.github/workflows/bump-nightly.yml`` run it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from patchkit.core.diffs import canonical_diff
from patchkit.core.values import Digest, Sha256
from patchkit.lockfile.model import Base, DiffPin
from patchkit.lockfile.reader import loads
from patchkit.lockfile.writer import dumps
from tests.conftest import REPO_ROOT, Invoke, copy_shipped, git, snapshot
from tests.images.conftest import ImageBuilder, RegistryServer, run

PREFIX = "/usr/local/lib/python3.12/dist-packages"
WORKER = "vllm/v1/kv_offload/cpu/gpu_worker.py"
FUSED = "vllm/models/deepseek_v4/common/ops/fused_compress_quant_cache.py"
TABLE = "aiter/configs/a8w8_blockscale_tuned_gemm.csv"
OLD_VERSION = "0.26.1rc1.dev229+g124154a88.rocm723"
NEW_VERSION = "0.26.1rc1.dev300+g0123abcd9.rocm723"
XPU = '    if not has_triton or platform == "xpu":\n'


def worker(header: str = "", xpu: str = XPU, tail: str = "") -> bytes:
    """vllm/v1/kv_offload/cpu/gpu_worker.py as a release or a nightly has it (synthesized)."""
    return (
        '"""KV offload between CPU and GPU (synthesized with vLLM\'s layout for patchkit\'s tests)."""\n'
        f"{header}\nimport os\n\n\n"
        "def swap_fn(gpu_to_cpu, has_triton, platform):\n"
        "    if gpu_to_cpu:\n"
        '        return "swap_blocks_batch"\n'
        "    # fall back to the DMA path where kernels cannot read host memory\n"
        f"{xpu}"
        '        return "swap_blocks_batch"\n'
        '    return "triton_copy"\n\n\n'
        "class Worker:\n"
        "    def __init__(self, gpu_to_cpu):\n"
        "        self.gpu_to_cpu = gpu_to_cpu\n"
        "        self.events = []\n\n"
        "    def transfer(self, stream, compute):\n"
        "        if self.gpu_to_cpu:\n"
        "            # wait for model computation to finish before offloading\n"
        "            stream.wait_stream(compute)\n"
        "        self.events.append(os.getpid())\n"
        "        return stream\n"
        f"{tail}"
    ).encode()


def patched_worker(base: bytes) -> bytes:
    """The kv-restore-fence change: the DMA path on ROCm too, and both directions fenced."""
    return base.replace(XPU.encode(), b'    if not has_triton or platform in ("xpu", "rocm"):\n').replace(
        b"        if self.gpu_to_cpu:\n            # wait for model computation to finish before offloading\n"
        b"            stream.wait_stream(compute)\n",
        b"        # fence both directions behind in-flight compute\n        stream.wait_stream(compute)\n",
    )


def fused(header: str = "") -> bytes:
    return (
        f'"""Fused compress and quantize into the indexer cache (synthesized).{header}"""\n\n'
        "FP8_MAX = 448.0\n\n\n"
        "def quantize(x, scale):\n"
        "    return min(max(x / scale, -FP8_MAX), FP8_MAX)\n"
    ).encode()


def patched_fused(base: bytes) -> bytes:
    return base.replace(b"FP8_MAX = 448.0\n", b"FP8_MAX = 224.0  # e4m3fnuz on gfx942\n")


def table(extra: str = "") -> bytes:
    return f"cu_num,M,N,K,kernelId,us\n304,1,7168,2048,12,8.1\n{extra}304,16,7168,2048,14,9.0\n".encode()


def patched_table(base: bytes) -> bytes:
    return base + b"304,1,2048,4096,21,5.2\n304,1,4096,2048,22,5.9\n"


# The pinned nightly, two clean ones and one whose upstream change hits the patch's line.
NIGHTLY_OLD = {WORKER: worker("# nightly 229"), FUSED: fused(), TABLE: table()}
NIGHTLY_CLEAN = {
    WORKER: worker("# nightly 300", tail="\n    def close(self):\n        return None\n"),
    FUSED: fused(" Nightly 300."),
    TABLE: table("304,8,7168,2048,13,8.5\n"),
}
NIGHTLY_CONFLICT = {
    WORKER: worker("# nightly 310", xpu='    if not has_triton or platform in ("xpu", "hpu"):\n'),
    FUSED: fused(),
    TABLE: table(),
}
RELEASE = {WORKER: worker(), FUSED: fused(), TABLE: table()}


def wheel(root: Path, project: str, dist: str, version: str, files: dict[str, bytes]) -> Path:
    """A pure wheel of ``project`` holding ``files``, where pip finds it (--find-links)."""
    path = root / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in sorted(files.items()):
            z.writestr(name, data)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    path.write_bytes(buf.getvalue())
    return path


def nightly(
    builder: ImageBuilder, registry: RegistryServer, tag: str, files: dict[str, bytes], version: str, created: str
) -> str:
    """A nightly image carrying vLLM's and AITER's files at the shipped targets; its digest."""
    builder.new(tag)
    content = {f"{PREFIX}/{path}": data for path, data in files.items()}
    content[f"{PREFIX}/vllm/_version.py"] = f"__version__ = version = '{version}'\n".encode()
    builder.repack(tag, content)
    run("umoci", "config", "--image", f"{builder.layout}:{tag}", "--created", created)
    registry.push(builder.ref(tag), f"vllm/vllm-openai-rocm:{tag}")
    raw = run(
        "skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{registry.host}/vllm/vllm-openai-rocm:{tag}"
    )
    return "sha256:" + hashlib.sha256(raw.encode()).hexdigest()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def shipped_copy(
    tmp_path: Path,
    invoke: Invoke,
    image_builder: ImageBuilder,
    registry_server: RegistryServer,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """This repository's deployment, its vLLM files synthesized, pinned to a nightly in a local registry."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    vllm_whl = wheel(wheels, "vllm", "vllm", "0.26.0", {**RELEASE, "vllm/_version.py": b"__version__ = '0.26.0'\n"})
    aiter_whl = wheel(wheels, "amd-aiter", "amd_aiter", "0.1.7.post2.dev18", {TABLE: RELEASE[TABLE]})
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    suffix = tmp_path.name[-12:].replace("_", "-").lower()
    old = nightly(image_builder, registry_server, f"old-{suffix}", NIGHTLY_OLD, OLD_VERSION, "2026-11-01T05:00:00Z")
    root = copy_shipped(tmp_path / "deploy")
    lock = loads((root / "lockfile.toml").read_text())
    repository = f"{registry_server.host}/vllm/vllm-openai-rocm"
    images = tuple(
        replace(i, repository=repository, digest=Digest(old), tag="nightly") if i.name == "vllm" else i
        for i in lock.images
    )
    upstreams = tuple(
        replace(u, wheel_sha256=Sha256(sha(vllm_whl.read_bytes())), wheel_file=vllm_whl.name)
        if u.name == "vllm-release"
        else replace(u, wheel_sha256=Sha256(sha(aiter_whl.read_bytes())), wheel_file=aiter_whl.name)
        if u.name == "aiter"
        else u
        for u in lock.upstreams
    )
    changes = {
        "kv-restore-fence": patched_worker,
        "dsv4-indexer-fnuz": patched_fused,
        "aiter-dsv4-blockscale-gemm": patched_table,
    }
    patches = []
    for p in lock.patches:
        if p.name in changes:
            assert p.base is not None and p.diff is not None and p.file is None  # diff-only, as shipped
            base = RELEASE[str(p.base.path)]
            new = changes[p.name](base)
            assert new != base
            diff = canonical_diff(base, new, p.base.path)
            (root / str(p.diff.file)).write_bytes(diff)
            p = replace(
                p,
                sha256=Sha256(sha(new)),
                base=Base(p.base.upstream, p.base.path, Sha256(sha(base)), version=p.base.version),
                diff=DiffPin(p.diff.file, Sha256(sha(diff))),
            )
        patches.append(p)
    (root / "lockfile.toml").write_text(
        dumps(replace(lock, images=images, upstreams=upstreams, patches=tuple(patches)))
    )
    for args in (("sums",), ("emit",), ("sums",)):
        r = invoke(*args, repo=root)
        assert r.exit_code == 0, (args, r.stdout, r.stderr)
    r = invoke("check", repo=root)
    assert r.exit_code == 0, r.stdout + r.stderr
    (root / ".gitignore").write_text(".venv/\n.patchkit/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "deployment")
    return root


def run_step(root: Path, runner: Path, image: str) -> subprocess.CompletedProcess[str]:
    """The workflow's "Bump" step, in bash -e as the runner runs it, with this Python as .venv/bin/patchkit."""
    doc = yaml.safe_load((REPO_ROOT / ".github/workflows/bump-nightly.yml").read_text())
    (step,) = [s for s in doc["jobs"]["bump"]["steps"] if s.get("name") == "Bump"]
    venv = root / ".venv" / "bin"
    venv.mkdir(parents=True, exist_ok=True)
    (venv / "patchkit").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m patchkit "$@"\n')
    (venv / "patchkit").chmod(0o755)
    runner.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "IMAGE": image,
        "RUNNER_TEMP": str(runner),
        "GITHUB_OUTPUT": str(runner / "output"),
        "GITHUB_STEP_SUMMARY": str(runner / "step-summary.md"),
    }
    return subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=root, env=env, capture_output=True, text=True, check=False, timeout=600
    )


def images_table(root: Path) -> dict[str, object]:
    return dict(tomllib.loads((root / "lockfile.toml").read_text())["images"]["vllm"])


def test_the_workflow_bump_rebases_every_overlay_onto_the_new_nightly(
    shipped_copy: Path, invoke: Invoke, image_builder: ImageBuilder, registry_server: RegistryServer, tmp_path: Path
) -> None:
    root = shipped_copy
    repository = f"{registry_server.host}/vllm/vllm-openai-rocm"
    tag = f"nightly-{tmp_path.name[-12:].replace('_', '-').lower()}"
    new = nightly(image_builder, registry_server, tag, NIGHTLY_CLEAN, NEW_VERSION, "2026-11-20T05:00:00Z")
    # .github/workflows/bump-nightly.yml's step "Bump", as the runner runs it, on a checkout of the deployment
    r = run_step(root, tmp_path / "runner", f"{repository}:{tag}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "runner" / "output").read_text() == "changed=true\n"
    assert "no patch" not in r.stdout
    for name in ("kv-restore-fence", "dsv4-indexer-fnuz", "aiter-dsv4-blockscale-gemm"):
        assert f"{name} " in r.stdout
    summary = tmp_path / "runner" / "summary.md"
    assert (tmp_path / "runner" / "step-summary.md").read_text() == summary.read_text()
    r = invoke("check", repo=root)
    assert r.exit_code == 0, r.stdout + r.stderr

    lock = tomllib.loads((root / "lockfile.toml").read_text())
    assert lock["images"]["vllm"]["digest"] == new
    assert lock["images"]["vllm"]["version"] == NEW_VERSION  # the guard's VERSION check follows the image
    assert lock["upstreams"]["vllm-image"] == {
        "source": "image",
        "image": repository,
        "image_digest": new,
        "prefix": PREFIX,
        "version": NEW_VERSION,
        "note": lock["upstreams"]["vllm-image"]["note"],
    }
    by_name = {p["name"]: p for p in lock["patches"]}
    for name, path in (
        ("kv-restore-fence", WORKER),
        ("dsv4-indexer-fnuz", FUSED),
        ("aiter-dsv4-blockscale-gemm", TABLE),
    ):
        base = by_name[name]["base"]
        # the base is the new image's file, verified there, not the wheel's
        assert (base["upstream"], base["path"], base["sha256"]) == ("vllm-image", path, sha(NIGHTLY_CLEAN[path]))
    diff = (root / "upstream/kv-restore-fence.diff").read_text()
    assert "+# nightly 300" not in diff and 'platform in ("xpu", "rocm")' in diff  # only the patch's own change

    guard = json.loads((root / "guard.json").read_text())
    assert guard["runtime"]["version"] == NEW_VERSION and guard["runtime"]["digest"] == new
    text = summary.read_text()
    assert "kv-restore-fence" in text and "aiter-dsv4-blockscale-gemm" in text
    assert "## Bases moved onto the image" in text and "were files of upstream 'vllm-release'" in text

    # A bare re-pin of the image, without a rebase, leaves overlays built for another image: offline check fails.
    other = nightly(image_builder, registry_server, f"{tag}-x", NIGHTLY_CONFLICT, NEW_VERSION, "2026-11-21T05:00:00Z")
    r = invoke("image", "pin", "vllm", f"{repository}@{other}", repo=root)
    assert r.exit_code == 0, r.stderr
    assert invoke("emit", repo=root).exit_code == 0
    r = invoke("check", repo=root)
    assert r.exit_code == 1, r.stdout + r.stderr  # the bases record the image they were verified against


def test_a_bump_that_conflicts_changes_nothing_and_continues_onto_the_image(
    shipped_copy: Path, invoke: Invoke, image_builder: ImageBuilder, registry_server: RegistryServer, tmp_path: Path
) -> None:
    root = shipped_copy
    repository = f"{registry_server.host}/vllm/vllm-openai-rocm"
    tag = f"conflict-{tmp_path.name[-12:].replace('_', '-').lower()}"
    new = nightly(image_builder, registry_server, tag, NIGHTLY_CONFLICT, NEW_VERSION, "2026-12-01T05:00:00Z")
    before = snapshot(root)
    r = invoke("bump", "--image", f"{repository}:{tag}", "--format", "json", repo=root)
    assert r.exit_code == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert not doc["committed"]
    assert {p["name"]: p["outcome"] for p in doc["patches"]}["kv-restore-fence"] == "conflict"
    assert {k: v for k, v in snapshot(root).items() if not k.startswith(".patchkit/")} == before
    (conflicted,) = doc["work_files"]
    r = invoke("bump", "--image", f"{repository}:{tag}", repo=root)
    assert r.exit_code == 1 and "a rebase is already in progress" in r.stderr, r.stderr
    state = root / ".patchkit/rebase/state.json"
    saved = state.read_bytes()
    state.write_text(json.dumps({**json.loads(saved), "image_upstream": {"name": "vllm-image"}}))
    r = invoke("rebase", "--continue", repo=root)
    assert r.exit_code == 2 and "state.json: malformed" in r.stderr, r.stderr
    state.write_bytes(saved)
    merged = (root / conflicted).read_text()
    resolved = []
    skip = False
    for line in merged.splitlines(keepends=True):  # take both platforms: ("xpu", "hpu", "rocm")
        if line.startswith("<<<<<<<"):
            skip = True
            resolved.append('    if not has_triton or platform in ("xpu", "hpu", "rocm"):\n')
        elif line.startswith(">>>>>>>"):
            skip = False
        elif not skip:
            resolved.append(line)
    (root / conflicted).write_text("".join(resolved))
    r = invoke("rebase", "--continue", repo=root)
    assert r.exit_code == 0, r.stdout + r.stderr
    lock = tomllib.loads((root / "lockfile.toml").read_text())
    assert lock["images"]["vllm"]["digest"] == new and lock["images"]["vllm"]["version"] == NEW_VERSION
    by_name = {p["name"]: p for p in lock["patches"]}
    assert by_name["kv-restore-fence"]["base"]["upstream"] == "vllm-image"
    assert by_name["kv-restore-fence"]["base"]["sha256"] == sha(NIGHTLY_CONFLICT[WORKER])
    assert invoke("emit", repo=root).exit_code == 0
    r = invoke("check", repo=root)
    assert r.exit_code == 0, r.stdout + r.stderr


def test_latest_clean_picks_the_newest_image_every_patch_moves_onto(
    shipped_copy: Path, invoke: Invoke, image_builder: ImageBuilder, registry_server: RegistryServer, tmp_path: Path
) -> None:
    root = shipped_copy
    repository = f"{registry_server.host}/vllm/vllm-openai-rocm"
    s = tmp_path.name[-12:].replace("_", "-").lower()
    # Tag spelling and creation time disagree: by spelling, n3 would be the newest.
    digests = {
        f"n3-{s}": nightly(image_builder, registry_server, f"n3-{s}", NIGHTLY_OLD, OLD_VERSION, "2026-11-02T05:00:00Z"),
        f"n2-{s}": nightly(
            image_builder, registry_server, f"n2-{s}", NIGHTLY_CLEAN, NEW_VERSION, "2026-11-20T05:00:00Z"
        ),
        f"n1-{s}": nightly(
            image_builder, registry_server, f"n1-{s}", NIGHTLY_CONFLICT, NEW_VERSION, "2026-12-01T05:00:00Z"
        ),
    }
    before = snapshot(root)
    r = invoke("bump", "--image", repository, "--latest-clean", "--tags", f"n?-{s}", "--format", "json", repo=root)
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert [c["tag"] for c in doc["tried"]] == [f"n1-{s}", f"n2-{s}"]  # newest first, stops at the first clean
    assert doc["tried"][0]["outcomes"]["kv-restore-fence"] == "conflict" and not doc["tried"][0]["clean"]
    assert doc["newest_clean"]["tag"] == f"n2-{s}" and doc["newest_clean"]["digest"] == digests[f"n2-{s}"]
    assert doc["newest_clean"]["version"] == NEW_VERSION
    assert f"n1-{s}" in r.stderr and "conflict" in r.stderr  # progress on stderr
    assert snapshot(root) == before  # a dry run: nothing written

    r = invoke("bump", "--image", repository, "--latest-clean", "--tag", f"n1-{s}", repo=root)
    assert r.exit_code == 1 and "no tag tried is clean" in r.stdout
    assert snapshot(root) == before

    r = invoke(
        "bump", "--image", repository, "--latest-clean", "--tags", f"n?-{s}", "--apply", "--format", "json", repo=root
    )
    assert r.exit_code == 0, r.stdout + r.stderr
    applied = json.loads(r.stdout)  # one document: the bump, with the search that chose its image
    assert applied["committed"] and applied["latest_clean"]["newest_clean"]["tag"] == f"n2-{s}"
    assert images_table(root)["digest"] == digests[f"n2-{s}"]
    assert invoke("emit", repo=root).exit_code == 0
    assert invoke("check", repo=root).exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tag", "n1"), "--tag, --tags and --apply are for --latest-clean"),
        (("--apply",), "--tag, --tags and --apply are for --latest-clean"),
        (("--latest-clean",), "with --latest-clean, give the repository alone"),
        (("--latest-clean", "--tag", "not a tag!"), "not a tag"),
    ],
)
def test_bump_refuses_bad_usage(
    shipped_copy: Path, invoke: Invoke, registry_server: RegistryServer, args: tuple[str, ...], message: str
) -> None:
    image = f"{registry_server.host}/vllm/vllm-openai-rocm"
    image += ":nightly" if "--latest-clean" in args and "--tag" not in args else ""
    r = invoke("bump", "--image", image, *args, repo=shipped_copy)
    assert r.exit_code == 2 and message in r.stderr, r.stderr


def test_the_bump_nightly_page_works_as_written(
    shipped_copy: Path, invoke: Invoke, image_builder: ImageBuilder, registry_server: RegistryServer, tmp_path: Path
) -> None:
    """docs/bump-nightly.md's patchkit commands, in order, with the local registry's repository and tags."""
    repository = f"{registry_server.host}/vllm/vllm-openai-rocm"
    s = tmp_path.name[-12:].replace("_", "-").lower()
    nightly(image_builder, registry_server, f"d1-{s}", NIGHTLY_CONFLICT, NEW_VERSION, "2026-12-02T05:00:00Z")
    clean = nightly(image_builder, registry_server, f"d2-{s}", NIGHTLY_CLEAN, NEW_VERSION, "2026-11-25T05:00:00Z")
    text = (REPO_ROOT / "docs/bump-nightly.md").read_text()
    commands = [shlex.split(line[2:]) for line in re.findall(r"^\$ patchkit .*$", text, re.MULTILINE)]
    assert [c[1] for c in commands] == ["check", "bump", "bump", "emit", "check"]
    summary = tmp_path / "summary.md"
    local = {
        "vllm/vllm-openai-rocm": repository,
        "vllm/vllm-openai-rocm:nightly": f"{repository}:d2-{s}",
        "nightly*": f"d?-{s}",
        "/tmp/summary.md": str(summary),
    }
    for command in commands:
        r = invoke(*(local.get(arg, arg) for arg in command[1:]), repo=shipped_copy)
        assert r.exit_code == 0, (command, r.stdout + r.stderr)
    assert images_table(shipped_copy)["digest"] == clean
    assert "kv-restore-fence" in summary.read_text()
