"""Keys made by the real ssh-keygen, and helpers to sign and verify with it.

Session fixtures (keys are slow to make only for RSA, but none need remaking):

- ``ed_key`` -> ``KeyPair``: an unencrypted Ed25519 key, comment alice@test.
- ``encrypted_key`` -> ``KeyPair``: an Ed25519 key with passphrase ``PASSPHRASE``.
- ``rsa_key`` -> ``KeyPair``: a 2048-bit RSA key (patchkit refuses it).

Each test copies what it needs into its tmp_path, so permission changes and
signatures never leak between tests.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
PASSPHRASE = "correct horse battery staple"


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public_line: str

    def copy_to(self, directory: Path) -> Path:
        """The private key copied into ``directory`` (mode 0600), as a user keeps it."""
        dest = directory / self.private.name
        shutil.copyfile(self.private, dest)
        dest.chmod(0o600)
        return dest


def ssh_keygen(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run the real ssh-keygen; never prompts (stdin is given or empty), bounded in time."""
    return subprocess.run([SSH_KEYGEN, *args], input=stdin or b"", capture_output=True, timeout=60, check=False)


def make_key(directory: Path, name: str, key_type: str, passphrase: str = "") -> KeyPair:
    path = directory / name
    args = ["-q", "-t", key_type, "-N", passphrase, "-C", "alice@test", "-f", str(path)]
    if key_type == "rsa":
        args[3:3] = ["-b", "2048"]
    r = ssh_keygen(*args)
    assert r.returncode == 0, r.stderr
    return KeyPair(path, path.with_name(name + ".pub").read_text().strip())


@pytest.fixture(scope="session")
def ed_key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key(tmp_path_factory.mktemp("keys"), "id_ed25519", "ed25519")


@pytest.fixture(scope="session")
def encrypted_key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key(tmp_path_factory.mktemp("keys"), "id_ed25519_enc", "ed25519", PASSPHRASE)


@pytest.fixture(scope="session")
def rsa_key(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return make_key(tmp_path_factory.mktemp("keys"), "id_rsa", "rsa")


def write_allowed(path: Path, line: str) -> Path:
    path.write_text(line + "\n")
    return path


def keygen_sign(key: Path, message: Path, namespace: str = "patchkit", *extra: str) -> Path:
    """Sign ``message`` with ``ssh-keygen -Y sign``; the ``.sig`` path."""
    r = ssh_keygen("-Y", "sign", "-f", str(key), "-n", namespace, *extra, str(message))
    assert r.returncode == 0, r.stderr
    return message.with_name(message.name + ".sig")


def keygen_verify(allowed: Path, identity: str, message: Path, namespace: str = "patchkit") -> tuple[bool, str]:
    """``ssh-keygen -Y verify`` exactly as the issue's interop requirement states it."""
    sig = message.with_name(message.name + ".sig")
    r = ssh_keygen(
        "-Y", "verify", "-f", str(allowed), "-I", identity, "-n", namespace, "-s", str(sig),
        stdin=message.read_bytes(),
    )  # fmt: skip
    return r.returncode == 0, (r.stdout + r.stderr).decode()
