"""The steps of ``--normalize`` on their own: the base read from upstream, and why none could be had."""

from __future__ import annotations

from patchkit.core.values import Revision, UpstreamPath
from patchkit.errors import BadInput
from patchkit.importing.normalize import _fetched, _no_base
from patchkit.lockfile.model import GitUpstream

FULL = "a" * 40
UP = GitUpstream(name="vllm", git="https://github.com/vllm-project/vllm", commit=Revision(FULL))
PATH = UpstreamPath("vllm/x.py")


def test_the_fetched_base_must_equal_the_one_the_diffs_rebuild() -> None:
    assert _fetched(lambda up, path, commit: b"base\n", UP, PATH, FULL, None) == b"base\n"
    assert _fetched(lambda up, path, commit: b"base\n", UP, PATH, FULL, b"base\n") == b"base\n"
    assert _fetched(lambda up, path, commit: b"base\n", UP, PATH, FULL, b"other\n") == (
        f"its diffs rebuild a base that is not vllm/x.py at {FULL[:12]} in upstream 'vllm' "
        "(a diff is stale beyond its hunks, or the stated commit is wrong)"
    )
    assert (
        _fetched(lambda up, path, commit: None, UP, PATH, FULL, None)
        == f"upstream 'vllm' has no vllm/x.py at {FULL[:12]}"
    )


def test_an_upstream_that_cannot_be_read_says_why() -> None:
    def failing(up: object, path: object, commit: object) -> bytes:
        raise BadInput("network down")

    assert (
        _fetched(failing, UP, PATH, FULL, None)
        == f"cannot read vllm/x.py at {FULL[:12]} from upstream 'vllm': network down"
    )


def test_without_a_base_the_reason_says_what_fetch_would_change() -> None:
    fetch = lambda up, path, commit: None  # noqa: E731
    assert (
        _no_base("it has no diff", None, FULL)
        == f"it has no diff; --fetch would read the base from upstream at {FULL[:12]}"
    )
    assert _no_base("it has no diff", fetch, None) == (
        "it has no diff; no full base commit is stated to read the base from upstream"
    )
    assert _no_base("it has no diff", None, None) == "it has no diff"
    assert _no_base("it has no diff", fetch, FULL) == "it has no diff"
