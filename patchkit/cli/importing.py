"""``patchkit import``: adopt a hand-kept deployment repository."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from patchkit.cli.common import FORMAT, Command, blob_store, hold_lock, run_context
from patchkit.errors import EXIT_FINDINGS, EXIT_OK


@click.command(cls=Command, name="import")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path), default=".")
@click.option("--dry-run", is_flag=True, help="Report what would be imported; write nothing.")
@click.option(
    "--normalize",
    is_flag=True,
    help="Also rewrite the hand-kept diffs into one canonical diff per patch under upstream/ "
    "(where their base can be rebuilt), and delete those they replace.",
)
@click.option(
    "--fetch",
    is_flag=True,
    help="With --normalize: read each overlay's base from its upstream at the stated commit (clones or "
    "downloads the upstream into the cache). The rebuilt base must equal it, and overlays whose diffs are "
    "stale or missing are normalized against it. A module only a /dev/null diff made a module, in an "
    "upstream's tree, becomes an overlay when that upstream has the file at its pinned commit.",
)
@click.option(
    "--delete-referenced",
    is_flag=True,
    help="With --normalize: also delete replaced diffs that the repository's own scripts, tests or build "
    "files name (kept by default, so what the repository runs keeps working).",
)
@FORMAT
@click.pass_context
def import_(
    ctx: click.Context, path: Path, dry_run: bool, normalize: bool, fetch: bool, delete_referenced: bool, fmt: str
) -> None:
    """Turn a hand-kept deployment repository into a patchkit deployment.

    Reads the compose files (every profile), patches/, the hand-kept diffs,
    SHA256SUMS and provenance tables in README.md or patches/README.md, and
    writes lockfile.toml describing them as they are: files stay where they
    are. What no source states (a base commit nobody wrote down) is recorded
    as unknown, never guessed. The report lists what was found, every defect
    with its file and line, and the commands to run next.

    Importing again is a no-op; a repository that already is a patchkit
    deployment is refused. Exit 0 when the lockfile was written (or already
    was), 1 when --normalize left some diffs as they were or could not tell
    whether a module is an upstream file, 2 on bad input.
    """
    from patchkit.importing.adopt import import_repository

    root = path.resolve()
    if normalize and not dry_run and (root / "lockfile.toml").is_file():
        # --normalize rewrites a deployment's files: it holds the write lock. A
        # plain import writes one new file (or nothing) and leaves no work area.
        hold_lock(ctx, root)
    result = None
    if not (normalize and (root / "lockfile.toml").exists()):
        result = import_repository(root, dry_run=dry_run, where=str(path))
    normalized = None
    if normalize and not dry_run:
        from patchkit.importing.normalize import normalize as run
        from patchkit.importing.normalize import source_fetch
        from patchkit.repo import Repo

        repo = Repo(root)
        lock, _ = repo.read_lockfile()
        normalized = run(
            repo,
            lock,
            blob_store(),
            source_fetch(repo, run_context()) if fetch else None,
            delete_referenced=delete_referenced,
        )
    payload: dict[str, Any] = {}
    if result is not None:
        payload["import"] = result.as_dict()
    if normalized is not None:
        payload["normalize"] = normalized.as_dict()
    if fmt == "json":
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
    else:
        if result is not None:
            _print_import(result, dry_run)
        if normalized is not None:
            _print_normalize(normalized)
    undecided = normalized is not None and (normalized.failed or normalized.unknown)
    sys.exit(EXIT_FINDINGS if undecided else EXIT_OK)


def _print_import(result: Any, dry_run: bool) -> None:
    found = result.summary
    head = "would write" if dry_run else "wrote" if result.written else "unchanged:"
    click.echo(f"import: {head} lockfile.toml")
    if result.ignored:
        click.echo(f"import: {'would add' if dry_run else 'added'} .patchkit/ to .gitignore (patchkit's work area)")
    click.echo(
        "found: {images} image(s), {model} model, {upstreams} upstream(s), {overlays} overlay(s), "
        "{modules} module(s), {transformers} transformer(s), {tuning} tuning table(s), {artifacts} other "
        "file(s), {diffs} hand-kept diff(s), {references} upstream reference(s)".format(**found)
    )
    if result.issues:
        notes = sum(1 for i in result.issues if i.severity == "note")
        problems = len(result.issues) - notes
        click.echo(f"\n{problems} problem(s) and {notes} note(s) in the hand-kept repository:")
        for i in result.issues:
            where = i.file if i.line is None else f"{i.file}:{i.line}"
            click.echo(f"  {where}: {i.kind}{' (note)' if i.severity == 'note' else ''}: {i.message}")
            if i.fix:
                click.echo(f"      fix: {i.fix}")
    click.echo("\nnext:")
    for cmd in result.next_commands:
        click.echo(f"  {cmd}")


def _print_normalize(n: Any) -> None:
    click.echo(f"\nnormalize: {len(n.done)} patch(es) now have a canonical diff under upstream/")
    for name in n.done:
        where = " (base read from upstream)" if name in n.from_upstream else ""
        click.echo(f"  {name}: upstream/{name}.diff{where}")
    for _name, rel, line, message in n.found_upstream:
        click.echo(f"  diff-new-file {rel}:{line}: {message}")
    asked = dict(n.not_upstream)
    for name in n.modules:
        click.echo(f"  {name}: {asked.pop(name, 'a whole new file')}; needs no diff to upstream")
    for name, why in asked.items():
        click.echo(f"  {name}: {why}; needs no diff to upstream")
    for name, why, fix in n.unknown:
        click.echo(f"  {name}: {why}\n    fix: {fix}")
    _print_files(n)
    if n.failed:
        click.echo(f"{len(n.failed)} patch(es) keep their hand-kept diffs:")
        for name, why in n.failed:
            click.echo(f"  {name}: {why}")


def _print_files(n: Any) -> None:
    """The hand-kept diffs normalize deleted or kept, and the SHA256SUMS entries it dropped."""
    for rel in n.removed:
        click.echo(f"  removed {rel} ({'only a new module' if rel in n.unneeded else 'replaced'})")
    for rel, where in n.kept_referenced:
        click.echo(f"  kept {rel}: replaced, but {where} names it (--delete-referenced deletes it)")
    for rel in n.dropped_sums:
        click.echo(f"  SHA256SUMS: dropped {rel} (the lockfile does not pin it)")


# The top-level commands of this family; `patchkit.cli.app` registers them on the root group.
COMMANDS: tuple[click.Command, ...] = (import_,)
