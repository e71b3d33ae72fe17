"""Helpers shared by the benchmark scripts in ``bench/``.

The scripts run as ``python bench/<script>.py``, so ``bench/`` is on
``sys.path`` and they import this module as ``benchlib``. It holds what both
need alike: the report and progress output (``Out``), failing with a message
and exit status 2 (``fail``), running a command that must succeed
(``run_checked``), finding the ``patchkit`` console script
(``find_patchkit``), and the timed runs of one candidate (``Timing``,
``timed``).

Every helper that can fail takes ``prog``, the script's name, which prefixes
its error message (``bench_sums: error: ...``).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TextIO

# --------------------------------------------------------------------------- output


class Out:
    """Progress and the report go to one stream; progress always goes to stderr."""

    def __init__(self, report: TextIO) -> None:
        self.report = report

    def line(self, text: str = "") -> None:
        print(text, file=self.report, flush=True)

    @staticmethod
    def progress(text: str) -> None:
        print(f"[bench] {text}", file=sys.stderr, flush=True)


def fail(prog: str, message: str) -> NoReturn:
    """Print ``<prog>: error: <message>`` to stderr and exit with status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


# --------------------------------------------------------------------------- commands


def run_checked(
    prog: str, argv: Sequence[str], cwd: Path, *, env: dict[str, str] | None = None, hint: str = ""
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` in ``cwd`` (with ``env``, or this process's environment), capturing its output.

    If it exits non-zero, fail (as ``prog``) with the command, its exit status,
    its output and then ``hint``, which is appended as given (start it with a
    newline to put it on a line of its own).
    """
    done = subprocess.run(argv, cwd=cwd, capture_output=True, check=False, env=env)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace").strip()
        fail(prog, f"`{' '.join(argv)}` in {cwd} exited {done.returncode}:\n{output}{hint}")
    return done


def find_patchkit(prog: str) -> str:
    """The console script of this interpreter (not a pyenv/asdf shim, which adds its own start-up)."""
    beside = Path(sys.executable).parent / "patchkit"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("patchkit")
    if found is None:
        fail(prog, "no `patchkit` console script; pip install -e '.[test]' first")
    return str(found)


# --------------------------------------------------------------------------- timing


@dataclass
class Timing:
    """The timed runs of one candidate, one row of the report."""

    key: str
    tag: str  # the row letter in the report
    label: str
    seconds: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def timed(fn: Callable[[], object]) -> float:
    """Wall time of one call of ``fn``, in seconds."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started
