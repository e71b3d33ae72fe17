"""Signing keys: loading OpenSSH Ed25519 private keys safely, and generating new pairs.

A private key file that group or others may read is refused, as ssh itself
refuses it: a key anyone on the host can copy proves nothing. Passphrases
come from a callback (the CLI reads ``$PATCHKIT_KEY_PASSPHRASE`` or prompts),
so the core never touches a terminal.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import BadInput, WriteFailed

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

KEY_ENV = "PATCHKIT_SIGNING_KEY"
PASSPHRASE_ENV = "PATCHKIT_KEY_PASSPHRASE"  # noqa: S105  (a variable name, not a secret)
_ONLY_ED25519 = "patchkit signs with Ed25519 keys only"
_NEW_KEY_HINT = "make one: patchkit keygen -f PATH (or ssh-keygen -t ed25519 -f PATH)"

# The module is imported by the CLI at start-up: everything heavier is imported where used.
Passphrase = Callable[[], bytes | None]


@dataclass(frozen=True)
class NewKey:
    """A key pair just written: where, its public line and its fingerprint."""

    private: Path
    public: Path
    public_line: str
    fingerprint: str

    def allowed_signers_line(self, principal: str) -> str:
        """The line that trusts this key for ``principal`` in patchkit's namespace."""
        from patchkit.signing.sshsig import NAMESPACE

        return f'{principal} namespaces="{NAMESPACE}" {self.public_line}'


def check_permissions(path: Path) -> None:
    """Refuse a private key file that group or others can access, with the chmod that fixes it."""
    try:
        st = path.stat()
    except FileNotFoundError as e:
        raise BadInput(f"{path}: no such key file", _NEW_KEY_HINT) from e
    except OSError as e:
        raise BadInput(f"{path}: cannot read the key: {e.strerror}") from e
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{path}: not a regular file (expected an OpenSSH private key)")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise BadInput(
            f"{path}: private key permissions {mode:04o} are too open (group or others can access it); refused",
            f"chmod 600 {path}",
        )


def load_private_key(path: Path, passphrase: Passphrase) -> Ed25519PrivateKey:
    """The Ed25519 key in an OpenSSH private key file; asks ``passphrase`` only if the file is encrypted."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key

    check_permissions(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise BadInput(f"{path}: cannot read the key: {e.strerror}") from e
    if b"-----BEGIN OPENSSH PRIVATE KEY-----" not in data:
        hint = f"{_NEW_KEY_HINT}; a PEM key converts with ssh-keygen -p -f PATH" if b"PRIVATE KEY" in data else None
        raise BadInput(f"{path}: not an OpenSSH private key", hint or _NEW_KEY_HINT)
    try:
        try:
            key = load_ssh_private_key(data, None)
        except TypeError:  # encrypted: cryptography wants the passphrase
            secret = passphrase()
            if secret is None:
                raise BadInput(
                    f"{path}: the key is encrypted and no passphrase was given",
                    f"set {PASSPHRASE_ENV}, or run in a terminal to be prompted",
                ) from None
            key = load_ssh_private_key(data, secret)
    except ValueError as e:
        wrong = "passphrase" if "checksum" in str(e).lower() or "decrypt" in str(e).lower() else ""
        if wrong:
            raise BadInput(f"{path}: wrong passphrase", f"check {PASSPHRASE_ENV} or retype it") from e
        raise BadInput(f"{path}: cannot load the key ({e})", _NEW_KEY_HINT) from e
    except UnsupportedAlgorithm as e:
        raise BadInput(f"{path}: unsupported key ({e}); {_ONLY_ED25519}", _NEW_KEY_HINT) from e
    if not isinstance(key, Ed25519PrivateKey):
        kind = type(key).__name__.removesuffix("PrivateKey").removeprefix("_")
        raise BadInput(f"{path}: an {kind} key; {_ONLY_ED25519}", _NEW_KEY_HINT)
    return key


def public_line(key: Ed25519PrivateKey, comment: str = "") -> str:
    """``ssh-ed25519 AAAA… comment``: the ``.pub`` file's line."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    text = key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode("ascii")
    return f"{text} {comment}".rstrip()


def public_wire(key: Ed25519PrivateKey) -> bytes:
    """The public key in SSH wire form (what signatures and allowed-signers lines carry)."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from patchkit.signing.sshsig import ed25519_wire

    return ed25519_wire(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def generate(path: Path, comment: str, passphrase: bytes | None) -> NewKey:
    """Write a new Ed25519 pair: ``path`` (OpenSSH format, mode 0600) and ``path.pub``.

    Refuses to overwrite either file. Both appear only once both were
    written in full (temporary files, then hard links, which fail rather than
    replace an existing file).
    """
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        Encoding,
        NoEncryption,
        PrivateFormat,
    )

    pub_path = path.with_name(path.name + ".pub")
    for p in (path, pub_path):
        if p.exists() or p.is_symlink():
            raise BadInput(f"{p}: already exists; refusing to overwrite a key", "choose another path with -f PATH")
    key = Ed25519PrivateKey.generate()
    encryption = BestAvailableEncryption(passphrase) if passphrase else NoEncryption()
    private = key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, encryption)
    line = public_line(key, comment)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise WriteFailed(f"{path.parent}: cannot create the directory: {e.strerror}") from e
    _write_both(path, ((path, private, 0o600), (pub_path, (line + "\n").encode(), 0o644)))
    from patchkit.signing.sshsig import fingerprint

    return NewKey(path, pub_path, line, fingerprint(public_wire(key)))


def _write_both(path: Path, files: tuple[tuple[Path, bytes, int], ...]) -> None:
    """Write every file or none, each with its mode, by ``repo.atomic_write`` without overwriting.

    A file that appeared meanwhile is never replaced: the write fails, and
    the ones already written are removed again.
    """
    from patchkit.store.repo import atomic_write

    written: list[Path] = []
    try:
        for target, data, mode in files:
            atomic_write(target, data, mode=mode, overwrite=False)
            written.append(target)
    except FileExistsError as e:
        _remove(written)
        raise BadInput(f"{e.filename}: already exists; refusing to overwrite a key", "choose another -f PATH") from e
    except WriteFailed:
        _remove(written)
        raise


def _remove(paths: list[Path]) -> None:
    for p in paths:
        p.unlink()
