"""``check`` reports a repository's own upstream and image pins the lockfile has moved past (``upstream-pin-drift``).

The repositories are the hand-kept ones import reads (tests/importing/dockerbuilt.py:
a KEY=VALUE ``upstream.lock``, a JSON stack lock, a Dockerfile ``ARG`` default
and a base image by digest; tests/importing/test_compose_build_args.py: compose
``build.args``). Each is imported and checks clean; the lockfile is then moved
to another commit and digest, as ``rebase``/``bump`` move it, and check names
every file and line that still states the old one; once the files are edited
(and re-pinned with ``patchkit lock``) the findings are gone. A pin that
cannot be matched to a lockfile upstream, or is no commit, is never reported.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from patchkit.check.upstream_pins import drift, image_drift
from patchkit.importing.pins import Pin
from patchkit.lockfile.reader import loads
from tests.conftest import Invoke
from tests.importing import dockerbuilt as d
from tests.importing.test_compose_build_args import ARGS, _overlay_repo

NEW_COMMIT = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d"
NEW_DIGEST = "sha256:" + "5e" * 32
CODE = "upstream-pin-drift"
ROOT = Path(__file__).resolve().parents[2]


def _drift(root: Path, invoke: Invoke) -> list[tuple[str, int]]:
    run = invoke("check", "--format", "json", repo=root)
    assert run.exit_code in (0, 1), run.stdout + run.stderr
    found = json.loads(run.stdout)["findings"]
    assert all(f["severity"] == "error" for f in found if f["code"] == CODE)
    return sorted((f["file"], f["line"]) for f in found if f["code"] == CODE)


def _imported(root: Path, invoke: Invoke) -> None:
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    assert invoke("sums", repo=root).exit_code == 0


def _move(root: Path, invoke: Invoke, commit: str | None = NEW_COMMIT, digest: str | None = None) -> None:
    """The lockfile's vllm upstream (and its image) moved on, as a rebase or bump leaves it; re-summed."""
    text = (root / "lockfile.toml").read_text()
    head, sep, rest = text.partition("[upstreams.vllm]\n")
    assert sep
    if commit is not None:
        rest = re.sub(r'^commit = "[0-9a-f]+"', f'commit = "{commit}"', rest, count=1, flags=re.M)
    if digest is not None:
        head = re.sub(r'^digest = "sha256:[0-9a-f]+"', f'digest = "{digest}"', head, count=1, flags=re.M)
    (root / "lockfile.toml").write_text(head + sep + rest)
    assert invoke("sums", repo=root).exit_code == 0


def _fix(root: Path, invoke: Invoke, files: list[str], old: str, new: str) -> None:
    for rel in files:
        (root / rel).write_text((root / rel).read_text().replace(old, new))
    relock = invoke("lock", repo=root)
    assert relock.exit_code == 0, relock.stdout + relock.stderr
    assert invoke("sums", repo=root).exit_code == 0


@pytest.mark.parametrize("layout", d.LAYOUTS, ids=lambda lay: lay.name)
def test_each_file_stating_the_old_commit_or_digest_is_reported_until_edited(
    tmp_path: Path, invoke: Invoke, layout: d.Layout
) -> None:
    root = d.make(tmp_path / "repo", layout)
    _imported(root, invoke)
    assert _drift(root, invoke) == []
    _move(root, invoke, NEW_COMMIT, NEW_DIGEST)
    stale = [
        ("stack.lock.json", d.line_of(root, "stack.lock.json", '"base_commit": "' + d.VLLM_COMMIT)),
        ("upstream.lock", d.line_of(root, "upstream.lock", "VLLM_COMMIT=")),
        (layout.dockerfile, d.line_of(root, layout.dockerfile, "ARG VLLM_COMMIT=")),
        (layout.dockerfile, d.line_of(root, layout.dockerfile, d.BASE_DIGEST)),
    ]
    assert _drift(root, invoke) == sorted(stale)
    _fix(root, invoke, ["upstream.lock", "stack.lock.json"], d.VLLM_COMMIT, NEW_COMMIT)
    assert _drift(root, invoke) == sorted(stale[2:])
    _fix(root, invoke, [layout.dockerfile], d.VLLM_COMMIT, NEW_COMMIT)
    _fix(root, invoke, [layout.dockerfile], d.BASE_DIGEST, NEW_DIGEST)
    assert _drift(root, invoke) == []


@pytest.mark.parametrize("form", sorted(ARGS))
def test_a_compose_build_argument_is_reported_at_its_compose_line(tmp_path: Path, invoke: Invoke, form: str) -> None:
    root = _overlay_repo(tmp_path / "repo", form)
    _imported(root, invoke)
    assert _drift(root, invoke) == []
    _move(root, invoke)
    needle = "args:" if form == "quoted-list" else "VLLM_COMMIT"
    assert _drift(root, invoke) == [("docker/compose.yaml", d.line_of(root, "docker/compose.yaml", needle))]
    _fix(root, invoke, ["docker/compose.yaml"], d.VLLM_COMMIT, NEW_COMMIT)
    assert _drift(root, invoke) == []


def test_a_short_commit_of_the_lockfiles_commit_is_no_drift(tmp_path: Path, invoke: Invoke) -> None:
    short = d.UPSTREAM_LOCK.replace(f"VLLM_COMMIT={d.VLLM_COMMIT}", f"VLLM_COMMIT={d.VLLM_COMMIT[:10]}")
    root = d.make(tmp_path / "repo", d.LAYOUTS[1], lock=short)
    _imported(root, invoke)
    assert _drift(root, invoke) == []
    _move(root, invoke)
    assert ("upstream.lock", d.line_of(root, "upstream.lock", "VLLM_COMMIT=")) in _drift(root, invoke)


def test_a_tag_is_compared_only_with_a_version_the_lockfile_records(tmp_path: Path, invoke: Invoke) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[1])
    _imported(root, invoke)
    tag_line = ("upstream.lock", d.line_of(root, "upstream.lock", "VLLM_TAG="))
    assert tag_line not in _drift(root, invoke)  # the lockfile records no version of vllm: nothing to compare
    text = (root / "lockfile.toml").read_text().replace("[upstreams.vllm]\n", '[upstreams.vllm]\nversion = "0.11.0"\n')
    (root / "lockfile.toml").write_text(text)
    assert invoke("sums", repo=root).exit_code == 0
    assert _drift(root, invoke) == []  # v0.11.0 is 0.11.0
    (root / "lockfile.toml").write_text(text.replace('version = "0.11.0"', 'version = "0.12.0"'))
    assert invoke("sums", repo=root).exit_code == 0
    assert tag_line in _drift(root, invoke)


@pytest.mark.parametrize(
    "value",
    ["main", "${VLLM_COMMIT_OVERRIDE}", "zzzzzzzzzzzz", "", "3a1e5c"],  # a branch, a variable, no hex, empty, too short
)
def test_a_value_that_is_no_commit_is_never_reported(tmp_path: Path, invoke: Invoke, value: str) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[1])
    _imported(root, invoke)
    _fix(root, invoke, ["upstream.lock"], f"VLLM_COMMIT={d.VLLM_COMMIT}", f"VLLM_COMMIT={value}")
    _move(root, invoke)
    assert "upstream.lock" not in {f for f, _ in _drift(root, invoke)}


def test_an_unreadable_lock_states_nothing_and_the_others_are_still_compared(tmp_path: Path, invoke: Invoke) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[1])
    _imported(root, invoke)
    _move(root, invoke)
    (root / "stack.lock.json").write_text('{"base_commit": "' + d.VLLM_COMMIT + '", [')  # no longer JSON
    (root / "upstream.lock").write_bytes(b"\xff\xfe VLLM_COMMIT=\x00\n")  # not text
    relock = invoke("lock", repo=root)
    assert relock.exit_code == 0, relock.stdout + relock.stderr
    assert invoke("sums", repo=root).exit_code == 0
    assert _drift(root, invoke) == [("Dockerfile", d.line_of(root, "Dockerfile", "ARG VLLM_COMMIT="))]


def test_a_lock_symlinked_out_of_the_repository_is_not_read(tmp_path: Path, invoke: Invoke) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[1])
    _imported(root, invoke)
    _move(root, invoke)
    outside = tmp_path / "outside.lock"
    outside.write_text(d.UPSTREAM_LOCK)
    (root / "upstream.lock").unlink()
    os.symlink(outside, root / "upstream.lock")
    found = _drift(root, invoke)
    assert "upstream.lock" not in {f for f, _ in found}
    assert ("stack.lock.json", d.line_of(root, "stack.lock.json", '"base_commit"')) in found


@pytest.mark.parametrize(
    "line",
    [
        f'ARG VLLM_COMMIT="{d.VLLM_COMMIT}',  # a quote not closed: docker build refuses it too
        "ARG VLLM_COMMIT=" + "${X:-" * 200 + d.VLLM_COMMIT + "}" * 200,  # defaults nested too deeply
        "ARG VLLM_COMMIT=<<EOF",
    ],
)
def test_a_build_file_that_does_not_read_states_nothing(tmp_path: Path, invoke: Invoke, line: str) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[1])
    _imported(root, invoke)
    _fix(root, invoke, ["Dockerfile"], f"ARG VLLM_COMMIT={d.VLLM_COMMIT}", line)
    _move(root, invoke)
    assert "Dockerfile" not in {f for f, _ in _drift(root, invoke)}


def test_a_queues_version_lock_and_containerfile_are_reported_after_the_series_moves(
    tmp_path: Path, invoke: Invoke
) -> None:
    from tests.series.test_import import DIGEST, _queue_repo

    root, c1, _ = _queue_repo(tmp_path, series_file=False)
    _imported(root, invoke)
    assert _drift(root, invoke) == []
    text = (root / "lockfile.toml").read_text()  # the series and its upstream moved on, and the image was bumped
    (root / "lockfile.toml").write_text(text.replace(c1, NEW_COMMIT).replace(DIGEST, NEW_DIGEST))
    assert invoke("sums", repo=root).exit_code == 0
    stale = [
        ("Containerfile", d.line_of(root, "Containerfile", f"FROM vllm/vllm-openai-rocm@{DIGEST}")),
        ("Containerfile", d.line_of(root, "Containerfile", "ARG VLLM_COMMIT=")),
        ("versions.lock.json", d.line_of(root, "versions.lock.json", c1)),
        ("versions.lock.json", d.line_of(root, "versions.lock.json", DIGEST)),
    ]
    assert _drift(root, invoke) == sorted(stale)
    _fix(root, invoke, ["Containerfile", "versions.lock.json"], c1, NEW_COMMIT)
    _fix(root, invoke, ["Containerfile", "versions.lock.json"], DIGEST, NEW_DIGEST)
    assert _drift(root, invoke) == []


LOCK = f"""\
schema = 1

[images.runtime]
repository = "rocm/vllm"
digest = "sha256:{"7b" * 32}"

[images.runtime-2]
repository = "rocm/vllm-dev"
digest = "sha256:{"1a" * 32}"

[images.runtime-3]
repository = "rocm/vllm-dev"
digest = "sha256:{"2b" * 32}"

[upstreams.vllm]
git = "https://github.com/vllm-project/vllm"
commit = "{d.VLLM_COMMIT}"
"""


def _pin(name: str, what: str, value: str, line: int = 1, under: str | None = None) -> Pin:
    return Pin(name, what, value, "upstream.lock", line, "", under)


def test_a_pin_is_matched_by_its_repository_then_by_its_name_and_never_guessed() -> None:
    lock = loads(LOCK)
    fork = [_pin("vllm", "git", "https://github.com/someone/vllm-fork"), _pin("vllm", "commit", NEW_COMMIT, 2)]
    assert drift(lock, fork) == []  # the file says it is another repository's commit
    same = [_pin("vllm", "git", "vllm-project/vllm.git"), _pin("vllm", "commit", NEW_COMMIT, 2)]
    assert [(f.code, f.line) for f in drift(lock, same)] == [(CODE, 2)]
    by_name = [_pin("vllm", "commit", NEW_COMMIT, 3)]
    assert [(f.code, f.line) for f in drift(lock, by_name)] == [(CODE, 3)]
    assert drift(lock, [_pin("aiter", "commit", NEW_COMMIT)]) == []  # no such upstream in the lockfile
    assert drift(lock, [_pin("vllm", "release", NEW_COMMIT)]) == []  # the lockfile records no release commit
    assert drift(lock, [_pin("vllm", "commit", d.VLLM_COMMIT.upper()[:12])]) == []


def test_an_image_is_compared_only_when_the_lockfile_pins_its_repository_at_one_digest() -> None:
    from patchkit.check.state import ImagePin

    lock = loads(LOCK)
    assert image_drift(lock, [ImagePin("Dockerfile", 1, "rocm/vllm", "sha256:" + "7b" * 32)]) == []
    assert [f.line for f in image_drift(lock, [ImagePin("Dockerfile", 4, "rocm/vllm", NEW_DIGEST)])] == [4]
    assert image_drift(lock, [ImagePin("Dockerfile", 1, "rocm/vllm-dev", NEW_DIGEST)]) == []  # which one is meant?
    assert image_drift(lock, [ImagePin("Dockerfile", 1, "python", NEW_DIGEST)]) == []


def test_the_shipped_deployment_states_no_stale_pin(invoke: Invoke) -> None:
    run = invoke("check", "--format", "json", repo=ROOT)
    assert run.exit_code == 0, run.stdout + run.stderr
    assert [f for f in json.loads(run.stdout)["findings"] if f["code"] == CODE] == []


@pytest.mark.parametrize("form", ["string", "table"])
def test_a_queue_locks_image_by_tag_is_reported_by_check_until_it_is_pinned(
    tmp_path: Path, invoke: Invoke, form: str
) -> None:
    from tests.importing.test_queue_scripts import DIGEST, _repo

    root, _, _ = _repo(tmp_path)
    lock_file = root / "stack.lock.json"
    lock = json.loads(lock_file.read_text())
    tagged = "vllm/vllm-openai:v0.11.0"

    def image(ref: str) -> object:
        return ref if form == "string" else {"image": ref}

    lock["images"] = {"serve": image(tagged)}
    lock_file.write_text(json.dumps(lock, indent=2) + "\n")
    said = ("queue-image-unpinned", "error", "stack.lock.json", None)
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = json.loads(run.stdout)["import"]["issues"]
    assert [(i["kind"], i["severity"], i["file"], i["line"]) for i in issues if i["kind"] == said[0]] == [said]
    assert invoke("sums", repo=root).exit_code == 0

    def checked() -> tuple[int, list[tuple[str, str, str, int | None]]]:
        run = invoke("check", "--format", "json", repo=root)
        found = json.loads(run.stdout)["findings"]
        return run.exit_code, [(f["code"], f["severity"], f["file"], f["line"]) for f in found if f["code"] == said[0]]

    assert checked() == (1, [said])
    lock["images"] = {"serve": image(f"vllm/vllm-openai:v0.11.0@{DIGEST}")}
    lock_file.write_text(json.dumps(lock, indent=2) + "\n")
    assert invoke("lock", repo=root).exit_code == 0
    assert checked() == (0, [])  # pinned: the check passes


def test_a_json_lock_naming_the_image_with_docker_hubs_host_drifts_like_its_short_name(
    tmp_path: Path, invoke: Invoke
) -> None:
    from tests.series.test_import import DIGEST, _queue_repo

    root, _, _ = _queue_repo(tmp_path, series_file=False)
    lock_file = root / "versions.lock.json"
    lock_file.write_text(lock_file.read_text().replace("vllm/vllm-openai-rocm:", "docker.io/vllm/vllm-openai-rocm:"))
    _imported(root, invoke)
    assert _drift(root, invoke) == []
    text = (root / "lockfile.toml").read_text()  # the image was bumped; the repository's own lock was not
    (root / "lockfile.toml").write_text(text.replace(DIGEST, NEW_DIGEST))
    assert invoke("sums", repo=root).exit_code == 0
    assert ("versions.lock.json", d.line_of(root, "versions.lock.json", DIGEST)) in _drift(root, invoke)
