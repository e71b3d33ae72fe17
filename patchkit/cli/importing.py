"""``patchkit import``: adopt a hand-kept deployment repository."""

from __future__ import annotations

import sys
from pathlib import Path

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
        from patchkit.store.repo import Repo

        repo = Repo(root)
        lock, _ = repo.read_lockfile()
        normalized = run(
            repo,
            lock,
            blob_store(),
            source_fetch(repo, run_context()) if fetch else None,
            delete_referenced=delete_referenced,
        )
    from patchkit.formats import importing as report

    click.echo(report.render(result, normalized, dry_run, fmt), nl=False)
    undecided = normalized is not None and (normalized.failed or normalized.unknown)
    sys.exit(EXIT_FINDINGS if undecided else EXIT_OK)


# The top-level commands of this family; `patchkit.cli.app` registers them on the root group.
COMMANDS: tuple[click.Command, ...] = (import_,)
