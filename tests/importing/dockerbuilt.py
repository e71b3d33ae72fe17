"""A hand-kept deployment whose overlays an image build copies in, written the way such repositories are.

An ``overlay/vllm/`` tree (vLLM-like stand-ins, not vLLM's source) that a
Dockerfile copies over ``site-packages/vllm`` in every spelling real builds
use; the upstream pins in a KEY=VALUE ``upstream.lock`` and a JSON stack
lock; a compose file under ``docker/`` that builds the image; a README that
names projects and pull requests in prose and in a table. ``Layout`` says
where the Dockerfile lives and how it is reached, so the same repository can
be built in each of the places the field keeps it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from patchkit.core.hashing import sha256_bytes

SITE = "/usr/local/lib/python3.12/site-packages"
DIST = "/usr/lib/python3/dist-packages"
VLLM_COMMIT = "3a1e5c7b9d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c"
AITER_COMMIT = "8c6e4a2f0d8b6a4c2e0f8d6b4a2c0e8f6d4b2a0c"
RELEASE_COMMIT = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"
FIX_COMMIT = "5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c"
BASE_DIGEST = "sha256:" + "7b" * 32

# What each overlay file holds: small stand-ins shaped like the modules they replace.
FILES = {
    "overlay/vllm/v1/worker/gpu_worker.py": "class Worker:\n    def restore(self):\n        fence()  # wait\n",
    "overlay/vllm/v1/sample/sampler.py": "def sample(logits):\n    return logits.argmax(-1)\n",
    "overlay/vllm/v1/kv_offload/kv_companion.py": "def coordinate(evict, write):\n    return evict and write\n",
    "overlay/vllm/entrypoints/openai/serving_chat.py": "async def create_chat_completion(req):\n    return req\n",
    "overlay/vllm/model_executor/layers/rotary.py": "def rope(x):\n    return x\n",
}
# The container path each file ends up at, and what the import must make of it.
TARGETS = {
    "overlay/vllm/v1/worker/gpu_worker.py": f"{SITE}/vllm/v1/worker/gpu_worker.py",
    "overlay/vllm/v1/sample/sampler.py": f"{SITE}/vllm/v1/sample/sampler.py",
    "overlay/vllm/v1/kv_offload/kv_companion.py": f"{SITE}/vllm/v1/kv_offload/kv_companion.py",
    "overlay/vllm/entrypoints/openai/serving_chat.py": f"{SITE}/vllm/entrypoints/openai/serving_chat.py",
    "overlay/vllm/model_executor/layers/rotary.py": f"{SITE}/vllm/model_executor/layers/rotary.py",
}
MODULES = {"overlay/vllm/v1/kv_offload/kv_companion.py"}


def dockerfile(base_arg: str = f"rocm/vllm:v0.11.0@{BASE_DIGEST}") -> str:
    """Every COPY spelling: a staged tree carried --from a stage, --chown, JSON form, WORKDIR-relative, ARG paths."""
    return f"""\
# syntax=docker/dockerfile:1
ARG BASE={base_arg}
ARG PY_SITE={SITE}

FROM python:3.12-slim AS stage
WORKDIR /staging
# the v1 tree (vllm-project/vllm#27005) is staged, then copied over vLLM in the final stage
COPY overlay/vllm/v1/ ./v1/

FROM ${{BASE}} AS runtime
ARG PY_SITE
ARG VLLM_COMMIT={VLLM_COMMIT}
ENV VLLM_DIR=${{PY_SITE}}/vllm
COPY --from=stage /staging/v1/ ${{VLLM_DIR}}/v1/
# Backport of vllm-project/vllm@{FIX_COMMIT}
COPY --chown=1000:1000 --chmod=644 \\
     overlay/vllm/entrypoints/openai/serving_chat.py \\
     ${{VLLM_DIR:-/nowhere}}/entrypoints/openai/serving_chat.py
WORKDIR ${{PY_SITE}}
COPY ["overlay/vllm/model_executor/layers/rotary.py", "vllm/model_executor/layers/"]
COPY --from=rocm/aiter:v0.1.5 /opt/aiter/jit /opt/aiter/jit
COPY entrypoint.sh /opt/entrypoint.sh
"""


UPSTREAM_LOCK = f"""\
# pins of the stack; bump together
VLLM_TAG=v0.11.0
VLLM_COMMIT={VLLM_COMMIT}
export AITER_REPO="https://github.com/ROCm/aiter.git"
AITER_COMMIT={AITER_COMMIT}   # gfx942 build
PYTHON_VERSION=3.12
"""


def stack_lock() -> str:
    """A JSON stack lock as release tooling writes it: the base, the release, the package, per-patch entries."""
    doc = {
        "stack": "mi300x-serving",
        "repository": "https://github.com/vllm-project/vllm",
        "base_commit": VLLM_COMMIT,
        "release_commit": RELEASE_COMMIT,
        "package_base": "vllm==0.11.0",
        "patches": [
            {"file": rel, "sha256": sha256_bytes(text.encode()), "base_commit": FIX_COMMIT}
            | ({"upstream": "vllm-project/vllm#27010"} if rel.endswith("sampler.py") else {})
            for rel, text in sorted(FILES.items())
        ]
        + [{"file": "vllm/__init__.py", "pr": "https://github.com/vllm-project/vllm/pull/27011"}],
    }
    return json.dumps(doc, indent=2) + "\n"


COMPOSE = """\
services:
  vllm:
    # built from the overlay tree; see vllm-project/vllm#27000 for the fence
    build:
      context: ..
      dockerfile: docker/Dockerfile
      args:
        PY_SITE: {site}
    command: ["/opt/entrypoint.sh"]
"""

README = """\
# mi300x serving

The worker fence in `gpu_worker.py` backports vLLM PR #27001 (see also #27002).

- `sampler.py`: https://github.com/vllm-project/vllm/commit/{fix}
- The rotary change follows ROCm/aiter#512 and vllm-project/vllm#27003; it touches `rotary.py` and `sampler.py`.

## eviction/write coordination

Nothing upstream does eviction/write coordination yet; PR #99 discusses it.

| File | Upstream | Notes |
| --- | --- | --- |
| `vllm/v1/worker/gpu_worker.py` | vLLM PR #27001 | eviction/write coordination |
| `kv_companion.py` | — | new companion module for eviction/write coordination |
| `serving_chat.py` | read/write path | streaming fix |
"""


@dataclass(frozen=True)
class Layout:
    """Where the build lives: ``compose`` (docker/compose.yaml builds docker/Dockerfile), or a Dockerfile alone."""

    name: str
    dockerfile: str  # its repository path
    compose: bool = False


LAYOUTS = (
    Layout("compose-docker-dir", "docker/Dockerfile", compose=True),
    Layout("top-dockerfile", "Dockerfile"),
    Layout("deploy-containerfile", "deploy/Containerfile"),
    Layout("build-named", "build/vllm.Dockerfile"),
)


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make(root: Path, layout: Layout, *, dockerfile_text: str | None = None, lock: str = UPSTREAM_LOCK) -> Path:
    """Write the repository under ``root`` in ``layout``; returns ``root``."""
    for rel, text in FILES.items():
        write(root, rel, text)
    write(root, "entrypoint.sh", '#!/bin/sh\nexec vllm serve "$@"\n')
    write(root, layout.dockerfile, dockerfile_text or dockerfile())
    if layout.compose:
        write(root, "docker/compose.yaml", COMPOSE.format(site=SITE))
    write(root, "upstream.lock", lock)
    write(root, "stack.lock.json", stack_lock())
    write(root, "README.md", README.format(fix=FIX_COMMIT))
    sums = "".join(f"{sha256_bytes(FILES[rel].encode())}  {rel}\n" for rel in sorted(FILES))
    write(root, "SHA256SUMS", sums)
    return root


def line_of(root: Path, rel: str, needle: str) -> int:
    """The 1-based line of ``rel`` holding ``needle`` (first)."""
    for n, text in enumerate((root / rel).read_text().splitlines(), 1):
        if needle in text:
            return n
    raise AssertionError(f"{needle!r} not in {rel}")
