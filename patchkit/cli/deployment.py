"""The deployment's own pins: init, check, sums, lock, add, remove, diff, status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from patchkit.cli.common import (
    FORMAT,
    INSECURE,
    Command,
    blob_store,
    find_repo,
    hf_hub,
    hold_lock,
    open_repo,
    print_changes,
    registry_client,
    run_context,
)
from patchkit.errors import EXIT_BAD_INPUT, EXIT_EXTERNAL, EXIT_FINDINGS, EXIT_OK, PatchkitError

if TYPE_CHECKING:
    from patchkit.images.registry import RegistryClient
    from patchkit.lockfile.model import Lockfile
    from patchkit.net.github import IssueTracker
    from patchkit.net.hub import Hub
    from patchkit.store.repo import Repo


@click.command(cls=Command)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=".")
@click.option("--name", help="Deployment name (default: the directory's name).")
def init(directory: Path, name: str | None) -> None:
    """Create an empty deployment in DIRECTORY that `patchkit check` passes on.

    Writes lockfile.toml, SHA256SUMS and a starter deploy.toml (unless one
    exists; docs/deploy.md) and creates patches/, upstream/ and tuning/.
    Refuses to overwrite an existing lockfile.
    """
    from patchkit.edit.changes import init as do_init

    outcome = do_init(directory, name)
    for rel in outcome.written:
        click.echo(f"created {directory / rel}")


@click.command(cls=Command)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "github"]),
    default="text",
    show_default=True,
    help="text for people, json for machines, github for workflow annotations (::error file=…,line=…::).",
)
@click.option(
    "--online",
    is_flag=True,
    help="Also ask the registries (pinned digests resolve, tags that moved) and GitHub (references: "
    "drop candidates, moved pull request heads; nothing is recorded) and the Hub (the model revision exists).",
)
@click.option(
    "--image-bases",
    is_flag=True,
    help="With --online: compare each overlay's base with the file at its target in the pinned images.",
)
@click.option(
    "--deep",
    is_flag=True,
    help="Also read each pinned upstream tree (git, wheel, directory or image) and check that every import "
    "of the upstream's own package in an overlay or module resolves there.",
)
@INSECURE
@click.pass_context
def check(ctx: click.Context, fmt: str, online: bool, image_bases: bool, deep: bool, insecure: tuple[str, ...]) -> None:
    """Verify every offline invariant of the deployment; exit 1 on any finding.

    \b
    - every pinned file exists, is a regular file inside the repository and
      matches its sha256;
    - every file in patches/, upstream/ and tuning/ is pinned (no orphans);
    - every diff parses with consistent hunk counts, names its base, and,
      reversed onto its committed overlay, gives exactly the pinned base;
    - SHA256SUMS is exactly what `patchkit sums` writes;
    - images are pinned by digest, the model by full commit, container
      targets are absolute and claimed once.

    Diff-only patches are materialized and re-hashed when their base is in
    the local cache; otherwise a note says so.
    """
    from patchkit.check.run import check as run_check
    from patchkit.formats.findings import render
    from patchkit.store.repo import pending_journal

    # While a write is journaled, its writer may still be renaming files in:
    # wait for it, so check sees one state, never a mix of two.
    try:
        repo, lock, data = open_repo(ctx, locks=pending_journal(find_repo(ctx).root))
    except PatchkitError as e:
        if fmt != "text":  # a machine reading stdout gets its document all the same; the exit code stands
            from patchkit.core.findings import unloadable

            click.echo(render(unloadable(e), fmt), nl=False)
        raise
    result = run_check(repo, lock, data, blob_store())
    if image_bases and not online:
        from patchkit.errors import BadInput

        raise BadInput("--image-bases needs --online (it reads files from the registries)")
    if online:
        from patchkit.lockfile.tomlpos import LineIndex
        from patchkit.tracking.online import online_findings

        index = LineIndex(data.decode("utf-8"))
        result.findings.extend(
            online_findings(
                lock,
                index.line_of,
                run_context(),
                registry=lambda: _registry(insecure),
                hub=_hub,
                tracker=_tracker,
                image_bases=image_bases,
                added=_build_adds(repo, lock),
            )
        )
    if deep:
        from patchkit.check.deep import findings as deep_findings

        # The offline check already notes the undefined names it could compare: each is said once.
        result.findings.extend(
            f for f in deep_findings(repo, lock, run_context(), blob_store()) if f not in result.findings
        )
    click.echo(render(result, fmt), nl=False)
    if not result.ok:
        ctx.exit(EXIT_FINDINGS)
    ctx.exit(EXIT_EXTERNAL if result.unknown else EXIT_OK)


@click.command(cls=Command)
@click.option("--check", "verify", is_flag=True, help="Verify SHA256SUMS and every hash it lists; write nothing.")
@FORMAT
@click.pass_context
def sums(ctx: click.Context, verify: bool, fmt: str) -> None:
    """Write SHA256SUMS over the lockfile and every file it pins.

    GNU coreutils format, sorted by name; `sha256sum -c --strict SHA256SUMS`
    accepts it. Refuses (exit 1) while a pinned file does not match its pin.
    """
    if verify:
        from patchkit.check.verify_sums import check_sums

        result = check_sums(find_repo(ctx))
        from patchkit.formats.findings import render

        click.echo(render(result, fmt, what="sums --check"), nl=False)
        ctx.exit(EXIT_OK if result.ok else EXIT_FINDINGS)
    from patchkit.edit import changes as edit

    repo, lock, data = open_repo(ctx, writes=True)
    outcome = edit.write_sums(repo, lock, data)
    print_changes(outcome, fmt, "SHA256SUMS is up to date")


@click.command(cls=Command)
@click.option(
    "--record-verified",
    is_flag=True,
    help="Also record, for each base that records nothing yet, its upstream pin and the image it is mounted over.",
)
@FORMAT
@click.pass_context
def lock(ctx: click.Context, fmt: str, record_verified: bool) -> None:
    """Refresh file pins after an intended edit, and print each change (old -> new).

    Re-hashes every pinned file; regenerates the diff of an edited overlay
    from its pinned base (found in the cache or rebuilt from the overlay's
    committed version); rewrites lockfile.toml canonically and SHA256SUMS.
    Never changes an image digest, the model revision or an upstream commit.
    --record-verified fills in 'verified' for a lockfile written before it
    existed; a base that records one keeps it (only a rebase moves it).
    """
    from patchkit.edit.changes import relock

    repo, lockf, _ = open_repo(ctx, writes=True)
    outcome = relock(repo, lockf, blob_store(), record=record_verified)
    print_changes(outcome, fmt, "nothing changed")


@click.command(cls=Command)
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target", help="Absolute container path the file is mounted at.")
@click.option("--name", help="Entry name (default: derived from the file name).")
@click.option(
    "--kind",
    type=click.Choice(["overlay", "module", "transformer", "tuning", "artifact"]),
    help="Default: overlay with --base; tuning under tuning/; module under patches/; else artifact.",
)
@click.option("--upstream", help="Upstream name (declared in the lockfile) the overlay is based on.")
@click.option("--commit", help="Upstream commit of the base (default: the upstream's pinned commit).")
@click.option("--upstream-path", help="Path of the base file inside the upstream tree.")
@click.option(
    "--base",
    "base_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="The upstream base file (read once to pin its sha256 and write the diff).",
)
@click.option("--ref", "refs", multiple=True, help="Upstream issue/PR (owner/repo#N) or commit URL; repeatable.")
@click.option("--reason", help="One line: why the deployment carries this.")
@click.option("--drop-when", help="When the patch can be dropped, e.g. 'vllm-project/vllm#47291 is merged'.")
@click.option("--diff-only", is_flag=True, help="Commit only the diff; PATH must be outside the repository.")
@FORMAT
@click.pass_context
def add(ctx: click.Context, /, path: Path, fmt: str, **options: Any) -> None:
    """Pin PATH: an overlay, new module, transformer, tuning table or artifact.

    A file outside the repository is copied into patches/ (tuning/ for a
    tuning table). An overlay's diff against --base is written to
    upstream/NAME.diff. Updates lockfile.toml and SHA256SUMS.
    """
    from patchkit.edit.changes import AddRequest
    from patchkit.edit.changes import add as do_add

    repo, lockf, _ = open_repo(ctx, writes=True)
    options["refs"] = tuple(options["refs"])
    outcome = do_add(repo, lockf, AddRequest(path=path, **options), blob_store(), run_context())
    print_changes(outcome, fmt, "nothing changed")


@click.command(cls=Command)
@click.argument("name")
@click.option("--keep-files", is_flag=True, help="Unpin only; leave the files on disk.")
@FORMAT
@click.pass_context
def remove(ctx: click.Context, name: str, keep_files: bool, fmt: str) -> None:
    """Unpin NAME and delete the files only it named (the patch and its diff)."""
    from patchkit.edit.changes import remove as do_remove

    repo, lockf, _ = open_repo(ctx, writes=True)
    outcome = do_remove(repo, lockf, name, keep_files)
    print_changes(outcome, fmt, "nothing changed")


@click.command(cls=Command)
@click.argument("names", nargs=-1)
@click.option("--stat", "show_stat", is_flag=True, help="Lines added and removed per patch instead of the diff.")
@click.option("--write", is_flag=True, help="Write the diffs to their files under upstream/ and refresh their pins.")
@FORMAT
@click.pass_context
def diff(ctx: click.Context, names: tuple[str, ...], show_stat: bool, write: bool, fmt: str) -> None:
    """Print each overlay's diff against its upstream base (all overlays by default).

    Headers are a/<upstream path> and b/<upstream path>, with no timestamps:
    the same input gives the same bytes every run.
    """
    from patchkit.edit.changes import regenerate_diffs, write_diffs

    repo, lockf, _ = open_repo(ctx, writes=write)
    result = regenerate_diffs(repo, lockf, names, blob_store())
    if write:
        outcome = write_diffs(repo, lockf, result)
        print_changes(outcome, fmt, "diffs are up to date")
        return
    from patchkit.formats import diffs

    click.echo(diffs.render(result, show_stat, fmt), nl=False)  # the diffs' own bytes, never re-encoded


@click.command(cls=Command)
@FORMAT
@click.pass_context
def status(ctx: click.Context, fmt: str) -> None:
    """Where the repository stands: a rebase in progress and its files, or an interrupted write."""
    from patchkit.rebase import overlays as rb
    from patchkit.rebase.series import status as series_status
    from patchkit.store.repo import recover

    repo = find_repo(ctx)
    hold_lock(ctx, repo.root)
    how = recover(repo.root)
    state = rb.status(repo)
    state["finished_interrupted_write"] = how == "finished"
    state["undid_interrupted_write"] = how == "undone"
    series = series_status(repo.root)
    if series is not None:
        state["series_rebase"] = series
    broken = state["rebase"] is not None and "error" in state["rebase"]
    if fmt == "json":
        click.echo(json.dumps(state, indent=2, sort_keys=True))
        ctx.exit(EXIT_BAD_INPUT if broken else EXIT_OK)
    if how == "finished":
        click.echo("finished a write of several files that was interrupted")
    elif how == "undone":
        click.echo("undid a write of several files that was interrupted before it changed anything")
    if series is not None:
        _print_series_status(series)
    r = state["rebase"]
    if r is not None:
        _print_rebase_status(ctx, r)
    elif series is None:
        click.echo("no rebase in progress")


def _print_rebase_status(ctx: click.Context, r: dict[str, Any]) -> None:
    """The rebase in progress, as ``patchkit status`` shows it: its files and what is left to do (exit 2 if broken)."""
    if "error" in r:
        click.echo(f"patchkit: error: {r['error']}", err=True)
        ctx.exit(EXIT_BAD_INPUT)
    click.echo(f"rebase of {r['upstream']} in progress: {r['from']} -> {r['to']}")
    for f in r["conflicts"]:
        left = "resolved" if f["resolved"] else f"markers at lines {', '.join(map(str, f['markers'][:5]))}"
        if f.get("broken"):
            left = "broken: fix it there; --continue checks it again"
        click.echo(f"  {f['patch']}: {f['file']} ({left})")
    for name in r["deleted"]:
        click.echo(f"  {name}: deleted upstream; --continue --drop {name} to drop it")
    click.echo("then: patchkit rebase --continue (or --abort)")


def _print_series_status(s: dict[str, Any]) -> None:
    """The series rebase in progress, as ``patchkit status`` shows it."""
    if "error" in s:
        click.echo(f"series rebase: {s['error']}")
        return
    click.echo(f"rebase of series {s['series']} in progress onto {str(s['onto'])[:12]}: waits on {s['stopped']}")
    for f in s["conflicts"]:
        left = "resolved" if f["resolved"] else f"markers at lines {', '.join(map(str, f['markers'][:5]))}"
        if f.get("broken"):
            left = "broken: fix it there; --continue checks it again"
        click.echo(f"  {f['file']} ({left})")
    click.echo("then: patchkit rebase --continue (or --abort)")


# The top-level commands of this family; `patchkit.cli.app` registers them on the root group.
COMMANDS: tuple[click.Command, ...] = (
    init,
    check,
    sums,
    lock,
    add,
    remove,
    diff,
    status,
)


# The clients check --online asks, built here from the options and the environment, each when it is needed.


def _registry(insecure: tuple[str, ...]) -> RegistryClient:
    return registry_client(insecure)


def _hub() -> Hub:
    return hf_hub()


def _build_adds(repo: Repo, lock: Lockfile) -> dict[str, str]:
    """What ``image build`` puts in a derived layer besides the pins (guard.json), from deploy.toml.

    Nothing without derived images or a readable deploy.toml (the offline
    check reports one that cannot be read).
    """
    if not lock.derived:
        return {}
    from patchkit.emit.config import CONFIG_NAME, loads_config
    from patchkit.ship.verify import build_adds
    from patchkit.store.repo import Escape

    try:
        config = loads_config(repo.read(CONFIG_NAME).decode("utf-8"), CONFIG_NAME)
    except (OSError, Escape, UnicodeDecodeError, PatchkitError):
        return {}
    return build_adds(lock, config)


def _tracker() -> IssueTracker:
    from patchkit.cli.common import github_tracker

    tracker: IssueTracker = github_tracker()
    return tracker
