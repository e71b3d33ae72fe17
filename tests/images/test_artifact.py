"""``patchkit push`` / ``patchkit pull``: the signed bundle as an OCI artifact in Debian's docker-registry."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from patchkit.errors import Refused
from patchkit.oci.manifest import OCI_INDEX, OCI_MANIFEST
from patchkit.ship.artifact import (
    ATTESTATION_ARTIFACT,
    BUNDLE_ARTIFACT,
    BUNDLE_LAYER,
    EMPTY_MEDIA_TYPE,
    SIGNATURE_ARTIFACT,
    TITLE,
    _layer,
    _safe_name,
    artifact_manifest,
)
from tests.conftest import Invoke
from tests.images.conftest import RegistryServer

EMPTY_DIGEST = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"  # of b"{}"


@pytest.fixture
def signed(deploy: Path, invoke: Invoke, tmp_path: Path) -> dict[str, Path]:
    """A bundle of the deploy fixture, signed and attested with a key made by ssh-keygen; its allowed signers."""
    key = tmp_path / "keys" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@test", "-f", str(key)], check=True, timeout=60
    )
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'alice namespaces="patchkit" {key.with_suffix(".pub").read_text().strip()}\n')
    (deploy / "compose.yaml").write_text("services: {}\n")
    bundle = tmp_path / "dist" / "deploy.tar.gz"
    bundle.parent.mkdir()
    assert invoke("bundle", "-o", str(bundle), repo=deploy).exit_code == 0
    assert invoke("sign", "--key", str(key), str(bundle)).exit_code == 0
    assert invoke("attest", str(bundle), "--key", str(key)).exit_code == 0
    return {"bundle": bundle, "key": key, "allowed": allowed}


def push(invoke: Invoke, bundle: Path, ref: str) -> dict[str, Any]:
    r = invoke("push", str(bundle), ref, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def skopeo_raw(ref: str) -> bytes:
    return subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout


def test_artifact_manifest_is_an_image_spec_1_1_artifact() -> None:
    body = artifact_manifest("application/x-test", [], {"mediaType": OCI_MANIFEST, "digest": EMPTY_DIGEST, "size": 2})
    doc = json.loads(body)
    assert doc["mediaType"] == OCI_MANIFEST
    assert doc["artifactType"] == "application/x-test"
    assert doc["config"] == {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": 2}
    assert doc["subject"]["digest"] == EMPTY_DIGEST
    assert artifact_manifest("application/x-test", []) == artifact_manifest("application/x-test", [])


@pytest.mark.slow
def test_push_then_pull_verifies_and_writes_every_file(
    signed: dict[str, Path], registry_server: RegistryServer, invoke: Invoke, tmp_path: Path
) -> None:
    bundle = signed["bundle"]
    doc = push(invoke, bundle, f"{registry_server.host}/bundles/deploy:v1")
    assert doc["referrers_api"] is False  # distribution 2.8 has no referrers API: the tag schema is used
    ref = f"{registry_server.host}/bundles/deploy@{doc['digest']}"
    assert doc["reference"] == ref

    # skopeo reads what was written: the artifact manifest, and the referrers tag's index.
    raw = skopeo_raw(f"{registry_server.host}/bundles/deploy:v1")
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == doc["digest"]
    manifest = json.loads(raw)
    assert manifest["artifactType"] == BUNDLE_ARTIFACT
    assert [(x["annotations"]["org.opencontainers.image.title"], x["size"]) for x in manifest["layers"]] == [
        ("deploy.tar.gz", bundle.stat().st_size),
        ("SHA256SUMS", manifest["layers"][1]["size"]),
    ]
    tag = "sha256-" + doc["digest"].removeprefix("sha256:")
    index = json.loads(skopeo_raw(f"{registry_server.host}/bundles/deploy:{tag}"))
    assert index["mediaType"] == OCI_INDEX
    assert sorted((m["artifactType"], m["digest"]) for m in index["manifests"]) == sorted(
        [(SIGNATURE_ARTIFACT, doc["signature"]), (ATTESTATION_ARTIFACT, doc["attestation"])]
    )
    sig_manifest = json.loads(skopeo_raw(f"{registry_server.host}/bundles/deploy@{doc['signature']}"))
    assert sig_manifest["subject"]["digest"] == doc["digest"]

    out = tmp_path / "pulled"
    r = invoke("pull", ref, "-o", str(out), "--allowed-signers", str(signed["allowed"]))
    assert r.exit_code == 0, r.stderr
    assert "pull: verified, signed by alice" in r.stdout
    names = ["deploy.tar.gz", "deploy.tar.gz.intoto.jsonl", "deploy.tar.gz.sig", "SHA256SUMS"]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    for name in names[:3]:
        assert (out / name).read_bytes() == (bundle.parent / name).read_bytes(), name
    # The pulled files verify on their own, with patchkit and with OpenSSH.
    assert invoke("verify", "--allowed-signers", str(signed["allowed"]), str(out / "deploy.tar.gz")).exit_code == 0
    with (out / "deploy.tar.gz").open("rb") as f:
        ok = subprocess.run(
            ["ssh-keygen", "-Y", "verify", "-f", str(signed["allowed"]), "-I", "alice", "-n", "patchkit",
             "-s", str(out / "deploy.tar.gz.sig")],
            stdin=f, capture_output=True, timeout=60, check=False,
        )  # fmt: skip
    assert ok.returncode == 0, ok.stderr

    # Pushing again adds nothing to the referrers tag (same manifests, same digests).
    again = push(invoke, bundle, f"{registry_server.host}/bundles/deploy:v1")
    assert again == doc
    assert len(json.loads(skopeo_raw(f"{registry_server.host}/bundles/deploy:{tag}"))["manifests"]) == 2


@pytest.mark.slow
def test_a_corrupted_referrer_is_refused_and_nothing_is_written(
    signed: dict[str, Path], registry_server: RegistryServer, invoke: Invoke, tmp_path: Path
) -> None:
    doc = push(invoke, signed["bundle"], f"{registry_server.host}/bundles/corrupt:v1")
    sig_manifest = json.loads(skopeo_raw(f"{registry_server.host}/bundles/corrupt@{doc['signature']}"))
    blob = registry_server.blob_path(sig_manifest["layers"][0]["digest"])
    original = blob.read_bytes()
    blob.write_bytes(original.replace(b"SSH SIGNATURE", b"SSH SIGNATUR3"))
    out = tmp_path / "pulled"
    try:
        r = invoke(
            "pull", f"{registry_server.host}/bundles/corrupt@{doc['digest']}", "-o", str(out),
            "--allowed-signers", str(signed["allowed"]),
        )  # fmt: skip
    finally:
        blob.write_bytes(original)
    assert r.exit_code == 1, r.stdout + r.stderr
    assert f"blob {sig_manifest['layers'][0]['digest']}" in r.stderr and "refusing it" in r.stderr
    assert "nothing was written" in r.stderr
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".patchkit-pull-")] == []


@pytest.mark.slow
def test_a_signature_by_an_unknown_key_or_a_missing_one_is_refused(
    signed: dict[str, Path], registry_server: RegistryServer, invoke: Invoke, tmp_path: Path
) -> None:
    doc = push(invoke, signed["bundle"], f"{registry_server.host}/bundles/stranger:v1")
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=60)
    strangers = tmp_path / "strangers"
    strangers.write_text(f'alice namespaces="patchkit" {other.with_suffix(".pub").read_text().strip()}\n')
    out = tmp_path / "pulled"
    ref = f"{registry_server.host}/bundles/stranger@{doc['digest']}"
    r = invoke("pull", ref, "-o", str(out), "--allowed-signers", str(strangers))
    assert r.exit_code == 1
    assert "deploy.tar.gz: " in r.stderr and "nothing was written" in r.stderr
    assert not out.exists()

    # An unsigned bundle is not pushed; a tag is not pulled.
    signed["bundle"].with_name("deploy.tar.gz.sig").unlink()
    r = invoke("push", str(signed["bundle"]), f"{registry_server.host}/bundles/unsigned:v1")
    assert r.exit_code == 2 and "the bundle is not signed" in r.stderr
    r = invoke(
        "pull", f"{registry_server.host}/bundles/stranger:v1", "-o", str(out), "--allowed-signers", str(strangers)
    )
    assert r.exit_code == 2 and "pull takes REF@sha256:<digest>" in r.stderr


@pytest.mark.slow
def test_a_referrer_that_names_another_subject_is_refused(
    signed: dict[str, Path], registry_server: RegistryServer, invoke: Invoke, tmp_path: Path
) -> None:
    doc = push(invoke, signed["bundle"], f"{registry_server.host}/bundles/subject:v1")
    # A referrer whose subject is some other manifest is listed in the bundle's referrers tag.
    stray = artifact_manifest(
        SIGNATURE_ARTIFACT, [], {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "0" * 64, "size": 2}
    )
    tag = "sha256-" + doc["digest"].removeprefix("sha256:")
    index = json.loads(skopeo_raw(f"{registry_server.host}/bundles/subject:{tag}"))
    stray_digest = "sha256:" + hashlib.sha256(stray).hexdigest()
    registry_server.put_image(f"bundles/subject:{stray_digest}", stray, OCI_MANIFEST, [b"{}"])
    index["manifests"].append(
        {"mediaType": OCI_MANIFEST, "digest": stray_digest, "size": len(stray), "artifactType": SIGNATURE_ARTIFACT}
    )
    registry_server.put_image(f"bundles/subject:{tag}", json.dumps(index).encode(), OCI_INDEX, [])
    out = tmp_path / "pulled"
    r = invoke(
        "pull", f"{registry_server.host}/bundles/subject@{doc['digest']}", "-o", str(out),
        "--allowed-signers", str(signed["allowed"]),
    )  # fmt: skip
    assert r.exit_code == 1
    assert f"referrer {stray_digest}" in r.stderr and "its subject is not the bundle; refusing it" in r.stderr
    assert not out.exists()


@pytest.mark.slow
def test_a_strangers_signature_beside_the_real_one_does_not_block_the_pull(
    signed: dict[str, Path], registry_server: RegistryServer, invoke: Invoke, tmp_path: Path
) -> None:
    bundle = signed["bundle"]
    real_sig = bundle.with_name("deploy.tar.gz.sig").read_bytes()
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True, timeout=60)
    assert invoke("sign", "--key", str(stranger), str(bundle)).exit_code == 0
    first = push(invoke, bundle, f"{registry_server.host}/bundles/two-signers:v1")
    bundle.with_name("deploy.tar.gz.sig").write_bytes(real_sig)
    second = push(invoke, bundle, f"{registry_server.host}/bundles/two-signers:v1")
    assert first["digest"] == second["digest"] and first["signature"] != second["signature"]
    tag = "sha256-" + first["digest"].removeprefix("sha256:")
    index = json.loads(skopeo_raw(f"{registry_server.host}/bundles/two-signers:{tag}"))
    assert len(index["manifests"]) == 3  # both signatures and the attestation: the tag was merged, not replaced

    out = tmp_path / "pulled"
    ref = f"{registry_server.host}/bundles/two-signers@{first['digest']}"
    r = invoke("pull", ref, "-o", str(out), "--allowed-signers", str(signed["allowed"]))
    assert r.exit_code == 0, r.stderr
    assert (out / "deploy.tar.gz.sig").read_bytes() == real_sig  # the one an allowed signer made


@pytest.mark.parametrize("annotations", [["deploy.tar.gz"], "deploy.tar.gz", {TITLE: 7}, None])
def test_a_bundle_layer_without_a_title_string_is_refused(annotations: object) -> None:
    # A registry that serves what it likes (distribution itself refuses such a manifest) may send any JSON.
    layer = {"mediaType": BUNDLE_LAYER, "digest": EMPTY_DIGEST, "size": 2, "annotations": annotations}
    doc = json.loads(artifact_manifest(BUNDLE_ARTIFACT, [layer]))
    desc, title = _layer(doc, BUNDLE_LAYER, "reg/bundles@sha256:x")
    assert desc.size == 2
    with pytest.raises(Refused, match="is not a plain file name; refusing it"):
        _safe_name(title, "reg/bundles@sha256:x", (".tar.gz",))
