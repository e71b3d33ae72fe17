"""A hand-kept deployment repository with every pattern and defect ``patchkit import`` must handle.

The upstream files are small stand-ins written for these tests; the diffs are
made from them the way people make them by hand (``diff -u`` with whatever
file names were at hand), then damaged the way real repositories are.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from patchkit.core import diffs
from patchkit.core.hashing import sha256_bytes

SITE = "/usr/local/lib/python3.12/dist-packages"
VLLM_DIGEST = "sha256:" + "e6" * 32
CADDY_DIGEST = "sha256:" + "5f" * 32
MODEL_REV = "7872f01b1d1fe23eabc4c98b48bffcef5a386062"
BASE_COMMIT = "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"


def numbered(prefix: str, n: int) -> bytes:
    return b"".join(b"%s %d\n" % (prefix.encode(), i) for i in range(1, n + 1))


# Upstream files (stand-ins) and the overlays made from them.
WORKER_BASE = numbered("def restore_step", 30)
WORKER_V1 = WORKER_BASE.replace(b"def restore_step 5\n", b"def restore_step 5\n    wait_for_compute()\n")
WORKER = WORKER_V1.replace(b"def restore_step 20\n", b"def restore_step 20\n    use_dma_fallback()\n")
INDEXER_BASE = numbered("k_cache", 20)
INDEXER = INDEXER_BASE.replace(b"k_cache 8\n", b"k_cache 8 e4m3fnuz\n")
SAMPLER_BASE = numbered("sample", 20)
SAMPLER_V1 = SAMPLER_BASE.replace(b"sample 3\n", b"sample 3 fixed\n")
SAMPLER = SAMPLER_V1.replace(b"sample 5\n", b"sample 5 changed later\n")
ROPE = numbered("rope", 10)
HELPER = b"def helper():\n    return 1\n"
TRANSFORM = b"#!/usr/bin/env python3\n# replaces one exact block; fails closed\nimport sys\n"
ENTRYPOINT = b'#!/bin/sh\nset -eu\npython3 /opt/patches/transform_moe.py\nexec vllm serve "$@"\n'
TUNING = b"m,n,k,config\n1,2,3,4\n"

WORKER_PATH = "vllm/v1/kv_offload/cpu/gpu_worker.py"
INDEXER_PATH = "vllm/models/deepseek_v4/ops/cache.py"
SAMPLER_PATH = "vllm/v1/sample/sampler.py"

COMPOSE = f"""\
x-vllm: &vllm
  image: vllm/vllm-openai-rocm:nightly@{VLLM_DIGEST}
  environment:
    HF_HOME: /root/.cache/huggingface
  volumes:
    # vLLM #47282 / PR #47291: fence CPU->GPU KV restores behind in-flight compute
    - ./patches/gpu_worker_fixed.py:{SITE}/{WORKER_PATH}:ro
    - ./patches/fnuz_indexer.py:{SITE}/{INDEXER_PATH}:ro
    - ./patches/sampler.py:{SITE}/{SAMPLER_PATH}:ro
    - type: bind
      source: ./patches/new_helper.py
      target: {SITE}/vllm/v1/new_helper.py
      read_only: true
    - ./patches/rope_fix.py:{SITE}/vllm/model_executor/layers/rope.py:ro
    - ./patches/transform_moe.py:/opt/patches/transform_moe.py:ro
    - ./tuning/moe_tp1.csv:/opt/tuning/moe_tp1.csv:ro
    - ./entrypoint.sh:/opt/entrypoint.sh:ro
    - ./patches/gone.py:{SITE}/vllm/gone.py:ro
    - ${{HF_CACHE:-/root/.cache/huggingface}}:/root/.cache/huggingface

services:
  vllm:
    <<: *vllm
    entrypoint: ["/bin/sh", "/opt/entrypoint.sh"]
    command:
      - --model
      - /root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/snapshots/{MODEL_REV}
  proxy:
    image: caddy@{CADDY_DIGEST}
    ports: ["127.0.0.1:8443:8443"]
"""

COMPOSE_TP2 = f"""\
services:
  vllm:
    image: vllm/vllm-openai-rocm@{VLLM_DIGEST}
    entrypoint: ["/bin/sh", "/opt/entrypoint.sh"]
    volumes:
      - ./patches/gpu_worker_fixed.py:{SITE}/{WORKER_PATH}:ro
      - ./tuning/moe_tp2.csv:/opt/tuning/moe_tp2.csv:ro
      - ./entrypoint.sh:/opt/entrypoint.sh:ro
    command: >-
      --model /root/.cache/huggingface/hub/models--deepseek-ai--DeepSeek-V4-Flash-0731/snapshots/{MODEL_REV}
      -tp 2
"""

PROVENANCE = f"""\
# Patches

| Overlay | Upstream | Base commit | Upstream path | Tracks |
|---|---|---|---|---|
| `gpu_worker_fixed.py` | vllm-project/vllm | {BASE_COMMIT} | {WORKER_PATH} | PR #47291 |
| `fnuz_indexer.py` | vllm-project/vllm | {BASE_COMMIT} | {INDEXER_PATH} | |
| `sampler.py` | vllm-project/vllm | 124154a | {SAMPLER_PATH} | https://github.com/vllm-project/vllm/pull/48001 |
"""


@dataclasses.dataclass
class HandKept:
    root: Path

    def line_of(self, rel: str, needle: str) -> int:
        """1-based line of the first line of ``rel`` containing ``needle``."""
        for i, line in enumerate((self.root / rel).read_text().splitlines(), start=1):
            if needle in line:
                return i
        raise AssertionError(f"{needle!r} not in {rel}")


def write(root: Path, rel: str, data: bytes | str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def build(root: Path) -> HandKept:
    """Write the hand-kept repository into ``root``."""
    files = {
        "compose.yaml": COMPOSE,
        "compose.tp2.yaml": COMPOSE_TP2,
        "patches/README.md": PROVENANCE,
        "patches/gpu_worker_fixed.py": WORKER,
        "patches/fnuz_indexer.py": INDEXER,
        "patches/sampler.py": SAMPLER,
        "patches/new_helper.py": HELPER,
        "patches/rope_fix.py": ROPE,
        "patches/transform_moe.py": TRANSFORM,
        "tuning/moe_tp1.csv": TUNING,
        "tuning/moe_tp2.csv": TUNING.replace(b"1,2", b"5,6"),
        "entrypoint.sh": ENTRYPOINT,
    }
    for rel, data in files.items():
        write(root, rel, data)
    # 01: against upstream, a/<upstream path> vs b/<overlay file name>; the overlay moved on since (see 04).
    d01 = diffs.make(WORKER_BASE, WORKER_V1, f"a/{WORKER_PATH}", "b/gpu_worker_fixed.py")
    write(root, "patches/diffs/01-kv-restore-fence.patch", b"KV restore fence, vLLM #47282\n\n" + d01)
    # 02: b/patches/<file>, then a hunk edited by hand so its counts no longer add up.
    d02 = diffs.make(INDEXER_BASE, INDEXER, f"a/{INDEXER_PATH}", "b/patches/fnuz_indexer.py")
    write(
        root,
        "patches/diffs/02-fnuz-indexer.patch",
        d02.replace(b"+k_cache 8 e4m3fnuz\n", b"+k_cache 8 e4m3fnuz\n+# max 224.0\n"),
    )
    # 03: several files in one diff: a whole new module (--- /dev/null) and the sampler against upstream.
    write(root, "patches/diffs/03-sampler-and-helper.patch",
          diffs.make(b"", HELPER, "/dev/null", "b/vllm/v1/new_helper.py")
          + diffs.make(SAMPLER_BASE, SAMPLER_V1, f"a/{SAMPLER_PATH}", f"b/{SAMPLER_PATH}"))  # fmt: skip
    # 04: incremental: against the earlier overlay, not upstream.
    write(root, "patches/diffs/04-kv-dma-fallback.patch",
          diffs.make(WORKER_V1, WORKER, "a/patches/gpu_worker_fixed.py", "b/patches/gpu_worker_fixed.py"))  # fmt: skip
    # The hand-edited indexer file must match what the edited diff says.
    write(
        root, "patches/fnuz_indexer.py", INDEXER.replace(b"k_cache 8 e4m3fnuz\n", b"k_cache 8 e4m3fnuz\n# max 224.0\n")
    )
    sums_lines = [
        f"{sha256_bytes(WORKER)}  patches/gpu_worker_fixed.py",
        f" {sha256_bytes(SAMPLER)}  patches/sampler.py",  # a leading space
        f"{sha256_bytes(HELPER)}  patches/new_helper.py",
        f"{sha256_bytes(b'old')}  patches/removed_long_ago.py",  # summed, not present
        f"{sha256_bytes(TRANSFORM)}  patches/transform_moe.py",
        f"{sha256_bytes(ENTRYPOINT)}  entrypoint.sh",
    ]
    write(root, "SHA256SUMS", "\n".join(sums_lines) + "\n")
    return HandKept(root)


@pytest.fixture
def handkept(tmp_path: Path) -> HandKept:
    return build(tmp_path / "deploy")
