"""Keys: patchkit keygen, loading keys ssh-keygen made, passphrases, permissions, key types."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from conftest import Invoke

from .conftest import PASSPHRASE, KeyPair, keygen_verify, ssh_keygen, write_allowed


def test_keygen_writes_a_private_key_only_its_owner_reads_and_a_working_pair(
    tmp_path: Path, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PATCHKIT_KEY_PASSPHRASE", raising=False)
    key = tmp_path / "keys" / "signer"
    r = invoke("keygen", "-f", str(key), "--comment", "ci@deploy", "--principal", "release")
    assert r.exit_code == 0, r.stderr
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    public = key.with_name("signer.pub").read_text()
    assert public.startswith("ssh-ed25519 AAAA") and public.endswith(" ci@deploy\n")
    # ssh-keygen reads the private key and derives the same public key.
    derived = ssh_keygen("-y", "-f", str(key))
    assert derived.returncode == 0, derived.stderr
    assert derived.stdout.decode().split()[:2] == public.split()[:2]
    line = r.stdout.splitlines()[-1]
    assert line == f'release namespaces="patchkit" {public.strip()}'
    fp = ssh_keygen("-l", "-f", str(key.with_name("signer.pub"))).stdout.decode().split()[1]
    assert f"key fingerprint: {fp}" in r.stdout
    # The printed line, used as-is, lets ssh-keygen verify what the new key signs.
    msg = tmp_path / "SHA256SUMS"
    msg.write_bytes(b"x\n")
    assert invoke("sign", "--key", str(key), str(msg)).exit_code == 0
    assert keygen_verify(write_allowed(tmp_path / "allowed", line), "release", msg)[0]


def test_keygen_refuses_to_overwrite(tmp_path: Path, invoke: Invoke) -> None:
    key = tmp_path / "k"
    key.with_name("k.pub").write_text("keep me\n")
    r = invoke("keygen", "-f", str(key))
    assert r.exit_code == 2
    assert f"{key}.pub: already exists; refusing to overwrite a key" in r.stderr
    assert not key.exists()
    assert key.with_name("k.pub").read_text() == "keep me\n"


def test_keygen_with_passphrase_from_the_environment(
    tmp_path: Path, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATCHKIT_KEY_PASSPHRASE", PASSPHRASE)
    key = tmp_path / "k"
    assert invoke("keygen", "-f", str(key)).exit_code == 0
    assert ssh_keygen("-y", "-P", "", "-f", str(key)).returncode != 0  # really encrypted
    assert ssh_keygen("-y", "-P", PASSPHRASE, "-f", str(key)).returncode == 0


def test_encrypted_key_signs_with_the_passphrase_from_the_environment(
    tmp_path: Path, encrypted_key: KeyPair, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = encrypted_key.copy_to(tmp_path)
    msg = tmp_path / "lockfile.toml"
    msg.write_bytes(b"schema = 1\n")
    monkeypatch.delenv("PATCHKIT_KEY_PASSPHRASE", raising=False)
    r = invoke("sign", "--key", str(key), str(msg))
    assert r.exit_code == 2
    assert "the key is encrypted and no passphrase was given" in r.stderr
    assert "set PATCHKIT_KEY_PASSPHRASE" in r.stderr
    monkeypatch.setenv("PATCHKIT_KEY_PASSPHRASE", "wrong")
    r = invoke("sign", "--key", str(key), str(msg))
    assert r.exit_code == 2 and f"{key}: wrong passphrase" in r.stderr
    assert not msg.with_name("lockfile.toml.sig").exists()
    monkeypatch.setenv("PATCHKIT_KEY_PASSPHRASE", PASSPHRASE)
    monkeypatch.setenv("PATCHKIT_SIGNING_KEY", str(key))  # --key from the environment, as CI sets it
    assert invoke("sign", str(msg)).exit_code == 0
    allowed = write_allowed(tmp_path / "allowed", f"alice {encrypted_key.public_line}")
    assert keygen_verify(allowed, "alice", msg)[0]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_private_key_readable_by_others_is_refused(tmp_path: Path, ed_key: KeyPair, invoke: Invoke, mode: int) -> None:
    key = ed_key.copy_to(tmp_path)
    key.chmod(mode)
    msg = tmp_path / "f"
    msg.write_bytes(b"x")
    r = invoke("sign", "--key", str(key), str(msg))
    assert r.exit_code == 2
    assert f"{key}: private key permissions {mode:04o} are too open" in r.stderr
    assert f"fix: chmod 600 {key}" in r.stderr
    assert not msg.with_name("f.sig").exists()


def test_rsa_key_is_refused_for_signing(tmp_path: Path, rsa_key: KeyPair, invoke: Invoke) -> None:
    msg = tmp_path / "f"
    msg.write_bytes(b"x")
    r = invoke("sign", "--key", str(rsa_key.copy_to(tmp_path)), str(msg))
    assert r.exit_code == 2
    assert "an RSA key; patchkit signs with Ed25519 keys only" in r.stderr
    assert "patchkit keygen" in r.stderr


def test_a_file_that_is_not_a_key_is_refused(tmp_path: Path, invoke: Invoke) -> None:
    bogus = tmp_path / "key"
    bogus.write_text("ssh-ed25519 AAAA… this is a public key\n")
    bogus.chmod(0o600)
    msg = tmp_path / "f"
    msg.write_bytes(b"x")
    r = invoke("sign", "--key", str(bogus), str(msg))
    assert r.exit_code == 2 and f"{bogus}: not an OpenSSH private key" in r.stderr
    r = invoke("sign", "--key", str(tmp_path / "nope"), str(msg))
    assert r.exit_code == 2 and "no such key file" in r.stderr
