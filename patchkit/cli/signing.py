"""The signing commands: ``keygen``, ``sign``, ``attest`` and ``verify`` (core in patchkit.signing.signatures)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from patchkit.cli.common import FORMAT, Command, find_repo, hold_lock
from patchkit.errors import EXIT_FINDINGS, EXIT_OK, PatchkitError
from patchkit.signing.keys import KEY_ENV, PASSPHRASE_ENV

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from patchkit.lockfile.model import Signing

_NO_SIGNERS_HINT = 'pass --allowed-signers FILE, or add [signing] with allowed_signers = "PATH" (docs/signing.md)'
DEFAULT_FILES = ("SHA256SUMS", "lockfile.toml")
FILES = click.argument("files", nargs=-1, type=click.Path(dir_okay=False, exists=True, path_type=Path))
KEY = click.option(
    "--key",
    "key_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=KEY_ENV,
    required=True,
    help=f"OpenSSH Ed25519 private key (env {KEY_ENV}); passphrase from ${PASSPHRASE_ENV}, else prompted.",
)


def _passphrase(path: Path) -> Callable[[], bytes | None]:
    """The passphrase source: the environment (CI), else a prompt when there is a terminal."""

    def ask() -> bytes | None:
        if (env := os.environ.get(PASSPHRASE_ENV)) is not None:
            return env.encode()
        if sys.stdin.isatty():
            return str(click.prompt(f"Passphrase for {path}", hide_input=True, err=True)).encode()
        return None

    return ask


def load_key(path: Path) -> Ed25519PrivateKey:
    from patchkit.signing.keys import load_private_key

    return load_private_key(path, _passphrase(path))


def _repo_defaults(ctx: click.Context) -> tuple[Path, Signing | None]:
    """The repository root and its [signing] table (or None): where default files come from."""
    repo = find_repo(ctx)
    lock, _ = repo.read_lockfile()
    return repo.root, lock.signing


def _default_files(ctx: click.Context) -> list[Path]:
    root, signing = _repo_defaults(ctx)
    names = [str(f) for f in signing.files] if signing is not None else list(DEFAULT_FILES)
    return [root / n for n in names]


@click.command(cls=Command)
@click.option(
    "-f",
    "--file",
    "path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("~/.ssh/patchkit_ed25519").expanduser(),
    show_default="~/.ssh/patchkit_ed25519",
    help="Private key to write; the public key goes to PATH.pub.",
)
@click.option("--comment", help="Comment of the public key (default: user@host).")
@click.option("--principal", help="Principal of the allowed-signers line printed (default: the comment).")
def keygen(path: Path, comment: str | None, principal: str | None) -> None:
    """Write a new Ed25519 signing key pair (OpenSSH format, private key mode 0600).

    The passphrase comes from $PATCHKIT_KEY_PASSPHRASE, else is prompted when
    there is a terminal (empty: none). Refuses to overwrite an existing key.
    Prints the line to add to the allowed-signers file.
    """
    import getpass
    import socket

    from patchkit.signing.keys import generate

    comment = comment if comment is not None else f"{getpass.getuser()}@{socket.gethostname()}"
    secret = os.environ.get(PASSPHRASE_ENV)
    if secret is None and sys.stdin.isatty():
        secret = click.prompt(
            "Passphrase (empty for none)", default="", hide_input=True, confirmation_prompt=True, err=True
        )
    new = generate(path, comment, secret.encode() if secret else None)
    click.echo(f"wrote {new.private} (private, 0600) and {new.public}")
    click.echo(f"key fingerprint: {new.fingerprint}")
    click.echo("add this line to the allowed-signers file:")
    click.echo(new.allowed_signers_line(principal or comment or "patchkit"))


@click.command(cls=Command)
@FILES
@KEY
@click.pass_context
def sign(ctx: click.Context, files: tuple[Path, ...], key_path: Path) -> None:
    """Sign FILEs (default: the [signing] files, else SHA256SUMS and lockfile.toml) into FILE.sig.

    OpenSSH signatures (SSHSIG, namespace "patchkit", sha512): check one with
    `ssh-keygen -Y verify -f allowed_signers -I ID -n patchkit -s FILE.sig < FILE`.
    """
    from patchkit.signing.signatures import sign_files

    if not files:
        hold_lock(ctx, find_repo(ctx).root)  # the default files and their .sig files are the repository's
    targets = list(files) or _default_files(ctx)
    key = load_key(key_path)
    for written in sign_files(targets, key):
        click.echo(f"wrote {written}")


@click.command(cls=Command)
@click.argument("bundle_path", metavar="BUNDLE", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@KEY
def attest(bundle_path: Path, key_path: Path) -> None:
    """Write BUNDLE.intoto.jsonl: signed provenance of a bundle made by `patchkit bundle`.

    An in-toto Statement v1 whose subjects are the bundle and every file in
    it, with a SLSA provenance v1 predicate naming the bundled lockfile's
    pins (images, model, upstreams), in a DSSE envelope signed with the key.
    """
    from patchkit.signing.signatures import attest_bundle

    key = load_key(key_path)
    click.echo(f"wrote {attest_bundle(bundle_path, key)}")


@click.command(cls=Command)
@FILES
@click.option(
    "--allowed-signers",
    "allowed_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="OpenSSH allowed-signers file (default: signing.allowed_signers of the lockfile).",
)
@click.option("-I", "--identity", help="Principal the signer must be (default: signing.identity; else any).")
@FORMAT
@click.pass_context
def verify(
    ctx: click.Context, files: tuple[Path, ...], allowed_path: Path | None, identity: str | None, fmt: str
) -> None:
    """Verify FILE.sig for each FILE, then what FILE vouches for; exit 1 on any failure.

    \b
    SHA256SUMS:    every hash it lists, relative to its directory;
    lockfile.toml: every file it pins;
    *.tar.gz:      the bundle (safe unpack, sums, pins) and, when present,
                   BUNDLE.intoto.jsonl (DSSE signature, subjects, pins).
    Signatures by patchkit or `ssh-keygen -Y sign -n patchkit` (Ed25519).
    """
    from patchkit.errors import BadInput
    from patchkit.signing.signatures import Outcome, load_signers, verify_files

    targets = list(files) or _default_files(ctx)
    if allowed_path is None:
        try:
            root, signing = _repo_defaults(ctx)
        except PatchkitError as e:
            raise BadInput(f"no --allowed-signers given, and no repository here ({e})", _NO_SIGNERS_HINT) from e
        if signing is None:
            raise BadInput(
                "no --allowed-signers given and lockfile.toml has no [signing] table",
                _NO_SIGNERS_HINT,
            )
        allowed_path = root / str(signing.allowed_signers)
        identity = identity or signing.identity
    results = verify_files(targets, load_signers(allowed_path), identity)
    failed = [r for r in results if r.outcome is Outcome.FAILED]
    from patchkit.formats.signing import verified

    click.echo(verified(results, fmt), nl=False)
    ctx.exit(EXIT_FINDINGS if failed else EXIT_OK)


# The top-level commands of this family; `patchkit.cli.app` registers them on the root group.
COMMANDS: tuple[click.Command, ...] = (
    keygen,
    sign,
    attest,
    verify,
)
