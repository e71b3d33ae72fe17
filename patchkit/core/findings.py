"""What a check reports: findings and the result of a whole check run.

A leaf module: the checker, the online checks, signing, model verification and
every report format share these types without importing one another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from patchkit.core.values import LOCKFILE_NAME
from patchkit.errors import LockfileError, PatchkitError


@dataclass(frozen=True)
class Finding:
    """One thing wrong (``error``), worth knowing (``note``) or not checked (``unknown``) about a deployment."""

    code: str
    file: str
    line: int | None
    message: str
    fix: str | None = None
    field: str | None = None
    severity: str = "error"

    def as_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "field": self.field,
            "message": self.message,
            "fix": self.fix,
        }


@dataclass
class CheckResult:
    findings: list[Finding] = field(default_factory=list)
    files_hashed: int = 0
    diffs_verified: int = 0

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def unknown(self) -> list[Finding]:
        """What could not be checked (a service that could not be asked), with the reason."""
        return [f for f in self.findings if f.severity == "unknown"]

    @property
    def ok(self) -> bool:
        return not self.errors


def unloadable(error: PatchkitError) -> CheckResult:
    """A check that could not start (the lockfile cannot be loaded), as findings a machine reads like any other.

    Each problem of a ``LockfileError`` is one finding with its file and line;
    any other error is one finding on the lockfile, its ``file:line:`` prefix
    (when the message has one) taken as the place.
    """
    if isinstance(error, LockfileError):
        return CheckResult(
            [Finding("lockfile-unloadable", p.file, p.line, p.message, p.hint, p.field) for p in error.problems]
        )
    where = re.match(r"([^\s:]+):(\d+): (.*)", error.message, re.DOTALL)
    if where is not None:
        file, line, message = where[1], int(where[2]), where[3]
        return CheckResult([Finding("lockfile-unloadable", file, line, message, error.hint)])
    return CheckResult([Finding("lockfile-unloadable", LOCKFILE_NAME, None, error.message, error.hint)])
