"""The patch-series side of ``patchkit rebase`` (``--series NAME``): parse, call the core, render."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cli.common import find_repo, hold_lock, open_repo, run_context
from patchkit.errors import EXIT_FINDINGS, EXIT_OK, Refused

if TYPE_CHECKING:
    from patchkit.rebase.bump import Done
    from patchkit.series.stalepins import StalePin
    from patchkit.store.repo import Repo


def _nothing_in_progress() -> Refused:
    """--continue or --abort with nothing to go on with: a state the command cannot build on (exit 1), as in git."""
    return Refused("no series rebase in progress", "start one with patchkit rebase --series NAME --onto REV")


def _abort(ctx: click.Context) -> None:
    from patchkit.rebase import bump

    repo = find_repo(ctx)
    hold_lock(ctx, repo.root)
    if not bump.abort(repo):
        raise _nothing_in_progress()
    click.echo("series rebase aborted; the repository is as it was")


def rebase_series(
    ctx: click.Context,
    name: str | None,
    onto: str | None,
    *,
    cont: bool,
    abort: bool,
    fmt: str,
    accept: dict[str, str],
    summary: Path | None,
    remembered: bool = True,
) -> bool:
    """Start, continue or abort the rebase of one series (False: this rebase is not one); exit 1 on a stop."""
    if name is None and not (cont or abort):
        return False  # the overlays' rebase: the series machinery is not even imported
    from patchkit.rebase.series import in_progress

    if name is None and not in_progress(find_repo(ctx).root):
        return False
    from patchkit.rebase import bump

    if abort:
        _abort(ctx)
        return True
    repo, lockf, data = open_repo(ctx, writes=True)
    if cont and not in_progress(repo.root):
        raise _nothing_in_progress()
    if summary is not None:
        from patchkit.store.repo import output_target

        output_target(summary, repo, lockf)  # refused before anything is written
    if cont:
        done = bump.resume(repo, lockf, data, run_context(), accept)
        if done is None:
            click.echo("the rebase had already been committed; cleaned up its work area")
            return True
    else:
        done = bump.start(repo, lockf, data, name, onto, run_context(), accept, remembered)
    if summary is not None:
        from patchkit.formats import rebase as report
        from patchkit.signing.certify import review_summary
        from patchkit.store.repo import atomic_write, output_target

        text = report.series_summary_markdown(done) + review_summary(repo)
        atomic_write(output_target(summary, repo, lockf), text.encode())
    _report(done, fmt, _stale_pins(repo, done))
    return ctx.exit(EXIT_OK if done.outcome is not None else EXIT_FINDINGS)  # never returns: exit 0 or 1


def _report(done: Done, fmt: str, stale: list[StalePin]) -> None:
    """The rebase's report (JSON or text); each stale pin of the repository's own files as a note."""
    from patchkit.formats import rebase as report

    if fmt == "json":
        click.echo(json.dumps(report.series_json(done, stale), indent=2, sort_keys=True))
    else:
        click.echo("\n".join(report.series_text(done)))
    for pin in stale:
        click.echo(f"note: {pin.message()}", err=True)


def _stale_pins(repo: Repo, done: Done) -> list[StalePin]:
    """The repository's own pins of the patches' old sha256 (a stack lock, a Containerfile), once committed."""
    from patchkit.series.stalepins import stale_pins

    return stale_pins(repo.root, done.outcome.changes) if done.outcome is not None else []
