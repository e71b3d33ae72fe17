"""The audit report as one self-contained HTML page.

Inline CSS, no scripts, no fonts, images or styles fetched from anywhere (a
Content-Security-Policy forbids it), long diffs folded in ``<details>``: the
file opens anywhere, offline, and reads the same in any browser. Every value
from the repository is escaped.
"""

from __future__ import annotations

from html import escape

from patchkit.audit.report import AuditReport, DiffLine, PatchSection, Verified
from patchkit.core.findings import Finding
from patchkit.tracking.refs import Landing, PatchStanding

#: Diffs longer than this many lines start folded.
FOLD_LINES = 120

_CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --soft:#f6f8fa;
  --ok:#1a7f37; --okbg:#dafbe1; --bad:#cf222e; --badbg:#ffebe9; --warn:#9a6700; --warnbg:#fff8c5;
  --info:#0969da; --infobg:#ddf4ff; --add:#e6ffec; --addnum:#ccffd8; --del:#ffebe9; --delnum:#ffd7d5; }
* { box-sizing: border-box; }
body { margin:0; background:var(--soft); color:var(--fg);
  font: 15px/1.5 -apple-system, "Segoe UI", "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 28px 28px 60px; }
header.top { border-bottom: 1px solid var(--line); margin-bottom: 20px; padding-bottom: 14px; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 20px; margin: 32px 0 12px; }
h3 { font-size: 15px; margin: 18px 0 8px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
.sub { color: var(--muted); }
code, .mono { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 13px; }
h1 code, h2 code { font-size: inherit; }
a { color: var(--info); text-decoration: none; } a:hover { text-decoration: underline; }
.card { background: var(--bg); border: 1px solid var(--line); border-radius: 8px; padding: 16px 20px; margin: 12px 0; }
.verdict { font-size: 17px; font-weight: 600; padding: 12px 16px; border-radius: 8px; margin: 12px 0; }
.verdict.ok { background: var(--okbg); color: var(--ok); border: 1px solid #aceebb; }
.verdict.failed { background: var(--badbg); color: var(--bad); border: 1px solid #ffcecb; }
.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 12px; margin: 12px 0; }
.tile { background: var(--bg); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; }
.tile .n { font-size: 26px; font-weight: 700; } .tile .l { color: var(--muted); font-size: 13px; }
.tile ul { margin: 6px 0 0; padding: 0; list-style: none; font-size: 13px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 6px 10px; border-bottom: 1px solid var(--line); }
th { font-size: 12px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; font-weight: 600; }
td.k { width: 190px; color: var(--muted); }
.badge { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px; font-weight: 600;
  border: 1px solid transparent; white-space: nowrap; }
.b-ok { background: var(--okbg); color: var(--ok); } .b-failed { background: var(--badbg); color: var(--bad); }
.b-warn { background: var(--warnbg); color: var(--warn); } .b-info { background: var(--infobg); color: var(--info); }
.b-muted { background: var(--soft); color: var(--muted); border-color: var(--line); }
.finding { padding: 8px 12px; border-left: 4px solid var(--bad); background: var(--badbg); margin: 6px 0;
  border-radius: 4px; }
.finding.note { border-left-color: var(--info); background: var(--infobg); }
.finding .fix { color: var(--muted); font-size: 13px; }
section.patch { background: var(--bg); border: 1px solid var(--line); border-radius: 10px; margin: 22px 0; }
section.patch > header { padding: 14px 20px; border-bottom: 1px solid var(--line); display: flex;
  flex-wrap: wrap; gap: 8px 14px; align-items: baseline; }
section.patch > header h2 { margin: 0; font-size: 19px; }
section.patch .body { padding: 6px 20px 18px; }
.reason { font-size: 16px; margin: 10px 0; padding: 8px 14px; border-left: 4px solid var(--line);
  background: var(--soft); }
.stat .a { color: var(--ok); font-weight: 600; } .stat .r { color: var(--bad); font-weight: 600; }
.bar { display: inline-block; height: 9px; vertical-align: middle; margin-left: 6px; }
.bar i { display: inline-block; height: 9px; } .bar .ba { background: #2da44e; } .bar .br { background: #cf222e; }
details { border: 1px solid var(--line); border-radius: 6px; margin-top: 10px; }
details > summary { cursor: pointer; padding: 8px 12px; background: var(--soft); font-weight: 600; font-size: 13px; }
.diffwrap { overflow-x: auto; }
table.diff { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; line-height: 1.45; }
table.diff td { border: 0; padding: 0 8px; white-space: pre; }
table.diff td.n { width: 1%; min-width: 46px; text-align: right; color: var(--muted); user-select: none;
  border-right: 1px solid var(--line); }
table.diff tr.add td { background: var(--add); } table.diff tr.add td.n { background: var(--addnum); }
table.diff tr.del td { background: var(--del); } table.diff tr.del td.n { background: var(--delnum); }
table.diff tr.hunk td { background: var(--infobg); color: var(--muted); padding: 3px 8px; }
table.diff tr.note td { color: var(--muted); font-style: italic; padding: 6px 8px; }
table.diff td.m { width: 1%; padding: 0 4px; color: var(--muted); }
footer { color: var(--muted); font-size: 13px; margin-top: 30px; }
@media print { body { background: #fff; } section.patch { break-inside: avoid-page; } }
"""

_VERIFIED_BADGE = {
    Verified.OK: ("b-ok", "verified"),
    Verified.FAILED: ("b-failed", "check failed"),
    Verified.UNVERIFIED: ("b-warn", "not verified offline"),
}
_STANDING_BADGE = {
    PatchStanding.DROP_CANDIDATE: "b-ok",
    PatchStanding.MERGED_AFTER_PIN: "b-info",
    PatchStanding.MERGED_UNKNOWN: "b-info",
    PatchStanding.WAITING: "b-warn",
    PatchStanding.UNCHECKED: "b-muted",
    PatchStanding.CLOSED: "b-muted",
    PatchStanding.NO_REFS: "b-muted",
}
_LANDING_BADGE = {
    Landing.IN_PIN: "b-ok",
    Landing.AFTER_PIN: "b-info",
    Landing.MERGED_UNKNOWN: "b-info",
    Landing.OPEN: "b-warn",
    Landing.CLOSED: "b-muted",
    Landing.GONE: "b-failed",
    Landing.UNCHECKED: "b-muted",
}


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _a(text: str, url: str | None) -> str:
    # Links are only followed when clicked; only http(s) ones are made clickable.
    if url and url.startswith(("https://", "http://")):
        return f'<a href="{_e(url)}" rel="noreferrer noopener">{_e(text)}</a>'
    return _e(text)


def _badge(cls: str, text: str) -> str:
    return f'<span class="badge {cls}">{_e(text)}</span>'


def render(report: AuditReport) -> str:
    """The whole page."""
    name = report.deployment or "deployment"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # Nothing may load: no scripts, fonts, images or styles from anywhere.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Audit: {_e(name)}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        '<header class="top">',
        f"<h1>Audit of <code>{_e(name)}</code></h1>",
        f'<div class="sub">Generated by patchkit at {_e(report.generated_at)} from lockfile.toml. '
        "Every file below is what the deployment runs in place of, or beside, upstream code.</div>",
        "</header>",
        _summary(report),
        '<h2 id="patches">Patches</h2>',
        *(_patch(s) for s in report.patches),
        "<footer>Statuses come from <code>patchkit check</code> (offline) and the reference states recorded by "
        "<code>patchkit refs --refresh</code>; refresh them before an audit. Long diffs are folded: click to open.",
        "</footer></main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _summary(r: AuditReport) -> str:
    errors = sum(f.severity == "error" for f in r.findings)
    notes = len(r.findings) - errors
    verdict = (
        f'<div class="verdict ok">✔ patchkit check passes: {r.files_hashed} files hashed, '
        f"{r.diffs_verified} diffs verified{f', {notes} notes' if notes else ''}</div>"
        if r.check_ok
        else f'<div class="verdict failed">✘ patchkit check fails: {errors} error{"s" * (errors != 1)}'
        f"{f', {notes} notes' if notes else ''}</div>"
    )

    def counts(title: str, items: dict[str, int]) -> str:
        rows = "".join(f"<li>{_e(k)}: <b>{v}</b></li>" for k, v in items.items()) or "<li>none</li>"
        return f'<div class="tile"><div class="l">{_e(title)}</div><ul>{rows}</ul></div>'

    drops = r.drop_candidates
    tiles = (
        '<div class="tiles">'
        f'<div class="tile"><div class="n">{len(r.patches)}</div><div class="l">patches</div></div>'
        f'<div class="tile"><div class="n" style="color:var({"--ok" if drops else "--fg"})">{len(drops)}</div>'
        f'<div class="l">drop candidates</div>'
        + ("<ul>" + "".join(f'<li><a href="#p-{_e(n)}">{_e(n)}</a></li>' for n in drops) + "</ul>" if drops else "")
        + "</div>"
        + counts("by kind", r.by_kind)
        + counts("by verification", r.by_status)
        + counts("upstream", r.by_standing)
        + "</div>"
    )
    pins = ['<div class="card"><table>']
    pins.append("<tr><th>pin</th><th>value</th><th>note</th></tr>")
    for img in r.images:
        pins.append(
            f'<tr><td class="k">image {_e(img.name)}</td><td class="mono">{_e(img.value)}</td>'
            f"<td>{_e(img.note or '')}</td></tr>"
        )
    if r.model:
        pins.append(
            f'<tr><td class="k">model</td><td class="mono">{_a(r.model.name, r.model.link)} @ {_e(r.model.value)}</td>'
            f"<td>{_e(r.model.note or '')}</td></tr>"
        )
    for up in r.upstreams:
        pins.append(
            f'<tr><td class="k">upstream {_e(up.name)}</td><td class="mono">{_a(up.value, up.link)}</td>'
            f"<td>{_e(up.note or '')}</td></tr>"
        )
    pins.append("</table></div>")
    index = ['<div class="card"><table><tr><th>patch</th><th>kind</th><th>diff</th><th>verification</th>'
             "<th>upstream</th></tr>"]  # fmt: skip
    for s in r.patches:
        cls, label = _VERIFIED_BADGE[s.status]
        index.append(
            f'<tr><td><a href="#p-{_e(s.name)}"><code>{_e(s.name)}</code></a></td><td>{_e(s.kind)}</td>'
            f"<td>{_stat(s)}</td><td>{_badge(cls, label)}</td>"
            f"<td>{_badge(_STANDING_BADGE[s.refs.standing], s.refs.standing.value)}</td></tr>"
        )
    index.append("</table></div>")
    findings = ""
    if r.findings:
        findings = '<h2 id="findings">Check findings</h2>' + "".join(_finding(f) for f in r.findings)
    return (
        '<h2 id="summary">Summary</h2>'
        + verdict
        + tiles
        + "<h3>Pinned</h3>"
        + "".join(pins)
        + "<h3>Patches at a glance</h3>"
        + "".join(index)
        + findings
    )


def _finding(f: Finding) -> str:
    where = f.file if f.line is None else f"{f.file}:{f.line}"
    field = f" <code>{_e(f.field)}</code>" if f.field else ""
    fix = f'<div class="fix">fix: <code>{_e(f.fix)}</code></div>' if f.fix else ""
    return (
        f'<div class="finding {"note" if f.severity != "error" else ""}"><b>{_e(f.severity)}</b> '
        f"<code>{_e(where)}</code>{field}: {_e(f.message)}{fix}</div>"
    )


def _stat(s: PatchSection) -> str:
    total = s.added + s.removed
    width = 60
    a = round(width * s.added / total) if total else 0
    bar = (
        f'<span class="bar"><i class="ba" style="width:{a}px"></i><i class="br" style="width:{width - a}px"></i></span>'
    )
    return (
        f'<span class="stat mono"><span class="a">+{s.added}</span> <span class="r">&minus;{s.removed}</span></span>'
        + (bar if total else "")
    )


def _patch(s: PatchSection) -> str:
    """One patch's section: badges, where it runs and what it is based on, references, verification, diffs."""
    cls, label = _VERIFIED_BADGE[s.status]
    head = (
        f'<section class="patch" id="p-{_e(s.name)}"><header><h2><code>{_e(s.name)}</code></h2>'
        f"{_badge('b-muted', s.kind)} {_badge(cls, label)} "
        f"{_badge(_STANDING_BADGE[s.refs.standing], s.refs.standing.value)} {_stat(s)}</header>"
        '<div class="body">'
    )
    body = []
    if s.reason:
        body.append(f'<div class="reason">{_e(s.reason)}</div>')
    body.append('<table class="meta">' + "".join(_meta_rows(s)) + "</table>")
    body.append("<h3>References</h3>")
    body.append(_refs_table(s) if s.refs.refs else '<p class="sub">No upstream references recorded.</p>')
    body.append("<h3>Verification</h3>")
    if s.verification:
        body.append(_verification_table(s))
    body += [_finding(f) for f in s.findings]
    if s.reviews:
        body.append("<h3>Reviews</h3>" + _reviews_table(s))
    if s.interdiff:
        head_line, *rest = s.interdiff
        body.append(f"<h3>What changed in the patch</h3><p>{_e(head_line)}</p>")
        if rest:
            body.append(f'<div class="diffwrap"><pre class="mono">{_e(chr(10).join(rest))}</pre></div>')
    body.append(_diff(s))
    return head + "".join(body) + "</div></section>"


def _reviews_table(s: PatchSection) -> str:
    """One row per required criterion: the status as a badge, who reviewed, and the unreviewed change in full."""
    rows = []
    for r in s.reviews:
        cls = "b-ok" if r.covered else "b-failed"
        change = f'<pre class="mono">{_e(chr(10).join(r.change))}</pre>' if r.change else ""
        rows.append(
            f"<tr><td>{_e(r.criterion)}</td><td>{_badge(cls, r.status)}</td>"
            f"<td>{'<br>'.join(_e(b) for b in r.by)}{change}</td></tr>"
        )
    return '<table class="meta">' + "".join(rows) + "</table>"


def _meta_rows(s: PatchSection) -> list[str]:
    """The rows of the patch's facts: target, files, when to drop it, its upstream base and that base's age."""
    rows = [f'<tr><td class="k">runs at</td><td class="mono">{_e(s.target)}</td></tr>']
    if s.file:
        rows.append(f'<tr><td class="k">file</td><td class="mono">{_e(s.file)}</td></tr>')
    if s.diff_file:
        rows.append(f'<tr><td class="k">diff</td><td class="mono">{_e(s.diff_file)}</td></tr>')
    if s.drop_when:
        rows.append(f'<tr><td class="k">drop when</td><td>{_e(s.drop_when)}</td></tr>')
    if s.base:
        b = s.base
        at = b.commit or (f"version {b.version}" if b.version else "")
        rows.append(
            f'<tr><td class="k">upstream base</td><td><b>{_e(b.upstream)}</b> ({_e(b.source)}'
            f"{', ' + _e(b.repository) if b.repository else ''})<br>"
            f'<span class="mono">{_a(b.path, b.link)}</span> at <span class="mono">{_e(at)}</span><br>'
            f'<span class="sub">sha256 <span class="mono">{_e(b.sha256)}</span></span></td></tr>'
        )
        when = f"committed {_e(b.committed_at)}; " if b.committed_at else ""
        rows.append(f'<tr><td class="k">base age</td><td>{when}{_e(b.freshness)}</td></tr>')
    return rows


def _refs_table(s: PatchSection) -> str:
    """The references with their state (merge or head commit), title and when they were last checked."""
    refs = ["<table><tr><th>reference</th><th>state</th><th>title</th><th>last checked</th></tr>"]
    for v in s.refs.refs:
        extra = []
        if v.merge_commit:
            extra.append(f"merge {v.merge_commit[:12]}")
        if v.head_commit and v.landing is Landing.OPEN:
            extra.append(f"head {v.head_commit[:12]}")
        detail = f'<br><span class="sub mono">{_e(", ".join(extra))}</span>' if extra else ""
        checked = f"{_e(v.age)}<br><span class='sub mono'>{_e(v.checked_at)}</span>" if v.age else "never"
        refs.append(
            f"<tr><td class='mono'>{_a(v.ref.text, v.url)}{_e(f' ({v.kind})' if v.kind else '')}</td>"
            f"<td>{_badge(_LANDING_BADGE[v.landing], v.summary)}{detail}</td>"
            f"<td>{_e(v.title or '')}</td><td>{checked}</td></tr>"
        )
    refs.append("</table>")
    return "".join(refs)


_CHECK_BADGE = {
    Verified.OK: ("b-ok", "ok"),
    Verified.FAILED: ("b-failed", "failed"),
    Verified.UNVERIFIED: ("b-warn", "not verified"),
}


def _verification_table(s: PatchSection) -> str:
    """Each verification of the patch's files with its badge and detail."""
    ver = ["<table>"]
    for check in s.verification:
        cls, label = _CHECK_BADGE[check.status]
        detail = f'<br><span class="sub">{_e(check.detail)}</span>' if check.detail else ""
        ver.append(
            f"<tr><td style='width:120px'>{_badge(cls, label)}</td>"
            f"<td><code>{_e(check.file)}</code> {_e(check.what)}{detail}</td></tr>"
        )
    ver.append("</table>")
    return "".join(ver)


def _diff(s: PatchSection) -> str:
    if not s.lines:
        return ""
    count = sum(1 for line in s.lines if line.kind != "hunk")
    if s.base is not None:
        title = "diff against upstream"
    elif s.kind == "overlay":  # a modified upstream file whose base is not pinned: never a "new file"
        title = "hand-kept diff, base not pinned" if s.diff else "base unknown"
    else:
        title = "new file"
    summary = f"{title}: +{s.added} -{s.removed} ({count} lines)"
    rows = "".join(_diff_row(line) for line in s.lines)
    opened = " open" if count <= FOLD_LINES else ""
    return (
        f"<details{opened}><summary>{_e(summary)}</summary>"
        f'<div class="diffwrap"><table class="diff">{rows}</table></div></details>'
    )


def _diff_row(line: DiffLine) -> str:
    if line.kind in ("hunk", "note"):
        return f'<tr class="{line.kind}"><td colspan="4">{_e(line.text)}</td></tr>'
    mark = {"add": "+", "del": "-", "context": " "}[line.kind]
    old = "" if line.old is None else str(line.old)
    new = "" if line.new is None else str(line.new)
    return (
        f'<tr class="{line.kind}"><td class="n">{old}</td><td class="n">{new}</td>'
        f'<td class="m">{mark}</td><td>{_e(line.text)}</td></tr>'
    )
