"""Upstream sources and moving to a new upstream: ``upstream add/list``, rebase, bump."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cli.common import (
    FORMAT,
    PLATFORM,
    Command,
    SubGroup,
    blob_store,
    find_repo,
    hold_lock,
    open_repo,
    print_changes,
    registry_client,
    run_context,
)
from patchkit.errors import EXIT_FINDINGS, EXIT_OK, BadInput, Refused

if TYPE_CHECKING:
    from patchkit.images.registry import RegistryClient
    from patchkit.lockfile.model import Lockfile, Upstream
    from patchkit.rebase.bumping import BumpTarget
    from patchkit.rebase.overlays import Plan, Started
    from patchkit.store.repo import Repo

    # --latest-clean's choices: the tags, the tag glob, the upstream, --apply, and whether to replay resolutions
    LatestCleanChoice = tuple[tuple[str, ...], str | None, str | None, bool, bool]


@click.group(cls=SubGroup)
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
    from patchkit.edit.upstreams import register

    repo, lockf, _ = open_repo(ctx, writes=True)
    outcome = register(
        repo,
        lockf,
        name,
        run_context(),
        git=git_url,
        commit=commit,
        wheel=wheel,
        directory=directory,
        image=image_ref,
        prefix=prefix,
        platform=platform,
        note=note,
    )
    print_changes(outcome, fmt, "nothing changed")


@upstream.command("list")
@FORMAT
@click.pass_context
def upstream_list(ctx: click.Context, fmt: str) -> None:
    """Show each upstream: its source, its pin and the patches based on it."""
    from patchkit.edit.upstreams import listing

    _, lockf, _ = open_repo(ctx)
    rows = listing(lockf)
    from patchkit.formats import upstreams as report

    click.echo(report.listing(rows, fmt), nl=False)


@upstream.command("find-base")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--upstream", "upstream_name", metavar="NAME", help="The upstream to search (default: the only one).")
@click.option("--tags", metavar="GLOB", help="Git: try every tag matching GLOB (default, with no --candidate: all).")
@click.option(
    "--candidate",
    "wanted",
    multiple=True,
    metavar="REF",
    help="A version to try: a commit or tag (git), a version (wheel), an image reference (image).",
)
@click.option("--path", metavar="P", help="The overlay's upstream path, when its target does not say it.")
@click.option("--record", is_flag=True, help="Pin the exact base found (and its diff) in the lockfile.")
@click.option("--nearest", is_flag=True, help="With --record: pin the nearest candidate too when none is exact.")
@FORMAT
@click.pass_context
def upstream_find_base(
    ctx: click.Context,
    names: tuple[str, ...],
    upstream_name: str | None,
    tags: str | None,
    wanted: tuple[str, ...],
    path: str | None,
    record: bool,
    nearest: bool,
    fmt: str,
) -> None:
    """Find the upstream version each overlay without a known base was copied from.

    Reads the overlay's upstream path at every candidate (git: all in one
    batched cat-file) and ranks them: exact when the file is the base the
    overlay's hand-kept diff rebuilds, else by the lines that differ from
    the overlay. Prints every candidate's evidence; records nothing unless
    --record (exact matches only, nearest ones too with --nearest). Exit 1
    when an overlay has no exact match.
    """
    from patchkit.importing import findbase

    if nearest and not record:
        raise BadInput("--nearest is for --record")
    repo, lockf, _ = open_repo(ctx, writes=record)
    up = _only_upstream(lockf, upstream_name)
    targets = findbase.overlays(lockf, names)
    if not targets:
        raise BadInput("no overlay without a pinned base: name the patches to look for")
    cands, read = findbase.candidates(up, run_context(), repo.root, wanted, tags)
    if not cands:
        raise BadInput(f"no candidate to try in upstream '{up.name}'" + (f" (no tag matches {tags!r})" if tags else ""))
    found = findbase.find(repo, lockf, targets, path, cands, read)
    outcome = None
    if record:
        from patchkit.store.persist import finish

        new_lock, files, outcome = findbase.record(repo, lockf, up, found, nearest)
        if outcome.changes:
            outcome.written = finish(repo, new_lock, files)
    from patchkit.formats import upstreams as report

    click.echo(report.found(up.name, found, outcome, fmt), nl=False)
    ctx.exit(EXIT_OK if all(f.exact for f in found) else EXIT_FINDINGS)


def _only_upstream(lockf: Lockfile, name: str | None) -> Upstream:
    if name is not None:
        up = lockf.upstream(name)
        if up is None:
            raise BadInput(f"--upstream: '{name}' is not in the lockfile")
        return up
    if len(lockf.upstreams) != 1:
        known = ", ".join(u.name for u in lockf.upstreams) or "none"
        raise BadInput(f"say which upstream to search: --upstream NAME (known: {known})")
    return lockf.upstreams[0]


def _nothing_in_progress() -> Refused:
    """--continue or --abort with nothing to go on with: a state the command cannot build on (exit 1), as in git."""
    return Refused("no rebase in progress", "start one with patchkit rebase --onto REV")


@click.command(cls=Command)
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
@click.option("--series", "series_name", metavar="NAME", help="Rebase this patch series (like git am -3) instead.")
@click.option("--continue", "cont", is_flag=True, help="Commit a rebase whose conflicts are resolved.")
@click.option("--abort", is_flag=True, help="Forget the rebase in progress (the repository was never changed).")
@click.option("--drop", multiple=True, metavar="NAME", help="Drop this patch in the bump (e.g. deleted upstream).")
@click.option(
    "--accept-broken",
    multiple=True,
    metavar="NAME",
    help="Commit this broken patch as it is (needs --reason, recorded in the summary).",
)
@click.option("--reason", metavar="TEXT", help="Why the --accept-broken patches are committed all the same.")
@click.option(
    "--no-remembered",
    is_flag=True,
    help="Do not replay recorded resolutions (resolutions/): every conflict waits to be resolved by hand.",
)
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
    series_name: str | None,
    cont: bool,
    abort: bool,
    drop: tuple[str, ...],
    accept_broken: tuple[str, ...],
    reason: str | None,
    no_remembered: bool,
    summary: Path | None,
    fmt: str,
) -> None:
    """Move every overlay of an upstream onto a new pin, three-way, as one transaction.

    For each overlay: base = the old upstream file (from the cache, the
    committed overlay and its diff, or the source at the old pin), ours = the
    patch, theirs = the file at the new pin (renames followed). Outcomes:
    clean, conflict, upstreamed, partially-upstreamed, unchanged, moved,
    deleted, broken; clean merges that touch a function upstream also changed
    are flagged for review.

    Every Python file produced is checked: it parses, leaves no name
    undefined that its inputs did not, and its imports of the upstream's own
    package resolve in the new tree. A file that fails is broken: it waits
    under .patchkit/rebase/broken/ like a conflict, or is committed as it is
    with --accept-broken NAME --reason TEXT.

    With no conflict, patches, diffs, lockfile and SHA256SUMS are updated
    together (exit 0). Otherwise nothing in the repository changes: the
    conflicted files wait under .patchkit/rebase/ with markers (exit 1);
    resolve them and run --continue, or --abort.

    Each conflict resolved at --continue is recorded (resolutions/, commit it);
    the same conflict in a later rebase is resolved as recorded, and said.
    Each conflict, broken merge or hunk now upstream is explained by the
    upstream commits (and PRs) that touched its lines, or a version range.
    """
    from patchkit.cli.series import rebase_series
    from patchkit.rebase import overlays as rb

    accept = _accepts(accept_broken, reason)
    remembered = not no_remembered
    if rebase_series(
        ctx, series_name, onto, cont=cont, abort=abort, fmt=fmt, accept=accept, summary=summary, remembered=remembered
    ):
        return
    if abort:
        repo = find_repo(ctx)
        hold_lock(ctx, repo.root)
        if not rb.abort(repo):
            raise _nothing_in_progress()
        click.echo("rebase aborted; the repository is as it was")
        return
    repo, lockf, data = open_repo(ctx, writes=True)
    if cont and not rb.in_progress(repo):
        raise _nothing_in_progress()
    if summary is not None:
        from patchkit.store.repo import output_target

        output_target(summary, repo, lockf)  # refused before anything is committed
    store = blob_store()
    if cont:
        result, outcome = rb.resume(repo, lockf, data, store, drop, accept=accept, cache=run_context())
        if not result.upstream:
            click.echo("the rebase had already been committed; cleaned up its work area")
            return
        print_changes(outcome, fmt, "nothing changed")
        _write_summary(summary, repo, lockf, result)
        return
    started = rb.start(
        repo,
        lockf,
        data,
        onto=onto,
        upstream=upstream_name,
        source=source,
        cache=run_context(),
        store=store,
        drop=drop,
        accept=accept,
        remembered=remembered,
    )
    _write_summary(summary, repo, lockf, started.plan)
    from patchkit.formats import rebase as report

    if fmt == "json":
        click.echo(json.dumps(report.started_json(started), indent=2, sort_keys=True))
    else:
        click.echo(report.started_text(started), nl=False)  # one write: 2,000 lines for 1,000 patches
    ctx.exit(EXIT_OK if started.outcome is not None else EXIT_FINDINGS)


def _write_summary(summary: Path | None, repo: Repo, lockf: Lockfile, plan: Plan) -> None:
    """With ``--summary``, the rebase's Markdown summary for the pull request, written atomically."""
    if summary is None:
        return
    from patchkit.formats import rebase as report
    from patchkit.signing.certify import review_summary
    from patchkit.store.repo import atomic_write, output_target

    text = report.summary_markdown(plan) + review_summary(repo)
    atomic_write(output_target(summary, repo, lockf), text.encode())


def _accepts(names: tuple[str, ...], reason: str | None) -> dict[str, str]:
    """--accept-broken NAME… with its --reason: name -> reason; either alone is bad usage."""
    if names and not (reason or "").strip():
        raise BadInput("--accept-broken needs --reason TEXT: why the broken file is committed all the same")
    if reason is not None and not names:
        raise BadInput("--reason is for --accept-broken NAME")
    return dict.fromkeys(names, (reason or "").strip())


@click.command(cls=Command)
@click.option(
    "--image",
    "image_ref",
    metavar="REF",
    required=True,
    help="The new image (REPO:TAG or REPO@DIGEST); with --latest-clean, the repository.",
)
@click.option("--upstream", "upstream_name", metavar="NAME", help="The image upstream (default: REF's repository).")
@click.option("--drop", multiple=True, metavar="NAME", help="Drop this patch in the bump (e.g. deleted upstream).")
@click.option("--summary", type=click.Path(dir_okay=False, path_type=Path), help="Write a Markdown summary for the PR.")
@click.option(
    "--latest-clean",
    is_flag=True,
    help="Find the newest tag of the repository onto which every patch moves clean; commits nothing without --apply.",
)
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="With --latest-clean: try only these tags.")
@click.option("--tags", "tag_glob", metavar="GLOB", help="With --latest-clean: only the tags matching GLOB.")
@click.option("--apply", is_flag=True, help="With --latest-clean: bump onto the tag found.")
@click.option(
    "--no-remembered",
    is_flag=True,
    help="Do not replay recorded resolutions (resolutions/): every conflict waits to be resolved by hand.",
)
@FORMAT
@click.pass_context
def bump(
    ctx: click.Context,
    image_ref: str,
    upstream_name: str | None,
    drop: tuple[str, ...],
    summary: Path | None,
    latest_clean: bool,
    tags: tuple[str, ...],
    tag_glob: str | None,
    apply: bool,
    no_remembered: bool,
    fmt: str,
) -> None:
    """Move the deployment to a new image: rebase its overlays onto the image's files, re-pin it.

    Resolves REF, reads the runtime version inside it (vllm/_version.py:
    0.26.1rc1.dev229+g124154a88 -> commit 124154a88), rebases every overlay
    installed in the image (its target is <prefix>/<base path>) onto the
    file at that path in the new image, whichever upstream its base came
    from, and moves every pinned image of that repository to the new digest,
    all in one transaction; the bases then record the new image. Without an
    image upstream in the lockfile, one is derived from [images] and the
    overlays' targets. Conflicts wait for `patchkit rebase --continue`.

    \b
    With --latest-clean, REF is a repository: its tags (or --tag, --tags
    GLOB) are tried newest first, by the image's creation time, and the
    newest onto which every patch moves clean is reported (exit 0; 1 when
    none). Nothing is written unless --apply, which bumps onto it.
    """
    if not latest_clean and (tags or tag_glob or apply):
        raise BadInput("--tag, --tags and --apply are for --latest-clean")
    repo, lockf, data = open_repo(ctx, writes=True)
    if summary is not None:
        from patchkit.store.repo import output_target

        output_target(summary, repo, lockf)  # refused before anything is committed
    with registry_client() as client:
        search = None
        if latest_clean:
            which = (tags, tag_glob, upstream_name, apply, not no_remembered)
            image_ref, search = _latest_clean(ctx, repo, lockf, image_ref, client, which, fmt)
            if not apply:
                return
        from patchkit.rebase.bumping import bump_plan

        target = bump_plan(lockf, image_ref, client, upstream_name)
    _bump_onto(ctx, repo, lockf, data, target, drop, summary, fmt, search, remembered=not no_remembered)


def _latest_clean(
    ctx: click.Context,
    repo: Repo,
    lockf: Lockfile,
    text: str,
    client: RegistryClient,
    which: LatestCleanChoice,
    fmt: str,
) -> tuple[str, dict[str, object]]:
    """--latest-clean: report every tag tried and the newest clean one; its pinned reference, or exit 1.

    With --apply and --format json the report is not printed but returned, for the bump's one document.
    """
    from patchkit.oci.ref import ImageRef
    from patchkit.rebase.bumping import newest_clean

    ref = ImageRef.parse(text)
    if ref.tag not in (None, "latest") or ref.digest is not None:
        raise BadInput(
            f"--image {text}: with --latest-clean, give the repository alone",
            f"--image {ref.display_repository} (name tags with --tag TAG or --tags GLOB)",
        )
    repository = ref.display_repository
    tags, glob, upstream_name, apply, remembered = which
    click.echo(f"trying the tags of {repository}, newest image first (by its creation time):", err=True)
    tried, best = newest_clean(
        repo,
        lockf,
        repository,
        client,
        tags=tags,
        glob=glob,
        upstream=upstream_name,
        cache=run_context(),
        store=blob_store(),
        progress=lambda cand: click.echo(f"  {cand.line()}", err=True),
        remembered=remembered,
    )
    doc: dict[str, object] = {
        "repository": repository,
        "tried": [c.as_dict() for c in tried],
        "newest_clean": best.as_dict() if best is not None else None,
    }
    if fmt == "json":
        if best is not None and apply:
            return f"{repository}@{best.digest}", doc  # one JSON document: the bump's, with this search in it
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    elif best is not None:
        click.echo(f"newest clean: {repository}:{best.tag} ({best.digest}, {best.version or 'version unknown'})")
        click.echo(f"bump onto it: patchkit bump --image {repository}@{best.digest}")
    else:
        click.echo(f"no tag tried is clean ({len(tried)} tried); nothing changed")
    if best is None:
        ctx.exit(EXIT_FINDINGS)
    return (f"{repository}@{best.digest}" if best is not None else text), doc


def _bump_onto(
    ctx: click.Context,
    repo: Repo,
    lockf: Lockfile,
    data: bytes,
    target: BumpTarget,
    drop: tuple[str, ...],
    summary: Path | None,
    fmt: str,
    search: dict[str, object] | None = None,
    remembered: bool = True,
) -> None:
    """The bump itself: rebase, re-pin, summary; the report as text or JSON, exit 0 committed, 1 waiting.

    ``search``: the --latest-clean report that chose the image, part of the JSON document;
    ``remembered``: replay the recorded resolutions (``--no-remembered``: not).
    """
    from patchkit.formats import rebase as report
    from patchkit.rebase import bumping
    from patchkit.sources.image import commit_prefix

    started = bumping.start(
        repo, lockf, data, target, cache=run_context(), store=blob_store(), drop=drop, remembered=remembered
    )
    version = started.plan.new_pin.version
    series = bumping.series_notes(lockf, target.upstream, version)
    adopted = bumping.adopted_notes(lockf, target.upstream)
    if summary is not None:
        from patchkit.signing.certify import review_summary
        from patchkit.store.repo import atomic_write, output_target

        text = report.summary_markdown(started.plan)
        text += "".join(
            f"\n## {title}\n\n" + "".join(f"- {line}\n" for line in lines)
            for title, lines in (("Bases moved onto the image", adopted), ("Series not moved by the bump", series))
            if lines
        )
        text += review_summary(repo)
        atomic_write(output_target(summary, repo, lockf), text.encode())
    for note in [*(started.outcome.notes if started.outcome is not None else ()), *adopted, *series]:
        click.echo(f"note: {note}", err=True)
    up = target.upstream
    if fmt == "json":
        doc = report.result_json(started.plan)
        doc.update(
            committed=started.outcome is not None,
            images=target.pins,
            version=version,
            commit_prefix=commit_prefix(version),
            work_files=started.conflict_files,
            nothing_moved=started.nothing_moved,
            image_upstream={"name": up.name, "prefix": str(up.prefix), "derived": target.derived},
            series_not_moved=series,
            **({"latest_clean": search} if search is not None else {}),
        )
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        _print_bump(started, target, version)
    ctx.exit(EXIT_OK if started.outcome is not None else EXIT_FINDINGS)


def _print_bump(started: Started, target: BumpTarget, version: str | None) -> None:
    """A bump as text: the image upstream when derived, the table, the version, the pins, what waits."""
    from patchkit.formats import rebase as report
    from patchkit.sources.image import commit_prefix

    up = target.upstream
    if target.derived:
        click.echo(f"image upstream {up.name}: the files under {up.prefix} in {up.image} (from [images])")
    click.echo(report.table(started.plan), nl=False)
    if version:
        click.echo(f"runtime version {version} (upstream commit {commit_prefix(version) or 'unknown'})")
    for name, digest in sorted(target.pins.items()):
        click.echo(f"images[{name}] -> {digest}")
    if started.nothing_moved is not None:
        click.echo(f"nothing in the repository changed: {started.nothing_moved}")
    elif started.outcome is None:
        click.echo("nothing in the repository changed; resolve, then: patchkit rebase --continue")
        for rel in started.conflict_files:
            click.echo(f"  resolve {rel}")


# The top-level commands of this family; `patchkit.cli.app` registers them on the root group.
COMMANDS: tuple[click.Command, ...] = (
    upstream,
    rebase,
    bump,
)
