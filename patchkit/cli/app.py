"""The ``patchkit`` command: the root group, every command family registered on it, the entry point.

Heavy or rarely needed modules are imported inside the commands that use
them, so ``patchkit --help`` and ``patchkit check`` start fast.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

import click

from patchkit import __version__
from patchkit.cli import artifact, audit, deployment, guard, image, importing, model, ship, signing, upstream
from patchkit.cli.common import EPILOG, RootGroup, global_options
from patchkit.errors import EXIT_BAD_INPUT


@click.group(cls=RootGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
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


FAMILIES = (deployment, upstream, image, model, importing, ship, audit, signing, artifact, guard)
for _family in FAMILIES:
    for _command in _family.COMMANDS:
        cli.add_command(_command)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console entry point: run patchkit on ``argv`` (default: the process arguments) and exit."""
    cli.main(args=argv, prog_name="patchkit")
    sys.exit(EXIT_BAD_INPUT)  # not reached: click exits in standalone mode
