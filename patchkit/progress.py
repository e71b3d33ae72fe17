"""Progress of long operations, on a terminal only: one line on stderr, redrawn in place, cleared at the end.

``Meter`` is what a long operation reports to (layer streaming, git fetches,
the bundle); wheel downloads show pip's own bar and ``model verify`` its tqdm
bar, both under the same rule, ``enabled()``: stderr is a terminal, and neither
``patchkit --quiet`` (``set_quiet``) nor ``PATCHKIT_QUIET=1`` asked for
silence. Without a terminal nothing is written, so logs and CI output stay
exactly the command's result. Redraws are limited to ten a second.
"""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType
from typing import TextIO

from patchkit.formats.safe import printable

_quiet = False
_INTERVAL = 0.1


def set_quiet(quiet: bool) -> None:
    """``--quiet``: no progress for the rest of this process."""
    global _quiet  # noqa: PLW0603 - one switch per process, set by the command line
    _quiet = quiet


def enabled(stream: TextIO | None = None) -> bool:
    """True when progress may be drawn: ``stream`` (stderr) is a terminal and nothing asked for quiet."""
    if _quiet or os.environ.get("PATCHKIT_QUIET", "") not in ("", "0"):
        return False
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - the loop returns


class Meter:
    """One progress line: ``label  done / total`` (bytes, or items; ``unit=None``: the label alone), redrawn
    in place, cleared when closed.

    A no-op when progress is not ``enabled()`` at creation, so callers report
    unconditionally.
    """

    def __init__(
        self, label: str, total: int | None = None, *, unit: str | None = "bytes", stream: TextIO | None = None
    ) -> None:
        self.label = printable(label)  # names from a lockfile or registry never drive the terminal
        self.total = total
        self.unit = unit
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self.active = enabled(self._stream)
        self._drawn = 0.0
        if self.active:
            self._draw()

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _text(self) -> str:
        if self.unit is None:  # a step with no count: its name alone
            return f"{self.label} …"
        fmt = _size if self.unit == "bytes" else (lambda n: f"{n:.0f}")
        done = fmt(self.done)
        if self.total:
            return f"{self.label}  {done} / {fmt(self.total)} ({100 * self.done // self.total}%)"
        return f"{self.label}  {done}"

    def _draw(self) -> None:
        self._stream.write(f"\r\x1b[K{self._text()}")
        self._stream.flush()
        self._drawn = time.monotonic()

    def update(self, n: int = 1) -> None:
        """``n`` more bytes (or items) done; redrawn at most every 0.1 s."""
        self.done += n
        if self.active and time.monotonic() - self._drawn >= _INTERVAL:
            self._draw()

    def close(self) -> None:
        """Clear the line (the command's own output follows on a clean line)."""
        if self.active:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self.active = False
