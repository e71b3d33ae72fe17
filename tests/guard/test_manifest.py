"""guard.json: what ``patchkit emit`` writes for the runtime guard, and how check and bundle treat it."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from patchkit.lockfile.reader import loads
from tests.conftest import Invoke, copy_shipped

DIGEST = "sha256:" + "ab" * 32
REVISION = "7872f01b1d1fe23eabc4c98b48bffcef5a386062"
DEPLOY = """schema = 1
name = "demo"

[inference]
image = "vllm"
entrypoint = "entrypoint"
port = 8000
hf_cache_target = "/models"

[guard]
script = "guard"

[profiles.single]
[[profiles.single.replicas]]
service = "vllm"
publish = "127.0.0.1:8000"
"""


def small(deploy: Path, invoke: Invoke, deploy_toml: str = DEPLOY) -> Path:
    """The shared ``deploy`` fixture with an image, a model, the guard pinned and a deploy.toml with [guard]."""
    with (deploy / "lockfile.toml").open("a") as f:
        f.write(
            f'\n[images.vllm]\nrepository = "vllm/vllm-openai-rocm"\ndigest = "{DIGEST}"\nversion = "0.26.0"\n'
            f'\n[model]\nrepo = "org/model"\nrevision = "{REVISION}"\n'
        )
    guard = Path(__file__).resolve().parents[2] / "patchkit" / "guard" / "runtime.py"
    (deploy / "patches" / "guard.py").write_bytes(guard.read_bytes())
    r = invoke("add", str(deploy / "patches" / "guard.py"), "--name", "guard", "--kind", "module",
               "--target", "/opt/patchkit/guard.py", repo=deploy)  # fmt: skip
    assert r.exit_code == 0, r.stderr
    (deploy / "deploy.toml").write_text(deploy_toml)
    return deploy


def test_emit_writes_every_target_the_runtime_and_the_model(deploy: Path, invoke: Invoke) -> None:
    root = small(deploy, invoke)
    r = invoke("emit", repo=root)
    assert r.exit_code == 0, r.stderr
    assert "wrote guard.json" in r.stdout
    lock = loads((root / "lockfile.toml").read_text())
    doc = json.loads((root / "guard.json").read_text())
    expected = sorted(
        [{"name": p.name, "kind": p.kind.value, "target": str(p.target), "sha256": p.sha256.hex} for p in lock.patches]
        + [{"name": t.name, "kind": "tuning", "target": str(t.target), "sha256": t.sha256.hex} for t in lock.tuning]
        + [{"name": a.name, "kind": "artifact", "target": str(a.target), "sha256": a.sha256.hex}
           for a in lock.artifacts],
        key=lambda f: f["target"],
    )  # fmt: skip
    assert doc["files"] == expected
    assert {f["name"] for f in doc["files"]} == {"kv-restore-fence", "fp8_fnuz", "moe", "entrypoint", "guard"}
    for f in doc["files"]:  # every sha256 is the file's as committed
        source = next(p.file for p in (*lock.patches, *lock.tuning, *lock.artifacts) if p.name == f["name"])
        assert hashlib.sha256((root / str(source)).read_bytes()).hexdigest() == f["sha256"]
    assert doc["runtime"] == {"image": "vllm", "digest": DIGEST, "package": "vllm", "version": "0.26.0"}
    assert doc["model"] == {
        "repo": "org/model",
        "revision": REVISION,
        "path": f"/models/hub/models--org--model/snapshots/{REVISION}",
    }
    assert doc["schema"] == 1 and doc["deployment"] == "deploy"
    compose = (root / "compose.yaml").read_text()
    assert '      - "./guard.json:/opt/patchkit/guard.json:ro"\n' in compose
    assert '      "PATCHKIT_GUARD_SCRIPT": "/opt/patchkit/guard.py"\n' in compose
    assert '      "PATCHKIT_GUARD_MANIFEST": "/opt/patchkit/guard.json"\n' in compose
    # Byte-stable: a second emit changes nothing.
    before = (root / "guard.json").read_bytes()
    assert invoke("emit", repo=root).exit_code == 0
    assert (root / "guard.json").read_bytes() == before


def test_check_reports_a_hand_edited_or_stale_manifest(deploy: Path, invoke: Invoke) -> None:
    root = small(deploy, invoke)
    assert invoke("emit", repo=root).exit_code == 0
    assert invoke("check", repo=root).exit_code == 0
    (root / "tuning" / "moe.csv").write_bytes(b"m,n,k,block\n1,7168,2048,128\n")
    assert invoke("lock", repo=root).exit_code == 0  # the pin moves; guard.json still has the old hash
    r = invoke("check", repo=root)
    assert r.exit_code == 1
    assert "guard.json: error: differs from what patchkit emit writes" in r.stdout
    assert invoke("emit", repo=root).exit_code == 0
    assert invoke("check", repo=root).exit_code == 0


def test_a_guard_script_the_lockfile_does_not_pin_is_refused(deploy: Path, invoke: Invoke) -> None:
    root = small(deploy, invoke, DEPLOY.replace('script = "guard"', 'script = "no-such-guard"'))
    r = invoke("emit", repo=root)
    assert r.exit_code == 2
    assert "deploy.toml:11: guard.script: names 'no-such-guard', which lockfile.toml does not pin" in r.stderr
    assert not (root / "guard.json").exists() and not (root / "compose.yaml").exists()


def test_an_unknown_guard_field_is_refused(deploy: Path, invoke: Invoke) -> None:
    root = small(deploy, invoke, DEPLOY.replace('script = "guard"', 'script = "guard"\nmanifest = "x.json"'))
    r = invoke("emit", repo=root)
    assert r.exit_code == 2
    assert "guard.manifest" in r.stderr and "deploy.toml:12" in r.stderr


def test_without_a_guard_table_nothing_is_written(deploy: Path, invoke: Invoke) -> None:
    root = small(deploy, invoke, DEPLOY.replace('[guard]\nscript = "guard"\n', ""))
    assert invoke("emit", repo=root).exit_code == 0
    assert not (root / "guard.json").exists()
    assert "PATCHKIT_GUARD" not in (root / "compose.yaml").read_text()


def test_the_bundle_carries_the_manifest(deploy: Path, invoke: Invoke, tmp_path: Path) -> None:
    root = small(deploy, invoke)
    assert invoke("emit", repo=root).exit_code == 0
    out = tmp_path / "bundle.tar.gz"
    r = invoke("bundle", "-o", str(out), repo=root)
    assert r.exit_code == 0, r.stderr
    with tarfile.open(fileobj=io.BytesIO(out.read_bytes())) as tf:
        member = tf.extractfile("guard.json")
        assert member is not None
        assert member.read() == (root / "guard.json").read_bytes()


def test_the_shipped_manifest_is_what_emit_writes(tmp_path: Path, invoke: Invoke) -> None:
    root = copy_shipped(tmp_path / "shipped")
    r = invoke("emit", "--check", repo=root)
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads((root / "guard.json").read_text())
    assert doc["runtime"]["version"] == "0.26.1rc1.dev229+g124154a88.rocm723"
    assert "/opt/patchkit/guard.py" in {f["target"] for f in doc["files"]}


def test_guard_script_prints_the_shipped_guard(invoke: Invoke, tmp_path: Path) -> None:
    r = invoke("guard", "script")
    assert r.exit_code == 0
    shipped = (Path(__file__).resolve().parents[2] / "patchkit" / "guard" / "runtime.py").read_bytes()
    assert r.result.stdout_bytes == shipped


def test_check_notes_a_pinned_guard_that_is_not_the_shipped_one(deploy: Path, invoke: Invoke) -> None:
    root = small(deploy, invoke)
    assert invoke("emit", repo=root).exit_code == 0
    r = invoke("check", "--format", "json", repo=root)
    assert r.exit_code == 0 and "guard-outdated" not in r.stdout
    guard = root / "patches" / "guard.py"
    shipped = guard.read_bytes()
    guard.write_bytes(shipped.replace(b"MANIFEST_SCHEMA = 1\n", b"MANIFEST_SCHEMA = 1  # an older copy\n"))
    assert invoke("lock", repo=root).exit_code == 0
    assert invoke("emit", repo=root).exit_code == 0
    r = invoke("check", repo=root)
    assert r.exit_code == 0  # a note: the deployment runs what it pinned and reviewed
    import patchkit

    assert (
        f"patches/guard.py: note: the pinned runtime guard 'guard' is not the guard patchkit {patchkit.__version__} "
        "ships (an older copy, or edited here)\n"
        "  fix: take the shipped one and review the diff: patchkit guard script > patches/guard.py && patchkit lock "
        "&& patchkit emit\n"
    ) in r.stdout
    guard.write_bytes(shipped)
    assert invoke("lock", repo=root).exit_code == 0
    assert invoke("emit", repo=root).exit_code == 0
    assert "guard-outdated" not in invoke("check", "--format", "json", repo=root).stdout


def test_an_image_without_version_is_said_by_emit_and_check_not_dropped_silently(deploy: Path, invoke: Invoke) -> None:
    root = small(deploy, invoke)
    assert invoke("emit", repo=root).exit_code == 0
    assert invoke("check", repo=root).exit_code == 0
    lockfile = root / "lockfile.toml"
    lockfile.write_text(lockfile.read_text().replace('version = "0.26.0"\n', ""))  # a re-pin that lost it
    assert invoke("lock", repo=root).exit_code == 0
    r = invoke("check", repo=root)
    assert r.exit_code == 1  # guard.json still checks the version the lockfile no longer records
    assert "guard.json: error: differs from what patchkit emit writes" in r.stdout
    r = invoke("emit", repo=root)
    assert r.exit_code == 0, r.stderr
    assert "runtime" not in json.loads((root / "guard.json").read_text())
    fix = (
        'fix: add version = "…" to [images.vllm] in lockfile.toml, the runtime version in the image '
        "(patchkit image cat vllm …/vllm/_version.py prints it), then patchkit lock && patchkit emit"
    )
    assert (
        "note: images.vllm has no 'version', so guard.json has no runtime section: the guard will not compare "
        f"the container's vllm version with the pinned image's; {fix}\n"
    ) in r.stderr
    r = invoke("check", repo=root)
    assert r.exit_code == 0  # a note, not an error: the deployment may not know its runtime's version
    line = next(i for i, t in enumerate(lockfile.read_text().splitlines(), 1) if t == "[images.vllm]")
    where = f"lockfile.toml:{line}: note: images.vllm"
    assert f"{where}: has no 'version', so guard.json has no runtime section" in r.stdout
    assert f"  {fix}\n" in r.stdout
    doc = json.loads(invoke("check", "--format", "json", repo=root).stdout)
    assert [f["field"] for f in doc["findings"] if f["code"] == "guard-unversioned"] == ["images.vllm"]
    # Without [guard] there is no runtime check to miss: no note.
    (root / "deploy.toml").write_text(DEPLOY.replace('[guard]\nscript = "guard"\n', ""))
    r = invoke("emit", repo=root)
    assert r.exit_code == 0 and "note:" not in r.stderr
    assert "guard-unversioned" not in invoke("check", "--format", "json", repo=root).stdout
