"""``patchkit refs``, ``patchkit audit`` and ``patchkit sbom``: upstream references, the auditor's report, the SBOM."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import click

from patchkit.cli.common import (
    FORMAT,
    Command,
    SubGroup,
    blob_store,
    cache_path,
    github_tracker,
    open_repo,
    run_context,
)
from patchkit.cli.signing import KEY, load_key
from patchkit.errors import EXIT_FINDINGS, EXIT_OK, BadInput


@click.command(cls=Command, name="refs")
@click.option("--refresh", is_flag=True, help="Ask the GitHub API for each reference's state and record it.")
@FORMAT
@click.pass_context
def refs_command(ctx: click.Context, refresh: bool, fmt: str) -> None:
    """List every patch's upstream references with their last known state and its age.

    Offline by default: the states recorded in lockfile.toml. A merged fix
    whose merge commit the pinned git upstream contains (asked of its cached
    clone) makes its patch a drop candidate.

    \b
    --refresh asks the GitHub REST API (GITHUB_API_URL, default
    https://api.github.com; a token from GITHUB_TOKEN if set) whether each
    pull request is open, closed or merged, its merge and head commits, and
    records the answers with the time (lockfile.toml and SHA256SUMS; nothing
    is written when nothing changed). Unchanged answers are conditional
    requests (ETag) that cost no rate limit. A pull request whose head moved
    since it was recorded is reported. Exit 1 if a reference does not exist,
    3 if GitHub cannot be reached or its rate limit is used up (what was
    learned before is still recorded).
    """
    from patchkit.tracking import refs

    now = dt.datetime.now(dt.UTC)
    repo, lock, _ = open_repo(ctx, writes=refresh)
    result = None
    written: list[str] = []
    if refresh:
        result = refs.refresh(lock, github_tracker(), now)
        written = refs.record(repo, lock, result)
        lock = refs.with_states(lock, result)
    assessed = refs.assess(
        lock, refs.git_containment(lock, cache_path(), fetch=refresh, progress=run_context().progress), now
    )
    from patchkit.formats import refs as report

    click.echo(report.render(assessed, result, written, fmt), nl=False)
    if result is not None and result.failure is not None:
        raise result.failure
    ctx.exit(EXIT_FINDINGS if result is not None and result.not_found else EXIT_OK)


@click.group(cls=SubGroup, invoke_without_command=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here (default: stdout).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["html", "markdown", "json"]),
    default=None,
    help="html (default; .md/.json outputs default to markdown/json), markdown for a pull request, json.",
)
@click.option(
    "--since",
    metavar="REV",
    help="Also show how each patch changed since this git revision of the repository (its interdiff).",
)
@click.pass_context
def audit(ctx: click.Context, output: Path | None, fmt: str | None, since: str | None) -> None:
    """Write the audit report: every patch, why it exists, its upstream base, full diff and verification.

    Offline: statuses come from `patchkit check` and the reference states
    recorded by `patchkit refs --refresh`. The HTML page is one
    self-contained file (inline styles, no scripts, nothing fetched) that
    opens anywhere; the Markdown form fits a pull request description.

    \b
    Recorded audits (audits.toml, docs/audit.md):
      patchkit audit certify NAME --criteria safe-to-deploy --key KEY
      patchkit audit certify NAME --delta --criteria safe-to-deploy --key KEY
      patchkit audit status          # what the policy's criteria cover, and what changed since
      patchkit audit statement N     # the bytes audit N's signature covers (for ssh-keygen -Y verify)
      patchkit audit import NAME --from URL --rev REV --trust PRINCIPAL   # another repository's audits
    """
    if ctx.invoked_subcommand is not None:
        if output is not None or fmt is not None or since is not None:
            raise BadInput("-o, --format and --since are for the report: patchkit audit -o FILE")
        return
    from patchkit.audit.report import build
    from patchkit.formats.audit import AUDIT
    from patchkit.store.repo import atomic_write, output_target

    if fmt is None:
        suffix = output.suffix.lower() if output else ""
        fmt = {".md": "markdown", ".markdown": "markdown", ".json": "json"}.get(suffix, "html")
    repo, lock, data = open_repo(ctx)
    target = output_target(output, repo, lock) if output is not None else None
    built = build(repo, lock, data, blob_store(), cache_path(), dt.datetime.now(dt.UTC), since=since)
    text = AUDIT.render(built, fmt)
    if target is None:
        click.echo(text, nl=False)
        return
    atomic_write(target, text.encode("utf-8"))
    drops = len(built.drop_candidates)
    verdict = "check passes" if built.check_ok else "check FAILS"
    click.echo(f"wrote {output}: {len(built.patches)} patches, {drops} drop candidates, {verdict}", err=True)


@audit.command("certify")
@click.argument("name")
@click.option(
    "--criteria",
    "criteria",
    multiple=True,
    required=True,
    metavar="NAME",
    help="What the review establishes (repeatable).",
)
@click.option("--delta", is_flag=True, help="Review only the change since the patch's last audit (chained to it).")
@click.option("--notes", metavar="TEXT", help="What the reviewer wants on record.")
@click.option(
    "-I", "--identity", metavar="PRINCIPAL", help="Who signs, when the key's allowed-signers line names several."
)
@KEY
@FORMAT
@click.pass_context
def audit_certify(
    ctx: click.Context,
    name: str,
    criteria: tuple[str, ...],
    delta: bool,
    notes: str | None,
    identity: str | None,
    key_path: Path,
    fmt: str,
) -> None:
    """Record, signed, that you reviewed patch NAME at its current bytes (SERIES/PATCH for a series patch).

    Writes an [[audit]] entry to audits.toml (made with cargo-vet's criteria
    safe-to-deploy and safe-to-run and a policy requiring safe-to-deploy, the
    first time) and keeps the reviewed text under audits/reviewed/, so a later
    change can be shown as an interdiff. The key's allowed-signers line must
    allow the namespace "patchkit-audit". --delta records a review of the
    change since the last audit for the same criteria: run `patchkit audit
    status` to see it first.
    """
    from patchkit.signing import certify as audits
    from patchkit.store.repo import write_all

    repo, lock, _ = open_repo(ctx, writes=True)
    key = load_key(key_path)
    now = dt.datetime.now(dt.UTC)
    made, files = audits.certify(
        repo, lock, name, criteria, key=key, identity=identity, delta=delta, notes=notes, now=now
    )
    write_all(repo.root, files)
    from patchkit.formats import certify as report

    click.echo(report.certified(made, name, criteria, fmt), nl=False)


@audit.command("status")
@FORMAT
@click.pass_context
def audit_status(ctx: click.Context, fmt: str) -> None:
    """Every patch against the criteria the policy requires: audited, carried over, needing a delta, unaudited.

    Exit 1 when a patch is not covered (or an entry's signature does not
    verify), so CI can require reviews; a patch needing a delta audit is shown
    with the change since its last audit.
    """
    from patchkit.signing import certify as audits

    repo, lock, _ = open_repo(ctx)
    table = audits.load(repo)
    if table is None:
        raise BadInput(f"no {audits.AUDITS_FILE} here yet", "record the first audit: patchkit audit certify NAME")
    found, problems = audits.statuses(repo, lock, table, dt.datetime.now(dt.UTC))
    failing = [s for s in found if s.coverage in (audits.Coverage.NEEDS_DELTA, audits.Coverage.UNAUDITED)]
    from patchkit.formats import certify as report

    bad = failing or any(p.severity == "error" for p in problems)
    click.echo(report.statuses(found, problems, not bad, fmt), nl=False)
    ctx.exit(EXIT_FINDINGS if bad else EXIT_OK)


@audit.command("import")
@click.argument("name")
@click.option("--from", "source", required=True, metavar="URL", help="The other repository (a git URL or path).")
@click.option("--rev", required=True, metavar="REV", help="Its commit (or a branch or tag, pinned to its commit).")
@click.option("--path", default="audits.toml", show_default=True, help="Its audits file.")
@click.option("--trust", multiple=True, metavar="PRINCIPAL", help="Whose audits count (repeat; OpenSSH patterns).")
@FORMAT
@click.pass_context
def audit_import(
    ctx: click.Context, name: str, source: str, rev: str, path: str, trust: tuple[str, ...], fmt: str
) -> None:
    """Count another repository's audits: copy its audits file in, pinned by sha256, trusting named signers.

    The copy goes to audits/imported/NAME.toml and [imports.NAME] in
    audits.toml records where it came from (the commit REV resolved to) and
    its sha256. An imported audit covers a patch of this deployment whose
    reviewed bytes are the same (names need not match), when its signature
    verifies with this repository's allowed signers for a principal --trust
    names. Run it again to take a newer revision.
    """
    from patchkit.signing import certify as audits
    from patchkit.store.repo import write_all

    repo, _, _ = open_repo(ctx, writes=True)
    imp, files = audits.import_audits(repo, name, source, rev, path, trust, run_context())
    write_all(repo.root, files)
    from patchkit.formats import certify as report

    click.echo(report.imported(imp, fmt), nl=False)


@audit.command("statement")
@click.argument("index", type=click.IntRange(min=0))
@click.option("--signature", is_flag=True, help="Print the entry's armored signature instead.")
@click.pass_context
def audit_statement(ctx: click.Context, index: int, signature: bool) -> None:
    """Print the exact bytes audit INDEX's signature covers, to check it with stock ssh-keygen.

    \b
    patchkit audit statement 0 --signature > a0.sig
    patchkit audit statement 0 > a0.statement
    ssh-keygen -Y verify -f allowed_signers -I WHO -n patchkit-audit \\
        -s a0.sig < a0.statement
    """
    from patchkit.signing import certify as audits

    repo, _, _ = open_repo(ctx)
    table = audits.load(repo)
    entries = table.audits if table is not None else ()
    if index >= len(entries):
        raise BadInput(f"no audit[{index}] in {audits.AUDITS_FILE} ({len(entries)} entries)")
    out = entries[index].signature.encode() if signature else entries[index].statement
    click.echo(out, nl=False)  # bytes: written as they are


@click.command(cls=Command)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here (default: stdout).")
@click.pass_context
def sbom(ctx: click.Context, output: Path | None) -> None:
    """Write the deployment's SBOM: CycloneDX 1.6 JSON, every patch with its pedigree.

    \b
    Components: the pinned images (pkg:oci, by digest), the model
    (pkg:huggingface, by revision), the upstreams (pkg:pypi, pkg:github),
    every overlay, module and transformer with its pedigree (ancestors:
    the upstream base file and its sha256; patches: the diff and the
    issues and pull requests it resolves), every series with its patches
    in order, the tuning tables and artifacts. Offline: every value comes
    from lockfile.toml and the files it pins. The document is checked
    against the CycloneDX 1.6 schema before it is written. The timestamp
    is $SOURCE_DATE_EPOCH when set (reproducible SBOMs), else now.

    \b
    patchkit sbom -o sbom.cdx.json     # for Dependency-Track, cyclonedx-cli
    """
    from patchkit.audit import sbom as cdx
    from patchkit.bundle.archive import parse_epoch
    from patchkit.cli.common import source_date_epoch
    from patchkit.store.repo import atomic_write, output_target

    epoch = parse_epoch(source_date_epoch())
    now = dt.datetime.fromtimestamp(epoch, dt.UTC) if epoch is not None else dt.datetime.now(dt.UTC)
    repo, lock, data = open_repo(ctx)
    target = output_target(output, repo, lock) if output is not None else None
    text = cdx.render(cdx.build(repo, lock, data, now.replace(microsecond=0)))
    if target is None:
        click.echo(text, nl=False)
        return
    atomic_write(target, text.encode("utf-8"))
    click.echo(f"wrote {output}: CycloneDX {cdx.SPEC_VERSION}", err=True)


# The top-level commands of this family; `patchkit.cli.app` registers them on the root group.
COMMANDS: tuple[click.Command, ...] = (
    refs_command,
    audit,
    sbom,
)
