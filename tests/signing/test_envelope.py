"""DSSE envelopes opened against allowed signers: which signature counts, and why one does not."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from patchkit.signing.attest import PAYLOAD_TYPE, envelope, open_envelope, pae
from patchkit.signing.keys import public_wire
from patchkit.signing.signers import AllowedSigner
from patchkit.signing.sshsig import BadSignature, fingerprint

NOW = datetime(2026, 1, 1, tzinfo=UTC)
STMT = {"_type": "https://in-toto.io/Statement/v1", "subject": []}


def _signer(key: Ed25519PrivateKey, principals: str = "ops@example.org", line: int = 1) -> AllowedSigner:
    return AllowedSigner(line, principals, "ssh-ed25519", public_wire(key))


def _env(payload: bytes, *sigs: dict[str, str]) -> bytes:
    env = {"payload": base64.b64encode(payload).decode(), "payloadType": PAYLOAD_TYPE, "signatures": list(sigs)}
    return json.dumps(env).encode()


def _sig(key: Ed25519PrivateKey, payload: bytes, keyid: str | None = None) -> dict[str, str]:
    sig = base64.b64encode(key.sign(pae(PAYLOAD_TYPE, payload))).decode()
    return {"keyid": keyid if keyid is not None else fingerprint(public_wire(key)), "sig": sig}


def test_the_statement_and_its_signer() -> None:
    key = Ed25519PrivateKey.generate()
    stmt, match = open_envelope(envelope(STMT, key), (_signer(key),), None, NOW)
    assert stmt == STMT
    assert match.signer.line == 1


def test_a_later_signature_by_an_allowed_key_counts() -> None:
    stranger, key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    payload = json.dumps(STMT).encode()
    data = _env(payload, "not a dict", _sig(stranger, payload), _sig(key, payload))  # type: ignore[arg-type]
    stmt, _ = open_envelope(data, (_signer(key),), None, NOW)
    assert stmt == STMT


def test_why_no_signature_counts() -> None:
    stranger, key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    payload = json.dumps(STMT).encode()
    with pytest.raises(BadSignature) as e:
        open_envelope(_env(payload, _sig(stranger, payload)), (_signer(key),), None, NOW)
    assert str(e.value) == f"signing key {fingerprint(public_wire(stranger))} is not in the allowed signers"
    # Without a keyid every allowed key is tried; a wrong signature says whose key it was checked with.
    forged = _sig(stranger, payload, keyid="")
    with pytest.raises(BadSignature) as e:
        open_envelope(_env(payload, forged), (_signer(key),), None, NOW)
    assert str(e.value) == f"signature by {fingerprint(public_wire(key))} does not match the statement"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "expected one DSSE envelope, found 0 lines"),
        (b"{}\n{}\n", "expected one DSSE envelope, found 2 lines"),
        (b"{", "not a JSON DSSE envelope"),
        (b'{"payloadType": "text/plain"}', f"payloadType is not {PAYLOAD_TYPE!r}"),
        (json.dumps({"payloadType": PAYLOAD_TYPE, "payload": "e30="}).encode(), "the envelope has no signatures"),
    ],
)
def test_malformed_envelopes(data: bytes, message: str) -> None:
    with pytest.raises(BadSignature) as e:
        open_envelope(data, (), None, NOW)
    assert str(e.value).startswith(message)


def test_a_signed_payload_must_be_a_json_object() -> None:
    key = Ed25519PrivateKey.generate()
    for payload, message in (
        (b"[1]", "the signed payload is not a JSON object"),
        (b"{", "the signed payload is not JSON"),
    ):
        with pytest.raises(BadSignature) as e:
            open_envelope(_env(payload, _sig(key, payload)), (_signer(key),), None, NOW)
        assert str(e.value).startswith(message)
