"""The audit report as Markdown (for a pull request description) and as JSON."""

from __future__ import annotations

import json
import re

from patchkit.audit.report import MARKDOWN_DIFF_LINES, AuditReport, PatchSection, Verified
from patchkit.formats.interface import Formats

# --------------------------------------------------------------------------- JSON


def as_json(report: AuditReport) -> str:
    """The report for machines: every field, findings as ``check --format json`` writes them."""
    doc = {
        "deployment": report.deployment,
        "generated_at": report.generated_at,
        "images": [p.__dict__ for p in report.images],
        "model": report.model.__dict__ if report.model else None,
        "upstreams": [p.__dict__ for p in report.upstreams],
        "summary": {
            "check_ok": report.check_ok,
            "files_hashed": report.files_hashed,
            "diffs_verified": report.diffs_verified,
            "patches_by_kind": report.by_kind,
            "patches_by_status": report.by_status,
            "patches_by_standing": report.by_standing,
            "drop_candidates": report.drop_candidates,
        },
        "findings": [f.as_dict() for f in report.findings],
        "patches": [
            {
                "name": s.name,
                "kind": s.kind,
                "target": s.target,
                "file": s.file,
                "reason": s.reason,
                "drop_when": s.drop_when,
                "status": s.status.value,
                "standing": s.refs.standing.value,
                "refs": [r.as_dict() for r in s.refs.refs],
                "base": s.base.__dict__ if s.base else None,
                "diff_file": s.diff_file,
                "added": s.added,
                "removed": s.removed,
                "diff": s.diff,
                "interdiff": list(s.interdiff),
                "reviews": [r.__dict__ for r in s.reviews],
                "verification": [{**v.__dict__, "status": v.status.value} for v in s.verification],
                "findings": [f.as_dict() for f in s.findings],
            }
            for s in report.patches
        ],
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# --------------------------------------------------------------------------- Markdown


def _cell(text: object) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_link(text: str, url: str | None) -> str:
    label = text.replace("[", "\\[").replace("]", "\\]")
    return f"[{label}]({url})" if url else label


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


_STATUS_MARK = {Verified.OK: "✅ ok", Verified.FAILED: "❌ failed", Verified.UNVERIFIED: "⚠️ not verified"}


def as_markdown(report: AuditReport) -> str:
    """The report as GitHub-flavoured Markdown, for a pull request description (long diffs are cut)."""
    out = [f"## Audit of `{report.deployment or 'deployment'}`", ""]
    verdict = "✅ `patchkit check` passes" if report.check_ok else "❌ `patchkit check` fails"
    out += [
        f"{verdict}: {report.files_hashed} files hashed, {report.diffs_verified} diffs verified. "
        f"Generated {report.generated_at}.",
        "",
    ]
    if report.drop_candidates:
        out += [f"**Drop candidates:** {', '.join(f'`{n}`' for n in report.drop_candidates)}", ""]
    out += ["| pin | value |", "| --- | --- |"]
    for img in report.images:
        out.append(f"| image `{_cell(img.name)}` | `{_cell(img.value)}` |")
    if report.model:
        out.append(f"| model {_md_link(report.model.name, report.model.link)} | `{report.model.value}` |")
    for up in report.upstreams:
        out.append(f"| upstream `{_cell(up.name)}` | {_md_link(_cell(up.value), up.link)} |")
    out.append("")
    counts = [
        ("kind", report.by_kind),
        ("verification", report.by_status),
        ("upstream", report.by_standing),
    ]
    out.append(
        f"**{len(report.patches)} patches** — "
        + "; ".join(f"{label}: " + ", ".join(f"{k} {v}" for k, v in c.items()) for label, c in counts if c)
    )
    out.append("")
    if report.findings:
        out += ["### Check findings", ""]
        for f in report.findings:
            where = f.file if f.line is None else f"{f.file}:{f.line}"
            out.append(
                f"- **{f.severity}** `{_cell(where)}` {_cell(f.message)}" + (f" — fix: `{f.fix}`" if f.fix else "")
            )
        out.append("")
    out += ["### Patches", "", "| patch | kind | diff | verified | upstream |", "| --- | --- | --- | --- | --- |"]
    for s in report.patches:
        out.append(
            f"| `{s.name}` | {s.kind} | +{s.added} -{s.removed} | {_STATUS_MARK[s.status]} | {s.refs.standing.value} |"
        )
    out.append("")
    for s in report.patches:
        out += _md_section(s)
    return "\n".join(out).rstrip("\n") + "\n"


def _md_section(s: PatchSection) -> list[str]:
    """One patch's Markdown section: why it exists, its references, base, verification, interdiff and diff."""
    out = [f"#### `{s.name}` ({s.kind}) → `{s.target}`", ""]
    if s.reason:
        out += [f"> {_cell(s.reason)}", ""]
    if s.drop_when:
        out += [f"Drop when: {_cell(s.drop_when)}", ""]
    out += _md_refs(s)
    if s.base:
        b = s.base
        at = b.commit[:12] if b.commit else b.version or ""
        out += [f"Base: {_md_link(f'{b.upstream} {at} {b.path}', b.link)} — {b.freshness}", ""]
    for v in s.verification:
        detail = f": {_cell(v.detail)}" if v.detail else ""
        out.append(f"- {_STATUS_MARK[v.status]} `{v.file}` {v.what}{detail}")
    out.append("")
    return out + _md_reviews(s) + _md_interdiff(s) + _md_diff(s)


def _md_reviews(s: PatchSection) -> list[str]:
    """The recorded reviews, one line per required criterion; a change nobody reviewed stands out."""
    out = []
    for r in s.reviews:
        by = f" — {'; '.join(r.by)}" if r.by else ""
        mark = "✅" if r.covered else "⚠️"
        out.append(f"- {mark} review, {r.criterion}: **{r.status}**{by}")
        if r.change:
            fence = _fence("\n".join(r.change))
            out += ["", f"  {fence}diff", *(f"  {line}" for line in r.change), f"  {fence}"]
    return [*out, ""] if out else []


def _md_refs(s: PatchSection) -> list[str]:
    """The patch's references as a list, each with its state (nothing when it has none)."""
    out = []
    for r in s.refs.refs:
        title = f" — {_cell(r.title)}" if r.title else ""
        checked = f" (checked {r.age})" if r.age else ""
        out.append(f"- {_md_link(r.ref.text, r.url)}{title}: **{r.summary}**{checked}")
    return [*out, ""] if out else []


def _md_interdiff(s: PatchSection) -> list[str]:
    """What changed in the patch since it was last pinned, its detail fenced as a diff."""
    if not s.interdiff:
        return []
    head, *rest = s.interdiff
    out = [f"What changed in the patch: {_cell(head)}", ""]
    if rest:
        fence = _fence("\n".join(rest))
        out += [f"{fence}diff", *rest, fence, ""]
    return out


def _md_diff(s: PatchSection) -> list[str]:
    """The diff in a collapsed block, cut at ``MARKDOWN_DIFF_LINES`` lines with a pointer to the rest."""
    if not s.diff:
        return []
    lines = s.diff.splitlines()
    shown = "\n".join(lines[:MARKDOWN_DIFF_LINES])
    cut = len(lines) - MARKDOWN_DIFF_LINES
    fence = _fence(shown)
    out = [
        f"<details><summary>diff +{s.added} -{s.removed} ({len(lines)} lines)</summary>",
        "",
        f"{fence}diff",
        shown,
        fence,
        "",
    ]
    if cut > 0:
        where = s.diff_file or s.file or "the repository"
        out += [f"… {cut} more lines in `{where}`.", ""]
    return [*out, "</details>", ""]


def _html(report: AuditReport) -> str:
    from patchkit.formats.audit_html import render  # a page of CSS and markup: loaded only for it

    return render(report)


# The renderings of the audit report, by --format name.
AUDIT: Formats[AuditReport] = Formats({"html": _html, "markdown": as_markdown, "json": as_json}, "html")
