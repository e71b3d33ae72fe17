"""Verifying SHA256SUMS the way ``sha256sum -c --strict`` does, and against the lockfile.

Kept apart from the other commands so that ``patchkit sums --check`` starts
hashing before it imports and parses anything it does not need for that:
the lockfile is loaded, and its drift checked, while the files hash.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from patchkit.core import sums
from patchkit.core.hashing import Hasher
from patchkit.errors import BadInput
from patchkit.store.repo import Escape, Repo

if TYPE_CHECKING:
    from patchkit.core.findings import CheckResult, Finding


def check_sums(repo: Repo) -> CheckResult:
    """Verify SHA256SUMS like ``sha256sum -c --strict``, and that it is what patchkit generates.

    The files SHA256SUMS lists are hashed on worker threads from the first
    one proven inside the repository on, while the rest are proven and the
    lockfile is read and parsed: on a large tree neither costs wall time.
    """
    try:
        data: bytes | None = repo.read(sums.FILENAME)
    except FileNotFoundError:
        data = None
    except Escape as err:
        raise BadInput(f"{sums.FILENAME} {err}") from err
    entries, _ = sums.parse(data or b"")
    with Hasher[str](opener=repo.dirs.open_regular) as hasher, _handing_over_often():
        paths, unsafe = _listed_files(repo, entries, hasher)
        from patchkit.core.findings import CheckResult

        generated = _against_lockfile(repo, data)
    hashes = hasher.results
    result = CheckResult(files_hashed=len(hashes))
    result.findings += _listing_findings(unsafe, entries, paths, hashes)
    result.findings.extend(generated)
    return result


# How long the thread reading the lockfile keeps the interpreter lock while a hashing thread waits for it.
# Python's default, 5 ms, is 40 windows' worth of hashing: each thread needs the lock twice per 128 KiB
# window, so with the default a lockfile of thousands of pins, parsed meanwhile, stalls the hashing (a
# thread hashing one file beside a pure-Python loop: 2.4-2.8 s at 5 ms, 1.7-1.8 s at 0.5 ms, 0.9 s alone).
_SWITCH_INTERVAL = 0.0005


@contextlib.contextmanager
def _handing_over_often() -> Iterator[None]:
    """Within the block, a thread waiting for the interpreter lock gets it within ``_SWITCH_INTERVAL``."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, _SWITCH_INTERVAL))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _against_lockfile(repo: Repo, data: bytes | None) -> list[Finding]:
    """How SHA256SUMS differs from what the lockfile generates.

    When it is exactly what patchkit writes (the usual case) there is
    nothing to say, and the rules of ``check`` are not even imported.
    """
    from patchkit.lockfile.writer import expected_sums

    lock, lock_bytes = repo.read_lockfile()
    if data is not None and data == expected_sums(lock, lock_bytes):
        return []
    from patchkit.check.sums import sums_findings

    return sums_findings(lock, lock_bytes, data)


def _listed_files(
    repo: Repo, entries: list[sums.SumLine], hasher: Hasher[str]
) -> tuple[dict[str, str], list[tuple[sums.SumLine, str]]]:
    """The listed files that can be hashed, each handed to ``hasher`` once proven; the entries that cannot be."""
    paths: dict[str, str] = {}
    unsafe: list[tuple[sums.SumLine, str]] = []
    for entry in entries:
        try:
            path, st = repo.inside_stat(entry.name)
        except FileNotFoundError:
            unsafe.append((entry, "listed but missing"))
        except Escape as ex:
            unsafe.append((entry, str(ex)))
        except OSError as ex:  # a name too long for the file system, a directory it may not search
            unsafe.append((entry, f"listed but cannot be opened ({ex.strerror})"))
        else:
            if entry.name not in paths:
                paths[entry.name] = path
                hasher.add(path, st.st_size)
    return paths, unsafe


def _listing_findings(
    unsafe: list[tuple[sums.SumLine, str]],
    entries: list[sums.SumLine],
    paths: dict[str, str],
    hashes: dict[str, str | OSError],
) -> list[Finding]:
    """What ``sha256sum -c --strict`` would fail on: files missing, unsafe, unreadable or not matching."""
    from patchkit.core.findings import Finding

    findings = []
    for entry, why in unsafe:
        code = "missing" if why.startswith("listed but ") else "unsafe-path"
        findings.append(Finding(code, sums.FILENAME, entry.line, f"{entry.name}: {why}"))
    for entry in entries:
        if entry.name not in paths:
            continue
        got = hashes[paths[entry.name]]
        if isinstance(got, OSError):
            findings.append(Finding("unreadable", entry.name, None, f"cannot read: {got.strerror}"))
        elif got != entry.sha256:
            findings.append(
                Finding(
                    "hash-mismatch",
                    sums.FILENAME,
                    entry.line,
                    f"{entry.name}: FAILED (listed {entry.sha256[:12]}…, file has {got[:12]}…)",
                    "patchkit check says which pin or file is wrong",
                )
            )
    return findings
