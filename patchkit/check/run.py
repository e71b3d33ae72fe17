"""``patchkit check``: gather the repository's state once, then run every rule over it.

The rules are functions of a ``State`` (``check.state``), one module per
concern: ``repository`` (pending writes, unsafe paths, orphans), ``pins`` (the
pinned files, targets, canonical form), ``diffs`` (each patch's diff and base),
``hand_diffs`` (diffs adopted by import), ``series`` (patch series), ``sums`` (SHA256SUMS) and ``compose``
(emitted and hand-kept compose files), ``names`` (undefined names), ``accepted`` (broken merges committed
all the same, while their problems hold), ``build`` and ``build_steps`` (what a hand-kept build delivers,
and how it applies patches, read again as import read them), ``queue_files`` (a patch queue's own locks,
profile lists and upstream source, as import read them), ``upstream_pins`` (the repository's own
upstream and image pins agree with the lockfile's). ``RULES`` lists them in the order their
findings are reported; a rule that verifies diffs returns their count beside
its findings. Two checks read through modules of their own: the model pin's
manifest (``model.findings``), the signatures (``signing.signatures``) and,
when audits.toml exists, the recorded audits (``signing.certify``).
The checker writes nothing, and remembers nothing between runs: every rule runs
on every check.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from patchkit.check import build, compose, diffs, guard, hand_diffs, names, pins, repository, series, sums, verified
from patchkit.check.accepted import accepted_broken
from patchkit.check.build_steps import build_steps
from patchkit.check.queue_files import queue_files
from patchkit.check.state import RepoView, State, gather, hash_pinned
from patchkit.check.upstream_pins import upstream_pins
from patchkit.core.findings import CheckResult, Finding
from patchkit.lockfile.reader import collection_paused

if TYPE_CHECKING:
    from patchkit.lockfile.model import Lockfile
    from patchkit.store.cache import BlobStore
    from patchkit.store.repo import Repo

Rule = Callable[[State], list[Finding]]
VerifyingRule = Callable[[State], tuple[list[Finding], int]]

# Every offline rule, in the order of its findings. A new rule goes in the module of its concern and here.
RULES: tuple[Rule | VerifyingRule, ...] = (
    repository.pending,
    repository.lockfile_itself,
    pins.canonical,
    pins.pinned_files,
    repository.orphans,
    pins.targets,
    diffs.bases,
    verified.verified_bases,
    diffs.patch_diffs,
    hand_diffs.hand_diffs,
    series.series,
    series.own_locks,
    diffs.overlays_have_diffs,
    names.undefined,
    accepted_broken,
    sums.sums_file,
    compose.emitted,
    compose.kubernetes,
    compose.derived_stale,
    compose.mounts,
    compose.models,
    build.image_builds,
    build_steps,
    queue_files,
    upstream_pins,
    guard.guard_script,
    guard.guard_runtime,
)


def run_rules(state: State, rules: tuple[Rule | VerifyingRule, ...] = RULES) -> CheckResult:
    """Every rule over ``state``: their findings in order, and the diffs they verified."""
    result = CheckResult()
    for rule in rules:
        found = rule(state)
        if isinstance(found, tuple):
            findings, verified = found
            result.diffs_verified += verified
        else:
            findings = found
        result.findings.extend(findings)
    result.files_hashed = len(state.files.sha256) + len(state.files.unreadable)
    return result


def check(repo: Repo, lock: Lockfile, lock_bytes: bytes, store: BlobStore | None = None) -> CheckResult:
    """Run every offline invariant over ``repo``; writes nothing.

    ``store`` (the base cache) is read only for bases, each checked against
    its pin when read; no verdict comes from it.
    """
    with collection_paused():  # thousands of findings-to-be, tuples and byte strings, no cycles
        state = gather(repo, lock, lock_bytes, store)
        result = run_rules(state)
    if lock.model is not None:
        from patchkit.model.findings import format_findings

        result.findings.extend(format_findings(repo, lock, state.index.line_of))
    if lock.signing is not None:
        from patchkit.signing.signatures import signature_findings

        result.findings.extend(signature_findings(repo, lock))
    if os.path.lexists(repo.root / "audits.toml"):
        import datetime as dt

        from patchkit.signing.certify import findings as audit_findings

        result.findings.extend(audit_findings(repo, lock, dt.datetime.now(dt.UTC)))
    return result


def check_pinned_files(repo: Repo, lock: Lockfile, lock_bytes: bytes) -> CheckResult:
    """Only the existence, containment and hash checks of the pinned files."""
    state = State(lock, lock_bytes, RepoView(repo), files=hash_pinned(repo, lock))
    return run_rules(state, (pins.pinned_files,))
