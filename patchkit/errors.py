"""The error hierarchy: one root class, caught once by the CLI.

Every error carries the one-line message a user sees, an optional hint (the
command or edit that fixes it) and the exit code it maps to. Exit codes have
one meaning each: 1 findings, 2 bad usage or bad input, 3 an external service
or tool failed.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2
EXIT_EXTERNAL = 3


class PatchkitError(Exception):
    """Root of every error patchkit reports to a user."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class BadInput(PatchkitError):
    """The user's input (a file, an argument, the repository) is wrong."""

    exit_code = EXIT_BAD_INPUT


class PinMismatch(BadInput):
    """Bytes that are not what the lockfile pins: a file, a base an upstream serves, a manifest (exit 2).

    The one error for "these bytes do not match their pin", wherever they came
    from; ``hashing.require_pin`` raises it. A check reports the same mismatch as
    a finding instead (``hashing.pin_mismatch`` tells both what they need).
    """


class Refused(PatchkitError):
    """The repository is not in a state the operation can build on (exit 1: findings)."""

    exit_code = EXIT_FINDINGS


class LockfileError(BadInput):
    """The lockfile cannot be read; carries every problem found, each with its line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        first = problems[0]
        super().__init__(first.render(), first.hint)


class Problem:
    """One problem in an input file: where it is, what is wrong, how to fix it."""

    __slots__ = ("field", "file", "hint", "line", "message")

    def __init__(
        self,
        file: str,
        line: int | None,
        field: str | None,
        message: str,
        hint: str | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.message = message
        self.hint = hint

    def render(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class ExternalFailure(PatchkitError):
    """A tool or service outside patchkit failed (git, a registry, the network)."""

    exit_code = EXIT_EXTERNAL


class SourceError(ExternalFailure):
    """An upstream source could not be reached or read (network, git, pip)."""


class WriteFailed(BadInput):
    """A file could not be written; nothing was changed."""
