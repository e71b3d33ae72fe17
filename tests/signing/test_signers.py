"""The allowed-signers format: what ssh-keygen accepts is read the same way, the rest is refused by line."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from patchkit.errors import BadInput
from patchkit.signing.signers import find, match_pattern_list, parse
from patchkit.signing.sshsig import BadSignature

from .conftest import KeyPair

# An ssh-ed25519 key blob, for a line that claims it is another type.
ED25519_BLOB = "AAAAC3NzaC1lZDI1NTE5AAAAIBP1H0Gfj2oNBJZgJgtzgEAWc+M7QWcDweBkDdemeD0x"
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _key(line: str) -> bytes:
    import base64

    return base64.b64decode(line.split()[1])


def test_parses_comments_quotes_options_and_comments_after_the_key(ed_key: KeyPair, rsa_key: KeyPair) -> None:
    text = (
        "# release signers\n\n"
        f'"alice,bob" namespaces="patchkit,git",valid-before="20270101Z" {ed_key.public_line}\n'
        f"carol cert-authority {rsa_key.public_line}\n"
    )
    first, second = parse(text.encode(), "allowed_signers")
    assert (first.line, first.principals, first.namespaces) == (3, "alice,bob", "patchkit,git")
    assert first.valid_before == datetime(2027, 1, 1, tzinfo=UTC)
    assert first.key == _key(ed_key.public_line)
    assert second.cert_authority and second.key_type == "ssh-rsa"
    assert find((first, second), first.key, "patchkit", "bob", NOW).principal == "bob"
    assert find((first,), first.key, "patchkit", None, NOW).principal == "alice,bob"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("alice valid-before=20270101 KEY", "valid-before= needs a double-quoted value"),
        ('alice colour="red" KEY', "unknown option 'colour'"),
        ('alice valid-after="2027" KEY', "valid-after='2027' is not a YYYYMMDD[HHMM[SS]][Z] time"),
        ('alice valid-after="20271341" KEY', "valid-after='20271341' is not a YYYYMMDD"),
        ('alice namespaces="" KEY', 'namespaces="" allows no namespace'),
        ("alice", "expected 'principals [options] keytype base64-key'"),
        ('alice namespaces="x KEY', "unbalanced double quote in the options"),
        ("alice ssh-ed25519 !!!notbase64", "the key is not valid base64"),
        (
            "alice ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIBP1H0Gfj2oNBJZgJgtzgEAWc+M7QWcDweBkDdemeD0x",
            "does not match 'ssh-rsa'",
        ),
    ],
)
def test_malformed_lines_are_refused_with_file_and_line(ed_key: KeyPair, line: str, message: str) -> None:
    text = "# ok\n" + line.replace("KEY", ed_key.public_line) + "\n"
    with pytest.raises(BadInput) as e:
        parse(text.encode(), "keys/allowed_signers")
    assert str(e.value).startswith("keys/allowed_signers:2: ")
    assert message in str(e.value)


def test_unknown_key_gets_its_fingerprint_named(ed_key: KeyPair, rsa_key: KeyPair) -> None:
    signers = parse(f"alice {rsa_key.public_line}\n".encode(), "a")
    with pytest.raises(BadSignature, match=r"signing key SHA256:\S+ is not in the allowed signers"):
        find(signers, _key(ed_key.public_line), "patchkit", "alice", NOW)


def test_pattern_lists_follow_openssh() -> None:
    assert match_pattern_list("ci@example.com", "*@example.com")
    assert not match_pattern_list("eve@example.com", "*@example.com,!eve@example.com")
    assert match_pattern_list("a1", "a?")
    assert match_pattern_list("a[1]", "a[?]")  # brackets are literal, only * and ? are special
    assert not match_pattern_list("a1", "a[0-9]")
