"""Writing the lockfile in its canonical form.

``dumps`` writes fixed key order and fixed formatting, so the same content always
gives the same bytes and a re-lock without change is a no-op. The order and the
form of every field is its record's field table in ``lockfile.model``; the TOML
text is ``tomli_w``'s.
"""

from __future__ import annotations

import tomli_w

from patchkit.core import sums
from patchkit.core.hashing import sha256_bytes
from patchkit.core.values import LOCKFILE_NAME
from patchkit.lockfile.model import HEADER, LOCKFILE, Lockfile

# The last lockfile rendered and its text. A rebase renders the same lockfile for its journal and then to write
# it; the model is frozen through and through, so the same object always has the same text.
_last: list[tuple[Lockfile, str]] = []


def dumps(lock: Lockfile) -> str:
    """The canonical text of a lockfile: same content, same bytes.

    Tables and keys come in their tables' order, unset optional fields are
    left out, arrays of references are written one per line so a pull request
    shows each added or dropped reference on its own line.
    """
    last = _last[:1]
    if last and last[0][0] is lock:
        return last[0][1]
    text = HEADER + "\n" + tomli_w.dumps(LOCKFILE.write(lock))
    _last[:] = [(lock, text)]
    return text


def expected_sums(lock: Lockfile, lock_bytes: bytes) -> bytes:
    """The SHA256SUMS patchkit generates: the lockfile itself and every file it pins."""
    entries = {str(path): str(sha) for _, path, sha in lock.files()}
    entries[LOCKFILE_NAME] = sha256_bytes(lock_bytes)
    return sums.render(entries.items())
