"""check's compose rules over a state in memory: emitted files match emit, hand-kept mounts are pinned."""

from __future__ import annotations

from pathlib import Path

from patchkit.check import compose
from patchkit.core.values import LOCKFILE_NAME

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
