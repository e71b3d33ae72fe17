"""Progress bars: tqdm on a terminal (a real pseudo-terminal here), never into a pipe or a file, not with --quiet."""

from __future__ import annotations

import os
import pty
import select
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from patchkit.cli.progress import bars, shown
from patchkit.core.progress import no_progress


@pytest.fixture
def terminal() -> Iterator[tuple[TextIO, int]]:
    """The slave side of a pseudo-terminal as a text stream, and the master fd to read what it shows."""
    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w", encoding="utf-8")
    try:
        yield stream, master
    finally:
        stream.close()
        os.close(master)


def seen(master: int, settle: float = 0.2, deadline: float = 3.0) -> str:
    """What the terminal received: read until nothing more comes for ``settle`` seconds.

    The kernel hands a pseudo-terminal's output to the master side
    asynchronously, so on a busy machine it can lag the write by a moment.
    """
    out = b""
    end = time.monotonic() + deadline
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([master], [], [], min(settle, left))
        if not ready:
            break
        out += os.read(master, 65536)
    return out.decode()


def test_a_bar_draws_on_a_terminal_and_clears_its_line(terminal: tuple[TextIO, int]) -> None:
    stream, master = terminal
    with bars(quiet=False, stream=stream)("streaming layer sha256:ab\x1b[31m", 2048) as bar:
        bar.update(1024)
    text = seen(master)
    assert "streaming layer sha256:ab\\x1b[31m" in text  # the name escaped: a registry's name never drives the tty
    assert "\x1b[31m" not in text
    assert "0.00/2.00k" in text  # bytes done of the total, scaled
    *_, cleared, rest = text.split("\r")
    assert rest == "" and cleared.strip() == ""  # blanked: the command's own output starts on a clean line


def test_a_step_without_a_count_shows_its_name(terminal: tuple[TextIO, int]) -> None:
    stream, master = terminal
    with bars(quiet=False, stream=stream)("git fetch https://example.invalid/repo", unit=None):
        pass
    assert "git fetch https://example.invalid/repo …" in seen(master)


def test_nothing_is_drawn_into_a_file(tmp_path: Path) -> None:
    with (tmp_path / "log").open("w") as stream:
        assert not shown(False, stream)
        assert bars(quiet=False, stream=stream) is no_progress
        with bars(quiet=False, stream=stream)("bundle", 10) as bar:
            bar.update(10)
    assert (tmp_path / "log").read_text() == ""


def test_quiet_silences_a_terminal(terminal: tuple[TextIO, int]) -> None:
    stream, master = terminal
    assert shown(False, stream)
    assert not shown(True, stream)
    with bars(quiet=True, stream=stream)("bundle", 10) as bar:
        bar.update(5)
    assert seen(master) == ""


def test_redraws_are_limited(terminal: tuple[TextIO, int]) -> None:
    stream, master = terminal
    with bars(quiet=False, stream=stream)("hashing", 1_000_000) as bar:
        for _ in range(1000):
            bar.update(1000)
    assert seen(master).count("\r") < 10  # the first draw, the clear, and a redraw per 0.1 s at most
