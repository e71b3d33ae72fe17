"""Signing a deployment: check with [signing], verify of SHA256SUMS, lockfile and bundles, provenance."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT, Invoke

from patchkit.lockfile.reader import loads

from .conftest import KeyPair, keygen_verify, write_allowed


@pytest.fixture
def signed_deploy(deploy: Path, ed_key: KeyPair, invoke: Invoke, tmp_path: Path) -> tuple[Path, Path]:
    """The deploy fixture with a [signing] table trusting alice; (repo, alice's key)."""
    write_allowed(deploy / "allowed_signers", f'alice namespaces="patchkit" {ed_key.public_line}')
    with (deploy / "lockfile.toml").open("a") as f:
        f.write('\n[signing]\nallowed_signers = "allowed_signers"\nidentity = "alice"\n')
    assert invoke("lock", repo=deploy).exit_code == 0
    return deploy, ed_key.copy_to(tmp_path)


def test_check_requires_a_valid_signature_once_signing_is_configured(
    signed_deploy: tuple[Path, Path], invoke: Invoke
) -> None:
    repo, key = signed_deploy
    r = invoke("check", "--format", "json", repo=repo)
    assert r.exit_code == 1
    (finding,) = json.loads(r.stdout)["findings"]
    assert finding["code"] == "signature-missing"
    assert finding["file"] == "SHA256SUMS.sig"
    assert finding["fix"] == "patchkit sign --key KEY SHA256SUMS"

    r = invoke("sign", "--key", str(key), repo=repo)  # default files: those [signing] lists
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"wrote {repo / 'SHA256SUMS.sig'}\n"
    assert invoke("check", repo=repo).exit_code == 0
    assert keygen_verify(repo / "allowed_signers", "alice", repo / "SHA256SUMS")[0]

    (repo / "allowed_signers").write_text((repo / "allowed_signers").read_text().replace("alice", "bob"))
    r = invoke("check", repo=repo)
    assert r.exit_code == 1
    assert "SHA256SUMS.sig: error: SHA256SUMS: SHA256SUMS.sig: allowed signers line 1 allows this key for 'bob'" in (
        r.stdout
    )


def test_check_reports_a_missing_or_malformed_allowed_signers_file(
    signed_deploy: tuple[Path, Path], invoke: Invoke
) -> None:
    repo, _ = signed_deploy
    (repo / "allowed_signers").unlink()
    r = invoke("check", "--format", "json", repo=repo)
    codes = [f["code"] for f in json.loads(r.stdout)["findings"]]
    assert r.exit_code == 1 and codes == ["signers-missing"]
    (repo / "allowed_signers").write_text("alice valid-before=2020 ssh-ed25519 AAAA\n")
    r = invoke("check", "--format", "json", repo=repo)
    (finding,) = json.loads(r.stdout)["findings"]
    assert finding["code"] == "signers-invalid" and "allowed_signers:1: the key" in finding["message"]


def test_verify_checks_every_hash_the_signed_files_vouch_for(signed_deploy: tuple[Path, Path], invoke: Invoke) -> None:
    repo, key = signed_deploy
    sums, lock = repo / "SHA256SUMS", repo / "lockfile.toml"
    assert invoke("sign", "--key", str(key), str(sums), str(lock)).exit_code == 0
    r = invoke("verify", str(sums), str(lock), repo=repo)  # allowed signers and identity from [signing]
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "6 of 6 listed files match" in r.stdout and "5 of 5 pinned files match" in r.stdout

    # The signatures still hold, but a file they vouch for changed.
    (repo / "tuning" / "moe.csv").write_bytes(b"m,n,k,block\n1,7168,2048,128\n")
    r = invoke("verify", "--format", "json", str(sums), str(lock), repo=repo)
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert not doc["ok"]
    for result in doc["files"]:
        assert result["outcome"] == "failed" and result["signer"] == "alice"
        assert any(
            p.startswith("tuning/moe.csv: sha256 ") and "does not match the signed" in p for p in result["problems"]
        )


def test_verify_without_allowed_signers_says_how_to_give_them(
    deploy: Path, invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = invoke("verify", str(deploy / "SHA256SUMS"), repo=deploy)
    assert r.exit_code == 2
    assert "no --allowed-signers given and lockfile.toml has no [signing] table" in r.stderr
    monkeypatch.chdir(tmp_path)  # no lockfile here or above
    r = invoke("verify", str(deploy / "SHA256SUMS"))
    assert r.exit_code == 2 and "no --allowed-signers given, and no repository here" in r.stderr
    r = invoke("verify", "--allowed-signers", str(tmp_path / "none"), str(deploy / "SHA256SUMS"))
    assert r.exit_code == 2 and "allowed-signers file not found" in r.stderr


@pytest.fixture
def bundle(signed_deploy: tuple[Path, Path], invoke: Invoke, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(a signed and attested bundle of the deployment, the key, the allowed-signers file)."""
    repo, key = signed_deploy
    (repo / "compose.yaml").write_text("services: {}\n")
    out = tmp_path / "dist" / "deploy.tar.gz"
    out.parent.mkdir()  # bundle -o creates no directories
    assert invoke("bundle", "-o", str(out), repo=repo).exit_code == 0
    assert invoke("sign", "--key", str(key), str(out)).exit_code == 0
    r = invoke("attest", str(out), "--key", str(key))
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"wrote {out}.intoto.jsonl\n"
    return out, key, repo / "allowed_signers"


def test_bundle_signature_and_provenance_verify(bundle: tuple[Path, Path, Path], invoke: Invoke) -> None:
    out, key, allowed = bundle
    r = invoke("verify", "--allowed-signers", str(allowed), str(out))
    assert r.exit_code == 0, r.stdout
    assert "deploy.tar.gz.intoto.jsonl: provenance signed by alice, 8 files attested" in r.stdout
    assert "dependencies: upstreams.vllm" in r.stdout
    env = json.loads(Path(f"{out}.intoto.jsonl").read_text())
    assert env["payloadType"] == "application/vnd.in-toto+json"
    stmt = json.loads(base64.b64decode(env["payload"]))
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == "https://slsa.dev/provenance/v1"
    names = [s["name"] for s in stmt["subject"]]
    assert names[0] == "deploy.tar.gz" and "lockfile.toml" in names and "patches/gpu_worker.py" in names
    build = stmt["predicate"]["buildDefinition"]
    assert build["resolvedDependencies"] == [
        {
            "name": "upstreams.vllm",
            "uri": "git+https://github.com/vllm-project/vllm@124154a8843d1f8e4d4e2d5d466e2d3ebc3716da",
            "digest": {"gitCommit": "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"},
        }
    ]
    assert stmt["predicate"]["runDetails"]["builder"]["id"]
    # Attesting again gives the same bytes: no time stamps in the statement.
    before = Path(f"{out}.intoto.jsonl").read_bytes()
    assert invoke("attest", str(out), "--key", str(key)).exit_code == 0
    assert Path(f"{out}.intoto.jsonl").read_bytes() == before


def test_dsse_accepts_url_safe_base64_and_rejects_a_changed_statement(
    bundle: tuple[Path, Path, Path], invoke: Invoke
) -> None:
    out, _, allowed = bundle
    att = Path(f"{out}.intoto.jsonl")
    env = json.loads(att.read_text())
    for field in ("payload",):
        env[field] = base64.urlsafe_b64encode(base64.b64decode(env[field])).decode().rstrip("=")
    sig = env["signatures"][0]
    sig["sig"] = base64.urlsafe_b64encode(base64.b64decode(sig["sig"])).decode().rstrip("=")
    att.write_text(json.dumps(env) + "\n")
    assert invoke("verify", "--allowed-signers", str(allowed), str(out)).exit_code == 0

    stmt = json.loads(base64.urlsafe_b64decode(env["payload"] + "=" * (-len(env["payload"]) % 4)))
    stmt["subject"][1]["digest"]["sha256"] = "0" * 64
    env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    att.write_text(json.dumps(env) + "\n")
    r = invoke("verify", "--allowed-signers", str(allowed), str(out))
    assert r.exit_code == 1 and "does not match the statement" in r.stdout


def test_attestation_of_another_bundle_is_rejected(
    bundle: tuple[Path, Path, Path], signed_deploy: tuple[Path, Path], invoke: Invoke
) -> None:
    out, key, allowed = bundle
    repo, _ = signed_deploy
    old_attestation = Path(f"{out}.intoto.jsonl").read_bytes()
    (repo / "compose.yaml").write_text("services: {}\n# changed\n")
    assert invoke("bundle", "-o", str(out), repo=repo).exit_code == 0
    # The bundle itself is re-signed, so only the stale attestation is wrong.
    assert invoke("sign", "--key", str(key), str(out)).exit_code == 0
    Path(f"{out}.intoto.jsonl").write_bytes(old_attestation)
    r = invoke("verify", "--allowed-signers", str(allowed), str(out))
    assert r.exit_code == 1
    assert "no subject is this bundle" in r.stdout
    assert "compose.yaml: sha256 " in r.stdout and "differs from the attested" in r.stdout


def test_unsigned_changed_bundle_fails_on_its_signature_first(bundle: tuple[Path, Path, Path], invoke: Invoke) -> None:
    out, _, allowed = bundle
    out.write_bytes(out.read_bytes() + b"\0")
    r = invoke("verify", "--allowed-signers", str(allowed), str(out))
    assert r.exit_code == 1
    assert "signature does not match the file" in r.stdout and "provenance" not in r.stdout


def test_dependencies_name_every_pin_of_the_shipped_lockfile() -> None:
    from patchkit.signing.attest import dependencies

    lock = loads((REPO_ROOT / "lockfile.toml").read_text(), "lockfile.toml")
    deps = {d["name"]: d for d in dependencies(lock)}
    for img in lock.images:
        assert deps[f"images.{img.name}"]["digest"] == {"sha256": img.digest.hex}
        assert deps[f"images.{img.name}"]["uri"] == f"docker://{img.repository}@{img.digest}"
    assert lock.model is not None
    assert deps["model"]["digest"] == {"gitCommit": str(lock.model.revision)}
    assert {f"upstreams.{u.name}" for u in lock.upstreams} <= set(deps)
