"""Shipping the deployment: emit the compose files, materialize, bundle and verify-bundle."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from patchkit.cli.common import (
    FORMAT,
    Command,
    blob_store,
    open_repo,
    print_changes,
    run_context,
    source_date_epoch,
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
    from patchkit.sources.materialize import materialize as run

    repo, lockf, _ = open_repo(ctx)
    if out is not None and not out.is_absolute():
        out = repo.root / out
    results = run(repo, lockf, blob_store(), run_context(), out)
    from patchkit.formats import ship

    click.echo(ship.materialized(results, out, fmt), nl=False)
    ctx.exit(EXIT_OK if all(r.ok for r in results) else EXIT_FINDINGS)


@click.command(cls=Command)
@click.option("--profile", "profiles", multiple=True, help="Only this profile (default: every profile of deploy.toml).")
@click.option("--check", "verify", is_flag=True, help="Write nothing; exit 1 if a file differs (drift).")
@click.option(
    "--target",
    type=click.Choice(["compose", "kubernetes"]),
    default="compose",
    show_default=True,
    help="compose files, or Kubernetes manifests (kubernetes/PROFILE.yaml, the derived image by digest).",
)
@click.option(
    "--containerfile",
    metavar="PATH",
    help="Instead: write this Containerfile (in the repository) applying the patch series at build time.",
)
@click.option("--image", "image_name", metavar="NAME", help="With --containerfile: the pinned base image.")
@click.option("--series-profile", metavar="P", help="With --containerfile: the series profile to apply.")
@FORMAT
@click.pass_context
def emit(
    ctx: click.Context,
    profiles: tuple[str, ...],
    verify: bool,
    target: str,
    containerfile: str | None,
    image_name: str | None,
    series_profile: str | None,
    fmt: str,
) -> None:
    """Write the compose files (or Kubernetes manifests) from lockfile.toml (pins) and deploy.toml (the service).

    Images by digest, every patch, module, transformer, tuning table and
    artifact mounted read-only at its target with a comment from its reason
    and references, the model at its pinned revision, the entrypoint. Each
    file is validated against the Compose specification schema and the
    security rules (inference service on loopback only, images by digest,
    read-only mounts) before anything is written. Output is byte-stable.

    --target kubernetes writes kubernetes/PROFILE.yaml: a Deployment and a
    Service per replica running the derived image (patchkit image build) by
    digest, and the proxy, validated offline against the schemas of
    [kubernetes] version (with kubernetes-validate installed; otherwise a
    note says they were not validated).
    """
    if containerfile is not None:
        _emit_containerfile(ctx, containerfile, image_name, series_profile)
        return
    if target == "kubernetes":
        from patchkit.emit.kubernetes import emit_files
    else:
        from patchkit.emit.files import emit_files

    repo, lockf, _ = open_repo(ctx, writes=not verify)
    notes: list[str] = []
    outcome, drift = emit_files(repo, lockf, profiles, check_only=verify, notes=notes)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    fix = "patchkit emit" + (" --target kubernetes" if target == "kubernetes" else "")
    if verify:
        for rel in drift:
            click.echo(f"{rel}: differs from what {fix} writes (edited by hand, or the pins moved)")
        click.echo("emit --check: " + ("ok" if not drift else f"FAILED: {len(drift)} file(s) drifted; fix: {fix}"))
        ctx.exit(EXIT_FINDINGS if drift else EXIT_OK)
    print_changes(
        outcome, fmt, ("Kubernetes manifests" if target == "kubernetes" else "compose files") + " are up to date"
    )


def _emit_containerfile(ctx: click.Context, rel: str, image: str | None, profile: str | None) -> None:
    """``emit --containerfile``: the build file and the files it copies, written as one transaction."""
    from patchkit.core.values import RepoPath
    from patchkit.emit.containerfile import emit_containerfile, image_tree
    from patchkit.store.repo import write_all

    repo, lockf, _ = open_repo(ctx, writes=True)
    try:
        RepoPath(rel)
    except ValueError as e:
        from patchkit.errors import BadInput

        raise BadInput(f"--containerfile {rel}: {e}", "name a path inside the repository (the build context)") from e
    out = emit_containerfile(repo, lockf, image, profile, lambda ref: image_tree(ref, run_context()))
    for written in write_all(repo.root, {rel: out.containerfile, **out.files}):
        click.echo(f"wrote {written}")


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
    from patchkit.bundle.archive import build_bundle, collect_files_that_run, parse_epoch
    from patchkit.core.hashing import sha256_bytes
    from patchkit.store.repo import atomic_write, output_target

    repo, lockf, data = open_repo(ctx)
    to_stdout = str(output) == "-"
    target = None if to_stdout else output_target(output, repo, lockf, outside=True)
    files = collect_files_that_run(repo, lockf, blob_store(), run_context())
    archive = build_bundle(
        repo, lockf, data, files, source_date_epoch=parse_epoch(source_date_epoch()), progress=run_context().progress
    )
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
    """Verify a bundle: exactly the bytes `patchkit bundle` writes, its SHA256SUMS and lockfile pins; exit 1 if not.

    Any other archive (pax records, links, devices, sparse files, another
    spelling of a header field, '..' or absolute names, oversized members,
    duplicates) is refused; nothing is written to disk.
    """
    from patchkit.bundle.archive import verify_bundle as run
    from patchkit.formats import ship

    problems = run(path)
    click.echo(ship.bundle_verified(problems, fmt), nl=False)
    sys.exit(EXIT_FINDINGS if problems else EXIT_OK)


@click.command(cls=Command, name="apply")
@click.option(
    "--to", "dest", type=click.Path(file_okay=False, path_type=Path), required=True, help="The tree to patch."
)
@click.option("--series", "series_name", help="The series (default: the only one).")
@click.option("--profile", help="Only the patches this profile selects (default: every patch of the series).")
@FORMAT
@click.pass_context
def apply_command(ctx: click.Context, dest: Path, series_name: str | None, profile: str | None, fmt: str) -> None:
    """Apply a series to a source tree or an installed package's directory, exactly and atomically.

    Every patch of the profile applies in order with exact context (a hunk
    found some lines away is applied there and reported, never fuzzed), in
    memory first: nothing is written unless all apply. Then every file, and
    the record of what was applied (DIR/.patchkit/series/NAME.json), is
    written as one transaction. A file the tree does not carry (tests or
    requirements beside an installed package) is reported and skipped.
    Exit 1 when a patch does not apply, 2 on bad input.
    """
    from patchkit.series.tree import apply_to_dir, find_series, report

    repo, lockf, _ = open_repo(ctx)
    done = apply_to_dir(repo, find_series(lockf.series, series_name), profile, dest)
    from patchkit.formats import ship

    lines, doc = report(done)
    click.echo(ship.applied(lines, doc, fmt), nl=False)


# The top-level commands of this family; `patchkit.cli.app` registers them on the root group.
COMMANDS: tuple[click.Command, ...] = (
    materialize,
    apply_command,
    emit,
    bundle,
    verify_bundle,
)
