"""The command line: parse arguments, call one core function, render its result.

Heavy or rarely needed modules are imported inside the commands that use
them, so ``patchkit --help`` and ``patchkit check`` start fast.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from patchkit import __version__
from patchkit.errors import EXIT_BAD_INPUT, EXIT_EXTERNAL, EXIT_FINDINGS, EXIT_OK, LockfileError, PatchkitError

EXIT_INTERNAL = 4

EPILOG = """\b
Exit codes:
  0  all good
  1  findings: a check failed, or the repository is not in a state the command can build on
  2  bad usage or bad input (a malformed lockfile, a wrong argument, an unwritable repository)
  3  an external service or tool failed
  4  internal error in patchkit (please report it; --verbose shows the traceback)
"""


class _Group(click.Group):
    """Turns patchkit errors into one-line messages and their exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PatchkitError as e:
            if _verbose(ctx):
                # The traceback, then the same message and exit code as without --verbose.
                import traceback

                traceback.print_exc(file=sys.stderr)
            _report_error(e)
            ctx.exit(e.exit_code)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("patchkit: interrupted; nothing was half-written", err=True)
            ctx.exit(130)
        except Exception as e:  # noqa: BLE001 - the one place a bug becomes exit 4 instead of a traceback
            if _verbose(ctx):
                import traceback

                traceback.print_exc(file=sys.stderr)
            click.echo(f"patchkit: internal error: {type(e).__name__}: {e}", err=True)
            click.echo("  rerun with --verbose for the traceback, and please report it", err=True)
            ctx.exit(EXIT_INTERNAL)


def _verbose(ctx: click.Context) -> bool:
    root = ctx.find_root()
    return bool(root.obj and root.obj.get("verbose"))


def _report_error(e: PatchkitError) -> None:
    """One line per problem (and its fix); names in messages cannot forge lines or reach the terminal raw."""
    from patchkit.report import printable

    if isinstance(e, LockfileError):
        for p in e.problems:
            click.echo(f"patchkit: error: {printable(p.render())}", err=True)
            if p.hint:
                click.echo(f"  fix: {printable(p.hint)}", err=True)
        return
    click.echo(f"patchkit: error: {printable(e.message)}", err=True)
    if e.hint:
        click.echo(f"  fix: {printable(e.hint)}", err=True)


def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """A callback storing a global option given on any command in the root context."""

    def store(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None or value is False:
            return  # not given here: what the group level (or the default) said stands
        root = ctx.find_root()
        root.obj = root.obj or {}
        root.obj[key] = value
        if key == "cache_dir":
            import os

            # One place decides the cache: the core reads PATCHKIT_CACHE.
            os.environ["PATCHKIT_CACHE"] = str(value)

    return store


def _global_options() -> list[click.Option]:
    """The options every command takes, before or after its name: ``patchkit -C X check`` or ``check -C X``."""
    return [
        click.Option(
            ["-C", "--repo", "repo_dir"],
            type=click.Path(file_okay=False, path_type=Path),
            expose_value=False,
            callback=_remember("repo_dir"),
            help="Deployment repository (default: the nearest directory upward holding lockfile.toml).",
        ),
        click.Option(
            ["--cache-dir", "cache_dir"],
            type=click.Path(file_okay=False, path_type=Path),
            expose_value=False,
            callback=_remember("cache_dir"),
            help="patchkit's cache of upstream clones, wheels and base files "
            "(default: $XDG_CACHE_HOME/patchkit; env PATCHKIT_CACHE).",
        ),
        click.Option(
            ["-v", "--verbose", "verbose"],
            is_flag=True,
            expose_value=False,
            callback=_remember("verbose"),
            help="Show tracebacks for errors.",
        ),
        click.Option(
            ["--no-wait", "no_wait"],
            is_flag=True,
            envvar="PATCHKIT_NO_WAIT",
            expose_value=False,
            callback=_remember("no_wait"),
            help="Fail at once (exit 1) when another patchkit is writing the repository, instead of waiting for it.",
        ),
    ]


class _Command(click.Command):
    """A command that also takes the global options."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_global_options())


class _SubGroup(_Group):
    """A command group below ``patchkit`` (image, model, upstream, …): its commands take the global options."""

    command_class = _Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(_global_options())


_SubGroup.group_class = _SubGroup


class _Root(_Group):
    command_class = _Command
    group_class = _SubGroup


@click.group(cls=_Root, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="patchkit")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """patchkit: pin, check and ship the patches, artifacts and images of a deployment.

    The lockfile (lockfile.toml) pins every image digest, the model revision,
    upstream commits and the sha256 of every file the deployment runs.
    `patchkit check` proves the repository matches it.

    -C/--repo, --cache-dir, -v/--verbose and --no-wait are taken before the
    command's name or after it, by every command.
    """
    ctx.obj = ctx.obj or {}


cli.params[:0] = _global_options()


def _repo(ctx: click.Context) -> Any:
    """The deployment repository: --repo, or the nearest one upward from here."""
    from patchkit.repo import Repo, find_root

    given = (ctx.find_root().obj or {}).get("repo_dir")
    root = find_root(given if given is not None else Path.cwd())
    if given is not None and root != Path(given).resolve():
        from patchkit.errors import BadInput

        raise BadInput(f"{given}: no lockfile.toml there", "run `patchkit init` in it first")
    return Repo(root)


def _open(ctx: click.Context, *, writes: bool = False, locks: bool = False) -> tuple[Any, Any, bytes]:
    """The repository and its lockfile; a writing command first takes the write lock.

    Under the lock it finishes an interrupted write and only then reads the
    lockfile, so its read-modify-write never loses another writer's change.
    """
    repo = _repo(ctx)
    if writes or locks:
        _lock(ctx, repo.root)
    if writes:
        from patchkit.repo import recover

        if recover(repo.root):
            click.echo("patchkit: finished a write that was interrupted earlier", err=True)
    lock, data = repo.read_lockfile()
    return repo, lock, data


def _lock(ctx: click.Context, root: Path) -> None:
    """Hold the repository's exclusive write lock until the command ends (once per process)."""
    from patchkit.repo import lock_repository

    top = ctx.find_root()
    if top.obj.get("lock") is not None:
        return
    held = lock_repository(
        root, wait=not top.obj.get("no_wait"), on_wait=lambda message: click.echo(f"patchkit: {message}", err=True)
    )
    top.obj["lock"] = held
    top.call_on_close(held.release)


def _cache() -> Path:
    from patchkit.cache import cache_dir

    return cache_dir()


def _store() -> Any:
    from patchkit.cache import BlobStore, cache_dir

    return BlobStore(cache_dir())


def _print_changes(outcome: Any, fmt: str, nothing: str) -> None:
    from patchkit.report import json_safe, printable

    if fmt == "json":
        doc = {
            "changes": [c.as_dict() for c in outcome.changes],
            "written": outcome.written,
            "removed": outcome.removed,
        }
        click.echo(json.dumps(json_safe(doc), indent=2, sort_keys=True))
        return
    for c in outcome.changes:
        click.echo(printable(f"{c.what}: {c.old} -> {c.new}"))
    for rel in outcome.removed:
        click.echo(f"removed {printable(rel)}")
    for rel in outcome.written:
        click.echo(f"wrote {printable(rel)}")
    if not outcome.changes and not outcome.written and not outcome.removed:
        click.echo(nothing)


PLATFORM = click.option("--platform", default="linux/amd64", show_default=True, help="os/architecture[/variant].")
INSECURE = click.option(
    "--insecure-registry",
    "insecure",
    multiple=True,
    metavar="HOST[:PORT]",
    help="Allow plain HTTP for this registry (loopback registries always may).",
)


FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output for people (text) or machines (json).",
)


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=".")
@click.option("--name", help="Deployment name (default: the directory's name).")
def init(directory: Path, name: str | None) -> None:
    """Create an empty deployment in DIRECTORY that `patchkit check` passes on.

    Writes lockfile.toml and SHA256SUMS and creates patches/, upstream/ and
    tuning/. Refuses to overwrite an existing lockfile.
    """
    from patchkit.edit import init as do_init

    outcome = do_init(directory, name)
    for rel in outcome.written:
        click.echo(f"created {directory / rel}")


@cli.command()
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
@INSECURE
@click.pass_context
def check(ctx: click.Context, fmt: str, online: bool, image_bases: bool, insecure: tuple[str, ...]) -> None:
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
    from patchkit.check import check as run_check
    from patchkit.repo import pending_journal
    from patchkit.report import render

    # While a write is journaled, its writer may still be renaming files in:
    # wait for it, so check sees one state, never a mix of two.
    repo, lock, data = _open(ctx, locks=pending_journal(_repo(ctx).root))
    result = run_check(repo, lock, data, _store())
    if image_bases and not online:
        from patchkit.errors import BadInput

        raise BadInput("--image-bases needs --online (it reads files from the registries)")
    if online:
        from patchkit.online import online_findings
        from patchkit.tomlpos import LineIndex

        index = LineIndex(data.decode("utf-8"))
        result.findings.extend(
            online_findings(lock, index.line_of, _cache(), insecure=insecure, image_bases=image_bases)
        )
    click.echo(render(result, fmt), nl=False)
    if not result.ok:
        ctx.exit(EXIT_FINDINGS)
    ctx.exit(EXIT_EXTERNAL if result.unknown else EXIT_OK)


@cli.command()
@click.option("--check", "verify", is_flag=True, help="Verify SHA256SUMS and every hash it lists; write nothing.")
@FORMAT
@click.pass_context
def sums(ctx: click.Context, verify: bool, fmt: str) -> None:
    """Write SHA256SUMS over the lockfile and every file it pins.

    GNU coreutils format, sorted by name; `sha256sum -c --strict SHA256SUMS`
    accepts it. Refuses (exit 1) while a pinned file does not match its pin.
    """
    if verify:
        from patchkit.verify import check_sums

        result = check_sums(_repo(ctx))
        from patchkit.report import render

        click.echo(render(result, fmt, what="sums --check"), nl=False)
        ctx.exit(EXIT_OK if result.ok else EXIT_FINDINGS)
    from patchkit import edit

    repo, lock, data = _open(ctx, writes=True)
    outcome = edit.write_sums(repo, lock, data)
    _print_changes(outcome, fmt, "SHA256SUMS is up to date")


@cli.command()
@FORMAT
@click.pass_context
def lock(ctx: click.Context, fmt: str) -> None:
    """Refresh file pins after an intended edit, and print each change (old -> new).

    Re-hashes every pinned file; regenerates the diff of an edited overlay
    from its pinned base (found in the cache or rebuilt from the overlay's
    committed version); rewrites lockfile.toml canonically and SHA256SUMS.
    Never changes an image digest, the model revision or an upstream commit.
    """
    from patchkit.edit import relock

    repo, lockf, _ = _open(ctx, writes=True)
    outcome = relock(repo, lockf, _store())
    _print_changes(outcome, fmt, "nothing changed")


@cli.command()
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
    from patchkit.edit import AddRequest
    from patchkit.edit import add as do_add

    repo, lockf, _ = _open(ctx, writes=True)
    options["refs"] = tuple(options["refs"])
    outcome = do_add(repo, lockf, AddRequest(path=path, **options), _store())
    _print_changes(outcome, fmt, "nothing changed")


@cli.command()
@click.argument("name")
@click.option("--keep-files", is_flag=True, help="Unpin only; leave the files on disk.")
@FORMAT
@click.pass_context
def remove(ctx: click.Context, name: str, keep_files: bool, fmt: str) -> None:
    """Unpin NAME and delete the files only it named (the patch and its diff)."""
    from patchkit.edit import remove as do_remove

    repo, lockf, _ = _open(ctx, writes=True)
    outcome = do_remove(repo, lockf, name, keep_files)
    _print_changes(outcome, fmt, "nothing changed")


@cli.command()
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
    from patchkit.edit import regenerate_diffs, write_diffs

    repo, lockf, _ = _open(ctx, writes=write)
    result = regenerate_diffs(repo, lockf, names, _store())
    if write:
        outcome = write_diffs(repo, lockf, result)
        _print_changes(outcome, fmt, "diffs are up to date")
        return
    if fmt == "json":
        click.echo(
            json.dumps(
                [
                    {
                        "name": d.name,
                        "path": d.path,
                        "added": d.added,
                        "removed": d.removed,
                        "diff": d.diff.decode("utf-8", "replace"),
                    }
                    for d in result
                ],
                indent=2,
                sort_keys=True,
            )
        )
        return
    if show_stat:
        width = max((len(d.name) for d in result), default=0)
        for d in result:
            click.echo(f" {d.name.ljust(width)} | +{d.added} -{d.removed}  {d.path}")
        total_a, total_r = sum(d.added for d in result), sum(d.removed for d in result)
        patches = "patch" if len(result) == 1 else "patches"
        click.echo(f" {len(result)} {patches}, {total_a} insertions(+), {total_r} deletions(-)")
        return
    out = sys.stdout.buffer
    for d in result:
        out.write(d.diff)
    out.flush()


@cli.group()
def upstream() -> None:
    """Register and list upstreams: where base files come from, pinned exactly."""


@upstream.command("add")
@click.argument("name")
@click.option("--git", "git_url", metavar="URL", help="A git repository (https://, ssh or file://).")
@click.option("--commit", metavar="REV", help="With --git: a commit, branch or tag; the full commit is pinned.")
@click.option("--wheel", metavar="PROJECT==VERSION", help="A wheel from the package index, pinned by its sha256.")
@click.option("--dir", "directory", metavar="PATH", help="A directory tree (an unpacked wheel or image filesystem).")
@click.option(
    "--image", "image_ref", metavar="REF", help="A container image: its files under --prefix, pinned by digest."
)
@click.option("--prefix", metavar="PATH", help="With --image: where the upstream tree is inside the image.")
@PLATFORM
@click.option("--note", help="One line for reviewers, e.g. why this source.")
@FORMAT
@click.pass_context
def upstream_add(
    ctx: click.Context,
    name: str,
    git_url: str | None,
    commit: str | None,
    wheel: str | None,
    directory: str | None,
    image_ref: str | None,
    prefix: str | None,
    platform: str,
    note: str | None,
    fmt: str,
) -> None:
    """Register upstream NAME: fetch or download it once and pin it exactly.

    \b
      patchkit upstream add vllm --git https://github.com/vllm-project/vllm --commit 124154a8…
      patchkit upstream add vllm-release --wheel vllm==0.26.0
      patchkit upstream add image-fs --dir /srv/rootfs/usr/local/lib/python3.12/dist-packages
      patchkit upstream add nightly --image vllm/vllm-openai-rocm:nightly \\
          --prefix /usr/local/lib/python3.12/dist-packages
    """
    from patchkit.upstreams import register

    repo, lockf, _ = _open(ctx, writes=True)
    outcome = register(
        repo,
        lockf,
        name,
        _cache(),
        git=git_url,
        commit=commit,
        wheel=wheel,
        directory=directory,
        image=image_ref,
        prefix=prefix,
        platform=platform,
        note=note,
    )
    _print_changes(outcome, fmt, "nothing changed")


@upstream.command("list")
@FORMAT
@click.pass_context
def upstream_list(ctx: click.Context, fmt: str) -> None:
    """Show each upstream: its source, its pin and the patches based on it."""
    from patchkit.upstreams import listing

    _, lockf, _ = _open(ctx)
    rows = listing(lockf)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    if not rows:
        click.echo("no upstreams (register one: patchkit upstream add NAME --git URL --commit REV)")
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        patches = f"{len(r['patches'])} patch{'es' * (len(r['patches']) != 1)}"
        click.echo(f"{r['name'].ljust(width)}  {r['source']:<5}  {r['pin']}  {patches}  {r['location'] or ''}".rstrip())


@cli.command()
@click.option("--onto", metavar="REV", help="The new upstream pin: a commit, branch or tag (git), a version (wheel).")
@click.option(
    "--upstream", "upstream_name", metavar="NAME", help="Which upstream (default: the only one with overlays)."
)
@click.option(
    "--source",
    metavar="SPEC",
    help="Read the new files from git (the recorded URL), git:URL[@REV] or a URL alone, dir:PATH or "
    "wheel:PROJECT==VERSION instead of the recorded source.",
)
@click.option("--continue", "cont", is_flag=True, help="Commit a rebase whose conflicts are resolved.")
@click.option("--abort", is_flag=True, help="Forget the rebase in progress (the repository was never changed).")
@click.option("--drop", multiple=True, metavar="NAME", help="Drop this patch in the bump (e.g. deleted upstream).")
@click.option("--summary", type=click.Path(dir_okay=False, path_type=Path), help="Write a Markdown summary for the PR.")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)
@click.pass_context
def rebase(
    ctx: click.Context,
    onto: str | None,
    upstream_name: str | None,
    source: str | None,
    cont: bool,
    abort: bool,
    drop: tuple[str, ...],
    summary: Path | None,
    fmt: str,
) -> None:
    """Move every overlay of an upstream onto a new pin, three-way, as one transaction.

    For each overlay: base = the old upstream file (from the cache, the
    committed overlay and its diff, or the source at the old pin), ours = the
    patch, theirs = the file at the new pin (renames followed). Outcomes:
    clean, conflict, upstreamed, partially-upstreamed, unchanged, moved,
    deleted; clean merges that touch a function upstream also changed are
    flagged for review.

    With no conflict, patches, diffs, lockfile and SHA256SUMS are updated
    together (exit 0). Otherwise nothing in the repository changes: the
    conflicted files wait under .patchkit/rebase/ with markers (exit 1);
    resolve them and run --continue, or --abort.
    """
    from patchkit import rebase as rb

    if abort:
        repo = _repo(ctx)
        _lock(ctx, repo.root)
        click.echo("rebase aborted; the repository is as it was" if rb.abort(repo) else "no rebase in progress")
        return
    repo, lockf, data = _open(ctx, writes=True)
    if summary is not None:
        from patchkit.repo import output_target

        output_target(summary, repo, lockf)  # refused before anything is committed
    store = _store()
    if cont:
        result, outcome = rb.resume(repo, lockf, data, store, drop)
        if not result.upstream:
            click.echo("the rebase had already been committed; cleaned up its work area")
            return
        _print_changes(outcome, fmt, "nothing changed")
        if summary is not None:
            from patchkit.repo import atomic_write, output_target

            atomic_write(output_target(summary, repo, lockf), rb.summary_markdown(result).encode())
        return
    started = rb.start(
        repo, lockf, data, onto=onto, upstream=upstream_name, source=source, cache=_cache(), store=store, drop=drop
    )
    if summary is not None:
        from patchkit.repo import atomic_write, output_target

        atomic_write(output_target(summary, repo, lockf), rb.summary_markdown(started.plan).encode())
    if fmt == "json":
        doc = rb.result_json(started.plan)
        doc["committed"] = started.outcome is not None
        doc["work_files"] = started.conflict_files
        doc["nothing_moved"] = started.nothing_moved
        changes = started.outcome.changes if started.outcome is not None else []
        doc["sums_dropped"] = [c.what.removeprefix("SHA256SUMS ") for c in changes if c.what.startswith("SHA256SUMS ")]
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(rb.table(started.plan), nl=False)
        if started.nothing_moved is not None:
            click.echo(f"nothing in the repository changed: {started.nothing_moved}")
            for fix in dict.fromkeys(sk.fix for sk in started.plan.skipped if sk.fix):
                click.echo(f"  fix: {fix}")
        elif started.outcome is not None:
            for c in started.outcome.changes:
                if c.what.startswith("SHA256SUMS "):
                    click.echo(f"{c.what}: {c.old} -> {c.new}")
            for rel in started.outcome.written:
                click.echo(f"wrote {rel}")
        else:
            click.echo("nothing in the repository changed; resolve, then: patchkit rebase --continue")
            for rel in started.conflict_files:
                click.echo(f"  resolve {rel}")
    ctx.exit(EXIT_OK if started.outcome is not None else EXIT_FINDINGS)


@cli.command()
@click.option("--image", "image_ref", metavar="REF", required=True, help="The new image (a tag or a digest).")
@click.option("--upstream", "upstream_name", metavar="NAME", help="The image upstream (default: REF's repository).")
@click.option("--drop", multiple=True, metavar="NAME", help="Drop this patch in the bump (e.g. deleted upstream).")
@click.option("--summary", type=click.Path(dir_okay=False, path_type=Path), help="Write a Markdown summary for the PR.")
@FORMAT
@click.pass_context
def bump(
    ctx: click.Context,
    image_ref: str,
    upstream_name: str | None,
    drop: tuple[str, ...],
    summary: Path | None,
    fmt: str,
) -> None:
    """Move the deployment to a new image: rebase its overlays onto the image's files, re-pin it.

    Resolves REF, reads the runtime version inside it (vllm/_version.py:
    0.26.1rc1.dev229+g124154a88 -> commit 124154a88), rebases every overlay
    of the image upstream onto the files in the new image, and moves every
    pinned image of that repository to the new digest, all in one
    transaction. Conflicts wait for `patchkit rebase --continue` as usual.
    """
    from patchkit import rebase as rb
    from patchkit.images import bump_plan
    from patchkit.sources.image import commit_prefix

    repo, lockf, data = _open(ctx, writes=True)
    if summary is not None:
        from patchkit.repo import output_target

        output_target(summary, repo, lockf)  # refused before anything is committed
    upstream_found, pins = bump_plan(lockf, image_ref, upstream_name)
    started = rb.start(
        repo,
        lockf,
        data,
        onto=None,
        upstream=upstream_found,
        source=f"image:{image_ref}",
        cache=_cache(),
        store=_store(),
        drop=drop,
        image_pins=pins,
    )
    if summary is not None:
        from patchkit.repo import atomic_write, output_target

        atomic_write(output_target(summary, repo, lockf), rb.summary_markdown(started.plan).encode())
    version = started.plan.new_pin.version
    if fmt == "json":
        doc = rb.result_json(started.plan)
        doc.update(
            committed=started.outcome is not None,
            images=pins,
            version=version,
            commit_prefix=commit_prefix(version),
            work_files=started.conflict_files,
            nothing_moved=started.nothing_moved,
        )
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        click.echo(rb.table(started.plan), nl=False)
        if version:
            click.echo(f"runtime version {version} (upstream commit {commit_prefix(version) or 'unknown'})")
        for name, digest in sorted(pins.items()):
            click.echo(f"images[{name}] -> {digest}")
        if started.nothing_moved is not None:
            click.echo(f"nothing in the repository changed: {started.nothing_moved}")
        elif started.outcome is None:
            click.echo("nothing in the repository changed; resolve, then: patchkit rebase --continue")
            for rel in started.conflict_files:
                click.echo(f"  resolve {rel}")
    ctx.exit(EXIT_OK if started.outcome is not None else EXIT_FINDINGS)


@cli.command()
@FORMAT
@click.pass_context
def status(ctx: click.Context, fmt: str) -> None:
    """Where the repository stands: a rebase in progress and its files, or an interrupted write."""
    from patchkit import rebase as rb
    from patchkit.repo import recover

    repo = _repo(ctx)
    _lock(ctx, repo.root)
    finished = recover(repo.root)
    state = rb.status(repo)
    state["finished_interrupted_write"] = finished
    broken = state["rebase"] is not None and "error" in state["rebase"]
    if fmt == "json":
        click.echo(json.dumps(state, indent=2, sort_keys=True))
        ctx.exit(EXIT_BAD_INPUT if broken else EXIT_OK)
    if finished:
        click.echo("finished a write of several files that was interrupted")
    r = state["rebase"]
    if r is None:
        click.echo("no rebase in progress")
        return
    if broken:
        click.echo(f"patchkit: error: {r['error']}", err=True)
        ctx.exit(EXIT_BAD_INPUT)
    click.echo(f"rebase of {r['upstream']} in progress: {r['from']} -> {r['to']}")
    for f in r["conflicts"]:
        left = "resolved" if f["resolved"] else f"markers at lines {', '.join(map(str, f['markers'][:5]))}"
        click.echo(f"  {f['patch']}: {f['file']} ({left})")
    for name in r["deleted"]:
        click.echo(f"  {name}: deleted upstream; --continue --drop {name} to drop it")
    click.echo("then: patchkit rebase --continue (or --abort)")


@cli.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write every patch's running file at its container path below this directory "
    "(a relative path is below the repository, where compose.yaml mounts ./build/…).",
)
@FORMAT
@click.pass_context
def materialize(ctx: click.Context, out: Path | None, fmt: str) -> None:
    """Rebuild every diff-only patch from its pinned base and diff, and verify its sha256.

    Bases come from the cache, else from the upstream's source at the base's
    pin (a download or fetch the first time). Afterwards `patchkit check`
    verifies diff-only patches offline too. Exit 1 if any file does not match
    its pin. `--out build` writes the files where the emitted compose files
    mount them, whichever directory the command runs in.
    """
    from patchkit.materialize import materialize as run

    repo, lockf, _ = _open(ctx)
    if out is not None and not out.is_absolute():
        out = repo.root / out
    results = run(repo, lockf, _store(), _cache(), out)
    if fmt == "json":
        click.echo(json.dumps([r.__dict__ for r in results], indent=2, sort_keys=True))
    else:
        width = max((len(r.name) for r in results), default=0)
        for r in results:
            click.echo(f"{'ok  ' if r.ok else 'FAIL'} {r.name.ljust(width)}  {r.how}  {r.target}")
        bad = sum(not r.ok for r in results)
        click.echo(f"materialize: {len(results) - bad} ok, {bad} failed" + (f"; written under {out}" if out else ""))
    ctx.exit(EXIT_OK if all(r.ok for r in results) else EXIT_FINDINGS)


@cli.group()
def image() -> None:
    """Resolve image references to digests, pin them, read files out of images."""


@image.command("resolve")
@click.argument("ref")
@PLATFORM
@INSECURE
@FORMAT
def image_resolve(ref: str, platform: str, insecure: tuple[str, ...], fmt: str) -> None:
    """Resolve REF (repo:tag, registry/repo:tag, repo@sha256:…) to its digests, without a daemon.

    The digest is the top-level one (a multi-platform index, or the manifest):
    what compose pins. The platform digest is the manifest chosen for
    --platform: what the files are read from.
    """
    from patchkit.images import resolve

    found = resolve(ref, platform, insecure)
    if fmt == "json":
        click.echo(json.dumps(found, indent=2, sort_keys=True))
        return
    click.echo(f"{found['repository']}@{found['digest']}")
    if found["platform_digest"] != found["digest"]:
        click.echo(f"  {found['platform']}: {found['platform_digest']}")


@image.command("pin")
@click.argument("name")
@click.argument("ref")
@PLATFORM
@INSECURE
@FORMAT
@click.pass_context
def image_pin(ctx: click.Context, name: str, ref: str, platform: str, insecure: tuple[str, ...], fmt: str) -> None:
    """Resolve REF and pin it as images.NAME: digest, tag, time, and the platform digest."""
    from patchkit.images import pin

    repo, lockf, _ = _open(ctx, writes=True)
    _print_changes(pin(repo, lockf, name, ref, platform, insecure), fmt, "nothing changed")


@image.command("cat")
@click.argument("image_ref", metavar="IMAGE")
@click.argument("path")
@click.option("--via", type=click.Choice(["registry", "docker"]), default="registry", show_default=True)
@PLATFORM
@INSECURE
@click.pass_context
def image_cat(
    ctx: click.Context, image_ref: str, path: str, via: str, platform: str, insecure: tuple[str, ...]
) -> None:
    """Print the file PATH of IMAGE (a reference, or the name of a pinned image)."""
    from patchkit.errors import BadInput
    from patchkit.images import image_reference, read

    text = _pinned_or_given(ctx, image_ref, image_reference)
    data = read(text, [path], via=via, platform=platform, insecure=insecure).get(path)
    if data is None:
        raise BadInput(f"{path}: no such file in {text}")
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@image.command("files")
@click.argument("image_ref", metavar="IMAGE")
@click.argument("paths", nargs=-1, required=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Directory to write into.")
@click.option("--via", type=click.Choice(["registry", "docker"]), default="registry", show_default=True)
@PLATFORM
@INSECURE
@click.pass_context
def image_files(
    ctx: click.Context,
    image_ref: str,
    paths: tuple[str, ...],
    out: Path,
    via: str,
    platform: str,
    insecure: tuple[str, ...],
) -> None:
    """Copy PATHs out of IMAGE into --out, each at its container path; exit 1 if any is missing."""
    from patchkit.images import image_reference, read, write_files

    text = _pinned_or_given(ctx, image_ref, image_reference)
    found = read(text, list(paths), via=via, platform=platform, insecure=insecure)
    for path in write_files(found, out):
        click.echo(f"wrote {out / path.lstrip('/')}")
    missing = [p for p, data in found.items() if data is None]
    for p in missing:
        click.echo(f"missing {p}", err=True)
    ctx.exit(EXIT_FINDINGS if missing else EXIT_OK)


def _pinned_or_given(ctx: click.Context, text: str, lookup: Any) -> str:
    """A pinned image's name maps to its digest reference when a lockfile is at hand."""
    try:
        _, lockf, _ = _open(ctx)
    except PatchkitError:
        return text
    return str(lookup(lockf, text))


@cli.command()
@click.option("--profile", "profiles", multiple=True, help="Only this profile (default: every profile of deploy.toml).")
@click.option("--check", "verify", is_flag=True, help="Write nothing; exit 1 if a compose file differs (drift).")
@FORMAT
@click.pass_context
def emit(ctx: click.Context, profiles: tuple[str, ...], verify: bool, fmt: str) -> None:
    """Write the compose files from lockfile.toml (pins) and deploy.toml (service configuration).

    Images by digest, every patch, module, transformer, tuning table and
    artifact mounted read-only at its target with a comment from its reason
    and references, the model at its pinned revision, the entrypoint. Each
    file is validated against the Compose specification schema and the
    security rules (inference service on loopback only, images by digest,
    read-only mounts) before anything is written. Output is byte-stable.
    """
    from patchkit.emit import emit_files

    repo, lockf, _ = _open(ctx, writes=not verify)
    notes: list[str] = []
    outcome, drift = emit_files(repo, lockf, profiles, check_only=verify, notes=notes)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if verify:
        for rel in drift:
            click.echo(f"{rel}: differs from what patchkit emit writes (edited by hand, or the pins moved)")
        click.echo(
            "emit --check: " + ("ok" if not drift else f"FAILED: {len(drift)} file(s) drifted; fix: patchkit emit")
        )
        ctx.exit(EXIT_FINDINGS if drift else EXIT_OK)
    _print_changes(outcome, fmt, "compose files are up to date")


@cli.command()
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    required=True,
    help="The .tar.gz: a new file in an existing directory, or a regular file to replace; - for standard output.",
)
@click.pass_context
def bundle(ctx: click.Context, output: Path) -> None:
    """Build the production bundle: compose files, entrypoint, Caddyfile, lockfile, the files that run.

    Reproducible: byte-identical whatever the file mtimes, umask, user, locale,
    time zone or file-system order (sorted entries, owner 0, normalised
    modes, mtimes = $SOURCE_DATE_EPOCH or 0, no gzip name or time). Diff-only
    patches are materialized and verified first. Unpacked, `sha256sum -c
    --strict SHA256SUMS` passes inside it.
    """
    from patchkit.bundle import build_bundle, collect_files_that_run
    from patchkit.hashing import sha256_bytes
    from patchkit.repo import atomic_write, output_target

    repo, lockf, data = _open(ctx)
    to_stdout = str(output) == "-"
    target = None if to_stdout else output_target(output, repo, lockf)
    archive = build_bundle(repo, lockf, data, collect_files_that_run(repo, lockf, _store(), _cache()))
    if target is None:
        sys.stdout.buffer.write(archive)
        sys.stdout.buffer.flush()
    else:
        atomic_write(target, archive)
    shown = "standard output" if to_stdout else str(output)
    click.echo(f"wrote {shown} ({len(archive)} bytes, sha256 {sha256_bytes(archive)})", err=to_stdout)


@cli.command("verify-bundle")
@click.argument("path", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@FORMAT
def verify_bundle(path: Path, fmt: str) -> None:
    """Unpack a bundle safely and verify its SHA256SUMS and lockfile pins; exit 1 on any problem.

    Refuses absolute paths, '..', links, devices, oversized members and
    duplicates before anything is written.
    """
    from patchkit.bundle import verify_bundle as run
    from patchkit.report import json_safe

    problems = run(path)
    if fmt == "json":
        click.echo(json.dumps({"ok": not problems, "problems": json_safe(problems)}, indent=2))
    else:
        from patchkit.report import printable

        for problem in problems:
            click.echo(printable(problem))
        click.echo("verify-bundle: " + ("ok" if not problems else f"FAILED: {len(problems)} problem(s)"))
    sys.exit(EXIT_FINDINGS if problems else EXIT_OK)


# Command groups kept in their own modules register themselves on `cli` when imported.
from patchkit import cli_audit, cli_import, cli_model, cli_sign  # noqa: E402,F401


def main() -> NoReturn:
    """Console entry point."""
    cli.main(prog_name="patchkit")
    sys.exit(EXIT_BAD_INPUT)  # not reached: click exits in standalone mode
