"""Rendering check findings for people (text), machines (JSON) and CI (GitHub annotations)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from patchkit.core.safe import json_name, json_safe, printable
from patchkit.formats.interface import Formats

if TYPE_CHECKING:
    from patchkit.core.findings import CheckResult, Finding


def _where(f: Finding) -> str:
    return f.file if f.line is None else f"{f.file}:{f.line}"


def text(result: CheckResult, what: str = "check") -> str:
    lines = []
    for f in result.findings:
        field = f" {printable(f.field)}:" if f.field else ""
        label = f.severity if f.severity in ("error", "unknown") else "note"
        lines.append(f"{printable(_where(f))}: {label}:{field} {printable(f.message)}")
        if f.fix:
            lines.append(f"  fix: {printable(f.fix)}")
    errors = len(result.errors)
    unknown = len(result.unknown)
    notes = len(result.findings) - errors - unknown
    verified = f"{result.diffs_verified} diffs verified, " if what == "check" else ""
    status = "FAILED" if not result.ok else "incomplete" if unknown else "ok"
    summary = f"{what}: {status}: {result.files_hashed} files hashed, {verified}{errors} error{'s' * (errors != 1)}"
    if notes:
        summary += f", {notes} note{'s' * (notes != 1)}"
    if unknown:
        summary += f", {unknown} not checked"
    lines.append(summary)
    return "\n".join(lines) + "\n"


def as_json(result: CheckResult) -> str:
    doc = {
        "ok": result.ok and not result.unknown,
        "files_hashed": result.files_hashed,
        "diffs_verified": result.diffs_verified,
        "findings": [{**json_safe(f.as_dict()), **json_name(f.file)} for f in result.findings],
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _gh_escape(value: str, prop: bool = False) -> str:
    value = printable(value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))
    if prop:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def github(result: CheckResult) -> str:
    """GitHub Actions workflow commands: one ``::error``/``::notice`` line per finding."""
    lines = []
    for f in result.findings:
        level = {"error": "error", "unknown": "warning"}.get(f.severity, "notice")
        props = [f"file={_gh_escape(f.file, prop=True)}"]
        if f.line is not None:
            props.append(f"line={f.line}")
        props.append(f"title={_gh_escape('patchkit ' + f.code, prop=True)}")
        message = (f"{f.field}: " if f.field else "") + f.message + (f" Fix: {f.fix}" if f.fix else "")
        lines.append(f"::{level} {','.join(props)}::{_gh_escape(message)}")
    errors = len(result.errors)
    status = "FAILED" if not result.ok else "incomplete" if result.unknown else "ok"
    lines.append(f"patchkit check: {status} ({errors} errors)")
    return "\n".join(lines) + "\n"


def formats(what: str = "check") -> Formats[CheckResult]:
    """The renderings of a check's findings; the text form names the command (``what``) in its summary."""
    return Formats({"text": lambda result: text(result, what), "json": as_json, "github": github}, "text")


FINDINGS = formats()


def render(result: CheckResult, fmt: str, what: str = "check") -> str:
    """``result`` in the format ``fmt`` (``text``, ``json`` or ``github``)."""
    return formats(what).render(result, fmt)
