"""Layer streaming shows progress on a terminal, as a user runs patchkit: in a real pseudo-terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from tests.images.conftest import TestImages

PATCHKIT = Path(sys.executable).parent / "patchkit"


def run_in_terminal(*args: str) -> tuple[int, str]:
    """patchkit with stdout and stderr on a pseudo-terminal: its exit code and everything the terminal got."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(PATCHKIT), *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=30), out.decode(errors="replace")


def test_layer_streaming_shows_progress_on_a_terminal(oci_image: TestImages) -> None:
    status, shown = run_in_terminal("image", "cat", oci_image.single, "/app/lib/b.py")
    assert status == 0, shown
    assert "streaming layer sha256:" in shown and f"of {oci_image.single.rsplit(':', 1)[0]}" in shown
    assert shown.endswith("B = 1\r\n")  # the line was cleared before the file's bytes


def test_quiet_and_pipes_show_none(oci_image: TestImages) -> None:
    status, shown = run_in_terminal("image", "cat", "--quiet", oci_image.single, "/app/lib/b.py")
    assert status == 0
    assert shown == "B = 1\r\n"
    piped = subprocess.run(
        [str(PATCHKIT), "image", "cat", oci_image.single, "/app/lib/b.py"], capture_output=True, check=False
    )
    assert piped.returncode == 0
    assert (piped.stdout, piped.stderr) == (b"B = 1\n", b"")
