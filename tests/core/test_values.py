from __future__ import annotations

import pytest

from patchkit.core.values import (
    ContainerPath,
    Digest,
    Reference,
    RepoPath,
    Revision,
    Sha256,
    UpstreamPath,
    check_name,
    is_loopback,
)

HEX64 = "e68d18b2ba50298661bfc49baf01158fbf036645c2362cccf3e8a7a79fe6c69a"


def test_digest_accepts_exact_form() -> None:
    d = Digest(f"sha256:{HEX64}")
    assert d.hex == HEX64
    assert str(d) == f"sha256:{HEX64}"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (f"sha256:{HEX64[:63]}", "got 63"),
        (f"sha256:{HEX64.upper()}", "uppercase"),
        (HEX64, "sha256:"),
        (f"sha512:{HEX64}", "sha256:"),
        (f"sha256:{HEX64}0", "got 65"),
    ],
)
def test_digest_refuses(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Digest(text)


def test_sha256_refuses_short_and_uppercase() -> None:
    with pytest.raises(ValueError, match="64 lowercase hex"):
        Sha256(HEX64[:63])
    with pytest.raises(ValueError, match="64 lowercase hex"):
        Sha256(HEX64.upper())


@pytest.mark.parametrize("text", ["main", "v0.26.0", "124154a88", "124154A8843D1F8E4D4E2D5D466E2D3EBC3716DA"])
def test_revision_refuses_branches_tags_and_short_ids(text: str) -> None:
    with pytest.raises(ValueError, match="not a full commit id"):
        Revision(text)


def test_revision_accepts_full_commit() -> None:
    assert Revision("124154a8843d1f8e4d4e2d5d466e2d3ebc3716da").short == "124154a8843d"


@pytest.mark.parametrize("text", ["usr/lib/x.py", "/usr/../etc/x", "/usr//x", "/usr/x/", "/a/./b"])
def test_container_path_must_be_absolute_and_normalised(text: str) -> None:
    with pytest.raises(ValueError):
        ContainerPath(text)


@pytest.mark.parametrize("text", ["../x", "patches/../../etc/passwd", "/etc/passwd", "a//b", "a\\b", "./a", ""])
def test_repo_path_stays_inside(text: str) -> None:
    with pytest.raises(ValueError):
        RepoPath(text)


def test_references() -> None:
    assert not Reference("vllm-project/vllm#47291").is_commit
    assert Reference(f"https://github.com/vllm-project/vllm/commit/{'a' * 40}").is_commit
    for bad in ["#47291", "vllm#1", "vllm-project/vllm#0", "https://example.com/x/y/commit/" + "a" * 40]:
        with pytest.raises(ValueError, match="not a reference"):
            Reference(bad)


def test_names() -> None:
    assert check_name("kv-restore.fence_2") == "kv-restore.fence_2"
    for bad in ["Upper", "-x", "a b", "x/y", ""]:
        with pytest.raises(ValueError):
            check_name(bad)


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST:5000", True),
        ("registry.localhost:5000", True),
        ("127.0.0.1", True),
        ("127.1.2.3:8000", True),
        ("[::1]", True),
        ("[::1]:5000", True),
        ("::1", True),
        ("0.0.0.0", False),  # noqa: S104 - the address every interface is, as data
        ("10.0.0.1:5000", False),
        ("localhost.example.com", False),
        ("[::]:80", False),
        ("ghcr.io", False),
        ("", False),
    ],
)
def test_one_loopback_rule_for_registries_and_published_ports(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def _outcome(cls: type, text: str) -> str:
    try:
        cls(text)
    except ValueError as e:
        return f"refused: {e}"
    return "accepted"


@pytest.mark.parametrize(
    ("cls", "plain"),
    [(RepoPath, "_PLAIN_REPO"), (UpstreamPath, "_PLAIN_UPSTREAM"), (ContainerPath, "_PLAIN_CONTAINER")],
)
def test_the_one_match_for_plain_paths_accepts_only_what_every_check_accepts(
    cls: type, plain: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import itertools
    import re

    from patchkit.core import values

    alphabet = ["a", ".", "/", "\\", "\x00", "\n", "\r", "\t", "\x7f", "\ud800", "é", " "]
    texts = ["".join(t) for n in range(6) for t in itertools.product(alphabet, repeat=n) if n < 5 or t[0] in "/a."]
    texts += ["patches/m1.py", "/usr/lib/python3/dist-packages/pkg/mod.py", "a/../b", "a/./b", "..a/b..", "a//b"]
    fast = [_outcome(cls, t) for t in texts]
    monkeypatch.setattr(values, plain, re.compile(r"(?!)"))  # every path takes the checks one by one
    assert fast == [_outcome(cls, t) for t in texts]
    assert fast.count("accepted") > 100
