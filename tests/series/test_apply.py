"""``patchkit apply``: a profile's series onto a source checkout and onto an installed wheel, all or nothing."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import Invoke
from tests.series.queue import (
    CORE_PATCHED,
    CORE_V1,
    ENVS_PATCHED,
    MXFP4_PATCHED,
    MXFP4_V1,
    REQS_PATCHED,
    SCHED_PATCHED,
    SCHED_V1,
    TEST_PATCHED,
    Queue,
    clone_tree,
)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_apply_a_profile_to_a_source_checkout(queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    tree = clone_tree(queue.vllm, queue.vllm_c1, tmp_path / "src")
    before = _files(tree)
    run = invoke("apply", "--series", "vllm", "--profile", "mxfp4", "--to", str(tree), repo=queue.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    after = _files(tree)
    record = json.loads(after.pop(".patchkit/series/vllm.json"))
    changed = {k for k in after if after[k] != before.get(k)}
    assert changed == {
        "vllm/model_executor/layers/quant/mxfp4.py",
        "tests/quant/test_mxfp4.py",
        "requirements/cuda.txt",
        "vllm/envs.py",
    }
    assert after["vllm/model_executor/layers/quant/mxfp4.py"] == MXFP4_PATCHED
    assert after["tests/quant/test_mxfp4.py"] == TEST_PATCHED
    assert after["requirements/cuda.txt"] == REQS_PATCHED
    assert after["vllm/envs.py"] == ENVS_PATCHED
    assert after["vllm/legacy/sched.py"] == SCHED_V1  # only profile "full" has that patch
    assert record["profile"] == "mxfp4"
    assert record["commit"] == queue.vllm_c1
    assert [p["name"] for p in record["patches_applied"]] == [
        "vllm-48303-mxfp4-flashinfer-cutlass",
        "vllm-48512-mxfp4-cutlass-env",
    ]
    assert record["files"]["vllm/envs.py"] == hashlib.sha256(ENVS_PATCHED).hexdigest()
    assert record["absent"] == []
    assert "wrote 4 files and .patchkit/series/vllm.json" in run.stdout

    again = invoke("apply", "--series", "vllm", "--profile", "mxfp4", "--to", str(tree), repo=queue.root)
    assert again.exit_code == 0
    assert "already applied" in again.stdout
    other = invoke("apply", "--series", "vllm", "--profile", "full", "--to", str(tree), repo=queue.root)
    assert other.exit_code == 1
    assert "already applied here" in other.stderr


def _wheel(src: Path, out: Path) -> Path:
    """A real wheel of the ``vllm`` package of ``src`` (only the package, as wheels ship it)."""
    name = out / "vllm-0.26.0-py3-none-any.whl"
    entries = {p.relative_to(src).as_posix(): p.read_bytes() for p in sorted((src / "vllm").rglob("*.py"))}
    info = "vllm-0.26.0.dist-info"
    entries[f"{info}/METADATA"] = b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n"
    entries[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    entries[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(name, "w") as z:
        for path, data in entries.items():
            z.writestr(path, data)
    return name


def test_apply_to_an_installed_wheel_reports_what_it_does_not_carry(
    queue: Queue, invoke: Invoke, tmp_path: Path
) -> None:
    src = clone_tree(queue.vllm, queue.vllm_c1, tmp_path / "src")
    site = tmp_path / "site-packages"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(_wheel(src, tmp_path)),
        ],
        check=True,
        capture_output=True,
    )
    run = invoke("apply", "--series", "vllm", "--profile", "full", "--to", str(site), repo=queue.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    assert (site / "vllm/model_executor/layers/quant/mxfp4.py").read_bytes() == MXFP4_PATCHED
    assert (site / "vllm/envs.py").read_bytes() == ENVS_PATCHED
    assert (site / "vllm/legacy/sched.py").read_bytes() == SCHED_PATCHED
    assert not (site / "tests").exists() and not (site / "requirements").exists()
    assert (
        "  absent: requirements/cuda.txt (modify by vllm-48303-mxfp4-flashinfer-cutlass): the tree does not carry it"
        in run.stdout
    )
    assert "  absent: tests/quant/test_mxfp4.py (modify by vllm-48303-mxfp4-flashinfer-cutlass)" in run.stdout
    record = json.loads((site / ".patchkit/series/vllm.json").read_bytes())
    assert record["absent"] == [
        {"change": "modify", "patch": "vllm-48303-mxfp4-flashinfer-cutlass", "path": "requirements/cuda.txt"},
        {"change": "modify", "patch": "vllm-48303-mxfp4-flashinfer-cutlass", "path": "tests/quant/test_mxfp4.py"},
    ]
    # The second upstream's series goes into the same site-packages, with its own record.
    fi = tmp_path / "fi"
    clone_tree(queue.flashinfer, queue.fi_c1, fi)
    (site / "flashinfer").symlink_to(fi / "flashinfer")
    refused = invoke("apply", "--series", "flashinfer", "--to", str(site), repo=queue.root)
    assert refused.exit_code == 2
    assert "flashinfer is a symlink" in refused.stderr
    assert (fi / "flashinfer/jit/core.py").read_bytes() != CORE_PATCHED
    (site / "flashinfer").unlink()
    (site / "flashinfer").mkdir()
    (site / "flashinfer/jit").mkdir()
    (site / "flashinfer/jit/core.py").write_bytes((fi / "flashinfer/jit/core.py").read_bytes())
    assert invoke("apply", "--series", "flashinfer", "--to", str(site), repo=queue.root).exit_code == 0
    assert (site / "flashinfer/jit/core.py").read_bytes() == CORE_PATCHED
    assert (site / ".patchkit/series/flashinfer.json").exists()


def test_a_patch_that_does_not_apply_leaves_the_tree_untouched(queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    tree = clone_tree(queue.vllm, queue.vllm_c1, tmp_path / "src")
    # The third patch's file moved on in this tree: the first two would apply, the third cannot.
    (tree / "vllm/legacy/sched.py").write_bytes(SCHED_V1.replace(b"return list(queue)", b"return queue.copy()"))
    before = _files(tree)
    run = invoke("apply", "--series", "vllm", "--to", str(tree), repo=queue.root)
    assert run.exit_code == 1
    assert run.stderr.startswith("patchkit: error: patches/vllm/vllm-47900-legacy-sched-priority.patch:"), run.stderr
    assert (
        "patch 'vllm-47900-legacy-sched-priority' does not apply to vllm/legacy/sched.py: line 3 of the file"
        in run.stderr
    )
    assert _files(tree) == before
    assert before["vllm/model_executor/layers/quant/mxfp4.py"] == MXFP4_V1


def test_a_line_offset_is_applied_and_reported(queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    tree = clone_tree(queue.vllm, queue.vllm_c1, tmp_path / "src")
    path = tree / "vllm/model_executor/layers/quant/mxfp4.py"
    path.write_bytes(b"# SPDX-License-Identifier: Apache-2.0\n# Copyright vLLM\n" + MXFP4_V1)
    run = invoke("apply", "--series", "vllm", "--profile", "mxfp4", "--to", str(tree), repo=queue.root)
    assert run.exit_code == 0, run.stderr
    assert path.read_bytes() == b"# SPDX-License-Identifier: Apache-2.0\n# Copyright vLLM\n" + MXFP4_PATCHED
    assert (
        "  offset: vllm/model_executor/layers/quant/mxfp4.py (vllm-48303-mxfp4-flashinfer-cutlass) applies 2 lines "
        "from its header" in run.stdout
    )


def test_apply_gives_what_git_apply_gives(queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    """The same tree through ``patchkit apply`` and ``git apply``: the same refusals, the same bytes.

    The patch's one hunk starts at line 1 and has no context below it: git
    anchors it to both ends of the file, so a line added above or below is
    a refusal, not an offset.
    """
    patch = queue.root / "patches/flashinfer/flashinfer-1520-jit-cache-env.patch"
    variants = {
        "as pinned": (CORE_V1, CORE_PATCHED),
        "a line above": (b"# header\n" + CORE_V1, None),
        "a line below": (CORE_V1 + b"# trailer\n", None),
        "no final newline": (CORE_V1.rstrip(b"\n"), None),
        "CRLF": (CORE_V1.replace(b"\n", b"\r\n"), None),
    }
    for name, (core, want) in variants.items():
        ours = clone_tree(queue.flashinfer, queue.fi_c1, tmp_path / f"ours {name}")
        theirs = clone_tree(queue.flashinfer, queue.fi_c1, tmp_path / f"git {name}")
        for tree in (ours, theirs):
            (tree / "flashinfer/jit/core.py").write_bytes(core)
        run = invoke("apply", "--series", "flashinfer", "--to", str(ours), repo=queue.root)
        done = subprocess.run(["git", "apply", str(patch)], cwd=theirs, capture_output=True, check=False)
        assert (run.exit_code, done.returncode) == ((0, 0) if want else (1, 1)), (name, run.stderr, done.stderr)
        assert (ours / "flashinfer/jit/core.py").read_bytes() == (theirs / "flashinfer/jit/core.py").read_bytes()
        assert (ours / "flashinfer/jit/core.py").read_bytes() == (want or core), name


def test_a_patch_edited_after_pinning_is_refused(queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    tree = clone_tree(queue.vllm, queue.vllm_c1, tmp_path / "src")
    p = queue.root / "patches/vllm/vllm-48512-mxfp4-cutlass-env.patch"
    p.write_bytes(p.read_bytes().replace(b"VLLM_MXFP4_USE_CUTLASS (#48512)", b"VLLM_MXFP4_USE_CUTLASS, (#48512)"))
    before = _files(tree)
    run = invoke("apply", "--series", "vllm", "--to", str(tree), repo=queue.root)
    assert run.exit_code == 2  # bytes that are not what the lockfile pins, as bundle and image build say
    assert (
        "patches/vllm/vllm-48512-mxfp4-cutlass-env.patch: patch 'vllm-48512-mxfp4-cutlass-env' does not match its pin"
        in run.stderr
    )
    assert _files(tree) == before
    assert invoke("apply", "--profile", "nope", "--series", "vllm", "--to", str(tree), repo=queue.root).exit_code == 2
    assert invoke("apply", "--to", str(tree), repo=queue.root).exit_code == 2  # two series: name one


def test_apply_as_a_user_runs_it(queue: Queue, tmp_path: Path) -> None:
    """Once as a real process: the console entry point, exit codes and messages on the real streams."""
    tree = clone_tree(queue.flashinfer, queue.fi_c1, tmp_path / "fi")
    argv = [sys.executable, "-m", "patchkit", "-C", str(queue.root), "apply", "--series", "flashinfer", "--to"]
    done = subprocess.run([*argv, str(tree)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "apply flashinfer: 1 patches"
    assert (tree / "flashinfer/jit/core.py").read_bytes() == CORE_PATCHED
    missing = subprocess.run([*argv, str(tmp_path / "nowhere")], capture_output=True, text=True, check=False)
    assert missing.returncode == 2
    assert missing.stderr.startswith("patchkit: error: ") and "Traceback" not in missing.stderr


def test_nested_finds_a_file_below_or_above_a_touched_one_and_nothing_else() -> None:
    """``a/b`` and ``a`` cannot both be files, whichever of the two the patch touched; siblings and
    look-alike names (``a.py/``, ``ab/``) are fine, and a deleted file is no longer in the way."""
    from patchkit.series.apply import nested

    state: dict[str, bytes | None] = {"pkg/a": b"x", "pkg/a/b.py": b"y", "pkg/ab/c.py": b"z", "pkg/a.py": b"w"}
    assert nested(state, ["pkg/a"]) == ("pkg/a/b.py", "pkg/a")
    assert nested(state, ["pkg/a/b.py"]) == ("pkg/a/b.py", "pkg/a")
    assert nested(state, ["pkg/ab/c.py", "pkg/a.py"]) is None
    assert nested({**state, "pkg/a": None}, ["pkg/a/b.py", "pkg/a"]) is None
    assert nested({"b": b"", "a\0b/c": b""}, ["b"]) is None  # "a<NUL>b/c" is no file below "b"
