"""The patch-series side of ``patchkit rebase`` (``--series NAME``): parse, call the core, render."""

from __future__ import annotations

import json

import click

from patchkit.cli.common import cache_path, find_repo, hold_lock, open_repo
from patchkit.errors import EXIT_FINDINGS, EXIT_OK


def rebase_series(ctx: click.Context, name: str | None, onto: str | None, *, cont: bool, abort: bool, fmt: str) -> bool:
    """Start, continue or abort the rebase of one series (False: this rebase is not one); exit 1 on a conflict."""
    from patchkit.series import bump
    from patchkit.series.rebase import in_progress

    if name is None and not ((cont or abort) and in_progress(find_repo(ctx).root)):
        return False

    if abort:
        repo = find_repo(ctx)
        hold_lock(ctx, repo.root)
        click.echo(
            "series rebase aborted; the repository is as it was" if bump.abort(repo) else "no rebase in progress"
        )
        return True
    repo, lockf, data = open_repo(ctx, writes=True)
    if cont:
        done = bump.resume(repo, lockf, data, cache_path())
    else:
        done = bump.start(repo, lockf, data, name, onto, cache_path())
    if fmt == "json":
        doc = {
            "series": done.series.name,
            "from": done.old,
            "onto": done.new,
            "committed": done.outcome is not None,
            "patches": [
                {
                    "name": r.name,
                    "outcome": r.outcome.value,
                    "files": [{"path": f.path, "outcome": f.outcome, "regions": list(f.regions)} for f in r.files],
                    "absent": r.absent,
                    "notes": r.notes,
                }
                for r in done.result.patches
            ],
            "work_files": list(done.work_files),
        }
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        for line in bump.table(done):
            click.echo(line)
        if done.outcome is not None:
            for rel in done.outcome.written:
                click.echo(f"wrote {rel}")
        else:
            click.echo("nothing in the repository changed; resolve, then: patchkit rebase --continue")
            for rel in done.work_files:
                click.echo(f"  resolve {rel}")
    ctx.exit(EXIT_OK if done.outcome is not None else EXIT_FINDINGS)
    return True
