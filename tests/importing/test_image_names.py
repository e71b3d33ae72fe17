"""One image repository is one name, however a compose file or a Dockerfile writes it.

Docker resolves ``python``, ``library/python``, ``docker.io/library/python``
and ``index.docker.io/library/python`` to one repository, and ``rocm/vllm`` to
``docker.io/rocm/vllm``. Import records each as patchkit records images
(Docker Hub's short, others with their host), pins one image once, and
``check`` then matches every file's pin of it: a lockfile that moves on is
drift in each file that still names the old digest, whichever way it writes
the name.
"""

from __future__ import annotations

import json
from pathlib import Path

from patchkit.lockfile.reader import loads
from tests.conftest import Invoke
from tests.importing.conftest import write

PY = "sha256:" + "cd" * 32
VLLM = "sha256:" + "ab" * 32
MOVED = "sha256:" + "ef" * 32
COMPOSE = f"""\
services:
  api:
    image: index.docker.io/library/python:3.12@{PY}
  web:
    image: python:3.12@{PY}
  worker:
    image: docker.io/library/python:3.12@{PY}
  vllm:
    build:
      context: .
      dockerfile: docker/Dockerfile
  bench:
    image: rocm/vllm:v0.11.0@{VLLM}
  mirror:
    image: ghcr.io/rocm/vllm:v0.11.0@{VLLM}
"""
DOCKERFILE = f"FROM docker.io/rocm/vllm:v0.11.0@{VLLM}\nCOPY entrypoint.sh /opt/entrypoint.sh\n"


def test_an_image_written_several_ways_is_pinned_once_and_checked_in_every_file(tmp_path: Path, invoke: Invoke) -> None:
    root = tmp_path / "deploy"
    write(root, "compose.yaml", COMPOSE)
    write(root, "docker/Dockerfile", DOCKERFILE)
    write(root, "entrypoint.sh", "#!/bin/sh\nexec vllm serve\n")
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    assert [i["kind"] for i in json.loads(run.stdout)["import"]["issues"] if "image" in i["kind"]] == []
    lock = loads((root / "lockfile.toml").read_text())
    assert sorted((i.name, i.repository, str(i.digest), i.tag) for i in lock.images) == [
        ("api", "python", PY, "3.12"),
        ("bench", "rocm/vllm", VLLM, "v0.11.0"),
        ("mirror", "ghcr.io/rocm/vllm", VLLM, "v0.11.0"),
    ]
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    assert check.exit_code == 0, check.stdout

    # The lockfile moves rocm/vllm on; each file that still names the old digest says so, the ghcr mirror not.
    text = (root / "lockfile.toml").read_text()
    (root / "lockfile.toml").write_text(
        text.replace(f'repository = "rocm/vllm"\ndigest = "{VLLM}"', f'repository = "rocm/vllm"\ndigest = "{MOVED}"')
    )
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    found = json.loads(check.stdout)["findings"]
    assert sorted((f["code"], f["file"], f["line"]) for f in found) == [
        ("upstream-pin-drift", "compose.yaml", 13),
        ("upstream-pin-drift", "docker/Dockerfile", 1),
    ]
