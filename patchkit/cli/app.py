"""The ``patchkit`` command: the root group, every command family registered on it, the entry point.

A command's family module is imported only when that command runs (or when
``--help`` lists them all), and heavy or rarely needed modules are imported
inside the commands that use them, so every command starts fast.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from patchkit import __version__
from patchkit.cli.common import EPILOG, RootGroup, global_options
from patchkit.errors import EXIT_BAD_INPUT

# Each command and the family module (patchkit.cli.<family>) whose COMMANDS define it.
# A new command goes in its family's COMMANDS and here; a test keeps the two the same.
FAMILY_OF: dict[str, str] = {
    **dict.fromkeys(("init", "check", "sums", "lock", "add", "remove", "diff", "status"), "deployment"),
    **dict.fromkeys(("upstream", "rebase", "bump"), "upstream"),
    "image": "image",
    "model": "model",
    "import": "importing",
    **dict.fromkeys(("materialize", "apply", "emit", "bundle", "verify-bundle"), "ship"),
    **dict.fromkeys(("refs", "audit", "sbom"), "audit"),
    **dict.fromkeys(("keygen", "sign", "attest", "verify"), "signing"),
    **dict.fromkeys(("push", "pull"), "artifact"),
    "guard": "guard",
}


class LazyRoot(RootGroup):
    """The root group, loading a command's family module when the command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(FAMILY_OF)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        family = FAMILY_OF.get(cmd_name)
        if family is None:
            return None
        commands: tuple[click.Command, ...] = importlib.import_module(f"patchkit.cli.{family}").COMMANDS
        return next(c for c in commands if c.name == cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click resolves it, suggesting the commands of the table for a mistyped name."""
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as e:
            raise click.exceptions.NoSuchCommand(e.command_name, e.message, FAMILY_OF, ctx) from None


@click.group(cls=LazyRoot, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
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


cli.params[:0] = global_options()


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console entry point: run patchkit on ``argv`` (default: the process arguments) and exit."""
    cli.main(args=argv, prog_name="patchkit")
    sys.exit(EXIT_BAD_INPUT)  # not reached: click exits in standalone mode
