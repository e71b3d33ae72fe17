"""Image names written the ways Docker accepts them name one repository."""

from __future__ import annotations

import pytest

from patchkit.oci.ref import repository_key, same_repository

SAME = [
    ("python:3.12", "docker.io/library/python:3.12"),
    ("python", "index.docker.io/library/python@sha256:" + "ab" * 32),
    ("library/python", "registry-1.docker.io/library/python"),
    ("rocm/vllm", "docker.io/rocm/vllm:v0.11.0"),
    ("rocm/vllm:nightly", "index.docker.io/rocm/vllm"),
    ("ghcr.io/o/r:1", "ghcr.io/o/r@sha256:" + "cd" * 32),
    ("localhost:5000/x", "localhost:5000/x:tag"),
]
OTHER = [
    ("python", "rocm/python"),
    ("rocm/vllm", "ghcr.io/rocm/vllm"),
    ("docker.io/rocm/vllm", "quay.io/rocm/vllm"),
    ("localhost:5000/x", "localhost:5001/x"),
    ("vllm/vllm-openai", "vllm/vllm-openai-rocm"),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_names_docker_resolves_to_one_repository_are_the_same(a: str, b: str) -> None:
    assert same_repository(a, b) and same_repository(b, a)
    assert repository_key(a) == repository_key(b) is not None


@pytest.mark.parametrize(("a", "b"), OTHER)
def test_other_repositories_are_not(a: str, b: str) -> None:
    assert not same_repository(a, b)


def test_a_name_that_is_no_reference_is_compared_as_written() -> None:
    assert repository_key("Not An Image") is None
    assert same_repository("$BASE", "$BASE") and not same_repository("$BASE", "python")
