"""What every command shares: the global options, error reporting and exit codes, the repository.

The global options (-C/--repo, --cache-dir, -v/--verbose, --no-wait) are taken
before a command's name or after it; ``Command`` and ``SubGroup`` add them to
every command and group, and ``ErrorGroup`` turns a patchkit error into one line
and its exit code.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import click

from patchkit.errors import LockfileError, PatchkitError

EXIT_INTERNAL = 4


EPILOG = """\b
Exit codes:
  0  all good
  1  findings: a check failed, or the repository is not in a state the command can build on
  2  bad usage or bad input (a malformed lockfile, a wrong argument, an unwritable repository)
  3  an external service or tool failed
  4  internal error in patchkit (please report it; --verbose shows the traceback)
"""


class ErrorGroup(click.Group):
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
            internal_error(ctx, e)


def internal_error(ctx: click.Context, e: Exception) -> NoReturn:
    """A bug in patchkit: one line naming it and exit 4, the traceback only with --verbose.

    The only way to exit 4, so the test suite hooks it to fail any test that ends here.
    """
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
    from patchkit.formats.safe import printable

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


def _quiet(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--quiet`` anywhere on the command line silences progress for the whole process."""
    if value:
        from patchkit.progress import set_quiet

        set_quiet(True)


def global_options() -> list[click.Option]:
    """The options every command takes, before or after its name: ``patchkit -C X check`` or ``check -C X``."""
    return [
        click.Option(
            ["-C", "--repo", "repo_dir"],
            type=click.Path(path_type=Path),  # find_repo names what is wrong with it in one line
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
            ["-q", "--quiet", "quiet"],
            is_flag=True,
            envvar="PATCHKIT_QUIET",
            expose_value=False,
            callback=_quiet,
            help="No progress lines (there are none when stderr is not a terminal).",
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


class Command(click.Command):
    """A command that also takes the global options."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(global_options())


class SubGroup(ErrorGroup):
    """A command group below ``patchkit`` (image, model, upstream, …): its commands take the global options."""

    command_class = Command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(global_options())


SubGroup.group_class = SubGroup


class RootGroup(ErrorGroup):
    command_class = Command
    group_class = SubGroup

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        """Each invocation starts with progress allowed; ``--quiet`` (parsed next) may turn it off."""
        from patchkit.progress import set_quiet

        set_quiet(False)
        return super().make_context(info_name, args, parent, **extra)


def find_repo(ctx: click.Context) -> Any:
    """The deployment repository: --repo, or the nearest one upward from here."""
    from patchkit.repo import Repo, find_root

    given = (ctx.find_root().obj or {}).get("repo_dir")
    return Repo(find_root(Path.cwd()) if given is None else _given_root(Path(given)))


def _given_root(given: Path) -> Path:
    """``-C DIR``: that very directory (no search upward, the user named it), which must hold the lockfile."""
    from patchkit.errors import BadInput
    from patchkit.values import LOCKFILE_NAME

    if given.exists() and not given.is_dir():
        raise BadInput(f"-C {given}: not a directory", "name the deployment's directory, the one with lockfile.toml")
    if not given.is_dir():
        raise BadInput(f"-C {given}: no such directory", "name the deployment's directory, the one with lockfile.toml")
    if not (given / LOCKFILE_NAME).is_file():
        raise BadInput(f"-C {given}: no {LOCKFILE_NAME} there", "run `patchkit init` in it first")
    return given.resolve()


def open_repo(ctx: click.Context, *, writes: bool = False, locks: bool = False) -> tuple[Any, Any, bytes]:
    """The repository and its lockfile; a writing command first takes the write lock.

    Under the lock it finishes an interrupted write and only then reads the
    lockfile, so its read-modify-write never loses another writer's change.
    """
    repo = find_repo(ctx)
    if writes or locks:
        hold_lock(ctx, repo.root)
    if writes:
        from patchkit.repo import recover

        how = recover(repo.root)
        if how is not None:
            what = "finished" if how == "finished" else "undid (nothing had been written yet)"
            click.echo(f"patchkit: {what} a write that was interrupted earlier", err=True)
    lock, data = repo.read_lockfile()
    return repo, lock, data


def hold_lock(ctx: click.Context, root: Path) -> None:
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


def cache_path() -> Path:
    from patchkit.cache import cache_dir

    return cache_dir()


def blob_store() -> Any:
    from patchkit.cache import BlobStore, cache_dir

    return BlobStore(cache_dir())


def registry_client(insecure: Iterable[str] = ()) -> Any:
    """The registry client a command hands the core: plain HTTP for ``--insecure-registry`` hosts, the Docker config."""
    from patchkit.images.registry import RegistryClient

    return RegistryClient(insecure=tuple(insecure))


def github_tracker() -> Any:
    """The GitHub adapter a command hands the core: ``GITHUB_API_URL`` (default api.github.com), ``GITHUB_TOKEN``."""
    import os

    from patchkit.github import DEFAULT_API_URL, GitHubTracker

    return GitHubTracker(os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL, os.environ.get("GITHUB_TOKEN") or None)


def source_date_epoch() -> str | None:
    """``$SOURCE_DATE_EPOCH`` as the user set it (None when unset or empty); the core takes it as an argument."""
    import os

    return os.environ.get("SOURCE_DATE_EPOCH") or None


def print_changes(outcome: Any, fmt: str, nothing: str) -> None:
    from patchkit.formats.safe import json_safe, printable

    for note in getattr(outcome, "notes", ()):
        click.echo(f"note: {printable(note)}", err=True)
    if fmt == "json":
        doc = {
            "changes": [c.as_dict() for c in outcome.changes],
            "written": outcome.written,
            "removed": outcome.removed,
        }
        click.echo(json.dumps(json_safe(doc), indent=2, sort_keys=True))
        return
    lines = [printable(f"{c.what}: {c.old} -> {c.new}") for c in outcome.changes]
    lines += [f"removed {printable(rel)}" for rel in outcome.removed]
    lines += [f"wrote {printable(rel)}" for rel in outcome.written]
    # One write: a bump of 1,000 patches lists 2,000 files, and click flushes after every echo.
    click.echo("\n".join(lines) if lines else nothing)


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


def pinned_or_given(ctx: click.Context, text: str, lookup: Any) -> str:
    """A pinned image's name maps to its digest reference when a lockfile is at hand."""
    try:
        _, lockf, _ = open_repo(ctx)
    except PatchkitError:
        return text
    return str(lookup(lockf, text))
