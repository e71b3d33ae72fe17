"""``patchkit import`` of deployments whose overlays an image build copies in, then ``check``.

Each repository is written the way such repositories are (tests/importing/dockerbuilt.py): an
overlay tree a Dockerfile copies over site-packages/vllm in every COPY spelling, pins in a
KEY=VALUE lock, a JSON stack lock and the Dockerfile's ARGs, a README that names projects and
pull requests in prose and in a table. The expected result is exact: no false finding, nothing
missed, nothing invented.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.conftest import Invoke
from tests.importing import dockerbuilt as d


def _import(root: Path, invoke: Invoke) -> dict[str, object]:
    run = invoke("import", "--format", "json", str(root))
    assert run.exit_code == 0, run.stderr
    out: dict[str, object] = json.loads(run.stdout)["import"]
    return out


def _issues(out: dict[str, object]) -> set[tuple[str, str, int | None]]:
    return {(i["kind"], i["file"], i["line"]) for i in out["issues"]}  # type: ignore[attr-defined]


def _check(root: Path, invoke: Invoke) -> tuple[int, set[tuple[str, str, str, int | None]], list[dict[str, object]]]:
    run = invoke("check", "--format", "json", repo=root)
    found = json.loads(run.stdout)["findings"]
    return run.exit_code, {(f["code"], f["severity"], f["file"], f["line"]) for f in found}, found


def _lock_line(root: Path, needle: str) -> int:
    return d.line_of(root, "lockfile.toml", needle)


@pytest.mark.parametrize("layout", d.LAYOUTS, ids=[lay.name for lay in d.LAYOUTS])
def test_a_dockerfile_delivered_tree_imports_exactly(tmp_path: Path, invoke: Invoke, layout: d.Layout) -> None:
    root = d.make(tmp_path / "repo", layout)
    out = _import(root, invoke)
    lock = tomllib.loads((root / "lockfile.toml").read_text())
    df = layout.dockerfile

    # One entry per copied file, at the path the build puts it: overlays, and the module the table calls new.
    got = {(p["file"], p["kind"], p["target"], p.get("build")) for p in lock["patches"]}
    want = {(rel, "module" if rel in d.MODULES else "overlay", d.TARGETS[rel], df) for rel in d.FILES}
    assert got == want
    # The entrypoint (not a Python tree) and the image copied --from another image are not patches.
    assert all(not p["target"].startswith("/opt/") for p in lock["patches"])

    # Pins from the repository's own files: vllm from the stack lock and upstream.lock, aiter from upstream.lock.
    ups = lock["upstreams"]
    assert set(ups) == {"vllm", "aiter"}  # nothing from prose ("eviction/write", "read/write path")
    assert (ups["vllm"]["git"], ups["vllm"]["commit"]) == ("https://github.com/vllm-project/vllm", d.VLLM_COMMIT)
    assert (ups["aiter"]["git"], ups["aiter"]["commit"]) == ("https://github.com/ROCm/aiter", d.AITER_COMMIT)
    assert "stack.lock.json:4" in ups["vllm"]["note"] and "release commit " + d.RELEASE_COMMIT in ups["vllm"]["note"]
    assert "upstream.lock:5" in ups["aiter"]["note"] and "upstream.lock:4" in ups["aiter"]["note"]
    # The digest-pinned base (an ARG default) is pinned; the tag-only build stage is not.
    assert lock["images"] == {"runtime": {"repository": "rocm/vllm", "digest": d.BASE_DIGEST, "tag": "v0.11.0"}}

    by_file = {p["file"]: p for p in lock["patches"]}
    worker = by_file["overlay/vllm/v1/worker/gpu_worker.py"]
    assert worker["origin"]["commit"] == d.VLLM_COMMIT and worker["origin"]["repository"] == "vllm-project/vllm"
    assert "origin" not in by_file["overlay/vllm/v1/kv_offload/kv_companion.py"]
    # References: each where it is unambiguous.
    refs = {rel: p.get("refs", []) for rel, p in by_file.items()}
    commit = f"https://github.com/vllm-project/vllm/commit/{d.FIX_COMMIT}"
    assert refs == {
        "overlay/vllm/v1/worker/gpu_worker.py": ["vllm-project/vllm#27001", "vllm-project/vllm#27002"],
        "overlay/vllm/v1/sample/sampler.py": ["vllm-project/vllm#27010", commit],  # stack lock entry, README bullet
        "overlay/vllm/entrypoints/openai/serving_chat.py": [commit],  # owner/repo@sha above its single-file COPY
        "overlay/vllm/model_executor/layers/rotary.py": [],
        "overlay/vllm/v1/kv_offload/kv_companion.py": [],
    }

    overlays = [rel for rel in d.FILES if rel not in d.MODULES]
    unnamed = ["overlay/vllm/v1/sample/sampler.py", "overlay/vllm/model_executor/layers/rotary.py"]
    expected = {("no-diff", rel, None) for rel in overlays}
    expected |= {("kind-unknown", rel, None) for rel in unnamed}
    expected |= {
        ("ref-unassigned", "README.md", 6),  # names two patches
        ("ref-unassigned", "README.md", 10),  # PR #99 with no project and no patch
        ("image-unpinned", df, d.line_of(root, df, "FROM python:3.12-slim")),
        ("ref-unassigned", df, d.line_of(root, df, "COPY overlay/vllm/v1/")),  # a comment above a tree's COPY
        ("ref-unassigned", "stack.lock.json", d.line_of(root, "stack.lock.json", '"vllm/__init__.py"')),
    }
    if layout.compose:
        expected.add(("ref-unassigned", "docker/compose.yaml", d.line_of(root, "docker/compose.yaml", "build:")))
    assert _issues(out) == expected

    code, findings, _ = _check(root, invoke)
    assert code == 1
    at = {rel: _lock_line(root, f'name = "{p["name"]}"') for rel, p in by_file.items()}
    want_check = {("no-diff", "error", "lockfile.toml", at[r]) for r in overlays}
    want_check |= {("base-unpinned", "note", "lockfile.toml", at[r]) for r in overlays}
    want_check |= {("kind-unknown", "note", "lockfile.toml", at[r]) for r in unnamed}
    want_check.add(("image-unpinned", "error", df, d.line_of(root, df, "FROM python:3.12-slim")))
    want_check |= {("ref-unassigned", "note", "README.md", 6), ("ref-unassigned", "note", "README.md", 10)}
    want_check.add(("ref-unassigned", "note", df, d.line_of(root, df, "COPY overlay/vllm/v1/")))
    want_check.add(
        ("ref-unassigned", "note", "stack.lock.json", d.line_of(root, "stack.lock.json", '"vllm/__init__.py"'))
    )
    if layout.compose:
        want_check.add(
            ("ref-unassigned", "note", "docker/compose.yaml", d.line_of(root, "docker/compose.yaml", "build:"))
        )
    pinned = {a["file"] for a in lock["artifacts"]} | {"lockfile.toml"}
    want_check |= {("sums-drift", "error", "SHA256SUMS", None)}  # one per file import pins beside the patches
    assert findings == want_check
    _, _, raw = _check(root, invoke)
    unlisted = {str(f["message"]).removeprefix("does not list ") for f in raw if f["code"] == "sums-drift"}
    assert unlisted == pinned


def test_pinning_the_base_by_digest_clears_check(tmp_path: Path, invoke: Invoke) -> None:
    """A tag-only FROM stays reported by check until the Dockerfile pins it; then check says nothing of it."""
    layout = d.LAYOUTS[1]
    root = d.make(tmp_path / "repo", layout)
    _import(root, invoke)
    line = d.line_of(root, "Dockerfile", "FROM python:3.12-slim")
    assert ("image-unpinned", "error", "Dockerfile", line) in _check(root, invoke)[1]
    text = (root / "Dockerfile").read_text()
    (root / "Dockerfile").write_text(text.replace("FROM python:3.12-slim", f"FROM python:3.12-slim@{d.BASE_DIGEST}"))
    assert not any(c == "image-unpinned" for c, *_ in _check(root, invoke)[1])


@pytest.mark.parametrize(
    "base",
    [
        "rocm/vllm:v0.11.0",  # tag only
        "rocm/vllm",  # no tag at all: latest
        "registry.example.com:5000/rocm/vllm:nightly",  # a registry with a port
    ],
)
def test_a_tag_only_base_arg_is_reported_by_import_and_check(tmp_path: Path, invoke: Invoke, base: str) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[1], dockerfile_text=d.dockerfile(base_arg=base))
    out = _import(root, invoke)
    line = d.line_of(root, "Dockerfile", "FROM ${BASE}")
    assert ("image-unpinned", "Dockerfile", line) in _issues(out)
    assert tomllib.loads((root / "lockfile.toml").read_text()).get("images", {}) == {}
    assert ("image-unpinned", "error", "Dockerfile", line) in _check(root, invoke)[1]


def test_a_copy_the_build_no_longer_makes_is_reported(tmp_path: Path, invoke: Invoke) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[1])
    _import(root, invoke)
    text = (root / "Dockerfile").read_text()
    (root / "Dockerfile").write_text(text.replace('COPY ["overlay/vllm/model_executor/layers/rotary.py", ', "# "))
    code, _, raw = _check(root, invoke)
    assert code == 1
    gone = [f for f in raw if f["code"] == "build-not-copied"]
    assert [f["field"] for f in gone] == ["patches[rotary].build"]


@pytest.mark.parametrize(
    ("lock_text", "conflicting"),
    [
        (d.UPSTREAM_LOCK.replace(d.VLLM_COMMIT, "1" * 40), True),  # upstream.lock disagrees with the stack lock
        (d.UPSTREAM_LOCK.replace(d.VLLM_COMMIT, d.VLLM_COMMIT[:12]), False),  # an abbreviation of the same commit
    ],
)
def test_pins_that_disagree_are_reported_not_guessed(
    tmp_path: Path, invoke: Invoke, lock_text: str, conflicting: bool
) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[1], lock=lock_text)
    out = _import(root, invoke)
    lock = tomllib.loads((root / "lockfile.toml").read_text())
    line = d.line_of(root, "upstream.lock", "VLLM_COMMIT=")
    if conflicting:
        assert ("pin-conflict", "upstream.lock", line) in _issues(out)
        assert "commit" not in lock["upstreams"]["vllm"]
        assert ("pin-conflict", "error", "upstream.lock", line) in _check(root, invoke)[1]
        # No commit is taken for the overlays either: each one's base is unknown.
        assert {("base-unknown", rel, None) for rel in d.FILES if rel not in d.MODULES} <= _issues(out)
    else:
        assert not any(k == "pin-conflict" for k, *_ in _issues(out))
        assert lock["upstreams"]["vllm"]["commit"] == d.VLLM_COMMIT


def test_import_of_a_dockerfile_only_repository_is_not_refused(tmp_path: Path, invoke: Invoke) -> None:
    """No compose file anywhere: the Dockerfile is the delivery, and `import .` adopts it."""
    root = d.make(tmp_path / "repo", d.LAYOUTS[2])
    assert not list(root.rglob("*compose*"))
    out = _import(root, invoke)
    assert out["found"]["overlays"] == 4 and out["found"]["modules"] == 1  # type: ignore[index]


def test_a_repository_with_neither_compose_nor_dockerfile_is_refused_with_both_named(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    (root / "README.md").write_text("# nothing here\n")
    run = invoke("import", str(root))
    assert run.exit_code == 2
    assert "no compose file" in run.stderr and "Dockerfile" in run.stderr
    assert "Traceback" not in run.stderr
    # every place a Dockerfile is looked for is named, so the user knows where one would be found
    assert all(f"{place}/" in run.stderr for place in ("docker", "deploy", "build", "container", ".devcontainer"))


@pytest.mark.parametrize(
    ("rel", "data"),
    [
        (
            "Dockerfile",
            b"FROM x@sha256:" + b"a" * 64 + b"\nCOPY ../../etc/passwd /usr/lib/python3/dist-packages/vllm/p.py\n",
        ),
        ("Dockerfile", b"FROM x@sha256:" + b"a" * 64 + b"\nCOPY /etc/ /usr/lib/python3/dist-packages/vllm/\n"),
        ("Dockerfile", b"FROM x@sha256:" + b"a" * 64 + b'\nCOPY ["broken\n'),
        ("Dockerfile", b"FROM\nCOPY\nARG\nWORKDIR\nENV\nCOPY --from= a\nFROM ${\n"),
        ("stack.lock.json", b"[" * 100_000),
        ("stack.lock.json", b'{"vllm": {"commit": 7, "repo": ["x"]}, "upstreams": "no"}'),
        ("upstream.lock", b"\xff\xfe VLLM_COMMIT=\x00\n=\n==\nexport\n"),
    ],
)
def test_hostile_or_odd_build_and_lock_files_never_crash_import_or_check(
    tmp_path: Path, invoke: Invoke, rel: str, data: bytes
) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[1])
    (root / rel).write_bytes(data)
    run = invoke("import", str(root))
    assert run.exit_code in (0, 2), run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    text = (root / "lockfile.toml").read_text() if run.exit_code == 0 else ""
    assert "/etc/" not in text and "passwd" not in text  # nothing outside the repository is pinned
    if run.exit_code == 0:
        check = invoke("check", repo=root)
        assert check.exit_code in (0, 1), check.stderr


def test_a_non_utf8_dockerfile_is_refused_with_its_name(tmp_path: Path, invoke: Invoke) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[1])
    (root / "Dockerfile").write_bytes(b"FROM x\n\xff\xfe\n")
    run = invoke("import", str(root))
    assert run.exit_code == 2 and "Dockerfile" in run.stderr and "UTF-8" in run.stderr
    assert not (root / "lockfile.toml").exists()


def test_compose_build_arguments_decide_the_tree(tmp_path: Path, invoke: Invoke) -> None:
    """`args:` in compose's build override the Dockerfile's ARG defaults: here the tree is dist-packages."""
    root = d.make(tmp_path / "repo", d.LAYOUTS[0])
    compose = root / "docker/compose.yaml"
    compose.write_text(compose.read_text().replace(f"PY_SITE: {d.SITE}", f"PY_SITE: {d.DIST}"))
    _import(root, invoke)
    lock = tomllib.loads((root / "lockfile.toml").read_text())
    assert {p["target"] for p in lock["patches"]} == {t.replace(d.SITE, d.DIST) for t in d.TARGETS.values()}
    _, findings, _ = _check(root, invoke)
    assert not any(c == "build-not-copied" for c, *_ in findings)  # check reads the build with the same arguments


@pytest.mark.parametrize("place", ["deploy", "docker", "build"])
def test_compose_files_in_build_directories_mount_relative_to_themselves(
    tmp_path: Path, invoke: Invoke, place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bind-mount repository whose compose file lives in deploy/: `import .` finds it, sources resolve from there."""
    root = tmp_path / "repo"
    d.write(root, "patches/sampler.py", d.FILES["overlay/vllm/v1/sample/sampler.py"])
    d.write(
        root,
        f"{place}/docker-compose.yml",
        "services:\n  vllm:\n    image: rocm/vllm@" + d.BASE_DIGEST + "\n    volumes:\n"
        "      # vllm-project/vllm@" + d.FIX_COMMIT + "\n"
        f"      - ../patches/sampler.py:{d.SITE}/vllm/v1/sample/sampler.py:ro\n",
    )
    monkeypatch.chdir(root)
    out = _import(Path("."), invoke)
    lock = tomllib.loads((root / "lockfile.toml").read_text())
    (patch,) = lock["patches"]
    assert (patch["file"], patch["target"], "build" in patch) == (
        "patches/sampler.py",
        f"{d.SITE}/vllm/v1/sample/sampler.py",
        False,
    )
    assert patch["refs"] == [f"https://github.com/vllm-project/vllm/commit/{d.FIX_COMMIT}"]
    assert not any(k.startswith("mount-") for k, *_ in _issues(out))
    assert not any(c.startswith("mount-") for c, *_ in _check(root, invoke)[1])


@pytest.mark.parametrize(
    ("edit", "kind", "rel", "needle"),
    [
        # A commit pinned with no repository anywhere: noted, nothing declared.
        (
            ("upstream.lock", "PYTHON_VERSION=3.12", f"TRITON_COMMIT={d.AITER_COMMIT}"),
            "pin-no-repository",
            "upstream.lock",
            "TRITON_COMMIT=",
        ),
        # A JSON lock that does not parse.
        (
            ("stack.lock.json", '"stack": "mi300x-serving",', '"stack": mi300x,'),
            "pin-unreadable",
            "stack.lock.json",
            None,
        ),
        # A here-document docker would refuse (never closed): one problem at its line, the rest unread.
        (
            ("docker/Dockerfile", "COPY entrypoint.sh /opt/entrypoint.sh", "RUN <<EOF\necho never closed"),
            "build-unreadable",
            "docker/Dockerfile",
            "RUN <<EOF",
        ),
        # A compose build naming a Dockerfile that is not there.
        (
            ("docker/compose.yaml", "dockerfile: docker/Dockerfile", "dockerfile: docker/Dockerfile.gone"),
            "build-missing",
            "docker/compose.yaml",
            "build:",
        ),
    ],
)
def test_what_import_says_of_pins_and_builds_check_says_again(
    tmp_path: Path, invoke: Invoke, edit: tuple[str, str, str], kind: str, rel: str, needle: str | None
) -> None:
    root = d.make(tmp_path / "repo", d.LAYOUTS[0])
    (root / "docker/Dockerfile.gone").unlink(missing_ok=True)
    path = root / edit[0]
    assert edit[1] in path.read_text()
    path.write_text(path.read_text().replace(edit[1], edit[2]))
    line = d.line_of(root, rel, needle) if needle else None
    assert (kind, rel, line) in _issues(_import(root, invoke))
    assert kind in {c for c, _, f, ln in _check(root, invoke)[1] if f == rel and ln == line}
    assert "triton" not in tomllib.loads((root / "lockfile.toml").read_text())["upstreams"]


def test_a_patch_queue_built_from_a_tag_only_image_is_reported_by_import_and_check(
    tmp_path: Path, invoke: Invoke
) -> None:
    """A queue repository (no overlay copied): the queue import stands, and its build's base is still read."""
    root = tmp_path / "queue"
    diff = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    d.write(root, "patches/vllm/0001-fix.patch", "From: a <a@b>\nSubject: [PATCH] fix\n\n---\n" + diff)
    d.write(
        root,
        "Containerfile",
        "FROM rocm/vllm-dev:nightly\nCOPY patches /patches\nRUN git apply /patches/vllm/0001-fix.patch\n",
    )
    out = _import(root, invoke)
    lock = tomllib.loads((root / "lockfile.toml").read_text())
    assert list(lock["series"]) == ["vllm"] and "patches" not in lock
    assert ("image-unpinned", "Containerfile", 1) in _issues(out)
    assert ("image-unpinned", "error", "Containerfile", 1) in _check(root, invoke)[1]


def test_a_compressed_patch_queue_is_refused_as_what_it_is(tmp_path: Path, invoke: Invoke) -> None:
    """``patches/0.5.0/*.patch.gz`` applied by ``git apply <(gunzip -c …)``: refused naming the compressed patches,
    not as a repository with neither compose file nor Dockerfile."""
    import gzip

    root = tmp_path / "queue"
    (root / "patches/0.5.0").mkdir(parents=True)
    for name in ("01-a.patch.gz", "02-b.patch.gz"):
        (root / "patches/0.5.0" / name).write_bytes(gzip.compress(b"--- a/x\n+++ b/x\n"))
    (root / "build.sh").write_text(
        "#!/bin/bash\nfor p in patches/0.5.0/*.patch.gz; do git -C vllm apply <(gunzip -c $p); done\n"
    )
    run = invoke("import", str(root))
    assert run.exit_code == 2
    assert "compressed patches (patches/0.5.0/01-a.patch.gz, patches/0.5.0/02-b.patch.gz)" in run.stderr
    assert "Traceback" not in run.stderr and not (root / "lockfile.toml").exists()
