"""The GitHub Action, the workflows and the Renovate config patchkit ships, against their published schemas.

The schemas are check-jsonschema's vendored copies (``vendor.github-actions``,
``vendor.github-workflows``, ``vendor.renovate``), run through its command line;
a broken copy of each file must fail, so the validation is known to bite. The
action's check step is run for real with bash, as the runner runs it; the
Renovate regex manager is applied to the lockfile patchkit writes, the digest
replaced as Renovate replaces it, and its post-upgrade commands make ``check``
pass again.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import OVERLAY, REPO_ROOT, Invoke, copy_shipped

ACTION = REPO_ROOT / "action.yml"
WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.yml"))
RENOVATE = REPO_ROOT / "docs" / "examples" / "renovate.json"
NEW_DIGEST = "sha256:" + "5e" * 32


def validate(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, *map(str, files)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def test_the_action_validates_against_the_github_actions_schema(tmp_path: Path) -> None:
    r = validate("vendor.github-actions", ACTION)
    assert r.returncode == 0, r.stdout + r.stderr
    broken = tmp_path / "action.yml"
    doc = yaml.safe_load(ACTION.read_text())
    del doc["runs"]["steps"][1]["shell"]  # a composite run step needs its shell
    broken.write_text(yaml.safe_dump(doc))
    assert validate("vendor.github-actions", broken).returncode == 1


def test_the_workflows_validate_against_the_github_workflows_schema(tmp_path: Path) -> None:
    assert {w.name for w in WORKFLOWS} == {"check.yml", "bump-nightly.yml"}
    r = validate("vendor.github-workflows", *WORKFLOWS)
    assert r.returncode == 0, r.stdout + r.stderr
    broken = tmp_path / "bump.yml"
    broken.write_text((REPO_ROOT / ".github/workflows/bump-nightly.yml").read_text().replace("runs-on:", "run-on:"))
    assert validate("vendor.github-workflows", broken).returncode == 1


def test_no_input_is_spliced_into_a_shell_script() -> None:
    """Inputs reach run scripts through env only (a value with quotes or $() cannot become code)."""
    for path in (ACTION, *WORKFLOWS):
        doc = yaml.safe_load(path.read_text())
        steps = doc["runs"]["steps"] if "runs" in doc else [s for j in doc["jobs"].values() for s in j["steps"]]
        for step in steps:
            assert "${{" not in step.get("run", ""), (path.name, step.get("name"))


def run_step(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A composite action's bash step, as the runner runs it (``bash -e``)."""
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def test_the_action_runs_check_with_github_annotations(deploy: Path, tmp_path: Path) -> None:
    doc = yaml.safe_load(ACTION.read_text())
    (step,) = [s for s in doc["runs"]["steps"] if s.get("id") == "check"]
    venv = tmp_path / "runner" / "patchkit-venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "patchkit").symlink_to(Path(sys.executable).parent / "patchkit")
    output = tmp_path / "github_output"
    (deploy / "patches" / "gpu_worker.py").write_bytes(OVERLAY + b"# edited\n")
    env = {**os.environ, "RUNNER_TEMP": str(tmp_path / "runner"), "GITHUB_OUTPUT": str(output), "PATCHKIT_ARGS": ""}
    r = run_step(step["run"], deploy, env)
    assert r.returncode == 1
    assert output.read_text() == "status=1\n"
    lines = r.stdout.splitlines()
    assert any(line.startswith("::error file=lockfile.toml,line=") and "kv-restore-fence" in line for line in lines)
    (deploy / "patches" / "gpu_worker.py").write_bytes(OVERLAY)
    r = run_step(step["run"], deploy, env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert output.read_text() == "status=1\nstatus=0\n"


def test_the_bump_workflow_opens_a_pull_request_with_the_summary() -> None:
    doc = yaml.safe_load((REPO_ROOT / ".github/workflows/bump-nightly.yml").read_text())
    assert doc[True]["schedule"] == [{"cron": "17 5 * * *"}]  # YAML 1.1 reads the key `on` as True
    steps = {s.get("name"): s for s in doc["jobs"]["bump"]["steps"]}
    bump = steps["Bump"]["run"]
    assert 'patchkit bump --image "$IMAGE" --summary "$RUNNER_TEMP/summary.md"' in bump
    assert ".venv/bin/patchkit emit" in bump and ".venv/bin/patchkit check" in bump
    assert '--body-file "$RUNNER_TEMP/summary.md"' in steps["Open the pull request"]["run"]
    assert doc["permissions"] == {"contents": "write", "pull-requests": "write"}


def test_the_renovate_config_validates_against_renovates_schema(tmp_path: Path) -> None:
    r = validate("vendor.renovate", RENOVATE)
    assert r.returncode == 0, r.stdout + r.stderr
    broken = tmp_path / "renovate.json"
    doc = json.loads(RENOVATE.read_text())
    doc["customManagers"][0]["customType"] = "regexp"  # regex or jsonata only
    broken.write_text(json.dumps(doc))
    assert validate("vendor.renovate", broken).returncode == 1


def _renovate_regex() -> re.Pattern[str]:
    (manager,) = json.loads(RENOVATE.read_text())["customManagers"]
    (pattern,) = manager["matchStrings"]
    return re.compile(pattern.replace("(?<", "(?P<"))  # JavaScript named groups, as Renovate writes them


def test_a_renovate_digest_update_then_its_post_upgrade_tasks_pass_check(tmp_path: Path, invoke: Invoke) -> None:
    root = copy_shipped(tmp_path / "shipped")
    lock = root / "lockfile.toml"
    assert invoke("lock", repo=root).exit_code == 0
    assert invoke("emit", repo=root).exit_code == 0
    assert invoke("check", repo=root).exit_code == 0
    canonical = lock.read_text()
    found = {m["depName"]: (m["currentValue"], m["currentDigest"]) for m in _renovate_regex().finditer(canonical)}
    assert found == {
        "caddy": ("2", "sha256:5f5c8640aae01df9654968d946d8f1a56c497f1dd5c5cda4cf95ab7c14d58648"),
        "vllm/vllm-openai-rocm": (None, "sha256:e68d18b2ba50298661bfc49baf01158fbf036645c2362cccf3e8a7a79fe6c69a"),
    }
    # The vLLM image is left to `patchkit bump`, which rebases its overlays; Renovate takes the rest.
    (rule,) = json.loads(RENOVATE.read_text())["packageRules"]
    assert rule["matchPackageNames"] == ["vllm/vllm-openai-rocm"] and rule["enabled"] is False
    # Renovate's edit: the digest replaced inside the matched text, nothing else.
    match = next(m for m in _renovate_regex().finditer(canonical) if m["depName"] == "caddy")
    old = match[0]
    lock.write_text(canonical.replace(old, old.replace(match["currentDigest"], NEW_DIGEST)))
    r = invoke("check", repo=root)
    assert r.exit_code == 1  # SHA256SUMS and compose now lag behind the lockfile
    assert "compose.yaml: error: differs from what patchkit emit writes" in r.stdout
    for command in json.loads(RENOVATE.read_text())["postUpgradeTasks"]["commands"]:
        assert invoke(*command.split()[1:], repo=root).exit_code == 0, command
    r = invoke("check", repo=root)
    assert r.exit_code == 0, r.stdout
    assert f'image: "caddy@{NEW_DIGEST}"' in (root / "compose.yaml").read_text()


@pytest.mark.parametrize("path", ["action.yml", ".github/workflows/check.yml", ".github/workflows/bump-nightly.yml"])
def test_the_files_are_documented(path: str) -> None:
    assert path in (REPO_ROOT / "docs" / "daily.md").read_text()
