"""Progress on the command line: one tqdm bar on stderr per long operation, only on a terminal, not with --quiet.

The core reports to the ``StartProgress`` the command hands it in its
``Context`` (layer streaming, git fetches, the bundle's archive, model
hashing); this module is the one that draws, with tqdm. A bar is redrawn at
most ten times a second and cleared when its operation ends, so the command's
own output follows on a clean line. Into a pipe, a file or a CI log nothing is
drawn: the output is exactly the command's result.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from patchkit.core.progress import StartProgress, Task, no_progress
from patchkit.core.safe import printable

_INTERVAL = 0.1  # seconds between redraws, at most


def shown(quiet: bool, stream: TextIO | None = None) -> bool:
    """Whether progress is drawn: ``stream`` (stderr) is a terminal and --quiet (or PATCHKIT_QUIET) was not given."""
    if quiet:
        return False
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _size(stream: TextIO) -> dict[str, int]:
    """tqdm's width and height for ``stream``: its own reading, unless the terminal reports no size.

    A terminal of 0 columns (a pseudo-terminal nobody sized) makes tqdm draw
    nothing at all; there the line is drawn without a bar, its text never cut.
    """
    try:
        size = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return {}
    return {"ncols": 0, "nrows": 20} if size.columns == 0 else {}


def bars(quiet: bool, stream: TextIO | None = None) -> StartProgress:
    """The progress a command hands the core: tqdm bars on ``stream`` (stderr) when ``shown``, else nothing."""
    if not shown(quiet, stream):
        return no_progress
    out = stream if stream is not None else sys.stderr

    def start(label: str, total: int | None = None, *, unit: str | None = "bytes") -> Task:
        from tqdm import tqdm  # type: ignore[import-untyped]  # a declared dependency; it ships no stubs

        common = {"desc": printable(label), "file": out, "leave": False, "mininterval": _INTERVAL, **_size(out)}
        if unit is None:  # a step with no count: its name alone
            bar: Task = tqdm(bar_format="{desc} …", **common)
        elif unit == "bytes":
            bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, **common)
        else:
            bar = tqdm(total=total, unit=f" {unit}", **common)
        return bar

    return start
