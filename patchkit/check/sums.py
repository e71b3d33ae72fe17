"""The rule about SHA256SUMS: it is exactly what patchkit generates from the lockfile."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from patchkit.check.state import State
from patchkit.core import sums
from patchkit.core.findings import Finding
from patchkit.core.values import LOCKFILE_NAME
from patchkit.lockfile.model import Lockfile


def sums_file(state: State) -> list[Finding]:
    """SHA256SUMS is a regular file of the repository and lists what the lockfile pins, as patchkit writes it."""
    if isinstance(state.sums, str):
        return [Finding("unsafe-path", sums.FILENAME, None, f"{sums.FILENAME} {state.sums}", "make it a regular file")]
    return sums_findings(state.lock, state.lock_bytes, state.sums, state.view.exists)


def sums_findings(
    lock: Lockfile, lock_bytes: bytes, actual: bytes | None, exists: Callable[[str], bool] | None = None
) -> list[Finding]:
    """How the SHA256SUMS bytes ``actual`` (None: missing) differ from what patchkit generates.

    With ``exists`` (whether a repository path exists), an entry for a file that does not exist says so.
    """
    from patchkit.lockfile.writer import expected_sums

    fix = "regenerate it: patchkit sums"
    if actual is None:
        return [Finding("sums-missing", sums.FILENAME, None, "does not exist", fix)]
    expected = expected_sums(lock, lock_bytes)
    if actual == expected:
        return []
    got = sums.read(actual)
    have = got.entries
    out = [Finding("sums-drift", sums.FILENAME, pr.line, pr.message, fix) for pr in got.malformed]
    # A line sha256sum accepts still lists its file: one note, never a second finding.
    out += [Finding("sums-format", sums.FILENAME, pr.line, pr.message, fix, severity="note") for pr in got.noncanonical]
    want, _ = sums.parse(expected)
    out += _entry_drift(have, want, exists, fix)
    if not any(f.severity == "error" for f in out) and [h.name for h in have] != [w.name for w in want]:
        out.append(
            Finding(
                "sums-drift",
                sums.FILENAME,
                None,
                "lists its files in another order than patchkit writes, or one of them twice",
                fix,
            )
        )
    elif not out:
        out.append(
            Finding("sums-drift", sums.FILENAME, None, "differs from what patchkit generates (order or format)", fix)
        )
    return out


def _entry_drift(
    have: Sequence[sums.SumLine], want: Sequence[sums.SumLine], exists: Callable[[str], bool] | None, fix: str
) -> list[Finding]:
    """The listed entries against the generated ones: files listed but not pinned, other digests, files unlisted."""
    out: list[Finding] = []
    want_by = {w.name: w for w in want}
    have_by = {h.name: h for h in have}
    for h in have:
        w = want_by.get(h.name)
        if w is None:
            gone = " (and which does not exist)" if exists is not None and not exists(h.name) else ""
            out.append(
                Finding(
                    "sums-drift", sums.FILENAME, h.line, f"lists {h.name}, which the lockfile does not pin{gone}", fix
                )
            )
        elif w.sha256 != h.sha256:
            now = "the lockfile now has" if h.name == LOCKFILE_NAME else "the lockfile pins"
            message = f"lists {h.name} as {h.sha256[:12]}…, but {now} {w.sha256[:12]}…"
            out.append(Finding("sums-drift", sums.FILENAME, h.line, message, fix))
    out += [
        Finding("sums-drift", sums.FILENAME, None, f"does not list {w.name}", fix)
        for w in want
        if w.name not in have_by
    ]
    return out
