"""Writing the lockfile in its canonical form.

``dumps`` writes fixed key order and fixed formatting, so the same content always
gives the same bytes and a re-lock without change is a no-op. The order and the
form of every field is its record's field table in ``lockfile.model``.
"""

from __future__ import annotations

from patchkit.lockfile import tomlwrite
from patchkit.lockfile.model import HEADER, LOCKFILE, Lockfile
from patchkit.lockfile.tomlfast import Layout


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


def writes_layout(lock: Lockfile, layout: Layout | None) -> bool:
    """Whether ``dumps(lock)`` is, byte for byte, the text ``layout`` was read from; told without rendering.

    ``layout`` is the document ``reader.read`` found a text laid out in
    exactly as this writer writes it: the text is ``HEADER``, a blank line
    and ``tomlwrite.dumps(layout)``. When the document ``dumps`` writes for
    ``lock`` is that same document (``tomlwrite.same``), so is its text.
    False says only "not known so": render and compare.
    """
    return layout is not None and tomlwrite.same(LOCKFILE.write(lock), layout)
