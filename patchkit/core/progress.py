"""Progress of long operations, as the core reports it: a ``Task`` per operation, started by a ``StartProgress``.

The core only reports (layer streaming, git fetches, the bundle's archive,
model hashing); what is drawn, and whether, is the command line's choice
(``patchkit.cli.progress``, tqdm bars on a terminal), handed down in the
run's ``Context``. ``no_progress`` shows nothing: the default for a library
caller and for a run without a terminal.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol


class Task(Protocol):
    """One long operation's progress: told the bytes (or items) done, closed at the end (a ``tqdm`` bar is one)."""

    def update(self, n: float | None = 1) -> bool | None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Task: ...

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> bool | None: ...


class StartProgress(Protocol):
    """Starts a ``Task``: its label, its total (None: unknown) and unit ("bytes", "items", or None for a step)."""

    def __call__(self, label: str, total: int | None = None, *, unit: str | None = "bytes") -> Task: ...


class _Silent:
    """A task that shows nothing: the progress of a run without a terminal, or of a library caller."""

    def update(self, n: float | None = 1) -> None:
        del n

    def close(self) -> None:
        return None

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        return None


def no_progress(label: str, total: int | None = None, *, unit: str | None = "bytes") -> Task:
    """The progress of a run that shows none."""
    del label, total, unit
    return _Silent()
