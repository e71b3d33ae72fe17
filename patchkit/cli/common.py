"""What every command shares: the global options, error reporting and exit codes, the repository.

The global options (-C/--repo, --cache-dir, -v/--verbose, --no-wait) are taken
before a command's name or after it; ``Command`` and ``SubGroup`` add them to
every command and group, and ``ErrorGroup`` turns a patchkit error into one line
and its exit code.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from patchkit.errors import LockfileError, PatchkitError

if TYPE_CHECKING:  # for the annotations only: each command imports what it runs when it runs
    from patchkit.core.outcome import Outcome
    from patchkit.images.engine import DockerEngine
    from patchkit.images.registry import RegistryClient
    from patchkit.lockfile.model import Lockfile
    from patchkit.net.github import GitHubTracker
    from patchkit.net.hub import HfHub
    from patchkit.sources.context import Context
    from patchkit.store.cache import BlobStore
    from patchkit.store.repo import Repo

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

    def invoke(self, ctx: click.Context) -> object:
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
    from patchkit.core.safe import printable

    if isinstance(e, LockfileError):
        for p in e.problems:
            click.echo(f"patchkit: error: {printable(p.render())}", err=True)
            if p.hint:
                click.echo(f"  fix: {printable(p.hint)}", err=True)
        return
    click.echo(f"patchkit: error: {printable(e.message)}", err=True)
    if e.hint:
        click.echo(f"  fix: {printable(e.hint)}", err=True)


def _remember(key: str) -> Callable[[click.Context, click.Parameter, object], None]:
    """A callback storing a global option given on any command in the root context."""

    def store(ctx: click.Context, _param: click.Parameter, value: object) -> None:
        if value is None or value is False:
            return  # not given here: what the group level (or the default) said stands
        root = ctx.find_root()
        root.obj = root.obj or {}
        root.obj[key] = value

    return store


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
            callback=_remember("quiet"),  # anywhere on the command line: no progress for the whole run
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


def find_repo(ctx: click.Context) -> Repo:
    """The deployment repository: --repo, or the nearest one upward from here."""
    from patchkit.store.repo import Repo, find_root

    given = (ctx.find_root().obj or {}).get("repo_dir")
    return Repo(find_root(Path.cwd()) if given is None else _given_root(Path(given)))


def _given_root(given: Path) -> Path:
    """``-C DIR``: that very directory (no search upward, the user named it), which must hold the lockfile."""
    from patchkit.core.values import LOCKFILE_NAME
    from patchkit.errors import BadInput

    if given.exists() and not given.is_dir():
        raise BadInput(f"-C {given}: not a directory", "name the deployment's directory, the one with lockfile.toml")
    if not given.is_dir():
        raise BadInput(f"-C {given}: no such directory", "name the deployment's directory, the one with lockfile.toml")
    if not (given / LOCKFILE_NAME).is_file():
        raise BadInput(f"-C {given}: no {LOCKFILE_NAME} there", "run `patchkit init` in it first")
    return given.resolve()


def open_repo(ctx: click.Context, *, writes: bool = False, locks: bool = False) -> tuple[Repo, Lockfile, bytes]:
    """The repository and its lockfile; a writing command first takes the write lock.

    Under the lock it finishes an interrupted write and only then reads the
    lockfile, so its read-modify-write never loses another writer's change.
    """
    repo = find_repo(ctx)
    if writes or locks:
        hold_lock(ctx, repo.root)
    if writes:
        from patchkit.store.repo import recover

        how = recover(repo.root)
        if how is not None:
            what = "finished" if how == "finished" else "undid (nothing had been written yet)"
            click.echo(f"patchkit: {what} a write that was interrupted earlier", err=True)
    lock, data = repo.read_lockfile()
    return repo, lock, data


def hold_lock(ctx: click.Context, root: Path) -> None:
    """Hold the repository's exclusive write lock until the command ends (once per process)."""
    from patchkit.store.repo import lock_repository

    top = ctx.find_root()
    if top.obj.get("lock") is not None:
        return
    held = lock_repository(
        root, wait=not top.obj.get("no_wait"), on_wait=lambda message: click.echo(f"patchkit: {message}", err=True)
    )
    top.obj["lock"] = held
    top.call_on_close(held.release)


def run_context(insecure: Iterable[str] = ()) -> Context:
    """What this run hands the core (cache, progress, clients), built once from the options and the environment.

    ``insecure`` (the command's ``--insecure-registry`` hosts) goes to the registry clients it makes.
    """
    root = click.get_current_context().find_root()
    root.obj = root.obj or {}
    made: Context | None = root.obj.get("context")
    if made is None:
        made = root.obj["context"] = build_context(root.obj, os.environ)
    return dataclasses.replace(made, insecure=tuple(insecure)) if insecure else made


def build_context(options: Mapping[str, object], environ: Mapping[str, str]) -> Context:
    """The ``Context`` of a run: the global options given (``options``) over the environment, which only this reads."""
    from patchkit.cli.progress import bars, shown
    from patchkit.sources.context import Context
    from patchkit.store.cache import cache_dir

    quiet = bool(options.get("quiet"))
    given = options.get("cache_dir")  # a str or a Path, as click made it
    progress = bars(quiet)

    def registry(insecure: tuple[str, ...]) -> RegistryClient:
        from patchkit.images.credentials import default_docker_config
        from patchkit.images.registry import RegistryClient

        return RegistryClient(insecure=insecure, docker_config=default_docker_config(environ), progress=progress)

    return Context(
        cache_dir(environ, given if isinstance(given, str | os.PathLike) else None),
        progress=progress,
        shows_progress=shown(quiet),
        registry_factory=registry,
        engine_factory=lambda: docker_engine(environ),
    )


def docker_engine(environ: Mapping[str, str] | None = None) -> DockerEngine:
    """The Docker engine ``$DOCKER_HOST`` names (as for the docker CLI), else the local socket."""
    from patchkit.images.engine import DockerEngine, docker_host

    return DockerEngine(docker_host(os.environ if environ is None else environ))


def cache_path() -> Path:
    """The user cache directory: --cache-dir, else $PATCHKIT_CACHE, else $XDG_CACHE_HOME/patchkit."""
    return run_context().cache_dir


def blob_store() -> BlobStore:
    """The base files kept by sha256 in the user cache."""
    return run_context().blobs


def registry_client(insecure: Iterable[str] = ()) -> RegistryClient:
    """The registry client a command hands the core: plain HTTP for ``--insecure-registry`` hosts, the Docker config."""
    return run_context(insecure).registry()


def github_tracker() -> GitHubTracker:
    """The GitHub adapter a command hands the core: ``GITHUB_API_URL`` (default api.github.com), ``GITHUB_TOKEN``."""
    from patchkit.net.github import DEFAULT_API_URL, GitHubTracker

    return GitHubTracker(os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL, os.environ.get("GITHUB_TOKEN") or None)


def hf_hub() -> HfHub:
    """The Hugging Face Hub as huggingface_hub configures itself: HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE."""
    from patchkit.net.hub import HfHub

    return HfHub.from_environment(os.environ)


def hf_cache(given: Path | None) -> Path:
    """--hf-cache, else the Hugging Face cache the environment names (HF_HUB_CACHE, else $HF_HOME/hub)."""
    from patchkit.net.hub import default_cache_dir

    return given or default_cache_dir(os.environ)


def source_date_epoch() -> str | None:
    """``$SOURCE_DATE_EPOCH`` as the user set it (None when unset or empty); the core takes it as an argument."""
    return os.environ.get("SOURCE_DATE_EPOCH") or None


def print_changes(outcome: Outcome, fmt: str, nothing: str) -> None:
    """What a write changed, on stdout (its notes on stderr)."""
    from patchkit.core.safe import printable
    from patchkit.formats import changes

    for note in outcome.notes:
        click.echo(f"note: {printable(note)}", err=True)
    # One write: a bump of 1,000 patches lists 2,000 files, and click flushes after every echo.
    click.echo(changes.render(outcome, fmt, nothing), nl=False)


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


def pinned_or_given(ctx: click.Context, text: str, lookup: Callable[[Lockfile, str], str]) -> str:
    """A pinned image's name maps to its digest reference when a lockfile is at hand."""
    try:
        _, lockf, _ = open_repo(ctx)
    except PatchkitError:
        return text
    return lookup(lockf, text)
