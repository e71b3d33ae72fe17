"""The bundle deploys as it is: every file its compose files bind-mount from the bundle is in it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # PyYAML ships no type information

from tests.conftest import REPO_ROOT, Invoke

# The shipped deployment's service configuration, less what needs its patches (the guard, transformers).
_DEPLOY_TOML = "\n".join(
    line
    for line in (REPO_ROOT / "deploy.toml").read_text().splitlines()
    if not line.startswith(("transformers_dir", "[guard]", "script = ", "runtime_package"))
)


def relative_bind_sources(compose_text: str) -> list[str]:
    """Every bind-mount source of a compose file that lies in the deployment directory, read with plain YAML."""
    doc = yaml.safe_load(compose_text)
    out = []
    for service in (doc.get("services") or {}).values():
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            if volume_is_bind(volume) and not source.startswith(("/", "$", "~")):
                out.append(os.path.normpath(source))
    return out


def volume_is_bind(volume: object) -> bool:
    if isinstance(volume, dict):
        return volume.get("type") == "bind"
    source = str(volume).split(":", 1)[0]
    return ":" in str(volume) and (source.startswith((".", "/", "$", "~")))


def assert_unpacked_bundle_deploys(bundle: Path, tmp_path: Path) -> Path:
    """Unpack ``bundle`` with GNU tar; every relative bind-mount source of every compose file is in it."""
    out = tmp_path / "unpacked"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(bundle), "-C", str(out)], check=True)
    composes = sorted(out.glob("compose*.yaml"))
    assert composes
    for compose in composes:
        sources = relative_bind_sources(compose.read_text())
        assert sources, compose.name
        missing = [s for s in sources if not (out / s).exists()]
        assert not missing, f"{compose.name} mounts {missing}, which the bundle does not hold"
    return out


def _deployment(root: Path, invoke: Invoke) -> Path:
    """A deployment with the shipped proxy (./Caddyfile, ./Caddyfile.tp1x2) and its two profiles, emitted."""
    assert invoke("init", str(root)).exit_code == 0
    shipped = (REPO_ROOT / "lockfile.toml").read_text()
    images = shipped[shipped.index("[images.caddy]") : shipped.index("[upstreams.")]
    with (root / "lockfile.toml").open("a") as f:
        f.write("\n" + images)
    (root / "entrypoint.sh").write_bytes(b'#!/bin/sh\nexec vllm serve "$@"\n')
    for name in ("Caddyfile.example", "Caddyfile.tp1x2.example"):
        shutil.copy(REPO_ROOT / name, root / name)
    (root / "deploy.toml").write_text(_DEPLOY_TOML + "\n")
    for name, *args in (
        ("entrypoint.sh", "--target", "/opt/patchkit/entrypoint.sh"),
        ("Caddyfile.example", "--name", "caddyfile"),
        ("Caddyfile.tp1x2.example", "--name", "caddyfile-tp1x2"),
        ("deploy.toml", "--name", "deploy"),
    ):
        r = invoke("add", str(root / name), *args, repo=root)
        assert r.exit_code == 0, r.stderr
    r = invoke("emit", repo=root)
    assert r.exit_code == 0, r.stderr
    return root


def test_the_bundle_holds_every_file_its_compose_files_mount(tmp_path: Path, invoke: Invoke) -> None:
    root = _deployment(tmp_path / "deploy", invoke)
    assert {"Caddyfile", "Caddyfile.tp1x2"} <= set(relative_bind_sources((root / "compose.yaml").read_text())) | set(
        relative_bind_sources((root / "compose.tp1x2.yaml").read_text())
    )
    r = invoke("bundle", "-o", str(tmp_path / "b.tar.gz"), repo=root)
    assert r.exit_code == 0, r.stderr
    out = assert_unpacked_bundle_deploys(tmp_path / "b.tar.gz", tmp_path)
    # The site's Caddyfile is the pinned template, under the name compose mounts; the template stays too.
    assert (out / "Caddyfile").read_bytes() == (REPO_ROOT / "Caddyfile.example").read_bytes()
    assert (out / "Caddyfile.tp1x2").read_bytes() == (REPO_ROOT / "Caddyfile.tp1x2.example").read_bytes()
    assert (out / "Caddyfile.example").is_file()
    listed = subprocess.run(
        ["sha256sum", "-c", "--strict", "SHA256SUMS"], check=False, cwd=out, capture_output=True, text=True
    )
    assert listed.returncode == 0 and "Caddyfile: OK" in listed.stdout, listed.stdout + listed.stderr
    assert invoke("verify-bundle", str(tmp_path / "b.tar.gz"), repo=root).exit_code == 0


def test_a_mount_the_host_provides_is_not_invented(tmp_path: Path, invoke: Invoke) -> None:
    """A mounted file with no template (a secret each host copies in) stays the host's: nothing ships under its name."""
    root = _deployment(tmp_path / "deploy", invoke)
    compose = root / "compose.yaml"
    compose.write_text(compose.read_text().replace("volumes:\n", 'volumes:\n      - "./token:/run/token:ro"\n', 1))
    r = invoke("bundle", "-o", str(tmp_path / "b.tar.gz"), repo=root)
    assert r.exit_code == 0, r.stderr
    names = subprocess.run(["tar", "-tzf", str(tmp_path / "b.tar.gz")], capture_output=True, text=True, check=True)
    assert "token" not in names.stdout.split() and "Caddyfile" in names.stdout.split()
