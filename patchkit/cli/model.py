"""``patchkit model``: pin a Hugging Face model revision, fetch it, verify the local cache.

Commands parse arguments, call one function of patchkit.model and render
its result; the Hub is reached through patchkit.net.hub.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cli.common import FORMAT, SubGroup, cache_path, hf_hub, open_repo, print_changes, run_context
from patchkit.cli.common import hf_cache as cache_of
from patchkit.errors import EXIT_FINDINGS, EXIT_OK, BadInput, Refused

if TYPE_CHECKING:
    from patchkit.core.progress import Task
    from patchkit.lockfile.model import Lockfile, Model
    from patchkit.model.verify import VerifyResult
    from patchkit.store.repo import Repo

HF_CACHE = click.option(
    "--hf-cache",
    "hf_cache",
    type=click.Path(file_okay=False, path_type=Path),
    help="The Hugging Face cache (default: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub).",
)
JOBS = click.option("--jobs", "-j", type=click.IntRange(min=1), help="Hashing threads (default: one per usable core).")
FULL = click.option(
    "--full",
    is_flag=True,
    help="Hash every file again, ignoring the verification record.",
)


@click.group(cls=SubGroup)
def model() -> None:
    """Pin the model (Hugging Face revision and file manifest), fetch it, verify the local cache.

    \b
    Environment: HF_ENDPOINT (the Hub, default https://huggingface.co),
    HF_TOKEN (for private or gated models), HF_HUB_OFFLINE (lock and fetch
    refuse; verify works offline), HF_HUB_CACHE / HF_HOME (the cache).
    """


@model.command("lock")
@click.argument("repo_id", metavar="[REPO]", required=False)
@click.option("--revision", metavar="REV", help="Branch, tag or commit to pin (default: the pinned ref, else main).")
@FORMAT
@click.pass_context
def model_lock(ctx: click.Context, repo_id: str | None, revision: str | None, fmt: str) -> None:
    """Pin REPO (org/name; default: the pinned model) at the full commit REV names now.

    Lists every file of that commit recursively with its size and hash (LFS
    sha256, or the git blob id of a small file) and writes the manifest into
    lockfile.toml, or into model/manifest.json (pinned by sha256) past 32
    files, together with SHA256SUMS. The branch itself is never pinned; it
    is recorded as `ref` so that `model verify` can check refs/<ref>.
    """
    from patchkit.model.pin import lock

    repo, lockf, _ = open_repo(ctx, writes=True)
    outcome = lock(repo, lockf, hf_hub(), repo_id, revision)
    print_changes(outcome, fmt, "model pin is up to date")


@model.command("verify")
@HF_CACHE
@JOBS
@FULL
@FORMAT
@click.pass_context
def model_verify(ctx: click.Context, hf_cache: Path | None, jobs: int | None, full: bool, fmt: str) -> None:
    """Verify the local Hugging Face cache against the model pin, offline; exit 1 on any problem.

    \b
    - refs/<ref> (when present) names the pinned commit;
    - snapshots/<commit> exists and holds every manifest file with the
      right size and content (sha256 for LFS files, git blob id for small
      files), and no file the manifest lacks;
    - each snapshot symlink points at the blob named by that hash and
      resolves inside the cache, never outside it.

    Hashing runs on all cores. A verification record (kept in patchkit's
    cache) lets an unchanged cache re-verify in seconds: it trusts that a
    blob whose size, mtime, ctime and inode are unchanged since it last
    verified still has that content. That misses only an in-place rewrite
    that restores all four, or damage below the file system; --full hashes
    everything again.
    """
    repo, lockf, _ = open_repo(ctx)
    result = _verify(repo, lockf, hf_cache, jobs, full)
    _render(result, fmt)
    ctx.exit(EXIT_OK if result.ok else EXIT_FINDINGS)


@model.command("fetch")
@HF_CACHE
@JOBS
@FORMAT
@click.pass_context
def model_fetch(ctx: click.Context, hf_cache: Path | None, jobs: int | None, fmt: str) -> None:
    """Download the pinned revision (at its commit, never the branch) into the cache, then verify it.

    Exit 1 if the downloaded files do not verify against the manifest.
    """
    from patchkit.model.manifest import pinned_files

    repo, lockf, _ = open_repo(ctx)
    pinned = _pinned(lockf)
    pinned_files(repo, pinned)  # refuses before any download when there is nothing to verify against
    # HF_HUB_DISABLE_PROGRESS_BARS, when set, is huggingface_hub's own to decide.
    quiet = not run_context().shows_progress and "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ
    hf_hub().download(pinned.repo, pinned.revision.sha, cache_of(hf_cache), quiet=quiet)
    result = _verify(repo, lockf, hf_cache, jobs, full=True)
    _render(result, fmt)
    ctx.exit(EXIT_OK if result.ok else EXIT_FINDINGS)


def _pinned(lockf: Lockfile) -> Model:
    from patchkit.errors import BadInput

    if lockf.model is None:
        raise BadInput("lockfile.toml pins no model", "pin one: patchkit model lock ORG/NAME [--revision REV]")
    return lockf.model


def _verify(repo: Repo, lockf: Lockfile, hf_cache: Path | None, jobs: int | None, full: bool) -> VerifyResult:
    from patchkit.model.manifest import pinned_files
    from patchkit.model.record import VerifyRecord
    from patchkit.model.verify import verify_cache
    from patchkit.net.hub import repo_folder

    pinned = _pinned(lockf)
    files = pinned_files(repo, pinned)
    cache = cache_of(hf_cache)
    record = VerifyRecord.for_cache(cache_path(), cache, repo_folder(pinned.repo))
    with _progress() as start:
        result = verify_cache(cache, pinned, files, jobs=jobs, start_progress=start, record=None if full else record)
    record.save()
    return result


@contextmanager
def _progress() -> Iterator[Callable[[int], Callable[[int], None]] | None]:
    """A byte bar (rate and time left) for the hashing, started once the total is known; None without progress."""
    if not run_context().shows_progress:
        yield None
        return
    tasks: list[Task] = []

    def start(total: int) -> Callable[[int], None]:
        import threading

        task = run_context().progress("verify", total)
        tasks.append(task)
        lock = threading.Lock()  # the hashing threads all report here

        def update(n: int) -> None:
            with lock:
                task.update(n)

        return update

    try:
        yield start
    finally:
        for task in tasks:
            task.close()


def _render(result: VerifyResult, fmt: str) -> None:
    from patchkit.formats.model import verified

    click.echo(verified(result, fmt), nl=False)


_PEM = click.Path(dir_okay=False, exists=True, path_type=Path)


@model.command("sign")
@click.option("--key", "private_key", type=_PEM, required=True, help="Elliptic-curve private key (PEM).")
@click.option("--certificate", type=_PEM, help="The key's signing certificate (PEM): the certificate method.")
@click.option("--chain", type=_PEM, multiple=True, help="Certificates of its chain (PEM; repeat).")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where the signature goes (default: model.sig at the top of the repository).",
)
@HF_CACHE
@click.pass_context
def model_sign(
    ctx: click.Context,
    private_key: Path,
    certificate: Path | None,
    chain: tuple[Path, ...],
    output: Path | None,
    hf_cache: Path | None,
) -> None:
    """Sign the pinned model revision in the OpenSSF model signing format (what `model_signing verify` checks).

    \b
    First verifies the cached snapshot against the pin (as `model verify`
    does) and refuses when it differs: only the pinned files are signed.
    Then signs that snapshot with the OpenSSF model-signing library: an
    elliptic-curve key (--key), or with --certificate and --chain the
    certificate method. The key's passphrase, if any, comes from
    $PATCHKIT_KEY_PASSPHRASE. Check it with:
      model_signing verify key --allow_symlinks --signature model.sig \\
        --public_key pub.pem ~/.cache/huggingface/hub/models--ORG--NAME/snapshots/REV
    """

    from patchkit.model import signature as oms
    from patchkit.signing.keys import PASSPHRASE_ENV
    from patchkit.store.repo import atomic_write, output_target

    repo, lockf, _ = open_repo(ctx)
    target = output_target(output if output is not None else repo.root / "model.sig", repo, lockf)
    result = _verify(repo, lockf, hf_cache, None, False)
    if not result.ok:
        _render(result, "text")
        raise Refused("the cached model is not the pinned revision: nothing was signed", "patchkit model fetch")
    signer = oms.Signer(private_key, os.environ.get(PASSPHRASE_ENV), certificate, chain)
    atomic_write(target, oms.sign(result.snapshot, signer))
    pinned = _pinned(lockf)
    click.echo(f"signed {result.files} files of {pinned.repo}@{pinned.revision.short} -> {target}", err=True)


@model.command("verify-signature")
@click.argument("signature", type=_PEM)
@click.option("--public-key", type=_PEM, help="The signer's elliptic-curve public key (PEM).")
@click.option("--chain", type=_PEM, multiple=True, help="CA certificates the signing certificate must chain to.")
@HF_CACHE
@FORMAT
@click.pass_context
def model_verify_signature(
    ctx: click.Context,
    signature: Path,
    public_key: Path | None,
    chain: tuple[Path, ...],
    hf_cache: Path | None,
    fmt: str,
) -> None:
    """Verify an OpenSSF model signature (OMS) of the pinned revision, offline; exit 1 when it fails.

    \b
    Two checks, both must pass:
    - the signature lists exactly the pinned files, each LFS file with its
      pinned sha256 (read from SIGNATURE itself, so a signature of another
      revision is refused even before the cache is read);
    - the OpenSSF model-signing library verifies it over the cached
      snapshot of the pinned revision, with --public-key (key method) or
      --chain (certificate method).
    """
    from patchkit.model import signature as oms
    from patchkit.model.manifest import pinned_files
    from patchkit.net.hub import repo_folder

    if (public_key is None) == (not chain):
        raise BadInput("give --public-key PEM (key method) or --chain PEM (certificate method), one of the two")
    repo, lockf, _ = open_repo(ctx)
    pinned = _pinned(lockf)
    problems = oms.against_pin(oms.signed_files(signature.read_bytes(), str(signature)), pinned_files(repo, pinned))
    if problems:
        raise Refused(f"{signature}: not a signature of the pinned revision: {oms.summary(problems)}")
    snapshot = cache_of(hf_cache) / repo_folder(pinned.repo) / "snapshots" / pinned.revision.sha
    if not snapshot.is_dir():
        raise Refused(f"{snapshot}: the pinned revision is not in the cache", "patchkit model fetch")
    oms.verify(snapshot, signature, oms.Verifier(public_key, chain))
    from patchkit.formats.model import signature_verified

    click.echo(signature_verified(signature, snapshot, pinned, fmt), nl=False)


# The top-level commands of this family; `patchkit.cli.app` registers them on the root group.
COMMANDS: tuple[click.Command, ...] = (model,)
