"""Model signatures (OpenSSF model signing, OMS): patchkit and the `model_signing` tool accept each other's.

Keys and certificates are made by the real openssl; the other side of every
check is the OpenSSF's own `model_signing` command line, run as a user runs it.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Invoke

from .conftest import REPO_ID, Hub
from .test_model import FOLDER


def openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An EC key pair, a second unrelated key, and a CA that issued a code-signing certificate for the first."""
    d = tmp_path_factory.mktemp("pki")
    for name in ("key", "other", "ca"):
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.pem", cwd=d)
    openssl("ec", "-in", "key.pem", "-pubout", "-out", "pub.pem", cwd=d)
    openssl("ec", "-in", "other.pem", "-pubout", "-out", "other.pub.pem", cwd=d)
    openssl(
        "req", "-x509", "-new", "-key", "ca.pem", "-subj", "/CN=test CA", "-days", "30", "-out", "ca.crt",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d,
    )  # fmt: skip
    openssl("req", "-new", "-key", "key.pem", "-subj", "/CN=model signer", "-out", "leaf.csr", cwd=d)
    (d / "ext.cnf").write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\n"
    )
    openssl(
        "x509", "-req", "-in", "leaf.csr", "-CA", "ca.crt", "-CAkey", "ca.pem", "-CAcreateserial", "-days", "30",
        "-out", "leaf.crt", "-extfile", "ext.cnf", cwd=d,
    )  # fmt: skip
    return d


def model_signing(*args: str) -> subprocess.CompletedProcess[str]:
    """The OpenSSF `model_signing` command line, from the same environment."""
    return subprocess.run(
        [sys.executable, "-m", "model_signing", *args], capture_output=True, text=True, timeout=120, check=False
    )


def snapshot_of(hub: Hub, root: Path) -> Path:
    import tomllib

    revision = tomllib.loads((root / "lockfile.toml").read_text())["model"]["revision"]
    return hub.cache / FOLDER / "snapshots" / revision


def test_what_patchkit_signs_model_signing_verifies_and_the_reverse(
    hub: Hub,
    fetched: Path,
    invoke: Invoke,
    pki: Path,
) -> None:
    snap = snapshot_of(hub, fetched)
    r = invoke("model", "sign", "--key", str(pki / "key.pem"), repo=fetched)
    assert r.exit_code == 0, r.stdout + r.stderr
    sig = fetched / "model.sig"
    out = model_signing(
        "verify", "key", "--allow_symlinks", "--signature", str(sig), "--public_key", str(pki / "pub.pem"), str(snap)
    )
    assert out.returncode == 0 and "Verification succeeded" in out.stdout + out.stderr, out.stderr
    theirs = fetched.parent / "theirs.sig"
    out = model_signing(
        "sign", "key", "--allow_symlinks", "--signature", str(theirs), "--private_key", str(pki / "key.pem"), str(snap)
    )
    assert out.returncode == 0, out.stderr
    r = invoke("model", "verify-signature", str(theirs), "--public-key", str(pki / "pub.pem"), repo=fetched)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert f"verified over {REPO_ID}@" in r.stdout
    # Another key: refused.
    r = invoke("model", "verify-signature", str(theirs), "--public-key", str(pki / "other.pub.pem"), repo=fetched)
    assert r.exit_code == 1 and "does not verify" in r.stderr and "Traceback" not in r.stderr


def test_the_certificate_method_both_ways(hub: Hub, fetched: Path, invoke: Invoke, pki: Path) -> None:
    snap = snapshot_of(hub, fetched)
    args = ("--key", str(pki / "key.pem"), "--certificate", str(pki / "leaf.crt"), "--chain", str(pki / "ca.crt"))
    r = invoke("model", "sign", *args, "-o", str(fetched / "model.cert.sig"), repo=fetched)
    assert r.exit_code == 0, r.stdout + r.stderr
    sig = fetched / "model.cert.sig"
    out = model_signing(
        "verify", "certificate", "--allow_symlinks", "--signature", str(sig), "--certificate_chain",
        str(pki / "ca.crt"), str(snap),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    theirs = fetched.parent / "theirs.cert.sig"
    out = model_signing(
        "sign", "certificate", "--allow_symlinks", "--signature", str(theirs), "--private_key", str(pki / "key.pem"),
        "--signing_certificate", str(pki / "leaf.crt"), "--certificate_chain", str(pki / "ca.crt"), str(snap),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    r = invoke("model", "verify-signature", str(theirs), "--chain", str(pki / "ca.crt"), repo=fetched)
    assert r.exit_code == 0, r.stdout + r.stderr
    # A chain that did not issue the certificate: refused.
    r = invoke("model", "verify-signature", str(theirs), "--chain", str(pki / "leaf.crt"), repo=fetched)
    assert r.exit_code == 1 and "does not verify" in r.stderr


def test_a_tampered_file_is_refused(hub: Hub, fetched: Path, invoke: Invoke, pki: Path) -> None:
    assert invoke("model", "sign", "--key", str(pki / "key.pem"), repo=fetched).exit_code == 0
    snap = snapshot_of(hub, fetched)
    blob = (snap / "config.json").resolve()
    blob.chmod(0o644)
    blob.write_bytes(b'{"architectures": ["Evil"]}\n')
    r = invoke(
        "model", "verify-signature", str(fetched / "model.sig"), "--public-key", str(pki / "pub.pem"), repo=fetched
    )
    assert r.exit_code == 1 and "does not verify" in r.stderr and "Traceback" not in r.stderr
    # And patchkit refuses to sign a cache that is not the pinned revision.
    r = invoke("model", "sign", "--key", str(pki / "key.pem"), "-o", str(fetched / "again.sig"), repo=fetched)
    assert r.exit_code == 1 and "nothing was signed" in r.stderr
    assert not (fetched / "again.sig").exists()


def test_a_signature_of_other_files_is_not_one_of_the_pin(
    hub: Hub,
    fetched: Path,
    invoke: Invoke,
    pki: Path,
    tmp_path: Path,
) -> None:
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "config.json").write_text('{"architectures": ["Other"]}\n')
    sig = tmp_path / "other.sig"
    out = model_signing("sign", "key", "--signature", str(sig), "--private_key", str(pki / "key.pem"), str(other))
    assert out.returncode == 0, out.stderr
    r = invoke("model", "verify-signature", str(sig), "--public-key", str(pki / "pub.pem"), repo=fetched)
    assert r.exit_code == 1 and "not a signature of the pinned revision" in r.stderr
    assert "pinned, but the signature does not cover it" in r.stderr


def test_bad_inputs_are_one_clear_line(hub: Hub, fetched: Path, invoke: Invoke, pki: Path) -> None:
    garbage = str(fetched / "garbage.sig")
    (fetched / "garbage.sig").write_text("not json\n")
    pub, chain = ("--public-key", str(pki / "pub.pem")), ("--chain", str(pki / "ca.crt"))
    cases = [
        (("verify-signature", garbage, *pub), "not a model signature"),
        (("verify-signature", garbage), "give --public-key PEM"),
        (("verify-signature", garbage, *pub, *chain), "give --public-key PEM"),
        (("sign", "--key", str(pki / "leaf.crt")), "cannot sign with it"),
        (("sign", "--key", str(pki / "key.pem"), "-o", str(fetched / ".git" / "model.sig")), ".git"),
    ]
    for args, said in cases:
        r = invoke("model", *args, repo=fetched)
        assert r.exit_code == 2 and said in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def _mutations() -> list[tuple[str, Any]]:
    """The shapes the OMS v1.0 specification's invalid test vectors stand for, made from a real signature."""

    def drop(*path: str) -> Any:
        def edit(doc: dict[str, Any]) -> bytes:
            *parents, last = path
            for key in parents:
                doc = doc[key]
            del doc[last]
            return json.dumps(doc).encode()

        return edit

    def predicate(doc: dict[str, Any]) -> bytes:
        env = doc["dsseEnvelope"]
        statement = json.loads(base64.b64decode(env["payload"]))
        statement["predicateType"] = "https://example.com/wrong-predicate/v1.0"
        env["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
        return json.dumps(doc).encode()

    return [
        ("empty", lambda doc: b""),
        ("missing-envelope", drop("dsseEnvelope")),
        ("missing-tlog-entries", drop("verificationMaterial", "tlogEntries")),
        ("missing-verification-material", drop("verificationMaterial")),
        ("wrong-predicate", predicate),
    ]


def test_bundles_the_specification_calls_invalid_are_refused_before_any_file_is_read(
    hub: Hub, fetched: Path, invoke: Invoke, pki: Path
) -> None:
    assert invoke("model", "sign", "--key", str(pki / "key.pem"), repo=fetched).exit_code == 0
    good = json.loads((fetched / "model.sig").read_text())
    for name, edit in _mutations():
        bad = fetched / f"{name}.sig"
        bad.write_bytes(edit(json.loads(json.dumps(good))))
        r = invoke("model", "verify-signature", str(bad), "--public-key", str(pki / "pub.pem"), repo=fetched)
        assert r.exit_code == 2 and "not a model signature (OMS v1.0 bundle)" in r.stderr, (name, r.stderr)
        assert "Traceback" not in r.stderr
