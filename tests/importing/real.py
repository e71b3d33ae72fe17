"""A hand-kept deployment written the way real ones are, with the upstreams it was made from.

Like the public repositories ``patchkit import`` is meant for: several diffs per
overlay, one stacked on another with shifted line numbers, both diffs of an
overlay stale, one diff covering two files, a diff that calls an upstream file
new, a malformed diff with two bad hunks, a file vendored from another project
under ``vllm/third_party/``, two files no provenance row names whose only diffs add
them whole (``--- /dev/null``), one of which upstream has (an overlay) and one not
(a module), a new module the table names that has such a diff too, a provenance table in the forms READMEs use,
a ``SHA256SUMS`` edited by hand in every form ``sha256sum`` accepts, and
mounts of gitignored runtime directories and secrets. The upstreams are real
git repositories, so ``--fetch`` and ``rebase --source git:URL@REV`` read them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from patchkit.core import diffs
from patchkit.core.hashing import sha256_bytes
from tests.conftest import git
from tests.importing.conftest import SITE, VLLM_DIGEST, numbered, write

PULL = "https://github.com/vllm-project/vllm/pull"
PR_HEAD = "9f1c2e3d4b5a69788796a5b4c3d2e1f0a9b8c7d6"  # a pull request's head: not a base

WORKER_PATH = "vllm/v1/worker/gpu_worker.py"
SAMPLER_PATH = "vllm/v1/sample/sampler.py"
SERVING_PATH = "vllm/entrypoints/openai/serving.py"
PROTOCOL_PATH = "vllm/entrypoints/openai/protocol.py"
REASONING_PATH = "vllm/reasoning/parser.py"
MOE_PATH = "vllm/model_executor/layers/moe.py"
VENDORED_PATH = "vllm/third_party/triton_kernels/routing.py"  # where vllm ships triton's file
ROUTING_PATH = "python/triton_kernels/triton_kernels/routing.py"  # the file in triton itself
OFFLOAD_PATH = "vllm/v1/kv_offload/cpu.py"  # upstream has it; the table does not say so
EAGLE_PATH = "vllm/v1/spec_decode/eagle_tree.py"  # upstream has no such file

# Upstream files (stand-ins) at the stated base commits.
WORKER = numbered("worker line", 40)
SAMPLER = numbered("sample", 30)
SERVING = numbered("serve", 20)
PROTOCOL = numbered("proto", 20)
REASONING = numbered("reason", 15)
MOE = numbered("moe", 40)
ROUTING = numbered("route", 20)
OFFLOAD = numbered("offload", 20)

FENCE = b"    fence_1()\n    fence_2()\n    fence_3()\n"


def sub(data: bytes, old: str, new: str) -> bytes:
    assert old.encode() in data, old
    return data.replace(old.encode() + b"\n", new.encode() + b"\n", 1)


# The overlays. gpu_worker: the fence (01, against upstream) then the DMA fallback (02),
# made when the fence was one line long: 02's line numbers are two lines short.
WORKER_FENCE = WORKER.replace(b"worker line 5\n", b"worker line 5\n" + FENCE)
WORKER_FENCE_EARLY = WORKER.replace(b"worker line 5\n", b"worker line 5\n    fence_1()\n")
WORKER_OVERLAY = sub(WORKER_FENCE, "worker line 30", "worker line 30 dma_fallback")
SAMPLER_GREEDY = sub(SAMPLER, "sample 3", "sample 3 greedy")
SAMPLER_TOPK = sub(SAMPLER_GREEDY, "sample 20", "sample 20 topk")
# Edited again after both diffs were made, in the lines of both: both diffs are stale.
SAMPLER_OVERLAY = sub(sub(SAMPLER_TOPK, "sample 3 greedy", "sample 3 greedy v2"), "sample 20 topk", "sample 20 topk v2")
SERVING_OVERLAY = sub(sub(SERVING, "serve 8", "serve 8 stream"), "serve 10", "serve 10 stream")
PROTOCOL_OVERLAY = sub(PROTOCOL, "proto 5", "proto 5 field")
REASONING_OVERLAY = sub(REASONING, "reason 4", "reason 4 think")
MOE_MADE = sub(sub(MOE, "moe 5", "moe 5 a"), "moe 30", "moe 30 b")
MOE_OVERLAY = MOE_MADE.replace(b"moe 5 a\n", b"moe 5 a\n# tuned\n").replace(b"moe 30 b\n", b"moe 30 b\n# tuned\n")
ROUTING_OVERLAY = sub(ROUTING, "route 7", "route 7 fixed")
FP8_UTILS = b"def to_fp8(x):\n    return x\n"
OFFLOAD_OVERLAY = sub(OFFLOAD, "offload 6", "offload 6 pinned")
EAGLE_TREE = b"def tree_attention_mask(depth):\n    return [[1] * depth]\n"
ENTRYPOINT = b'#!/bin/sh\nset -eu\nexec vllm serve "$@"\n'

COMPOSE = f"""\
x-vllm: &vllm
  image: vllm/vllm-openai-rocm:nightly@{VLLM_DIGEST}
  volumes:
    # vLLM #47282 / PR #47291: fence CPU->GPU KV restores behind in-flight compute
    - ./patches/gpu_worker.py:{SITE}/{WORKER_PATH}:ro
    - ./patches/sampler.py:{SITE}/{SAMPLER_PATH}:ro
    - ./patches/serving.py:{SITE}/{SERVING_PATH}:ro
    - ./patches/protocol.py:{SITE}/{PROTOCOL_PATH}:ro
    - ./patches/reasoning_parser.py:{SITE}/{REASONING_PATH}:ro
    - ./patches/moe.py:{SITE}/{MOE_PATH}:ro
    - ./patches/routing.py:{SITE}/{VENDORED_PATH}:ro
    - ./patches/fp8_utils.py:{SITE}/vllm/model_executor/layers/quantization/fp8_utils.py:ro
    - ./patches/kv_offload.py:{SITE}/{OFFLOAD_PATH}:ro
    - ./patches/eagle_tree.py:{SITE}/{EAGLE_PATH}:ro
    - ./entrypoint.sh:/opt/entrypoint.sh:ro
    # created by compose on first start
    - ./run:/run/vllm
    # cp config/secret.example.yaml config/secret.yaml (see README)
    - ./config/secret.yaml:/etc/vllm/secret.yaml:ro

services:
  vllm:
    <<: *vllm
    entrypoint: ["/bin/sh", "/opt/entrypoint.sh"]
"""

GITIGNORE = "run/\n# the secret config each host copies from the example\nconfig/secret.yaml\n"


def readme(vllm: str, triton: str) -> str:
    return f"""\
# Patches

Every overlay, where it comes from, and what it tracks.

| Patch | Upstream | Tracks |
|---|---|---|
| `gpu_worker.py` | `vllm-project/vllm` `main` @ `{vllm}` — `{WORKER_PATH}` | vLLM #47282 / PR #47291 |
| `gpu_worker.py` DMA-fallback follow-up | `vllm-project/vllm` | [#47400]({PULL}/47400) |
| `sampler.py` | `vllm-project/vllm` @ `{vllm}` — `{SAMPLER_PATH}` | |
| `serving.py`, `protocol.py` | `vllm-project/vllm` @ `{vllm}` — `{SERVING_PATH}`, `{PROTOCOL_PATH}` | PR #48001 |
| `routing.py` | `triton-lang/triton` @ `{triton}`; backport of PR #7001 head `{PR_HEAD}` — `{ROUTING_PATH}` | |
| `reasoning_parser.py` | `vllm-project/vllm` @ `{vllm}` — `{REASONING_PATH}` | |
| `fp8_utils.py` | new module | |
| `moe.py` | `vllm-project/vllm` @ `{vllm}` — `{MOE_PATH}` | |
"""


@dataclasses.dataclass
class RealRepo:
    root: Path
    vllm_url: str
    vllm_commit: str
    triton_url: str
    triton_commit: str

    def line_of(self, rel: str, needle: str, after: int = 0) -> int:
        """1-based line of the first line of ``rel`` (past line ``after``) containing ``needle``."""
        for i, line in enumerate((self.root / rel).read_text().splitlines(), start=1):
            if i > after and needle in line:
                return i
        raise AssertionError(f"{needle!r} not in {rel}")

    def mirror(self) -> None:
        """Point the imported upstreams at the local repositories, as a user without github.com would."""
        lock = self.root / "lockfile.toml"
        text = lock.read_text()
        text = text.replace('git = "https://github.com/vllm-project/vllm"', f'git = "{self.vllm_url}"')
        text = text.replace('git = "https://github.com/triton-lang/triton"', f'git = "{self.triton_url}"')
        lock.write_text(text)


def upstream(root: Path, files: dict[str, bytes]) -> tuple[str, str]:
    """A real git upstream holding ``files``; its file:// URL and commit."""
    for rel, data in files.items():
        write(root, rel, data)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "upstream")
    return root.as_uri(), git(root, "rev-parse", "HEAD").strip()


def advance(url: str, files: dict[str, bytes]) -> str:
    """Commit new versions of ``files`` to the upstream at ``url``; the new commit."""
    root = Path(url.removeprefix("file://"))
    for rel, data in files.items():
        write(root, rel, data)
    git(root, "commit", "-q", "-am", "upstream moves on")
    return git(root, "rev-parse", "HEAD").strip()


def build(base: Path) -> RealRepo:
    vllm_url, vllm = upstream(
        base / "vllm",
        {
            WORKER_PATH: WORKER,
            SAMPLER_PATH: SAMPLER,
            SERVING_PATH: SERVING,
            PROTOCOL_PATH: PROTOCOL,
            REASONING_PATH: REASONING,
            MOE_PATH: MOE,
            VENDORED_PATH: ROUTING,
            OFFLOAD_PATH: OFFLOAD,
        },
    )
    triton_url, triton = upstream(base / "triton", {ROUTING_PATH: ROUTING})
    root = base / "deploy"
    files: dict[str, bytes | str] = {
        "compose.yaml": COMPOSE,
        ".gitignore": GITIGNORE,
        "config/secret.example.yaml": "api_key: CHANGE-ME\n",
        "patches/README.md": readme(vllm, triton),
        "patches/gpu_worker.py": WORKER_OVERLAY,
        "patches/sampler.py": SAMPLER_OVERLAY,
        "patches/serving.py": SERVING_OVERLAY,
        "patches/protocol.py": PROTOCOL_OVERLAY,
        "patches/reasoning_parser.py": REASONING_OVERLAY,
        "patches/moe.py": MOE_OVERLAY,
        "patches/routing.py": ROUTING_OVERLAY,
        "patches/fp8_utils.py": FP8_UTILS,
        "patches/kv_offload.py": OFFLOAD_OVERLAY,
        "patches/eagle_tree.py": EAGLE_TREE,
        "entrypoint.sh": ENTRYPOINT,
        "patches/diffs/01-kv-restore-fence.patch": b"KV restore fence, vLLM #47282\n\n"
        + diffs.make(WORKER, WORKER_FENCE, f"a/{WORKER_PATH}", "b/patches/gpu_worker.py"),
        "patches/diffs/02-dma-fallback.patch": diffs.make(
            WORKER_FENCE_EARLY,
            sub(WORKER_FENCE_EARLY, "worker line 30", "worker line 30 dma_fallback"),
            "a/patches/gpu_worker.py",
            "b/patches/gpu_worker.py",
        ),
        "patches/diffs/03-sampler-greedy.patch": diffs.make(
            SAMPLER, SAMPLER_GREEDY, f"a/{SAMPLER_PATH}", f"b/{SAMPLER_PATH}"
        ),
        "patches/diffs/04-sampler-topk.patch": diffs.make(
            SAMPLER_GREEDY, SAMPLER_TOPK, "a/patches/sampler.py", "b/patches/sampler.py"
        ),
        "patches/diffs/05-responses-api.patch": b"Responses API streaming, PR #48001\n\n"
        + diffs.make(SERVING, SERVING_OVERLAY, f"a/{SERVING_PATH}", f"b/{SERVING_PATH}")
        + diffs.make(PROTOCOL, PROTOCOL_OVERLAY, f"a/{PROTOCOL_PATH}", f"b/{PROTOCOL_PATH}"),
        "patches/diffs/06-routing.patch": diffs.make(
            ROUTING, ROUTING_OVERLAY, f"a/{ROUTING_PATH}", f"b/{ROUTING_PATH}"
        ),
        # `diff -u /dev/null patches/reasoning_parser.py`: the whole file, as if upstream had none.
        "patches/diffs/07-reasoning.patch": diffs.make(
            b"", REASONING_OVERLAY, "/dev/null", "b/patches/reasoning_parser.py"
        ),
        # Two hunks, each given a line by hand without fixing its header.
        "patches/diffs/08-moe.patch": diffs.make(MOE, MOE_MADE, f"a/{MOE_PATH}", f"b/{MOE_PATH}")
        .replace(b"+moe 5 a\n", b"+moe 5 a\n+# tuned\n")
        .replace(b"+moe 30 b\n", b"+moe 30 b\n+# tuned\n"),
        # No row names these two; each diff adds its file whole. Only upstream can tell which is an overlay.
        "patches/diffs/09-kv-offload.patch": diffs.make(b"", OFFLOAD_OVERLAY, "/dev/null", "b/patches/kv_offload.py"),
        "patches/diffs/10-eagle-tree.patch": diffs.make(b"", EAGLE_TREE, "/dev/null", f"b/{EAGLE_PATH}"),
        # The table calls fp8_utils.py a new module: its /dev/null diff is no question for upstream.
        "patches/diffs/11-fp8-utils.patch": diffs.make(b"", FP8_UTILS, "/dev/null", "b/patches/fp8_utils.py"),
    }
    for rel, data in files.items():
        write(root, rel, data)
    h = sha256_bytes
    sums_lines = [
        f" {h(WORKER_OVERLAY)}  patches/gpu_worker.py",  # a leading space, as hand edits leave
        f"{h(SAMPLER_OVERLAY).upper()}  patches/sampler.py",
        f"{h(SERVING_OVERLAY)} *patches/serving.py",  # sha256sum -b
        f"SHA256 (patches/protocol.py) = {h(PROTOCOL_OVERLAY)}",  # sha256sum --tag
        f"\t{h(ROUTING_OVERLAY)}  patches/routing.py",
        f"{h(REASONING_OVERLAY)}  patches/reasoning_parser.py",
        f"{h(FP8_UTILS)}  patches/fp8_utils.py",
        f"{h(MOE_OVERLAY)}  patches/moe.py",
        f"{h(OFFLOAD_OVERLAY)}  patches/kv_offload.py",
        f"{h(EAGLE_TREE)}  patches/eagle_tree.py",
        f"{h(ENTRYPOINT)}  entrypoint.sh",
        f"{h(b'old')}  patches/old_fix.py",  # summed once, deleted since
    ]
    write(root, "SHA256SUMS", "\n".join(sums_lines) + "\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "hand-kept deployment")
    return RealRepo(root, vllm_url, vllm, triton_url, triton)
