"""The runtime guard's commands: ``patchkit guard script`` prints the guard patchkit ships."""

from __future__ import annotations

import click

from patchkit.cli.common import SubGroup


@click.group(cls=SubGroup)
def guard() -> None:
    """The runtime guard the entrypoint runs inside the container (docs/guard.md)."""


@guard.command("script")
def guard_script() -> None:
    """Print the guard script this patchkit ships (dependency-free Python), to pin as a module.

    \b
    patchkit guard script > patches/guard.py
    patchkit add patches/guard.py --kind module --name runtime-guard --target /opt/patchkit/guard.py
    then [guard] script = "runtime-guard" in deploy.toml, and patchkit emit.
    Run it again after upgrading patchkit, and review the diff.
    """
    from importlib.resources import files

    click.echo((files("patchkit.guard") / "runtime.py").read_bytes(), nl=False)


COMMANDS: tuple[click.Command, ...] = (guard,)
