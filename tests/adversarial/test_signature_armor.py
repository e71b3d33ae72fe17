"""SSH signature armor: patchkit accepts and refuses exactly what the real ``ssh-keygen -Y verify`` does.

Each variant of a valid signature file is handed to both, in the same test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from patchkit.signing import sshsig
from tests.conftest import Invoke
from tests.signing.conftest import KeyPair, ed_key, keygen_verify, write_allowed  # noqa: F401

MESSAGE = b"3f1c  patches/gpu_worker.py\n"

Edit = Callable[[bytes], bytes]


def _lines(f: Callable[[list[bytes]], list[bytes]]) -> Edit:
    return lambda armored: b"".join(f(armored.splitlines(keepends=True)))


VARIANTS: dict[str, tuple[Edit, bool]] = {
    "as written": (lambda a: a, True),
    "text after the END line": (lambda a: a + b"signed by the release team\n", True),
    "END line without a newline": (lambda a: a.rstrip(b"\n"), True),
    "CRLF line ends": (lambda a: a.replace(b"\n", b"\r\n"), False),
    "CRLF only in the body": (_lines(lambda ls: [ls[0], *(x.replace(b"\n", b"\r\n") for x in ls[1:])]), True),
    "indented BEGIN line": (lambda a: b"  " + a, False),
    "indented END line": (_lines(lambda ls: [*ls[:-1], b"  " + ls[-1]]), False),
    "indented body": (_lines(lambda ls: [ls[0], *(b"    " + x for x in ls[1:-1]), ls[-1]]), True),
    "blank line before BEGIN": (lambda a: b"\n" + a, False),
    "body on one line": (_lines(lambda ls: [ls[0], b"".join(x.rstrip(b"\n") for x in ls[1:-1]) + b"\n", ls[-1]]), True),
    "no END line": (_lines(lambda ls: ls[:-1]), False),
    "garbage in the body": (_lines(lambda ls: [ls[0], b"!!" + ls[1], *ls[2:]]), False),
}


@pytest.fixture
def setup(tmp_path: Path, ed_key: KeyPair, invoke: Invoke) -> tuple[Path, Path, bytes]:  # noqa: F811
    key = ed_key.copy_to(tmp_path)
    msg = tmp_path / "SHA256SUMS.txt"
    msg.write_bytes(MESSAGE)
    assert invoke("sign", "--key", str(key), str(msg)).exit_code == 0
    allowed = write_allowed(tmp_path / "allowed_signers", f'alice namespaces="patchkit" {ed_key.public_line}')
    return msg, allowed, msg.with_name(msg.name + ".sig").read_bytes()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_armor_parity_with_ssh_keygen(variant: str, setup: tuple[Path, Path, bytes], invoke: Invoke) -> None:
    msg, allowed, armored = setup
    edit, accepted = VARIANTS[variant]
    sig = msg.with_name(msg.name + ".sig")
    sig.write_bytes(edit(armored))
    theirs, out = keygen_verify(allowed, "alice", msg)
    r = invoke("verify", "--allowed-signers", str(allowed), "-I", "alice", str(msg))
    assert theirs is accepted, f"ssh-keygen: {out}"
    assert (r.exit_code == 0) is accepted, r.stdout + r.stderr
    if not accepted:
        assert "Traceback" not in r.stderr


def test_text_after_end_is_not_reported_as_a_missing_end(setup: tuple[Path, Path, bytes]) -> None:
    _, _, armored = setup
    assert sshsig.dearmor(armored + b"trailing words\n") == sshsig.dearmor(armored)
    with pytest.raises(sshsig.BadSignature, match="the file must begin with the line '-----BEGIN SSH SIGNATURE-----'"):
        sshsig.dearmor(b" " + armored)
