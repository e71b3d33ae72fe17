#!/usr/bin/env python3
"""Benchmark: reading 30 files out of a 2 GB image in a registry, patchkit against skopeo + tar.

Issue 4 ("Speed and memory") asks for the wall time and peak memory of
extracting 30 files from an image of at least 2 GB in a local registry, beside
``skopeo copy`` to a directory plus ``tar`` extraction of the same files, with
patchkit's peak memory under 200 MB whatever the layer size. In one run, this
script:

* starts its own ``/usr/bin/docker-registry`` on 127.0.0.1 (a free port,
  storage under ``--workdir``) and stops it at the end, on errors and Ctrl-C
  too;
* builds (or reuses) a deterministic OCI image of about ``--size-gb`` GB with
  umoci: six gzip layers, most of the bytes in a few large incompressible
  files (a seeded 4 MiB random block repeated, which deflate's 32 KiB window
  cannot compress), 30 target ``.py`` files spread over every layer (some
  overwritten higher up) and a file deleted by a whiteout; then pushes it with
  ``skopeo copy``;
* with a warm page cache (every candidate runs once, untimed, first) times,
  best and median of ``--repeat`` runs, interleaved round by round:

  a.  ``patchkit image files REF <30 paths> --out DIR`` as a subprocess;
  a2. the same for the 15 targets whose last version is in the top two
      layers, where patchkit may stop before the big layers below;
  b.  ``skopeo copy docker://REF dir:COPY``, then ``tar -x`` of the same 30
      paths out of each layer blob, bottom layer first so the top one wins,
      deleting what a whiteout removes;

  with the CPU time and peak resident memory of every process (``ru_maxrss``
  from GNU ``/usr/bin/time -f %M``, or ``os.wait4`` without it), the bytes
  each run downloaded (from the registry's access log) and every extracted
  file checked byte for byte against the image's.

Sizes are decimal (1 GB = 10**9 bytes, 1 MB = 10**6 bytes).

Run: ``python bench/bench_image.py [--size-gb 2] [--workdir DIR] [--repeat 3] [--json]``.
With ``--json`` the human-readable report goes to stderr and a JSON document
to stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

# bench/benchlib.py: bench/ is sys.path[0] when this runs as a script (isort files it as third-party)
from benchlib import Cost, Measured, Meter, Out, Timing, fail, find_patchkit, run_checked, run_measured

PROG = "bench_image"  # prefixes its error messages
BENCH_DIR = Path(__file__).resolve().parent

IMAGE_VERSION = 1  # bump when the layout or content generator changes, to force a rebuild
SEED = 0x1A6E_5EED
MIB = 1024 * 1024
GB = 10**9
MB = 10**6
#: Large files cycle through this many seeded random bytes: a repeat is 4 MiB back, far beyond
#: the 32 KiB window of deflate, so gzip cannot shrink them.
POOL_SIZE = 4 * MIB
MTIME = 1_700_000_000
MEMORY_TARGET = 200 * MB  # the issue: patchkit's peak memory under 200 MB whatever the layer size
MIN_COMPRESSED_SHARE = 0.98  # the gzip layers must stay this close to the tar bytes
FREE_MARGIN = 1 * GB

REGISTRY_BIN = "/usr/bin/docker-registry"
REPOSITORY = "bench/big"
TAG = "v1"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
GZIP_LAYERS = frozenset(
    {"application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.docker.image.rootfs.diff.tar.gzip"}
)
PLAIN_LAYERS = frozenset({"application/vnd.oci.image.layer.v1.tar", "application/vnd.docker.image.rootfs.diff.tar"})

PREFIX = "/usr/local/lib/python3.12/dist-packages/"
TARGETS = tuple(
    PREFIX + name
    for name in (
        "vllm/envs.py",
        "vllm/config.py",
        "vllm/utils.py",
        "vllm/sequence.py",
        "vllm/engine/arg_utils.py",
        "vllm/engine/llm_engine.py",
        "vllm/engine/async_llm_engine.py",
        "vllm/entrypoints/openai/api_server.py",
        "vllm/entrypoints/openai/serving_chat.py",
        "vllm/entrypoints/llm.py",
        "vllm/model_executor/layers/linear.py",
        "vllm/model_executor/layers/layernorm.py",
        "vllm/model_executor/layers/rotary_embedding.py",
        "vllm/model_executor/layers/sampler.py",
        "vllm/model_executor/models/llama.py",
        "vllm/model_executor/models/qwen2.py",
        "vllm/model_executor/model_loader/loader.py",
        "vllm/attention/backends/flash_attn.py",
        "vllm/attention/backends/rocm_flash_attn.py",
        "vllm/attention/selector.py",
        "vllm/distributed/parallel_state.py",
        "vllm/distributed/communication_op.py",
        "vllm/worker/worker.py",
        "vllm/worker/model_runner.py",
        "vllm/core/scheduler.py",
        "vllm/core/block_manager.py",
        "vllm/platforms/rocm.py",
        "vllm/platforms/cuda.py",
        "vllm/lora/layers.py",
        "vllm/_version.py",
    )
)


@dataclass(frozen=True)
class LayerSpec:
    """One layer, bottom first: its large files (path, share of the total size) and new targets."""

    name: str
    large: tuple[tuple[str, float], ...]
    new_targets: int  # the next this many of TARGETS first appear here
    rewrites: tuple[int, ...] = ()  # indexes into TARGETS written again here (the image shows this version)


LAYERS = (
    LayerSpec(
        "cuda",
        (("/usr/local/cuda/lib64/libcublasLt.so.12", 0.26), ("/usr/local/cuda/lib64/libcudnn_engines.so.9", 0.14)),
        4,
    ),
    LayerSpec("torch", ((PREFIX + "torch/lib/libtorch_cuda.so", 0.27),), 5),
    LayerSpec(
        "nccl",
        ((PREFIX + "nvidia/nccl/lib/libnccl.so.2", 0.10), (PREFIX + "flash_attn_2_cuda.cpython-312-x86_64.so", 0.08)),
        6,
    ),
    LayerSpec("kernels", ((PREFIX + "vllm/_C.abi3.so", 0.10),), 5, rewrites=(0,)),
    LayerSpec("vllm", ((PREFIX + "vllm/_moe_C.abi3.so", 0.04),), 5, rewrites=(4, 5)),
    LayerSpec("app", ((PREFIX + "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", 0.01),), 5, rewrites=(1, 9, 10)),
)
#: Added in layer DELETED_IN - 2 (bottom = 1), deleted by a whiteout in layer DELETED_IN: not a target.
DELETED = PREFIX + "vllm/legacy/old_engine.py"
DELETED_FROM, DELETED_IN = 2, 4
FILLERS_PER_LAYER = 40  # small non-target .py files per layer, for a realistic member count
TOP_LAYERS = 2  # row a2 asks for the targets whose last version lies in this many top layers

# --------------------------------------------------------------------------- the image plan


@dataclass(frozen=True)
class Member:
    """One regular file of a layer tar: small (``data``) or large (``size`` pool bytes from ``offset``)."""

    path: str
    data: bytes = b""
    size: int = 0
    offset: int = 0

    @property
    def length(self) -> int:
        return len(self.data) if self.size == 0 else self.size


@dataclass(frozen=True)
class LayerPlan:
    name: str
    members: tuple[Member, ...]

    @property
    def tar_estimate(self) -> int:
        return sum(m.length for m in self.members)


@dataclass(frozen=True)
class ImagePlan:
    layers: tuple[LayerPlan, ...]  # bottom first
    targets: dict[str, bytes]  # what the image shows at each target path
    source_layer: dict[str, int]  # target -> the layer (1 = bottom) its bytes come from

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for layer in self.layers:
            h.update(f"layer {layer.name}\n".encode())
            for m in layer.members:
                h.update(f"{m.path} {m.size} {m.offset} {hashlib.sha256(m.data).hexdigest()}\n".encode())
        return h.hexdigest()

    def top_targets(self) -> list[str]:
        """The targets whose bytes come from the top ``TOP_LAYERS`` layers."""
        first = len(self.layers) - TOP_LAYERS + 1
        return [t for t in self.targets if self.source_layer[t] >= first]


def module_text(path: str, layer: int, rng: random.Random) -> bytes:
    """A small deterministic Python module; ``layer`` is in its docstring, so each version differs."""
    lines = [f'"""{path}: bench_image target, version of layer {layer}."""', "", "from __future__ import annotations"]
    for i in range(rng.randint(8, 60)):
        a, b = rng.randint(2, 97), rng.randint(0, 9999)
        lines += ["", "", f"def step_{i}(x: int, scale: int = {a}) -> int:", f"    return x * scale + {b}"]
    return ("\n".join(lines) + "\n").encode()


def plan_image(total: int, seed: int) -> ImagePlan:
    """The deterministic content of every layer; large files get ``total`` bytes in all (MiB-rounded, up)."""
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not cryptography
    layers: list[LayerPlan] = []
    targets: dict[str, bytes] = {}
    source: dict[str, int] = {}
    next_target = 0
    for number, spec in enumerate(LAYERS, start=1):
        smalls: list[Member] = []
        for i in spec.rewrites:
            smalls.append(Member(TARGETS[i], module_text(TARGETS[i], number, rng)))
        for path in TARGETS[next_target : next_target + spec.new_targets]:
            smalls.append(Member(path, module_text(path, number, rng)))
        next_target += spec.new_targets
        if number == DELETED_FROM:
            smalls.append(Member(DELETED, module_text(DELETED, number, rng)))
        if number == DELETED_IN:
            head, tail = DELETED.rsplit("/", 1)
            smalls.append(Member(f"{head}/.wh.{tail}"))  # an empty file: the whiteout
        for i in range(FILLERS_PER_LAYER):
            path = f"{PREFIX}{spec.name}_extras/mod_{number}_{i:03d}.py"
            smalls.append(Member(path, module_text(path, number, rng)))
        for m in smalls:
            if m.path in TARGETS:
                targets[m.path] = m.data
                source[m.path] = number
        large = [
            Member(path, size=max(MIB, -(-int(total * share) // MIB) * MIB), offset=rng.randrange(POOL_SIZE))
            for path, share in spec.large
        ]
        # Targets both before and after the large files, as a real layer's order would have them.
        half = len(smalls) // 2
        layers.append(LayerPlan(spec.name, (*smalls[:half], *large, *smalls[half:])))
    assert next_target == len(TARGETS), "LAYERS must place every target"
    return ImagePlan(tuple(layers), {t: targets[t] for t in TARGETS}, source)


def _header(name: str, *, size: int = 0, directory: bool = False) -> bytes:
    info = tarfile.TarInfo(name.lstrip("/") + ("/" if directory else ""))
    info.size = size
    info.mtime = MTIME
    info.uname = info.gname = "root"
    if directory:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.mode = 0o644
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def write_layer_tar(path: Path, layer: LayerPlan, pool: memoryview) -> int:
    """Write one layer as an uncompressed tar (parent directories first); its size."""
    written = 0

    def put(f: BinaryIO, data: bytes | memoryview) -> None:
        nonlocal written
        f.write(data)
        written += len(data)

    with path.open("wb") as f:
        dirs: set[str] = set()
        for m in layer.members:
            parts = m.path.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    put(f, _header(d, directory=True))
            put(f, _header(m.path, size=m.length))
            if m.size == 0:
                put(f, m.data)
            else:
                pos, left = m.offset, m.size
                while left > 0:
                    n = min(left, len(pool) - pos)
                    put(f, pool[pos : pos + n])
                    left -= n
                    pos = (pos + n) % len(pool)
            put(f, b"\0" * (-m.length % 512))
        put(f, b"\0" * 1024)  # the end-of-archive blocks
    return written


# --------------------------------------------------------------------------- building with umoci


@dataclass(frozen=True)
class BuiltImage:
    layout: Path
    manifest_digest: str
    layers: list[dict[str, Any]]  # digest, size (compressed), tar_bytes, media_type; bottom first
    reused: bool
    build_seconds: float

    @property
    def compressed(self) -> int:
        return sum(int(x["size"]) for x in self.layers)

    @property
    def uncompressed(self) -> int:
        return sum(int(x["tar_bytes"]) for x in self.layers)


def _layout_manifest(layout: Path) -> tuple[str, dict[str, Any]]:
    index = json.loads((layout / "index.json").read_text())
    for d in index.get("manifests", []):
        if d.get("annotations", {}).get("org.opencontainers.image.ref.name") == TAG:
            digest = str(d["digest"])
            body = (layout / "blobs/sha256" / digest.removeprefix("sha256:")).read_bytes()
            return digest, json.loads(body)
    raise KeyError(TAG)


def _image_is_current(layout: Path, have: dict[str, Any], want: dict[str, Any]) -> bool:
    if {k: have.get(k) for k in want} != want or not have.get("complete"):
        return False
    try:
        digest, _ = _layout_manifest(layout)
        if digest != have["manifest_digest"]:
            return False
        return all(
            (layout / "blobs/sha256" / str(x["digest"]).removeprefix("sha256:")).stat().st_size == x["size"]
            for x in have["layers"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def ensure_image(workdir: Path, size_gb: float, plan: ImagePlan, umoci: str, out: Out) -> BuiltImage:
    """Reuse the OCI layout when its manifest, digest and blob sizes match; rebuild it otherwise."""
    layout = workdir / "layout"
    manifest_path = workdir / "image.json"
    want = {"version": IMAGE_VERSION, "seed": SEED, "size_gb": size_gb, "plan": plan.fingerprint()}
    try:
        have: dict[str, Any] = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        have = {}
    if _image_is_current(layout, have, want):
        out.progress(f"reusing the image in {layout} ({have['manifest_digest']})")
        return BuiltImage(layout, have["manifest_digest"], have["layers"], True, 0.0)

    if layout.exists():
        if not manifest_path.exists():
            fail(PROG, f"{layout} exists but was not made by this benchmark ({manifest_path} is missing); move it away")
        out.progress(f"removing stale {layout}")
        shutil.rmtree(layout)
    # The registry's copy of an older image is useless now (and 2 GB).
    shutil.rmtree(workdir / "registry", ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(json.dumps({**want, "complete": False}, indent=2) + "\n")

    started = time.perf_counter()
    run_checked(PROG, [umoci, "init", "--layout", str(layout)], workdir)
    run_checked(PROG, [umoci, "new", "--image", f"{layout}:{TAG}"], workdir)
    pool = memoryview(random.Random(SEED).randbytes(POOL_SIZE))  # noqa: S311 - test data
    tar_sizes: list[int] = []
    scratch = workdir / "layer.tar"
    for number, layer in enumerate(plan.layers, start=1):
        out.progress(f"  layer {number}/{len(plan.layers)} ({layer.name}): {layer.tar_estimate / GB:.2f} GB")
        tar_sizes.append(write_layer_tar(scratch, layer, pool))
        try:
            run_checked(PROG, [umoci, "raw", "add-layer", "--image", f"{layout}:{TAG}", str(scratch)], workdir)
        finally:
            scratch.unlink(missing_ok=True)
    digest, manifest = _layout_manifest(layout)
    layers = [
        {"digest": d["digest"], "size": d["size"], "media_type": d["mediaType"], "tar_bytes": n}
        for d, n in zip(manifest["layers"], tar_sizes, strict=True)
    ]
    built = BuiltImage(layout, digest, layers, False, time.perf_counter() - started)
    if built.compressed < MIN_COMPRESSED_SHARE * built.uncompressed:
        fail(
            PROG,
            f"gzip shrank the layers from {built.uncompressed} to {built.compressed} bytes: "
            "the generated data is not incompressible",
        )
    manifest_path.write_text(
        json.dumps({**want, "complete": True, "manifest_digest": digest, "layers": layers}, indent=2) + "\n"
    )
    return built


# --------------------------------------------------------------------------- the registry


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Request:
    """One line of the registry's access log."""

    method: str
    path: str
    status: int
    size: int
    agent: str


_ACCESS = re.compile(
    r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3}) (?P<size>\d+|-) "[^"]*" "(?P<agent>[^"]*)"'
)


class Registry:
    """``docker-registry`` on 127.0.0.1 with its own config, storage and access log under ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.storage = workdir / "registry"
        self.config = workdir / "registry.yml"
        self.log = workdir / "registry.log"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.port = free_port()
        self.storage.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n  accesslog:\n    disabled: false\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.storage}\n"
            "  maintenance:\n    uploadpurging:\n      enabled: false\n"
            f"http:\n  addr: {self.host}\n  secret: bench-image-{secrets.token_hex(8)}\n"
        )
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [REGISTRY_BIN, "serve", str(self.config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 15
        while True:
            try:
                status, _ = self.get("/v2/")
                if status == 200:
                    return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                fail(PROG, f"docker-registry did not start:\n{self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def get(self, path: str, accept: str | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", path, headers={"Accept": accept} if accept else {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def log_offset(self) -> int:
        return self.log.stat().st_size

    def requests_since(self, offset: int) -> list[Request]:
        with self.log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        found = []
        for m in _ACCESS.finditer(text):
            size = m.group("size")
            found.append(
                Request(m.group("method"), m.group("path"), int(m.group("status")), int(size) if size != "-" else 0,
                        m.group("agent"))
            )  # fmt: skip
        return found


# --------------------------------------------------------------------------- measured runs


def _must_succeed(argv: Sequence[str], m: Measured) -> None:
    if m.returncode != 0:
        text = (m.stdout + m.stderr).decode(errors="replace").strip()
        fail(PROG, f"`{' '.join(argv[:6])} ...` exited {m.returncode}:\n{text[-3000:]}")


def verify_tree(label: str, root: Path, expected: dict[str, bytes]) -> None:
    """Every expected file under ``root`` at its container path with exactly the image's bytes."""
    bad = []
    for path, data in expected.items():
        try:
            if (root / path.lstrip("/")).read_bytes() != data:
                bad.append(f"{path} differs")
        except OSError as e:
            bad.append(f"{path}: {e.strerror}")
    if bad:
        fail(PROG, f"{label}: {len(bad)} of {len(expected)} files are wrong, e.g. {bad[0]}")


@dataclass
class Row(Timing):
    """A timed candidate with, per run, its costs (and its steps') and what it downloaded."""

    costs: list[Cost] = field(default_factory=list)
    parts: dict[str, list[Cost]] = field(default_factory=dict)
    downloads: list[Download] = field(default_factory=list)


@dataclass(frozen=True)
class RunResult:
    cost: Cost
    parts: dict[str, Cost] = field(default_factory=dict)


@dataclass(frozen=True)
class Download:
    """The layer blobs one run fetched, from the registry's access log."""

    layers: int
    bytes: int
    largest: int


@dataclass
class Bench:
    """Everything a run needs: tools, the registry, the image and where to write."""

    workdir: Path
    registry: Registry
    image: BuiltImage
    plan: ImagePlan
    patchkit: str
    skopeo: str
    tar: str
    env: dict[str, str]  # for every subprocess: no proxy for 127.0.0.1, a bytecode cache for patchkit
    meter: Meter

    @property
    def ref(self) -> str:
        return f"{self.registry.host}/{REPOSITORY}:{TAG}"

    def patchkit_files(self, paths: list[str], out_dir: Path) -> RunResult:
        shutil.rmtree(out_dir, ignore_errors=True)
        argv = [self.patchkit, "image", "files", self.ref, *paths, "--out", str(out_dir)]
        m = run_measured(PROG, argv, self.workdir, self.env, self.meter)
        _must_succeed(argv, m)
        verify_tree("patchkit image files", out_dir, {p: self.plan.targets[p] for p in paths})
        return RunResult(m.cost)

    def skopeo_tar(self, out_dir: Path) -> RunResult:
        """``skopeo copy`` to a directory, then ``tar -x`` the targets out of every layer, bottom first."""
        copy = self.workdir / "copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        started = time.perf_counter()
        argv = [self.skopeo, "copy", "--quiet", "--src-tls-verify=false", f"docker://{self.ref}", f"dir:{copy}"]
        sk = run_measured(PROG, argv, self.workdir, self.env, self.meter)
        _must_succeed(argv, sk)
        tar = extract_with_tar(self.tar, copy, out_dir, list(self.plan.targets), self.env, self.meter)
        seconds = time.perf_counter() - started
        shutil.rmtree(copy)  # not timed: a script would keep or delete it as it likes
        verify_tree("skopeo copy + tar", out_dir, self.plan.targets)
        total = Cost(seconds, sk.cost.cpu + tar.cpu, max(sk.cost.peak_kib, tar.peak_kib))
        return RunResult(total, parts={"skopeo": sk.cost, "tar": tar})


_TAR_NOT_FOUND = re.compile(
    r"^\S*tar: .*: Not found in archive$|^\S*tar: Exiting with failure status due to previous errors$"
)


def extract_with_tar(
    tar: str, copy: Path, out_dir: Path, targets: list[str], env: dict[str, str], meter: Meter
) -> Cost:
    """The obvious script over a ``skopeo copy`` directory: extract the targets layer by layer, bottom first.

    Each ``tar -x`` also asks for the targets' whiteout names (``dir/.wh.name``):
    one found in a layer deletes the target the layers below put there. (The
    image has no opaque directories, which this does not handle.) Names a
    layer does not have make GNU tar exit 2 with "Not found in archive"; any
    other complaint is an error. Returns the cost of all of it; the CPU time and
    peak RSS include gzip's (tar waits for the gzip it runs).
    """
    manifest = json.loads((copy / "manifest.json").read_bytes())
    names = [t.lstrip("/") for t in targets]
    whiteouts = {n: posixpath_wh(n) for n in names}
    started = time.perf_counter()
    peak, cpu = 0, 0.0
    for layer in manifest["layers"]:
        blob = copy / str(layer["digest"]).removeprefix("sha256:")
        media = str(layer.get("mediaType", ""))
        if media not in GZIP_LAYERS and media not in PLAIN_LAYERS:
            fail(PROG, f"skopeo copied a {media} layer; this script extracts gzip and plain tar layers only")
        z = ["-z"] if media in GZIP_LAYERS else []
        argv = [tar, "-x", *z, "-f", str(blob), "-C", str(out_dir), *names, *whiteouts.values()]
        m = run_measured(PROG, argv, out_dir, env, meter)
        peak, cpu = max(peak, m.cost.peak_kib), cpu + m.cost.cpu
        complaints = [line for line in m.stderr.decode(errors="replace").splitlines() if not _TAR_NOT_FOUND.match(line)]
        if m.returncode not in (0, 2) or complaints:
            fail(PROG, f"`tar -x{'z' if z else ''}f {blob.name} ...` exited {m.returncode}:\n" + "\n".join(complaints))
        for name, wh in whiteouts.items():
            marker = out_dir / wh
            if marker.exists():
                marker.unlink()
                (out_dir / name).unlink(missing_ok=True)
    return Cost(time.perf_counter() - started, cpu, peak)


def posixpath_wh(name: str) -> str:
    """The whiteout entry that deletes ``name`` (``a/b.py`` -> ``a/.wh.b.py``)."""
    head, _, tail = name.rpartition("/")
    return f"{head}/.wh.{tail}" if head else f".wh.{tail}"


# --------------------------------------------------------------------------- checks


def check_tools() -> dict[str, str]:
    tools: dict[str, str] = {}
    if not os.access(REGISTRY_BIN, os.X_OK):
        fail(PROG, f"{REGISTRY_BIN} is not installed (Debian package docker-registry)")
    for tool in ("umoci", "skopeo", "tar", "gzip"):
        found = shutil.which(tool)
        if found is None:
            fail(PROG, f"`{tool}` is not on PATH (Debian package {tool})")
        tools[tool] = found
    return tools


def check_disk(workdir: Path, plan: ImagePlan, reusable: bool, registry_has_it: bool) -> dict[str, int]:
    """Refuse clearly when the file system of ``workdir`` cannot hold what this run writes."""
    image = sum(layer.tar_estimate for layer in plan.layers)
    need = {"skopeo copy": image, "margin": FREE_MARGIN}
    if not reusable:
        need["OCI layout"] = image
        need["largest layer tar, while umoci compresses it"] = max(x.tar_estimate for x in plan.layers)
    if not registry_has_it:
        need["registry storage"] = image
    probe = workdir
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    total = sum(need.values())
    if free < total:
        detail = ", ".join(f"{k} {v / GB:.1f}" for k, v in need.items())
        fail(
            PROG,
            f"{free / GB:.1f} GB free on the file system of {probe}, this run needs about {total / GB:.1f} GB "
            f"({detail}); free some space, or pass --workdir on another file system (or a smaller --size-gb)",
        )
    return {"free_bytes": free, "needed_bytes": total}


def tool_version(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else "?"


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--size-gb", type=float, default=2.0, help="bytes in the image's large files, in GB (default 2)")
    p.add_argument(
        "--workdir",
        type=Path,
        default=BENCH_DIR / "work" / "image",
        help="where the image, the registry storage and the copies live (default bench/work/image/)",
    )
    p.add_argument("--repeat", type=int, default=3, help="timed runs per candidate (default 3)")
    p.add_argument("--json", action="store_true", help="report to stderr, results as JSON to stdout")
    args = p.parse_args(argv)
    if args.size_gb <= 0 or args.repeat < 1:
        p.error("--size-gb must be > 0 and --repeat >= 1")
    return args


def _terminate(signum: int, frame: FrameType | None) -> None:
    del frame
    raise SystemExit(128 + signum)  # unwinds through `finally`, which stops the registry


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = Out(sys.stderr if args.json else sys.stdout)
    workdir: Path = args.workdir.resolve()
    tools = check_tools()
    patchkit = find_patchkit(PROG)
    plan = plan_image(int(args.size_gb * GB), SEED)
    want = {"version": IMAGE_VERSION, "seed": SEED, "size_gb": args.size_gb, "plan": plan.fingerprint()}
    try:
        have = json.loads((workdir / "image.json").read_text())
    except (OSError, ValueError):
        have = {}
    reusable = _image_is_current(workdir / "layout", have, want)
    in_registry = reusable and (workdir / "registry/docker/registry/v2/repositories" / REPOSITORY).is_dir()
    disk = check_disk(workdir, plan, reusable, in_registry)

    signal.signal(signal.SIGTERM, _terminate)
    image = ensure_image(workdir, args.size_gb, plan, tools["umoci"], out)
    registry = Registry(workdir)
    try:
        registry.start()
        return run(args, out, workdir, registry, image, plan, patchkit, tools, disk)
    finally:
        registry.stop()
        shutil.rmtree(workdir / "copy", ignore_errors=True)


def run(
    args: argparse.Namespace,
    out: Out,
    workdir: Path,
    registry: Registry,
    image: BuiltImage,
    plan: ImagePlan,
    patchkit: str,
    tools: dict[str, str],
    disk: dict[str, int],
) -> int:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # As in bench_sums.py: an installed patchkit runs from compiled bytecode, so give it a cache of its own.
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["DOCKER_CONFIG"] = str(workdir / "docker-config")  # no credentials: the registry has no auth
    meter = Meter.find(workdir / "peak-rss.txt")
    bench = Bench(workdir, registry, image, plan, patchkit, tools["skopeo"], tools["tar"], env, meter)

    out.progress(f"registry on {registry.host}; pushing {REPOSITORY}:{TAG} with skopeo")
    started = time.perf_counter()
    run_checked(
        PROG,
        [tools["skopeo"], "copy", "--quiet", "--dest-tls-verify=false", f"oci:{image.layout}:{TAG}",
         f"docker://{bench.ref}"],
        workdir,
        env=env,
    )  # fmt: skip
    push_seconds = time.perf_counter() - started
    status, body = registry.get(f"/v2/{REPOSITORY}/manifests/{TAG}", accept=OCI_MANIFEST)
    served = "sha256:" + hashlib.sha256(body).hexdigest()
    if status != 200 or served != image.manifest_digest:
        fail(PROG, f"the registry serves {bench.ref} as {served} (HTTP {status}), not {image.manifest_digest}")

    targets = list(plan.targets)
    top = plan.top_targets()
    first_top = len(plan.layers) - TOP_LAYERS + 1
    layer_digests = {str(x["digest"]) for x in image.layers}
    rows: list[tuple[Row, Callable[[], RunResult]]] = [
        (
            Row("patchkit", "a", f"patchkit image files ({len(targets)} files)"),
            lambda: bench.patchkit_files(targets, workdir / "out/patchkit"),
        ),
        (
            Row("patchkit_top", "a2", f"  same, {len(top)} files of the top {TOP_LAYERS} layers"),
            lambda: bench.patchkit_files(top, workdir / "out/patchkit-top"),
        ),
        (
            Row("skopeo_tar", "b", f"skopeo copy + tar -x ({len(targets)} files)"),
            lambda: bench.skopeo_tar(workdir / "out/tar"),
        ),
    ]

    def downloaded(offset: int) -> Download:
        time.sleep(0.1)  # the registry logs a request once it has sent the answer
        sizes = [
            r.size
            for r in registry.requests_since(offset)
            if r.method == "GET" and r.status == 200 and r.path.rsplit("/", 1)[-1] in layer_digests
        ]
        return Download(len(sizes), sum(sizes), max(sizes, default=0))

    out.progress("warm-up: one untimed run of every candidate (also checks every file they extract)")
    warm: dict[str, Download] = {}
    for row, fn in rows:
        offset = registry.log_offset()
        result = fn()
        warm[row.key] = downloaded(offset)
        out.progress(f"  {row.tag}: {result.cost.seconds:.2f} s, peak {result.cost.peak_kib * 1024 / MB:.0f} MB")
    for r in range(args.repeat):
        out.progress(f"timed round {r + 1}/{args.repeat}")
        for row, fn in rows:
            offset = registry.log_offset()
            result = fn()
            row.seconds.append(result.cost.seconds)
            row.costs.append(result.cost)
            row.downloads.append(downloaded(offset))
            for k, c in result.parts.items():
                row.parts.setdefault(k, []).append(c)

    by_key = {row.key: row for row, _ in rows}
    pk, sk = by_key["patchkit"], by_key["skopeo_tar"]
    peak_pk = max(c.peak_kib for key in ("patchkit", "patchkit_top") for c in by_key[key].costs) * 1024
    results: dict[str, Any] = {
        "machine": {"cores": len(os.sched_getaffinity(0)), "python": sys.version.split()[0]},
        "tools": {
            "patchkit": patchkit,
            "skopeo": tool_version([tools["skopeo"], "--version"]),
            "umoci": tool_version([tools["umoci"], "--version"]),
            "tar": tool_version([tools["tar"], "--version"]),
            "gzip": tool_version([tools["gzip"], "--version"]),
        },
        "disk": disk,
        "memory": {
            "method": bench.meter.method,
            "floor_mb": None if bench.meter.time_bin else round(Meter.floor_kib() * 1024 / MB, 1),
        },
        "image": {
            "reference": bench.ref,
            "digest": image.manifest_digest,
            "layout": str(image.layout),
            "reused": image.reused,
            "build_seconds": round(image.build_seconds, 2),
            "push_seconds": round(push_seconds, 2),
            "compressed_bytes": image.compressed,
            "uncompressed_bytes": image.uncompressed,
            "layers": [
                {
                    "number": i,
                    "name": layer.name,
                    "digest": x["digest"],
                    "compressed_bytes": x["size"],
                    "tar_bytes": x["tar_bytes"],
                    "targets_shown": sum(1 for t in targets if plan.source_layer[t] == i),
                }
                for i, (layer, x) in enumerate(zip(plan.layers, image.layers, strict=True), start=1)
            ],
            "targets": targets,
            "top_targets": top,
            "top_first_layer": first_top,
            "whiteout": DELETED,
        },
        "cache": "warm",
        "repeat": args.repeat,
        "rows": {row.key: row_json(row, warm[row.key], image.compressed) for row, _ in rows},
        "ratios": {
            "skopeo_tar_over_patchkit_best": round(sk.best / pk.best, 2),
            "skopeo_tar_over_patchkit_median": round(sk.median / pk.median, 2),
            "skopeo_tar_over_patchkit_cpu_median": round(
                statistics.median(c.cpu for c in sk.costs) / statistics.median(c.cpu for c in pk.costs), 2
            ),
            "patchkit_peak_rss_mb": round(peak_pk / MB, 1),
            "memory_target_mb": MEMORY_TARGET // MB,
            "memory_target_met": peak_pk < MEMORY_TARGET,
        },
    }
    report(out, results)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


def _cost_json(costs: list[Cost]) -> dict[str, Any]:
    return {
        "seconds": [round(c.seconds, 3) for c in costs],
        "best_s": round(min(c.seconds for c in costs), 3),
        "median_s": round(statistics.median(c.seconds for c in costs), 3),
        "cpu_s": [round(c.cpu, 3) for c in costs],
        "cpu_median_s": round(statistics.median(c.cpu for c in costs), 3),
        "peak_rss_kib": [c.peak_kib for c in costs],
        "peak_rss_mb": round(max(c.peak_kib for c in costs) * 1024 / MB, 1),
    }


def row_json(row: Row, warm: Download, image_bytes: int) -> dict[str, Any]:
    most = max(row.downloads, key=lambda d: d.bytes)
    return {
        "tag": row.tag,
        "label": row.label.strip(),
        **_cost_json(row.costs),
        "downloaded": {
            "layers": most.layers,
            "bytes": most.bytes,
            "largest_layer_bytes": most.largest,
            "share_of_image": round(most.bytes / image_bytes, 4),
            "per_run_bytes": [d.bytes for d in row.downloads],
            "warmup_bytes": warm.bytes,
        },
        "parts": {k: _cost_json(v) for k, v in row.parts.items()},
    }


def report(out: Out, r: dict[str, Any]) -> None:
    img, ratios = r["image"], r["ratios"]
    out.line()
    out.line("patchkit image benchmark: WARM page cache (every candidate ran once, untimed, first)")
    built = "reused" if img["reused"] else f"built in {img['build_seconds']:.1f} s"
    out.line(f"image     {img['reference']}  ({built}, pushed in {img['push_seconds']:.1f} s)")
    out.line(
        f"          {len(img['layers'])} gzip layers, {img['compressed_bytes'] / GB:.3f} GB compressed "
        f"({img['uncompressed_bytes'] / GB:.3f} GB of tar); {len(img['targets'])} target files"
    )
    for x in img["layers"]:
        out.line(
            f"          layer {x['number']} {x['name']:<8} {x['compressed_bytes'] / MB:7.1f} MB, "
            f"shows {x['targets_shown']} of the targets"
        )
    out.line(f"          and a whiteout (not a target) of {img['whiteout']}")
    out.line(f"machine   {r['machine']['cores']} usable cores; Python {r['machine']['python']}")
    out.line(f"tools     {r['tools']['skopeo']}; {r['tools']['tar']}; {r['tools']['gzip']}")
    out.line(f"patchkit  {r['tools']['patchkit']}")
    floor = r["memory"]["floor_mb"]
    out.line(f"peak RSS  {r['memory']['method']}" + (f": every figure >= {floor} MB" if floor else ""))
    out.line()
    title = f"extracting (best/median of {r['repeat']})"
    out.line(f"   {title:<38} {'best s':>7} {'median s':>8} {'CPU s':>6} {'peak MB':>7}  downloaded")
    for row in r["rows"].values():
        d = row["downloaded"]
        out.line(
            f"{row['tag']:<3}{row['label']:<38} {row['best_s']:7.2f} {row['median_s']:8.2f} "
            f"{row['cpu_median_s']:6.2f} {row['peak_rss_mb']:7.1f}  {d['bytes'] / GB:.3f} GB "
            f"({d['share_of_image']:.0%}, {d['layers']} layers)"
        )
        for part, t in row["parts"].items():
            label = f"  {part}"
            times = f"{t['best_s']:7.2f} {t['median_s']:8.2f} {t['cpu_median_s']:6.2f}"
            out.line(f"   {label:<38} {times} {t['peak_rss_mb']:7.1f}")
    out.line("   (CPU s: user + system, median; peak MB: the largest of any one process)")
    out.line()
    verdict = "met" if ratios["memory_target_met"] else "MISSED"
    a, a2 = r["rows"]["patchkit"], r["rows"]["patchkit_top"]
    rows = [
        ("(skopeo + tar) / patchkit, best", f"{ratios['skopeo_tar_over_patchkit_best']:.2f}x"),
        ("(skopeo + tar) / patchkit, median", f"{ratios['skopeo_tar_over_patchkit_median']:.2f}x"),
        ("(skopeo + tar) / patchkit, CPU", f"{ratios['skopeo_tar_over_patchkit_cpu_median']:.2f}x"),
        (
            "patchkit peak RSS",
            f"{ratios['patchkit_peak_rss_mb']:.1f} MB  (target < {ratios['memory_target_mb']} MB: {verdict})",
        ),
        (
            "  against the largest layer read",
            f"{a['peak_rss_mb']:.1f} MB reading a {a['downloaded']['largest_layer_bytes'] / MB:.0f} MB layer (a), "
            f"{a2['peak_rss_mb']:.1f} MB with at most {a2['downloaded']['largest_layer_bytes'] / MB:.0f} MB (a2)",
        ),
    ]
    out.line("ratios (above 1x: patchkit is faster)")
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        out.line(f"  {label:<{width}} : {value}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the registry is stopped", file=sys.stderr)
        sys.exit(130)
