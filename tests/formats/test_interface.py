"""Every output format behind one interface: a table of renderers per report kind, chosen by name."""

from __future__ import annotations

import pytest

from patchkit.core.findings import CheckResult, Finding
from patchkit.errors import BadInput
from patchkit.formats.audit import AUDIT
from patchkit.formats.findings import FINDINGS, as_json, github, render, text
from patchkit.formats.interface import Formats


def test_a_table_renders_by_name_and_refuses_what_it_does_not_have() -> None:
    table = Formats({"upper": str.upper, "lower": str.lower}, "upper")
    assert (table.names, table.render("aB"), table.render("aB", "lower")) == (("upper", "lower"), "AB", "ab")
    with pytest.raises(BadInput, match=r"--format xml: expected one of upper, lower"):
        table.render("aB", "xml")
    with pytest.raises(ValueError, match="default format"):
        Formats({"a": str}, "b")


def test_the_findings_and_audit_tables_hold_every_format_the_commands_offer() -> None:
    assert FINDINGS.names == ("text", "json", "github")
    assert AUDIT.names == ("html", "markdown", "json")
    result = CheckResult(findings=[Finding("orphan", "patches/x.py", None, "is not named by the lockfile", "pin it")])
    assert FINDINGS.render(result, "json") == as_json(result)
    assert FINDINGS.render(result, "github") == github(result)
    assert render(result, "text", "materialize") == text(result, "materialize")
