"""Upstream pins read from a repository's own lock and build files by what their keys mean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.importing import dockerfile, pins

C1 = "3a1e5c7b9d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c"
C2 = "8c6e4a2f0d8b6a4c2e0f8d6b4a2c0e8f6d4b2a0c"


def _triples(found: list[pins.Pin]) -> set[tuple[str, str, str, int]]:
    return {(p.name, p.what, p.value, p.line) for p in found}


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (f"VLLM_COMMIT={C1}", ("vllm", "commit", C1)),
        (f"VLLM_SHA={C1}", ("vllm", "commit", C1)),
        (f"VLLM_REV={C1[:12]}", ("vllm", "commit", C1[:12])),
        (f"VLLM_BASE_COMMIT={C1}", ("vllm", "commit", C1)),
        (f'export AITER_COMMIT="{C1}"', ("aiter", "commit", C1)),
        (f"AITER_COMMIT='{C1}'  # gfx942", ("aiter", "commit", C1)),
        ("VLLM_TAG=v0.11.0", ("vllm", "version", "v0.11.0")),
        ("VLLM_VERSION=0.11.0rc1", ("vllm", "version", "0.11.0rc1")),
        ("VLLM_REF=v0.11.0", ("vllm", "version", "v0.11.0")),  # a ref that is not a commit is a tag
        ("AITER_REPO=https://github.com/ROCm/aiter.git", ("aiter", "git", "https://github.com/ROCm/aiter.git")),
        ("AITER_URL=git+https://github.com/ROCm/aiter", ("aiter", "git", "git+https://github.com/ROCm/aiter")),
        ("TRITON_GIT=git@github.com:t-l/triton.git", ("triton", "git", "git@github.com:t-l/triton.git")),
        ("VLLM_REPO=vllm-project/vllm", ("vllm", "git", "vllm-project/vllm")),
        (f"VLLM-RELEASE-COMMIT={C1}", ("vllm", "release", C1)),
    ],
)
def test_key_value_spellings(line: str, want: tuple[str, str, str]) -> None:
    assert _triples(pins.key_values("upstream.lock", f"# pins\n{line}\n")) == {(*want, 2)}


@pytest.mark.parametrize(
    "line",
    [
        "BASE_IMAGE=rocm/vllm:latest",  # an image, not an upstream
        "VLLM_COMMIT=main",  # a branch is no pin
        "VLLM_COMMIT=${UPSTREAM}",  # a variable is no value
        "HF_TOKEN=hf_abcdef",  # not a pin at all
        "# VLLM_COMMIT=" + C1,  # commented out
        "COMMIT=" + C1,  # names no upstream
        "VLLM_REPO=eviction and write",  # prose is no repository
        # an image's or a model's repository is no code upstream
        "IMAGE_REPO=vllm/vllm-openai",
        'BASE_IMAGE_REPO="rocm/vllm"',
        "VLLM_IMAGE_REPO=rocm/vllm-dev",
        "DOCKER_REPO=rocm/vllm",
        "REGISTRY_REPOSITORY=ghcr.io/o/vllm",
        "MODEL_REPO=Qwen/Qwen3-8B",
        "HF_REPO=meta-llama/Llama-3.1-8B",
        "MODEL_URL=https://huggingface.co/Qwen/Qwen3-8B",
        "TOKENIZER_REPO=Qwen/Qwen3-8B",
        # where a service listens is no repository
        "VLLM_URL=http://127.0.0.1:8001",
        "VLLM_URL=http://localhost:8000/v1",
        "VLLM_SERVER_URL=http://vllm:8000/v1/models",
        "VLLM_API_URL=https://vllm.internal.example:443/v1/chat",
        "AITER_URL=https://example.com/health?full=1",
    ],
)
def test_what_is_not_a_pin_is_not_read_as_one(line: str) -> None:
    assert pins.key_values("upstream.lock", line + "\n") == []


def test_a_json_stack_lock_at_any_depth() -> None:
    doc = {
        "repository": "https://github.com/vllm-project/vllm",
        "base_commit": C1,
        "release_commit": C2,
        "package_base": "vllm==0.11.0",
        "patches": [{"name": "0001-fence.patch", "sha256": "ab" * 32, "base_commit": C2}],  # per patch: not a pin
        "upstreams": [{"name": "aiter", "commit": C2}, {"repo": "triton-lang/triton", "rev": C1}],
        "deps": {"flash-attn": {"git": "https://github.com/ROCm/flash-attention", "commit": C2}},
    }
    text = json.dumps(doc, indent=2)
    got = {(p.name, p.what, p.value) for p in pins.json_lock("stack.lock.json", text)}
    assert got == {
        ("vllm", "git", "https://github.com/vllm-project/vllm"),
        ("vllm", "commit", C1),
        ("vllm", "release", C2),
        ("vllm", "version", "0.11.0"),
        ("aiter", "commit", C2),
        ("triton", "git", "triton-lang/triton"),
        ("triton", "commit", C1),
        ("flash-attention", "git", "https://github.com/ROCm/flash-attention"),
        ("flash-attention", "commit", C2),
    }
    lines = text.splitlines()
    for p in pins.json_lock("stack.lock.json", text):
        assert p.value in lines[p.line - 1] or p.value.replace("vllm==", "") in lines[p.line - 1]


def test_dockerfile_args_are_pins_with_their_lines(tmp_path: Path) -> None:
    text = f"ARG VLLM_REPO=https://github.com/vllm-project/vllm\nFROM x@sha256:{'a' * 64}\nARG VLLM_COMMIT={C1}\n"
    build = dockerfile.read(tmp_path, "Containerfile", text)
    assert _triples(pins.from_build(build)) == {
        ("vllm", "git", "https://github.com/vllm-project/vllm", 1),
        ("vllm", "commit", C1, 3),
    }


def test_pins_agree_or_are_reported() -> None:
    a = pins.Pin("vllm", "commit", C1, "upstream.lock", 2)
    short = pins.Pin("vllm", "commit", C1[:10], "Dockerfile", 4)
    other = pins.Pin("vllm", "commit", C2, "stack.lock.json", 3)
    tag = pins.Pin("vllm", "version", "v0.11.0", "upstream.lock", 1)
    same_tag = pins.Pin("vllm", "version", "0.11.0", "stack.lock.json", 5)
    stated, conflicts = pins.agree([short, a, tag, same_tag])
    assert (stated["vllm"].commit, stated["vllm"].where["commit"], conflicts) == (C1, "upstream.lock:2", [])
    stated, conflicts = pins.agree([a, other, short])
    assert stated["vllm"].commit is None and conflicts == [(a, other)]
    url1 = pins.Pin("aiter", "git", "https://github.com/ROCm/aiter.git", "a", 1)
    url2 = pins.Pin("aiter", "git", "ROCm/aiter", "b", 1)
    assert pins.agree([url1, url2])[1] == []


@pytest.mark.parametrize(
    ("run", "want"),
    [
        (
            f"RUN pip install -U git+https://github.com/vllm-project/vllm.git@{C1}",
            {("vllm", "git", "https://github.com/vllm-project/vllm.git"), ("vllm", "commit", C1)},
        ),
        (
            f'RUN uv pip install --system "aiter @ git+ssh://git@github.com/ROCm/aiter@{C2}#egg=aiter" && true',
            {("aiter", "git", "ssh://git@github.com/ROCm/aiter"), ("aiter", "commit", C2)},
        ),
        # a branch or tag states the repository, not a commit
        (
            "RUN pip install git+https://github.com/vllm-project/vllm@main",
            {("vllm", "git", "https://github.com/vllm-project/vllm")},
        ),
        ("RUN pip install vllm==0.9.0", set()),  # a release from an index: no repository written
        ("RUN pip install git+$FORK@" + C1, set()),  # a variable with no value is no repository
    ],
)
def test_a_package_installed_from_git_at_a_commit_is_a_pin_of_the_build(
    tmp_path: Path, run: str, want: set[tuple[str, str, str]]
) -> None:
    text = f"FROM x@sha256:{'a' * 64}\n\n{run}\n"
    build = dockerfile.read(tmp_path, "Containerfile", text)
    assert _triples(pins.from_build(build)) == {(*w, 3) for w in want}
    assert {(p.name, p.what, p.value) for p in pins.from_dockerfile("Containerfile", text)} == want


def test_a_json_lock_s_image_and_model_objects_declare_no_upstream() -> None:
    """A stack lock pins its image and model beside the code: their repositories are no code upstreams, and the
    vllm image's repository is no second vllm repository (no conflict with the real one)."""
    text = json.dumps(
        {
            "image": {"repository": "rocm/vllm", "tag": "v0.11.0"},
            "model": {"repo": "Qwen/Qwen3-8B", "revision": C2},
            "models": [{"repo": "meta-llama/Llama-3.1-8B", "revision": C2}],
            "vllm": {"repo": "vllm-project/vllm", "commit": C1},
        },
        indent=2,
    )
    got = {(p.name, p.what, p.value) for p in pins.json_lock("stack.lock.json", text)}
    assert got == {("vllm", "git", "vllm-project/vllm"), ("vllm", "commit", C1)}
