#!/usr/bin/env python3
"""Benchmark: building and pushing a derived image of 30 files on a 2 GB base, patchkit against docker.

In one run, this script:

* reuses (or builds) ``bench_image.py``'s deterministic 2 GB OCI image (six
  incompressible gzip layers) and pushes it with skopeo to its own
  ``/usr/bin/docker-registry`` on 127.0.0.1 as the base;
* makes a deployment pinning that base (``patchkit image pin``) and 30 files
  that run (29 overlays at the image's own ``vllm`` paths and the
  entrypoint), and the equivalent build context: the same files under
  ``rootfs/`` and a Containerfile ``FROM base@digest`` + ``COPY rootfs/ /``;
* starts its own dockerd (as the tests do: vfs, no iptables, no bridge, a
  private socket and data root) and times, once each, in this order:

  a.  ``patchkit image build --push REG/bench/derived-patchkit:v1``;
  b.  ``docker build`` (classic builder) + ``docker push`` of the Containerfile
      on an engine that does not have the base yet (it pulls it, as a fresh
      CI runner does);
  c.  the same again with the base cached (``--no-cache``, a new tag);

* measures each row's CPU time and peak RSS (GNU ``time``, else ``wait4``:
  ``benchlib.Meter``) and, for the docker rows, the daemon's own peak RSS
  over the row (its high-water mark reset before it through
  ``/proc/PID/clear_refs`` and read from ``VmHWM`` after), since the engine,
  not the client, does docker's work;
* and reads from the registry's access log what each one sent and fetched:
  blobs uploaded (a ``PUT …/blobs/uploads/…?digest=`` answered 201; their
  sizes from the registry's storage), blobs mounted from the base's
  repository (``POST …?mount=`` answered 201) and bytes of blobs downloaded.

patchkit must upload only the new layer (and its config and manifest) and
download nothing of the base. Both derived images are checked: the base's
layers and one more, whose files have the pinned bytes.

Needs root (dockerd), docker, dockerd, skopeo and umoci. Run:
``python bench/bench_derived.py [--size-gb 2] [--workdir DIR] [--json]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# bench/ is sys.path[0] when this runs as a script (isort files these as third-party)
import bench_image as bi
from benchlib import Meter, Out, fail, find_patchkit, require_tools, run_checked, run_measured_ok

PROG = "bench_derived"
BASE_REPOSITORY = "bench/base"
FILES = 30
DEPLOY_TOML = """\
schema = 1
name = "bench"

[inference]
image = "vllm"
entrypoint = "entrypoint"
port = 8000

[profiles.single]
file = "compose.yaml"

[[profiles.single.replicas]]
service = "vllm"
publish = "127.0.0.1:8000"
"""
_PUT = re.compile(r"/v2/(?P<repo>.+)/blobs/uploads/[^?]*\?(?:.*&)?digest=(?P<digest>sha256(?::|%3A)[0-9a-f]{64})")
_MOUNT = re.compile(r"/v2/(?P<repo>.+)/blobs/uploads/\?(?:.*&)?mount=(?P<digest>sha256(?::|%3A)[0-9a-f]{64})")


@dataclass
class Traffic:
    """What one candidate sent to and fetched from the registry."""

    uploaded: int = 0
    uploaded_bytes: int = 0
    mounted: int = 0
    downloaded_bytes: int = 0


def traffic(registry: bi.Registry, offset: int, storage: Path) -> Traffic:
    time.sleep(0.2)  # the registry logs a request once it has answered it
    t = Traffic()
    seen: set[str] = set()
    for r in registry.requests_since(offset):
        put = _PUT.match(r.path)
        if r.method == "PUT" and r.status == 201 and put:
            digest = put.group("digest").replace("%3A", ":")
            if digest not in seen:
                seen.add(digest)
                t.uploaded += 1
                t.uploaded_bytes += blob_path(storage, digest).stat().st_size
        elif r.method == "POST" and r.status == 201 and _MOUNT.match(r.path):
            t.mounted += 1
        elif r.method == "GET" and r.status == 200 and "/blobs/sha256:" in r.path:
            t.downloaded_bytes += r.size
    return t


def blob_path(storage: Path, digest: str) -> Path:
    hexd = digest.removeprefix("sha256:")
    return storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"


# --------------------------------------------------------------------------- the deployment


def make_deployment(root: Path, base: str, patchkit: str, env: dict[str, str]) -> dict[str, bytes]:
    """A deployment pinning ``base`` and 30 files; the files by container target."""
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    run_checked(PROG, [patchkit, "init", str(root)], root.parent, env=env)
    rng = random.Random(bi.SEED)  # noqa: S311 - test data
    files: dict[str, bytes] = {}
    for i, target in enumerate(bi.TARGETS[: FILES - 1]):
        data = f"# overlay {i} of {target}\n".encode() + rng.randbytes(rng.randint(2_000, 60_000)).hex().encode()
        rel = root / "patches" / f"overlay_{i:02d}.py"
        rel.write_bytes(data + b"\n")
        files[target] = rel.read_bytes()
        run_checked(PROG, [patchkit, "add", str(rel), "--target", target], root, env=env)
    entry = root / "entrypoint.sh"
    entry.write_bytes(b'#!/bin/sh\nexec vllm serve "$@"\n')
    files["/opt/patchkit/entrypoint.sh"] = entry.read_bytes()
    run_checked(PROG, [patchkit, "add", str(entry), "--target", "/opt/patchkit/entrypoint.sh"], root, env=env)
    run_checked(PROG, [patchkit, "image", "pin", "vllm", base], root, env=env)
    (root / "deploy.toml").write_text(DEPLOY_TOML)
    return files


def make_context(ctx: Path, base_pinned: str, files: dict[str, bytes]) -> None:
    """The docker build context of the same image: the files under rootfs/, one COPY."""
    if ctx.exists():
        shutil.rmtree(ctx)
    for target, data in files.items():
        path = ctx / "rootfs" / target.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o755 if target.endswith(".sh") else 0o644)
    (ctx / "Containerfile").write_text(f"FROM {base_pinned}\nCOPY rootfs/ /\n")


# --------------------------------------------------------------------------- dockerd


class Dockerd:
    """A private dockerd like the tests' (vfs, no iptables, no bridge)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sock = root / "docker.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.sock}"

    def start(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        (self.root / "daemon.json").write_text("{}\n")
        argv = [
            "dockerd", "--config-file", str(self.root / "daemon.json"), "--storage-driver=vfs",
            "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--bridge=none",
            "--host", self.host, "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
            "--pidfile", str(self.root / "docker.pid"),
        ]  # fmt: skip
        with (self.root / "dockerd.log").open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while not self._ping():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                fail(PROG, f"dockerd did not start: {(self.root / 'dockerd.log').read_text()[-1500:]}")
            time.sleep(0.1)

    def _ping(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2)
                s.connect(str(self.sock))
                s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
                return b" 200 " in s.recv(64)
        except OSError:
            return False

    def reset_peak(self) -> None:
        """Start the daemon's peak RSS afresh (Linux: writing 5 to clear_refs resets VmHWM)."""
        if self.proc is not None:
            Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def peak_kib(self) -> int | None:
        """The daemon's peak RSS since ``reset_peak``, in KiB."""
        if self.proc is None:
            return None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(self.root / "data", ignore_errors=True)


# --------------------------------------------------------------------------- run


def check_derived(host: str, ref: str, base_layers: list[str], env: dict[str, str]) -> str:
    """The pushed image has the base's layers and one more; its top layer digest."""
    out = run_checked(PROG, ["skopeo", "inspect", "--tls-verify=false", f"docker://{host}/{ref}"], Path("."), env=env)
    layers = json.loads(out.stdout)["Layers"]
    if layers[:-1] != base_layers or len(layers) != len(base_layers) + 1:
        fail(PROG, f"{ref}: layers {layers} are not the base's plus one")
    return str(layers[-1])


def check_files(patchkit: str, root: Path, ref: str, files: dict[str, bytes], env: dict[str, str]) -> None:
    """Every file of the derived image has the pinned bytes (read back through the registry)."""
    out = root.parent / "readback"
    shutil.rmtree(out, ignore_errors=True)
    run_checked(PROG, [patchkit, "image", "files", ref, *files, "--out", str(out)], root, env=env)
    for target, data in files.items():
        got = (out / target.lstrip("/")).read_bytes()
        if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
            fail(PROG, f"{ref}: {target} does not have the pinned bytes")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--size-gb", type=float, default=2.0, help="bytes in the base's large files, in GB (default 2)")
    p.add_argument("--workdir", type=Path, default=bi.BENCH_DIR / "work" / "image", help="shared with bench_image")
    p.add_argument("--json", action="store_true", help="report to stderr, results as JSON to stdout")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        fail(PROG, "dockerd needs root")
    require_tools(PROG, ("docker", "dockerd", "skopeo", "umoci"))
    out = Out(sys.stderr if args.json else sys.stdout)
    workdir: Path = args.workdir.resolve()
    patchkit = find_patchkit(PROG)
    plan = bi.plan_image(int(args.size_gb * bi.GB), bi.SEED)
    image = bi.ensure_image(workdir, args.size_gb, plan, shutil.which("umoci") or "umoci", out)
    registry = bi.Registry(workdir)
    dockerd = Dockerd(workdir / "dockerd")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["DOCKER_CONFIG"] = str(workdir / "docker-config")
    env["PATCHKIT_CACHE"] = str(workdir / "patchkit-cache")
    env["DOCKER_BUILDKIT"] = "0"  # the classic builder: the engine has no buildx
    try:
        registry.start()
        dockerd.start()
        env["DOCKER_HOST"] = dockerd.host
        return run(args, out, workdir, registry, dockerd, image, patchkit, env)
    finally:
        dockerd.stop()
        registry.stop()


def run(
    args: argparse.Namespace,
    out: Out,
    workdir: Path,
    registry: bi.Registry,
    dockerd: Dockerd,
    image: bi.BuiltImage,
    patchkit: str,
    env: dict[str, str],
) -> int:
    host = registry.host
    out.progress(f"registry on {host}; pushing the {args.size_gb:g} GB base with skopeo")
    run_checked(
        PROG,
        ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{image.layout}:{bi.TAG}",
         f"docker://{host}/{BASE_REPOSITORY}:{bi.TAG}"],
        workdir, env=env,
    )  # fmt: skip
    base_pinned = f"{host}/{BASE_REPOSITORY}@{image.manifest_digest}"
    base_layers = [str(x["digest"]) for x in image.layers]
    root = workdir / "derived" / "deploy"
    out.progress(f"making the deployment ({FILES} files) and the docker build context")
    files = make_deployment(root, f"{host}/{BASE_REPOSITORY}:{bi.TAG}", patchkit, env)
    ctx = workdir / "derived" / "context"
    make_context(ctx, base_pinned, files)
    storage = registry.storage

    rows: list[dict[str, Any]] = []
    meter = Meter.find(workdir / "peak-rss.txt")

    def measure(key: str, label: str, steps: list[list[str]], cwd: Path) -> None:
        out.progress(label)
        offset = registry.log_offset()
        engine = steps[0][0] == "docker"
        if engine:
            dockerd.reset_peak()
        costs = [run_measured_ok(PROG, step, cwd, env, meter) for step in steps]
        t = traffic(registry, offset, storage)
        rows.append(
            {
                "key": key,
                "label": label,
                "seconds": sum(c.seconds for c in costs),
                "cpu": sum(c.cpu for c in costs),
                "peak_mib": max(c.peak_kib for c in costs) / 1024,
                "engine_peak_mib": (dockerd.peak_kib() or 0) / 1024 if engine else None,
                **t.__dict__,
            }
        )

    pk_ref = f"{host}/bench/derived-patchkit:v1"
    measure("patchkit", "a  patchkit image build --push", [[patchkit, "image", "build", "--push", pk_ref]], root)
    docker_ref = f"{host}/bench/derived-docker"
    build = ["docker", "build", "-q", "-f", "Containerfile"]
    measure(
        "docker_cold",
        "b  docker build + docker push (engine without the base)",
        [[*build, "-t", f"{docker_ref}:cold", "."], ["docker", "push", "-q", f"{docker_ref}:cold"]],
        ctx,
    )
    measure(
        "docker_warm",
        "c  docker build --no-cache + docker push (base cached)",
        [[*build, "--no-cache", "-t", f"{docker_ref}:warm", "."], ["docker", "push", "-q", f"{docker_ref}:warm"]],
        ctx,
    )

    pk_layer = check_derived(host, "bench/derived-patchkit:v1", base_layers, env)
    docker_layer = check_derived(host, "bench/derived-docker:warm", base_layers, env)
    check_files(patchkit, root, pk_ref, files, env)
    check_files(patchkit, root, f"{docker_ref}:warm", files, env)
    lock = (root / "lockfile.toml").read_text()
    if pk_layer not in lock:
        fail(PROG, "the lockfile does not pin the pushed layer")
    result = {
        "base_bytes": image.compressed,
        "files": FILES,
        "patchkit_layer_bytes": blob_path(storage, pk_layer).stat().st_size,
        "docker_layer_bytes": blob_path(storage, docker_layer).stat().st_size,
        "rows": rows,
        "peak_rss": meter.method,
    }
    report(out, result)
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


def report(out: Out, r: dict[str, Any]) -> None:
    mb = 1e6
    out.line(f"derived image: {r['files']} files on a {r['base_bytes'] / 1e9:.2f} GB base (compressed layers)")
    out.line(f"  new layer: patchkit {r['patchkit_layer_bytes']} bytes, docker {r['docker_layer_bytes']} bytes")
    out.line(f"  (CPU: user + system of the client; peak RSS: {r['peak_rss']}; engine: dockerd's VmHWM over the row)")
    out.line(
        f"  {'candidate':<58} {'wall s':>8} {'CPU s':>7} {'peak MiB':>9} {'engine MiB':>11}"
        f" {'uploaded':>9} {'MB up':>9} {'mounted':>8} {'MB down':>9}"
    )
    for row in r["rows"]:
        engine = f"{row['engine_peak_mib']:>11.1f}" if row["engine_peak_mib"] is not None else f"{'':>11}"
        out.line(
            f"  {row['label']:<58} {row['seconds']:>8.2f} {row['cpu']:>7.2f} {row['peak_mib']:>9.1f} {engine}"
            f" {row['uploaded']:>9} {row['uploaded_bytes'] / mb:>9.3f} {row['mounted']:>8}"
            f" {row['downloaded_bytes'] / mb:>9.1f}"
        )
    pk = r["rows"][0]
    for other in r["rows"][1:]:
        out.line(f"  {other['key']}: patchkit is {other['seconds'] / pk['seconds']:.1f}x faster")


if __name__ == "__main__":
    sys.exit(main())
