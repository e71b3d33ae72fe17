"""The root command: every family's commands are reachable, and a command loads only its own family."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import click

import patchkit.cli
from patchkit.cli.app import FAMILY_OF, cli


def test_the_table_names_every_command_of_every_family_and_nothing_else() -> None:
    defined: dict[str, str] = {}
    for info in pkgutil.iter_modules(patchkit.cli.__path__):
        module = importlib.import_module(f"patchkit.cli.{info.name}")
        for command in getattr(module, "COMMANDS", ()):
            assert command.name not in defined, f"{command.name} defined twice"
            defined[str(command.name)] = info.name
    assert defined == FAMILY_OF
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(defined)
    assert all(cli.get_command(ctx, name) is not None for name in defined)
    assert cli.get_command(ctx, "chek") is None


def test_a_command_imports_only_its_own_family(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from patchkit.cli.app import main\n"
        "try:\n    main(['-C', sys.argv[1], 'sums', '--help'])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('patchkit.cli.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, check=True)
    loaded = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own probe's repr of a list of names
    assert loaded == ["patchkit.cli.app", "patchkit.cli.common", "patchkit.cli.deployment"]


def test_a_mistyped_command_is_told_the_nearest_one() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["chek"])
    assert result.exit_code == 2
    assert "Error: No such command 'chek'. Did you mean 'check'?" in result.output


def test_an_overlays_rebase_does_not_import_the_series_machinery() -> None:
    """``patchkit rebase`` without ``--series`` decides so, and renders its report, with no series module loaded."""
    probe = (
        "import sys\n"
        "import patchkit.formats.rebase\n"
        "from patchkit.cli.series import rebase_series\n"
        "assert not rebase_series(None, None, 'x', cont=False, abort=False, fmt='text', accept={}, summary=None)\n"
        "series = ('patchkit.series', 'patchkit.rebase.series', 'patchkit.rebase.bump')\n"
        "print(sorted(m for m in sys.modules if m.startswith(series)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
