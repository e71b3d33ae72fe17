"""Text that is safe to show: on a terminal (control characters escaped) and in JSON (valid Unicode).

Every format patchkit writes passes repository-controlled names and messages
through these, so a file name cannot forge a line or reach the terminal raw.
"""

from __future__ import annotations

import base64
import os
from typing import Any

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` safe for a terminal: control and format characters escaped, bytes that are not UTF-8 as ``\\xNN``.

    A file named ``x\\ncheck: ok`` must not print a fake line, and ANSI escapes
    or bidirectional overrides in a name must not reach the terminal.
    """
    if text.isprintable():
        return text
    out = []
    for ch in text:
        o = ord(ch)
        if ch.isprintable():
            out.append(ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif 0xDC80 <= o <= 0xDCFF:  # a byte os.fsdecode could not decode (surrogateescape)
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 0x100:
            out.append(f"\\x{o:02x}")
        elif ch == " ":
            out.append(ch)
        else:
            out.append(f"\\u{o:04x}")
    return "".join(out)


def json_text(text: str) -> str:
    """``text`` as valid Unicode for JSON: a byte that is not UTF-8 becomes ``\\xNN`` (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text)
    return text


def json_name(name: str) -> dict[str, str]:
    """A file name in JSON, losslessly: ``{"file": …}``, plus its exact bytes in base64 when it is not UTF-8."""
    shown = json_text(name)
    if shown == name:
        return {"file": name}
    return {"file": shown, "file_base64": base64.b64encode(os.fsencode(name)).decode("ascii")}


def json_safe(value: Any) -> Any:
    """``value`` (lists, dicts, strings) with every string made valid Unicode by ``json_text``."""
    if isinstance(value, str):
        return json_text(value)
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {json_text(str(k)): json_safe(v) for k, v in value.items()}
    return value
