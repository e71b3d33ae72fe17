"""Writing the lockfile in its canonical form.

``dumps`` writes fixed key order and fixed formatting, so the same content always
gives the same bytes and a re-lock without change is a no-op. The order and the
form of every field is its record's field table in ``lockfile.model``.
"""

from __future__ import annotations

from patchkit.lockfile import tomlwrite
from patchkit.lockfile.model import HEADER, LOCKFILE, Lockfile


def dumps(lock: Lockfile) -> str:
    """The canonical text of a lockfile: same content, same bytes.

    Tables and keys come in their tables' order, unset optional fields are
    left out, arrays of references are written one per line so a pull request
    shows each added or dropped reference on its own line.
    """
    doc = LOCKFILE.write(lock)
    try:
        body = tomlwrite.dumps(doc)
    except TypeError:  # a value the fast writer leaves to tomli_w
        import tomli_w

        body = tomli_w.dumps(doc)
    return HEADER + "\n" + body
