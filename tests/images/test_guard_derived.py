"""A derived image carries the runtime guard and its manifest, where compose would mount them."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from tests.conftest import REPO_ROOT, Invoke, git
from tests.dockerd import Dockerd
from tests.images.conftest import RegistryServer, TestImages
from tests.images.test_build import DEPLOY_TOML, build, make_derivable


def read(dockerd: Dockerd, container: object, path: str) -> bytes:
    bits, _ = container.get_archive(path)  # type: ignore[attr-defined]
    with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as t:
        f = t.extractfile(t.getmembers()[0])
        assert f is not None
        return f.read()


def test_the_derived_image_carries_guard_json_and_the_guard(
    deploy: Path, oci_image: TestImages, registry_server: RegistryServer, invoke: Invoke, dockerd: Dockerd
) -> None:
    root = make_derivable(deploy, oci_image.single, invoke)
    (root / "patches" / "guard.py").write_bytes((REPO_ROOT / "patchkit" / "guard" / "runtime.py").read_bytes())
    r = invoke("add", str(root / "patches" / "guard.py"), "--name", "runtime-guard", "--kind", "module",
               "--target", "/opt/patchkit/guard.py", repo=root)  # fmt: skip
    assert r.exit_code == 0, r.stderr
    (root / "deploy.toml").write_text(DEPLOY_TOML + '\n[guard]\nscript = "runtime-guard"\n')
    assert invoke("emit", repo=root).exit_code == 0
    git(root, "add", "-A")
    git(root, "commit", "-qm", "the runtime guard")
    doc = build(invoke, root, f"{registry_server.host}/derived/guard:v1")
    ref = f"{registry_server.host}/derived/guard@{doc['digest']}"
    dockerd.client.images.pull(ref)
    container = dockerd.client.containers.create(ref, command=["/opt/patchkit/entrypoint.sh"])
    try:
        assert read(dockerd, container, "/opt/patchkit/guard.json") == (root / "guard.json").read_bytes()
        assert read(dockerd, container, "/opt/patchkit/guard.py") == (root / "patches" / "guard.py").read_bytes()
    finally:
        container.remove(force=True)
