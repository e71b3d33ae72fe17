"""Progress lines: drawn on a terminal (a real pseudo-terminal here), never into a pipe or a file, not with --quiet."""

from __future__ import annotations

import os
import pty
import select
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from patchkit import progress


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


def shown(master: int, settle: float = 0.2, deadline: float = 3.0) -> str:
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


@pytest.fixture(autouse=True)
def _not_quiet(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("PATCHKIT_QUIET", raising=False)
    progress.set_quiet(False)
    yield
    progress.set_quiet(False)


def test_a_meter_draws_on_a_terminal_and_clears_its_line(terminal: tuple[TextIO, int]) -> None:
    stream, master = terminal
    with progress.Meter("streaming layer sha256:ab\x1b[31m", 2048, stream=stream) as meter:
        meter.update(1024)
    text = shown(master)
    assert text.startswith("\r\x1b[Kstreaming layer sha256:ab\\x1b[31m  0 B / 2.0 KiB (0%)")  # the name escaped
    assert text.endswith("\r\x1b[K")  # cleared: the command's own output starts on a clean line


def test_a_step_without_a_count_shows_its_name(terminal: tuple[TextIO, int]) -> None:
    stream, master = terminal
    with progress.Meter("git fetch https://example.invalid/repo", unit=None, stream=stream):
        pass
    assert shown(master) == "\r\x1b[Kgit fetch https://example.invalid/repo …\r\x1b[K"


def test_nothing_is_written_into_a_file(tmp_path: Path) -> None:
    with (tmp_path / "log").open("w") as stream:
        with progress.Meter("bundle", 10, stream=stream) as meter:
            meter.update(10)
        assert not meter.active
    assert (tmp_path / "log").read_text() == ""


def test_quiet_silences_a_terminal(terminal: tuple[TextIO, int], monkeypatch: pytest.MonkeyPatch) -> None:
    stream, master = terminal
    progress.set_quiet(True)
    with progress.Meter("bundle", 10, stream=stream) as meter:
        meter.update(5)
    assert shown(master) == ""
    progress.set_quiet(False)
    monkeypatch.setenv("PATCHKIT_QUIET", "1")
    assert not progress.enabled(stream)
    monkeypatch.setenv("PATCHKIT_QUIET", "0")
    assert progress.enabled(stream)


def test_redraws_are_limited(terminal: tuple[TextIO, int]) -> None:
    stream, master = terminal
    with progress.Meter("hashing", 1_000_000, stream=stream) as meter:
        for _ in range(1000):
            meter.update(1000)
    assert shown(master).count("\r\x1b[K") < 10  # one draw, the clear, and a redraw per 0.1 s at most
