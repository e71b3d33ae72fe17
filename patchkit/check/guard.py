"""Rules about the runtime guard: the pinned guard script is the one this patchkit ships, and guard.json checks the
runtime version (a note when not)."""

from __future__ import annotations

from patchkit.check.compose import _config
from patchkit.check.state import State
from patchkit.core.findings import Finding
from patchkit.errors import BadInput


def shipped_guard() -> bytes:
    """The guard script in this installed patchkit (``patchkit guard script`` prints it)."""
    from importlib.resources import files

    return (files("patchkit.guard") / "runtime.py").read_bytes()


def guard_script(state: State) -> list[Finding]:
    """A committed guard other than the shipped one is a note: an older copy, or one edited in the deployment.

    Not an error: the deployment runs the bytes it pinned and reviewed, and the
    guard checks its own hash like any target; the note says an upgrade of it
    is waiting to be reviewed.
    """
    if not state.has_deploy_config:
        return []
    try:
        guard = _config(state).guard
    except BadInput:
        return []  # compose.emitted reports deploy.toml
    if guard is None:
        return []
    entry = next((p for p in state.lock.patches if p.name == guard.script and p.file is not None), None)
    if entry is None or entry.file is None:
        return []
    data = state.view.read(str(entry.file))
    if data is None or data == shipped_guard():
        return []
    from patchkit import __version__

    return [
        Finding(
            "guard-outdated",
            str(entry.file),
            None,
            f"the pinned runtime guard '{entry.name}' is not the guard patchkit {__version__} ships "
            "(an older copy, or edited here)",
            f"take the shipped one and review the diff: patchkit guard script > {entry.file} && patchkit lock "
            "&& patchkit emit",
            severity="note",
        )
    ]


def guard_runtime(state: State) -> list[Finding]:
    """With ``[guard]``, an inference image without ``version`` is a note: guard.json then has no VERSION check.

    Not an error, as a deployment may not know its runtime's version; but
    ``emit`` writes the manifest without the check all the same, and a
    re-pin that lost the field would otherwise go unnoticed.
    """
    if not state.has_deploy_config:
        return []
    try:
        config = _config(state)
    except BadInput:
        return []  # compose.emitted reports deploy.toml
    from patchkit.emit.manifest import runtime_unchecked

    unchecked = runtime_unchecked(state.lock, config)
    if unchecked is None:
        return []
    _, message, fix = unchecked
    return [state.lock_finding("guard-unversioned", ("images", config.inference.image), message, fix, "note")]
