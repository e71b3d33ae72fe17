"""``--source`` as users type it: which source it opens and which revision it implies."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.lockfile.model import GitUpstream
from patchkit.sources.context import Context
from patchkit.sources.factory import parse_source
from patchkit.sources.git import GitSource


@pytest.mark.parametrize(
    ("spec", "url", "rev"),
    [
        ("git:https://github.com/vllm-project/vllm@v0.28.0", "https://github.com/vllm-project/vllm", "v0.28.0"),
        ("git:https://github.com/vllm-project/vllm.git", "https://github.com/vllm-project/vllm.git", None),
        ("git:git@github.com:vllm-project/vllm.git", "git@github.com:vllm-project/vllm.git", None),  # scp-like URL
        ("git:git@github.com:vllm-project/vllm@0123abc", "git@github.com:vllm-project/vllm", "0123abc"),
        ("git:file:///srv/mirror/vllm@" + "ab" * 20, "file:///srv/mirror/vllm", "ab" * 20),
        # A URL alone is a git repository, as for git clone.
        ("https://github.com/vllm-project/vllm@v0.28.0", "https://github.com/vllm-project/vllm", "v0.28.0"),
        ("git@github.com:vllm-project/vllm.git", "git@github.com:vllm-project/vllm.git", None),
    ],
)
def test_a_git_url_and_revision(spec: str, url: str, rev: str | None, tmp_path: Path) -> None:
    up = GitUpstream(name="vllm", git="https://github.com/vllm-project/vllm")
    source, implied = parse_source(spec, up, Context(tmp_path), tmp_path)
    assert isinstance(source, GitSource)
    assert (source.url, implied) == (url, rev)


def test_an_unknown_source_names_every_form(tmp_path: Path) -> None:
    up = GitUpstream(name="vllm", git="https://github.com/vllm-project/vllm")
    with pytest.raises(BadInput, match=r"expected git, git:URL\[@REV\], dir:PATH"):
        parse_source("svn:https://example.invalid/x", up, Context(tmp_path), tmp_path)
