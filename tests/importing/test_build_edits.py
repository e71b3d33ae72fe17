"""What an image build does to the installed packages besides copying files: each step read or reported.

Builds patch the installed vLLM in more ways than a ``COPY`` over
``site-packages``: ``sed -i`` (or ``perl -pi``) on a file, in a ``RUN`` line
or a here-document; a patch file copied in and applied with ``patch -p1 -d``
or ``git apply``, kept under ``patches/<upstream>/`` or elsewhere; a patcher
script copied with ``--chmod`` and run. Each is read into the lockfile (a
series, a transformer) or reported at its line: an in-place edit nothing
checks is ``build-edit-unanchored`` (``grep -q OLD f && sed -i …`` is
checked); a patch file outside ``patches/<upstream>/`` is pinned as a file
and ``queue-upstream-unknown``. Nothing is dropped, and nothing false is said.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.importing.shell import BuildReader
from patchkit.lockfile.reader import loads
from tests.conftest import Invoke
from tests.importing.conftest import write

SITE = "/usr/local/lib/python3.12/site-packages"
DIGEST = "sha256:" + "7b" * 32
COMMIT = "3a1e5c7b9d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c"
PATCH = "--- a/vllm/envs.py\n+++ b/vllm/envs.py\n@@ -1,2 +1,2 @@\n-A = 1\n+A = 2\n B = 1\n"
PATCHER = (
    "from pathlib import Path\n\nimport vllm\n\n"
    "p = Path(vllm.__file__).parent / 'v1' / 'core' / 'sched' / 'scheduler.py'\n"
    "src = p.read_text()\ni = src.index('budget = 1\\n')\np.write_text(src[:i] + 'budget = 2\\n' + src[i + 11 :])\n"
)
DOCKERFILE = f"""\
# syntax=docker/dockerfile:1
ARG BASE=rocm/vllm:v0.11.0@{DIGEST}

FROM python:3.12-slim@{DIGEST} AS stage
ADD --chmod=644 overlay/ /staging/

FROM ${{BASE}}
ENV SITE={SITE}
COPY --from=stage /staging/vllm/ $SITE/vllm/
RUN sed -i 's/block_size = 16/block_size = 64/' $SITE/vllm/config/cache.py
RUN grep -q 'x = 1' $SITE/vllm/envs.py && sed -i 's/x = 1/x = 2/' $SITE/vllm/envs.py
RUN <<EOF
set -eu
perl -pi -e 's/^MAX = 8$/MAX = 16/' $SITE/vllm/model_executor/layers/fused_moe/config.py
sed -i.bak 's/a/b/' /etc/vllm.conf
EOF
COPY patches/vllm/0001-envs.patch /tmp/patches/
RUN patch -p1 -d $SITE < /tmp/patches/0001-envs.patch
COPY docker/hotfix/ /tmp/hotfix/
RUN cd $SITE && git apply -p1 /tmp/hotfix/sampler.diff
COPY --chmod=755 docker/patchers/budget.py /opt/patchers/
RUN python3 /opt/patchers/budget.py
ADD https://github.com/vllm-project/vllm/pull/123.patch /tmp/pr.patch
RUN cd $SITE && patch -p1 < /tmp/pr.patch
RUN python3 - <<'PY'
import vllm, pathlib
p = pathlib.Path(vllm.__file__).parent / "envs.py"
s = p.read_text()
assert "C = 1" in s, "anchor moved"
p.write_text(s.replace("C = 1", "C = 2"))
PY
RUN python3 -c "import vllm,pathlib; p=pathlib.Path(vllm.__file__).parent/'config.py'; \
    s=p.read_text(); p.write_text(s.replace('D = 1', 'D = 2'))"
"""


def _repo(root: Path) -> Path:
    write(root, "overlay/vllm/v1/new_helper.py", "def helper():\n    return 1\n")
    write(root, "patches/vllm/0001-envs.patch", PATCH)
    write(root, "docker/hotfix/sampler.diff", PATCH.replace("envs", "v1/sample/sampler"))
    write(root, "docker/patchers/budget.py", PATCHER)
    write(root, "docker/Dockerfile", DOCKERFILE)
    write(root, "upstream.lock", f"VLLM_REPO=https://github.com/vllm-project/vllm\nVLLM_COMMIT={COMMIT}\n")
    write(root, "README.md", "| File | Upstream |\n| --- | --- |\n| `new_helper.py` | new module |\n")
    return root


def test_each_way_a_build_patches_the_installed_package_is_read_or_reported(tmp_path: Path, invoke: Invoke) -> None:
    root = _repo(tmp_path / "deploy")
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = json.loads(run.stdout)["import"]["issues"]
    assert sorted((i["kind"], i["file"], i["line"]) for i in issues if i["kind"] != "sums-missing") == [
        ("build-edit-unanchored", "docker/Dockerfile", 10),  # sed -i, unchecked
        ("build-edit-unanchored", "docker/Dockerfile", 14),  # perl -pi in the here-document
        ("build-edit-unanchored", "docker/Dockerfile", 32),  # python3 -c, unchecked (the here-document checks)
        ("build-step-unknown", "docker/Dockerfile", 24),  # a patch ADD fetched at build time
        ("queue-upstream-unknown", "docker/Dockerfile", 20),  # git apply of a diff outside patches/<upstream>/
    ]
    fetched = next(i["message"] for i in issues if i["kind"] == "build-step-unknown")
    assert fetched.endswith(
        "patch applies /tmp/pr.patch, which is no file of the repository: "
        "ADD fetches it from https://github.com/vllm-project/vllm/pull/123.patch at build time"
    )
    edits = {i["line"]: i["message"] for i in issues if i["kind"] == "build-edit-unanchored"}
    assert edits[10].startswith("sed -i edits vllm/config/cache.py in the image in place, unchecked")
    assert edits[14].startswith("perl -i edits vllm/model_executor/layers/fused_moe/config.py in the image")
    lock = loads((root / "lockfile.toml").read_text())
    assert [(str(i.repository), i.name) for i in lock.images] == [("rocm/vllm", "base"), ("python", "stage")]
    assert [(u.name, getattr(u, "git", None), str(getattr(u, "commit", ""))) for u in lock.upstreams] == [
        ("vllm", "https://github.com/vllm-project/vllm", COMMIT)
    ]
    assert {(p.name, p.kind.value, str(p.target), p.reason) for p in lock.patches} == {
        ("new-helper", "module", f"{SITE}/vllm/v1/new_helper.py", None),
        (
            "budget",
            "transformer",
            "/opt/patchers/budget.py",
            "replaces anchored text in vllm/v1/core/sched/scheduler.py; run by docker/Dockerfile:22",
        ),
    }
    (series,) = lock.series
    assert (series.name, str(series.commit), str(series.target), series.strip) == ("vllm", COMMIT, SITE, 1)
    assert [str(p.file) for p in series.patches] == ["patches/vllm/0001-envs.patch"]
    assert sorted(str(a.file) for a in lock.artifacts) == [
        "docker/Dockerfile",
        "docker/hotfix/sampler.diff",
        "upstream.lock",
    ]
    written = (root / "lockfile.toml").read_text()
    again = invoke("import", str(root))  # importing again is a no-op: the lockfile is not read as a lock
    assert (again.exit_code, (root / "lockfile.toml").read_text()) == (0, written), again.stdout + again.stderr
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    found = sorted((f["code"], f["file"], f["line"]) for f in json.loads(check.stdout)["findings"])
    # Every import problem again, at the same line, and the series' own notes (not applied offline; no verified
    # image recorded yet); nothing false.
    assert found == [
        ("base-unrecorded", "lockfile.toml", 41),
        ("build-edit-unanchored", "docker/Dockerfile", 10),
        ("build-edit-unanchored", "docker/Dockerfile", 14),
        ("build-edit-unanchored", "docker/Dockerfile", 32),
        ("build-step-unknown", "docker/Dockerfile", 24),
        ("queue-upstream-unknown", "docker/Dockerfile", 20),
        ("series-not-applied", "lockfile.toml", None),
    ]


F = f"{SITE}/vllm/config/cache.py"
G = f"{SITE}/vllm/envs.py"
EDITS = {
    "sed-i": (f"sed -i 's/a/b/' {F}", ["vllm/config/cache.py"]),
    "sed-i-suffix-e": (f"sed -i.bak -e 's/a/b/' {F}", ["vllm/config/cache.py"]),
    "sed-in-place-two-files": (
        f"sed --in-place=.orig -e s/a/b/ -e s/c/d/ {F} {G}",
        ["vllm/config/cache.py", "vllm/envs.py"],
    ),
    "sed-bundled": (f"sed -Ei 's/a+/b/' {F}", ["vllm/config/cache.py"]),
    "sed-script-file": (f"sed -i -f /tmp/fix.sed {F}", ["vllm/config/cache.py"]),
    "perl-pi": (f"perl -pi -e 's/a/b/' {F}", ["vllm/config/cache.py"]),
    "perl-i-pe": (f"perl -i -pe 's/a/b/' {F}", ["vllm/config/cache.py"]),
    "relative-after-cd": (f"cd {SITE}/vllm && sed -i 's/a/b/' config/cache.py", ["vllm/config/cache.py"]),
    "grep-of-another-file": (f"grep -q a {G} && sed -i 's/a/b/' {F}", ["vllm/config/cache.py"]),
    "no-in-place": (f"sed 's/a/b/' {F} > /tmp/cache.py", []),
    "print-only": (f"sed -n '/a/p' {F}", []),
    "not-a-package": ("sed -i 's/a/b/' /etc/vllm.conf", []),
    "grep-checked": (f"grep -q 'a' {F} && sed -i 's/a/b/' {F}", []),
    "grep-fixed-pattern-e": (f"grep -qF -e 'a = 1' {F} && sed -i 's/a = 1/a = 2/' {F}", []),
}


@pytest.mark.parametrize("form", sorted(EDITS))
def test_an_in_place_edit_of_an_installed_file_is_read_from_its_command(tmp_path: Path, form: str) -> None:
    command, want = EDITS[form]
    write(tmp_path, "Dockerfile", f"FROM rocm/vllm@{DIGEST}\nRUN {command}\n")
    reading = BuildReader(tmp_path).read(["Dockerfile"], [])
    assert [(e.file, e.line, e.upstream) for e in reading.edits] == [("Dockerfile", 2, w) for w in want]


def test_an_edit_in_a_script_the_build_runs_is_at_the_scripts_line(tmp_path: Path) -> None:
    write(tmp_path, "docker/fix.sh", f"#!/bin/sh\nset -eu\nSITE={SITE}\nsed -i 's/a/b/' \"$SITE/vllm/envs.py\"\n")
    write(tmp_path, "Dockerfile", f"FROM rocm/vllm@{DIGEST}\nCOPY docker/fix.sh /tmp/\nRUN sh /tmp/fix.sh\n")
    reading = BuildReader(tmp_path).read(["Dockerfile"], ["docker/fix.sh"])
    assert [(e.file, e.line, e.tool, e.upstream) for e in reading.edits] == [
        ("docker/fix.sh", 4, "sed -i", "vllm/envs.py")
    ]


STAGED = {
    "directory-of-the-stage": ("COPY patches/ /p/\n", "COPY --from=patches /p/vllm/ /tmp/patches/\n"),
    "by-index": ("COPY patches/ /p/\n", "COPY --from=0 /p/vllm/ /tmp/patches/\n"),
    "files-one-by-one": (
        "COPY patches/vllm/0001-a.patch patches/vllm/0002-b.patch /p/\n",
        "COPY --from=patches /p/ /tmp/patches/\n",
    ),
    "one-file": (
        "COPY patches/vllm/ /p/\n",
        "COPY --from=patches /p/0001-a.patch /tmp/patches/\nCOPY --from=patches /p/0002-b.patch /tmp/patches/\n",
    ),
}


@pytest.mark.parametrize("form", sorted(STAGED))
def test_patch_files_a_later_stage_copies_from_an_earlier_one_are_the_repositorys(tmp_path: Path, form: str) -> None:
    stage, final = STAGED[form]
    for n in ("0001-a", "0002-b"):
        write(tmp_path, f"patches/vllm/{n}.patch", PATCH)
    write(
        tmp_path,
        "Containerfile",
        f"FROM alpine:3@{DIGEST} AS patches\n{stage}FROM rocm/vllm@{DIGEST}\n{final}"
        'RUN cd /src/vllm && for p in /tmp/patches/*.patch; do git apply -p1 "$p"; done\n',
    )
    reading = BuildReader(tmp_path).read(["Containerfile"], [])
    assert [(a.repo, a.tool, a.strip) for a in reading.applies] == [
        ("patches/vllm/0001-a.patch", "git apply", 1),
        ("patches/vllm/0002-b.patch", "git apply", 1),
    ]
    assert reading.unknowns == []


def test_a_copy_from_another_image_holds_no_file_of_the_repository(tmp_path: Path) -> None:
    write(tmp_path, "patches/vllm/0001-a.patch", PATCH)
    write(
        tmp_path,
        "Containerfile",
        f"FROM rocm/vllm@{DIGEST}\nCOPY --from=ghcr.io/o/patches:1 /p/ /tmp/patches/\n"
        "RUN cd /src/vllm && git apply /tmp/patches/0001-a.patch\n",
    )
    reading = BuildReader(tmp_path).read(["Containerfile"], [])
    assert [u.reason for u in reading.unknowns] == [
        "git apply applies /tmp/patches/0001-a.patch, which is no file of the repository: "
        "no COPY of a repository file put it there"
    ]


PLACED = f"""\
FROM rocm/vllm:v0.11.0@{DIGEST}
ENV SITE={SITE}
COPY patches/ /tmp/patches/
RUN cp /tmp/patches/sampler.py $SITE/vllm/v1/sample/sampler.py
RUN install -m 644 /tmp/patches/envs.py $SITE/vllm/
RUN cd /tmp/patches && cp -t $SITE/vllm/v1/core/sched scheduler.py interface.py
RUN cp /tmp/patches/rope.py $SITE/vllm/model_executor/layers
RUN cp /tmp/patches/notes.md /opt/notes.md
"""


def test_files_a_run_step_copies_into_the_package_are_overlays_the_build_delivers(
    tmp_path: Path, invoke: Invoke
) -> None:
    """``RUN cp``/``install`` after a ``COPY`` to a staging directory delivers overlays as a ``COPY`` does:
    not "not-mounted", and ``check`` finds each one copied while the line stays."""
    root = tmp_path / "deploy"
    for name in ("sampler.py", "envs.py", "scheduler.py", "interface.py", "rope.py", "notes.md"):
        write(root, f"patches/{name}", f"# {name}\n")
    write(root, "Dockerfile", PLACED)
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    kinds = {i["kind"] for i in json.loads(run.stdout)["import"]["issues"]}
    assert kinds == {"no-diff", "kind-unknown", "base-unknown", "sums-missing"}  # no not-mounted
    lock = loads((root / "lockfile.toml").read_text())
    assert sorted((str(p.file), str(p.target), str(p.build)) for p in lock.patches) == [
        ("patches/envs.py", f"{SITE}/vllm/envs.py", "Dockerfile"),
        ("patches/interface.py", f"{SITE}/vllm/v1/core/sched/interface.py", "Dockerfile"),
        ("patches/rope.py", f"{SITE}/vllm/model_executor/layers/rope.py", "Dockerfile"),
        ("patches/sampler.py", f"{SITE}/vllm/v1/sample/sampler.py", "Dockerfile"),
        ("patches/scheduler.py", f"{SITE}/vllm/v1/core/sched/scheduler.py", "Dockerfile"),
    ]
    assert invoke("sums", repo=root).exit_code == 0

    def codes() -> set[tuple[str, int | None]]:
        check = invoke("check", "--format", "json", repo=root)
        return {(f["code"], f["line"]) for f in json.loads(check.stdout)["findings"] if f["code"].startswith("build")}

    assert codes() == set()
    (root / "Dockerfile").write_text(PLACED.replace("RUN install -m 644 /tmp/patches/envs.py $SITE/vllm/\n", ""))
    assert invoke("lock", repo=root).exit_code == 0
    assert invoke("sums", repo=root).exit_code == 0
    assert [c for c, _ in codes()] == ["build-not-copied"]


def test_a_patch_queue_build_reports_its_in_place_edits_once(tmp_path: Path, invoke: Invoke) -> None:
    """A repository with no compose file and no overlay copied in is read as a patch queue; its sed -i too."""
    root = tmp_path / "queue"
    for n in ("0001-a", "0002-b"):
        write(root, f"patches/vllm/{n}.patch", PATCH)
    write(root, "upstream.lock", f"VLLM_REPO=https://github.com/vllm-project/vllm\nVLLM_COMMIT={COMMIT}\n")
    write(
        root,
        "Containerfile",
        f"FROM rocm/vllm@{DIGEST}\nCOPY patches/vllm/ /tmp/patches/\n"
        f'RUN cd {SITE} && for p in /tmp/patches/*.patch; do patch -p1 < "$p"; done\n'
        f"RUN sed -i 's/x/y/' {SITE}/vllm/envs.py\n",
    )
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = json.loads(run.stdout)["import"]["issues"]
    assert [(i["kind"], i["file"], i["line"]) for i in issues if i["kind"].startswith("build")] == [
        ("build-edit-unanchored", "Containerfile", 4)
    ]
    (series,) = loads((root / "lockfile.toml").read_text()).series
    assert [p.name for p in series.patches] == ["0001-a", "0002-b"]


OVERLAY = ("__init__.py", "config.py", "v1/sample/sampler.py", "v1/new_helper.py")
TREES = {
    "cp-r-dot": "RUN cp -r /tmp/overlay/vllm/. $SITE/vllm/",
    "cp-a-dot": "RUN cp -a /tmp/overlay/vllm/. $SITE/vllm",
    "cp-R-star": "RUN cp -R /tmp/overlay/vllm/* $SITE/vllm/",
    "cp-r-into-site-packages": "RUN cp -r /tmp/overlay/vllm $SITE/",
    "cp-r-target-directory": "RUN cp -r -t $SITE /tmp/overlay/vllm",
    "rsync-a-slash": "RUN rsync -a /tmp/overlay/vllm/ $SITE/vllm/",
    "rsync-a-no-slash": "RUN rsync -a --exclude '*.pyc' /tmp/overlay/vllm $SITE/",
    "cd-then-relative": "RUN cd /tmp/overlay && cp -r vllm/. $SITE/vllm/",
    "workdir-relative": "WORKDIR /tmp\nRUN cp -r overlay/vllm/. $SITE/vllm/",
    "bind-mounted": "RUN --mount=type=bind,source=overlay,target=/mnt/overlay cp -r /mnt/overlay/vllm/. $SITE/vllm/",
}


@pytest.mark.parametrize("form", sorted(TREES))
def test_a_staged_directory_copied_whole_into_the_package_delivers_each_file_once(
    tmp_path: Path, invoke: Invoke, form: str
) -> None:
    """``cp -r``/``-a``/``-R`` and ``rsync -a`` of a directory a ``COPY`` staged: every file of it is an overlay
    (or module) the build delivers, at its path under the package, once; none is "not-mounted"."""
    root = tmp_path / "deploy"
    for name in OVERLAY:
        write(root, f"overlay/vllm/{name}", f"# {name}\n")
    write(
        root,
        "Dockerfile",
        f"FROM rocm/vllm:v0.11.0@{DIGEST}\nENV SITE={SITE}\nCOPY overlay/ /tmp/overlay/\n{TREES[form]}\n",
    )
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = json.loads(run.stdout)["import"]["issues"]
    assert not [i for i in issues if i["kind"] in ("not-mounted", "build-step-unknown")], issues
    lock = loads((root / "lockfile.toml").read_text())
    assert sorted((str(p.file), str(p.target)) for p in lock.patches) == sorted(
        (f"overlay/vllm/{name}", f"{SITE}/vllm/{name}") for name in OVERLAY
    )
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    codes = {f["code"] for f in json.loads(check.stdout)["findings"]}
    assert not codes & {"build-not-copied", "not-mounted", "build-step-unknown"}, codes


def test_a_directory_copied_to_a_path_that_may_not_exist_is_unknown(tmp_path: Path, invoke: Invoke) -> None:
    """``cp -r SRC …/vllm`` puts SRC's files in ``…/vllm/vllm/`` when the base image has vLLM, else in
    ``…/vllm/``: which one is not told by the files, and said so at the line; nothing is recorded there."""
    root = tmp_path / "deploy"
    write(root, "overlay/vllm/config.py", "# config\n")
    write(
        root,
        "Dockerfile",
        f"FROM rocm/vllm:v0.11.0@{DIGEST}\nCOPY overlay/ /tmp/overlay/\nRUN cp -r /tmp/overlay/vllm {SITE}/vllm\n",
    )
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    unknown = [i for i in json.loads(run.stdout)["import"]["issues"] if i["kind"] == "build-step-unknown"]
    assert [(i["file"], i["line"]) for i in unknown] == [("Dockerfile", 3)]
    assert f"write cp /tmp/overlay/vllm/. {SITE}/vllm/" in unknown[0]["fix"]
    assert loads((root / "lockfile.toml").read_text()).patches == ()
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    notes = [f for f in json.loads(check.stdout)["findings"] if f["code"] == "build-step-unknown"]
    assert [(f["file"], f["line"], f["severity"]) for f in notes] == [("Dockerfile", 3, "note")]


def test_a_copy_of_the_images_own_files_or_of_a_variable_into_the_package(tmp_path: Path) -> None:
    """A cp of files no COPY staged (a virtualenv's packages) holds no repository file and is not reported; a cp
    whose source is a variable with no value is unknown."""
    from patchkit.importing import dockerfile

    text = (
        f"FROM rocm/vllm:v0.11.0@{DIGEST}\nCOPY overlay/ /tmp/overlay/\n"
        f"RUN cp -a /opt/venv/lib/python3.12/site-packages/. {SITE}/\n"
        f"RUN cp -r $OVERLAY/. {SITE}/vllm/\n"
    )
    write(tmp_path, "overlay/vllm/config.py", "# config\n")
    write(tmp_path, "Dockerfile", text)
    build = dockerfile.read(tmp_path, "Dockerfile", text)
    assert [c.target for c in build.copied] == ["/tmp/overlay/vllm/config.py"]
    assert [(k, line) for k, line, _, _ in build.problems] == [("build-step-unknown", 4)]
