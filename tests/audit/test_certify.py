"""Recorded audits: certify with a real ssh-keygen key, a bump that changes two patches and moves a third,
`check` naming the two with their interdiffs, delta certification, forged and re-signed entries refused,
and every signature checked by stock `ssh-keygen -Y verify`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import Invoke, git
from tests.rebase.test_overlays import WORKER, Upstream, make_deploy
from tests.signing.conftest import KeyPair, make_key, ssh_keygen

A = b"import os\n\n" + WORKER.replace(b"class Restorer", b"class RestorerA")
B = b"import sys\n\n" + WORKER.replace(b"class Restorer", b"class RestorerB")
C = b"import re\n\n" + WORKER.replace(b"class Restorer", b"class RestorerC")
FENCE = (b"        for b in blocks:\n", b"        self.stream.synchronize()\n        for b in blocks:\n")
SYNC = (b"    return [b.cpu() for b in blocks]", b"    return [b.cpu(non_blocking=False) for b in blocks]")


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "vllm")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[KeyPair, KeyPair]:
    d = tmp_path_factory.mktemp("auditkeys")
    return make_key(d, "alice", "ed25519"), make_key(d, "mallory", "ed25519")


@pytest.fixture
def deployment(invoke: Invoke, tmp_path: Path, upstream: Upstream, keys: tuple[KeyPair, KeyPair]) -> Path:
    """Three overlays (a: two hunks, b, c) on a git upstream, with alice allowed to sign audits."""
    c1 = upstream.commit({"vllm/a.py": A, "vllm/b.py": B, "vllm/c.py": C})
    patched = {
        "vllm/a.py": A.replace(*FENCE).replace(*SYNC),
        "vllm/b.py": B.replace(*FENCE),
        "vllm/c.py": C.replace(*FENCE),
    }
    root = make_deploy(invoke, tmp_path, upstream, c1, patched)
    alice = keys[0].public_line.split()
    (root / "allowed_signers").write_text(f'alice@test namespaces="patchkit,patchkit-audit" {alice[0]} {alice[1]}\n')
    with (root / "lockfile.toml").open("a") as f:
        f.write('\n[signing]\nallowed_signers = "allowed_signers"\nfiles = ["allowed_signers"]\n')
    assert invoke("lock", repo=root).exit_code == 0
    assert invoke("sign", "--key", str(keys[0].private), repo=root).exit_code == 0
    git(root, "add", "-A")
    git(root, "commit", "-qm", "signing")
    return root


def certify(invoke: Invoke, root: Path, key: KeyPair, name: str, *extra: str) -> dict[str, object]:
    r = invoke(
        "audit",
        "certify",
        name,
        "--criteria",
        "safe-to-deploy",
        "--key",
        str(key.private),
        "--format",
        "json",
        *extra,
        repo=root,
    )
    assert r.exit_code == 0, r.stdout + r.stderr
    doc: dict[str, object] = json.loads(r.stdout)
    return doc


def check_codes(invoke: Invoke, root: Path) -> tuple[int, list[dict[str, object]]]:
    r = invoke("check", "--format", "json", repo=root)
    doc = json.loads(r.stdout)
    return r.exit_code, [f for f in doc["findings"] if str(f["code"]).startswith("audit-")]


def keygen_verifies(invoke: Invoke, root: Path, index: int, who: str = "alice@test") -> bool:
    statement = invoke("audit", "statement", str(index), repo=root).result.stdout_bytes
    sig = root.parent / f"audit{index}.sig"
    sig.write_bytes(invoke("audit", "statement", str(index), "--signature", repo=root).result.stdout_bytes)
    r = ssh_keygen(
        "-Y", "verify", "-f", str(root / "allowed_signers"), "-I", who, "-n", "patchkit-audit", "-s", str(sig),
        stdin=statement,
    )  # fmt: skip
    return r.returncode == 0


def test_certified_patches_pass_and_stock_ssh_keygen_verifies_each_entry(
    invoke: Invoke, deployment: Path, keys: tuple[KeyPair, KeyPair]
) -> None:
    code, found = check_codes(invoke, deployment)
    assert code == 0 and found == []  # no audits.toml: no policy, nothing to say
    made = certify(invoke, deployment, keys[0], "a")
    assert made["who"] == "alice@test" and made["criteria"] == ["safe-to-deploy"]
    code, found = check_codes(invoke, deployment)
    assert code == 1
    assert sorted((f["code"], re.findall(r"'(\w)'", str(f["message"]))[0]) for f in found) == [
        ("audit-missing", "b"),
        ("audit-missing", "c"),
    ]
    certify(invoke, deployment, keys[0], "b")
    certify(invoke, deployment, keys[0], "c", "--notes", "read every line")
    assert check_codes(invoke, deployment) == (0, [])
    assert all(keygen_verifies(invoke, deployment, i) for i in range(3))
    # The reviewed texts are kept for later interdiffs: each is the diff the auditor read.
    diff_a = next((deployment / "upstream").glob("a*.diff")).read_bytes()
    reviewed = deployment / "audits" / "reviewed" / str(made["reviewed_sha256"])
    assert reviewed.read_bytes() == diff_a
    status = invoke("audit", "status", repo=deployment)
    assert status.exit_code == 0 and status.stdout.count(": safe-to-deploy: audited (alice@test ") == 3


def test_a_bump_that_changes_two_patches_and_moves_a_third(
    invoke: Invoke, deployment: Path, upstream: Upstream, keys: tuple[KeyPair, KeyPair]
) -> None:
    for name in ("a", "b", "c"):
        certify(invoke, deployment, keys[0], name)
    # Upstream takes one of a's two hunks (a shrinks) and adds lines far above c's patch (a pure move).
    newer = upstream.commit(
        {
            "vllm/a.py": A.replace(*SYNC),
            "vllm/b.py": B,
            "vllm/c.py": b"import logging\nimport json\n" + C,
        }
    )
    summary = deployment.parent / "summary.md"
    r = invoke("rebase", "--onto", newer, "--summary", str(summary), repo=deployment)
    assert r.exit_code == 0, r.stdout + r.stderr
    # The pull request names the patch that now needs review, with its interdiff, and not the moved one.
    needed = summary.read_text().split("## Reviews needed\n", 1)[1]
    assert "- `a` (safe-to-deploy): changed since its audit: `patchkit audit certify a --delta`" in needed
    assert "  -+    return [b.cpu(non_blocking=False) for b in blocks]" in needed
    assert "`b`" not in needed and "`c`" not in needed
    # A maintainer also changes b by hand.
    overlay_b = deployment / "patches" / "b.py"
    overlay_b.write_bytes(
        overlay_b.read_bytes().replace(b"self.stream.synchronize()", b"self.stream.wait_stream(None)")
    )
    assert invoke("lock", repo=deployment).exit_code == 0
    code, found = check_codes(invoke, deployment)
    assert code == 1
    by = {re.findall(r"'(\w)'", str(f["message"]))[0]: f for f in found}
    assert {k: v["code"] for k, v in by.items()} == {
        "a": "audit-needs-delta",
        "b": "audit-needs-delta",
        "c": "audit-carried-over",
    }
    assert by["c"]["severity"] == "note"
    assert "the patch shrank" in str(by["a"]["message"])
    assert "-+    return [b.cpu(non_blocking=False) for b in blocks]" in str(by["a"]["message"])
    assert "+        self.stream.wait_stream(None)" in str(by["b"]["message"])
    assert "patchkit audit certify b --delta --criteria safe-to-deploy" in str(by["b"]["fix"])
    # Delta audits chain to the earlier reviews; then nothing is left to review.
    delta = certify(invoke, deployment, keys[0], "a", "--delta")
    assert delta["delta_from"] and delta["delta_from"] != delta["reviewed_sha256"]
    certify(invoke, deployment, keys[0], "b", "--delta")
    code, found = check_codes(invoke, deployment)
    assert code == 0 and [f["code"] for f in found] == ["audit-carried-over"]
    assert keygen_verifies(invoke, deployment, 3) and keygen_verifies(invoke, deployment, 4)
    status = json.loads(invoke("audit", "status", "--format", "json", repo=deployment).stdout)
    assert {p["patch"]: p["status"] for p in status["patches"]} == {"a": "audited", "b": "audited", "c": "carried over"}
    assert status["ok"] is True


def test_a_forged_or_re_signed_entry_counts_for_nothing(
    invoke: Invoke, deployment: Path, keys: tuple[KeyPair, KeyPair]
) -> None:
    certify(invoke, deployment, keys[0], "a")
    audits = deployment / "audits.toml"
    good = audits.read_text()
    # Forged: the entry now claims another patch; its signature no longer covers it.
    audits.write_text(good.replace('patch = "a"', 'patch = "b"'))
    code, found = check_codes(invoke, deployment)
    assert code == 1 and "audit-forged" in [f["code"] for f in found]
    assert {f["code"] for f in found if "'b'" in str(f["message"])} >= {"audit-missing"}
    # Re-signed by a key the allowed signers do not hold for alice: refused, though well-formed.
    mallory = keys[1]
    audits.write_text(good)
    r = invoke("audit", "certify", "b", "--criteria", "safe-to-deploy", "--key", str(mallory.private), repo=deployment)
    assert r.exit_code == 2 and "may not sign audits" in r.stderr
    assert audits.read_text() == good
    statement = invoke("audit", "statement", "0", repo=deployment).result.stdout_bytes
    msg = deployment.parent / "stmt"
    msg.write_bytes(statement)
    s = ssh_keygen("-Y", "sign", "-f", str(mallory.private), "-n", "patchkit-audit", str(msg))
    assert s.returncode == 0, s.stderr
    forged_sig = (deployment.parent / "stmt.sig").read_text()
    start, end = good.index('signature = """') + len('signature = """'), good.rindex('"""')
    audits.write_text(good[:start] + forged_sig + good[end:])
    code, found = check_codes(invoke, deployment)
    assert code == 1 and [f["code"] for f in found if f["code"] == "audit-forged"] == ["audit-forged"]
    assert "is not in the allowed signers" in next(str(f["message"]) for f in found if f["code"] == "audit-forged")


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda t: t.replace('who = "alice@test"', "who = 3"), "audit[0].who: must be a non-empty string"),
        (
            lambda t: t.replace('criteria = [\n    "safe-to-deploy",\n]', 'criteria = ["nope"]'),
            "unknown criterion 'nope'",
        ),
        (lambda t: t + "\n[[audit]]\npatch = 'a'\n", "audit[1].criteria: must be an array"),
        (lambda t: t.replace('reviewed_sha256 = "', 'reviewed_sha256 = "zz'), "is not a sha256"),
        (lambda t: t + "\n[extra]\n", "extra: unknown table"),
        (lambda t: "not = [toml", "not valid TOML"),
        # What tomllib fails on without a TOMLDecodeError: an integer too long to convert, nesting past the stack.
        (lambda t: t + "\nx = " + "1" * 4301 + "\n", "holds an integer of more than"),
        (lambda t: t + "\nx = " + "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
        (lambda t: t.replace("\n", "\r \n", 1), "audits.toml:1: not valid TOML"),
    ],
)
def test_a_broken_audits_file_is_one_clear_line(
    invoke: Invoke, deployment: Path, keys: tuple[KeyPair, KeyPair], edit: object, said: str
) -> None:
    certify(invoke, deployment, keys[0], "a")
    audits = deployment / "audits.toml"
    audits.write_bytes(edit(audits.read_text()).encode())  # type: ignore[operator]
    for args in (("check",), ("audit", "status")):
        r = invoke(*args, repo=deployment)
        assert r.exit_code == 2, (args, r.stdout, r.stderr)
        assert said in r.stderr and "audits.toml" in r.stderr and "Traceback" not in r.stderr


def test_bad_requests_change_nothing(invoke: Invoke, deployment: Path, keys: tuple[KeyPair, KeyPair]) -> None:
    alice = str(keys[0].private)
    cases = [
        (("audit", "certify", "nosuch", "--criteria", "safe-to-deploy", "--key", alice), "no patch 'nosuch'"),
        (("audit", "certify", "a", "--criteria", "typo", "--key", alice), "unknown criterion 'typo'"),
        (("audit", "certify", "a", "--delta", "--criteria", "safe-to-deploy", "--key", alice), "no earlier audit"),
        (("audit", "statement", "0"), "no audit[0]"),
        (("audit", "status"), "no audits.toml"),
        (("audit", "--since", "HEAD", "status"), "are for the report"),
    ]
    for args, said in cases:
        r = invoke(*args, repo=deployment)
        assert r.exit_code == 2 and said in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert not (deployment / "audits.toml").exists() and not (deployment / "audits").exists()
    certify(invoke, deployment, keys[0], "a")
    r = invoke("audit", "certify", "a", "--delta", "--criteria", "safe-to-deploy", "--key", alice, repo=deployment)
    assert r.exit_code == 2 and "has not changed since its last audit" in r.stderr


def test_the_report_is_still_the_default(invoke: Invoke, deployment: Path) -> None:
    r = invoke("audit", "--format", "json", repo=deployment)
    assert r.exit_code == 0 and {p["name"] for p in json.loads(r.stdout)["patches"]} == {"a", "b", "c"}


def test_audits_imported_from_another_repository_count_when_a_trusted_signer_made_them(
    invoke: Invoke, deployment: Path, tmp_path: Path, keys: tuple[KeyPair, KeyPair]
) -> None:
    import shutil

    # Another organisation runs the same patch "a" (same bytes) in its own repository, reviewed by bob.
    bob = make_key(tmp_path, "bob", "ed25519")
    other = tmp_path / "other"
    shutil.copytree(deployment, other)
    bob_line = bob.public_line.split()
    line = f'bob@other namespaces="patchkit-audit" {bob_line[0]} {bob_line[1]}\n'
    (other / "allowed_signers").write_text(line)
    made = certify(invoke, other, bob, "a", "--notes", "reviewed at the other org")
    git(other, "add", "-A")
    git(other, "commit", "-qm", "audits")
    rev = git(other, "rev-parse", "HEAD").strip()
    # This repository trusts bob's key for audits, and imports the other repository's audits pinned.
    with (deployment / "allowed_signers").open("a") as f:
        f.write(line)
    r = invoke("audit", "import", "other", "--from", str(other), "--rev", rev, "--trust", "bob@other", repo=deployment)
    assert r.exit_code == 0, r.stdout + r.stderr
    copy = deployment / "audits" / "imported" / "other.toml"
    assert copy.read_bytes() == (other / "audits.toml").read_bytes()
    status = json.loads(invoke("audit", "status", "--format", "json", repo=deployment).stdout)
    assert {p["patch"]: p["status"] for p in status["patches"]} == {
        "a": "audited",
        "b": "unaudited",
        "c": "unaudited",
    }, status
    shown = invoke("audit", "status", repo=deployment).stdout
    assert f"a: safe-to-deploy: audited (bob@other {made['date']} via import other)" in shown
    # Not trusted for this import: the same file counts for nothing, and says why.
    r = invoke("audit", "import", "other", "--from", str(other), "--rev", rev, "--trust", "carol@*", repo=deployment)
    assert r.exit_code == 0, r.stderr
    code, found = check_codes(invoke, deployment)
    assert "audit-import-untrusted" in [f["code"] for f in found]
    assert any(f["code"] == "audit-missing" and "'a'" in str(f["message"]) for f in found)
    # The copy edited after import: refused as a whole.
    invoke("audit", "import", "other", "--from", str(other), "--rev", rev, "--trust", "bob@other", repo=deployment)
    copy.write_text(copy.read_text().replace("reviewed at the other org", "reviewed by everyone"))
    code, found = check_codes(invoke, deployment)
    assert code == 1 and "audit-import-changed" in [f["code"] for f in found]
    # A revision or file the other repository lacks: one line, nothing written.
    before = (deployment / "audits.toml").read_bytes()
    for args, said in (
        (("--rev", "0" * 40, "--trust", "bob@other"), "0000000"),
        (("--rev", rev, "--path", "nope.toml", "--trust", "bob@other"), "no file nope.toml"),
        (("--rev", rev), "--trust PRINCIPAL"),
    ):
        r = invoke("audit", "import", "other", "--from", str(other), *args, repo=deployment)
        assert r.exit_code in (1, 2, 3) and said in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert (deployment / "audits.toml").read_bytes() == before


def test_the_report_shows_who_reviewed_what_and_the_change_nobody_reviewed(
    invoke: Invoke, deployment: Path, upstream: Upstream, keys: tuple[KeyPair, KeyPair]
) -> None:
    certify(invoke, deployment, keys[0], "a")
    certify(invoke, deployment, keys[0], "b")
    overlay_b = deployment / "patches" / "b.py"
    overlay_b.write_bytes(
        overlay_b.read_bytes().replace(b"self.stream.synchronize()", b"self.stream.wait_stream(None)")
    )
    assert invoke("lock", repo=deployment).exit_code == 0
    doc = json.loads(invoke("audit", "--format", "json", repo=deployment).stdout)
    reviews = {p["name"]: p["reviews"] for p in doc["patches"]}
    assert [(r["criterion"], r["status"]) for r in reviews["a"]] == [("safe-to-deploy", "audited")]
    assert reviews["a"][0]["by"][0].startswith("alice@test ")
    assert reviews["b"][0]["status"] == "needs a delta audit"
    assert "++        self.stream.wait_stream(None)" in reviews["b"][0]["change"]
    assert reviews["c"][0]["status"] == "unaudited" and reviews["c"][0]["by"] == []
    md = invoke("audit", "--format", "markdown", repo=deployment).stdout
    assert "- ⚠️ review, safe-to-deploy: **needs a delta audit** — alice@test " in md
    assert "- ⚠️ review, safe-to-deploy: **unaudited**" in md
    html = invoke("audit", "--format", "html", repo=deployment).stdout
    assert "<h3>Reviews</h3>" in html and "needs a delta audit</span>" in html
    assert "+        self.stream.wait_stream(None)" in html


def test_the_sbom_carries_each_patchs_reviews(invoke: Invoke, deployment: Path, keys: tuple[KeyPair, KeyPair]) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    made = certify(invoke, deployment, keys[0], "a")
    r = invoke("sbom", repo=deployment)
    assert r.exit_code == 0, r.stderr
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(r.stdout) is None
    comps = {c["bom-ref"]: c for c in json.loads(r.stdout)["components"]}
    reviews = {
        ref.removeprefix("patch:"): {p["name"]: p["value"] for p in c.get("properties", [])}
        for ref, c in comps.items()
        if ref.startswith("patch:")
    }
    assert reviews["a"]["patchkit:review:safe-to-deploy"] == f"audited (alice@test {made['date']})"
    assert reviews["b"]["patchkit:review:safe-to-deploy"] == "unaudited"


def test_a_series_patch_is_certified_by_series_and_name(
    invoke: Invoke, tmp_path: Path, keys: tuple[KeyPair, KeyPair]
) -> None:
    from tests.series.queue import build_queue, lockfile_text

    q = build_queue(tmp_path)
    alice = keys[0].public_line.split()
    (q.root / "allowed_signers").write_text(f'alice@test namespaces="patchkit,patchkit-audit" {alice[0]} {alice[1]}\n')
    signing = '\n[signing]\nallowed_signers = "allowed_signers"\nfiles = ["allowed_signers"]\n'
    (q.root / "lockfile.toml").write_text(lockfile_text(q) + signing)
    assert invoke("lock", repo=q.root).exit_code == 0
    assert invoke("sign", "--key", str(keys[0].private), repo=q.root).exit_code == 0
    r = invoke("audit", "status", repo=q.root)
    assert r.exit_code == 2 and "no audits.toml here yet" in r.stderr
    made = certify(invoke, q.root, keys[0], "flashinfer/" + next(iter(_series_patches(q.root, "flashinfer"))))
    doc = json.loads(invoke("audit", "status", "--format", "json", repo=q.root).stdout)
    states = {p["patch"]: p["status"] for p in doc["patches"]}
    assert states[str(made["patch"])] == "audited"
    assert sum(1 for v in states.values() if v == "unaudited") == len(states) - 1 >= 3
    reviewed = q.root / "audits" / "reviewed" / str(made["reviewed_sha256"])
    patch_file = next((q.root / "patches" / "flashinfer").glob("*.patch"))
    assert reviewed.read_bytes() == patch_file.read_bytes()


def _series_patches(root: Path, series: str) -> list[str]:
    import tomllib

    lock = tomllib.loads((root / "lockfile.toml").read_text())
    return [p["name"] for p in lock["series"][series]["patches"]]
