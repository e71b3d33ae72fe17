"""The command line as users meet it: exit codes, messages, formats, a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from conftest import REPO_ROOT, Invoke

from patchkit import __version__
from patchkit.cli import cli, main


def test_help_documents_exit_codes(invoke: Invoke) -> None:
    r = invoke("--help")
    assert r.exit_code == 0
    for line in ("0  all good", "1  findings", "2  bad usage or bad input", "3  an external service"):
        assert line in r.stdout
    for command in ("init", "check", "sums", "lock", "add", "remove", "diff"):
        assert command in r.stdout


def test_malformed_lockfile_is_exit_2_one_line_no_traceback(invoke: Invoke, deploy: Path) -> None:
    lock = deploy / "lockfile.toml"
    lines = lock.read_text().splitlines(keepends=True)
    lines[5] = "schema = = 1\n"
    lock.write_text("".join(lines))
    r = invoke("check", repo=deploy)
    assert r.exit_code == 2
    assert r.stderr.startswith("patchkit: error: lockfile.toml:6: not valid TOML")
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_every_lockfile_problem_is_listed(invoke: Invoke, deploy: Path) -> None:
    lock = deploy / "lockfile.toml"
    text = lock.read_text()
    text = text.replace('commit = "124154a8843d1f8e4d4e2d5d466e2d3ebc3716da"', 'commit = "main"', 1)
    text = text.replace('target = "/opt/tuning/moe.csv"', 'target = "opt/tuning/moe.csv"')
    lock.write_text(text)
    r = invoke("check", repo=deploy)
    assert r.exit_code == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("patchkit: error:")]
    assert len(errors) == 2
    assert any("upstreams.vllm.commit: 'main' is not a full commit id" in e for e in errors)
    assert any("tuning[0].target: 'opt/tuning/moe.csv' is not an absolute container path" in e for e in errors)


def test_non_utf8_lockfile(invoke: Invoke, deploy: Path) -> None:
    lock = deploy / "lockfile.toml"
    lock.write_bytes(lock.read_bytes().replace(b"fence CPU", b"fence \xff CPU"))
    r = invoke("check", repo=deploy)
    assert r.exit_code == 2
    assert "not UTF-8 (byte 0xff)" in r.stderr


def test_verbose_shows_the_traceback(deploy: Path) -> None:
    (deploy / "lockfile.toml").write_text("schema = 9\n")
    result = CliRunner().invoke(cli, ["--verbose", "--repo", str(deploy), "check"])
    # The traceback, and still the exit code and message of the error (2, not Python's 1).
    assert result.exit_code == 2
    assert result.stderr.startswith("Traceback (most recent call last):")
    assert "patchkit: error: lockfile.toml:1: schema: unknown schema version 9" in result.stderr


def test_no_lockfile_here(invoke: Invoke, tmp_path: Path) -> None:
    r = invoke("check", repo=tmp_path)
    assert r.exit_code == 2
    assert "no lockfile.toml" in r.stderr
    assert "patchkit init" in r.stderr


def test_usage_error_is_exit_2(invoke: Invoke, deploy: Path) -> None:
    r = invoke("check", "--format", "xml", repo=deploy)
    assert r.exit_code == 2


def test_json_output(invoke: Invoke, deploy: Path) -> None:
    doc = json.loads(invoke("check", "--format", "json", repo=deploy).stdout)
    assert doc == {"ok": True, "files_hashed": 5, "diffs_verified": 1, "findings": []}
    (deploy / "tuning" / "moe.csv").write_text("x\n")
    lock = json.loads(invoke("lock", "--format", "json", repo=deploy).stdout)
    assert [c["what"] for c in lock["changes"]] == ["tuning[moe].sha256 (tuning/moe.csv)"]
    assert lock["written"] == ["lockfile.toml", "SHA256SUMS"]


def test_runs_as_a_real_process_from_a_subdirectory(deploy: Path) -> None:
    """As a user runs it: the console script, found from inside the repository."""
    exe = Path(sys.executable).parent / "patchkit"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "patchkit"]
    r = subprocess.run([*argv, "check"], cwd=deploy / "patches", capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("check: ok:")
    (deploy / "patches" / "fp8_fnuz.py").write_text("changed\n")
    r = subprocess.run([*argv, "check"], cwd=deploy, capture_output=True, text=True, check=False)
    assert r.returncode == 1
    assert "patches/fp8_fnuz.py" in r.stdout


def test_main_runs_the_arguments_it_is_given(deploy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``main(argv)`` runs patchkit on those arguments and exits with the command's code, as the console script does."""
    with pytest.raises(SystemExit) as version:
        main(["--version"])
    assert (version.value.code, capsys.readouterr().out) == (0, f"patchkit, version {__version__}\n")
    with pytest.raises(SystemExit) as checked:
        main(["-C", str(deploy), "check"])
    assert checked.value.code == 0
    assert capsys.readouterr().out.startswith("check: ok:")
    (deploy / "patches" / "fp8_fnuz.py").write_text("changed\n")
    with pytest.raises(SystemExit) as failed:
        main(["check", "-C", str(deploy)])
    assert failed.value.code == 1
    assert "patches/fp8_fnuz.py" in capsys.readouterr().out


def test_help_does_not_import_heavy_libraries() -> None:
    code = (
        "import sys; from click.testing import CliRunner; from patchkit.cli import cli;"
        "CliRunner().invoke(cli, ['--help']);"
        "heavy = ('git', 'docker', 'huggingface_hub', 'requests', 'tomlkit', 'tomli_w', 'difflib');"
        "heavy = [m for m in heavy if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert out.stdout.strip() == ""


def _leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    out: list[tuple[tuple[str, ...], click.Command]] = []
    for name, command in sorted(group.commands.items()):
        path = (*prefix, name)
        if isinstance(command, click.Group):
            out.extend(_leaf_commands(command, path))
        else:
            out.append((path, command))
    return out


def test_every_command_takes_the_global_options() -> None:
    """The README says every command takes --repo DIR and --verbose: so does each one, after its name too."""
    for path, command in _leaf_commands(cli):
        flags = {flag for param in command.params for flag in getattr(param, "opts", [])}
        assert {"-C", "--repo", "-v", "--verbose", "--cache-dir"} <= flags, " ".join(path)


def test_global_options_before_or_after_the_command(invoke: Invoke, deploy: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    runner = CliRunner()
    forms = (
        ["--repo", str(deploy), "check"],
        ["-C", str(deploy), "check"],
        ["check", "--repo", str(deploy)],
        ["check", "-C", str(deploy)],
        ["check", "--format", "json", "--repo", str(deploy)],
        ["diff", "--stat", "--repo", str(deploy)],
        ["refs", "--repo", str(deploy)],
    )
    for argv in forms:
        result = runner.invoke(cli, argv)
        assert "No such option" not in result.output and result.exit_code in (0, 1), (argv, result.output)
    assert runner.invoke(cli, ["check", "--repo", str(elsewhere)]).exit_code == 2  # the option is obeyed
    nested = runner.invoke(cli, ["model", "verify", "--repo", str(deploy)])  # a group's command, from elsewhere
    assert nested.exit_code == 2 and "lockfile.toml pins no model" in nested.output


def test_verbose_after_the_command_shows_the_traceback(deploy: Path) -> None:
    (deploy / "lockfile.toml").write_text("schema = 9\n")
    for argv in (["check", "--verbose", "--repo", str(deploy)], ["check", "-v", "-C", str(deploy)]):
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 2, argv
        assert result.stderr.startswith("Traceback (most recent call last):"), argv
        assert "patchkit: error: lockfile.toml:1: schema: unknown schema version 9" in result.stderr
    quiet = CliRunner().invoke(cli, ["check", "-C", str(deploy)])
    assert quiet.exit_code == 2 and "Traceback" not in quiet.stderr


def test_cache_dir_after_the_command(deploy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--cache-dir, before or after the command, is the cache the core is handed; the environment is left alone."""
    import os

    from patchkit.cli import common

    monkeypatch.delenv("PATCHKIT_CACHE", raising=False)
    cache = tmp_path / "mycache"
    handed: list[Path] = []
    real = common.build_context

    def spy(*args: Any, **kwargs: Any) -> Any:
        made = real(*args, **kwargs)
        handed.append(made.cache_dir)
        return made

    monkeypatch.setattr(common, "build_context", spy)
    for argv in (["check", "--cache-dir", str(cache)], ["--cache-dir", str(cache), "check"]):
        assert CliRunner().invoke(cli, [*argv, "-C", str(deploy)]).exit_code == 0
        assert handed[-1:] == [cache]
    assert "PATCHKIT_CACHE" not in os.environ


def test_the_cache_the_environment_names(tmp_path: Path) -> None:
    """--cache-dir, else PATCHKIT_CACHE, else $XDG_CACHE_HOME/patchkit, else ~/.cache/patchkit: read by the CLI."""
    from patchkit.cli.common import build_context

    env = {"PATCHKIT_CACHE": str(tmp_path / "pk"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert build_context({"cache_dir": tmp_path / "given"}, env).cache_dir == tmp_path / "given"
    assert build_context({}, env).cache_dir == tmp_path / "pk"
    assert build_context({}, {**env, "PATCHKIT_CACHE": ""}).cache_dir == tmp_path / "xdg" / "patchkit"
    assert build_context({}, {}).cache_dir == Path.home() / ".cache" / "patchkit"


def test_quiet_hands_the_core_no_progress(deploy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """-q anywhere, or PATCHKIT_QUIET=1 (click reads it for the option): no bars, and pip's and the Hub's stay off."""
    from patchkit.cli import common
    from patchkit.core.progress import no_progress

    quiet = common.build_context({"quiet": True}, {})
    assert quiet.progress is no_progress and not quiet.shows_progress
    asked: list[bool] = []
    real = common.build_context

    def spy(options: Any, environ: Any) -> Any:
        asked.append(bool(options.get("quiet")))
        return real(options, environ)

    monkeypatch.setattr(common, "build_context", spy)
    runs = [(["-q", "check"], {}), (["check", "--quiet"], {}), (["check"], {"PATCHKIT_QUIET": "1"}), (["check"], {})]
    for argv, env in runs:
        assert CliRunner().invoke(cli, [*argv, "-C", str(deploy)], env=env).exit_code == 0
    assert asked == [True, True, True, False]
