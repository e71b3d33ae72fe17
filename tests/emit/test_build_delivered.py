"""Emitting a deployment whose patches a hand-kept image build copied in."""

from __future__ import annotations

from patchkit.core.values import ContainerPath, RepoPath, Sha256
from patchkit.emit.compose import _patch_notes
from patchkit.lockfile.model import Patch, PatchKind


def test_a_patch_a_build_copied_in_is_still_mounted_and_says_why() -> None:
    """The pinned image emit runs does not hold what the hand-kept build copied: the mount delivers it."""
    p = Patch(
        "sampler",
        PatchKind.OVERLAY,
        Sha256("ab" * 32),
        ContainerPath("/usr/lib/python3/dist-packages/vllm/sampler.py"),
        RepoPath("overlay/vllm/sampler.py"),
        build=RepoPath("docker/Dockerfile"),
    )
    notes = _patch_notes(p)
    assert any("docker/Dockerfile" in n and "mounted" in n for n in notes)
    plain = _patch_notes(Patch(p.name, p.kind, p.sha256, p.target, p.file))
    assert not any("Dockerfile" in n for n in plain)
