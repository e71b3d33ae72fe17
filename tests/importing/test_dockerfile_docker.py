"""The Dockerfile reader against docker itself: what the reader says a build copies is what the image holds.

Each case is a Dockerfile made of the forms real ones use (a global ``ARG``
before ``FROM``, a builder stage and ``COPY --from``, ``ENV`` and ``ARG``
values, ``${X:-default}``, quotes, continuations with comments between,
lowercase instructions, the JSON form, globs, ``WORKDIR``, the escape
directive), built ``FROM scratch`` by the real dockerd (no base image, no
network), and the files the image holds under ``/out`` are compared with
the reader's. CI builds a few seeded cases; ``PATCHKIT_DOCKERFILE_CASES=N``
(and ``PATCHKIT_DOCKERFILE_SEED``) runs more.
"""

from __future__ import annotations

import io
import os
import random
import tarfile
from pathlib import Path

import pytest

from patchkit.importing import dockerfile
from tests.dockerd import Dockerd

SEED = int(os.environ.get("PATCHKIT_DOCKERFILE_SEED", "32"))
CASES = int(os.environ.get("PATCHKIT_DOCKERFILE_CASES", "2"))
FILES = ("src/a.py", "src/b.py", "src/sub/c.py", "top.py")

# Each piece: its lines, written with E for the escape character. All land under /out.
PIECES = (
    "COPY src/ /out/tree/",
    "COPY src /out/tree2",
    "COPY src/a.py /out/renamed.py",
    'COPY ["top.py", "/out/json/"]',
    "copy --chown=1:1 top.py /out/lower/",  # --chmod needs BuildKit, which this dockerd lacks
    "COPY sr{E}\n# a comment between\n\nc/b.py /out/joined/",
    "COPY src/a.py {E}\n    /out/spaced/",
    "ENV D=/out/env\nCOPY top.py $D/",
    "ENV LEGACY /out/legacy dir\nCOPY top.py ${{LEGACY}}/x.py",
    "COPY top.py ${{NOPE:-/out/default}}/",
    'ARG X="/out/quoted"\nCOPY "top.py" "${{X}}/q/"',
    "COPY src/*.py /out/glob/",
    "WORKDIR /out/work\nCOPY top.py rel/",
    "COPY --from=builder /b/src/sub/ /out/from-builder/",
    "COPY --from=0 /b/top.py /out/from-index.py",
)


def _case(rng: random.Random) -> str:
    escape = rng.choice(("\\", "`"))
    lines = [f"# escape={escape}"] if escape == "`" or rng.random() < 0.3 else []
    lines += ["ARG BASE=scratch", "FROM ${BASE} AS builder", "WORKDIR /b", "COPY . ./"]
    lines += ["FROM scratch"]
    for piece in rng.sample(PIECES, rng.randint(3, 7)):
        lines.append(piece.format(E=escape))
    return "\n".join(lines) + "\n"


def _image_files(dockerd: Dockerd, context: Path) -> dict[str, str]:
    image, _ = dockerd.client.images.build(path=str(context), rm=True, forcerm=True)
    container = dockerd.client.containers.create(image.id, command=["none"])
    try:
        data = b"".join(container.export())
    finally:
        container.remove()
        dockerd.client.images.remove(image.id, force=True)
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            if member.isfile() and member.name.startswith("out/"):
                body = tar.extractfile(member)
                assert body is not None
                out["/" + member.name] = body.read().decode().removeprefix("# ").strip()
    return out


@pytest.mark.parametrize("case", range(CASES))
def test_the_reader_copies_what_docker_copies(tmp_path: Path, dockerd: Dockerd, case: int) -> None:
    text = _case(random.Random(SEED * 1000 + case))
    for rel in FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"# {rel}\n")
    (tmp_path / "Dockerfile").write_text(text)
    build = dockerfile.read(tmp_path, "Dockerfile", text, context=".")
    assert build.problems == [], (text, build.problems)
    got = {c.target: c.rel for c in build.copied}
    assert got == _image_files(dockerd, tmp_path), text
