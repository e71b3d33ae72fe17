"""Undefined names in the Python overlays and modules the deployment commits (pyflakes, offline).

An overlay is compared with its pinned base, rebuilt offline from its canonical
diff reversed onto it (checked against the base's sha256); one with no such
diff is left to ``check --deep``, which reads the pinned upstream. pyflakes runs
only on a file a changed line of which uses a word the file binds nowhere
visibly (``trust.names.may_leave_undefined``): a check of thousands of overlays
stays fast. See ``patchkit.trust.names``.
"""

from __future__ import annotations

from patchkit.check.state import State
from patchkit.core import diffs
from patchkit.core.findings import Finding
from patchkit.core.hashing import sha256_bytes
from patchkit.lockfile.model import Patch, PatchKind
from patchkit.trust.names import may_leave_undefined, new_undefined
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
            if may_leave_undefined(data, data.splitlines()):
                out += new_undefined(p.name, str(p.file), data, None)
            continue
        found = _base(state, p, data)
        if found is not None and may_leave_undefined(data, found[1]):
            out += new_undefined(p.name, str(p.file), data, found[0])
    return out


def _base(state: State, p: Patch, data: bytes) -> tuple[bytes, list[bytes]] | None:
    """The overlay's pinned base (checked against its pin) and the lines its diff adds; None offline."""
    text = state.readable(str(p.diff.file)) if p.diff is not None else None
    if p.base is None or not text:
        return None
    try:
        parts = diffs.parse(text)
        if len(parts) != 1:
            return None
        base = diffs.apply(parts[0], data, reverse=True)
    except (diffs.DiffError, diffs.ApplyError):
        return None  # the diff rules say why
    if sha256_bytes(base) != p.base.sha256.hex:
        return None
    return base, [line for h in parts[0].hunks for tag, line in h.lines if tag == b"+"]
