"""``patchkit rebase --series``: a series moved onto a new upstream commit like ``git am -3``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from patchkit.lockfile.reader import loads
from tests.conftest import Invoke
from tests.series.queue import ENVS_PATCHED, MXFP4_V1, REQS_V1, Queue, clone_tree, commit, git

MXFP4_V2 = MXFP4_V1.replace(b'    return "triton"\n', b'    return "marlin"\n')
REQS_V2 = b"numpy<3\n" + REQS_V1


def _bump(q: Queue) -> str:
    """The next upstream commit: mxfp4.py changed where the backport inserts, the env flag merged, sched.py gone."""
    return commit(
        q.vllm,
        {
            "vllm/model_executor/layers/quant/mxfp4.py": MXFP4_V2,
            "requirements/cuda.txt": REQS_V2,
            "vllm/envs.py": ENVS_PATCHED,
            "vllm/legacy/sched.py": None,
        },
        "Release 0.27.0",
    )


def _snapshot(root: Path) -> dict[str, bytes]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".patchkit" not in p.parts)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in files}


def test_conflict_then_continue_upstreamed_and_deleted(queue: Queue, invoke: Invoke, tmp_path: Path) -> None:
    c2 = _bump(queue)
    before = _snapshot(queue.root)
    run = invoke("rebase", "--series", "vllm", "--onto", "main", repo=queue.root)
    assert run.exit_code == 1, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"rebase series vllm: {queue.vllm_c1[:12]} -> {c2[:12]}"
    assert lines[1].split() == [
        "vllm-48303-mxfp4-flashinfer-cutlass",
        "conflict",
        "vllm/model_executor/layers/quant/mxfp4.py",
        "conflicts",
        "at",
        "lines",
        "9-17",
    ]
    # The upstream commit that touched the conflicting lines, named under the patch.
    assert lines[2] == f"    vllm/model_executor/layers/quant/mxfp4.py: upstream {c2[:12]} Release 0.27.0"
    assert lines[3].split() == ["vllm-48512-mxfp4-cutlass-env", "waiting"]
    work = ".patchkit/series-rebase/work/vllm-48303-mxfp4-flashinfer-cutlass/vllm/model_executor/layers/quant/mxfp4.py"
    assert f"  resolve {work}" in lines
    conflicted = (queue.root / work).read_bytes()
    assert conflicted.splitlines()[8] == b"<<<<<<< ours (patch)" and conflicted.splitlines()[16].startswith(b">>>>>>>")
    assert b'    return "marlin"\n' in conflicted
    # Nothing in the repository changed but the work area.
    assert {k: v for k, v in _snapshot(queue.root).items() if not k.startswith(".patchkit/")} == before
    checked = invoke("check", "--format", "json", repo=queue.root)
    assert checked.exit_code == 0
    assert [f["code"] for f in json.loads(checked.stdout)["findings"]] == ["series-rebase-in-progress"]
    status = invoke("status", repo=queue.root)
    assert status.stdout.splitlines() == [
        f"rebase of series vllm in progress onto {c2[:12]}: waits on vllm-48303-mxfp4-flashinfer-cutlass",
        f"  {work} (markers at lines 9, 13, 15, 17)",
        "then: patchkit rebase --continue (or --abort)",
    ]

    blocked = invoke("rebase", "--continue", repo=queue.root)
    assert blocked.exit_code == 1
    assert "conflict markers remain" in blocked.stderr

    resolved = MXFP4_V2.replace(
        b'    return "marlin"\n',
        b'    if device.has_flashinfer:\n        return "flashinfer-cutlass"\n    return "marlin"\n',
    )
    (queue.root / work).write_bytes(resolved)
    done = invoke("rebase", "--continue", "--format", "json", repo=queue.root)
    assert done.exit_code == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["committed"] is True
    assert [(p["name"], p["outcome"]) for p in doc["patches"]] == [
        ("vllm-48303-mxfp4-flashinfer-cutlass", "clean"),
        ("vllm-48512-mxfp4-cutlass-env", "upstreamed"),
        ("vllm-47900-legacy-sched-priority", "deleted"),
    ]
    assert doc["patches"][2]["files"] == [{"path": "vllm/legacy/sched.py", "outcome": "deleted", "regions": []}]

    lock = loads((queue.root / "lockfile.toml").read_text())
    (s,) = [x for x in lock.series if x.name == "vllm"]
    assert str(s.commit) == c2
    assert str(lock.upstream("vllm").commit) == c2  # type: ignore[union-attr]
    assert [p.name for p in s.patches] == ["vllm-48303-mxfp4-flashinfer-cutlass"]
    assert (queue.root / "patches/vllm/series").read_text() == "vllm-48303-mxfp4-flashinfer-cutlass.patch\n"
    assert not (queue.root / "patches/vllm/vllm-48512-mxfp4-cutlass-env.patch").exists()
    assert not (queue.root / ".patchkit/series-rebase").exists()

    # The regenerated patch applies with git itself to the new commit and gives the resolution.
    tree = clone_tree(queue.vllm, c2, tmp_path / "c2")
    patch = queue.root / "patches/vllm/vllm-48303-mxfp4-flashinfer-cutlass.patch"
    subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True, capture_output=True)
    assert (tree / "vllm/model_executor/layers/quant/mxfp4.py").read_bytes() == resolved
    assert (tree / "requirements/cuda.txt").read_bytes() == REQS_V2.replace(
        b"triton==3.5.0\n", b"triton==3.5.0\nflashinfer-python==0.5.2\n"
    )
    text = patch.read_bytes()
    assert text.startswith(b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n")
    assert b"Subject: [PATCH] [Quant] MXFP4: FlashInfer CUTLASS backend (#48303)\n" in text
    assert b"\n-- \n" not in text
    assert invoke("check", repo=queue.root).exit_code == 0


def test_abort_forgets_the_rebase(queue: Queue, invoke: Invoke) -> None:
    _bump(queue)
    before = _snapshot(queue.root)
    assert invoke("rebase", "--series", "vllm", "--onto", "main", repo=queue.root).exit_code == 1
    run = invoke("rebase", "--abort", repo=queue.root)
    assert run.exit_code == 0
    assert run.stdout == "series rebase aborted; the repository is as it was\n"
    assert {k: v for k, v in _snapshot(queue.root).items() if not k.startswith(".patchkit/")} == before
    assert not (queue.root / ".patchkit/series-rebase").exists()


def test_regenerated_patches_are_byte_stable(queue: Queue, invoke: Invoke) -> None:
    c2 = commit(queue.flashinfer, {"flashinfer/__init__.py": b'__version__ = "0.5.3"\n'}, "v0.5.3")
    first = invoke("rebase", "--series", "flashinfer", "--onto", c2, repo=queue.root)
    assert first.exit_code == 0, first.stdout + first.stderr
    assert first.stdout.splitlines()[1].split() == ["flashinfer-1520-jit-cache-env", "clean"]
    patch = queue.root / "patches/flashinfer/flashinfer-1520-jit-cache-env.patch"
    once = patch.read_bytes()
    c3 = commit(queue.flashinfer, {"README.md": b"FlashInfer\n"}, "docs")
    again = invoke("rebase", "--series", "flashinfer", "--onto", c3, repo=queue.root)
    assert again.exit_code == 0
    assert patch.read_bytes() == once  # the same change over an unrelated bump: the same bytes
    assert b"index " + git(queue.flashinfer, "rev-parse", f"{c3}:flashinfer/jit/core.py").strip().encode() in once


def test_a_patch_whose_requirements_change_went_upstream_is_partially_upstreamed(
    queue: Queue, invoke: Invoke, tmp_path: Path
) -> None:
    from tests.series.queue import REQS_PATCHED, SCHED_PATCHED

    # Upstream took the requirements line of the first patch (and nothing else of it), and the whole third one.
    c2 = commit(queue.vllm, {"requirements/cuda.txt": REQS_PATCHED, "vllm/legacy/sched.py": SCHED_PATCHED}, "bump")
    run = invoke("rebase", "--series", "vllm", "--onto", c2, "--format", "json", repo=queue.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    doc = json.loads(run.stdout)
    first = doc["patches"][0]
    assert (first["name"], first["outcome"]) == ("vllm-48303-mxfp4-flashinfer-cutlass", "partially-upstreamed")
    assert {f["path"]: f["outcome"] for f in first["files"]} == {
        "requirements/cuda.txt": "upstreamed",
        "tests/quant/test_mxfp4.py": "unchanged",
        "vllm/model_executor/layers/quant/mxfp4.py": "unchanged",
    }
    assert [(p["name"], p["outcome"]) for p in doc["patches"][1:]] == [
        ("vllm-48512-mxfp4-cutlass-env", "clean"),
        ("vllm-47900-legacy-sched-priority", "upstreamed"),
    ]
    patch = (queue.root / "patches/vllm/vllm-48303-mxfp4-flashinfer-cutlass.patch").read_bytes()
    assert b"requirements/cuda.txt" not in patch  # the part upstream took is gone from the patch
    assert b"+    if device.has_flashinfer:\n" in patch
    tree = clone_tree(queue.vllm, c2, tmp_path / "c2")
    for name in ("vllm-48303-mxfp4-flashinfer-cutlass", "vllm-48512-mxfp4-cutlass-env"):
        subprocess.run(["git", "apply", str(queue.root / f"patches/vllm/{name}.patch")], cwd=tree, check=True)
    assert invoke("check", repo=queue.root).exit_code == 0


def test_a_series_rebase_records_the_commit_and_image_it_was_verified_for(queue: Queue, invoke: Invoke) -> None:
    lock = queue.root / "lockfile.toml"
    old, new = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    with lock.open("a") as f:
        f.write(f'\n[images.vllm]\nrepository = "vllm/vllm-openai-rocm"\ndigest = "{old}"\n')
    assert invoke("lock", "--record-verified", repo=queue.root).exit_code == 0
    c2 = commit(queue.flashinfer, {"flashinfer/__init__.py": b'__version__ = "0.5.3"\n'}, "v0.5.3")
    run = invoke("rebase", "--series", "flashinfer", "--onto", c2, repo=queue.root)
    assert run.exit_code == 0, run.stdout + run.stderr
    verified = loads(lock.read_text()).series
    moved = next(s for s in verified if s.name == "flashinfer").verified
    assert moved is not None and (moved.image, str(moved.digest), moved.against, moved.pin) == (
        "vllm",
        old,
        "upstream",
        c2,
    )
    checked = json.loads(invoke("check", "--format", "json", repo=queue.root).stdout)["findings"]
    assert not [f for f in checked if str(f["code"]).startswith("base-un")]

    lock.write_text(lock.read_text().replace(f'digest = "{old}"', f'digest = "{new}"', 1))  # a bare re-pin
    assert invoke("lock", repo=queue.root).exit_code == 0
    run = invoke("check", "--format", "json", repo=queue.root)
    assert run.exit_code == 1
    fields = [f["field"] for f in json.loads(run.stdout)["findings"] if f["code"] == "base-unverified"]
    assert sorted(fields) == ["series.flashinfer.verified.digest", "series.vllm.verified.digest"]


def test_the_repositorys_own_pins_of_a_rewritten_patch_are_reported(queue: Queue, invoke: Invoke) -> None:
    import hashlib

    rel = "patches/flashinfer/flashinfer-1520-jit-cache-env.patch"
    old = hashlib.sha256((queue.root / rel).read_bytes()).hexdigest()
    # The repository's own pins: a JSON stack lock and a Containerfile check, as hand-kept queues write them.
    stack = {"base_commit": queue.fi_c1, "patches": [{"file": rel, "sha256": old}]}
    (queue.root / "stack.lock.json").write_text(json.dumps(stack, indent=2) + "\n")
    (queue.root / "Containerfile").write_text(
        f"FROM scratch\nCOPY patches /tmp/patches\nRUN echo '{old}  /tmp/{rel}' | sha256sum -c\n"
    )
    c2 = commit(queue.flashinfer, {"flashinfer/__init__.py": b'__version__ = "0.5.3"\n'}, "v0.5.3")
    r = invoke("rebase", "--series", "flashinfer", "--onto", c2, repo=queue.root)
    assert r.exit_code == 0, r.stdout + r.stderr
    new = hashlib.sha256((queue.root / rel).read_bytes()).hexdigest()
    assert new != old  # the rewrite moved the patch's sha256
    what = "series.flashinfer.patches[flashinfer-1520-jit-cache-env].sha256"
    notes = [line for line in r.stderr.splitlines() if line.startswith("note: ")]
    assert notes == [
        f"note: Containerfile:3 still pins sha256 {old} ({what}); the file's sha256 is now {new}: update it",
        f"note: stack.lock.json:6 still pins sha256 {old} ({what}); the file's sha256 is now {new}: update it",
    ]
    assert old not in (queue.root / "lockfile.toml").read_text()  # patchkit's own pins moved with it
