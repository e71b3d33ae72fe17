"""What a check reports: findings and the result of a whole check run.

A leaf module: the checker, the online checks, signing, model verification and
every report format share these types without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
