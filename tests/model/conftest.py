"""The Hub stand-in (tests/model/hubserver.py) as fixtures, and a small model repository on it.

``hub_server`` (session) runs the stand-in on 127.0.0.1; ``hub`` (function)
empties it, points ``HF_ENDPOINT`` at it, gives the test its own Hugging Face
cache (``HF_HUB_CACHE``) and clears ``HF_TOKEN`` and ``HF_HUB_OFFLINE``.
``model_repo`` publishes ``org/tiny-model`` (two LFS shards, one above the
1 MiB memory-map threshold, and three small files, one in a subdirectory)
and returns its commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Invoke

from .hubserver import FileEntry, HubServer

REPO_ID = "org/tiny-model"


@dataclass
class Hub:
    server: HubServer
    cache: Path


@pytest.fixture(scope="session")
def hub_server() -> Iterator[HubServer]:
    server = HubServer(page_size=3).start()  # small pages: every listing paginates
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def hub(hub_server: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Hub:
    hub_server.reset()
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_ENDPOINT", hub_server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    # No token saved by `hf auth login` on this machine may leak into a test.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return Hub(hub_server, cache)


def tiny_files() -> list[FileEntry]:
    shard = bytes(range(256)) * (6 * 1024)  # 1.5 MiB: hashed through the memory map
    return [
        FileEntry.of("config.json", b'{"architectures": ["DeepseekV4ForCausalLM"]}\n'),
        FileEntry.of("tokenizer.json", b'{"version": "1.0"}\n'),
        FileEntry.of("sub/generation_config.json", b'{"temperature": 0.6}\n'),
        FileEntry.of("model-00001-of-00002.safetensors", shard),
        FileEntry.of("model-00002-of-00002.safetensors", b"\x08\x00" + b"weights" * 500),
    ]


@pytest.fixture
def model_repo(hub: Hub) -> str:
    return hub.server.add(REPO_ID, tiny_files())


@pytest.fixture
def deploy_dir(tmp_path: Path, invoke: Invoke) -> Path:
    root = tmp_path / "deploy"
    assert invoke("init", str(root)).exit_code == 0
    return root


@pytest.fixture
def fetched(hub: Hub, model_repo: str, deploy_dir: Path, invoke: Invoke) -> Path:
    """The deployment with org/tiny-model pinned at main and downloaded by huggingface_hub."""
    r = invoke("model", "lock", REPO_ID, repo=deploy_dir)
    assert r.exit_code == 0, r.stderr
    r = invoke("model", "fetch", repo=deploy_dir)
    assert r.exit_code == 0, r.stdout + r.stderr
    return deploy_dir
