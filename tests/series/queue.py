"""Patch-queue fixtures built the way such repositories are really kept.

Two upstream git repositories (a vLLM-like source tree with tests and
requirements files, and a FlashInfer-like one) made commit by commit; each
patch is a backport made on a branch and exported with ``git format-patch``
(mail headers, ``Subject: [PATCH]``, the ``---`` stat block, the signature),
named after its pull request; a deployment repository that pins them in
``[series.NAME]`` with a quilt ``series`` file per upstream and two profiles.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from patchkit.core.hashing import sha256_bytes

MXFP4_V1 = b'''"""MXFP4 quantization."""

import torch


def select_backend(device):
    if device.is_rocm:
        return "aiter"
    return "triton"


def quantize(x, block=32):
    scale = x.abs().amax() / 6.0
    return (x / scale).round(), scale
'''

ENVS_V1 = b"""import os

VLLM_USE_V1 = os.getenv("VLLM_USE_V1", "1") == "1"
VLLM_LOGGING_LEVEL = os.getenv("VLLM_LOGGING_LEVEL", "INFO")
"""

TEST_V1 = b"""from vllm.model_executor.layers.quant import mxfp4


def test_backend_rocm(rocm):
    assert mxfp4.select_backend(rocm) == "aiter"
"""

REQS_V1 = b"torch==2.9.0\ntriton==3.5.0\n"

SCHED_V1 = b"""class LegacyScheduler:
    def schedule(self, queue):
        return list(queue)
"""

CORE_V1 = b"""import os

CACHE_DIR = os.path.expanduser("~/.cache/flashinfer")


def jit_cache_dir():
    return CACHE_DIR
"""


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=Dev One", "-c", "user.email=dev@example.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_DATE": "2026-01-05T10:00:00Z",
            "GIT_COMMITTER_DATE": "2026-01-05T10:00:00Z",
            "PATH": "/usr/bin:/bin",
            "HOME": str(cwd),
        },
    )
    return out.stdout.decode()


def write(root: Path, files: dict[str, bytes | None]) -> None:
    for rel, data in files.items():
        path = root / rel
        if data is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def commit(repo: Path, files: dict[str, bytes | None], message: str) -> str:
    write(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def backport(repo: Path, base: str, files: dict[str, bytes | None], subject: str, out: Path, name: str) -> bytes:
    """A patch made as a backport on a branch from ``base``, exported with git format-patch as ``name``."""
    branch = name.removesuffix(".patch")
    git(repo, "checkout", "-q", "-b", branch, base)
    commit(repo, files, subject)
    made = git(repo, "format-patch", "-1", "--stdout", "HEAD").encode()
    git(repo, "checkout", "-q", "main")
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_bytes(made)
    return made


@dataclass
class Queue:
    root: Path
    vllm: Path
    flashinfer: Path
    vllm_c1: str
    fi_c1: str
    patches: dict[str, bytes]


MXFP4_PATCHED = MXFP4_V1.replace(
    b'        return "aiter"\n    return "triton"\n',
    b'        return "aiter"\n    if device.has_flashinfer:\n'
    b'        return "flashinfer-cutlass"\n    return "triton"\n',
)
TEST_PATCHED = (
    TEST_V1
    + b"""

def test_backend_flashinfer(cuda_fi):
    assert mxfp4.select_backend(cuda_fi) == "flashinfer-cutlass"
"""
)
REQS_PATCHED = b"torch==2.9.0\ntriton==3.5.0\nflashinfer-python==0.5.2\n"
ENVS_PATCHED = ENVS_V1 + b'VLLM_MXFP4_USE_CUTLASS = os.getenv("VLLM_MXFP4_USE_CUTLASS", "0") == "1"\n'
SCHED_PATCHED = SCHED_V1.replace(b"return list(queue)", b"return sorted(queue, key=lambda r: r.priority)")
CORE_PATCHED = CORE_V1.replace(b'"~/.cache/flashinfer"', b'os.getenv("FLASHINFER_CACHE", "~/.cache/flashinfer")')
CORE_PATCHED = CORE_PATCHED.replace(b"    return CACHE_DIR\n", b"    return os.path.expanduser(CACHE_DIR)\n")

VLLM_NAMES = (
    "vllm-48303-mxfp4-flashinfer-cutlass.patch",
    "vllm-48512-mxfp4-cutlass-env.patch",
    "vllm-47900-legacy-sched-priority.patch",
)
FI_NAMES = ("flashinfer-1520-jit-cache-env.patch",)


def build_queue(tmp: Path) -> Queue:
    """Upstreams at their first commit, the patches exported from them, and the deployment pinning them."""
    vllm = tmp / "up" / "vllm"
    fi = tmp / "up" / "flashinfer"
    for r in (vllm, fi):
        r.mkdir(parents=True)
        git(r, "init", "-q", "-b", "main")
    c1 = commit(
        vllm,
        {
            "setup.py": b"from setuptools import setup\nsetup(name='vllm')\n",
            "requirements/cuda.txt": REQS_V1,
            "vllm/__init__.py": b'__version__ = "0.26.0"\n',
            "vllm/envs.py": ENVS_V1,
            "vllm/model_executor/layers/quant/mxfp4.py": MXFP4_V1,
            "vllm/legacy/sched.py": SCHED_V1,
            "tests/quant/test_mxfp4.py": TEST_V1,
        },
        "Release 0.26.0",
    )
    f1 = commit(fi, {"flashinfer/__init__.py": b"", "flashinfer/jit/core.py": CORE_V1}, "v0.5.2")
    root = tmp / "deploy"
    pv, pf = root / "patches" / "vllm", root / "patches" / "flashinfer"
    made = {
        VLLM_NAMES[0]: backport(
            vllm,
            c1,
            {
                "vllm/model_executor/layers/quant/mxfp4.py": MXFP4_PATCHED,
                "tests/quant/test_mxfp4.py": TEST_PATCHED,
                "requirements/cuda.txt": REQS_PATCHED,
            },
            "[Quant] MXFP4: FlashInfer CUTLASS backend (#48303)",
            pv,
            VLLM_NAMES[0],
        ),
        VLLM_NAMES[1]: backport(
            vllm, c1, {"vllm/envs.py": ENVS_PATCHED}, "[Env] VLLM_MXFP4_USE_CUTLASS (#48512)", pv, VLLM_NAMES[1]
        ),
        VLLM_NAMES[2]: backport(
            vllm,
            c1,
            {"vllm/legacy/sched.py": SCHED_PATCHED},
            "[Core] priority in the legacy scheduler",
            pv,
            VLLM_NAMES[2],
        ),
        FI_NAMES[0]: backport(
            fi, f1, {"flashinfer/jit/core.py": CORE_PATCHED}, "jit: FLASHINFER_CACHE (#1520)", pf, FI_NAMES[0]
        ),
    }
    (pv / "series").write_bytes(("# vLLM backports, in order\n" + "".join(n + "\n" for n in VLLM_NAMES)).encode())
    (pf / "series").write_bytes(("".join(n + "\n" for n in FI_NAMES)).encode())
    return Queue(root, vllm, fi, c1, f1, made)


def lockfile_text(q: Queue) -> str:
    """The deployment's lockfile: both upstreams, both series, profile ``full`` and profile ``mxfp4``."""

    def entry(series: str, name: str, profiles: list[str], refs: list[str], reason: str) -> str:
        data = q.patches[name]
        lines = [
            f"[[series.{series}.patches]]",
            f'name = "{name.removesuffix(".patch")}"',
            f'file = "patches/{series}/{name}"',
            f'sha256 = "{sha256_bytes(data)}"',
        ]
        if profiles:
            lines.append("profiles = [" + ", ".join(f'"{p}"' for p in profiles) + "]")
        if refs:
            lines.append("refs = [" + ", ".join(f'"{r}"' for r in refs) + "]")
        lines.append(f'reason = "{reason}"')
        return "\n".join(lines) + "\n"

    vs = (q.root / "patches/vllm/series").read_bytes()
    fs = (q.root / "patches/flashinfer/series").read_bytes()
    return (
        'schema = 1\n\n[deployment]\nname = "queue"\n\n'
        f'[upstreams.flashinfer]\ngit = "{q.flashinfer.as_uri()}"\ncommit = "{q.fi_c1}"\n\n'
        f'[upstreams.vllm]\ngit = "{q.vllm.as_uri()}"\ncommit = "{q.vllm_c1}"\n\n'
        f'[series.flashinfer]\ncommit = "{q.fi_c1}"\ntarget = "/usr/local/lib/python3.12/dist-packages"\n'
        f'series_file = "patches/flashinfer/series"\nseries_sha256 = "{sha256_bytes(fs)}"\n\n'
        + entry("flashinfer", FI_NAMES[0], [], ["flashinfer-ai/flashinfer#1520"], "honour FLASHINFER_CACHE")
        + f'\n[series.vllm]\ncommit = "{q.vllm_c1}"\ntarget = "/usr/local/lib/python3.12/dist-packages"\n'
        f'series_file = "patches/vllm/series"\nseries_sha256 = "{sha256_bytes(vs)}"\n\n'
        + entry("vllm", VLLM_NAMES[0], ["full", "mxfp4"], ["vllm-project/vllm#48303"], "FlashInfer CUTLASS MXFP4")
        + "\n"
        + entry("vllm", VLLM_NAMES[1], ["full", "mxfp4"], ["vllm-project/vllm#48512"], "the env flag the backend reads")
        + "\n"
        + entry("vllm", VLLM_NAMES[2], ["full"], [], "priority scheduling")
    )


def clone_tree(repo: Path, commit_id: str, dest: Path) -> Path:
    """A checkout of ``repo`` at ``commit_id`` in ``dest`` (a source tree to apply to)."""
    subprocess.run(["git", "clone", "-q", str(repo), str(dest)], check=True, capture_output=True)
    git(dest, "checkout", "-q", "--detach", commit_id)
    shutil.rmtree(dest / ".git")
    return dest
