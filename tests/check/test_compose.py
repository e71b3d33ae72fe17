"""check's compose rules over a state in memory: emitted files match emit, hand-kept mounts are pinned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.check import compose
from patchkit.core.values import LOCKFILE_NAME
from tests.conftest import Invoke

from .memory import overlay_repo, sha, state_of

ROOT = Path(__file__).resolve().parents[2]


def shipped() -> dict[str, bytes]:
    """This repository's own deployment files that emit reads and writes."""
    names = (LOCKFILE_NAME, "deploy.toml", "compose.yaml", "compose.tp1x2.yaml", "guard.json")
    return {n: (ROOT / n).read_bytes() for n in names}


def test_the_shipped_compose_files_are_what_emit_writes() -> None:
    files = shipped()
    text = files[LOCKFILE_NAME].decode()
    assert compose.emitted(state_of(text, files)) == []
    files["compose.yaml"] += b"# edited\n"
    [f] = compose.emitted(state_of(text, files))
    assert (f.code, f.file) == ("compose-drift", "compose.yaml")
    files["compose.yaml"] = (ROOT / "compose.yaml").read_bytes()
    files["guard.json"] = files["guard.json"].replace(b'"schema": 1', b'"schema": 1, "x": 1')
    [f] = compose.emitted(state_of(text, files))
    assert (f.code, f.file) == ("compose-drift", "guard.json")
    files["deploy.toml"] = b"schema = 2\n"
    [f] = compose.emitted(state_of(text, files))
    assert (f.code, f.file) == ("compose-unchecked", "deploy.toml")


def test_a_deploy_toml_without_profiles_has_no_compose_file_but_must_still_name_its_image() -> None:
    """What ``image build`` alone reads (no [profiles]): nothing to emit or drift; a broken one is reported."""
    files = shipped()
    text = files[LOCKFILE_NAME].decode()
    files["deploy.toml"] = b'schema = 1\n[inference]\nimage = "vllm"\n'
    assert compose.emitted(state_of(text, files)) == []
    files["deploy.toml"] = b"schema = 1\n[inference]\n"
    [f] = compose.emitted(state_of(text, files))
    assert (f.code, f.file) == ("compose-unchecked", "deploy.toml")
    assert "missing required field 'image'" in f.message and f.fix == "deploy.toml's fields: docs/deploy.md"


def test_hand_kept_compose_mounts() -> None:
    doc = (
        b"services:\n  vllm:\n    image: vllm/vllm-openai@sha256:" + b"0" * 64 + b"\n    volumes:\n"
        b"      - ./patches/mod.py:/elsewhere/mod.py:ro\n"
        b"      - ./tuning/t.csv:/t.csv:ro\n"
        b"      - ./gone.txt:/gone.txt:ro\n"
        b"      - ./cache/x:/x:ro\n"
    )
    extra = f'\n[[artifacts]]\nname = "compose"\nfile = "compose.yaml"\nsha256 = "{sha(doc)}"\n'
    text, files = overlay_repo(extra=extra, files=[("compose.yaml", doc), ("tuning/t.csv", b"t")])
    found = compose.mounts(state_of(text, files, ignored={"cache/x": ".gitignore:1"}))
    assert [(f.code, f.line, f.severity) for f in found] == [
        ("mount-target", 5, "error"),
        ("mount-unpinned", 6, "error"),
        ("mount-missing", 7, "error"),
        ("mount-ignored", 8, "note"),
    ]
    assert found[0].message.endswith("but the lockfile pins it for /usr/lib/python3/dist-packages/pkg/mod.py")
    # A deploy.toml that only names the base (init's starter, no [profiles]) emits nothing: the mounts are checked.
    starter = [*files.items(), ("deploy.toml", b'schema = 1\n[inference]\nimage = "vllm"\n')]
    assert compose.mounts(state_of(text, dict(starter), ignored={"cache/x": ".gitignore:1"})) == found


PINNED = "a1" * 20
OTHER = "b2" * 20
HUB = "/root/.cache/huggingface/hub"
MODEL_CODES = {"model-unpinned", "model-conflict"}


def _model_repo(root: Path, sidecar_model: str) -> Path:
    """A hand-kept compose deployment serving org/served at a full commit, and a sidecar serving ``sidecar_model``."""
    root.mkdir(parents=True)
    (root / "compose.yaml").write_text(
        "services:\n  vllm:\n"
        f"    image: vllm/vllm-openai@sha256:{'ab' * 32}\n"
        f"    command: --model {HUB}/models--org--served/snapshots/{PINNED}\n"
        f"  sidecar:\n    image: busybox@sha256:{'cd' * 32}\n"
        f"    command: --model {HUB}/{sidecar_model}\n"
    )
    return root


def _models(root: Path, invoke: Invoke, command: str) -> tuple[int, list[tuple[str, str, str, int | None]]]:
    run = invoke(*command.split(), "--format", "json", repo=root)
    doc = json.loads(run.stdout)
    found = doc["import"]["issues"] if command.startswith("import") else doc["findings"]
    key = "kind" if command.startswith("import") else "code"
    return run.exit_code, [(f[key], f["severity"], f["file"], f["line"]) for f in found if f[key] in MODEL_CODES]


@pytest.mark.parametrize(
    ("sidecar", "code"),
    [
        ("models--org--other/snapshots/main", "model-unpinned"),
        (f"models--org--other/snapshots/{OTHER}", "model-conflict"),
    ],
)
def test_a_compose_service_serving_an_unpinned_or_other_model_fails_check_until_it_serves_the_pinned_one(
    tmp_path: Path, invoke: Invoke, sidecar: str, code: str
) -> None:
    root = _model_repo(tmp_path / "deploy", sidecar)
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    said = [(i["kind"], i["severity"], i["file"], i["line"]) for i in json.loads(run.stdout)["import"]["issues"]]
    said = [s for s in said if s[0] in MODEL_CODES]
    assert said == [(code, "error", "compose.yaml", 7)]
    assert invoke("sums", repo=root).exit_code == 0
    assert _models(root, invoke, "check") == (1, said)
    text = (root / "compose.yaml").read_text().replace(sidecar, f"models--org--served/snapshots/{PINNED}")
    (root / "compose.yaml").write_text(text)
    assert invoke("lock", repo=root).exit_code == 0
    assert _models(root, invoke, "check")[1] == []


def test_a_provenance_row_naming_a_file_nothing_delivers_fails_check_until_the_table_is_fixed(
    tmp_path: Path, invoke: Invoke
) -> None:
    root = tmp_path / "deploy"
    (root / "patches").mkdir(parents=True)
    (root / "patches/fix.py").write_text("a = 2\n")
    (root / "compose.yaml").write_text(
        f"services:\n  vllm:\n    image: vllm/vllm-openai@sha256:{'ab' * 32}\n    volumes:\n"
        "      - ./patches/fix.py:/usr/local/lib/python3.12/dist-packages/vllm/fix.py:ro\n"
    )
    table = (
        "# Patches\n\n| File | Upstream | Notes |\n| --- | --- | --- |\n| `fix.py` | vllm-project/vllm | new module |\n"
    )
    (root / "patches/README.md").write_text(table + "| `ghost.py` | vllm-project/vllm | new module |\n")
    run = invoke("import", str(root), "--format", "json")
    assert run.exit_code == 0, run.stdout + run.stderr
    issues = json.loads(run.stdout)["import"]["issues"]
    said = [(i["kind"], i["severity"], i["file"], i["line"]) for i in issues if i["kind"] == "provenance-unmatched"]
    assert said == [("provenance-unmatched", "error", "patches/README.md", 6)]
    assert invoke("sums", repo=root).exit_code == 0

    def checked() -> tuple[int, list[tuple[str, str, str, int | None]]]:
        run = invoke("check", "--format", "json", repo=root)
        found = json.loads(run.stdout)["findings"]
        return run.exit_code, [
            (f["code"], f["severity"], f["file"], f["line"]) for f in found if f["code"] == said[0][0]
        ]

    assert checked() == (1, said)
    (root / "patches/README.md").write_text(table)
    assert invoke("lock", repo=root).exit_code == 0
    assert checked()[1] == []
