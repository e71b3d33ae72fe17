"""SSH signatures both ways with the real ssh-keygen, and every rejection the issue names."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Invoke

from patchkit.signing import sshsig

from .conftest import KeyPair, keygen_sign, keygen_verify, write_allowed

MESSAGE = b"3f1c  patches/gpu_worker.py\n" + os.urandom(64).hex().encode() + b"\n"


@pytest.fixture
def signed(tmp_path: Path, ed_key: KeyPair, invoke: Invoke) -> tuple[Path, Path, Path]:
    """(message, its .sig made by `patchkit sign`, an allowed-signers file trusting alice)."""
    key = ed_key.copy_to(tmp_path)
    msg = tmp_path / "SHA256SUMS.txt"
    msg.write_bytes(MESSAGE)
    r = invoke("sign", "--key", str(key), str(msg))
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"wrote {msg}.sig\n"
    allowed = write_allowed(tmp_path / "allowed_signers", f'alice namespaces="patchkit" {ed_key.public_line}')
    return msg, msg.with_name(msg.name + ".sig"), allowed


def _verify(invoke: Invoke, allowed: Path, *files: Path, identity: str | None = None) -> tuple[int, str]:
    args = ["verify", "--allowed-signers", str(allowed), *map(str, files)]
    if identity is not None:
        args += ["-I", identity]
    r = invoke(*args)
    return r.exit_code, r.stdout + r.stderr


def _resign(sig_path: Path, change: dict[str, object] | None = None, blob_suffix: bytes = b"") -> None:
    """Rewrite a .sig with some fields changed, or bytes appended to the blob, keeping valid armor."""
    sig = sshsig.parse(sig_path.read_bytes())
    if change:
        sig = dataclasses.replace(sig, **change)  # type: ignore[arg-type]
    sig_path.write_bytes(sshsig.armor(sshsig.encode(sig) + blob_suffix))


# ---------------------------------------------------------------- round trips


def test_patchkit_signs_and_ssh_keygen_verifies(signed: tuple[Path, Path, Path]) -> None:
    msg, sig, allowed = signed
    ok, out = keygen_verify(allowed, "alice", msg)
    assert ok, out
    assert 'Good "patchkit" signature for alice' in out
    assert sig.read_bytes().startswith(b"-----BEGIN SSH SIGNATURE-----\n")


def test_patchkit_signature_is_byte_identical_to_ssh_keygen(
    signed: tuple[Path, Path, Path], ed_key: KeyPair, tmp_path: Path
) -> None:
    # Ed25519 is deterministic: same key, message, namespace and hash -> same bytes,
    # which proves the preamble, raw hash, nesting and armor wrapping are exact.
    msg, sig, _ = signed
    theirs = tmp_path / "theirs" / msg.name
    theirs.parent.mkdir()
    theirs.write_bytes(MESSAGE)
    assert keygen_sign(ed_key.copy_to(tmp_path / "theirs"), theirs).read_bytes() == sig.read_bytes()


@pytest.mark.parametrize("hashalg", ["sha512", "sha256"])
def test_ssh_keygen_signs_and_patchkit_verifies(tmp_path: Path, ed_key: KeyPair, invoke: Invoke, hashalg: str) -> None:
    msg = tmp_path / "lockfile.toml.txt"
    msg.write_bytes(MESSAGE)
    keygen_sign(ed_key.copy_to(tmp_path), msg, "patchkit", "-O", f"hashalg={hashalg}")
    assert sshsig.parse(msg.with_name(msg.name + ".sig").read_bytes()).hashalg == hashalg
    allowed = write_allowed(tmp_path / "allowed", f"alice,bob@example.com {ed_key.public_line}")
    code, out = _verify(invoke, allowed, msg, identity="alice")
    assert code == 0, out
    assert f"ok   {msg}  signed by alice (SHA256:" in out


def test_verify_as_a_user_runs_it(signed: tuple[Path, Path, Path]) -> None:
    msg, _, allowed = signed
    argv = [sys.executable, "-m", "patchkit", "verify", "--allowed-signers", str(allowed), "-I", "alice", str(msg)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("verify: 1 ok, 0 failed\n")
    msg.write_bytes(b"changed")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_crlf_armor_is_refused_as_ssh_keygen_refuses_it(signed: tuple[Path, Path, Path], invoke: Invoke) -> None:
    # ssh-keygen needs "-----BEGIN SSH SIGNATURE-----\n" exactly; more variants in tests/adversarial.
    msg, sig, allowed = signed
    sig.write_bytes(sig.read_bytes().replace(b"\n", b"\r\n"))
    assert not keygen_verify(allowed, "alice", msg)[0]
    assert _verify(invoke, allowed, msg)[0] == 1


# ---------------------------------------------------------------- rejections


def test_wrong_namespace_is_rejected(tmp_path: Path, ed_key: KeyPair, invoke: Invoke) -> None:
    msg = tmp_path / "f"
    msg.write_bytes(MESSAGE)
    keygen_sign(ed_key.copy_to(tmp_path), msg, "git")
    allowed = write_allowed(tmp_path / "allowed", f"alice {ed_key.public_line}")
    code, out = _verify(invoke, allowed, msg)
    assert code == 1
    assert f"FAIL {msg}" in out and "made for namespace 'git', not 'patchkit'" in out


def test_tampered_file_is_rejected(signed: tuple[Path, Path, Path], invoke: Invoke) -> None:
    msg, _, allowed = signed
    msg.write_bytes(MESSAGE.replace(b"3f1c", b"3f1d"))
    code, out = _verify(invoke, allowed, msg)
    assert code == 1
    assert "signature does not match the file" in out
    assert not keygen_verify(allowed, "alice", msg)[0]


def test_tampered_signature_is_rejected(signed: tuple[Path, Path, Path], invoke: Invoke) -> None:
    msg, sig, allowed = signed
    raw = sshsig.parse(sig.read_bytes()).sig
    _resign(sig, {"sig": bytes([raw[0] ^ 1]) + raw[1:]})
    code, out = _verify(invoke, allowed, msg)
    assert code == 1 and "signature does not match the file" in out
    assert not keygen_verify(allowed, "alice", msg)[0]


def test_signature_by_another_key_is_rejected(
    signed: tuple[Path, Path, Path], encrypted_key: KeyPair, invoke: Invoke, tmp_path: Path
) -> None:
    msg, _, _ = signed
    other = write_allowed(tmp_path / "other", f"alice {encrypted_key.public_line}")
    code, out = _verify(invoke, other, msg)
    assert code == 1 and "is not in the allowed signers" in out


def test_expired_valid_before_is_rejected(signed: tuple[Path, Path, Path], ed_key: KeyPair, invoke: Invoke) -> None:
    msg, _, allowed = signed
    write_allowed(allowed, f'alice valid-before="20200101",namespaces="patchkit" {ed_key.public_line}')
    code, out = _verify(invoke, allowed, msg)
    assert code == 1 and "key expired at 2020-01-01" in out
    assert not keygen_verify(allowed, "alice", msg)[0]  # ssh-keygen agrees
    write_allowed(allowed, f'alice valid-after="20990101Z" {ed_key.public_line}')
    code, out = _verify(invoke, allowed, msg)
    assert code == 1 and "key not valid before 2099-01-01T00:00:00+00:00" in out
    write_allowed(allowed, f'alice valid-after="20200101",valid-before="20990101" {ed_key.public_line}')
    assert _verify(invoke, allowed, msg)[0] == 0
    assert keygen_verify(allowed, "alice", msg)[0]


def test_principal_not_allowed_is_rejected(signed: tuple[Path, Path, Path], ed_key: KeyPair, invoke: Invoke) -> None:
    msg, _, allowed = signed
    code, out = _verify(invoke, allowed, msg, identity="mallory")
    assert code == 1 and "allows this key for 'alice', not for 'mallory'" in out
    assert not keygen_verify(allowed, "mallory", msg)[0]
    write_allowed(allowed, f"*@example.com,!eve@example.com {ed_key.public_line}")
    assert _verify(invoke, allowed, msg, identity="bob@example.com")[0] == 0
    assert keygen_verify(allowed, "bob@example.com", msg)[0]
    assert _verify(invoke, allowed, msg, identity="eve@example.com")[0] == 1
    assert not keygen_verify(allowed, "eve@example.com", msg)[0]


def test_key_limited_to_other_namespaces_is_rejected(
    signed: tuple[Path, Path, Path], ed_key: KeyPair, invoke: Invoke
) -> None:
    msg, _, allowed = signed
    write_allowed(allowed, f'alice namespaces="git,file" {ed_key.public_line}')
    code, out = _verify(invoke, allowed, msg)
    assert code == 1 and "for namespaces 'git,file', not 'patchkit'" in out
    assert not keygen_verify(allowed, "alice", msg)[0]


def test_cert_authority_line_is_refused_clearly(
    signed: tuple[Path, Path, Path], ed_key: KeyPair, invoke: Invoke
) -> None:
    msg, _, allowed = signed
    write_allowed(allowed, f"alice cert-authority {ed_key.public_line}")
    code, out = _verify(invoke, allowed, msg)
    assert code == 1 and "is a cert-authority; patchkit verifies plain keys" in out


def test_rsa_signature_is_rejected_as_ed25519_only(tmp_path: Path, rsa_key: KeyPair, invoke: Invoke) -> None:
    msg = tmp_path / "f"
    msg.write_bytes(MESSAGE)
    keygen_sign(rsa_key.copy_to(tmp_path), msg)
    allowed = write_allowed(tmp_path / "allowed", f"alice {rsa_key.public_line}")
    assert keygen_verify(allowed, "alice", msg)[0]  # a valid signature, just not one patchkit takes
    code, out = _verify(invoke, allowed, msg)
    assert code == 1
    assert "signed with a ssh-rsa key; patchkit verifies Ed25519 (ssh-ed25519) signatures only" in out


def test_truncated_armor_is_rejected(signed: tuple[Path, Path, Path], invoke: Invoke) -> None:
    msg, sig, allowed = signed
    lines = sig.read_bytes().splitlines(keepends=True)
    sig.write_bytes(b"".join(lines[:-1]))  # END line lost
    code, out = _verify(invoke, allowed, msg)
    assert code == 1 and "truncated armor: no '-----END SSH SIGNATURE-----' line" in out
    sig.write_bytes(b"".join([*lines[:3], lines[-1]]))  # body cut short (at a base64 boundary), armor intact
    code, out = _verify(invoke, allowed, msg)
    assert code == 1 and "truncated signature blob" in out


def test_trailing_data_is_rejected(signed: tuple[Path, Path, Path], invoke: Invoke) -> None:
    msg, sig, allowed = signed
    _resign(sig, blob_suffix=b"\x00\x00\x00\x01x")
    code, out = _verify(invoke, allowed, msg)
    assert code == 1 and "5 bytes of trailing data after the signature" in out
    assert not keygen_verify(allowed, "alice", msg)[0]


def test_newer_version_and_bad_base64_are_rejected(signed: tuple[Path, Path, Path], invoke: Invoke) -> None:
    msg, sig, allowed = signed
    blob = bytearray(sshsig.dearmor(sig.read_bytes()))
    blob[9] = 2  # version field, after the 6-byte magic
    sig.write_bytes(sshsig.armor(bytes(blob)))
    assert "unsupported SSHSIG version 2" in _verify(invoke, allowed, msg)[1]
    sig.write_bytes(b"-----BEGIN SSH SIGNATURE-----\nU1NI*0lH\n-----END SSH SIGNATURE-----\n")
    assert "armor is not valid base64" in _verify(invoke, allowed, msg)[1]


def test_missing_signature_is_reported_per_file(
    signed: tuple[Path, Path, Path], invoke: Invoke, tmp_path: Path
) -> None:
    msg, _, allowed = signed
    unsigned = tmp_path / "unsigned"
    unsigned.write_bytes(b"x")
    code, out = _verify(invoke, allowed, msg, unsigned)
    assert code == 1
    assert f"ok   {msg}" in out and f"FAIL {unsigned}" in out and f"{unsigned}.sig does not exist" in out
    assert "verify: 1 ok, 1 failed" in out


def test_sign_writes_nothing_when_a_file_cannot_be_signed(tmp_path: Path, ed_key: KeyPair) -> None:
    from patchkit.errors import BadInput
    from patchkit.signing.keys import load_private_key
    from patchkit.signing.signatures import sign_files

    key = load_private_key(ed_key.copy_to(tmp_path), lambda: None)
    a = tmp_path / "a"
    a.write_bytes(b"a")
    with pytest.raises(BadInput, match="gone: cannot read"):
        sign_files([a, tmp_path / "gone"], key)
    assert not (tmp_path / "a.sig").exists()


def test_sshsig_rejects_unknown_hash_algorithm() -> None:
    blob = sshsig.encode(sshsig.Signature(b"k", "patchkit", "md5", "ssh-ed25519", b"s"))
    with pytest.raises(sshsig.BadSignature, match="'md5' is not one SSHSIG allows"):
        sshsig.verify(sshsig.armor(blob), b"m")
