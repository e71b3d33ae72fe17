"""`patchkit sbom`: a CycloneDX 1.6 document the CycloneDX library's own strict validator accepts.

Checked as a compliance tool reads it: by purl and by pedigree, every patch's
diff byte for byte and every reference it resolves, not by our own model.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from tests.conftest import Invoke, copy_shipped, git, snapshot
from tests.series.conftest import queue  # noqa: F401  (the fixture)
from tests.series.queue import Queue


def _sbom(invoke: Invoke, root: Path, *args: str) -> dict[str, Any]:
    r = invoke("sbom", *args, repo=root)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(r.stdout) is None
    doc: dict[str, Any] = json.loads(r.stdout)
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    return doc


def _by_ref(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["bom-ref"]: c for c in doc["components"]}


def test_the_shipped_deployment_with_every_pin_and_every_patch_pedigree(invoke: Invoke, tmp_path: Path) -> None:
    root = copy_shipped(tmp_path / "shipped")
    lock = tomllib.loads((root / "lockfile.toml").read_text())
    doc = _sbom(invoke, root)
    comps = _by_ref(doc)

    for name, img in lock["images"].items():
        c = comps[f"image:{name}"]
        assert c["type"] == "container" and c["version"] == img["digest"]
        path = img["repository"] if "/" in img["repository"] else f"library/{img['repository']}"
        tag = f"&tag={img['tag']}" if "tag" in img else ""
        name = img["repository"].rsplit("/", 1)[-1]
        assert c["purl"] == f"pkg:oci/{name}@{img['digest']}?repository_url=docker.io/{path}{tag}"
    model = comps["model"]
    assert model["type"] == "machine-learning-model"
    org, name = lock["model"]["repo"].split("/")
    assert model["purl"] == f"pkg:huggingface/{org}/{name}@{lock['model']['revision']}"
    wheel = lock["upstreams"]["vllm-release"]
    release = comps["upstream:vllm-release"]
    assert release["purl"].startswith(f"pkg:pypi/vllm@{wheel['version']}")
    assert release["hashes"] == [{"alg": "SHA-256", "content": wheel["wheel_sha256"]}]
    assert comps["upstream:vllm"]["purl"] == f"pkg:github/vllm-project/vllm@{lock['upstreams']['vllm']['commit']}"

    for p in lock["patches"]:
        c = comps[f"patch:{p['name']}"]
        assert c["name"] == p["target"] and c["hashes"] == [{"alg": "SHA-256", "content": p["sha256"]}]
        pedigree = c.get("pedigree", {})
        if "base" in p:
            (ancestor,) = pedigree["ancestors"]
            assert ancestor["name"] == p["base"]["path"]
            assert ancestor["hashes"] == [{"alg": "SHA-256", "content": p["base"]["sha256"]}]
            assert ancestor["purl"].endswith("#" + p["base"]["path"])
        if "diff" in p:
            (patch,) = pedigree["patches"]
            assert patch["diff"]["text"]["content"] == (root / p["diff"]["file"]).read_text()
            assert patch["diff"]["text"]["contentType"] == "text/x-diff"
            assert [i["id"] for i in patch.get("resolves", [])] == p.get("refs", [])
        if p["kind"] == "transformer":
            assert pedigree["patches"][0]["type"] == "monkey"
        if p["kind"] == "module":
            assert "ancestors" not in pedigree
    for a in lock.get("artifacts", []) + lock.get("tuning", []):
        assert comps[f"file:{a['name']}"]["hashes"] == [{"alg": "SHA-256", "content": a["sha256"]}]
    # The deployment depends on every component.
    (root_dep,) = [d for d in doc["dependencies"] if d["ref"] == "deployment"]
    assert sorted(root_dep["dependsOn"]) == sorted(comps)


def test_a_merged_pull_request_makes_the_patch_a_backport(invoke: Invoke, deploy: Path) -> None:
    with (deploy / "lockfile.toml").open("a") as f:
        f.write('\n[refs."vllm-project/vllm#47291"]\nstate = "merged"\nkind = "pull"\n')
    assert invoke("lock", repo=deploy).exit_code == 0
    patch = _by_ref(_sbom(invoke, deploy))["patch:kv-restore-fence"]["pedigree"]["patches"][0]
    assert patch["type"] == "backport"
    resolves = {i["id"]: i for i in patch["resolves"]}
    assert set(resolves) == {"vllm-project/vllm#47282", "vllm-project/vllm#47291"}
    assert resolves["vllm-project/vllm#47291"]["references"] == ["https://github.com/vllm-project/vllm/issues/47291"]


def test_without_a_recorded_merge_the_patch_is_unofficial(invoke: Invoke, deploy: Path) -> None:
    patch = _by_ref(_sbom(invoke, deploy))["patch:kv-restore-fence"]["pedigree"]["patches"][0]
    assert patch["type"] == "unofficial"


def test_a_series_lists_its_patches_with_their_diffs_and_order(invoke: Invoke, queue: Queue) -> None:  # noqa: F811
    lock = tomllib.loads((queue.root / "lockfile.toml").read_text())
    comps = _by_ref(_sbom(invoke, queue.root))
    for name, s in lock["series"].items():
        c = comps[f"series:{name}"]
        pedigree = c["pedigree"]
        # CycloneDX keeps patches as a set: each diff once with its references; the order is in the notes.
        found = {
            p["diff"]["text"]["content"]: sorted(i["id"] for i in p.get("resolves", [])) for p in pedigree["patches"]
        }
        assert found == {(queue.root / sp["file"]).read_text(): sorted(sp.get("refs", [])) for sp in s["patches"]}
        steps = [f"{i}. {sp['name']} ({sp['file']})" for i, sp in enumerate(s["patches"], 1)]
        assert pedigree["notes"] == "applies in this order: " + "; ".join(steps)
        assert pedigree["ancestors"][0]["name"]


def test_the_same_lockfile_and_epoch_give_the_same_bytes(
    invoke: Invoke, deploy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764720000")
    first = invoke("sbom", repo=deploy).stdout
    assert first == invoke("sbom", repo=deploy).stdout
    doc = json.loads(first)
    assert doc["metadata"]["timestamp"] == "2025-12-03T00:00:00+00:00"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    r = invoke("sbom", repo=deploy)
    assert r.exit_code == 2 and "SOURCE_DATE_EPOCH='yesterday'" in r.stderr and "Traceback" not in r.stderr


def test_written_to_a_file_in_the_repository_and_nowhere_else(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    r = invoke("sbom", "-o", str(deploy / "sbom.cdx.json"), repo=deploy)
    assert r.exit_code == 0, r.stderr
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str((deploy / "sbom.cdx.json").read_text()) is None
    before = snapshot(deploy)
    for bad in (deploy / ".git" / "sbom.json", deploy / "lockfile.toml"):
        r = invoke("sbom", "-o", str(bad), repo=deploy)
        assert r.exit_code == 2 and "Traceback" not in r.stderr, r.stderr
    assert snapshot(deploy) == before


def test_a_diff_replaced_by_a_link_is_refused_not_followed(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    lock = tomllib.loads((deploy / "lockfile.toml").read_text())
    diff = deploy / next(p["diff"]["file"] for p in lock["patches"] if "diff" in p)
    secret = tmp_path / "secret"
    secret.write_text("not the diff\n")
    diff.unlink()
    diff.symlink_to(secret)
    r = invoke("sbom", repo=deploy)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "not the diff" not in r.stdout and len(r.stderr.strip().splitlines()) <= 2
    assert str(diff.relative_to(deploy)) in r.stderr


def test_outside_a_git_repository_too(invoke: Invoke, deploy: Path) -> None:
    git(deploy, "status")  # the fixture is a git repository; the SBOM does not need one
    import shutil

    shutil.rmtree(deploy / ".git")
    assert _sbom(invoke, deploy)["metadata"]["component"]["bom-ref"] == "deployment"
