"""``bump --no-remembered``: the nightly bump does not replay a recorded resolution, so the conflict waits.

On the faithful copy of the shipped deployment (tests/images/test_bump_nightly.py):
a nightly whose change hits the patch's line conflicts; the conflict is
resolved by hand and recorded (``resolutions/``). Bumping onto the same
nightly again, from the deployment as it was, replays that resolution; with
``--no-remembered`` it does not, for the bump itself and for
``--latest-clean``'s dry runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import Invoke, git, snapshot
from tests.images.conftest import ImageBuilder, RegistryServer
from tests.images.test_bump_nightly import NEW_VERSION, NIGHTLY_CONFLICT, nightly, shipped_copy

__all__ = ["shipped_copy"]  # the fixture, used by name


def _resolve(path: Path) -> None:
    """Take both platforms, as the maintainer did: ``("xpu", "hpu", "rocm")``."""
    out, skip = [], False
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith("<<<<<<<"):
            skip = True
            out.append('    if not has_triton or platform in ("xpu", "hpu", "rocm"):\n')
        elif line.startswith(">>>>>>>"):
            skip = False
        elif not skip:
            out.append(line)
    path.write_text("".join(out))


def _bump(invoke: Invoke, root: Path, *args: str) -> tuple[int, dict[str, object]]:
    r = invoke("bump", *args, "--format", "json", repo=root)
    assert r.stdout, r.stderr
    return r.exit_code, json.loads(r.stdout)


def _recorded(doc: dict[str, object]) -> dict[str, object]:
    return {p["name"]: p["resolved_as_recorded"] for p in doc["patches"] if p["resolved_as_recorded"]}  # type: ignore[attr-defined,index]


def test_no_remembered_leaves_a_recorded_conflict_to_be_resolved_by_hand(
    shipped_copy: Path, invoke: Invoke, image_builder: ImageBuilder, registry_server: RegistryServer, tmp_path: Path
) -> None:
    root = shipped_copy
    repository = f"{registry_server.host}/vllm/vllm-openai-rocm"
    tag = f"again-{tmp_path.name[-12:].replace('_', '-').lower()}"
    nightly(image_builder, registry_server, tag, NIGHTLY_CONFLICT, NEW_VERSION, "2026-12-01T05:00:00Z")
    image = f"{repository}:{tag}"

    # Once: the conflict is resolved by hand and recorded.
    code, doc = _bump(invoke, root, "--image", image)
    assert code == 1
    (conflicted,) = doc["work_files"]  # type: ignore[misc]
    _resolve(root / conflicted)
    r = invoke("rebase", "--continue", repo=root)
    assert r.exit_code == 0, r.stdout + r.stderr
    recorded = sorted(p.name for p in (root / "resolutions").iterdir())
    assert recorded
    # The deployment as it was before that bump, with the record committed beside it.
    kept = tmp_path / "kept"
    shutil.copytree(root / "resolutions", kept)
    git(root, "reset", "-q", "--hard", "HEAD")
    git(root, "clean", "-qfdx")
    shutil.copytree(kept, root / "resolutions")
    before = snapshot(root)

    code, doc = _bump(invoke, root, "--image", image, "--no-remembered")
    assert code == 1 and not doc["committed"]
    assert {p["name"]: p["outcome"] for p in doc["patches"]}["kv-restore-fence"] == "conflict"  # type: ignore[index]
    assert _recorded(doc) == {}
    assert {k: v for k, v in snapshot(root).items() if not k.startswith(".patchkit/")} == before
    assert invoke("rebase", "--abort", repo=root).exit_code == 0

    r = invoke("bump", "--image", repository, "--latest-clean", "--tag", tag, "--no-remembered", repo=root)
    assert r.exit_code == 1 and "no tag tried is clean" in r.stdout, r.stdout + r.stderr
    r = invoke("bump", "--image", repository, "--latest-clean", "--tag", tag, "--format", "json", repo=root)
    assert r.exit_code == 0 and json.loads(r.stdout)["newest_clean"]["tag"] == tag, r.stdout + r.stderr
    assert snapshot(root) == before

    code, doc = _bump(invoke, root, "--image", image)
    assert code == 0 and doc["committed"]
    assert set(_recorded(doc)) == {"kv-restore-fence"}
    assert sorted(p.name for p in (root / "resolutions").iterdir()) == recorded
