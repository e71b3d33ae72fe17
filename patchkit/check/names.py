"""Undefined names in the Python overlays and modules the deployment commits (pyflakes, offline).

An overlay is compared with its pinned base, rebuilt offline (the base cache,
or its canonical diff reversed onto it); one whose base is not at hand is left
to ``check --deep``, which reads the pinned upstream. See ``patchkit.trust.names``.
"""

from __future__ import annotations

from patchkit import diffs
from patchkit.check.state import State
from patchkit.findings import Finding
from patchkit.hashing import sha256_bytes
from patchkit.lockfile.model import Patch, PatchKind
from patchkit.trust.names import new_undefined
from patchkit.trust.pycheck import is_python


def undefined(state: State) -> list[Finding]:
    """A note per name a committed Python overlay or module leaves undefined that its base does not."""
    out: list[Finding] = []
    for p in state.lock.patches:
        if p.kind not in (PatchKind.OVERLAY, PatchKind.MODULE) or p.file is None or not is_python(str(p.target)):
            continue
        data = state.readable(str(p.file))
        if data is None:
            continue
        if p.kind is PatchKind.MODULE:
            out += new_undefined(p.name, str(p.file), data, None)
            continue
        base = _base(state, p, data)
        if base is not None:
            out += new_undefined(p.name, str(p.file), data, base)
    return out


def _base(state: State, p: Patch, data: bytes) -> bytes | None:
    """The overlay's pinned base, offline and checked against its pin; None when it cannot be had."""
    if p.base is None:
        return None
    want = p.base.sha256.hex
    cached = state.view.blob(want)
    if cached is not None:
        return cached
    text = state.readable(str(p.diff.file)) if p.diff is not None else None
    if text is None:
        return None
    try:
        parts = diffs.parse(text)
        base = diffs.apply(parts[0], data, reverse=True) if len(parts) == 1 else None
    except (diffs.DiffError, diffs.ApplyError):
        return None  # the diff rules say why
    return base if base is not None and sha256_bytes(base) == want else None
