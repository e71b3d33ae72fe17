"""Pins a compose file passes to the image build as ``build.args``, read by ``import`` and ``check``.

Deployments that build their image from compose often leave the pins out of
the Dockerfile (``ARG VLLM_COMMIT`` with no default) and write them in the
compose file's ``build.args``, in either form compose accepts (a mapping or a
``KEY=VALUE`` list), through YAML anchors, with ``${VAR:-default}``; and
the ``build:`` may name no Dockerfile, its context holding a Containerfile.
The pin must come out exactly, stated at the compose line that writes it,
whether the build copies an overlay tree or applies a patch queue.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.conftest import Invoke
from tests.importing import dockerbuilt as d

REPO = "https://github.com/vllm-project/vllm"
OVERLAY = "overlay/vllm/v1/sample/sampler.py"

ARGS = {
    "mapping": f"      args:\n        VLLM_COMMIT: {d.VLLM_COMMIT}\n        VLLM_REPO: {REPO}\n",
    "list": f"      args:\n        - VLLM_COMMIT={d.VLLM_COMMIT}\n        - VLLM_REPO={REPO}\n",
    "quoted-list": f'      args: ["VLLM_COMMIT={d.VLLM_COMMIT}", "VLLM_REPO={REPO}"]\n',
    "defaults": f"      args:\n        VLLM_COMMIT: ${{VLLM_COMMIT:-{d.VLLM_COMMIT}}}\n"
    f"        VLLM_REPO: ${{VLLM_REPO:-{REPO}}}\n",
    "anchor": "      args:\n        <<: *pins\n",
}
ANCHOR = f"x-pins: &pins\n  VLLM_COMMIT: {d.VLLM_COMMIT}\n  VLLM_REPO: {REPO}\n\n"


def _compose(form: str, build: str = "      context: ..\n      dockerfile: docker/Dockerfile\n") -> str:
    head = ANCHOR if form == "anchor" else ""
    return head + "services:\n  vllm:\n    build:\n" + build + ARGS[form]


def _overlay_repo(root: Path, form: str, dockerfile: str = "docker/Dockerfile", **kw: str) -> Path:
    d.write(root, OVERLAY, d.FILES[OVERLAY])
    d.write(
        root,
        dockerfile,
        f"FROM rocm/vllm@{d.BASE_DIGEST}\nARG VLLM_COMMIT\nARG VLLM_REPO\n"
        f"COPY {OVERLAY} {d.SITE}/vllm/v1/sample/sampler.py\n",
    )
    d.write(root, "docker/compose.yaml", _compose(form, **kw))
    return root


def _run(root: Path, invoke: Invoke) -> tuple[dict[str, object], list[dict[str, object]], dict[str, object]]:
    run = invoke("import", "--format", "json", str(root))
    assert run.exit_code == 0, run.stdout + run.stderr
    assert invoke("sums", repo=root).exit_code == 0
    check = invoke("check", "--format", "json", repo=root)
    lock = tomllib.loads((root / "lockfile.toml").read_text())
    return lock, json.loads(run.stdout)["import"]["issues"], json.loads(check.stdout)["findings"]


def _pin_codes(items: list[dict[str, object]], key: str) -> list[object]:
    return [i for i in items if str(i[key]).startswith(("pin-", "queue-commit", "queue-url", "build-missing"))]


@pytest.mark.parametrize("form", sorted(ARGS))
def test_a_pin_compose_passes_as_a_build_argument_is_the_overlays_base(
    tmp_path: Path, invoke: Invoke, form: str
) -> None:
    root = _overlay_repo(tmp_path / "repo", form)
    lock, issues, findings = _run(root, invoke)
    commit_line = d.line_of(root, "docker/compose.yaml", "VLLM_COMMIT")
    repo_line = d.line_of(root, "docker/compose.yaml", "VLLM_REPO")
    if form == "quoted-list":
        commit_line = repo_line = d.line_of(root, "docker/compose.yaml", "args:")
    vllm = lock["upstreams"]["vllm"]  # type: ignore[index]
    assert (vllm["git"], vllm["commit"]) == (REPO, d.VLLM_COMMIT)
    where = [f"docker/compose.yaml:{commit_line}", f"docker/compose.yaml:{repo_line}"]
    assert vllm["note"] == f"imported: commit from {where[0]}; git from {where[1]}"
    (patch,) = lock["patches"]  # type: ignore[misc]
    stated_in = list(dict.fromkeys(where))
    assert patch["origin"] == {"repository": "vllm-project/vllm", "commit": d.VLLM_COMMIT, "stated_in": stated_in}
    assert _pin_codes(issues, "kind") == [] and _pin_codes(findings, "code") == []


def test_a_build_argument_given_no_value_leaves_the_dockerfiles_default(tmp_path: Path, invoke: Invoke) -> None:
    """``KEY:`` passes the variable from the environment when set; import takes it as not set, as compose's own
    variables: the Dockerfile's default holds, stated where the Dockerfile writes it."""
    root = _overlay_repo(tmp_path / "repo", "mapping")
    compose = root / "docker/compose.yaml"
    compose.write_text(compose.read_text().replace(f"VLLM_COMMIT: {d.VLLM_COMMIT}", "VLLM_COMMIT:"))
    df = root / "docker/Dockerfile"
    df.write_text(df.read_text().replace("ARG VLLM_COMMIT\n", f"ARG VLLM_COMMIT={d.RELEASE_COMMIT}\n"))
    lock, issues, findings = _run(root, invoke)
    vllm = lock["upstreams"]["vllm"]  # type: ignore[index]
    assert vllm["commit"] == d.RELEASE_COMMIT
    assert vllm["note"].startswith("imported: commit from docker/Dockerfile:2;")
    assert _pin_codes(issues, "kind") == [] and _pin_codes(findings, "code") == []


def test_a_build_argument_overrides_the_dockerfiles_default(tmp_path: Path, invoke: Invoke) -> None:
    root = _overlay_repo(tmp_path / "repo", "list")
    df = root / "docker/Dockerfile"
    df.write_text(df.read_text().replace("ARG VLLM_COMMIT\n", f"ARG VLLM_COMMIT={d.RELEASE_COMMIT}\n"))
    lock, issues, findings = _run(root, invoke)
    assert lock["upstreams"]["vllm"]["commit"] == d.VLLM_COMMIT  # type: ignore[index]
    assert _pin_codes(issues, "kind") == [] and _pin_codes(findings, "code") == []


@pytest.mark.parametrize("form", ["mapping", "list"])
def test_a_build_naming_no_dockerfile_builds_the_contexts_containerfile(
    tmp_path: Path, invoke: Invoke, form: str
) -> None:
    root = _overlay_repo(tmp_path / "repo", form, dockerfile="Containerfile", build="      context: ..\n")
    lock, issues, findings = _run(root, invoke)
    (patch,) = lock["patches"]  # type: ignore[misc]
    assert (patch["build"], patch["origin"]["commit"]) == ("Containerfile", d.VLLM_COMMIT)
    assert _pin_codes(issues, "kind") == [] and _pin_codes(findings, "code") == []
    # With neither file, the compose build is reported as it names the Dockerfile docker would look for.
    (root / "Containerfile").unlink()
    check = invoke("check", "--format", "json", repo=root)
    missing = [f for f in json.loads(check.stdout)["findings"] if f["code"] == "build-missing"]
    assert [(f["file"], f["message"]) for f in missing] == [
        ("docker/compose.yaml", "services.vllm.build names Dockerfile, which is not a file of the repository")
    ]


QUEUE_PATCH = "From: a <a@b>\nSubject: [PATCH] fix\n\n---\n--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n"


@pytest.mark.parametrize("form", ["mapping", "list", "anchor"])
def test_a_patch_queue_whose_commit_compose_passes_is_pinned_at_it(tmp_path: Path, invoke: Invoke, form: str) -> None:
    root = tmp_path / "queue"
    d.write(root, "patches/vllm/0001-fix.patch", QUEUE_PATCH)
    d.write(
        root,
        "Containerfile",
        f"FROM rocm/vllm@{d.BASE_DIGEST}\nARG VLLM_COMMIT\n"
        f"RUN git clone {REPO} /opt/vllm && git -C /opt/vllm checkout ${{VLLM_COMMIT}}\n"
        "COPY patches /patches\nRUN cd /opt/vllm && git apply /patches/vllm/0001-fix.patch\n",
    )
    d.write(root, "compose.yaml", _compose(form, build="      context: .\n").replace("        - VLLM_REPO", "#"))
    lock, issues, findings = _run(root, invoke)
    assert lock["series"]["vllm"]["commit"] == d.VLLM_COMMIT  # type: ignore[index]
    assert (lock["upstreams"]["vllm"]["git"], lock["upstreams"]["vllm"]["commit"]) == (REPO, d.VLLM_COMMIT)  # type: ignore[index]
    assert _pin_codes(issues, "kind") == [], issues
    assert [f for f in findings if f["severity"] == "error"] == [], findings


def test_a_build_argument_compose_takes_from_its_env_file_is_stated_there(tmp_path: Path, invoke: Invoke) -> None:
    """``VLLM_COMMIT: ${VLLM_COMMIT}`` with the value in the compose project's ``.env``: the Dockerfile's default is
    overridden (by a value only ``.env`` states), so the pin is ``.env``'s, never the default's."""
    root = _overlay_repo(tmp_path / "repo", "mapping")
    compose = root / "docker/compose.yaml"
    compose.write_text(compose.read_text().replace(f"VLLM_COMMIT: {d.VLLM_COMMIT}", "VLLM_COMMIT: ${VLLM_COMMIT}"))
    df = root / "docker/Dockerfile"
    df.write_text(df.read_text().replace("ARG VLLM_COMMIT\n", f"ARG VLLM_COMMIT={d.RELEASE_COMMIT}\n"))
    d.write(root, "docker/.env", f"VLLM_COMMIT={d.VLLM_COMMIT}\n")
    lock, issues, findings = _run(root, invoke)
    vllm = lock["upstreams"]["vllm"]  # type: ignore[index]
    assert vllm["commit"] == d.VLLM_COMMIT and vllm["note"].startswith("imported: commit from docker/.env:1;")
    assert _pin_codes(issues, "kind") == [] and _pin_codes(findings, "code") == []
