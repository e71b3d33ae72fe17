"""Shipping the deployment: emit the compose files, materialize, bundle and verify-bundle."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from patchkit.cli.common import (
    FORMAT,
    Command,
    blob_store,
    cache_path,
    open_repo,
    print_changes,
)
from patchkit.errors import EXIT_FINDINGS, EXIT_OK


@click.command(cls=Command)
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

    repo, lockf, _ = open_repo(ctx)
    if out is not None and not out.is_absolute():
        out = repo.root / out
    results = run(repo, lockf, blob_store(), cache_path(), out)
    if fmt == "json":
        click.echo(json.dumps([r.__dict__ for r in results], indent=2, sort_keys=True))
    else:
        width = max((len(r.name) for r in results), default=0)
        for r in results:
            click.echo(f"{'ok  ' if r.ok else 'FAIL'} {r.name.ljust(width)}  {r.how}  {r.target}")
        bad = sum(not r.ok for r in results)
        click.echo(f"materialize: {len(results) - bad} ok, {bad} failed" + (f"; written under {out}" if out else ""))
    ctx.exit(EXIT_OK if all(r.ok for r in results) else EXIT_FINDINGS)


@click.command(cls=Command)
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
    from patchkit.emit.files import emit_files

    repo, lockf, _ = open_repo(ctx, writes=not verify)
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
    print_changes(outcome, fmt, "compose files are up to date")


@click.command(cls=Command)
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

    repo, lockf, data = open_repo(ctx)
    to_stdout = str(output) == "-"
    target = None if to_stdout else output_target(output, repo, lockf)
    archive = build_bundle(repo, lockf, data, collect_files_that_run(repo, lockf, blob_store(), cache_path()))
    if target is None:
        sys.stdout.buffer.write(archive)
        sys.stdout.buffer.flush()
    else:
        atomic_write(target, archive)
    shown = "standard output" if to_stdout else str(output)
    click.echo(f"wrote {shown} ({len(archive)} bytes, sha256 {sha256_bytes(archive)})", err=to_stdout)


@click.command(cls=Command, name="verify-bundle")
@click.argument("path", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@FORMAT
def verify_bundle(path: Path, fmt: str) -> None:
    """Unpack a bundle safely and verify its SHA256SUMS and lockfile pins; exit 1 on any problem.

    Refuses absolute paths, '..', links, devices, oversized members and
    duplicates before anything is written.
    """
    from patchkit.bundle import verify_bundle as run
    from patchkit.formats.safe import json_safe

    problems = run(path)
    if fmt == "json":
        click.echo(json.dumps({"ok": not problems, "problems": json_safe(problems)}, indent=2))
    else:
        from patchkit.formats.safe import printable

        for problem in problems:
            click.echo(printable(problem))
        click.echo("verify-bundle: " + ("ok" if not problems else f"FAILED: {len(problems)} problem(s)"))
    sys.exit(EXIT_FINDINGS if problems else EXIT_OK)


# The top-level commands of this family; `patchkit.cli.app` registers them on the root group.
COMMANDS: tuple[click.Command, ...] = (
    materialize,
    emit,
    bundle,
    verify_bundle,
)
