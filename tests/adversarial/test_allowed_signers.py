"""Allowed-signers files: patchkit accepts a signature exactly when ``ssh-keygen -Y verify`` does.

Seeded generation of allowed-signers files (principal patterns with ``!``,
``*``, ``?``, commas, quotes, case and byte variants, over-long subpatterns;
``namespaces``, ``valid-after``/``valid-before`` in every form OpenSSH takes
and some it refuses; ``cert-authority``; several lines for the same key;
comments, blank lines, CRs and NULs; malformed lines, which ssh-keygen skips)
and identities. Each case is decided by the real ``ssh-keygen -Y verify``
(``-Overify-time`` fixes the clock) and by patchkit's library; a sample also
through ``patchkit verify``. The local zone has summer time, and June is in
it: OpenSSH reads a time without ``Z`` as local standard time.

``PATCHKIT_SIGNERS_CASES`` sets how many cases (default 300, a few seconds).
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.signing.signatures import Outcome, check_signature, load_signers
from tests.conftest import Invoke
from tests.signing.conftest import SSH_KEYGEN, KeyPair, keygen_sign, make_key

CASES = int(os.environ.get("PATCHKIT_SIGNERS_CASES", "300"))
CLI_SAMPLE = 25
SEED = int(os.environ.get("PATCHKIT_SIGNERS_SEED", "2029"))
TZ = "EST5EDT,M3.2.0,M11.1.0"  # a zone with summer time, without needing tzdata
NOW = datetime(2026, 6, 15, 12, 0, 0, tzinfo=UTC)
IDENTITIES = ["rel", "alice", "Alice", "bob@example.com", "release-bot", "ré", "a,b", "*", "!rel", "al ice", "x" * 1030]
WORDS = ["rel", "alice", "ALICE", "bob@example.com", "release*", "*@example.com", "r?l", "r??", "ré", "r?", "*", "?*"]


@dataclass(frozen=True)
class Keys:
    signer: KeyPair
    others: tuple[KeyPair, ...]
    message: Path


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    """Three Ed25519 keys made by ssh-keygen, and a message the first one signed (namespace patchkit)."""
    d = tmp_path_factory.mktemp("signers")
    made = [make_key(d, f"id_{i}", "ed25519") for i in range(3)]
    message = d / "SHA256SUMS.txt"
    message.write_bytes(b"0" * 64 + b"  lockfile.toml\n")
    keygen_sign(made[0].private, message)
    return Keys(made[0], tuple(made[1:]), message)


@pytest.fixture
def local_zone() -> Iterator[None]:
    """This process in TZ (as the ssh-keygen runs are), restored afterwards."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = TZ
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def _pattern(r: random.Random) -> str:
    """One comma-separated pattern list, each subpattern maybe negated."""
    subs = []
    for _ in range(r.choice([1, 1, 2, 2, 3, 4])):
        word = r.choice(WORDS) if r.random() < 0.9 else r.choice(["", "x" * 1025, "rel" + "*" * 3, "é?"])
        subs.append(("!" if r.random() < 0.3 else "") + word)
    text = ",".join(subs)
    return text + ("," if r.random() < 0.05 else "")


def _principals(r: random.Random) -> str:
    text = _pattern(r)
    form = r.random()
    if form < 0.15:
        return f'"{text}"'
    if form < 0.2:
        return f'"{text.replace(",", ", ", 1)}"'  # a blank inside quotes belongs to the field
    if form < 0.25 and len(text) > 2:
        return f'{text[:2]}"{text[2:]}"'  # quotes in the middle are removed
    if form < 0.28:
        return f'"{text}'  # never closed
    if form < 0.33 and "," in text:
        first, rest = text.split(",", 1)
        return f'"{first}",{rest}'  # the field ends at the closing quote: the rest is read as options
    return text


def _time(r: random.Random, now: datetime, close: bool) -> str:
    """A valid-after/valid-before value: every form OpenSSH reads, near ``now`` or far, and some it refuses."""
    offsets = [-400 * 86400, -86400, -3600, 3600, 86400, 400 * 86400, 5 * 3600, -5 * 3600, 4 * 3600]
    if close:
        offsets += [0, 1, -1, 60, -60]
    when = now + timedelta(seconds=r.choice(offsets))
    suffix = r.choice(["", "", "Z", "z", "UTC", "utc"])
    local = when.astimezone() if suffix == "" else when.astimezone(UTC)
    text = local.strftime(r.choice(["%Y%m%d", "%Y%m%d%H%M", "%Y%m%d%H%M%S", "%Y%m%d%H%M%S"])) + suffix
    if r.random() < 0.15:
        text = r.choice(
            ["2026013", "20261301", "20260632", "20260230", "202606152460", "20260615120060", "2026 615", "2026061x",
             "19700101Z", "19700101000001Z", "2026-06-15", "", "20260615ZZ", " 20260615", "0099010100"]
        )  # fmt: skip
    return text


def _options(r: random.Random, now: datetime, close: bool) -> str:
    parts = []
    if r.random() < 0.5:
        parts.append(f'{r.choice(["namespaces", "NAMESPACES"])}="{r.choice(["patchkit", "git", _pattern(r)])}"')
    if r.random() < 0.35:
        parts.append(f'{r.choice(["valid-after", "Valid-After"])}="{_time(r, now, close)}"')
    if r.random() < 0.35:
        parts.append(f'valid-before="{_time(r, now, close)}"')
    if r.random() < 0.05:
        parts.append(r.choice(["cert-authority", "CERT-AUTHORITY"]))
    if r.random() < 0.1:
        parts.append(
            r.choice(['colour="red"', "namespaces=patchkit", 'namespaces="patchkit', 'valid-after="20200101"', ""])
        )
    r.shuffle(parts)
    text = ",".join(parts)
    if text and r.random() < 0.05:
        text = r.choice(["," + text, text + ",", text.replace(",", ",,")])
    return text


def _key(r: random.Random, keys: Keys) -> str:
    signer = r.random() < 0.75
    kind, blob = (keys.signer if signer else r.choice(keys.others)).public_line.split()[:2]
    roll = r.random()
    if roll < 0.05:
        return f"{kind}\t{blob}"
    if roll < 0.1:
        return f"{kind} {blob[:-4]}AAAA"
    if roll < 0.13:
        return r.choice([f"ED25519 {blob}", f"ssh-rsa {blob}", f"{kind} {blob}==", f"{kind} {blob[:30]} {blob[30:]}"])
    return f"{kind} {blob}" + (" comment here" if roll > 0.9 else "")


def _line(r: random.Random, keys: Keys, now: datetime, close: bool) -> str:
    opts = _options(r, now, close) if r.random() < 0.6 else ""
    line = " ".join(p for p in (_principals(r), opts, _key(r, keys)) if p)
    roll = r.random()
    if roll < 0.05:
        line = "  \t" + line
    elif roll < 0.1:
        line += "\r"
    elif roll < 0.12:
        line = line.replace(" ", "\0", 1)
    return line


def _allowed_file(r: random.Random, keys: Keys, now: datetime, close: bool) -> bytes:
    lines = [_line(r, keys, now, close) for _ in range(r.choice([1, 1, 2, 3, 4]))]
    for _ in range(r.choice([0, 0, 1, 2])):
        lines.insert(r.randrange(len(lines) + 1), r.choice(["# release signers", "", "   ", "\t# indented"]))
    return ("\n".join(lines) + r.choice(["\n", "\n", ""])).encode("utf-8", "surrogateescape")


def _cases(n: int, keys: Keys, now: datetime, close: bool) -> Iterator[tuple[bytes, str]]:
    r = random.Random(SEED)
    for _ in range(n):
        yield _allowed_file(r, keys, now, close), r.choice(IDENTITIES)


def ssh_keygen_accepts(allowed: Path, identity: str, keys: Keys, now: datetime | None) -> bool:
    """``ssh-keygen -Y verify`` of the signer's signature; ``now`` fixes its clock (-Overify-time)."""
    clock = ["-Overify-time=" + now.strftime("%Y%m%d%H%M%SZ")] if now is not None else []
    args = ["-Y", "verify", "-f", str(allowed), "-I", identity, "-n", "patchkit", "-s", f"{keys.message}.sig"]
    r = subprocess.run(
        [SSH_KEYGEN, *args, *clock],
        input=keys.message.read_bytes(),
        capture_output=True,
        timeout=30,
        check=False,
        env={**os.environ, "TZ": TZ},
    )
    assert r.returncode in (0, 255), r.stderr
    return r.returncode == 0


def patchkit_accepts(allowed: Path, identity: str, keys: Keys, now: datetime) -> bool:
    try:
        signers = load_signers(allowed)
    except BadInput:
        return False
    return check_signature(keys.message, signers, identity, now).outcome is Outcome.VERIFIED


def test_library_decides_as_ssh_keygen(keys: Keys, tmp_path: Path, local_zone: None) -> None:
    cases = []
    for i, (data, identity) in enumerate(_cases(CASES, keys, NOW, close=True)):
        allowed = tmp_path / f"allowed_signers.{i}"
        allowed.write_bytes(data)
        cases.append((allowed, identity))
    with ThreadPoolExecutor(4) as pool:  # ssh-keygen runs while the others wait on theirs
        theirs = list(pool.map(lambda c: ssh_keygen_accepts(c[0], c[1], keys, NOW), cases))
    ours = [patchkit_accepts(allowed, identity, keys, NOW) for allowed, identity in cases]
    disagreements = [(c[1], c[0].read_bytes(), t) for c, t, o in zip(cases, theirs, ours, strict=True) if t != o]
    assert not disagreements, f"{len(disagreements)} of {CASES}; first: {disagreements[:3]}"
    assert CASES < 50 or 0.1 < sum(theirs) / CASES < 0.9  # the generator exercises both verdicts


def test_cli_decides_as_ssh_keygen(keys: Keys, tmp_path: Path, local_zone: None, invoke: Invoke) -> None:
    now = datetime.now(UTC)
    allowed = tmp_path / "allowed_signers"
    disagreements = []
    for data, identity in list(_cases(CASES, keys, now, close=False))[:CLI_SAMPLE]:
        allowed.write_bytes(data)
        theirs = ssh_keygen_accepts(allowed, identity, keys, None)
        r = invoke("verify", "--allowed-signers", str(allowed), "-I", identity, str(keys.message))
        assert r.exit_code in (0, 1, 2) and "Traceback" not in r.stderr, r.stderr
        if theirs != (r.exit_code == 0):
            disagreements.append((identity, data, theirs, r.stdout + r.stderr))
    assert not disagreements, disagreements[:3]


@pytest.mark.parametrize(
    ("principals", "identity", "accepted"),
    [
        ("!rel,*", "rel", False),
        ("!rel,*", "alice", True),
        ("*,!rel", "rel", False),
        ("r?", "ré", False),  # ? is one byte, and é is two
        ("r??", "ré", True),
        ("!r?,*", "ré", True),
        ("!" + "x" * 1030 + ",*", "alice", False),  # an over-long subpattern ends the list with no match
        ("alice,", "alice", True),
        ('"!rel, *"', "alice", False),  # the blank belongs to the pattern " *"
        ("ALICE", "alice", False),
        ('"!rel",*', "alice", False),  # the field is !rel; ",*" is read as options, which are invalid
        ('!rel,"*"', "alice", True),
        ("!rel\xa0,*", "rel", True),  # a no-break space is not a blank: the negation is "rel\xa0"
    ],
)
def test_named_patterns(keys: Keys, tmp_path: Path, principals: str, identity: str, accepted: bool) -> None:
    allowed = tmp_path / "allowed_signers"
    allowed.write_bytes(f"{principals} {keys.signer.public_line}\n".encode())
    assert ssh_keygen_accepts(allowed, identity, keys, NOW) is accepted
    assert patchkit_accepts(allowed, identity, keys, NOW) is accepted


def test_a_malformed_line_is_skipped_as_ssh_keygen_skips_it(keys: Keys, tmp_path: Path, invoke: Invoke) -> None:
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'alice colour="red" {keys.signer.public_line}\nalice {keys.signer.public_line}\n')
    assert ssh_keygen_accepts(allowed, "alice", keys, None)
    assert invoke("verify", "--allowed-signers", str(allowed), "-I", "alice", str(keys.message)).exit_code == 0
    allowed.write_text(f'alice colour="red" {keys.signer.public_line}\n')
    r = invoke("verify", "--allowed-signers", str(allowed), "-I", "alice", str(keys.message))
    assert r.exit_code == 2 and "allowed_signers:1: unknown option 'colour'" in r.stderr


def test_verify_shows_a_listed_name_with_a_newline_on_one_line(keys: Keys, tmp_path: Path, invoke: Invoke) -> None:
    listed = tmp_path / "SHA256SUMS"
    listed.write_bytes(b"\\" + b"0" * 64 + b"  x\\ny\n")  # the escaped name "x<newline>y"
    keygen_sign(keys.signer.private, listed)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"alice {keys.signer.public_line}\n")
    r = invoke("verify", "--allowed-signers", str(allowed), "-I", "alice", str(listed))
    assert r.exit_code == 1
    assert "       x\\ny: 'x\\ny' contains a control character" in r.stdout
    assert not any(line.startswith("y:") for line in r.stdout.splitlines())
